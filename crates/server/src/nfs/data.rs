//! READ, WRITE, COMMIT (RFC 1813 sections 3.3.6, 3.3.7, 3.3.21): the bridge
//! between the protocol and the data plane.
//!
//! WRITE is received in phases (`receive_write`): the arguments up to the
//! payload length; then a wait, holding nothing, until the payload is in
//! the socket; then the payload straight from the socket into a write-pool
//! buffer, at the position the data plane's direct-I/O path wants. READ
//! replies send the file data from the read-pool buffer it was read into.
//! What NFSv4 shares of this (the payload's receipt, the permission check,
//! readahead) is in `crate::io`.

use std::sync::Arc;

use dionfs_dataplane::{
    DataError, PooledBuf, ReadAttempt, ReadData, Stable, WriteAttempt, WriteBuffer, WriteDone,
};
use dionfs_fs::{ops, Attr, FsError, OpenFile};
use dionfs_proto::nfs3::*;
use dionfs_rpc::{CallHeader, RecordError, RecordReader};
use dionfs_xdr::{Decode, Decoder};

use super::attrs::open_file_attr;
use super::convert::{post_op, wcc};
use super::status::{from_data, from_fs};
use super::Ctx;
use crate::io::{self, ReadPayload};
use crate::reply::{garbage_args, success, success_encoder};
use dionfs_core::delegations::{Access, Busy};
use dionfs_core::exports::{Export, Exports};
use dionfs_core::io_errors::IoProc;
use dionfs_core::server::Server;
use dionfs_transport::{CallStream, ConnInfo, Received, Reply};

/// A WRITE whose arguments have been received: either its payload sits in
/// a data-plane buffer of its export ready to be written, or the call
/// already failed (bad handle, read-only export, ...) and its payload was
/// skipped.
pub struct ReceivedWrite {
    head: WriteArgsHead,
    /// The exports taken when the call was received.
    exports: Arc<Exports>,
    /// The export (its id in `exports`), the file and the payload.
    target: Result<(u16, Arc<OpenFile>, WriteBuffer), NfsStat3>,
    /// The file held busy for the delegation index until written.
    _busy: Option<Busy>,
}

impl ReceivedWrite {
    /// Whether this WRITE starts on the connection's task ([`write_call`]):
    /// an aligned direct write the ring may take, or a small UNSTABLE
    /// write the page cache may take without waiting
    /// (`DataPlane::may_write_on_task`). Anything else goes straight to a
    /// blocking thread, with no detour through a task.
    pub fn starts_on_task(&self, server: &Server) -> bool {
        let Ok((export_id, file, buf)) = &self.target else {
            return false;
        };
        let Some(export) = self.exports.by_id(*export_id) else {
            return false;
        };
        io::may_write_on_task(export, file, buf, stable(self.head.stable))
            || server.io_ring.is_some() && export.data.ring_may_write(file.data(), buf)
    }
}

/// Whether a READ with arguments `args` may be read through the ring
/// ([`read_call`]): `io::read_may_use_ring`. Anything else goes straight
/// to a blocking thread.
pub fn read_may_use_ring(server: &Server, exports: &Exports, args: &[u8]) -> bool {
    let Ok(a) = ReadArgs::decode(&mut Decoder::new(args)) else {
        return false;
    };
    let fh = a.file.as_bytes();
    dionfs_fs::handle::export_id(fh)
        .and_then(|id| exports.by_id(id))
        .is_some_and(|x| io::read_may_use_ring(server, x))
}

