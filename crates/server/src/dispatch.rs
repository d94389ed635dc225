//! Program dispatch: the [`Service`] the NFS and MOUNT listeners serve,
//! one `match` on program and version a reader can scan. It receives each
//! call as its procedure's table entry says (argument bound, a WRITE's
//! payload into a pool buffer, a READ's buffer, reply room), runs it
//! through the program's handler, and counts it. NFSv4's COMPOUND is read
//! one op at a time by `nfs4::receive` and run by `nfs4::compound`.

use std::sync::Arc;

use dionfs_dataplane::PooledBuf;
use dionfs_proto::mount3::{MOUNT_PROGRAM, MOUNT_V3};
use dionfs_proto::nfs3::{ReadArgs, NFS_PROGRAM, NFS_V3};
use dionfs_proto::nfs4::NFS_V4;
use dionfs_proto::{ArgsLimit, Void};
use dionfs_rpc::{AuthStat, CallHeader, Credential, RecordError, RecordReader, ReplyStatus};
use dionfs_transport::{read_args, CallStream, ConnInfo, Place, Received, Reply, Service};
use dionfs_xdr::{Decode, Decoder};
use tracing::debug;

use crate::callstats::CallStats;
use crate::mount::MountTable;
use crate::nfs;
use crate::nfs4::{self, Nfs4};
use crate::program::{Io, ProgramSummary};
use crate::reply::success;
use dionfs_core::drc::Lookup;
use dionfs_core::export::NfsVersions;
use dionfs_core::exports::Exports;
use dionfs_core::server::Server;

/// A call read from a connection, waiting to run, with the exports it
/// runs against (taken when it was received).
pub enum Pending {
    /// An NFS call other than WRITE, with its encoded arguments; a READ
    /// also with the read-pool buffer it will read into (taken while
    /// receiving, so that no blocking thread waits for one).
    Nfs {
        exports: Arc<Exports>,
        call: CallHeader,
        args: Vec<u8>,
        read_buf: Option<PooledBuf>,
    },
    /// A WRITE whose payload has been received into a data-plane buffer.
    Write(Box<CallHeader>, nfs::data::ReceivedWrite),
    /// A MOUNT call with its encoded arguments.
    Mount {
        exports: Arc<Exports>,
        call: CallHeader,
        args: Vec<u8>,
    },
    /// An NFSv4 COMPOUND, its ops decoded and its SEQUENCE run.
    Nfs4(Box<nfs4::compound::Compound>),
}

/// Dispatches the calls of the NFS and MOUNT listeners to their programs.
pub struct Dispatcher {
    server: Arc<Server>,
    /// MOUNT's record of who mounted what.
    mounts: MountTable,
    /// Per-procedure call counts and service times (`dionfs stats`).
    calls: Arc<CallStats>,
    /// NFSv3 is served.
    v3: bool,
    /// NFSv4, when some minor version of it is served.
    nfs4: Option<Arc<Nfs4>>,
}

/// The programs whose calls are counted ([`CallStats`]), from their
/// procedure tables: every program the server serves.
pub fn counted_programs() -> Vec<ProgramSummary> {
    use crate::nlm::procedures::{NLM, NSM};
    use crate::portmap::{PORTMAP_V2, RPCBIND_V3_PROGRAM, RPCBIND_V4_PROGRAM};
    vec![
        nfs::PROGRAM.summary(),
        nfs4::PROGRAM.summary().with_operations_from(nfs4::FIRST_OP),
        crate::mount::PROGRAM.summary(),
        NLM.summary(),
        NSM.summary(),
        PORTMAP_V2.summary(),
        RPCBIND_V3_PROGRAM.summary(),
        RPCBIND_V4_PROGRAM.summary(),
    ]
}

impl Dispatcher {
    /// The dispatcher of `server`'s programs, counting their calls in
    /// `calls`, serving the NFS `versions` (NFSv4 through `nfs4`, which
    /// must be given when `versions` has some v4).
    pub fn new(
        server: Arc<Server>,
        calls: Arc<CallStats>,
        versions: NfsVersions,
        nfs4: Option<Arc<Nfs4>>,
    ) -> Dispatcher {
        Dispatcher {
            server,
            mounts: MountTable::default(),
            calls,
            v3: versions.v3,
            nfs4: nfs4.filter(|_| versions.v4()),
        }
    }

