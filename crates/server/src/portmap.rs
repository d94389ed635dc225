//! Portmap version 2 and rpcbind versions 3 and 4 (RFC 1833) for the
//! clients that ask: `mount.nfs` asks the port mapper where MOUNT and NFS
//! listen before it connects; `rpcinfo` and libtirpc clients such as
//! `showmount` ask rpcbind v4/v3 (GETADDR, DUMP) first.
//!
//! dionfs is not a general port mapper: it answers GETPORT, GETADDR and
//! DUMP from a fixed table of its own programs and refuses registrations
//! (SET and UNSET answer FALSE). Every call is answered at once from
//! [`Service::receive`]; nothing is ever spawned. Where the host runs
//! rpcbind, dionfs registers with it instead (`rpcbind.rs`).

use std::convert::Infallible;
use std::sync::Arc;

use dionfs_core::export::NfsVersions;
use dionfs_proto::mount3::MOUNT_PROGRAM;
use dionfs_proto::nfs3::NFS_PROGRAM;
use dionfs_proto::portmap::{
    universal_addr, DumpResult, Mapping, Procedure as PmapProc, Rpcb, RpcbDump, RpcbProcedure,
    IPPROTO_TCP, IPPROTO_UDP, PROGRAM, RPCBIND_V3, RPCBIND_V4, VERSION,
};
use dionfs_rpc::{reply, CallHeader, RecordError, RecordReader, ReplyStatus};
use dionfs_xdr::{Decode, Encode, Encoder};
use tokio::io::AsyncRead;

use dionfs_transport::{read_args, ConnInfo, Place, Received, Reply, Service};

use crate::callstats::CallStats;
use crate::program::{self, Procedure, Program};

/// The mappings the port mapper reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortmapTable {
    pub entries: Vec<Mapping>,
}

impl PortmapTable {
    /// The table of a dionfs server: the port mapper itself on
    /// `portmap_port` (over TCP, and UDP if `udp`), then `programs`.
    pub fn dionfs(portmap_port: u16, udp: bool, programs: Vec<Mapping>) -> Self {
        let mut entries = Vec::new();
        for prot in [IPPROTO_TCP, IPPROTO_UDP] {
            if prot == IPPROTO_UDP && !udp {
                continue;
            }
            for vers in [RPCBIND_V4, RPCBIND_V3, VERSION] {
                entries.push(Mapping {
                    prog: PROGRAM,
                    vers,
                    prot,
                    port: u32::from(portmap_port),
                });
            }
        }
        entries.extend(programs);
        Self { entries }
    }

    /// The programs a dionfs server serves besides the port mapper (what
    /// it registers with the host's rpcbind), all over TCP: MOUNT v3, and
    /// NFS v3 and v4 as `versions` serves them (v4 needs no portmapper,
    /// but `rpcinfo -p` should still show it, as it does for knfsd).
    pub fn programs(nfs_port: u16, mount_port: u16, versions: NfsVersions) -> Vec<Mapping> {
        let tcp = |prog, vers, port: u16| Mapping {
            prog,
            vers,
            prot: IPPROTO_TCP,
            port: u32::from(port),
        };
        let mut programs = vec![tcp(MOUNT_PROGRAM, 3, mount_port)];
        if versions.v3 {
            programs.push(tcp(NFS_PROGRAM, 3, nfs_port));
        }
        if versions.v4() {
            programs.push(tcp(NFS_PROGRAM, 4, nfs_port));
        }
        programs
    }

    /// The table as rpcbind registrations, with universal addresses on
    /// `ip` (the address the client reached us on).
    pub fn rpcb_entries(&self, ip: std::net::IpAddr) -> Vec<Rpcb> {
        self.entries
            .iter()
            .map(|m| Rpcb {
                prog: m.prog,
                vers: m.vers,
                netid: netid(m.prot, ip).as_bytes().to_vec(),
                addr: universal_addr(ip, m.port as u16).into_bytes(),
                owner: b"superuser".to_vec(),
            })
            .collect()
    }