/// Receives a WRITE call's arguments from the connection (see the module
/// documentation). Waiting for the payload or a pool buffer here is
/// backpressure: the connection reads nothing else meanwhile.
pub async fn receive_write<R: CallStream>(
    server: &Server,
    exports: Arc<Exports>,
    conn: &ConnInfo,
    call: CallHeader,
    body: &mut RecordReader<R>,
) -> Result<Received<(Box<CallHeader>, ReceivedWrite)>, RecordError> {
    let fh_len = body.read_u32().await?;
    if fh_len as usize > NFS3_FHSIZE {
        return Ok(Received::Reply(garbage_args(call.xid)));
    }
    let mut head = vec![0u8; write_head_len(fh_len as usize)];
    head[..4].copy_from_slice(&fh_len.to_be_bytes());
    body.read_exact(&mut head[4..]).await?;
    let Ok(args) = WriteArgsHead::decode_with_max(&mut Decoder::new(&head), server.max_args) else {
        return Ok(Received::Reply(garbage_args(call.xid)));
    };
    // RFC 1813 3.3.7: `count` is the size of `data`; a mismatch is garbage.
    if args.count != args.data_len {
        return Ok(Received::Reply(garbage_args(call.xid)));
    }
    let ctx = Ctx {
        server,
        exports: &exports,
        conn,
        call: &call,
    };
    let mut busy = None;
    let target = write_target(&ctx, &args).and_then(|(export, file)| {
        busy = Some(ctx.delegation(args.file.as_bytes(), Access::Write)?);
        Ok((export, file))
    });
    let target = match target {
        // The payload's padding, and all of it after a refusal, is left
        // in the record, which skips what a call did not read.
        Ok((export, file)) => io::receive_payload(
            body,
            export,
            &file,
            args.offset,
            args.data_len as usize,
            &server.staging,
        )
        .await?
        .map(|buf| (export.config.id, file, buf))
        .map_err(|refused| from_data(&refused.error)),
        Err(s) => Err(s),
    };
    Ok(Received::Run((
        Box::new(call),
        ReceivedWrite {
            head: args,
            exports,
            target,
            _busy: busy,
        },
    )))
}

/// Finds the export and the file a WRITE is for.
fn write_target<'a>(
    ctx: &Ctx<'a>,
    args: &WriteArgsHead,
) -> Result<(&'a Export, Arc<OpenFile>), NfsStat3> {
    let export = ctx.export(&args.file)?;
    ctx.writable(export)?;
    let file = io::file_to_write(export, args.file.as_bytes()).map_err(from_fs)?;
    Ok((export, file))
}

fn stable(s: StableHow) -> Stable {
    match s {
        StableHow::Unstable => Stable::Unstable,
        StableHow::DataSync => Stable::DataSync,
        StableHow::FileSync => Stable::FileSync,
    }
}

fn stable_how(s: Stable) -> StableHow {
    match s {
        Stable::Unstable => StableHow::Unstable,
        Stable::DataSync => StableHow::DataSync,
        Stable::FileSync => StableHow::FileSync,
    }
}

/// Runs a received WRITE (blocking).
pub fn write(server: &Server, conn: &ConnInfo, call: &CallHeader, w: ReceivedWrite) -> Reply {
    let xid = call.xid;
    let res = match w.target {
        Err(s) => WriteRes::fail(
            s,
            WriteResFail {
                file_wcc: WccData::default(),
            },
        ),
        Ok((export_id, file, buf)) => match w.exports.by_id(export_id) {
            None => WriteRes::fail(
                NfsStat3::Stale,
                WriteResFail {
                    file_wcc: WccData::default(),
                },
            ),
            Some(export) => {
                let ctx = Ctx {
                    server,
                    exports: &w.exports,
                    conn,
                    call,
                };
                write_file(&ctx, export, &file, buf, w.head.stable)
            }
        },
    };
    success(xid, &res)
}

fn write_file(
    ctx: &Ctx,
    export: &Export,
    file: &OpenFile,
    buf: WriteBuffer,
    how: StableHow,
) -> WriteRes {
    let before = match ops::file_attr(&export.fs, file) {
        Err(FsError::Stale) => {
            return NfsRes::fail(
                NfsStat3::Stale,
                WriteResFail {
                    file_wcc: WccData::default(),
                },
            )
        }
        other => other.ok(),
    };
    // The write itself runs as the caller too, so the kernel treats it as
    // that user's own: set-id bits cleared without CAP_FSETID, quotas and
    // reserved blocks enforced without CAP_SYS_RESOURCE.
    let result = ctx
        .run_as_user(export, || {
            check_io_access(ctx, export, file, true, before.as_ref())?;
            export
                .data
                .write(file.data(), buf, stable(how))
                .map_err(|e| write_error(ctx, file, &e))
        })
        .and_then(|written| written);
    write_res(ctx, export, file, before, result)
}

