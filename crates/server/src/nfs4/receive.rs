//! Receiving a COMPOUND (design section 2): its head, then its ops one at
//! a time, each read from the record only as far as its decoder asks, so
//! nothing larger than an op's own bound ([`Opnum4::max_args_len`]) or
//! the session's request size is ever read into memory. SEQUENCE runs
//! here: a retransmission is answered from its slot at once, and a new
//! request holds its slot from here until its reply is built.

use std::sync::Arc;

use dionfs_proto::nfs4::{
    decode_op, ArgOp, CompoundHead, Nfsstat4, Opnum4, PutfhArgs4, ReadArgs4, SequenceArgs4,
    Utf8Str, WriteHead4, NFS4_MAX_TAG_LEN,
};
use dionfs_proto::ArgsLimit;
use dionfs_rpc::{CallHeader, RecordError, RecordReader};
use dionfs_transport::{CallStream, ConnInfo, Received};
use dionfs_xdr::{pad_len, Decode, Decoder, XdrError};

use super::compound::Compound;
use super::data::{self, DataIo, KnownFh, Payload};
use super::reply;
use super::state::Sequenced;
use super::Nfs4;
use crate::reply::garbage_args;
use dionfs_core::exports::Exports;
use dionfs_core::server::Server;

/// Reads COMPOUND call `call` from `body`, which is right after its call
/// header. What is left of the record when this returns (the rest of a
/// COMPOUND refused part-way) is skipped by the connection.
pub async fn receive<R: CallStream>(
    server: &Server,
    nfs4: &Nfs4,
    exports: Arc<Exports>,
    conn: &ConnInfo,
    call: CallHeader,
    body: &mut RecordReader<R>,
) -> Result<Received<Box<Compound>>, RecordError> {
    // Whether the transport took no buffer share for it (`holds_buffer`):
    // nothing of the arguments is read yet.
    let small = body.is_last_fragment() && data::is_small_compound(body.fragment_remaining());
    // 1. The head: decoded where it was read if it all came (the usual
    // case), else read exactly, the tag's length checked before the tag
    // is read.
    let head = match head_in_place(body) {
        Some(head) => head,
        None => {
            let tag_len = body.read_u32().await?;
            if tag_len > NFS4_MAX_TAG_LEN {
                return Ok(Received::Reply(garbage_args(call.xid)));
            }
            let mut head = tag_len.to_be_bytes().to_vec();
            head.resize(4 + tag_len as usize + pad_len(tag_len as usize) + 8, 0);
            body.read_exact(&mut head[4..]).await?;
            let Ok(head) = CompoundHead::decode(&mut Decoder::new(&head)) else {
                return Ok(Received::Reply(garbage_args(call.xid)));
            };
            head
        }
    };
    let xid = call.xid;
    if !nfs4.serves_minor(head.minorversion) {
        // RFC 8881 section 16.2.3: no results (pynfs COMP4a, COMP4b).
        return Ok(Received::Reply(reply::without_results(
            xid,
            &head.tag,
            Nfsstat4::MinorVersMismatch,
        )));
    }
    if !is_utf8_text(head.tag.as_bytes()) {
        // A tag is a utf8str_cs (RFC 8881 section 16.2.3; pynfs COMP3).
        return Ok(Received::Reply(reply::without_results(
            xid,
            &head.tag,
            Nfsstat4::Inval,
        )));
    }
    if head.numops == 0 {
        return Ok(Received::Reply(reply::without_results(
            xid,
            &head.tag,
            Nfsstat4::Ok,
        )));
    }
    let (numops, minor) = (head.numops, head.minorversion);
    let mut compound = new_compound(exports, call, head, Vec::new());
    let mut ops = OpReader::new(body, minor);
    if minor == 0 {
        // No SEQUENCE: every op is received so, the record bounded by
        // the transport's largest record alone.
        let max = V40_MAX_OPS;
        receive_ops(
            server,
            conn,
            &mut compound,
            &mut ops,
            small,
            numops,
            max,
            u64::MAX,
        )
        .await?;
        return Ok(Received::Run(compound));
    }

    // 2. The first op: without a session, the only one decoded.
    let first = match ops.next().await? {
        Next::Op(op) => op,
        Next::Refused(opnum, status) => {
            compound.refused = Some((opnum, status));
            return Ok(Received::Run(compound));
        }
    };
    let args = match first {
        ArgOp::Sequence(args) => args,
        ArgOp::ExchangeId(_)
        | ArgOp::CreateSession(_)
        | ArgOp::DestroySession(_)
        | ArgOp::BindConnToSession(_)
        | ArgOp::DestroyClientid(_)
            if numops == 1 =>
        {
            compound.ops.push(first);
            return Ok(Received::Run(compound));
        }
        ArgOp::ExchangeId(_)
        | ArgOp::CreateSession(_)
        | ArgOp::DestroySession(_)
        | ArgOp::BindConnToSession(_)
        | ArgOp::DestroyClientid(_) => {
            compound.refused = Some((first.opnum(), Nfsstat4::NotOnlyOp));
            return Ok(Received::Run(compound));
        }
        // An opnum outside the minor version is OP_ILLEGAL wherever it is
        // (pynfs COMP5 sends it alone, without a session).
        ArgOp::Illegal(_) => {
            compound.ops.push(first);
            return Ok(Received::Run(compound));
        }
        _ => {
            compound.refused = Some((first.opnum(), Nfsstat4::OpNotInSession));
            return Ok(Received::Run(compound));
        }
    };
    // The record's length, when its last fragment has begun.
    let request_len = ops
        .body
        .is_last_fragment()
        .then(|| ops.body.record_len_so_far());
    let slot = match nfs4.state.sequence(&args, conn, numops, request_len) {
        Sequenced::New(slot) => slot,
        Sequenced::Replay(res) => return Ok(Received::Reply(reply::replay(xid, &res))),
        Sequenced::Error(status) => return Ok(answered_by_sequence(compound, status)),
    };

    // 3. The later ops, within the session's bounds (SEQUENCE checked
    // numops against them, at most 64).
    let max_request = u64::from(slot.max_request());
    let later = numops - 1;
    if !receive_ops(
        server,
        conn,
        &mut compound,
        &mut ops,
        small,
        later,
        later,
        max_request,
    )
    .await?
    {
        // Found only now, the record coming in several fragments (having
        // read at most one op's bound past the size): SEQUENCE answers
        // it, and the slot goes back as it was.
        drop(slot);
        return Ok(answered_by_sequence(compound, Nfsstat4::ReqTooBig));
    }
    compound.slot = Some(slot);
    // 5. Whatever follows the ops is skipped by the connection.
    Ok(Received::Run(compound))
}

