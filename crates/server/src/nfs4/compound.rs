//! Running a received COMPOUND (RFC 8881 section 16.2.3; design section
//! 3): its ops in order, each through the op table ([`super::PROGRAM`]),
//! stopping at the first that fails; then the session's slot is completed
//! with the reply, and the COMPOUND and each op are counted.

use std::sync::Arc;
use std::time::Instant;

use dionfs_proto::nfs4::{
    ArgOp, Nfsstat4, Opnum4, StateId4, Utf8Str, NFS4_MAX_TAG_LEN, NFS4_PROGRAM, NFS_V4,
};
use dionfs_rpc::CallHeader;
use dionfs_transport::{ConnInfo, Reply};

use super::data::DataIo;
use super::fh::Fh4;
use super::reply::{CompoundReply, ReplyLimits};
use super::state::{OwnerStep, SlotGuard};
use super::Nfs4;
use crate::callstats::CallStats;
use dionfs_core::export::ClientOptions;
use dionfs_core::exports::Exports;
use dionfs_core::server::Server;

/// A COMPOUND as [`super::receive`] read it, waiting to run.
pub struct Compound {
    /// The exports it runs against, taken when it was received.
    pub exports: Arc<Exports>,
    pub call: CallHeader,
    pub tag: Utf8Str<NFS4_MAX_TAG_LEN>,
    pub minor: u32,
    /// How many ops the client sent.
    pub numops: u32,
    /// The slot its SEQUENCE took at receive; `None` for the one op a
    /// COMPOUND without SEQUENCE may carry (EXCHANGE_ID, CREATE_SESSION...).
    pub slot: Option<SlotGuard>,
    /// The ops to run, after SEQUENCE.
    pub ops: Vec<ArgOp>,
    /// The op after them, refused while it was received (`BADXDR`,
    /// `OP_ILLEGAL`, `NOTSUPP`, `SEQUENCE_POS`...): its opnum and status,
    /// answered if the ops before it succeed.
    pub refused: Option<(u32, Nfsstat4)>,
    /// Its WRITEs' payloads and its first READ's buffer.
    pub data: DataIo,
    /// How far it ran on the connection's task before an op would have
    /// blocked there; `ops` are then the ops from that one on.
    pub resume: Option<Box<Progress>>,
}

/// What a COMPOUND given back by the connection's task ([`run`]) had done:
/// the ops before the one that would block ran and are in `reply`; the
/// blocking thread goes on from there.
pub struct Progress {
    reply: CompoundReply,
    /// The position of the next op in the COMPOUND (SEQUENCE counted).
    next: u32,
    current: Option<Fh4>,
    saved: Option<Fh4>,
    current_stateid: Option<StateId4>,
    saved_stateid: Option<StateId4>,
    /// The export PUTFH admitted the client to ([`OpCtx::admitted`]):
    /// not admitted again where the COMPOUND goes on.
    admitted: Option<(u16, ClientOptions)>,
    /// The ops that ran, not yet counted.
    ran: Held,
}

impl Compound {
    /// Whether any op may block (file-system calls, fsync): then the
    /// COMPOUND runs on a blocking thread, else as a task.
    pub fn blocks(&self) -> bool {
        self.ops.iter().any(|op| super::op_blocks(op.opnum()))
    }
}

