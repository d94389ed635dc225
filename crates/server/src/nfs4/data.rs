//! READ, WRITE and COMMIT (RFC 8881 sections 18.22, 18.32, 18.3; design
//! sections 2 and 8): the same data plane NFSv3 uses, through the same
//! calls (`DataPlane::read`, `write`, `commit`) and the helpers in
//! `crate::io`. There is no second data path.
//!
//! A WRITE's payload is placed while the COMPOUND is received
//! ([`receive_payload`]): the first WRITE of a COMPOUND whose current
//! handle is known goes straight from the socket into a write-pool buffer
//! as v3's does; a later one takes a buffer only if one is free at once;
//! a WRITE to a handle not known at receive has its payload staged
//! (charged to the staging budget). A READ's data is the reply's
//! zero-copy payload ([`CompoundReply::read_data`]).

use std::collections::VecDeque;
use std::sync::Arc;

use dionfs_core::export::ClientOptions;
use dionfs_core::exports::{Export, Exports};
use dionfs_core::io_errors::IoProc;
use dionfs_dataplane::{
    DataError, PooledBuf, ReadAttempt, ReadData, Stable, WriteAttempt, WriteBuffer, WriteDone,
};
use dionfs_fs::handle::NFS3_FHSIZE;
use dionfs_fs::{ops, FileKind, FsError, OpenFile};
use dionfs_proto::nfs4::{
    ArgOp, Attr4, CommitResOk4, Nfsstat4, StableHow4, Verifier4, WriteHead4, WriteResOk4,
};
use dionfs_rpc::{RecordError, RecordReader};
use dionfs_transport::{stage_whole, CallStream, ConnInfo, Staged};
use dionfs_xdr::{pad_len, Encode};

use super::compound::{Compound, OpCtx};
use super::fh::{Fh4, File};
use super::reply::CompoundReply;
use super::state::{resolve_current, Use};
use super::status::{from_data, from_fs};
use crate::io;
use dionfs_core::server::Server;

/// Where a WRITE's payload went while it was received.
pub enum Payload {
    /// Into a write-pool buffer of export `export`, for the file whose
    /// handle is `fh` (v3's path).
    Placed {
        export: u16,
        fh: PlacedFh,
        /// What the export gives this client, admitted at receive.
        options: ClientOptions,
        file: Arc<OpenFile>,
        buf: WriteBuffer,
    },
    /// Into memory charged to the staging budget, for a file not known
    /// while it was received: copied into a buffer when the WRITE runs.
    Staged(Staged),
    /// Skipped: no buffer and no staging room (`DELAY`), or refused while
    /// it was received (read-only export, stale handle...). The WRITE
    /// answers this status unless its own checks fail first; `None` when
    /// they are certain to (an export the client may not use).
    Skipped(Option<Nfsstat4>),
}

/// The handle a payload was placed for, kept inline: one of this
/// server's, at most `NFS3_FHSIZE` bytes (v3's bound, which every handle
/// it makes keeps), so placing a payload allocates nothing for it.
#[derive(Clone, Copy)]
pub struct PlacedFh {
    len: u8,
    bytes: [u8; NFS3_FHSIZE],
}