/// A WRITE's payload, received as [`data::receive_payload`] places it
/// (the file's handle `fh` as far as the ops say; `first`: the
/// COMPOUND's first WRITE), or skipped when it is larger than any
/// transfer the server offers (`INVAL`).
#[allow(clippy::too_many_arguments)]
async fn take_payload<R: CallStream>(
    server: &Server,
    exports: &Arc<Exports>,
    conn: &ConnInfo,
    fh: Option<&[u8]>,
    first: bool,
    small: bool,
    write: &WriteHead4,
    body: &mut RecordReader<R>,
) -> Result<Payload, RecordError> {
    if write.data_len > server.max_args {
        crate::io::skip(body, write.payload_len()).await?;
        return Ok(Payload::Skipped(Some(Nfsstat4::Inval)));
    }
    data::receive_payload(server, exports, conn, fh, first, small, write, body).await
}

/// The most ops a minor version 0 COMPOUND, which no session bounds,
/// runs: the op past them is `RESOURCE` (RFC 7530 section 15.2,
/// knfsd's `NFSD_MAX_OPS_PER_COMPOUND` is 50; Linux sends at most 14).
pub const V40_MAX_OPS: u32 = 100;

/// Receives `count` ops of `compound` (those after SEQUENCE, or all of
/// a minor version 0 COMPOUND) into it, each decoded within its own
/// bound, a WRITE's payload placed as [`data::receive_payload`] places
/// it. The op past the first `max_ops` is `RESOURCE`; one that cannot be
/// decoded ends the COMPOUND there. False when the record grew past
/// `max_request` bytes (an op, or a WRITE's payload before anything is
/// allocated for it): the caller's SEQUENCE answers `REQ_TOO_BIG`.
#[allow(clippy::too_many_arguments)]
async fn receive_ops<R: CallStream>(
    server: &Server,
    conn: &ConnInfo,
    compound: &mut Compound,
    ops: &mut OpReader<'_, R>,
    small: bool,
    count: u32,
    max_ops: u32,
    max_request: u64,
) -> Result<bool, RecordError> {
    // Bounded whatever the count says.
    compound.ops.reserve(count.min(64) as usize);
    let exports = compound.exports.clone();
    // The current filehandle as far as the ops say, for WRITE payloads.
    let mut known = KnownFh::<Vec<u8>>::default();
    let mut writes = 0;
    for position in 0..count {
        if position == max_ops {
            let opnum = ops.body.read_u32().await?;
            compound.refused = Some((opnum, Nfsstat4::Resource));
            break;
        }
        let next = ops.next().await?;
        if ops.body.record_len_so_far() > max_request {
            return Ok(false);
        }
        let op = match next {
            Next::Op(op) => op,
            Next::Refused(opnum, status) => {
                compound.refused = Some((opnum, status));
                break;
            }
        };
        if let ArgOp::Write(write) = &op {
            // 4. The payload, bounded before anything is allocated for it.
            let body = &ops.body;
            let read = body.record_len_so_far() - u64::from(body.fragment_remaining());
            if read + write.payload_len() as u64 > max_request {
                return Ok(false);
            }
            if !ops.buf.is_empty() {
                // The decoder read into the payload: never so, but then
                // the bytes after it are not known to be the next op.
                compound.refused = Some((op.opnum(), Nfsstat4::Badxdr));
                break;
            }
            let fh = known.current.as_deref();
            let first = writes == 0;
            let payload =
                take_payload(server, &exports, conn, fh, first, small, write, ops.body).await?;
            compound.data.payloads.push_back(payload);
            writes += 1;
        }
        known.follow(&op);
        let ends = ends_decoding(&op);
        compound.ops.push(op);
        if ends {
            break;
        }
    }
    Ok(true)
}