    /// NFSv4's program, if it is served on this connection: over TCP
    /// only (RFC 8881 section 2.9.1: NFSv4.1 needs a transport with
    /// congestion control).
    fn nfs4_for(&self, conn: &ConnInfo) -> Option<&Arc<Nfs4>> {
        self.nfs4.as_ref().filter(|_| !conn.datagram)
    }

    /// PROG_MISMATCH for an NFS version not served on `conn`: the lowest
    /// and highest served there.
    fn nfs_versions_served(&self, conn: &ConnInfo, xid: u32) -> Reply {
        let v4 = self.nfs4_for(conn).is_some();
        let low = if self.v3 || !v4 { NFS_V3 } else { NFS_V4 };
        let high = if v4 { NFS_V4 } else { NFS_V3 };
        Reply::only_versions(xid, low, high)
    }

    /// Whether a call starts as a task, which may finish it without a
    /// blocking thread: a READ of a direct-read export (through the
    /// io_uring), an aligned direct WRITE (the same), a small UNSTABLE
    /// one (into the page cache), an NFSv4 COMPOUND of those READs and
    /// WRITEs (`nfs4::compound::Compound::starts_on_task`), or one whose
    /// ops all run in memory (a lone SEQUENCE renewing a lease,
    /// PUTROOTFH and GETFH).
    /// Decided without a syscall; the rest runs on a blocking thread
    /// directly.
    fn starts_on_task(&self, pending: &Pending) -> bool {
        match pending {
            Pending::Write(_, write) => write.starts_on_task(&self.server),
            Pending::Nfs {
                exports,
                call,
                args,
                ..
            } if matches!(nfs_io(call), Io::Read { .. }) => {
                nfs::data::read_may_use_ring(&self.server, exports, args)
            }
            Pending::Nfs4(compound) => !compound.blocks() || compound.starts_on_task(&self.server),
            _ => false,
        }
    }
}

impl Service for Dispatcher {
    type Pending = Pending;