impl PlacedFh {
    /// `fh` kept inline; `None` if longer than any handle of this
    /// server's.
    fn new(fh: &[u8]) -> Option<PlacedFh> {
        let mut bytes = [0; NFS3_FHSIZE];
        bytes.get_mut(..fh.len())?.copy_from_slice(fh);
        Some(PlacedFh {
            len: fh.len() as u8,
            bytes,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// What the data ops of a COMPOUND were given at receive: the WRITE
/// payloads, in the order of the WRITEs, and the buffer for the first
/// READ or READ_PLUS (taken in `prepare`).
#[derive(Default)]
pub struct DataIo {
    pub payloads: Payloads,
    pub read_buf: Option<PooledBuf>,
    /// The COMPOUND runs on the connection's task
    /// ([`Compound::starts_on_task`]).
    pub on_task: bool,
}

impl DataIo {
    /// The export and client options a payload was placed with at
    /// receive for the file handle `fh`, if one was: found in the
    /// open-file cache by it, so its MAC checked, and the client admitted
    /// to its export.
    pub fn placed_for(&self, fh: &[u8]) -> Option<(u16, ClientOptions)> {
        self.payloads.iter().find_map(|p| match p {
            Payload::Placed {
                export,
                fh: placed,
                options,
                ..
            } if placed.as_bytes() == fh => Some((*export, *options)),
            _ => None,
        })
    }
}

/// A COMPOUND's WRITE payloads, in order: the first kept inline, since
/// most COMPOUNDs carry at most one (a `VecDeque` allocated for it, on
/// the connection's thread, was freed on another, past glibc's
/// per-thread cache: 0.1-0.3 µs of a v4.1 WRITE).
#[derive(Default)]
pub struct Payloads {
    first: Option<Payload>,
    rest: VecDeque<Payload>,
}

impl Payloads {
    pub fn push_back(&mut self, payload: Payload) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(payload);
        } else {
            self.rest.push_back(payload);
        }
    }

    pub fn push_front(&mut self, payload: Payload) {
        if let Some(first) = self.first.replace(payload) {
            self.rest.push_front(first);
        }
    }

    pub fn pop_front(&mut self) -> Option<Payload> {
        self.first.take().or_else(|| self.rest.pop_front())
    }

    pub fn front(&self) -> Option<&Payload> {
        self.first.as_ref().or_else(|| self.rest.front())
    }

    pub fn iter(&self) -> impl Iterator<Item = &Payload> {
        self.first.iter().chain(&self.rest)
    }
}

/// The current and saved filehandles as far as the ops received so far
/// tell (PUTFH, SAVEFH, RESTOREFH, and the ops that keep them): `None`
/// when unknown. Enough to place a WRITE's payload and take a READ's
/// buffer before the COMPOUND runs.
/// Kept as `H`: owned while the ops are received, borrowed from them
/// once they all are.
pub struct KnownFh<H = Vec<u8>> {
    pub current: Option<H>,
    saved: Option<H>,
}

impl<H> Default for KnownFh<H> {
    fn default() -> Self {
        KnownFh {
            current: None,
            saved: None,
        }
    }
}

impl<H: Clone> KnownFh<H> {
    /// Follows `op`, received after the ones before.
    pub fn follow<'a>(&mut self, op: &'a ArgOp)
    where
        H: From<&'a [u8]>,
    {
        match op {
            ArgOp::Putfh(a) => self.current = Some(H::from(a.object.as_bytes())),
            ArgOp::Savefh => self.saved = self.current.clone(),
            ArgOp::Restorefh => self.current = self.saved.clone(),
            // Ops that never change the current filehandle.
            ArgOp::Sequence(_)
            | ArgOp::Read(_)
            | ArgOp::ReadPlus(_)
            | ArgOp::Write(_)
            | ArgOp::Commit(_)
            | ArgOp::Getattr(_)
            | ArgOp::Getfh
            | ArgOp::Access(_)
            | ArgOp::Verify(_)
            | ArgOp::Nverify(_)
            | ArgOp::Setattr(_) => {}
            _ => {
                self.current = None;
                self.saved = None;
            }
        }
    }
}

/// What a COMPOUND's record holds besides a WRITE's data when it is
/// still "small" (SEQUENCE, PUTFH, the WRITE's head, GETATTR).
const COMPOUND_SLACK: usize = 1024;

/// Whether a COMPOUND whose arguments are `args_len` bytes (after the
/// call header, in one fragment) is "small": it then holds no share of
/// the connection's buffers while it is received (the transport's
/// `holds_buffer`), as a v3 WRITE of at most `SMALL_IO` bytes.
pub fn is_small_compound(args_len: u32) -> bool {
    dionfs_dataplane::is_small((args_len as usize).saturating_sub(COMPOUND_SLACK))
}

/// Receives the payload of WRITE `head` from `body` (right after its
/// head), the padding included, and says where it went (design section
/// 2, step 4). `first`: no WRITE came before it in the COMPOUND; `fh`:
/// the current handle, if known. A COMPOUND received as small
/// ([`is_small_compound`]) holds no share of the connection's buffers,
/// so a payload larger than `SMALL_IO` in it (at most 1 KiB more) is
/// staged, not placed in a large buffer. The caller has bounded
/// `data_len`.
#[allow(clippy::too_many_arguments)]
pub async fn receive_payload<R: CallStream>(
    server: &Server,
    exports: &Exports,
    conn: &ConnInfo,
    fh: Option<&[u8]>,
    first: bool,
    small: bool,
    head: &WriteHead4,
    body: &mut RecordReader<R>,
) -> Result<Payload, RecordError> {
    let len = head.data_len as usize;
    let payload = match fh {
        Some(fh) if !small || dionfs_dataplane::is_small(len) => {
            place(server, exports, conn, fh, first, head, body).await?
        }
        _ => stage(server, len, body).await?,
    };
    io::skip(body, pad_len(len)).await?;
    Ok(payload)
}

/// The payload of a WRITE to the file `fh`, into a write-pool buffer of
/// its export: waiting for one if `first`, else only if one is free.
async fn place<R: CallStream>(
    server: &Server,
    exports: &Exports,
    conn: &ConnInfo,
    fh: &[u8],
    first: bool,
    head: &WriteHead4,
    body: &mut RecordReader<R>,
) -> Result<Payload, RecordError> {
    let len = head.data_len as usize;
    let target = match exports.admitting(conn, fh) {
        None => Err(None),
        Some((_, options)) if options.read_only() => Err(Some(Nfsstat4::Rofs)),
        Some((export, options)) => io::file_to_write(export, fh)
            .map(|file| (export, *options, file))
            .map_err(|e| Some(from_fs(e))),
    };
    // Never too long: `file_to_write` found the file by it.
    let target = target.and_then(|t| {
        let placed = PlacedFh::new(fh).ok_or(Some(Nfsstat4::Badhandle))?;
        Ok((t, placed))
    });
    let ((export, options, file), placed_fh) = match target {
        Ok(target) => target,
        Err(status) => {
            io::skip(body, len).await?;
            return Ok(Payload::Skipped(status));
        }
    };
    let placed = |buf| Payload::Placed {
        export: export.config.id,
        fh: placed_fh,
        options,
        file: file.clone(),
        buf,
    };
    if first {
        return Ok(
            match io::receive_payload(body, export, &file, head.offset, len, &server.staging)
                .await?
            {
                Ok(buf) => placed(buf),
                Err(refused) => {
                    io::skip(body, len - refused.received).await?;
                    Payload::Skipped(Some(from_data(&refused.error)))
                }
            },
        );
    }
    // A call holding one buffer never waits for another.
    let pooled = export.data.write_pool_for(len).try_get().ok().flatten();
    match pooled.map(|b| export.data.write_buffer(file.data(), b, head.offset, len)) {
        Some(Ok(mut buf)) => {
            io::receive_rest(body, &mut buf, 0).await?;
            Ok(placed(buf))
        }
        Some(Err(e)) => {
            io::skip(body, len).await?;
            Ok(Payload::Skipped(Some(from_data(&e))))
        }
        None => stage(server, len, body).await,
    }
}

/// The payload staged whole, or skipped (`DELAY`) without room for it.
async fn stage<R: CallStream>(
    server: &Server,
    len: usize,
    body: &mut RecordReader<R>,
) -> Result<Payload, RecordError> {
    match stage_whole(body, len, &server.staging).await? {
        Some(staged) => Ok(Payload::Staged(staged)),
        None => {
            io::skip(body, len).await?;
            Ok(Payload::Skipped(Some(Nfsstat4::Delay)))
        }
    }
}

/// The current filehandle as a regular file for I/O: a directory is
/// `ISDIR`, any other type `INVAL` (as knfsd's `nfs4_check_file`).
fn regular_file<'a>(ctx: &mut OpCtx<'a>) -> Result<File<'a>, Nfsstat4> {
    let file = ctx.current_file(Nfsstat4::Isdir)?;
    match file.node.kind() {
        FileKind::Regular => Ok(file),
        FileKind::Directory => Err(Nfsstat4::Isdir),
        _ => Err(Nfsstat4::Inval),
    }
}

