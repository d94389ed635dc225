//! Which clients an export admits, as in /etc/exports: single addresses
//! and CIDR networks (IPv4 and IPv6), host names (`build1.example.com`)
//! and wildcards (`*.example.com`, `node?.lab`). Names are matched against
//! the client address's host name (reverse lookup confirmed by a forward
//! one, as rpc.mountd does; see `export::names`), never against what the
//! client says it is.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One entry of an export's client list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMatch {
    /// An address or a network.
    Net { net: IpAddr, prefix: u8 },
    /// A host name (lower case), or a wildcard pattern (`*` any run of
    /// characters, `?` one), matched against the client's host name.
    Name(String),
}

impl ClientMatch {
    /// True when `addr` lies inside this entry, or `names` (the client's
    /// confirmed host names) match it. IPv4-mapped IPv6 addresses
    /// (`::ffff:a.b.c.d`, what a dual-stack socket reports) match IPv4
    /// entries.
    pub fn matches_client(&self, addr: IpAddr, names: &[String]) -> bool {
        match self {
            ClientMatch::Net { net, prefix } => match (*net, normalize(addr)) {
                (IpAddr::V4(net), IpAddr::V4(a)) => prefix_eq(&net.octets(), &a.octets(), *prefix),
                (IpAddr::V6(net), IpAddr::V6(a)) => prefix_eq(&net.octets(), &a.octets(), *prefix),
                _ => false,
            },
            ClientMatch::Name(pattern) => names
                .iter()
                .any(|n| wildcard_match(pattern.as_bytes(), n.to_ascii_lowercase().as_bytes())),
        }
    }

    /// [`ClientMatch::matches_client`] for a client whose names are not
    /// known: only addresses and networks can match.
    pub fn matches(&self, addr: IpAddr) -> bool {
        self.matches_client(addr, &[])
    }

    /// How specific this entry is, for choosing among the entries of one
    /// export that match a client (see [`Precedence`]).
    pub fn precedence(&self) -> Precedence {
        match self {
            ClientMatch::Net { prefix: 0, .. } => Precedence::Everyone,
            ClientMatch::Net { net, prefix } => {
                let host = if net.is_ipv4() { 32 } else { 128 };
                if *prefix == host {
                    Precedence::Host
                } else {
                    Precedence::Network
                }
            }
            ClientMatch::Name(p) if p.bytes().all(|b| b == b'*') => Precedence::Everyone,
            ClientMatch::Name(p) if p.contains(['*', '?']) => Precedence::Wildcard,
            ClientMatch::Name(_) => Precedence::Host,
        }
    }

    /// Whether this entry needs the client's host name.
    pub fn needs_name(&self) -> bool {
        matches!(self, ClientMatch::Name(_))
    }

    /// The loopback networks: what `dionfs serve DIR` admits without `--allow`.
    pub fn loopback() -> Vec<ClientMatch> {
        vec![
            ClientMatch::Net {
                net: IpAddr::from([127, 0, 0, 0]),
                prefix: 8,
            },
            ClientMatch::Net {
                net: IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
                prefix: 128,
            },
        ]
    }
}

/// The kinds of client entries, most specific first: the order in which
/// rpc.mountd tries an export's entries for a client (nfs-utils' client
/// types `MCL_FQDN`, `MCL_SUBNETWORK`, `MCL_WILDCARD`, `MCL_ANONYMOUS`;
/// netgroups, between the last two there, are not supported here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precedence {
    /// One host: a host name, or one address (`10.0.0.1`, `10.0.0.1/32`).
    Host,
    /// A network (`10.0.0.0/8`).
    Network,
    /// A wildcard on host names (`*.example.com`, `node?.lab`).
    Wildcard,
    /// Everyone: `*`, `0.0.0.0/0`, `::/0`.
    Everyone,
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
        let Ok(net) = addr.parse::<IpAddr>() else {
            return name_pattern(s);
        };
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("`{s}`: prefix length must be 0..={max}")),
            },
        };
        Ok(ClientMatch::Net {
            net: normalize(net),
            prefix: if normalize(net).is_ipv4() && net.is_ipv6() {
                prefix.saturating_sub(96)
            } else {
                prefix
            },
        })
    }
}