    async fn receive<R: CallStream>(
        &self,
        conn: &ConnInfo,
        call: CallHeader,
        body: &mut RecordReader<R>,
    ) -> Result<Received<Pending>, RecordError> {
        // Only AUTH_SYS and AUTH_NONE are served: any other flavor (say
        // RPCSEC_GSS) is refused rather than quietly made anonymous, so the
        // client can tell its security was not honoured (RFC 5531 9).
        if let Credential::Unsupported(flavor) = call.cred {
            debug!(flavor, peer = %conn.peer, "call with an unsupported auth flavor refused");
            return Ok(Received::Reply(Reply::status(
                call.xid,
                ReplyStatus::AuthError(AuthStat::BadCred),
            )));
        }
        let proc_unavail = |call: &CallHeader| {
            Ok(Received::Reply(Reply::status(
                call.xid,
                ReplyStatus::ProcUnavail,
            )))
        };
        // The exports this call runs against, whatever a reload does
        // meanwhile.
        let exports = self.server.exports();
        // A connection opened while no client list named hosts (before a
        // reload added one) has no names yet: they are looked up once,
        // before its first call since. Its reading waits meanwhile, as at
        // the start of a connection; the stall clock does not run.
        if exports.need_names() {
            conn.look_up_names().await;
        }
        match (call.prog, call.vers) {
            (NFS_PROGRAM, NFS_V3) if self.v3 => {
                let Some(procedure) = nfs::PROGRAM.procedure(call.proc_) else {
                    return proc_unavail(&call);
                };
                match procedure.args {
                    // WRITE: the head is read exactly, the payload (at most
                    // max_transfer) straight into a data-plane buffer.
                    ArgsLimit::HeadThenPayload(_) => {
                        nfs::data::receive_write(&self.server, exports, conn, call, body)
                            .await
                            .map(|r| r.map(|(call, write)| Pending::Write(call, write)))
                    }
                    ArgsLimit::Whole(max) => {
                        // A READ's buffer is taken in `prepare`, once its
                        // reply has room in the socket.
                        let args = read_args(body, max).await?;
                        Ok(Received::Run(Pending::Nfs {
                            exports,
                            call,
                            args,
                            read_buf: None,
                        }))
                    }
                }
            }
            (MOUNT_PROGRAM, MOUNT_V3) => {
                let Some(max) = crate::mount::PROGRAM
                    .procedure(call.proc_)
                    .and_then(|p| p.args.whole())
                else {
                    return proc_unavail(&call);
                };
                let args = read_args(body, max).await?;
                Ok(Received::Run(Pending::Mount {
                    exports,
                    call,
                    args,
                }))
            }
            (NFS_PROGRAM, NFS_V4) => {
                // Turned off, or over UDP: as any version not served.
                let Some(program) = self.nfs4_for(conn) else {
                    return Ok(Received::Reply(self.nfs_versions_served(conn, call.xid)));
                };
                match call.proc_ {
                    0 => {
                        self.calls
                            .record(NFS_PROGRAM, NFS_V4, 0, std::time::Duration::ZERO);
                        Ok(Received::Reply(success(call.xid, &Void)))
                    }
                    1 => {
                        // The usual COMPOUND, all in the reader's buffer,
                        // without a future; else boxed: a COMPOUND's
                        // receive (ops decoded one at a time, WRITE
                        // payloads placed) is a large future, and every
                        // connection's task would otherwise hold room for
                        // it while idle (test_connections: 24.5 KiB per
                        // idle connection unboxed).
                        use nfs4::receive::NotInPlace;
                        let received = match nfs4::receive::receive_in_place(
                            &self.server,
                            program,
                            exports,
                            conn,
                            call,
                            body,
                        ) {
                            Ok(received) => received,
                            // A WRITE's payload, and the few ops after it.
                            Err(NotInPlace::Write(rest)) => {
                                nfs4::receive::receive_write(&self.server, conn, rest, body).await?
                            }
                            Err(NotInPlace::Whole(exports, call)) => {
                                Box::pin(nfs4::receive::receive(
                                    &self.server,
                                    program,
                                    exports,
                                    conn,
                                    call,
                                    body,
                                ))
                                .await?
                            }
                        };
                        if !matches!(received, Received::Run(_)) {
                            // Answered at once (a retransmission, an empty
                            // COMPOUND): counted as the others.
                            self.calls
                                .record(NFS_PROGRAM, NFS_V4, 1, std::time::Duration::ZERO);
                        }
                        Ok(received.map(Pending::Nfs4))
                    }
                    _ => proc_unavail(&call),
                }
            }
            (NFS_PROGRAM, _) => Ok(Received::Reply(self.nfs_versions_served(conn, call.xid))),
            (MOUNT_PROGRAM, _) => Ok(Received::Reply(Reply::only_version(call.xid, MOUNT_V3))),
            _ => Ok(Received::Reply(Reply::status(
                call.xid,
                ReplyStatus::ProgUnavail,
            ))),
        }
    }

    fn note_oversized_args(&self) {
        self.server.note_oversized_args();
    }

    /// The reply of a READ, READDIR or READDIRPLUS: as large as asked
    /// (capped by the largest transfer) plus room for the headers and
    /// attributes. Reserved before the call runs, so a client that does not
    /// read its replies has its calls wait instead of the server building
    /// replies for it without bound: 30 connections with 64 READDIRPLUS of
    /// a 6,000-entry directory in flight each, unread, took 480 MB (and both
    /// CPUs) before READDIRs reserved room too.
    fn reply_room(&self, pending: &Pending) -> usize {
        if let Pending::Nfs4(compound) = pending {
            return compound.reply_room(self.server.max_args);
        }
        let Pending::Nfs { call, args, .. } = pending else {
            return 0;
        };
        let count = match nfs_io(call) {
            Io::Read { count } => count(args).unwrap_or(0),
            Io::LargeReply { count } => match count(args) {
                Some(n) => n,
                None => return 0,
            },
            Io::None | Io::Write => return 0,
        };
        (count as usize).min(self.server.max_args as usize) + READ_REPLY_OVERHEAD
    }