/// The current filehandle as a file for READ or WRITE: its export, its
/// handle, and the open file when the open-file cache holds it. A hit
/// costs no system call, as NFSv3's READ and WRITE find their file (the
/// cache holds regular files only; one deleted behind our back is found
/// by the statx each of them makes for the file's attributes, which
/// answers STALE); a miss resolves the handle as [`regular_file`] does
/// (its type checked), and the caller opens the file.
fn io_file<'a>(ctx: &mut OpCtx<'a>) -> Result<IoFile<'a>, Nfsstat4> {
    if let Some(Fh4::File {
        export,
        fh,
        node: None,
        file,
    }) = &ctx.current
    {
        let export = ctx.export(*export)?;
        if let Some(file) = cached_file(export, fh, file).map_err(from_fs)? {
            return Ok(IoFile {
                export,
                fh: fh.clone(),
                cached: Some(file),
            });
        }
    }
    let current = regular_file(ctx)?;
    Ok(IoFile {
        export: current.export,
        fh: current.node.fh().to_vec(),
        cached: None,
    })
}

/// The open file of the current filehandle `fh` of `export`: the one
/// PUTFH found (`file`, `Fh4::File`), else the open-file cache's if it
/// holds it (the handle checked by the lookup).
fn cached_file(
    export: &Export,
    fh: &[u8],
    file: &Option<Arc<OpenFile>>,
) -> Result<Option<Arc<OpenFile>>, FsError> {
    match file {
        Some(file) => Ok(Some(file.clone())),
        None => export.fs.cached_file(fh),
    }
}

/// What [`io_file`] finds.
struct IoFile<'a> {
    export: &'a Export,
    fh: Vec<u8>,
    /// The open file, when the open-file cache held it.
    cached: Option<Arc<OpenFile>>,
}

/// Checks the stateid an I/O op carries (the current stateid resolved)
/// for `io` on the file whose handle is `fh`.
fn check_stateid(
    ctx: &OpCtx,
    stateid: &dionfs_proto::nfs4::StateId4,
    fh: &[u8],
    io: Use,
) -> Result<(), Nfsstat4> {
    let stateid = resolve_current(stateid, ctx.current_stateid)?;
    super::v40::check_io_stateid(ctx, &stateid, fh, io).map(|_| ())
}

/// The permission check of a READ or WRITE as the client (squashed as
/// the export says): `io::check_io_access`.
fn check_access(
    ctx: &OpCtx,
    export: &Export,
    file: &OpenFile,
    write: bool,
    attr: Option<&dionfs_fs::Attr>,
) -> Result<(), Nfsstat4> {
    let creds = ctx.creds(export);
    io::check_io_access(ctx.server, &creds, file, write, attr).map_err(from_fs)
}

fn status_of(result: Result<(), Nfsstat4>) -> Nfsstat4 {
    result.err().unwrap_or(Nfsstat4::Ok)
}