/// At most this many ops are received in place ([`receive_in_place`]).
const IN_PLACE_MAX_OPS: u32 = 8;

/// The most bytes of ops after a WRITE's payload that [`receive_write`]
/// takes (GETATTR's are 16 to 24).
const WRITE_TAIL_MAX: usize = 256;

/// A COMPOUND [`receive_in_place`] did not take whole.
pub enum NotInPlace {
    /// Nothing consumed: for [`receive`].
    Whole(Arc<Exports>, CallHeader),
    /// SEQUENCE, PUTFH and a WRITE's head, taken: for [`receive_write`].
    Write(WriteRest),
}

/// A WRITE COMPOUND received in place up to its payload: SEQUENCE ran,
/// `compound` holds PUTFH and the WRITE, and the record holds the
/// payload, its padding and `tail_len` bytes of ops after it.
pub struct WriteRest {
    compound: Box<Compound>,
    /// As [`receive`]'s `small`: what the record's length said.
    small: bool,
    tail_len: usize,
}

/// [`receive`] without awaiting anything, when the record reader already
/// holds the whole COMPOUND (one fragment, all read ahead) and it is the
/// usual shape: SEQUENCE, then at most [`IN_PLACE_MAX_OPS`] ops in all,
/// none a WRITE (whose payload is received into a pool buffer) and none
/// that ends decoding. Its head and ops are decoded where they lie and
/// SEQUENCE runs, as [`receive`] would do them, with no future to box
/// and no await. Anything else is given back ([`NotInPlace::Whole`]),
/// nothing consumed, for [`receive`]: SEQUENCE runs only once every op
/// has decoded, so it never runs twice.
///
/// A WRITE COMPOUND of the usual shape (SEQUENCE, PUTFH, WRITE, and at
/// most [`WRITE_TAIL_MAX`] bytes of ops after the payload, in one
/// fragment) is taken up to its payload, SEQUENCE run, and given back
/// as [`NotInPlace::Write`] for [`receive_write`]: as [`receive`] does
/// it, without the boxed future and the op-by-op reads.
pub fn receive_in_place<R: CallStream>(
    server: &Server,
    nfs4: &Nfs4,
    exports: Arc<Exports>,
    conn: &ConnInfo,
    call: CallHeader,
    body: &mut RecordReader<R>,
) -> Result<Received<Box<Compound>>, NotInPlace> {
    let (head, args, ops, write) = match decode_in_place(nfs4, body) {
        Some((head, args, ops, used)) => {
            body.consume(used);
            (head, args, ops, None)
        }
        None => match decode_write_in_place(server, nfs4, body) {
            Some((head, args, putfh, write, used)) => {
                let small = data::is_small_compound(body.fragment_remaining());
                body.consume(used);
                let tail_len = body.fragment_remaining() as usize - write.payload_len();
                let ops = write_ops(head.numops, putfh, write);
                (head, args, ops, Some((small, tail_len)))
            }
            None => return Err(NotInPlace::Whole(exports, call)),
        },
    };
    let request_len = Some(body.record_len_so_far());
    let xid = call.xid;
    let numops = head.numops;
    let mut compound = new_compound(exports, call, head, ops);
    let slot = match nfs4.state.sequence(&args, conn, numops, request_len) {
        Sequenced::New(slot) => slot,
        Sequenced::Replay(res) => return Ok(Received::Reply(reply::replay(xid, &res))),
        Sequenced::Error(status) => return Ok(answered_by_sequence(compound, status)),
    };
    if numops > 1 && body.record_len_so_far() > u64::from(slot.max_request()) {
        // As [`receive`] finds it after the first op.
        drop(slot);
        return Ok(answered_by_sequence(compound, Nfsstat4::ReqTooBig));
    }
    compound.slot = Some(slot);
    match write {
        None => Ok(Received::Run(compound)),
        Some((small, tail_len)) => Err(NotInPlace::Write(WriteRest {
            compound,
            small,
            tail_len,
        })),
    }
}