    /// The port of `prog` version `vers` over `prot`, or 0 when it is not
    /// registered (RFC 1833 section 3.2, PMAPPROC_GETPORT).
    pub fn port_of(&self, prog: u32, vers: u32, prot: u32) -> u32 {
        self.entries
            .iter()
            .find(|m| m.prog == prog && m.vers == vers && m.prot == prot)
            .map_or(0, |m| m.port)
    }
}

/// The rpcbind netid of protocol `prot` over `ip`'s family.
pub(crate) fn netid(prot: u32, ip: std::net::IpAddr) -> &'static str {
    match (prot == IPPROTO_UDP, ip.is_ipv6()) {
        (false, false) => "tcp",
        (false, true) => "tcp6",
        (true, false) => "udp",
        (true, true) => "udp6",
    }
}

/// Portmap version 2 and rpcbind 3/4 served from a [`PortmapTable`].
#[derive(Clone)]
pub struct PortmapService {
    table: PortmapTable,
    /// Per-procedure call counts and service times.
    calls: Arc<CallStats>,
}

impl PortmapService {
    pub fn new(table: PortmapTable, calls: Arc<CallStats>) -> Self {
        Self { table, calls }
    }
}

/// How a port-mapper procedure runs: answered at once, from the table, as
/// the call is received: the service, the connection, the xid, the
/// encoded arguments.
pub type Handler = fn(&PortmapService, &ConnInfo, u32, &[u8]) -> Reply;

/// Portmap version 2 (RFC 1833 section 3).
pub static PORTMAP_V2: Program<Handler> = Program {
    label: "portmap2",
    title: "PORTMAP v2",
    number: PROGRAM,
    version: VERSION,
    procedures: &PORTMAP_V2_PROCEDURES,
};

static PORTMAP_V2_PROCEDURES: [Option<Procedure<Handler>>; 6] = [
    portmap(PmapProc::Null, "NULL", null),
    portmap(PmapProc::Set, "SET", refuse_mapping),
    portmap(PmapProc::Unset, "UNSET", refuse_mapping),
    portmap(PmapProc::GetPort, "GETPORT", getport),
    portmap(PmapProc::Dump, "DUMP", dump),
    // CALLIT carries another program's call, so its arguments have no
    // bound; it is not served (see the module documentation).
    None,
];

/// rpcbind version 3 (RFC 1833 section 2): the procedures answered.
pub static RPCBIND_V3_PROGRAM: Program<Handler> = Program {
    label: "rpcbind3",
    title: "RPCBIND v3",
    number: PROGRAM,
    version: RPCBIND_V3,
    procedures: &RPCBIND_V3_PROCEDURES,
};

static RPCBIND_V3_PROCEDURES: [Option<Procedure<Handler>>; 7] = [
    rpcbind(RpcbProcedure::Null, "NULL", null),
    rpcbind(RpcbProcedure::Set, "SET", refuse_rpcb),
    rpcbind(RpcbProcedure::Unset, "UNSET", refuse_rpcb),
    rpcbind(RpcbProcedure::GetAddr, "GETADDR", getaddr),
    rpcbind(RpcbProcedure::Dump, "DUMP", rpcb_dump),
    None, // CALLIT
    rpcbind(RpcbProcedure::GetTime, "GETTIME", gettime),
];

/// rpcbind version 4: version 3's, and GETVERSADDR.
pub static RPCBIND_V4_PROGRAM: Program<Handler> = Program {
    label: "rpcbind4",
    title: "RPCBIND v4",
    number: PROGRAM,
    version: RPCBIND_V4,
    procedures: &RPCBIND_V4_PROCEDURES,
};

static RPCBIND_V4_PROCEDURES: [Option<Procedure<Handler>>; 10] = [
    rpcbind(RpcbProcedure::Null, "NULL", null),
    rpcbind(RpcbProcedure::Set, "SET", refuse_rpcb),
    rpcbind(RpcbProcedure::Unset, "UNSET", refuse_rpcb),
    rpcbind(RpcbProcedure::GetAddr, "GETADDR", getaddr),
    rpcbind(RpcbProcedure::Dump, "DUMP", rpcb_dump),
    None, // BCAST
    rpcbind(RpcbProcedure::GetTime, "GETTIME", gettime),
    None, // UADDR2TADDR
    None, // TADDR2UADDR
    rpcbind(RpcbProcedure::GetVersAddr, "GETVERSADDR", getversaddr),
];