pub fn read(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Read(args) = op else {
        return Nfsstat4::Serverfault;
    };
    // As much as the reply has room for (RFC 8881 section 18.22.3 lets a
    // READ return less than asked).
    status_of(read_range(ctx, &args, reply.data_room()).map(|read| reply.read_data(read.data)))
}

/// READ on the connection's task (a COMPOUND of the READ shape,
/// [`Compound::starts_on_task`]), as v3's `read_call`: a direct read of
/// an open file is submitted to the io_uring from here and its data
/// answered when it completes. Anything else (a file to open, a check
/// that fails, a range a writer holds, readahead to serve from, a ring
/// that refuses) gives `args` back, `Err`, its buffer back in
/// `ctx.data`: the COMPOUND then goes on on a blocking thread
/// (`compound::run`), where every refusal is answered.
pub async fn read_on_task(
    ctx: &mut OpCtx<'_>,
    args: dionfs_proto::nfs4::ReadArgs4,
    reply: &mut CompoundReply,
) -> Result<Nfsstat4, dionfs_proto::nfs4::ReadArgs4> {
    match read_without_blocking(ctx, &args, reply.data_room()).await {
        Some(Ok(data)) => {
            reply.read_data(data);
            Ok(Nfsstat4::Ok)
        }
        Some(Err(status)) => Ok(status),
        None => Err(args),
    }
}

/// [`read_on_task`]'s fast path: the checks of [`read_range`] (a cached
/// regular file, the stateid, the permission as the client), then one
/// `DataPlane::read_without_blocking` into the buffer taken at receive.
/// `None` leaves the READ to [`read`], its buffer back in `ctx.data`.
async fn read_without_blocking(
    ctx: &mut OpCtx<'_>,
    args: &dionfs_proto::nfs4::ReadArgs4,
    room: usize,
) -> Option<Result<ReadData, Nfsstat4>> {
    let ring = ctx.server.io_ring.as_ref()?;
    // Only a file the open-file cache holds (its handle checked by
    // PUTFH, its type by the cache): opening one would block.
    let Some(Fh4::File {
        export,
        fh,
        node: None,
        file,
    }) = &ctx.current
    else {
        return None;
    };
    let export = ctx.export(*export).ok()?;
    let file = cached_file(export, fh, file).ok()??;
    if export.data.read_leaves_task(file.data()) {
        return None;
    }
    check_stateid(ctx, &args.stateid, fh, Use::Read).ok()?;
    // A statx of an open file and maybe a permission check: short and
    // non-blocking, as v3's. The file deleted behind our back fails the
    // statx, and [`read`] answers STALE.
    let (attr, seen) = ops::file_attr_seen(&export.fs, &file).ok()?;
    check_access(ctx, export, &file, false, Some(&attr)).ok()?;
    let buf = ctx.data.read_buf.take()?;
    let count = args.count.min(u32::try_from(room).unwrap_or(u32::MAX));
    match export
        .data
        .read_without_blocking(ring, file.data(), buf, args.offset, count, seen)
        .await
    {
        ReadAttempt::Blocking(buf) => {
            ctx.data.read_buf = Some(buf);
            None
        }
        ReadAttempt::Done(data) => Some(
            data.map(|mut data| {
                io::start_read_followups(&file, &mut data);
                data
            })
            .map_err(|e| io_error(ctx, IoProc::Read, &file, Some((args.offset, count)), &e)),
        ),
    }
}

/// What [`read_range`] read, and from which file.
pub struct ReadRange<'a> {
    pub export: &'a Export,
    pub file: Arc<OpenFile>,
    pub data: ReadData,
    /// Whether the file may have holes: it uses fewer bytes than its
    /// size (or its attributes were not read).
    pub sparse: bool,
}

/// The data of READ or READ_PLUS `args` (their arguments are the same),
/// at most `room` bytes: the checks (a regular file, the stateid, the
/// permission as the client), then one `DataPlane::read` into the buffer
/// taken at receive (or a free one now), its readahead and checksum
/// rebuild started.
pub fn read_range<'a>(
    ctx: &mut OpCtx<'a>,
    args: &dionfs_proto::nfs4::ReadArgs4,
    room: usize,
) -> Result<ReadRange<'a>, Nfsstat4> {
    let IoFile { export, fh, cached } = io_file(ctx)?;
    check_stateid(ctx, &args.stateid, &fh, Use::Read)?;
    // (A file new to a full checksum store is read unchecked.)
    let file = match cached {
        Some(file) => file,
        None => export.fs.open_file_to_read(&fh).map_err(from_fs)?,
    };
    let attr = match ops::file_attr(&export.fs, &file) {
        // Deleted behind our back: its data is not sent.
        Err(FsError::Stale) => return Err(Nfsstat4::Stale),
        other => other.ok(),
    };
    check_access(ctx, export, &file, false, attr.as_ref())?;
    let count = args.count.min(u32::try_from(room).unwrap_or(u32::MAX));
    let buf = match ctx.data.read_buf.take() {
        Some(buf) => buf,
        // A later READ, or one whose export was not known at receive:
        // a buffer only if one is free now.
        None => export
            .data
            .read_pool_for(count as usize)
            .try_get()
            .ok()
            .flatten()
            .ok_or(Nfsstat4::Delay)?,
    };
    let mut data = export
        .data
        .read(file.data(), buf, args.offset, count)
        .map_err(|e| io_error(ctx, IoProc::Read, &file, Some((args.offset, count)), &e))?;
    io::start_read_followups(&file, &mut data);
    let sparse = attr.is_none_or(|a| a.used < a.size);
    Ok(ReadRange {
        export,
        file,
        data,
        sparse,
    })
}