    async fn prepare(&self, conn: &ConnInfo, pending: &mut Pending) {
        if let Pending::Nfs4(compound) = pending {
            compound.take_read_buffer(conn).await;
            return;
        }
        if let Pending::Nfs {
            exports,
            call,
            args,
            read_buf,
        } = pending
        {
            if matches!(nfs_io(call), Io::Read { .. }) {
                *read_buf = read_buffer(exports, conn, args).await;
            }
        }
    }

    /// Names are looked up if an export served now matches clients by name.
    fn resolves_names(&self) -> bool {
        self.server.exports().need_names()
    }

    /// A WRITE holds a large pool buffer until its reply is out, unless
    /// its record, one fragment, is too short for more than
    /// [`dionfs_dataplane::SMALL_IO`] bytes of data (it then takes a small
    /// buffer, bounded by the calls a connection may have in flight). A
    /// READ's count is in its arguments: see below.
    /// An NFSv4 COMPOUND, which may carry a WRITE, likewise unless its
    /// record is too short for more than `SMALL_IO` bytes of data and
    /// 1 KiB of other ops (design section 2).
    fn holds_buffer(&self, call: &CallHeader, args_len: Option<u32>) -> bool {
        match (call.prog, call.vers, call.proc_) {
            (NFS_PROGRAM, NFS_V4, 1) => args_len.is_none_or(|n| !nfs4::data::is_small_compound(n)),
            _ => {
                matches!(nfs_io(call), Io::Write)
                    && args_len.is_none_or(|n| !dionfs_dataplane::is_small(n as usize))
            }
        }
    }

    /// A READ of more than [`dionfs_dataplane::SMALL_IO`] bytes holds a
    /// large pool buffer until its reply is out.
    fn holds_buffer_after_receive(&self, pending: &Pending) -> bool {
        match pending {
            Pending::Nfs4(compound) => compound.holds_buffer_after_receive(),
            Pending::Nfs { call, args, .. } => match nfs_io(call) {
                Io::Read { count } => {
                    count(args).is_some_and(|n| !dionfs_dataplane::is_small(n as usize))
                }
                _ => false,
            },
            _ => false,
        }
    }

    // Handlers make file-system calls: run them where blocking is fine.
    // A call that may finish without blocking starts as a task instead
    // (`nfs::data::read_call`, `write_call`).
    fn execute_blocks(&self, pending: &Pending) -> bool {
        !self.starts_on_task(pending)
    }

    async fn execute(
        self: Arc<Self>,
        conn: Arc<ConnInfo>,
        pending: Pending,
        place: Place,
    ) -> Option<Reply> {
        // As the connection decided (`execute_blocks`), not asked again:
        // the answer may have changed since, and a blocking handler on a
        // task can stall every worker (each waiting on a range lock that a
        // task holds across its io_uring read).
        let on_task = place == Place::Task;
        let (prog, vers, proc_) = match &pending {
            Pending::Nfs { call, .. } | Pending::Mount { call, .. } => {
                (call.prog, call.vers, call.proc_)
            }
            Pending::Write(call, _) => (call.prog, call.vers, call.proc_),
            Pending::Nfs4(compound) => {
                (compound.call.prog, compound.call.vers, compound.call.proc_)
            }
        };
        let started = std::time::Instant::now();
        let server = self.server.clone();
        let reply = match pending {
            Pending::Write(call, write) if on_task => {
                nfs::data::write_call(server, conn, call, write).await
            }
            Pending::Nfs {
                exports,
                call,
                args,
                read_buf,
            } if on_task => nfs::data::read_call(server, exports, conn, call, args, read_buf).await,
            Pending::Write(call, write) => Some(nfs::data::write(&server, &conn, &call, write)),
            Pending::Nfs {
                exports,
                call,
                args,
                read_buf,
            } => nfs::call(&server, &exports, &conn, &call, &args, read_buf),
            Pending::Mount {
                exports,
                call,
                args,
            } => Some(crate::mount::call(
                &server,
                &self.mounts,
                &exports,
                &conn,
                &call,
                &args,
            )),
            // Received only while NFSv4 is served. Timed by its ops'
            // clock reads, and counted with them: none more here.
            Pending::Nfs4(compound) => {
                match self
                    .compound(server, conn, compound, on_task, started)
                    .await
                {
                    Some(reply) => return Some(reply),
                    // Not served, or its handler panicked: counted below.
                    None => None,
                }
            }
        };
        self.calls.record(prog, vers, proc_, started.elapsed());
        reply
    }
}