/// The ops after SEQUENCE of a WRITE COMPOUND of `numops` ops (at most
/// [`IN_PLACE_MAX_OPS`]) as [`receive_in_place`] takes it: PUTFH and
/// WRITE, with room for the ops after the payload that [`decode_tail`]
/// pushes (a `vec!` of two grew for the usual GETATTR: a second
/// allocation and a copy every WRITE).
fn write_ops(numops: u32, putfh: ArgOp, write: WriteHead4) -> Vec<ArgOp> {
    let mut ops = Vec::with_capacity(numops.clamp(3, IN_PLACE_MAX_OPS) as usize - 1);
    ops.extend([putfh, ArgOp::Write(write)]);
    ops
}

/// The rest of a WRITE COMPOUND [`receive_in_place`] took up to its
/// payload: the payload, placed as [`receive`] places a first WRITE's,
/// then the ops after it, decoded from the few bytes left of the record
/// (a WRITE among them has its payload staged from there).
pub async fn receive_write<R: CallStream>(
    server: &Server,
    conn: &ConnInfo,
    rest: WriteRest,
    body: &mut RecordReader<R>,
) -> Result<Received<Box<Compound>>, RecordError> {
    let WriteRest {
        mut compound,
        small,
        tail_len,
    } = rest;
    let payload = match &compound.ops[..] {
        [ArgOp::Putfh(putfh), ArgOp::Write(write)] => {
            let fh = Some(putfh.object.as_bytes());
            data::receive_payload(
                server,
                &compound.exports,
                conn,
                fh,
                true,
                small,
                write,
                body,
            )
            .await?
        }
        // Never so (`receive_in_place` made it); the payload is left to
        // the connection, which skips the record's rest.
        _ => Payload::Skipped(Some(Nfsstat4::Serverfault)),
    };
    compound.data.payloads.push_back(payload);
    if compound.numops > 3 {
        // Decoded where the payload's last read left them, usually;
        // else read whole first.
        if body.peek().len() >= tail_len {
            decode_tail(server, &mut compound, &body.peek()[..tail_len])?;
            body.consume(tail_len);
        } else {
            let mut tail = vec![0; tail_len];
            body.read_exact(&mut tail).await?;
            decode_tail(server, &mut compound, &tail)?;
        }
    }
    Ok(Received::Run(compound))
}

/// The ops of a WRITE COMPOUND after its first WRITE's payload, from
/// `tail`, the rest of its record: what [`receive`]'s loop makes of
/// them, with the record ending where `tail` does.
fn decode_tail(server: &Server, compound: &mut Compound, tail: &[u8]) -> Result<(), RecordError> {
    let mut rest = tail;
    for _ in 3..compound.numops {
        // The record ends before the opnum: as `OpReader::next`'s read.
        let opnum = opnum_at(rest).ok_or(RecordError::PastEnd)?;
        let Some((op, used)) = decode_bounded(rest, compound.minor) else {
            compound.refused = Some((opnum, Nfsstat4::Badxdr));
            break;
        };
        rest = &rest[used..];
        if let ArgOp::Write(write) = &op {
            let data = rest
                .get(..write.payload_len())
                .ok_or(RecordError::PastEnd)?;
            rest = &rest[data.len()..];
            let data = &data[..write.data_len as usize];
            let payload = if write.data_len > server.max_args {
                Payload::Skipped(Some(Nfsstat4::Inval))
            } else {
                match dionfs_transport::stage_bytes(data, &server.staging) {
                    Some(staged) => Payload::Staged(staged),
                    None => Payload::Skipped(Some(Nfsstat4::Delay)),
                }
            };
            compound.data.payloads.push_back(payload);
        }
        let ends = ends_decoding(&op);
        compound.ops.push(op);
        if ends {
            break;
        }
    }
    Ok(())
}

