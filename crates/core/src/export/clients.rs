//! Which clients an export admits, as in /etc/exports: single addresses
//! and CIDR networks (IPv4 and IPv6), host names (`build1.example.com`)
//! and wildcards (`*.example.com`, `node?.lab`). Names are matched against
//! the client address's host name (reverse lookup confirmed by a forward
//! one, as rpc.mountd does; see `export::names`), never against what the
//! client says it is.
//!
//! Beyond /etc/exports, an entry can name a client by its TLS certificate
//! (`tls-san:client1.example`, `tls-sha256:AB:12:...`): it matches only a
//! connection whose client presented a certificate that verified against
//! the server's `client_ca` (mTLS), by one of the certificate's subject
//! alternative names or by its fingerprint, from whatever address.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use dionfs_transport::{ClientCertificate, ConnInfo};

/// Who calls, as client lists see it: its address, its confirmed host
/// names, and the certificate it presented over TLS, if it did and it
/// verified.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    pub ip: IpAddr,
    pub names: &'a [String],
    pub certificate: Option<&'a ClientCertificate>,
}

impl<'a> Client<'a> {
    /// The client on the other end of `conn`.
    pub fn of(conn: &'a ConnInfo) -> Client<'a> {
        Client {
            ip: conn.peer.ip(),
            names: conn.names(),
            certificate: conn.certificate(),
        }
    }
}

impl Client<'static> {
    /// A client known by its address alone (no names looked up, no
    /// certificate): only address and network entries can match it.
    pub fn at(ip: IpAddr) -> Client<'static> {
        Client {
            ip,
            names: &[],
            certificate: None,
        }
    }
}

/// One entry of an export's client list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMatch {
    /// An address or a network.
    Net { net: IpAddr, prefix: u8 },
    /// A host name (lower case), or a wildcard pattern (`*` any run of
    /// characters, `?` one), matched against the client's host name.
    Name(String),
    /// A client certificate verified against `client_ca`.
    Certificate(CertificateMatch),
}

/// Which verified client certificates an entry matches. Names are compared
/// exactly (DNS names without regard to case): a certificate is an
/// identity the CA vouched for, not a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateMatch {
    /// One with this DNS name (lower case) among its subject alternative
    /// names (`tls-san:client1.example`).
    DnsName(String),
    /// One with this URI among its subject alternative names
    /// (`tls-san:spiffe://example.org/client1`).
    Uri(String),
    /// The one whose SHA-256 this is (`tls-sha256:`).
    Sha256([u8; 32]),
}

impl CertificateMatch {
    /// Whether `certificate` is one this entry names.
    pub fn matches(&self, certificate: &ClientCertificate) -> bool {
        match self {
            CertificateMatch::DnsName(name) => certificate.dns_names.contains(name),
            CertificateMatch::Uri(uri) => certificate.uris.contains(uri),
            CertificateMatch::Sha256(sha256) => certificate.sha256 == *sha256,
        }
    }
}

impl ClientMatch {
    /// True when `client`'s address lies inside this entry, its confirmed
    /// host names match it, or its verified certificate does.
    /// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a dual-stack
    /// socket reports) match IPv4 entries.
    pub fn matches_client(&self, client: Client<'_>) -> bool {
        match self {
            ClientMatch::Net { net, prefix } => match (*net, normalize(client.ip)) {
                (IpAddr::V4(net), IpAddr::V4(a)) => prefix_eq(&net.octets(), &a.octets(), *prefix),
                (IpAddr::V6(net), IpAddr::V6(a)) => prefix_eq(&net.octets(), &a.octets(), *prefix),
                _ => false,
            },
            ClientMatch::Name(pattern) => client
                .names
                .iter()
                .any(|n| wildcard_match(pattern.as_bytes(), n.to_ascii_lowercase().as_bytes())),
            ClientMatch::Certificate(m) => client.certificate.is_some_and(|c| m.matches(c)),
        }
    }

    /// [`ClientMatch::matches_client`] for a client known by its address
    /// alone: only addresses and networks can match.
    pub fn matches(&self, addr: IpAddr) -> bool {
        self.matches_client(Client::at(addr))
    }

