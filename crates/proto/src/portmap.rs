//! Portmap version 2 (RFC 1833 section 3): the codecs a client's GETPORT
//! and DUMP need.
//!
//! dionfs is not a general port mapper: it answers for its own programs
//! only. CALLIT (indirect calls) has no codec here: the server answers it
//! with PROC_UNAVAIL, as RFC 1833 allows a port mapper to do.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

/// The portmap program number.
pub const PROGRAM: u32 = 100_000;
/// The portmap version described by RFC 1833 section 3.
pub const VERSION: u32 = 2;
/// The well-known port of the port mapper, TCP and UDP.
pub const PORT: u16 = 111;
/// `Mapping::prot` for TCP.
pub const IPPROTO_TCP: u32 = 6;
/// `Mapping::prot` for UDP.
pub const IPPROTO_UDP: u32 = 17;

/// Most entries accepted when decoding a DUMP reply. The input length bounds
/// the list too (each entry costs 20 bytes); this keeps the `Vec` small anyway.
pub const MAX_DUMP_ENTRIES: u32 = 4096;

/// Procedures of portmap version 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Procedure {
    /// Does nothing; answers with no results.
    Null = 0,
    /// Registers a mapping (args `Mapping`, result bool).
    Set = 1,
    /// Removes the mappings of a program version (args `Mapping`, result bool).
    Unset = 2,
    /// The port of a program version over a protocol (args `Mapping`, result
    /// u32 port, 0 when not registered).
    GetPort = 3,
    /// Every mapping (no args, result [`DumpResult`]).
    Dump = 4,
    /// Indirect call; not supported here.
    CallIt = 5,
}

impl Procedure {
    /// The longest XDR encoding of this procedure's arguments, in bytes: a
    /// [`Mapping`] for SET, UNSET and GETPORT, nothing for NULL and DUMP.
    /// CALLIT's are unbounded by the protocol (it carries another call);
    /// `None` here, as dionfs does not serve it.
    pub const fn max_args_len(self) -> Option<usize> {
        match self {
            Procedure::Null | Procedure::Dump => Some(0),
            Procedure::Set | Procedure::Unset | Procedure::GetPort => Some(MAPPING_LEN),
            Procedure::CallIt => None,
        }
    }

    /// The procedure with this number, if portmap v2 defines it.
    pub fn from_u32(proc_: u32) -> Option<Self> {
        Some(match proc_ {
            0 => Procedure::Null,
            1 => Procedure::Set,
            2 => Procedure::Unset,
            3 => Procedure::GetPort,
            4 => Procedure::Dump,
            5 => Procedure::CallIt,
            _ => return None,
        })
    }
}

/// A program version reachable on a port over a protocol (`struct mapping`).
/// As GETPORT arguments, `port` is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mapping {
    pub prog: u32,
    pub vers: u32,
    /// [`IPPROTO_TCP`] or [`IPPROTO_UDP`].
    pub prot: u32,
    pub port: u32,
}

/// The encoded size of a [`Mapping`].
pub const MAPPING_LEN: usize = 16;

impl Encode for Mapping {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.prog);
        enc.u32(self.vers);
        enc.u32(self.prot);
        enc.u32(self.port);
    }
}

impl Decode<'_> for Mapping {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            prog: dec.u32()?,
            vers: dec.u32()?,
            prot: dec.u32()?,
            port: dec.u32()?,
        })
    }
}

/// Arguments of GETPORT (and SET/UNSET): a mapping.
pub type GetPortArgs = Mapping;

/// The result of DUMP: every mapping, as the `*pmaplist` linked list of
/// RFC 1833 (each entry preceded by TRUE, the list ended by FALSE).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpResult {
    pub mappings: Vec<Mapping>,
}

impl Encode for DumpResult {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(&self.mappings, enc);
    }
}

impl Decode<'_> for DumpResult {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            mappings: decode_list(dec)?,
        })
    }
}

/// A DUMP result's linked list: each entry preceded by TRUE, the list
/// ended by FALSE.
fn encode_list<T: Encode>(entries: &[T], enc: &mut Encoder) {
    for e in entries {
        enc.bool(true);
        e.encode(enc);
    }
    enc.bool(false);
}