/// The head, SEQUENCE's arguments and the other ops of a COMPOUND
/// [`receive_in_place`] can take, and how many bytes they fill; `None`
/// if it cannot.
fn decode_in_place<R: CallStream>(
    nfs4: &Nfs4,
    body: &RecordReader<R>,
) -> Option<(CompoundHead, SequenceArgs4, Vec<ArgOp>, usize)> {
    let bytes = body.peek();
    if !body.is_last_fragment() || bytes.len() != body.fragment_remaining() as usize {
        return None;
    }
    if let Some(read) = decode_read(bytes).filter(|r| nfs4.serves_minor(r.0.minorversion)) {
        return Some(read);
    }
    let (head, mut at) = usual_head(nfs4, bytes, 1)?;
    let mut next = || {
        let rest = bytes.get(at..)?;
        if opnum_at(rest)? == Opnum4::Write.as_u32() {
            // Left whole to [`receive`], before decoding anything more.
            return None;
        }
        let (op, used) = decode_bounded(rest, head.minorversion)?;
        at += used;
        Some(op)
    };
    let ArgOp::Sequence(args) = next()? else {
        return None;
    };
    let mut ops = Vec::with_capacity(head.numops as usize - 1);
    for _ in 1..head.numops {
        let op = next()?;
        if ends_decoding(&op) {
            return None;
        }
        ops.push(op);
    }
    Some((head, args, ops, at))
}

/// The head, SEQUENCE's arguments, PUTFH and the WRITE's head of a WRITE
/// COMPOUND [`receive_in_place`] can take up to its payload, and how many
/// bytes they fill; `None` if it cannot.
fn decode_write_in_place<R: CallStream>(
    server: &Server,
    nfs4: &Nfs4,
    body: &RecordReader<R>,
) -> Option<(CompoundHead, SequenceArgs4, ArgOp, WriteHead4, usize)> {
    if !body.is_last_fragment() {
        return None;
    }
    let bytes = body.peek();
    let start = usual_start(bytes, 3..=IN_PLACE_MAX_OPS);
    let (head, args, putfh, write, at) = match start {
        Some(start) if nfs4.serves_minor(start.head.minorversion) => {
            let mut dec = Decoder::new(bytes.get(start.at..)?);
            if dec.u32().ok()? != Opnum4::Write.as_u32() {
                return None;
            }
            let write = WriteHead4::decode(&mut dec).ok()?;
            let at = start.at + dec.position();
            (start.head, start.sequence, start.putfh, write, at)
        }
        _ => {
            let (head, mut at) = usual_head(nfs4, bytes, 3)?;
            let mut next = || {
                let (op, used) = decode_bounded(bytes.get(at..)?, head.minorversion)?;
                at += used;
                Some(op)
            };
            let (ArgOp::Sequence(args), putfh @ ArgOp::Putfh(_), ArgOp::Write(write)) =
                (next()?, next()?, next()?)
            else {
                return None;
            };
            (head, args, putfh, write, at)
        }
    };
    // The payload in this fragment, at most the server's transfer size,
    // and few bytes after it.
    let after = (body.fragment_remaining() as usize).checked_sub(at)?;
    let tail_len = after.checked_sub(write.payload_len())?;
    if tail_len > WRITE_TAIL_MAX || write.data_len > server.max_args {
        return None;
    }
    Some((head, args, putfh, write, at))
}

/// The head, SEQUENCE and PUTFH of a data COMPOUND, as [`usual_start`]
/// decodes them.
struct UsualStart {
    head: CompoundHead,
    sequence: SequenceArgs4,
    putfh: ArgOp,
    /// Where the op after PUTFH starts.
    at: usize,
}

/// The head, SEQUENCE and PUTFH of a data COMPOUND as clients send them
/// (Linux, dionfs-loadgen: an empty tag, SEQUENCE, PUTFH, then READ or
/// WRITE), `numops` ops in all, decoded at their fixed places, with what
/// the general decode ([`usual_head`], [`decode_bounded`]) would check
/// of them but the minor version, which the caller checks is served:
/// callgrind counted that decode at 870 instructions of a 4 KiB READ
/// over v4.1, one op at a time through the op table. `None` for
/// anything else.
fn usual_start(bytes: &[u8], numops: std::ops::RangeInclusive<u32>) -> Option<UsualStart> {
    let mut dec = Decoder::new(bytes);
    // An empty tag: nothing to check of it.
    if dec.u32().ok()? != 0 {
        return None;
    }
    let minorversion = dec.u32().ok()?;
    let numops_sent = dec.u32().ok()?;
    // Minor version 0 has no SEQUENCE.
    if minorversion == 0 || !numops.contains(&numops_sent) {
        return None;
    }
    if dec.u32().ok()? != Opnum4::Sequence.as_u32() {
        return None;
    }
    let sequence = SequenceArgs4::decode(&mut dec).ok()?;
    if dec.u32().ok()? != Opnum4::Putfh.as_u32() {
        return None;
    }
    let putfh = ArgOp::Putfh(PutfhArgs4::decode(&mut dec).ok()?);
    Some(UsualStart {
        head: CompoundHead {
            tag: Utf8Str::default(),
            minorversion,
            numops: numops_sent,
        },
        sequence,
        putfh,
        at: dec.position(),
    })
}