/// What an op knows of its COMPOUND: the server, the client, the session
/// and the filehandles the ops before it left.
pub struct OpCtx<'a> {
    pub server: &'a Server,
    pub nfs4: &'a Nfs4,
    /// The export list the COMPOUND was received with (and so its
    /// pseudo-filesystem).
    pub exports: &'a Arc<Exports>,
    pub conn: &'a ConnInfo,
    pub call: &'a CallHeader,
    pub minor: u32,
    /// The SEQUENCE's slot (and through it the session and the client).
    pub slot: Option<&'a SlotGuard>,
    /// The current and saved filehandles.
    pub current: Option<Fh4>,
    pub saved: Option<Fh4>,
    /// The current and saved stateids (RFC 8881 section 16.2.3.1.2):
    /// set by the ops that make or change a stateid, kept with the
    /// filehandles by SAVEFH and RESTOREFH, cleared by the ops that set
    /// a filehandle without one ([`follow_filehandle`]).
    pub current_stateid: Option<StateId4>,
    pub saved_stateid: Option<StateId4>,
    /// What the data ops were given at receive: the COMPOUND's own,
    /// borrowed, so that a COMPOUND given back keeps what is left.
    pub data: &'a mut DataIo,
    /// This op is the COMPOUND's last (DESTROY_SESSION of the session it
    /// runs in must be).
    pub last_op: bool,
    /// The export PUTFH admitted the client to, and the options its
    /// client entry gives ([`OpCtx::export`]).
    pub admitted: Option<(u16, ClientOptions)>,
    /// Whether the op after this one answers WRONGSEC itself, or there is
    /// none (RFC 8881 section 2.6.3.1.1, knfsd's `need_wrongsec_check`):
    /// if not, a put-filehandle op answers it (`fh::wrongsec_after_put`).
    pub next_handles_wrongsec: bool,
    /// The op after this one is READ or READ_PLUS (a put-filehandle op
    /// then looks the file up in the open-file cache for it).
    pub next_reads: bool,
    /// SECINFO or SECINFO_NO_NAME is running: they tell a client on a
    /// connection an export's `xprtsec` refuses what to use, so they see
    /// past it (RFC 8881 section 2.6.3.1.1.5).
    pub secinfo: bool,
    /// The owner whose seqid the op running checked (minor version 0):
    /// told the op's result when it ends (`state/seqids.rs`).
    pub sequenced: Option<OwnerStep>,
    /// The minor version 0 client a state op of this COMPOUND named (by
    /// clientid or stateid) so far: whose delegations its later ops do
    /// not recall (`delegation::enter`).
    pub v40_client: parking_lot::Mutex<Option<u64>>,
}

/// Whether `next`, the op after a put-filehandle op, answers WRONGSEC
/// itself (knfsd's `OP_HANDLES_WRONGSEC`), or is none at all, or ILLEGAL
/// (RFC 8881 section 2.6.3.1.1.6: a filehandle put to no use).
fn handles_wrongsec(next: Option<&ArgOp>) -> bool {
    matches!(
        next,
        None | Some(
            ArgOp::Lookup(_)
                | ArgOp::Lookupp
                | ArgOp::Secinfo(_)
                | ArgOp::SecinfoNoName(_)
                | ArgOp::Illegal(_)
        )
    )
}