/// [`encode_list`]'s list, at most [`MAX_DUMP_ENTRIES`] entries.
fn decode_list<T: for<'a> Decode<'a>>(dec: &mut Decoder<'_>) -> Result<Vec<T>> {
    let mut entries = Vec::new();
    while dec.bool()? {
        if entries.len() >= MAX_DUMP_ENTRIES as usize {
            return Err(XdrError::TooLong {
                len: MAX_DUMP_ENTRIES + 1,
                max: MAX_DUMP_ENTRIES,
            });
        }
        entries.push(T::decode(dec)?);
    }
    Ok(entries)
}

/// rpcbind versions 3 and 4 (RFC 1833 section 2), the same program on the
/// same port: `rpcinfo` and libtirpc clients (`showmount`) ask them first.
pub const RPCBIND_V3: u32 = 3;
/// See [`RPCBIND_V3`].
pub const RPCBIND_V4: u32 = 4;

/// Longest netid, address and owner strings accepted (`rpcb` fields).
pub const RPCB_STRING_MAX: u32 = 255;

/// The longest XDR encoding of an [`Rpcb`]: three u32-length strings of at
/// most [`RPCB_STRING_MAX`] bytes, padded, and two u32s.
pub const RPCB_MAX_LEN: usize = 8 + 3 * (4 + 256);

/// Procedures of rpcbind versions 3 and 4 dionfs answers (the others are
/// PROC_UNAVAIL: CALLIT/BCAST, INDIRECT, the address translations, the
/// list and statistics calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpcbProcedure {
    Null = 0,
    /// Registers (args [`Rpcb`], result bool).
    Set = 1,
    /// Unregisters (args [`Rpcb`], result bool).
    Unset = 2,
    /// The universal address of a program version over a netid (args
    /// [`Rpcb`], result string, empty when not registered).
    GetAddr = 3,
    /// Every registration (no args, result [`RpcbDump`]).
    Dump = 4,
    /// The server's time (no args, result u32 seconds).
    GetTime = 6,
    /// Version 4: GETADDR for exactly that version.
    GetVersAddr = 9,
}

impl RpcbProcedure {
    /// The procedure with this number in `vers` (3 or 4), if answered.
    pub fn from_u32(vers: u32, proc_: u32) -> Option<Self> {
        Some(match proc_ {
            0 => RpcbProcedure::Null,
            1 => RpcbProcedure::Set,
            2 => RpcbProcedure::Unset,
            3 => RpcbProcedure::GetAddr,
            4 => RpcbProcedure::Dump,
            6 => RpcbProcedure::GetTime,
            9 if vers == RPCBIND_V4 => RpcbProcedure::GetVersAddr,
            _ => return None,
        })
    }

    /// The longest XDR encoding of its arguments.
    pub const fn max_args_len(self) -> usize {
        match self {
            RpcbProcedure::Null | RpcbProcedure::Dump | RpcbProcedure::GetTime => 0,
            _ => RPCB_MAX_LEN,
        }
    }
}

/// A registration (`struct rpcb`): program, version, network id ("tcp",
/// "udp", "tcp6", ...), universal address ("h1.h2.h3.h4.p1.p2") and owner.
///
/// The strings are kept as the bytes sent, like every XDR string here: a
/// conversion to `String` would have to change what is not UTF-8, and the
/// changed value could re-encode longer than [`RPCB_STRING_MAX`] (three
/// bytes per replaced byte), into something this decoder refuses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rpcb {
    pub prog: u32,
    pub vers: u32,
    pub netid: Vec<u8>,
    pub addr: Vec<u8>,
    pub owner: Vec<u8>,
}

impl Encode for Rpcb {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.prog);
        enc.u32(self.vers);
        enc.string(&self.netid);
        enc.string(&self.addr);
        enc.string(&self.owner);
    }
}

impl Decode<'_> for Rpcb {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            prog: dec.u32()?,
            vers: dec.u32()?,
            netid: dec.string(RPCB_STRING_MAX)?.to_vec(),
            addr: dec.string(RPCB_STRING_MAX)?.to_vec(),
            owner: dec.string(RPCB_STRING_MAX)?.to_vec(),
        })
    }
}

/// The result of rpcbind DUMP: every registration, as a linked list (each
/// entry preceded by TRUE, the list ended by FALSE).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RpcbDump {
    pub entries: Vec<Rpcb>,
}