/// Nothing is cached: every answer is read from a fixed table.
const fn portmap(
    number: PmapProc,
    name: &'static str,
    handler: Handler,
) -> Option<Procedure<Handler>> {
    let max = match number.max_args_len() {
        Some(n) => n,
        None => 0,
    };
    program::small(name, max, handler)
}

const fn rpcbind(
    number: RpcbProcedure,
    name: &'static str,
    handler: Handler,
) -> Option<Procedure<Handler>> {
    program::small(name, number.max_args_len(), handler)
}

/// A success reply with the results that `results` encodes.
fn success(xid: u32, results: impl FnOnce(&mut Encoder)) -> Reply {
    let mut enc = Encoder::with_capacity(64);
    reply::accepted_success(&mut enc, xid);
    results(&mut enc);
    Reply::new(enc.into_vec())
}

fn garbage(xid: u32) -> Reply {
    Reply::status(xid, ReplyStatus::GarbageArgs)
}

fn null(_: &PortmapService, _: &ConnInfo, xid: u32, _: &[u8]) -> Reply {
    success(xid, |_| {})
}

/// SET and UNSET: registrations are refused, the table is fixed.
fn refuse_mapping(_: &PortmapService, _: &ConnInfo, xid: u32, args: &[u8]) -> Reply {
    match Mapping::from_xdr(args) {
        Ok(_) => success(xid, |enc| enc.bool(false)),
        Err(_) => garbage(xid),
    }
}

fn getport(svc: &PortmapService, _: &ConnInfo, xid: u32, args: &[u8]) -> Reply {
    match Mapping::from_xdr(args) {
        Ok(m) => {
            let port = svc.table.port_of(m.prog, m.vers, m.prot);
            success(xid, |enc| enc.u32(port))
        }
        Err(_) => garbage(xid),
    }
}

fn dump(svc: &PortmapService, _: &ConnInfo, xid: u32, _: &[u8]) -> Reply {
    let dump = DumpResult {
        mappings: svc.table.entries.clone(),
    };
    success(xid, |enc| dump.encode(enc))
}

/// rpcbind's SET and UNSET: refused too.
fn refuse_rpcb(_: &PortmapService, _: &ConnInfo, xid: u32, args: &[u8]) -> Reply {
    match Rpcb::from_xdr(args) {
        Ok(_) => success(xid, |enc| enc.bool(false)),
        Err(_) => garbage(xid),
    }
}

/// GETADDR may answer another version of the program (RFC 1833 section
/// 2.2.1).
fn getaddr(svc: &PortmapService, conn: &ConnInfo, xid: u32, args: &[u8]) -> Reply {
    universal_address(svc, conn, xid, args, false)
}

/// GETVERSADDR may not.
fn getversaddr(svc: &PortmapService, conn: &ConnInfo, xid: u32, args: &[u8]) -> Reply {
    universal_address(svc, conn, xid, args, true)
}

fn universal_address(
    svc: &PortmapService,
    conn: &ConnInfo,
    xid: u32,
    args: &[u8],
    exact: bool,
) -> Reply {
    let Ok(want) = Rpcb::from_xdr(args) else {
        return garbage(xid);
    };
    let entries = svc.table.rpcb_entries(conn.local.ip());
    let found = entries
        .iter()
        .filter(|e| e.prog == want.prog && e.netid == want.netid)
        .find(|e| e.vers == want.vers)
        .or_else(|| {
            (!exact).then(|| {
                entries
                    .iter()
                    .find(|e| e.prog == want.prog && e.netid == want.netid)
            })?
        })
        .map_or(Vec::new(), |e| e.addr.clone());
    success(xid, |enc| enc.string(&found))
}

fn rpcb_dump(svc: &PortmapService, conn: &ConnInfo, xid: u32, _: &[u8]) -> Reply {
    let dump = RpcbDump {
        entries: svc.table.rpcb_entries(conn.local.ip()),
    };
    success(xid, |enc| dump.encode(enc))
}