/// Runs `compound` and returns its reply, counting it and its ops in
/// `calls` (the COMPOUND timed from `started` to its last op's end, in
/// the same batch as its ops). Its READ and WRITE await the io_uring
/// when it runs on the connection's task
/// ([`super::data::DataIo::on_task`]); elsewhere nothing in it waits.
///
/// On the task, a READ or WRITE that would block (a file to open,
/// readahead to serve, a write the ring does not take) gives the
/// COMPOUND back, `Err`, with what the ops before it did
/// ([`Compound::resume`]; they are PUTFH alone, which changes nothing
/// but the current filehandle): the caller runs the rest on a blocking
/// thread, as v3's `read_call` does. (Handing the worker to another
/// thread instead, `block_in_place`, moved the server's threads between
/// CPUs 7 times as often: 9,717 migrations per GiB of the
/// `ior-aligned-read` bench job, whose 48 KiB READs mostly go to a
/// blocking thread, against 1,364 over v3, and 1,320 with this; `perf
/// stat -e cpu-migrations`.)
pub async fn run(
    server: &Server,
    nfs4: &Nfs4,
    conn: &ConnInfo,
    mut compound: Box<Compound>,
    calls: &CallStats,
    started: Instant,
) -> Result<Reply, Box<Compound>> {
    // What running changes is taken out; the rest is borrowed, and a
    // COMPOUND given back is this one, those put back.
    let mut ops = std::mem::take(&mut compound.ops);
    if compound.data.on_task
        && compound.resume.is_none()
        && compound.slot.is_some()
        && compound.refused.is_none()
    {
        if let Some((putfh, data_op)) = DataOp::take(&mut ops) {
            return run_data(server, nfs4, conn, compound, putfh, data_op, calls, started).await;
        }
    }
    let resume = compound.resume.take();
    let (numops, refused) = (compound.numops, compound.refused);
    let mut counted = Counted::new(calls, compound.data.on_task);
    let mut status = Nfsstat4::Ok;
    // The position in the COMPOUND of the op running.
    let mut position;
    let resumed = resume.is_some();
    // What the ops before did, for the context.
    let mut restored = None;
    let mut reply = match resume {
        Some(progress) => {
            let Progress {
                reply,
                next,
                current,
                saved,
                current_stateid,
                saved_stateid,
                admitted,
                ran,
            } = *progress;
            restored = Some((current, saved, current_stateid, saved_stateid, admitted));
            for (opnum, took) in ran.ops() {
                counted.record(*opnum, *took);
            }
            position = next;
            reply
        }
        None => {
            // SEQUENCE, when there is one, was the first op.
            position = u32::from(compound.slot.is_some());
            let reply;
            (reply, status) = begin_reply(&compound, &mut counted);
            reply
        }
    };
    let mut ctx = OpCtx::new(server, nfs4, conn, &mut compound);
    if let Some((current, saved, current_stateid, saved_stateid, admitted)) = restored {
        (ctx.current, ctx.saved) = (current, saved);
        (ctx.current_stateid, ctx.saved_stateid) = (current_stateid, saved_stateid);
        ctx.admitted = admitted;
    }
    // Each op's time runs from the end of the one before: one clock read
    // per op. (With two, `clock_gettime` was 0.7% of the server's samples
    // over v4.1 on 4 KiB random WRITEs at qd 64, against 0.3% over v3.)
    // The first runs from the COMPOUND's start, or from where it resumes.
    // A PUTFH that succeeds with an op after it reads no clock: counted
    // with no time, its time is the next op's (as a v3 call's time has
    // its handle's check), since PUTFH only prepares that op (its file
    // looked up for a READ).
    let mut mark = if resumed { Instant::now() } else { started };
    let mut unclocked = false;
    let mut ops = ops.into_iter();
    while let Some(op) = ops.next() {
        if !status.is_ok() {
            break;
        }
        let opnum = op.opnum();
        ctx.last_op = position + 1 == numops;
        let next = ops.as_slice().first();
        ctx.next_handles_wrongsec = handles_wrongsec(next);
        ctx.next_reads = matches!(next, Some(ArgOp::Read(_) | ArgOp::ReadPlus(_)));
        let result_opnum = match op {
            ArgOp::Illegal(_) => Opnum4::Illegal.as_u32(),
            _ => opnum,
        };
        let start = reply.start_op(result_opnum);
        let done = match op {
            // A COMPOUND on the connection's task reads and writes
            // without blocking it (`Compound::starts_on_task`).
            ArgOp::Read(args) if ctx.data.on_task => {
                super::data::read_on_task(&mut ctx, args, &mut reply)
                    .await
                    .map_err(ArgOp::Read)
            }
            ArgOp::Write(head) if ctx.data.on_task => {
                super::data::write_on_task(&mut ctx, head, &mut reply)
                    .await
                    .map_err(ArgOp::Write)
            }
            _ => Ok((super::op_fn(&op))(&mut ctx, op, &mut reply)),
        };
        let done = match done {
            Ok(done) => done,
            Err(op) => {
                // Would block: given back with what the ops before did.
                reply.abandon_op(start);
                let progress = ctx.progress(reply, position, counted);
                compound.ops = std::iter::once(op).chain(ops).collect();
                compound.resume = Some(progress);
                return Err(compound);
            }
        };
        status = reply.finish_op(start, done);
        failed(&ctx, opnum, status);
        if let Some(step) = ctx.sequenced.take() {
            nfs4.state.owner_done(step, status, reply.op_result(start));
        }
        if status.is_ok() {
            follow_filehandle(&mut ctx, opnum);
            if opnum == Opnum4::Putfh.as_u32() && !ctx.last_op {
                counted.record(opnum, std::time::Duration::ZERO);
                unclocked = true;
                position += 1;
                continue;
            }
        }
        let now = Instant::now();
        counted.record(opnum, now - mark);
        mark = now;
        unclocked = false;
        position += 1;
    }
    if unclocked {
        // A PUTFH before an op refused at receive: the end read here.
        mark = Instant::now();
    }
    if let (true, Some((opnum, refusal))) = (status.is_ok(), refused) {
        status = reply.op_status(opnum, refusal);
        counted.record(opnum, std::time::Duration::ZERO);
    }
    Ok(end(compound, reply, status, counted, started, mark))
}