fn io_error(
    ctx: &OpCtx,
    proc: IoProc,
    file: &OpenFile,
    range: Option<(u64, u32)>,
    e: &DataError,
) -> Nfsstat4 {
    ctx.server.io_error_logs.log(proc, file, range, e);
    from_data(e)
}

pub fn write(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Write(head) = op else {
        return Nfsstat4::Serverfault;
    };
    // Taken whatever happens, so the next WRITE finds its own.
    let payload = ctx.data.payloads.pop_front();
    match write_file(ctx, &head, payload) {
        Ok(res) => {
            res.encode(reply.encoder());
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

fn write_file(
    ctx: &mut OpCtx,
    head: &WriteHead4,
    payload: Option<Payload>,
) -> Result<WriteResOk4, Nfsstat4> {
    let target = write_target(ctx, head, payload)?;
    write_blocking(ctx, target)
}

/// WRITE on the connection's task (a COMPOUND of the WRITE shape,
/// [`Compound::starts_on_task`]), as v3's `write_call`: a small
/// overwrite of cached pages is written from here as the client; an
/// aligned direct write is submitted to the io_uring as the client (a
/// ring personality with its credentials) and answered when it
/// completes. Anything else, and every refusal, gives `head` back,
/// `Err`, its payload back in `ctx.data`: the COMPOUND then goes on on a
/// blocking thread (`compound::run`).
pub async fn write_on_task(
    ctx: &mut OpCtx<'_>,
    head: WriteHead4,
    reply: &mut CompoundReply,
) -> Result<Nfsstat4, WriteHead4> {
    // Only a payload placed at receive for this file: anything else
    // (and every refusal) is the blocking path's.
    let Some((target, options, fh)) = on_task_target(ctx, &head) else {
        return Err(head);
    };
    match write_without_blocking(ctx, target).await {
        Ok(Ok(res)) => {
            res.encode(reply.encoder());
            Ok(Nfsstat4::Ok)
        }
        Ok(Err(status)) => Ok(status),
        Err(t) => {
            ctx.data.payloads.push_front(Payload::Placed {
                export: t.export.config.id,
                fh,
                options,
                file: t.file,
                buf: t.buf,
            });
            Err(head)
        }
    }
}

/// [`write_target`] for [`write_on_task`], its payload taken from
/// `ctx.data` only when every check passes and it was placed for the
/// current file (with the client's options and the handle it was placed
/// for, to give it back); else `None`, `ctx.data` untouched.
///
/// The payload's open file stands for [`io_file`]'s lookup: receive
/// found it by this handle (its MAC checked there, and PUTFH trusted
/// that check), so the open-file cache is not asked again.
fn on_task_target<'a>(
    ctx: &mut OpCtx<'a>,
    head: &WriteHead4,
) -> Option<(WriteTarget<'a>, ClientOptions, PlacedFh)> {
    let Some(Payload::Placed {
        export: id,
        fh: placed,
        file,
        ..
    }) = ctx.data.payloads.front()
    else {
        return None;
    };
    if !is_current(ctx, *id, placed.as_bytes()) {
        return None;
    }
    let export = placed_checks(ctx, head, *id, placed.as_bytes()).ok()?;
    let before = ops::file_attr(&export.fs, file).ok()?;
    // The payload just looked at.
    let Some(Payload::Placed {
        fh,
        options,
        file,
        buf,
        ..
    }) = ctx.data.payloads.pop_front()
    else {
        return None;
    };
    let target = WriteTarget {
        export,
        file,
        buf,
        before: Some(before),
        how: stable(head.stable),
    };
    Some((target, options, fh))
}

/// [`write_checks`] for a WRITE whose payload was placed for the current
/// file (handle `fh` of export `id`, [`is_current`]): the export writable
/// for this client and the stateid; the file's type and handle were
/// checked at receive. The export.
fn placed_checks<'a>(
    ctx: &OpCtx<'a>,
    head: &WriteHead4,
    id: u16,
    fh: &[u8],
) -> Result<&'a Export, Nfsstat4> {
    let export = ctx.export(id)?;
    ctx.writable(export)?;
    check_stateid(ctx, &head.stateid, fh, Use::Write)?;
    Ok(export)
}

/// Whether the current filehandle is, as PUTFH left it, the handle `fh`
/// of export `id` a payload was placed for at receive.
fn is_current(ctx: &OpCtx, id: u16, fh: &[u8]) -> bool {
    matches!(
        &ctx.current,
        Some(Fh4::File { export, fh: current, node: None, .. }) if *export == id && current[..] == *fh
    )
}