fn write_error(ctx: &Ctx, file: &OpenFile, e: &DataError) -> NfsStat3 {
    ctx.server.io_error_logs.log(IoProc::Write, file, None, e);
    from_data(e)
}

/// A WRITE on the connection's task: an aligned direct write of an open
/// file whose range is free is submitted from here to the ring as the
/// caller (a ring personality with the caller's credentials) and answered
/// when it completes; a small UNSTABLE overwrite of cached pages is
/// written from here as the caller and answered at once.
/// Anything else runs on a blocking thread as before.
pub async fn write_call(
    server: Arc<Server>,
    conn: Arc<ConnInfo>,
    call: Box<CallHeader>,
    w: ReceivedWrite,
) -> Option<Reply> {
    let w = match write_without_blocking(&server, &conn, &call, w).await {
        Ok(reply) => return Some(reply),
        Err(w) => w,
    };
    io::on_blocking_thread("WRITE", move || Some(write(&server, &conn, &call, w))).await
}

/// [`write_call`]'s fast path; `Err` gives the call back, untouched, for
/// the blocking path (which also answers every refusal).
async fn write_without_blocking(
    server: &Server,
    conn: &ConnInfo,
    call: &CallHeader,
    w: ReceivedWrite,
) -> Result<Reply, ReceivedWrite> {
    let ReceivedWrite {
        head,
        exports,
        target,
        _busy: busy,
    } = w;
    let (export_id, file, buf) = match target {
        Ok(target) => target,
        Err(s) => {
            return Err(ReceivedWrite {
                head,
                exports,
                target: Err(s),
                _busy: busy,
            })
        }
    };
    let how = stable(head.stable);
    let back = |file, buf| ReceivedWrite {
        head,
        exports: exports.clone(),
        target: Ok((export_id, file, buf)),
        _busy: busy,
    };
    let Some(export) = exports.by_id(export_id) else {
        return Err(back(file, buf));
    };
    let ctx = Ctx {
        server,
        exports: &exports,
        conn,
        call,
    };
    let on_task = export.data.may_write_on_task(file.data(), buf.len(), how);
    let ring = server.io_ring.as_ref().filter(|_| !on_task);
    if !on_task && ring.is_none() {
        return Err(back(file, buf));
    }
    // Short, non-blocking calls (a statx of an open file, maybe a
    // permission check), so made on this task's thread.
    let Ok(before) = ops::file_attr(&export.fs, &file) else {
        return Err(back(file, buf));
    };
    if !allowed_without_blocking(&ctx, export, &file, true, &before) {
        return Err(back(file, buf));
    }
    let Some(ring) = ring else {
        // A small overwrite of cached pages, made here as the caller (the
        // thread's credentials switched and back, as a blocking thread
        // would) if nothing would make it wait long.
        let result =
            match ctx.run_as_user(export, || export.data.write_on_task(file.data(), buf, how)) {
                Ok(WriteAttempt::Blocking(buf)) => return Err(back(file, buf)),
                Ok(WriteAttempt::Done(result)) => result.map_err(|e| write_error(&ctx, &file, &e)),
                Err(s) => Err(s),
            };
        return Ok(success(
            call.xid,
            &write_res(&ctx, export, &file, Some(before), result),
        ));
    };
    let Some(personality) = server.ring_personality(ring, &ctx.creds(export)) else {
        return Err(back(file, buf));
    };
    let before = Some(before);
    let written = export
        .data
        .write_without_blocking(ring, file.data(), buf, how, personality)
        .await;
    let result = match written {
        WriteAttempt::Blocking(buf) => return Err(back(file, buf)),
        WriteAttempt::Done(result) => result.map_err(|e| write_error(&ctx, &file, &e)),
    };
    Ok(success(
        call.xid,
        &write_res(&ctx, export, &file, before, result),
    ))
}

/// A WRITE's result: wcc data around it (the attributes before, one statx
/// after) and, if it worked, what was written and how durably.
fn write_res(
    ctx: &Ctx,
    export: &Export,
    file: &OpenFile,
    before: Option<Attr>,
    result: Result<WriteDone, NfsStat3>,
) -> WriteRes {
    let after = open_file_attr(export, file);
    let file_wcc = wcc(before.as_ref(), after.as_ref());
    match result {
        Ok(done) => NfsRes::Ok(WriteResOk {
            file_wcc,
            count: done.count as u32,
            committed: stable_how(done.committed),
            verf: WriteVerf3(ctx.server.write_verifier()),
        }),
        Err(s) => NfsRes::fail(s, WriteResFail { file_wcc }),
    }
}