/// The reply of `compound`, which ran with `status` (its last op's),
/// its last op ending at `mark`: the slot completed with it, and the
/// COMPOUND counted with the ops held in `counted`.
fn end(
    compound: Box<Compound>,
    reply: CompoundReply,
    status: Nfsstat4,
    counted: Counted,
    started: Instant,
    mark: Instant,
) -> Reply {
    // The last op's end stands for the COMPOUND's: fewer clock reads.
    counted.flush(mark - started);
    let Some(slot) = compound.slot else {
        return reply.finish(status, false).0;
    };
    // Cached when asked, and a solo SEQUENCE always (as knfsd's
    // nfsd4_is_solo_sequence): it is small, and a client retrying one
    // finds its answer.
    let cache = slot.cachethis() || compound.numops == 1;
    let (reply, cached) = reply.finish(status, cache);
    slot.complete_at(cached, mark);
    reply
}

/// The reply of `compound` as it starts: the head, and SEQUENCE's
/// result when it has one (SEQUENCE ran at receive: its result is
/// written, and it is counted, here), with SEQUENCE's status as sent.
fn begin_reply(compound: &Compound, counted: &mut Counted) -> (CompoundReply, Nfsstat4) {
    let slot = compound.slot.as_ref();
    let limits = slot.map(|slot| ReplyLimits {
        max: slot.max_response() as usize,
        max_cached: slot
            .cachethis()
            .then_some(slot.max_response_cached() as usize),
    });
    let mut reply = CompoundReply::new(compound.call.xid, &compound.tag, limits);
    let mut status = Nfsstat4::Ok;
    if let Some(slot) = slot {
        let start = reply.start_op(Opnum4::Sequence.as_u32());
        dionfs_xdr::Encode::encode(slot.result(), reply.encoder());
        status = reply.finish_op(start, Nfsstat4::Ok);
        counted.record(Opnum4::Sequence.as_u32(), std::time::Duration::ZERO);
    }
    (reply, status)
}

/// The op after PUTFH in the usual data COMPOUND on the connection's
/// task: SEQUENCE, PUTFH, READ (what Linux sends), or SEQUENCE, PUTFH,
/// WRITE and maybe a GETATTR (`Compound::starts_on_task`).
enum DataOp {
    Read(dionfs_proto::nfs4::ReadArgs4),
    Write(dionfs_proto::nfs4::WriteHead4, Option<ArgOp>),
}

impl DataOp {
    /// `ops`' PUTFH and the data op after it, taken out, when they are
    /// of one of the usual shapes; else `None`, `ops` untouched.
    fn take(ops: &mut Vec<ArgOp>) -> Option<(ArgOp, DataOp)> {
        use ArgOp::{Getattr, Putfh, Read, Write};
        if !matches!(
            ops[..],
            [Putfh(_), Read(_)] | [Putfh(_), Write(_)] | [Putfh(_), Write(_), Getattr(_)]
        ) {
            return None;
        }
        let after = if ops.len() == 3 { ops.pop() } else { None };
        match (ops.pop(), ops.pop()) {
            (Some(Read(args)), Some(putfh)) if after.is_none() => Some((putfh, DataOp::Read(args))),
            (Some(Write(head)), Some(putfh)) => Some((putfh, DataOp::Write(head, after))),
            // Never (the shape was just matched): put back as it was.
            (last, before) => {
                ops.extend(before.into_iter().chain(last).chain(after));
                None
            }
        }
    }
}