    /// How specific this entry is, for choosing among the entries of one
    /// export that match a client (see [`Precedence`]).
    pub fn precedence(&self) -> Precedence {
        match self {
            ClientMatch::Certificate(_) => Precedence::Certificate,
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

    /// Whether this entry matches client certificates (and only them).
    pub fn is_certificate(&self) -> bool {
        matches!(self, ClientMatch::Certificate(_))
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
/// netgroups, between the last two there, are not supported here), after
/// certificates, which rpc.mountd does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precedence {
    /// A client certificate: one client, and proven rather than taken
    /// from its address, so before an entry for its host.
    Certificate,
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
        if let Some(name) = s.strip_prefix(TLS_SAN) {
            return san(s, name).map(ClientMatch::Certificate);
        }
        if let Some(hex) = s.strip_prefix(TLS_SHA256) {
            return fingerprint(s, hex).map(ClientMatch::Certificate);
        }
        if s.starts_with("tls-") && s.contains(':') {
            return Err(format!(
                "`{s}`: a client certificate is named by `{TLS_SAN}NAME` (a DNS name or URI \
                 among its subject alternative names) or `{TLS_SHA256}FINGERPRINT`"
            ));
        }
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

/// How an entry names a certificate by a subject alternative name, and by
/// its fingerprint.
const TLS_SAN: &str = "tls-san:";
const TLS_SHA256: &str = "tls-sha256:";

/// The certificate entry `entry`, `tls-san:` then `name`: a URI (it has a
/// scheme, so a colon) or a DNS name.
fn san(entry: &str, name: &str) -> Result<CertificateMatch, String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "`{entry}`: after `{TLS_SAN}`, a DNS name or URI of the client's certificate, \
             without spaces"
        ));
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err(format!(
            "`{entry}`: IP address subject alternative names are not matched; name the \
             certificate by a DNS name or URI it carries, or by its fingerprint \
             ({TLS_SHA256})"
        ));
    }
    if name.contains(':') {
        return Ok(CertificateMatch::Uri(name.to_string()));
    }
    if name.contains(['*', '?']) {
        return Err(format!(
            "`{entry}`: certificate names are matched exactly, not as wildcards; name each \
             client, or let the CA decide (xprtsec = [\"mtls\"] with address entries)"
        ));
    }
    let ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !ok {
        return Err(format!("`{entry}`: `{name}` is not a DNS name or a URI"));
    }
    Ok(CertificateMatch::DnsName(name.to_ascii_lowercase()))
}