/// The checks of a WRITE before its payload is used: a regular file, an
/// export writable for this client, the stateid. The export and the
/// file's handle.
fn write_checks<'a>(
    ctx: &mut OpCtx<'a>,
    head: &WriteHead4,
) -> Result<(&'a Export, Vec<u8>), Nfsstat4> {
    let IoFile { export, fh, .. } = io_file(ctx)?;
    ctx.writable(export)?;
    check_stateid(ctx, &head.stateid, &fh, Use::Write)?;
    Ok((export, fh))
}

/// A WRITE's checks done and its payload in a buffer: ready to write.
struct WriteTarget<'a> {
    export: &'a Export,
    file: Arc<OpenFile>,
    buf: WriteBuffer,
    /// The file's attributes before the write, for the permission check.
    before: Option<dionfs_fs::Attr>,
    how: Stable,
}

/// The checks of a WRITE (a regular file, a writable export, the
/// stateid, a file not deleted) and its payload in a write-pool buffer.
fn write_target<'a>(
    ctx: &mut OpCtx<'a>,
    head: &WriteHead4,
    payload: Option<Payload>,
) -> Result<WriteTarget<'a>, Nfsstat4> {
    let len = head.data_len as usize;
    let (export, file, buf) = match payload.ok_or(Nfsstat4::Serverfault)? {
        // The file receive found by the current handle (its MAC checked
        // there) stands for `io_file`'s lookup, as in `on_task_target`: a
        // regular file, since the open-file cache holds no other kind.
        Payload::Placed {
            export: id,
            fh,
            file,
            buf,
            ..
        } if is_current(ctx, id, fh.as_bytes()) => {
            let export = placed_checks(ctx, head, id, fh.as_bytes())?;
            (export, file, buf)
        }
        Payload::Placed {
            export: id,
            fh: placed,
            file,
            buf,
            ..
        } => {
            let (export, fh) = write_checks(ctx, head)?;
            // Receive followed the current handle exactly.
            if id != export.config.id || placed.as_bytes() != fh {
                return Err(Nfsstat4::Serverfault);
            }
            (export, file, buf)
        }
        Payload::Skipped(status) => {
            write_checks(ctx, head)?;
            return Err(status.unwrap_or(Nfsstat4::Serverfault));
        }
        Payload::Staged(staged) => {
            let (export, fh) = write_checks(ctx, head)?;
            let file = file_to_write(export, &fh).map_err(from_fs)?;
            let pooled = export
                .data
                .write_pool_for(len)
                .try_get()
                .ok()
                .flatten()
                .ok_or(Nfsstat4::Delay)?;
            let mut buf = export
                .data
                .write_buffer(file.data(), pooled, head.offset, len)
                .map_err(|e| from_data(&e))?;
            buf.payload_mut().copy_from_slice(staged.bytes());
            buf.arrived(len);
            (export, file, buf)
        }
    };
    let before = match ops::file_attr(&export.fs, &file) {
        Err(FsError::Stale) => return Err(Nfsstat4::Stale),
        other => other.ok(),
    };
    Ok(WriteTarget {
        export,
        file,
        buf,
        before,
        how: stable(head.stable),
    })
}

/// The write of `t` as the client (blocking), as v3's: set-id bits
/// cleared, quotas enforced.
fn write_blocking(ctx: &OpCtx, t: WriteTarget) -> Result<WriteResOk4, Nfsstat4> {
    let WriteTarget {
        export,
        file,
        buf,
        before,
        how,
        ..
    } = t;
    let done = ctx.as_user(export, || {
        Ok(
            check_access(ctx, export, &file, true, before.as_ref()).and_then(|()| {
                export
                    .data
                    .write(file.data(), buf, how)
                    .map_err(|e| io_error(ctx, IoProc::Write, &file, None, &e))
            }),
        )
    })??;
    Ok(write_res(ctx, done))
}

/// [`write_on_task`]'s fast paths (v3's `write_without_blocking`); what
/// neither takes is given back, `Err`, for the blocking path.
async fn write_without_blocking<'a>(
    ctx: &OpCtx<'a>,
    mut t: WriteTarget<'a>,
) -> Result<Result<WriteResOk4, Nfsstat4>, WriteTarget<'a>> {
    let (export, how) = (t.export, t.how);
    if export
        .data
        .may_write_on_task(t.file.data(), t.buf.len(), how)
    {
        // A small overwrite of cached pages, made here as the client
        // (the thread's credentials switched and back) if its permission
        // check passes here (a refusal is answered by the blocking path,
        // which checks again).
        let (file, before) = (t.file.clone(), t.before.as_ref());
        if check_access(ctx, export, &file, true, before).is_err() {
            return Err(t);
        }
        let buf = t.buf;
        match ctx.as_user(export, || {
            Ok(export.data.write_on_task(file.data(), buf, how))
        }) {
            Ok(WriteAttempt::Done(done)) => {
                return Ok(done
                    .map(|done| write_res(ctx, done))
                    .map_err(|e| io_error(ctx, IoProc::Write, &file, None, &e)));
            }
            Ok(WriteAttempt::Blocking(buf)) => t.buf = buf,
            // The credentials could not be switched: the buffer is gone
            // with the closure, so the WRITE fails here.
            Err(status) => return Ok(Err(status)),
        }
    } else if let Some(ring) = ctx.server.io_ring.as_ref() {
        // An aligned direct write through the ring as the client, if its
        // permission check passes here (a refusal is answered by the
        // blocking path, which checks again).
        let allowed = t
            .before
            .as_ref()
            .is_some_and(|before| check_access(ctx, export, &t.file, true, Some(before)).is_ok());
        let personality = allowed
            .then(|| ctx.server.ring_personality(ring, &ctx.creds(export)))
            .flatten();
        if let (true, Some(personality)) = (
            export.data.ring_may_write(t.file.data(), &t.buf),
            personality,
        ) {
            let file = t.file.clone();
            match export
                .data
                .write_without_blocking(ring, file.data(), t.buf, how, personality)
                .await
            {
                WriteAttempt::Done(done) => {
                    return Ok(done
                        .map(|done| write_res(ctx, done))
                        .map_err(|e| io_error(ctx, IoProc::Write, &file, None, &e)));
                }
                WriteAttempt::Blocking(buf) => t.buf = buf,
            }
        }
    }
    Err(t)
}