/// [`run`] of the usual data COMPOUND ([`DataOp`]) on the connection's
/// task: its ops run as the general loop runs them (the same
/// `fh::putfh`, `data::read_on_task` or `data::write_on_task` and
/// GETATTR, the same reply, counts and give-back), in a straight line,
/// without the loop's look-ahead, op table and bookkeeping for ops
/// this COMPOUND has not. (callgrind, 4 KiB random READs at qd 16: 64
/// instructions and 41 instruction-cache misses fewer a READ than
/// through the loop, whose path had 60% more of those misses than
/// v3's.)
#[allow(clippy::too_many_arguments)]
async fn run_data(
    server: &Server,
    nfs4: &Nfs4,
    conn: &ConnInfo,
    mut compound: Box<Compound>,
    putfh: ArgOp,
    data_op: DataOp,
    calls: &CallStats,
    started: Instant,
) -> Result<Reply, Box<Compound>> {
    let mut counted = Counted::new(calls, true);
    let (mut reply, mut status) = begin_reply(&compound, &mut counted);
    let mut ctx = OpCtx::new(server, nfs4, conn, &mut compound);
    let mut mark = started;
    if !status.is_ok() {
        return Ok(end(compound, reply, status, counted, started, mark));
    }
    // PUTFH, the data op after it: a READ's file looked up for it.
    ctx.next_handles_wrongsec = false;
    ctx.next_reads = matches!(data_op, DataOp::Read(_));
    let start = reply.start_op(Opnum4::Putfh.as_u32());
    let done = super::fh::putfh(&mut ctx, putfh, &mut reply);
    status = reply.finish_op(start, done);
    if !status.is_ok() {
        failed(&ctx, Opnum4::Putfh.as_u32(), status);
        mark = Instant::now();
        counted.record(Opnum4::Putfh.as_u32(), mark - started);
        return Ok(end(compound, reply, status, counted, started, mark));
    }
    // Counted with no time: the data op's is its.
    counted.record(Opnum4::Putfh.as_u32(), std::time::Duration::ZERO);
    follow_filehandle(&mut ctx, Opnum4::Putfh.as_u32());
    ctx.next_reads = false;
    let (opnum, after) = match &data_op {
        DataOp::Read(_) => (Opnum4::Read.as_u32(), None),
        DataOp::Write(_, after) => (Opnum4::Write.as_u32(), after.as_ref()),
    };
    ctx.last_op = after.is_none();
    ctx.next_handles_wrongsec = handles_wrongsec(after);
    let start = reply.start_op(opnum);
    let done = match data_op {
        DataOp::Read(args) => super::data::read_on_task(&mut ctx, args, &mut reply)
            .await
            .map(|done| (done, None))
            .map_err(|args| vec![ArgOp::Read(args)]),
        DataOp::Write(head, after) => {
            match super::data::write_on_task(&mut ctx, head, &mut reply).await {
                Ok(done) => Ok((done, after)),
                Err(head) => Err(std::iter::once(ArgOp::Write(head)).chain(after).collect()),
            }
        }
    };
    let (done, after) = match done {
        Ok(done) => done,
        Err(ops) => {
            // Would block: given back after PUTFH.
            reply.abandon_op(start);
            let progress = ctx.progress(reply, 2, counted);
            compound.ops = ops;
            compound.resume = Some(progress);
            return Err(compound);
        }
    };
    status = reply.finish_op(start, done);
    failed(&ctx, opnum, status);
    mark = Instant::now();
    counted.record(opnum, mark - started);
    if let (true, Some(getattr)) = (status.is_ok(), after) {
        // The WRITE's GETATTR, the last op.
        ctx.last_op = true;
        ctx.next_handles_wrongsec = true;
        let opnum = Opnum4::Getattr.as_u32();
        let start = reply.start_op(opnum);
        let done = super::attr_ops::getattr(&mut ctx, getattr, &mut reply);
        status = reply.finish_op(start, done);
        failed(&ctx, opnum, status);
        let now = Instant::now();
        counted.record(opnum, now - mark);
        mark = now;
    }
    Ok(end(compound, reply, status, counted, started, mark))
}

/// Logs op `opnum`'s failure with `status` (at debug: a client's
/// failures are its own business).
fn failed(ctx: &OpCtx, opnum: u32, status: Nfsstat4) {
    if !status.is_ok() {
        tracing::debug!(opnum, ?status, minor = ctx.minor, xid = ctx.call.xid,
            client = %ctx.conn.peer, "NFSv4 op failed");
    }
}