/// The certificate entry `entry`, `tls-sha256:` then `hex`: 64 hex digits,
/// pairs separated by colons or not, as `openssl x509 -noout -fingerprint
/// -sha256` prints them.
fn fingerprint(entry: &str, hex: &str) -> Result<CertificateMatch, String> {
    let digits: Vec<u8> = hex.bytes().filter(|&b| b != b':').collect();
    let bad = || {
        format!(
            "`{entry}`: not a SHA-256 fingerprint: 64 hex digits (colons between pairs \
             allowed), as `openssl x509 -noout -fingerprint -sha256 -in CERT` prints"
        )
    };
    if digits.len() != 64 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad());
    }
    let mut sha256 = [0u8; 32];
    for (byte, pair) in sha256.iter_mut().zip(digits.chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(CertificateMatch::Sha256(sha256))
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
            ClientMatch::Certificate(CertificateMatch::DnsName(name)) => {
                write!(f, "{TLS_SAN}{name}")
            }
            ClientMatch::Certificate(CertificateMatch::Uri(uri)) => write!(f, "{TLS_SAN}{uri}"),
            ClientMatch::Certificate(CertificateMatch::Sha256(sha256)) => {
                let pairs: Vec<String> = sha256.iter().map(|b| format!("{b:02X}")).collect();
                write!(f, "{TLS_SHA256}{}", pairs.join(":"))
            }
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
        let named = Client {
            ip,
            names: &with,
            certificate: None,
        };
        assert!(m("*.example.com").matches_client(named));
        assert!(m("build1.example.com").matches_client(named));
        assert!(m("build?.example.com").matches_client(named));
        assert!(m("*").matches_client(named));
        assert!(!m("*.example.org").matches_client(named));
        assert!(!m("build12.example.com").matches_client(named));
        assert!(
            !m("*.example.com").matches_client(Client::at(ip)),
            "no name, no match"
        );
        assert!(!m("*.example.com").matches(ip));
        assert!(m("*.example.com").needs_name() && !m("10.0.0.0/8").needs_name());
        assert_eq!(m("Host.Example").to_string(), "host.example");
        assert!(wildcard_match(b"a*b*c", b"axxbyyc"));
        assert!(!wildcard_match(b"a*b*c", b"axxbyy"));
    }

    /// A verified certificate with these names and this SHA-256.
    fn certificate(dns: &[&str], uris: &[&str], sha256: [u8; 32]) -> ClientCertificate {
        ClientCertificate {
            sha256,
            dns_names: dns.iter().map(|s| s.to_string()).collect(),
            uris: uris.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn certificates_by_name_uri_and_fingerprint() {
        let ip = "10.1.2.3".parse().unwrap();
        let mut sha256 = [0u8; 32];
        sha256[0] = 0xab;
        sha256[31] = 0x01;
        let cert = certificate(&["client1.example"], &["spiffe://example.org/c1"], sha256);
        let with = |c| Client {
            ip,
            names: &[],
            certificate: Some(c),
        };
        let hex = format!("ab{}01", "00".repeat(30));
        let colons = format!("AB:{}01", "00:".repeat(30));
        for entry in [
            "tls-san:client1.example",
            "tls-san:Client1.EXAMPLE",
            "tls-san:spiffe://example.org/c1",
            &format!("tls-sha256:{hex}"),
            &format!("tls-sha256:{colons}"),
        ] {
            assert!(m(entry).matches_client(with(&cert)), "{entry}");
            // Never without a certificate, whatever the address.
            assert!(!m(entry).matches_client(Client::at(ip)), "{entry}");
            assert!(m(entry).is_certificate() && !m(entry).needs_name());
            assert_eq!(m(entry).precedence(), Precedence::Certificate);
            // What `exportfs -v` shows reads back as the same entry.
            assert_eq!(m(&m(entry).to_string()), m(entry));
        }
        assert_eq!(
            m(&format!("tls-sha256:{hex}")).to_string(),
            format!("tls-sha256:{colons}")
        );
        // Exact names: no other name, no other case of a URI, no suffix.
        let other = certificate(&["client2.example"], &["spiffe://example.org/C1"], [0; 32]);
        for entry in [
            "tls-san:client1.example",
            "tls-san:spiffe://example.org/c1",
            "tls-san:example",
        ] {
            assert!(!m(entry).matches_client(with(&other)), "{entry}");
        }
        assert!(!m(&format!("tls-sha256:{hex}")).matches_client(with(&other)));
        // Address entries ignore the certificate.
        assert!(m("10.0.0.0/8").matches_client(with(&other)));
    }

    #[test]
    fn bad_certificate_entries_say_what_is_wrong() {
        let e = |s: &str| s.parse::<ClientMatch>().unwrap_err();
        assert!(e("tls-sha256:abcd").contains("64 hex digits"));
        assert!(e(&format!("tls-sha256:{}", "g".repeat(64))).contains("64 hex digits"));
        assert!(e(&format!("tls-sha256:+{}", "0".repeat(63))).contains("64 hex digits"));
        assert!(e("tls-san:").contains("DNS name or URI"));
        assert!(e("tls-san:a b").contains("without spaces"));
        assert!(e("tls-san:10.0.0.1").contains("IP address"));
        assert!(e("tls-san:*.example.com").contains("exactly"));
        assert!(e("tls-san:a/b").contains("not a DNS name"));
        assert!(e("tls-dns:client1").contains("tls-san:"));
        // A host whose name starts so is still a host.
        assert_eq!(
            m("tls-server.example"),
            ClientMatch::Name("tls-server.example".into())
        );
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
        assert!(Precedence::Certificate < Precedence::Host);
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
