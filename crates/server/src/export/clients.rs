//! Which client addresses an export admits: single addresses and CIDR
//! networks, IPv4 and IPv6, as in /etc/exports.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One entry of an export's client list: an address or a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientMatch {
    net: IpAddr,
    prefix: u8,
}

impl ClientMatch {
    /// True when `addr` lies inside this entry. IPv4-mapped IPv6 addresses
    /// (`::ffff:a.b.c.d`, what a dual-stack socket reports) match IPv4 entries.
    pub fn matches(&self, addr: IpAddr) -> bool {
        match (self.net, normalize(addr)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => prefix_eq(&net.octets(), &a.octets(), self.prefix),
            (IpAddr::V6(net), IpAddr::V6(a)) => prefix_eq(&net.octets(), &a.octets(), self.prefix),
            _ => false,
        }
    }

    /// The loopback networks: what `dionfs serve DIR` admits without `--allow`.
    pub fn loopback() -> Vec<ClientMatch> {
        vec![
            ClientMatch {
                net: IpAddr::from([127, 0, 0, 0]),
                prefix: 8,
            },
            ClientMatch {
                net: IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
                prefix: 128,
            },
        ]
    }
}

fn normalize(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Compares the first `prefix` bits of two equally long byte strings.
fn prefix_eq(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    let rest = prefix % 8;
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

impl FromStr for ClientMatch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{s}` is not an IP address or CIDR network"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("`{s}`: prefix length must be 0..={max}")),
            },
        };
        Ok(ClientMatch {
            net: normalize(net),
            prefix: if normalize(net).is_ipv4() && net.is_ipv6() {
                prefix.saturating_sub(96)
            } else {
                prefix
            },
        })
    }
}

impl fmt::Display for ClientMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> ClientMatch {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_and_networks() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(m("10.1.2.3").matches(ip("10.1.2.3")));
        assert!(!m("10.1.2.3").matches(ip("10.1.2.4")));
        assert!(m("10.0.0.0/8").matches(ip("10.200.1.1")));
        assert!(!m("10.0.0.0/8").matches(ip("11.0.0.1")));
        assert!(m("192.168.77.0/23").matches(ip("192.168.76.9")));
        assert!(!m("192.168.77.0/23").matches(ip("192.168.78.1")));
        assert!(m("0.0.0.0/0").matches(ip("8.8.8.8")));
        assert!(m("fd00::/8").matches(ip("fd12::1")));
        assert!(m("127.0.0.1").matches(ip("::ffff:127.0.0.1")));
        assert!(!m("::1").matches(ip("127.0.0.1")));
    }

    #[test]
    fn bad_entries_are_errors() {
        assert!("10.0.0.0/33".parse::<ClientMatch>().is_err());
        assert!("host.example".parse::<ClientMatch>().is_err());
        assert!("10.0.0.0/x".parse::<ClientMatch>().is_err());
        assert!("".parse::<ClientMatch>().is_err());
    }

    #[test]
    fn loopback_admits_only_loopback() {
        let lo = ClientMatch::loopback();
        let ok = |s: &str| lo.iter().any(|c| c.matches(s.parse().unwrap()));
        assert!(ok("127.0.0.1"));
        assert!(ok("127.0.0.2"));
        assert!(ok("::1"));
        assert!(!ok("192.168.77.2"));
    }
}