fn write_res(ctx: &OpCtx, done: WriteDone) -> WriteResOk4 {
    WriteResOk4 {
        count: done.count as u32,
        committed: stable_how(done.committed),
        writeverf: Verifier4(ctx.server.write_verifier()),
    }
}

/// The fast shape of a WRITE COMPOUND (what Linux sends): SEQUENCE, PUTFH,
/// WRITE, and maybe GETATTR.
/// The GETATTR may ask only attributes a statx gives (no owner names,
/// which may ask a name service, no file-system statistics).
fn is_write_shape(ops: &[ArgOp]) -> bool {
    match ops {
        [ArgOp::Putfh(_), ArgOp::Write(_)] => true,
        [ArgOp::Putfh(_), ArgOp::Write(_), ArgOp::Getattr(a)] => {
            a.attr_request.bits().all(|bit| STATX_ATTRS.contains(&bit))
        }
        _ => false,
    }
}

/// What a GETATTR after a WRITE on the task may ask: what Linux asks
/// there, all from one statx of the open file.
const STATX_ATTRS: [u32; 9] = [
    Attr4::Type.bit(),
    Attr4::Change.bit(),
    Attr4::Size.bit(),
    Attr4::Fileid.bit(),
    Attr4::Mode.bit(),
    Attr4::Numlinks.bit(),
    Attr4::SpaceUsed.bit(),
    Attr4::TimeMetadata.bit(),
    Attr4::TimeModify.bit(),
];

fn stable(s: StableHow4) -> Stable {
    match s {
        StableHow4::Unstable => Stable::Unstable,
        StableHow4::DataSync => Stable::DataSync,
        StableHow4::FileSync => Stable::FileSync,
    }
}

fn stable_how(s: Stable) -> StableHow4 {
    match s {
        Stable::Unstable => StableHow4::Unstable,
        Stable::DataSync => StableHow4::DataSync,
        Stable::FileSync => StableHow4::FileSync,
    }
}