fn gettime(_: &PortmapService, _: &ConnInfo, xid: u32, _: &[u8]) -> Reply {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    success(xid, |enc| enc.u32(now))
}

impl Service for PortmapService {
    type Pending = Infallible;

    async fn receive<R: AsyncRead + Unpin + Send>(
        &self,
        conn: &ConnInfo,
        call: CallHeader,
        body: &mut RecordReader<R>,
    ) -> Result<Received<Infallible>, RecordError> {
        let xid = call.xid;
        let status = |status| Ok(Received::Reply(Reply::status(xid, status)));
        if call.prog != PROGRAM {
            return status(ReplyStatus::ProgUnavail);
        }
        let program = match call.vers {
            VERSION => &PORTMAP_V2,
            RPCBIND_V3 => &RPCBIND_V3_PROGRAM,
            RPCBIND_V4 => &RPCBIND_V4_PROGRAM,
            _ => {
                return status(ReplyStatus::ProgMismatch {
                    low: VERSION,
                    high: RPCBIND_V4,
                })
            }
        };
        let Some(procedure) = program.procedure(call.proc_) else {
            return status(ReplyStatus::ProcUnavail);
        };
        let max = procedure.args.whole().unwrap_or(0);
        let args = read_args(body, max).await?;
        let started = std::time::Instant::now();
        let reply = (procedure.handler)(self, conn, xid, &args);
        self.calls
            .record(call.prog, call.vers, call.proc_, started.elapsed());
        Ok(Received::Reply(reply))
    }