impl Dispatcher {
    /// Runs an NFSv4 COMPOUND that started at `started`, on the
    /// connection's task if `on_task`, and counts it: its reply.
    async fn compound(
        self: &Arc<Self>,
        server: Arc<Server>,
        conn: Arc<ConnInfo>,
        compound: Box<nfs4::compound::Compound>,
        on_task: bool,
        started: std::time::Instant,
    ) -> Option<Reply> {
        // Minor version 0's retransmissions of what cannot be done twice
        // are answered from the duplicate request cache.
        let Some(key) = nfs4::v40::drc_key(&conn, &compound) else {
            return self
                .run_compound(server, conn, compound, on_task, started)
                .await;
        };
        match server.drc.begin(key) {
            Lookup::InProgress => return None,
            Lookup::Replay(bytes) => {
                let call = &compound.call;
                let took = started.elapsed();
                self.calls.record(call.prog, call.vers, call.proc_, took);
                return Some(Reply::new(bytes.to_vec()));
            }
            Lookup::New => {}
        }
        let drc = server.clone();
        let done = self
            .run_compound(server, conn, compound, on_task, started)
            .await;
        match &done {
            Some(reply) if reply.data.is_none() && reply.trailer.is_empty() => {
                drc.drc.complete(key, Arc::new(reply.header.clone()));
            }
            _ => drc.drc.abandon(key),
        }
        done
    }

    /// [`Self::compound`] past the duplicate request cache.
    async fn run_compound(
        self: &Arc<Self>,
        server: Arc<Server>,
        conn: Arc<ConnInfo>,
        mut compound: Box<nfs4::compound::Compound>,
        on_task: bool,
        started: std::time::Instant,
    ) -> Option<Reply> {
        let program = self.nfs4.as_ref()?;
        compound.data.on_task = on_task;
        let given_back = match nfs4::compound::run(
            &server,
            program,
            &conn,
            compound,
            &self.calls,
            started,
        )
        .await
        {
            Ok(done) => return Some(done),
            Err(compound) => compound,
        };
        // Its READ or WRITE would block: the rest on a blocking thread,
        // as v3's `read_call`.
        let mut compound = given_back;
        compound.data.on_task = false;
        let this = self.clone();
        crate::io::on_blocking_thread("COMPOUND", move || {
            let program = this.nfs4.as_ref()?;
            dionfs_sys::park::run_here(nfs4::compound::run(
                &this.server,
                program,
                &conn,
                compound,
                &this.calls,
                started,
            ))
            .ok()
        })
        .await
    }
}

/// The buffer for a READ with arguments `args` (small or large, by its
/// count), from the export
/// of `exports` its handle names; waits while that pool is empty (the
/// connection reads nothing else meanwhile: backpressure). `None` when the
/// call will fail before reading (no such export, client not admitted,
/// arguments that do not decode): it then needs no buffer, and its handler
/// says why.
async fn read_buffer(exports: &Exports, conn: &ConnInfo, args: &[u8]) -> Option<PooledBuf> {
    let args = ReadArgs::decode(&mut Decoder::new(args)).ok()?;
    let export = exports.for_client(conn, args.file.as_bytes())?;
    // An error here (no memory for the buffer) is the handler's to
    // report, when it finds no buffer.
    export.data.read_buffer_for(args.count).await.ok()
}

/// Room for a READ reply's RPC and NFS headers and post-op attributes.
const READ_REPLY_OVERHEAD: usize = 512;

/// What an NFSv3 call's procedure needs of the connection (its table
/// entry's [`Io`]); `Io::None` for other programs and unknown procedures.
fn nfs_io(call: &CallHeader) -> Io {
    if (call.prog, call.vers) != (NFS_PROGRAM, NFS_V3) {
        return Io::None;
    }
    nfs::PROGRAM
        .procedure(call.proc_)
        .map_or(Io::None, |p| p.io)
}