pub fn commit(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Commit(args) = op else {
        return Nfsstat4::Serverfault;
    };
    match commit_file(ctx, args.offset, args.count) {
        Ok(res) => {
            res.encode(reply.encoder());
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

fn commit_file(ctx: &mut OpCtx, offset: u64, count: u32) -> Result<CommitResOk4, Nfsstat4> {
    let current = regular_file(ctx)?;
    let export = current.export;
    let file = export
        .fs
        .open_file_to_read(current.node.fh())
        .map_err(from_fs)?;
    ctx.as_user(export, || {
        Ok(export
            .data
            .commit(file.data(), offset, count)
            .map_err(|e| io_error(ctx, IoProc::Commit, &file, None, &e)))
    })??;
    Ok(CommitResOk4 {
        writeverf: Verifier4(ctx.server.write_verifier()),
    })
}

/// The open file a staged WRITE goes to, on the COMPOUND's blocking
/// thread: the cached one, else opened by handle.
fn file_to_write(export: &Export, fh: &[u8]) -> Result<Arc<OpenFile>, FsError> {
    match export.fs.cached_file(fh)? {
        Some(file) => Ok(file),
        None => export.fs.open_file(fh),
    }
}

impl Compound {
    /// Whether it starts on the connection's task, as v3's READ and WRITE
    /// would: the READ shape (SEQUENCE, PUTFH, READ, what Linux sends) of
    /// an export that reads direct, with `server`'s io_uring
    /// ([`read_on_task`]); or the WRITE shape ([`is_write_shape`]) whose
    /// payload was placed and may be written there (a small write into
    /// the page cache, `io::may_write_on_task`, or an aligned direct
    /// write the ring may take: [`write_on_task`]). Decided without a
    /// syscall. A minor version 0 COMPOUND has the same shapes without
    /// SEQUENCE (PUTFH, READ is what Linux and libnfs send).
    pub fn starts_on_task(&self, server: &Server) -> bool {
        if (self.slot.is_none() && self.minor != 0) || self.refused.is_some() {
            return false;
        }
        if let [ArgOp::Putfh(fh), ArgOp::Read(_)] = &self.ops[..] {
            // As v3's READ.
            let fh = fh.object.as_bytes();
            return dionfs_fs::handle::export_id(fh)
                .and_then(|id| self.exports.by_id(id))
                .is_some_and(|x| io::read_may_use_ring(server, x));
        }
        if !is_write_shape(&self.ops) {
            return false;
        }
        let (
            Some(ArgOp::Write(head)),
            Some(Payload::Placed {
                export, file, buf, ..
            }),
        ) = (self.ops.get(1), self.data.payloads.front())
        else {
            return false;
        };
        // v3's `ReceivedWrite::starts_on_task`.
        self.exports.by_id(*export).is_some_and(|x| {
            io::may_write_on_task(x, file, buf, stable(head.stable))
                || server.io_ring.is_some() && x.data.ring_may_write(file.data(), buf)
        })
    }

    /// The reply room a COMPOUND reserves before it runs (the transport's
    /// `reply_room`): what its READs and READDIRs may return, each at most
    /// `max_transfer`, all within the session's reply size, and 1 KiB for
    /// the rest; 0 when it has none.
    pub fn reply_room(&self, max_transfer: u32) -> usize {
        let asked: usize = self
            .ops
            .iter()
            .map(|op| match op {
                ArgOp::Read(a) | ArgOp::ReadPlus(a) => a.count.min(max_transfer) as usize,
                ArgOp::Readdir(a) => a.maxcount.min(max_transfer) as usize,
                _ => 0,
            })
            .sum();
        if asked == 0 {
            return 0;
        }
        let max = self
            .slot
            .as_ref()
            .map_or(usize::MAX, |slot| slot.max_response() as usize);
        asked.min(max) + 1024
    }

    /// Whether it holds a large pool buffer once received: a READ or
    /// READ_PLUS of more than `SMALL_IO` bytes, or a WRITE whose payload
    /// that large was staged (it takes its buffer when it runs).
    pub fn holds_buffer_after_receive(&self) -> bool {
        let large = |len: usize| !dionfs_dataplane::is_small(len);
        self.ops
            .iter()
            .any(|op| matches!(op, ArgOp::Read(a) | ArgOp::ReadPlus(a) if large(a.count as usize)))
            || self
                .data
                .payloads
                .iter()
                .any(|p| matches!(p, Payload::Staged(s) if large(s.bytes().len())))
    }

    /// Takes the buffer of its first READ or READ_PLUS, from the export
    /// of the handle the PUTFH before it gave (as v3's READ does in
    /// `prepare`), waiting while that pool is empty. None when that export is not known or
    /// not the client's: the READ then tries at execution.
    pub async fn take_read_buffer(&mut self, conn: &ConnInfo) {
        let mut known = KnownFh::<&[u8]>::default();
        for op in &self.ops {
            if let ArgOp::Read(a) | ArgOp::ReadPlus(a) = op {
                let Some(export) = known
                    .current
                    .and_then(|fh| self.exports.for_client(conn, fh))
                else {
                    return;
                };
                self.data.read_buf = export.data.read_buffer_for(a.count).await.ok();
                return;
            }
            known.follow(op);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placed_handle_keeps_its_bytes_up_to_v3s_bound() {
        for len in [0, 1, 37, NFS3_FHSIZE] {
            let fh: Vec<u8> = (0..len as u8).map(|b| b ^ 0x5a).collect();
            assert_eq!(PlacedFh::new(&fh).unwrap().as_bytes(), fh);
        }
        assert!(PlacedFh::new(&[7; NFS3_FHSIZE + 1]).is_none());
    }

    /// Payloads tagged by a status, to tell them apart.
    fn tag(n: u32) -> Payload {
        Payload::Skipped(Nfsstat4::from_u32(n))
    }

    fn tags(p: &Payloads) -> Vec<Option<Nfsstat4>> {
        p.iter()
            .map(|p| match p {
                Payload::Skipped(s) => *s,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn payloads_keep_their_order_however_taken_and_given_back() {
        let (a, b, c) = (Nfsstat4::Perm, Nfsstat4::Noent, Nfsstat4::Io);
        let mut p = Payloads::default();
        assert!(p.front().is_none() && p.pop_front().is_none());
        for s in [a, b, c] {
            p.push_back(tag(s as u32));
        }
        assert_eq!(tags(&p), [Some(a), Some(b), Some(c)]);
        let first = p.pop_front().unwrap();
        assert_eq!(tags(&p), [Some(b), Some(c)]);
        // Taken after the first went: behind the others, not in its place.
        p.push_back(tag(a as u32));
        assert_eq!(tags(&p), [Some(b), Some(c), Some(a)]);
        p.push_front(first);
        assert_eq!(tags(&p), [Some(a), Some(b), Some(c), Some(a)]);
        assert!(matches!(p.front(), Some(Payload::Skipped(Some(s))) if *s == a));
        let mut drained = Vec::new();
        while let Some(Payload::Skipped(s)) = p.pop_front() {
            drained.push(s);
        }
        assert_eq!(drained, [Some(a), Some(b), Some(c), Some(a)]);
    }
}