/// READ (blocking) into `buf`, the read-pool buffer taken while the call
/// was received: the reply's data goes out from it.
pub fn read(ctx: &Ctx, a: ReadArgs, buf: Option<PooledBuf>) -> Reply {
    let export = match ctx.export(&a.file) {
        Ok(x) => x,
        Err(s) => return read_failed(ctx, s, None),
    };
    // Another client's write delegation: its data is the holder's.
    if let Err(s) = ctx.delegation_read(a.file.as_bytes()) {
        return read_failed(ctx, s, None);
    }
    // (A file new to a full checksum store is read unchecked.)
    let file = match export.fs.open_file_to_read(a.file.as_bytes()) {
        Ok(f) => f,
        Err(e) => return read_failed(ctx, from_fs(e), None),
    };
    // The attributes come before the read (see `read_without_blocking`).
    let attr = match ops::file_attr(&export.fs, &file) {
        // Deleted behind our back: its data is not sent.
        Err(FsError::Stale) => return read_failed(ctx, NfsStat3::Stale, None),
        other => other.ok(),
    };
    // Checked as the caller. The read itself needs no credentials: reading
    // an open descriptor checks no permission.
    let data = check_io_access(ctx, export, &file, false, attr.as_ref()).and_then(|()| {
        // Receiving took a buffer for every READ that gets this far,
        // unless there was no memory for one.
        buf.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory).into())
            .and_then(|buf| export.data.read(file.data(), buf, a.offset, a.count))
            .map_err(|e| read_error(ctx, &file, &a, &e))
    });
    read_reply(ctx, &file, attr, data)
}

/// A READ on the connection's task (with io_uring): the direct read of an
/// open file needs no blocking call, so it is submitted from here and the
/// reply sent when it completes. Anything else (a file to open, a cached
/// mode, a range a writer holds, readahead to serve from) goes to a
/// blocking thread as before, with the same buffer.
pub async fn read_call(
    server: Arc<Server>,
    exports: Arc<Exports>,
    conn: Arc<ConnInfo>,
    call: CallHeader,
    args: Vec<u8>,
    buf: Option<PooledBuf>,
) -> Option<Reply> {
    let buf = match (ReadArgs::decode(&mut Decoder::new(&args)), buf) {
        (Ok(a), Some(buf)) => {
            let ctx = Ctx {
                server: &server,
                exports: &exports,
                conn: &conn,
                call: &call,
            };
            match read_without_blocking(&ctx, &a, buf).await {
                Ok(reply) => return Some(reply),
                Err(buf) => Some(buf),
            }
        }
        (_, buf) => buf,
    };
    io::on_blocking_thread("READ", move || {
        super::call(&server, &exports, &conn, &call, &args, buf)
    })
    .await
}

/// [`read_call`]'s fast path; `Err` hands the buffer back for the
/// blocking path. The checks that can fail (export, permission) answer
/// here only when they pass, so every refusal is logged and answered by
/// [`read`] alone.
async fn read_without_blocking(
    ctx: &Ctx<'_>,
    a: &ReadArgs,
    buf: PooledBuf,
) -> Result<Reply, PooledBuf> {
    let Some(ring) = &ctx.server.io_ring else {
        return Err(buf);
    };
    let Some(export) = ctx.exports.for_client(ctx.conn, a.file.as_bytes()) else {
        return Err(buf);
    };
    let Ok(Some(file)) = export.fs.cached_file(a.file.as_bytes()) else {
        return Err(buf);
    };
    if ctx.delegation_read(a.file.as_bytes()).is_err() {
        return Err(buf);
    }
    if export.data.read_leaves_task(file.data()) {
        return Err(buf);
    }
    // Short, non-blocking calls (a statx of an open file, maybe a
    // permission check), so made on this task's thread. The reply carries
    // these attributes, taken before the read: the data sent is never
    // older than they say (the other order could label old data with a
    // newer change time, which a client would then cache as current).
    let Ok((attr, seen)) = ops::file_attr_seen(&export.fs, &file) else {
        return Err(buf);
    };
    if !allowed_without_blocking(ctx, export, &file, false, &attr) {
        return Err(buf);
    }
    let data = match export
        .data
        .read_without_blocking(ring, file.data(), buf, a.offset, a.count, seen)
        .await
    {
        ReadAttempt::Blocking(buf) => return Err(buf),
        ReadAttempt::Done(data) => data.map_err(|e| read_error(ctx, &file, a, &e)),
    };
    Ok(read_reply(ctx, &file, Some(attr), data))
}