impl<'a> OpCtx<'a> {
    /// The context of `compound`'s first op.
    fn new(
        server: &'a Server,
        nfs4: &'a Nfs4,
        conn: &'a ConnInfo,
        compound: &'a mut Compound,
    ) -> Self {
        let Compound {
            exports,
            call,
            minor,
            slot,
            data,
            ..
        } = compound;
        OpCtx {
            server,
            nfs4,
            exports,
            conn,
            call,
            minor: *minor,
            slot: slot.as_ref(),
            current: None,
            saved: None,
            current_stateid: None,
            saved_stateid: None,
            data,
            last_op: false,
            admitted: None,
            next_handles_wrongsec: true,
            next_reads: false,
            secinfo: false,
            sequenced: None,
            v40_client: parking_lot::Mutex::new(None),
        }
    }

    /// What the ops before the one at position `next` did, with `reply`
    /// and the ops `counted` holds, for the COMPOUND given back (its
    /// data ops' buffers and payloads stay in it).
    fn progress(self, reply: CompoundReply, next: u32, counted: Counted) -> Box<Progress> {
        Box::new(Progress {
            reply,
            next,
            current: self.current,
            saved: self.saved,
            current_stateid: self.current_stateid,
            saved_stateid: self.saved_stateid,
            admitted: self.admitted,
            ran: counted.take_held(),
        })
    }
}

/// The ops a COMPOUND ran, counted in `calls`: at once, or on the
/// connection's task only once it finished there (what ran there before
/// it was given back is counted where it finishes).
struct Counted<'a> {
    calls: &'a CallStats,
    held: Option<Held>,
}

/// Ops of an on-task COMPOUND counted at its end: its shapes have at
/// most four with SEQUENCE (`Compound::starts_on_task`); any more are
/// counted at once.
const MAX_HELD: usize = 4;

/// The COMPOUND's own entry in the program's table (after NULL).
const COMPOUND_PROC: u32 = 1;

/// Ops that ran and are not counted yet: their numbers and times, and
/// room for the COMPOUND's.
#[derive(Clone, Copy)]
struct Held([(u32, std::time::Duration); MAX_HELD + 1], usize);

impl Held {
    const NONE: Held = Held([(0, std::time::Duration::ZERO); MAX_HELD + 1], 0);

    fn ops(&self) -> &[(u32, std::time::Duration)] {
        &self.0[..self.1]
    }
}

impl<'a> Counted<'a> {
    fn new(calls: &'a CallStats, hold: bool) -> Self {
        Counted {
            calls,
            held: hold.then_some(Held::NONE),
        }
    }

    fn record(&mut self, opnum: u32, took: std::time::Duration) {
        match &mut self.held {
            Some(Held(held, n)) if *n < MAX_HELD => {
                held[*n] = (opnum, took);
                *n += 1;
            }
            _ => self.calls.record(NFS4_PROGRAM, NFS_V4, opnum, took),
        }
    }

    /// The ops held, none counted: for the COMPOUND given back.
    fn take_held(self) -> Held {
        self.held.unwrap_or(Held::NONE)
    }

    /// Counts the ops held and the COMPOUND, which took `took`: one
    /// batch.
    fn flush(self, took: std::time::Duration) {
        match self.held {
            Some(Held(mut held, n)) => {
                held[n] = (COMPOUND_PROC, took);
                self.calls.record_all(NFS4_PROGRAM, NFS_V4, &held[..=n]);
            }
            None => self.calls.record(NFS4_PROGRAM, NFS_V4, COMPOUND_PROC, took),
        }
    }
}

/// The current stateid after op `opnum` succeeded, as knfsd's
/// `OP_CLEAR_STATEID`, `SAVES_CURRENT_STATEID` and
/// `RESTORES_CURRENT_STATEID` flags: an op that sets the current
/// filehandle without a stateid leaves no current stateid (a later
/// use of it is `BAD_STATEID`); SAVEFH and RESTOREFH carry it along
/// with the filehandle. The ops that make a stateid set it themselves.
fn follow_filehandle(ctx: &mut OpCtx, opnum: u32) {
    match Opnum4::from_u32(opnum) {
        Some(
            Opnum4::Putfh
            | Opnum4::Putrootfh
            | Opnum4::Putpubfh
            | Opnum4::Lookup
            | Opnum4::Lookupp
            | Opnum4::Create,
        ) => ctx.current_stateid = None,
        Some(Opnum4::Savefh) => ctx.saved_stateid = ctx.current_stateid,
        Some(Opnum4::Restorefh) => ctx.current_stateid = ctx.saved_stateid,
        _ => {}
    }
}