/// [`decode_in_place`] of the READ COMPOUND (SEQUENCE, PUTFH, READ) as
/// [`usual_start`] takes it (the minor version left to the caller).
fn decode_read(bytes: &[u8]) -> Option<(CompoundHead, SequenceArgs4, Vec<ArgOp>, usize)> {
    let start = usual_start(bytes, 3..=3)?;
    let mut dec = Decoder::new(bytes.get(start.at..)?);
    if dec.u32().ok()? != Opnum4::Read.as_u32() {
        return None;
    }
    let read = ArgOp::Read(ReadArgs4::decode(&mut dec).ok()?);
    let at = start.at + dec.position();
    Some((start.head, start.sequence, vec![start.putfh, read], at))
}

/// The head at the start of `bytes` and its length, if it decodes and
/// is the usual kind the in-place receives take: at least `min_ops` and
/// at most [`IN_PLACE_MAX_OPS`] ops, a minor version served, a UTF-8
/// tag. Anything else is [`receive`]'s to answer.
fn usual_head(nfs4: &Nfs4, bytes: &[u8], min_ops: u32) -> Option<(CompoundHead, usize)> {
    let mut dec = Decoder::new(bytes);
    let head = CompoundHead::decode(&mut dec).ok()?;
    let usual = (min_ops..=IN_PLACE_MAX_OPS).contains(&head.numops)
        && nfs4.serves_minor(head.minorversion)
        && is_utf8_text(head.tag.as_bytes());
    usual.then(|| (head, dec.position()))
}

/// `compound` answered by its SEQUENCE alone, with `status`: none of its
/// ops runs, so they and their payloads are dropped now.
fn answered_by_sequence(mut compound: Box<Compound>, status: Nfsstat4) -> Received<Box<Compound>> {
    compound.ops.clear();
    compound.data = DataIo::default();
    compound.refused = Some((Opnum4::Sequence.as_u32(), status));
    Received::Run(compound)
}

/// A COMPOUND as received so far: its head, and `ops` after SEQUENCE.
fn new_compound(
    exports: Arc<Exports>,
    call: CallHeader,
    head: CompoundHead,
    ops: Vec<ArgOp>,
) -> Box<Compound> {
    Box::new(Compound {
        exports,
        call,
        tag: head.tag,
        minor: head.minorversion,
        numops: head.numops,
        slot: None,
        ops,
        refused: None,
        data: DataIo::default(),
        resume: None,
    })
}

/// The COMPOUND's head decoded from the bytes `body` has read ahead
/// ([`RecordReader::peek`]) and consumed, if they hold all of it and it
/// decodes; else `None`, nothing consumed.
fn head_in_place<R: CallStream>(body: &mut RecordReader<R>) -> Option<CompoundHead> {
    let mut dec = Decoder::new(body.peek());
    let head = CompoundHead::decode(&mut dec).ok()?;
    let used = dec.position();
    body.consume(used);
    Some(head)
}

/// Whether the ops after `op` are left unread: it fails whatever it
/// finds, which ends the COMPOUND, and for all but SEQUENCE the bytes
/// after its opnum are not known to be an op (NOTSUPP and OP_ILLEGAL
/// consume only their opnum).
fn ends_decoding(op: &ArgOp) -> bool {
    matches!(
        op,
        ArgOp::Sequence(_) | ArgOp::NotSupp(_) | ArgOp::Illegal(_)
    )
}

/// Whether `bytes` are UTF-8 text: valid UTF-8 without the
/// noncharacters U+FFFE and U+FFFF.
fn is_utf8_text(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok_and(|s| !s.contains(['\u{FFFE}', '\u{FFFF}']))
}

/// The next op of a COMPOUND, as read.
enum Next {
    Op(ArgOp),
    /// The op cannot run: its opnum and why (`BADXDR`: its arguments do
    /// not decode, are longer than the op's can be, or the record ends
    /// inside them).
    Refused(u32, Nfsstat4),
}

/// Reads a COMPOUND's ops from its record one at a time.
struct OpReader<'a, R> {
    body: &'a mut RecordReader<R>,
    minor: u32,
    /// Bytes read and not yet decoded.
    buf: Vec<u8>,
}

impl<'a, R: CallStream> OpReader<'a, R> {
    fn new(body: &'a mut RecordReader<R>, minor: u32) -> Self {
        Self {
            body,
            minor,
            buf: Vec::new(),
        }
    }