    async fn execute(
        self: Arc<Self>,
        _conn: Arc<ConnInfo>,
        pending: Infallible,
        _place: Place,
    ) -> Option<Reply> {
        match pending {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_proto::portmap::IPPROTO_UDP;
    use dionfs_proto::ArgsLimit;
    use dionfs_rpc::{encode_call, record_mark, Credential, ReplyHeader};
    use dionfs_transport::{next_conn_id, serve_connection, ConnLimits};
    use dionfs_xdr::{Decode, Decoder};
    use std::time::Duration;

    #[test]
    fn the_tables_answer_what_the_codecs_define_but_callit() {
        for n in 0..16 {
            let v2 = PmapProc::from_u32(n).filter(|p| *p != PmapProc::CallIt);
            assert_eq!(PORTMAP_V2.procedure(n).is_some(), v2.is_some(), "v2 {n}");
            if let (Some(p), Some(e)) = (v2, PORTMAP_V2.procedure(n)) {
                assert_eq!(e.args, ArgsLimit::Whole(p.max_args_len().unwrap()));
            }
            for (vers, table) in [(3, &RPCBIND_V3_PROGRAM), (4, &RPCBIND_V4_PROGRAM)] {
                let p = RpcbProcedure::from_u32(vers, n);
                assert_eq!(table.procedure(n).is_some(), p.is_some(), "v{vers} {n}");
                if let (Some(p), Some(e)) = (p, table.procedure(n)) {
                    assert_eq!(e.args, ArgsLimit::Whole(p.max_args_len()));
                }
            }
        }
    }
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    fn table() -> PortmapTable {
        PortmapTable::dionfs(
            111,
            false,
            PortmapTable::programs(2049, 20048, NfsVersions::default()),
        )
    }

    fn call(xid: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let mut msg = encode_call(xid, PROGRAM, vers, proc_, &Credential::None);
        msg.extend_from_slice(args);
        let mut framed = record_mark(msg.len() as u32, true).to_vec();
        framed.extend(msg);
        framed
    }

    fn mapping_args(prog: u32, vers: u32, prot: u32) -> Vec<u8> {
        Mapping {
            prog,
            vers,
            prot,
            port: 0,
        }
        .to_xdr()
    }

    #[test]
    fn getport_answers_from_the_table() {
        let t = table();
        assert_eq!(t.port_of(NFS_PROGRAM, 3, IPPROTO_TCP), 2049);
        assert_eq!(t.port_of(MOUNT_PROGRAM, 3, IPPROTO_TCP), 20048);
        assert_eq!(t.port_of(PROGRAM, VERSION, IPPROTO_TCP), 111);
        assert_eq!(t.port_of(NFS_PROGRAM, 3, IPPROTO_UDP), 0);
        assert_eq!(t.port_of(NFS_PROGRAM, 4, IPPROTO_TCP), 2049);
        assert_eq!(t.port_of(NFS_PROGRAM, 2, IPPROTO_TCP), 0);
        assert_eq!(t.port_of(MOUNT_PROGRAM, 1, IPPROTO_TCP), 0);
    }

    #[test]
    fn only_the_versions_served_are_registered() {
        let only3 = NfsVersions {
            v3: true,
            v4_0: false,
            v4_1: false,
            v4_2: false,
        };
        let t = PortmapTable::dionfs(111, false, PortmapTable::programs(2049, 20048, only3));
        assert_eq!(t.port_of(NFS_PROGRAM, 3, IPPROTO_TCP), 2049);
        assert_eq!(t.port_of(NFS_PROGRAM, 4, IPPROTO_TCP), 0);
        let only42 = NfsVersions {
            v3: false,
            v4_0: false,
            v4_1: false,
            v4_2: true,
        };
        let t = PortmapTable::dionfs(111, false, PortmapTable::programs(2049, 20048, only42));
        assert_eq!(t.port_of(NFS_PROGRAM, 3, IPPROTO_TCP), 0);
        assert_eq!(t.port_of(NFS_PROGRAM, 4, IPPROTO_TCP), 2049);
    }

    /// Sends each call on one connection served by `serve_connection` and
    /// returns each reply's header and results.
    async fn exchange(calls: &[Vec<u8>]) -> Vec<(ReplyHeader, Vec<u8>)> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let conn = ConnInfo {
            id: next_conn_id(),
            peer,
            local: addr,
            datagram: false,
            names: Default::default(),
            tls: Default::default(),
            back_channel: None,
            client_tag: Default::default(),
        };
        let stats = Arc::new(CallStats::new(crate::dispatch::counted_programs()));
        let service = Arc::new(PortmapService::new(table(), stats));
        let server = tokio::spawn(serve_connection(
            service,
            stream,
            conn,
            ConnLimits::default(),
        ));
        let (read, mut write) = client.into_split();
        let mut reader = RecordReader::new(read, 1 << 16);
        let mut replies = Vec::new();
        for c in calls {
            write.write_all(c).await.unwrap();
            let next = tokio::time::timeout(Duration::from_secs(10), reader.next_record());
            assert!(next.await.unwrap().unwrap());
            let mut msg = Vec::new();
            reader.read_to_end(&mut msg).await.unwrap();
            let mut d = Decoder::new(&msg);
            let header = ReplyHeader::decode(&mut d).unwrap();
            replies.push((header, d.rest().to_vec()));
        }
        drop(write);
        assert!(!reader.next_record().await.unwrap());
        server.await.unwrap();
        replies
    }

    fn rpcb_args(prog: u32, vers: u32, netid: &str) -> Vec<u8> {
        Rpcb {
            prog,
            vers,
            netid: netid.as_bytes().to_vec(),
            addr: Vec::new(),
            owner: Vec::new(),
        }
        .to_xdr()
    }

    #[tokio::test]
    async fn rpcbind_v3_v4_over_a_connection() {
        let calls = [
            call(1, 4, 3, &rpcb_args(NFS_PROGRAM, 3, "tcp")),
            call(2, 3, 3, &rpcb_args(MOUNT_PROGRAM, 3, "tcp")),
            call(3, 4, 3, &rpcb_args(NFS_PROGRAM, 3, "udp")),
            // GETADDR may name another version; GETVERSADDR may not.
            call(4, 4, 3, &rpcb_args(NFS_PROGRAM, 2, "tcp")),
            call(5, 4, 9, &rpcb_args(NFS_PROGRAM, 2, "tcp")),
            call(6, 4, 4, &[]),
            call(7, 4, 1, &rpcb_args(NFS_PROGRAM, 3, "tcp")),
            call(8, 3, 9, &[]),
            call(9, 4, 3, &[0; 7]),
            call(10, 4, 6, &[]),
        ];
        let replies = exchange(&calls).await;
        let statuses: Vec<_> = replies.iter().map(|(h, _)| (h.xid, h.status)).collect();
        use ReplyStatus::*;
        assert_eq!(
            statuses,
            [
                (1, Success),
                (2, Success),
                (3, Success),
                (4, Success),
                (5, Success),
                (6, Success),
                (7, Success),
                (8, ProcUnavail),
                (9, GarbageArgs),
                (10, Success),
            ]
        );
        let addr = |i: usize| {
            let mut d = Decoder::new(&replies[i].1);
            String::from_utf8(d.string(255).unwrap().to_vec()).unwrap()
        };
        // The test connection reaches the server on 127.0.0.1.
        assert_eq!(addr(0), "127.0.0.1.8.1");
        assert_eq!(addr(1), "127.0.0.1.78.80");
        assert_eq!(addr(2), "");
        assert_eq!(addr(3), "127.0.0.1.8.1");
        assert_eq!(addr(4), "");
        let dump = RpcbDump::from_xdr(&replies[5].1).unwrap();
        assert_eq!(dump.entries.len(), table().entries.len());
        assert!(dump
            .entries
            .iter()
            .any(|e| e.prog == NFS_PROGRAM && e.netid == b"tcp" && e.addr == b"127.0.0.1.8.1"));
        assert!(
            !bool::from_xdr(&replies[6].1).unwrap(),
            "registrations refused"
        );
        assert!(u32::from_xdr(&replies[9].1).unwrap() > 1_700_000_000);
    }

    #[tokio::test]
    async fn portmap_over_a_connection() {
        let calls = [
            call(1, 2, 0, &[]),
            call(2, 2, 3, &mapping_args(NFS_PROGRAM, 3, IPPROTO_TCP)),
            call(3, 2, 3, &mapping_args(MOUNT_PROGRAM, 3, IPPROTO_TCP)),
            call(4, 2, 3, &mapping_args(NFS_PROGRAM, 3, IPPROTO_UDP)),
            call(5, 2, 4, &[]),
            call(6, 2, 1, &mapping_args(NFS_PROGRAM, 3, IPPROTO_TCP)),
            call(7, 2, 2, &mapping_args(NFS_PROGRAM, 3, IPPROTO_TCP)),
            call(8, 2, 5, &[]),
            call(9, 5, 3, &mapping_args(NFS_PROGRAM, 3, IPPROTO_TCP)),
            call(10, 2, 3, &[0; 8]), // GETPORT with a short mapping
            // Arguments longer than the procedure's: refused unread, and
            // the connection goes on.
            call(12, 2, 3, &[0; 20]),
            call(13, 2, 0, &[0; 4]),
            call(14, 2, 4, &[0; 1 << 20]),
        ];
        let mut other_prog = encode_call(11, NFS_PROGRAM, 3, 0, &Credential::None);
        let mut framed = record_mark(other_prog.len() as u32, true).to_vec();
        framed.append(&mut other_prog);
        let mut all = calls.to_vec();
        all.push(framed);

        let replies = exchange(&all).await;
        let statuses: Vec<_> = replies.iter().map(|(h, _)| (h.xid, h.status)).collect();
        use ReplyStatus::*;
        assert_eq!(
            statuses,
            [
                (1, Success),
                (2, Success),
                (3, Success),
                (4, Success),
                (5, Success),
                (6, Success),
                (7, Success),
                (8, ProcUnavail),
                (9, ProgMismatch { low: 2, high: 4 }),
                (10, GarbageArgs),
                (12, GarbageArgs),
                (13, GarbageArgs),
                (14, GarbageArgs),
                (11, ProgUnavail),
            ]
        );
        assert!(replies[0].1.is_empty());
        let port = |i: usize| u32::from_xdr(&replies[i].1).unwrap();
        assert_eq!((port(1), port(2), port(3)), (2049, 20048, 0));
        let dump = DumpResult::from_xdr(&replies[4].1).unwrap();
        assert_eq!(dump.mappings, table().entries);
        assert!(!bool::from_xdr(&replies[5].1).unwrap());
        assert!(!bool::from_xdr(&replies[6].1).unwrap());
        for (_, rest) in &replies[7..] {
            assert!(rest.is_empty());
        }
    }
}