/// Whether the caller may READ (`write == false`) or WRITE `file`, known
/// without blocking: see [`check_io_access`]. A refusal is left to the
/// blocking path, which checks again, logs and answers it.
fn allowed_without_blocking(
    ctx: &Ctx,
    export: &Export,
    file: &OpenFile,
    write: bool,
    attr: &Attr,
) -> bool {
    check_io_access(ctx, export, file, write, Some(attr)).is_ok()
}

/// The permission check of a READ (`write == false`) or WRITE, as the
/// caller on `export` (`io::check_io_access`).
fn check_io_access(
    ctx: &Ctx,
    export: &Export,
    file: &OpenFile,
    write: bool,
    attr: Option<&Attr>,
) -> Result<(), NfsStat3> {
    io::check_io_access(ctx.server, &ctx.creds(export), file, write, attr).map_err(from_fs)
}

fn read_error(ctx: &Ctx, file: &OpenFile, a: &ReadArgs, e: &DataError) -> NfsStat3 {
    ctx.server
        .io_error_logs
        .log(IoProc::Read, file, Some((a.offset, a.count)), e);
    from_data(e)
}

/// A READ's reply: the file's attributes `attr` (from before the read)
/// and, if the read worked, its data, sent from the buffer it was read
/// into.
fn read_reply(
    ctx: &Ctx,
    file: &Arc<OpenFile>,
    attr: Option<Attr>,
    data: Result<ReadData, NfsStat3>,
) -> Reply {
    match data {
        Ok(mut data) => {
            io::start_read_followups(file, &mut data);
            let mut enc = success_encoder(ctx.call.xid);
            let len = data.len() as u32;
            encode_read_ok_head(&mut enc, &post_op(attr.as_ref()), len, data.eof(), len);
            Reply::with_data(enc.into_vec(), Box::new(ReadPayload(data)))
        }
        Err(s) => read_failed(ctx, s, attr.as_ref()),
    }
}

fn read_failed(ctx: &Ctx, s: NfsStat3, attr: Option<&Attr>) -> Reply {
    success(
        ctx.call.xid,
        &ReadRes::fail(
            s,
            ReadResFail {
                file_attributes: post_op(attr),
            },
        ),
    )
}

pub fn commit(ctx: &Ctx, a: CommitArgs) -> CommitRes {
    let fail = |s| {
        NfsRes::fail(
            s,
            CommitResFail {
                file_wcc: WccData::default(),
            },
        )
    };
    let export = match ctx.export(&a.file) {
        Ok(x) => x,
        Err(s) => return fail(s),
    };
    // Nothing new to checksum: a file new to a full checksum store (whose
    // WRITEs all failed) commits as any other.
    let file = match export.fs.open_file_to_read(a.file.as_bytes()) {
        Ok(f) => f,
        Err(e) => return fail(from_fs(e)),
    };
    let before = match ops::file_attr(&export.fs, &file) {
        Err(FsError::Stale) => return fail(NfsStat3::Stale),
        other => other.ok(),
    };
    let result = ctx
        .run_as_user(export, || {
            export.data.commit(file.data(), a.offset, a.count)
        })
        .and_then(|committed| {
            committed.map_err(|e| {
                ctx.server
                    .io_error_logs
                    .log(IoProc::Commit, &file, None, &e);
                from_data(&e)
            })
        });
    let file_wcc = wcc(before.as_ref(), open_file_attr(export, &file).as_ref());
    match result {
        Ok(()) => NfsRes::Ok(CommitResOk {
            file_wcc,
            verf: WriteVerf3(ctx.server.write_verifier()),
        }),
        Err(s) => NfsRes::fail(s, CommitResFail { file_wcc }),
    }
}