    /// Reads and decodes the next op, reading exactly the bytes its
    /// decoder asks for (never the next op's) and never more than its
    /// bound. A record
    /// that ends before the op's opnum is an RPC-level error (GARBAGE_ARGS,
    /// as knfsd answers), one that ends inside its arguments its `BADXDR`.
    async fn next(&mut self) -> Result<Next, RecordError> {
        if let Some(op) = self.in_place() {
            return Ok(Next::Op(op));
        }
        if self.buf.len() < 4 {
            let have = self.buf.len();
            self.buf.resize(4, 0);
            self.body.read_exact(&mut self.buf[have..]).await?;
        }
        let opnum = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        let limit = op_bound(opnum);
        loop {
            match decode_op(&self.buf, self.minor) {
                Ok((op, used)) => {
                    self.buf.drain(..used);
                    return Ok(Next::Op(op));
                }
                Err(XdrError::Truncated { needed, available }) => {
                    let more = needed.saturating_sub(available).max(1);
                    if self.buf.len() + more > limit {
                        return Ok(Next::Refused(opnum, Nfsstat4::Badxdr));
                    }
                    let start = self.buf.len();
                    self.buf.resize(start + more, 0);
                    let got = self.body.read_up_to(&mut self.buf[start..]).await?;
                    if got < more {
                        return Ok(Next::Refused(opnum, Nfsstat4::Badxdr));
                    }
                }
                // pynfs EID3: a malformed op is BADXDR, which ends the
                // COMPOUND.
                Err(_) => return Ok(Next::Refused(opnum, Nfsstat4::Badxdr)),
            }
        }
    }

    /// The next op decoded from the bytes the record reader has read
    /// ahead ([`RecordReader::peek`]), at most its bound of them, and
    /// consumed: no copy, no await, and never a byte past it consumed.
    /// `None` when they do not hold all of it or it does not decode:
    /// [`Self::next`] then reads it byte-exact and says why.
    fn in_place(&mut self) -> Option<ArgOp> {
        if !self.buf.is_empty() {
            return None;
        }
        let (op, used) = decode_bounded(self.body.peek(), self.minor)?;
        self.body.consume(used);
        Some(op)
    }
}

/// The opnum at the start of `bytes`, if they hold one.
fn opnum_at(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}

/// The op at the start of `bytes` and how many bytes it takes, decoded
/// from at most its bound of them; `None` if they do not hold all of it
/// or it does not decode.
fn decode_bounded(bytes: &[u8], minor: u32) -> Option<(ArgOp, usize)> {
    let limit = op_bound(opnum_at(bytes)?);
    decode_op(&bytes[..bytes.len().min(limit)], minor).ok()
}