/// A host name or wildcard entry, checked: letters, digits, `-`, `.`,
/// `*`, `?`; `@netgroup` is refused with its own reason.
fn name_pattern(s: &str) -> Result<ClientMatch, String> {
    if s.starts_with('@') {
        return Err(format!(
            "`{s}`: netgroups are not supported; list the hosts or networks"
        ));
    }
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'*' | b'?'))
        && s.bytes()
            .any(|b| b.is_ascii_alphanumeric() || b == b'*' || b == b'?');
    // Digits and dots only is a mistyped address, never a host name (no
    // top-level domain is numeric).
    let numeric = s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if numeric {
        return Err(format!("`{s}` is not an IP address"));
    }
    if !ok || s.contains('/') {
        return Err(format!(
            "`{s}` is not an IP address, CIDR network, host name or wildcard"
        ));
    }
    Ok(ClientMatch::Name(s.to_ascii_lowercase()))
}

/// Shell-style match of `name` against `pattern` (`*`, `?`), as
/// exports(5) wildcards.
fn wildcard_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some(p);
                mark = n;
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some(s) => {
                    p = s + 1;
                    mark += 1;
                    n = mark;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl fmt::Display for ClientMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientMatch::Net { net, prefix } => write!(f, "{net}/{prefix}"),
            ClientMatch::Name(name) => write!(f, "{name}"),
        }
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
    fn names_and_wildcards() {
        let ip = "10.1.2.3".parse().unwrap();
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let with = names(&["build1.Example.COM"]);
        assert!(m("*.example.com").matches_client(ip, &with));
        assert!(m("build1.example.com").matches_client(ip, &with));
        assert!(m("build?.example.com").matches_client(ip, &with));
        assert!(m("*").matches_client(ip, &with));
        assert!(!m("*.example.org").matches_client(ip, &with));
        assert!(!m("build12.example.com").matches_client(ip, &with));
        assert!(
            !m("*.example.com").matches_client(ip, &[]),
            "no name, no match"
        );
        assert!(!m("*.example.com").matches(ip));
        assert!(m("*.example.com").needs_name() && !m("10.0.0.0/8").needs_name());
        assert_eq!(m("Host.Example").to_string(), "host.example");
        assert!(wildcard_match(b"a*b*c", b"axxbyyc"));
        assert!(!wildcard_match(b"a*b*c", b"axxbyy"));
    }

    #[test]
    fn precedence_is_host_then_network_then_wildcard_then_everyone() {
        assert_eq!(m("10.0.0.1").precedence(), Precedence::Host);
        assert_eq!(m("10.0.0.1/32").precedence(), Precedence::Host);
        assert_eq!(m("::1").precedence(), Precedence::Host);
        assert_eq!(m("::ffff:10.0.0.1").precedence(), Precedence::Host);
        assert_eq!(m("build1.example.com").precedence(), Precedence::Host);
        assert_eq!(m("10.0.0.0/8").precedence(), Precedence::Network);
        assert_eq!(m("fd00::/8").precedence(), Precedence::Network);
        assert_eq!(m("*.example.com").precedence(), Precedence::Wildcard);
        assert_eq!(m("node?").precedence(), Precedence::Wildcard);
        assert_eq!(m("*").precedence(), Precedence::Everyone);
        assert_eq!(m("0.0.0.0/0").precedence(), Precedence::Everyone);
        assert_eq!(m("::/0").precedence(), Precedence::Everyone);
        assert!(Precedence::Host < Precedence::Network);
        assert!(Precedence::Network < Precedence::Wildcard);
        assert!(Precedence::Wildcard < Precedence::Everyone);
    }

    #[test]
    fn bad_entries_are_errors() {
        assert!("10.0.0.0/33".parse::<ClientMatch>().is_err());
        assert!("@trusted"
            .parse::<ClientMatch>()
            .unwrap_err()
            .contains("netgroups"));
        assert!("host name".parse::<ClientMatch>().is_err());
        assert!("...".parse::<ClientMatch>().is_err());
        assert!("300.1.2.3".parse::<ClientMatch>().is_err());
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