impl Encode for RpcbDump {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(&self.entries, enc);
    }
}

impl Decode<'_> for RpcbDump {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            entries: decode_list(dec)?,
        })
    }
}

/// The universal address of `ip` port `port` (RFC 1833 section 2.2:
/// "h1.h2.h3.h4.p1.p2" for IPv4, the textual IPv6 address then ".p1.p2").
pub fn universal_addr(ip: std::net::IpAddr, port: u16) -> String {
    format!("{ip}.{}.{}", port >> 8, port & 0xff)
}

/// The socket address a universal address names, for netid `tcp` (IPv4)
/// or `tcp6` (IPv6): the inverse of [`universal_addr`]. None for another
/// netid, or an address that does not parse.
pub fn parse_universal_addr(netid: &str, addr: &str) -> Option<std::net::SocketAddr> {
    let (rest, low) = addr.rsplit_once('.')?;
    let (host, high) = rest.rsplit_once('.')?;
    let port = (high.parse::<u8>().ok()?, low.parse::<u8>().ok()?);
    let ip: std::net::IpAddr = match netid {
        "tcp" => host.parse::<std::net::Ipv4Addr>().ok()?.into(),
        "tcp6" => host.parse::<std::net::Ipv6Addr>().ok()?.into(),
        _ => return None,
    };
    Some(std::net::SocketAddr::new(
        ip,
        u16::from(port.0) << 8 | u16::from(port.1),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn universal_addresses_parse_back() {
        for (ip, port) in [
            ("192.0.2.7".parse().unwrap(), 2049),
            ("::1".parse().unwrap(), 40_001),
            ("fe80::1:2".parse().unwrap(), 0),
        ] {
            let netid = if matches!(ip, std::net::IpAddr::V4(_)) {
                "tcp"
            } else {
                "tcp6"
            };
            let addr = universal_addr(ip, port);
            assert_eq!(
                parse_universal_addr(netid, &addr),
                Some(std::net::SocketAddr::new(ip, port))
            );
        }
        for (netid, addr) in [
            ("tcp", "192.0.2.7.8"),
            ("tcp", "192.0.2.7.8.256"),
            ("tcp", "::1.8.1"),
            ("tcp6", "192.0.2.7.8.1"),
            ("udp", "192.0.2.7.8.1"),
            ("tcp", ""),
        ] {
            assert_eq!(parse_universal_addr(netid, addr), None, "{netid} {addr}");
        }
    }

    #[test]
    fn args_limits_fit_a_mapping() {
        let m = Mapping {
            prog: 1,
            vers: 2,
            prot: 3,
            port: 4,
        };
        assert_eq!(Some(m.to_xdr().len()), Procedure::GetPort.max_args_len());
        assert_eq!(Procedure::Set.max_args_len(), Some(MAPPING_LEN));
        assert_eq!(Procedure::Null.max_args_len(), Some(0));
        assert_eq!(Procedure::Dump.max_args_len(), Some(0));
        assert_eq!(Procedure::CallIt.max_args_len(), None);
    }

    #[test]
    fn rpcb_round_trips_is_bounded_and_never_panics() {
        let r = Rpcb {
            prog: 100_003,
            vers: 3,
            netid: b"tcp".to_vec(),
            addr: universal_addr("127.0.0.1".parse().unwrap(), 2049).into_bytes(),
            owner: b"superuser".to_vec(),
        };
        assert_eq!(r.addr, b"127.0.0.1.8.1");
        let bytes = r.to_xdr();
        assert_eq!(Rpcb::from_xdr(&bytes).unwrap(), r);
        for cut in 0..bytes.len() {
            assert!(Rpcb::from_xdr(&bytes[..cut]).is_err(), "prefix {cut}");
        }
        let longest = Rpcb {
            netid: vec![b'n'; 255],
            addr: vec![b'a'; 255],
            owner: vec![b'o'; 255],
            ..r.clone()
        };
        assert!(longest.to_xdr().len() <= RPCB_MAX_LEN);
        let too_long = Rpcb {
            netid: vec![b'n'; 256],
            ..r.clone()
        };
        assert!(Rpcb::from_xdr(&too_long.to_xdr()).is_err());
        let dump = RpcbDump {
            entries: vec![r.clone(), r],
        };
        assert_eq!(RpcbDump::from_xdr(&dump.to_xdr()).unwrap(), dump);
        let junk: Vec<u8> = (0..500u32).map(|i| (i * 131 % 256) as u8).collect();
        let _ = RpcbDump::from_xdr(&junk);
        assert_eq!(RpcbProcedure::from_u32(3, 9), None);
        assert_eq!(
            RpcbProcedure::from_u32(4, 9),
            Some(RpcbProcedure::GetVersAddr)
        );
        assert_eq!(universal_addr("::1".parse().unwrap(), 111), "::1.0.111");
    }

    #[test]
    fn rpcb_strings_that_are_not_utf8_round_trip_unchanged() {
        // Found by fuzzing: decoded into `String`s with U+FFFD for each
        // bad byte, 255 such bytes re-encoded as 765, over the limit.
        let r = Rpcb {
            prog: 100_003,
            vers: 3,
            netid: vec![0xff; 255],
            addr: b"\xc3(".to_vec(),
            owner: Vec::new(),
        };
        let bytes = r.to_xdr();
        assert!(bytes.len() <= RPCB_MAX_LEN);
        assert_eq!(Rpcb::from_xdr(&bytes).unwrap(), r);
        assert_eq!(Rpcb::from_xdr(&bytes).unwrap().to_xdr(), bytes);
    }

    #[test]
    fn mapping_layout_and_round_trip() {
        let m = Mapping {
            prog: 100_003,
            vers: 3,
            prot: IPPROTO_TCP,
            port: 2049,
        };
        assert_eq!(m.to_xdr(), words(&[100_003, 3, 6, 2049]));
        assert_eq!(m.to_xdr().len(), MAPPING_LEN);
        assert_eq!(Mapping::from_xdr(&m.to_xdr()).unwrap(), m);
    }

    #[test]
    fn dump_is_a_linked_list() {
        let dump = DumpResult {
            mappings: vec![
                Mapping {
                    prog: PROGRAM,
                    vers: VERSION,
                    prot: IPPROTO_TCP,
                    port: 111,
                },
                Mapping {
                    prog: 100_005,
                    vers: 3,
                    prot: IPPROTO_TCP,
                    port: 20048,
                },
            ],
        };
        assert_eq!(
            dump.to_xdr(),
            words(&[1, 100_000, 2, 6, 111, 1, 100_005, 3, 6, 20048, 0])
        );
        assert_eq!(DumpResult::from_xdr(&dump.to_xdr()).unwrap(), dump);
        assert_eq!(DumpResult::default().to_xdr(), words(&[0]));
        assert_eq!(
            DumpResult::from_xdr(&words(&[0])).unwrap(),
            DumpResult::default()
        );
    }

    #[test]
    fn malformed_input_is_a_typed_error() {
        assert!(matches!(
            Mapping::from_xdr(&words(&[1, 2, 3])),
            Err(XdrError::Truncated { .. })
        ));
        assert!(matches!(
            Mapping::from_xdr(&words(&[1, 2, 3, 4, 5])),
            Err(XdrError::Trailing(4))
        ));
        // A list without its terminating FALSE.
        assert!(matches!(
            DumpResult::from_xdr(&words(&[1, 1, 2, 6, 7])),
            Err(XdrError::Truncated { .. })
        ));
        assert_eq!(
            DumpResult::from_xdr(&words(&[2])),
            Err(XdrError::BadBool(2))
        );
        let mut long = Vec::new();
        for _ in 0..=MAX_DUMP_ENTRIES {
            long.extend(words(&[1, 1, 2, 6, 7]));
        }
        long.extend(words(&[0]));
        assert!(matches!(
            DumpResult::from_xdr(&long),
            Err(XdrError::TooLong { .. })
        ));
    }

    #[test]
    fn procedures_by_number() {
        assert_eq!(Procedure::from_u32(3), Some(Procedure::GetPort));
        assert_eq!(Procedure::from_u32(5), Some(Procedure::CallIt));
        assert_eq!(Procedure::from_u32(6), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Mapping::from_xdr(&bytes);
            let _ = DumpResult::from_xdr(&bytes);
        }
    }
}