/// The most bytes op `opnum`'s arguments (its head, for WRITE) take,
/// opnum included: 4 for an opnum no op has.
fn op_bound(opnum: u32) -> usize {
    match Opnum4::from_u32(opnum).map(Opnum4::max_args_len) {
        Some(ArgsLimit::Whole(n) | ArgsLimit::HeadThenPayload(n)) => n,
        None => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_must_be_utf8_text() {
        assert!(is_utf8_text(b"") && is_utf8_text("mount \u{e9}".as_bytes()));
        for bad in [
            &b"\xc0\xaf"[..],
            b"\xed\xa0\x80",
            b"\xef\xbf\xbe",
            b"\x80",
            b"\xf0 ",
        ] {
            assert!(!is_utf8_text(bad), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod fixed_tests {
    use super::*;
    use dionfs_proto::nfs4::{NfsFh4, SessionId4, StableHow4, StateId4};
    use dionfs_xdr::Encode;

    /// A COMPOUND's arguments: `tag`, `minor`, `numops`, then `ops`.
    fn compound(tag: &[u8], minor: u32, numops: u32, ops: &[ArgOp]) -> Vec<u8> {
        let mut bytes = CompoundHead {
            tag: Utf8Str(tag.to_vec()),
            minorversion: minor,
            numops,
        }
        .to_xdr();
        for op in ops {
            bytes.extend(op.to_xdr());
        }
        bytes
    }

    fn sequence() -> ArgOp {
        ArgOp::Sequence(SequenceArgs4 {
            sessionid: SessionId4([7; 16]),
            sequenceid: 9,
            slotid: 3,
            highest_slotid: 15,
            cachethis: false,
        })
    }

    fn putfh(len: usize) -> ArgOp {
        let fh = (0..len).map(|i| i as u8 ^ 0x5a).collect();
        ArgOp::Putfh(PutfhArgs4 {
            object: NfsFh4::new(fh).unwrap(),
        })
    }

    fn read() -> ArgOp {
        ArgOp::Read(ReadArgs4 {
            stateid: StateId4 {
                seqid: 1,
                other: [3; 12],
            },
            offset: 1 << 33,
            count: 4096,
        })
    }

    fn write() -> ArgOp {
        ArgOp::Write(WriteHead4 {
            stateid: StateId4 {
                seqid: 2,
                other: [4; 12],
            },
            offset: 12288,
            stable: StableHow4::Unstable,
            data_len: 4096,
        })
    }

    /// What the general decode makes of `bytes`: the head, its first
    /// `count` ops and where they end (`None` if one does not decode).
    fn general(bytes: &[u8], minor: u32, count: u32) -> Option<(CompoundHead, Vec<ArgOp>, usize)> {
        let mut dec = Decoder::new(bytes);
        let head = CompoundHead::decode(&mut dec).ok()?;
        let mut at = dec.position();
        let mut ops = Vec::new();
        for _ in 0..head.numops.min(count) {
            let (op, used) = decode_bounded(bytes.get(at..)?, minor)?;
            at += used;
            ops.push(op);
        }
        Some((head, ops, at))
    }

    /// Each byte of `bytes` changed to values that matter to a decoder
    /// (lengths, opnums, booleans), and each prefix: whatever the fixed
    /// decode takes, the general decode takes the same way.
    fn agrees_with_general(bytes: &[u8]) -> usize {
        let mut taken = 0;
        let mut variants = vec![bytes.to_vec()];
        for at in 0..bytes.len() {
            for value in [0, 1, 2, 3, 4, 22, 25, 38, 53, 0x80, 0xff] {
                let mut v = bytes.to_vec();
                v[at] = value;
                variants.push(v);
            }
            variants.push(bytes[..at].to_vec());
        }
        for v in &variants {
            if let Some((head, sequence, ops, used)) = decode_read(v) {
                let minor = head.minorversion;
                let general = general(v, minor, 3);
                let (ghead, gops, gused) = general.expect("the general decode fails");
                assert_eq!((head, used), (ghead, gused));
                let mut all = vec![ArgOp::Sequence(sequence)];
                all.extend(ops);
                assert_eq!(all, gops);
                taken += 1;
            }
            if let Some(start) = usual_start(v, 3..=IN_PLACE_MAX_OPS) {
                let minor = start.head.minorversion;
                let general = general(v, minor, 2);
                let (ghead, gops, gused) = general.expect("the general decode fails");
                assert_eq!((start.head, start.at), (ghead, gused));
                assert_eq!(gops, [ArgOp::Sequence(start.sequence), start.putfh]);
            }
        }
        taken
    }

    #[test]
    fn the_fixed_decode_of_a_read_is_the_general_one() {
        for fh in [1, 3, 28, 64, 128] {
            for minor in [1, 2] {
                let bytes = compound(b"", minor, 3, &[sequence(), putfh(fh), read()]);
                let (head, _, ops, used) = decode_read(&bytes).expect("the usual READ");
                assert_eq!((head.numops, used), (3, bytes.len()));
                assert_eq!(ops, [putfh(fh), read()]);
                assert!(agrees_with_general(&bytes) > 1);
            }
        }
        // Not the usual READ: left to the general decode.
        for bytes in [
            compound(b"t", 1, 3, &[sequence(), putfh(28), read()]),
            compound(b"", 0, 3, &[sequence(), putfh(28), read()]),
            compound(b"", 1, 4, &[sequence(), putfh(28), read(), read()]),
            compound(b"", 1, 3, &[sequence(), putfh(28), write()]),
        ] {
            assert!(decode_read(&bytes).is_none());
        }
    }

    #[test]
    fn the_fixed_decode_of_a_write_start_is_the_general_one() {
        let bytes = compound(b"", 1, 4, &[sequence(), putfh(28), write()]);
        let start = usual_start(&bytes, 3..=IN_PLACE_MAX_OPS).expect("the usual WRITE");
        assert_eq!(start.putfh, putfh(28));
        agrees_with_general(&bytes);
        let bytes = compound(b"", 1, 9, &[sequence(), putfh(28), write()]);
        assert!(usual_start(&bytes, 3..=IN_PLACE_MAX_OPS).is_none());
    }

    #[test]
    fn a_write_compounds_ops_have_room_for_the_ops_after_its_payload() {
        let ArgOp::Write(head) = write() else {
            unreachable!()
        };
        for numops in 3..=IN_PLACE_MAX_OPS {
            let ops = write_ops(numops, putfh(28), head);
            assert_eq!(ops, [putfh(28), write()]);
            assert!(ops.capacity() >= numops as usize - 1, "{numops} ops");
        }
    }
}
