//! NFSv4.2's data ops (RFC 7862): SEEK, ALLOCATE, DEALLOCATE, COPY and
//! CLONE, each one call of the export's data plane (design section 9),
//! which takes the range locks WRITE takes and keeps the checksums of an
//! `integrity` export exact. Here: the file checks, the stateid checks
//! (`Use::Read` for SEEK and COPY's source, `Use::Write` for the rest),
//! the permission check as the squashed caller, `ROFS` on a read-only
//! export, and the results.
//!
//! COPY is synchronous only and within this server: an asynchronous
//! request is answered synchronously (RFC 7862 section 15.2.3 lets the
//! server choose), a list of source servers is `NOTSUPP`. A call copies
//! at most [`dionfs_dataplane::COPY_MAX`] bytes; a short count tells the
//! client to go on. Its data is UNSTABLE, under the server's write
//! verifier, for a COMMIT of the destination to make durable.
//!
//! READ_PLUS is READ (the same checks, one `DataPlane::read` of the
//! range, so the same modes, alignment, checksum verification and
//! readahead) whose bytes are then cut into data and holes by SEEK's
//! `lseek(SEEK_DATA/SEEK_HOLE)` ([`segments`]), when the file uses fewer
//! bytes than its size (a dense one is one data segment, as READ). The
//! holes' bytes were read and verified as the data's: a hole whose
//! blocks the integrity store has a checksum of non-zero data for is
//! corruption (`IO`), never-written blocks have none (zeros).

use std::sync::Arc;

use dionfs_core::exports::Export;
use dionfs_dataplane::{DataFile, DataPlane, Seek};
use dionfs_fs::{ops, FileKind, Node, OpenFile};
use dionfs_proto::nfs4::{
    ArgOp, CopyRequirements4, CopyResOk4, DataContent4, Nfsstat4, SeekResOk4, StableHow4, StateId4,
    Verifier4, WriteResponse4,
};
use dionfs_xdr::Encode;

use super::compound::OpCtx;
use super::data::{read_range, ReadRange};
use super::fh::{Current, File};
use super::lookup::status;
use super::reply::{CompoundReply, Segment};
use super::state::{resolve_current, Use};
use super::status::{from_data, from_fs};

/// A file of an op, checked for its I/O and opened for the data plane.
struct IoFile<'a> {
    export: &'a Export,
    node: Arc<Node>,
    file: Arc<OpenFile>,
}

/// The file `current` (the current or saved filehandle) for I/O `io`
/// with `stateid` (already resolved): a regular file of an export
/// (`ISDIR` for a directory, a pseudo one too; `INVAL` for another
/// type), writable for a write (`ROFS`), whose stateid allows the I/O
/// (RFC 8881 section 8.2: `OPENMODE`, `BAD_STATEID`...), and which the
/// caller may read or write.
fn data_file<'a>(
    ctx: &OpCtx<'a>,
    current: Current<'a>,
    stateid: &StateId4,
    io: Use,
) -> Result<IoFile<'a>, Nfsstat4> {
    let File { export, node } = match current {
        Current::File(file) => file,
        Current::Pseudo(_) => return Err(Nfsstat4::Isdir),
    };
    match node.kind() {
        FileKind::Regular => {}
        FileKind::Directory => return Err(Nfsstat4::Isdir),
        _ => return Err(Nfsstat4::Inval),
    }
    if io == Use::Write {
        ctx.writable(export)?;
    }
    let client = ctx.slot.ok_or(Nfsstat4::OpNotInSession)?.client();
    ctx.nfs4
        .state
        .check_stateid(client, stateid, node.fh(), io)?;
    // A read needs no new checksums (as NFSv3's READ, it goes on where
    // the store is full).
    let file = match io {
        Use::Read => export.fs.open_file_to_read(node.fh()),
        Use::Write => export.fs.open_file(node.fh()),
    }
    .map_err(from_fs)?;
    let attr = ops::file_attr(&export.fs, &file).ok();
    let creds = ctx.creds(export);
    crate::io::check_io_access(ctx.server, &creds, &file, io == Use::Write, attr.as_ref())
        .map_err(from_fs)?;
    Ok(IoFile { export, node, file })
}

/// The current file for `io` with `stateid`, the current stateid
/// resolved.
fn current_data<'a>(
    ctx: &mut OpCtx<'a>,
    stateid: &StateId4,
    io: Use,
) -> Result<IoFile<'a>, Nfsstat4> {
    let stateid = resolve_current(stateid, ctx.current_stateid)?;
    let current = ctx.current()?;
    data_file(ctx, current, &stateid, io)
}

/// SEEK: where the next data or hole is from `offset`. Finding none, or
/// the hole at the end of the file, is `eof` (as knfsd says, `eof` when
/// the offset found is at the end); an offset at or past the end is
/// `NXIO`.
pub fn seek(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Seek(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let IoFile { export, file, .. } = current_data(ctx, &args.stateid, Use::Read)?;
        let what = match args.what {
            DataContent4::Data => Seek::Data,
            DataContent4::Hole => Seek::Hole,
        };
        let found = export
            .data
            .seek(file.data(), args.offset, what)
            .map_err(|e| from_data(&e))?;
        Ok(match found {
            Some(offset) => {
                let size = ops::file_attr(&export.fs, &file).map_or(u64::MAX, |a| a.size);
                SeekResOk4 {
                    eof: offset >= size,
                    offset,
                }
            }
            None => SeekResOk4 {
                eof: true,
                offset: 0,
            },
        })
    })();
    status(result.map(|res| res.encode(reply.encoder())))
}

/// The most segments of a READ_PLUS result: past them, the rest of the
/// range goes as one data segment, its zeros included (as knfsd, which
/// sends one data segment). A file of alternating small holes and data
/// then costs at most this many segments and twice as many `lseek`s.
pub const READ_PLUS_MAX_SEGMENTS: usize = 16;

/// The wire bytes of a READ_PLUS segment besides its data: its
/// discriminant, offset and length (a hole's length is 8 bytes, a data
/// segment's 4 and padding up to 3).
const SEGMENT_OVERHEAD: usize = 4 + 8 + 8;

/// READ_PLUS (RFC 7862 section 15.10): READ's data, with the holes in it
/// sent as holes. `eof` as READ's.
pub fn read_plus(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::ReadPlus(args) = op else {
        return Nfsstat4::Serverfault;
    };
    // The segments' heads within the room too.
    let room = reply
        .data_room()
        .saturating_sub(READ_PLUS_MAX_SEGMENTS * SEGMENT_OVERHEAD);
    match read_range(ctx, &args, room) {
        Ok(ReadRange {
            export,
            file,
            data,
            sparse,
        }) => {
            // A file using as many bytes as its size has no holes to look
            // for: its data goes as one segment, as READ's.
            let segments = match sparse {
                true => segments(&export.data, file.data(), args.offset, data.data()),
                false if data.is_empty() => Vec::new(),
                false => vec![Segment::Data(0..data.len())],
            };
            reply.read_plus_data(data, args.offset, &segments);
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

/// The segments of `bytes`, read at `offset` of `file`: where SEEK finds
/// a hole and the bytes read there are zeros (so a write between the
/// read and the `lseek`s changes nothing the client gets), a hole; the
/// rest data, adjacent data merged. At most [`READ_PLUS_MAX_SEGMENTS`];
/// an `lseek` that fails (the file shrank meanwhile...) makes the rest
/// data. Blocking.
pub fn segments(plane: &DataPlane, file: &DataFile, offset: u64, bytes: &[u8]) -> Vec<Segment> {
    let mut out = Segments(Vec::new());
    let end = bytes.len();
    // Positions in `bytes`; `at(p)` the file offset.
    let at = |p: usize| offset + p as u64;
    let within = |found: u64| found.saturating_sub(offset).min(end as u64) as usize;
    let mut p = 0;
    while p < end {
        // A hole and a data segment may follow: room for both, else the
        // rest is data.
        if out.0.len() + 2 > READ_PLUS_MAX_SEGMENTS {
            out.data(p..end);
            break;
        }
        let data = match plane.seek(file, at(p), Seek::Data) {
            Ok(Some(found)) => within(found).max(p),
            Ok(None) => end,
            Err(_) => {
                out.data(p..end);
                break;
            }
        };
        if data > p {
            out.hole(p..data, bytes);
        }
        if data == end {
            break;
        }
        let hole = match plane.seek(file, at(data), Seek::Hole) {
            Ok(Some(found)) => within(found),
            Ok(None) | Err(_) => end,
        };
        // SEEK_HOLE from data finds a later offset; an earlier one (the
        // file changed meanwhile) is taken as data to the end.
        let hole = if hole > data { hole } else { end };
        out.data(data..hole);
        p = hole;
    }
    out.0
}

/// Segments being cut, in order.
struct Segments(Vec<Segment>);

impl Segments {
    fn data(&mut self, range: std::ops::Range<usize>) {
        if let Some(Segment::Data(last)) = self.0.last_mut() {
            if last.end == range.start {
                last.end = range.end;
                return;
            }
        }
        self.0.push(Segment::Data(range));
    }

    /// A hole if `bytes` are zeros there, else data.
    fn hole(&mut self, range: std::ops::Range<usize>, bytes: &[u8]) {
        if bytes[range.clone()].iter().all(|&b| b == 0) {
            self.0.push(Segment::Hole(range));
        } else {
            self.data(range);
        }
    }
}

/// ALLOCATE: reserves the range's blocks, which may extend the file; on
/// a `sync` export the new size is made durable before the reply (as
/// knfsd's `commit_metadata` after `vfs_fallocate`).
pub fn allocate(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Allocate(args) = op else {
        return Nfsstat4::Serverfault;
    };
    status((|| {
        let IoFile { export, node, file } = current_data(ctx, &args.stateid, Use::Write)?;
        export
            .data
            .allocate(file.data(), args.offset, args.length)
            .map_err(|e| from_data(&e))?;
        export.metadata_sync.attrs_changed(&node).map_err(from_fs)
    })())
}

/// DEALLOCATE: frees the range's blocks; it then reads as zeros, and the
/// size stays. Made durable on a `sync` export, as ALLOCATE.
pub fn deallocate(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Deallocate(args) = op else {
        return Nfsstat4::Serverfault;
    };
    status((|| {
        let IoFile { export, node, file } = current_data(ctx, &args.stateid, Use::Write)?;
        export
            .data
            .deallocate(file.data(), args.offset, args.length)
            .map_err(|e| from_data(&e))?;
        export.metadata_sync.attrs_changed(&node).map_err(from_fs)
    })())
}

/// COPY's and CLONE's two files: the saved filehandle is the source
/// (read, with the saved stateid for the current-stateid value), the
/// current one the destination (written).
fn source_and_destination<'a>(
    ctx: &mut OpCtx<'a>,
    src_stateid: &StateId4,
    dst_stateid: &StateId4,
) -> Result<(IoFile<'a>, IoFile<'a>), Nfsstat4> {
    let src_stateid = resolve_current(src_stateid, ctx.saved_stateid)?;
    let dst_stateid = resolve_current(dst_stateid, ctx.current_stateid)?;
    let saved = ctx.saved()?;
    let current = ctx.current()?;
    let src = data_file(ctx, saved, &src_stateid, Use::Read)?;
    let dst = data_file(ctx, current, &dst_stateid, Use::Write)?;
    Ok((src, dst))
}

/// COPY (see the module documentation).
pub fn copy(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Copy(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        if !args.source_server.is_empty() {
            return Err(Nfsstat4::Notsupp);
        }
        let (src, dst) = source_and_destination(ctx, &args.src_stateid, &args.dst_stateid)?;
        let len = match args.count {
            0 => u64::MAX,
            count => count,
        };
        let copied = dst
            .export
            .data
            .copy(
                src.file.data(),
                args.src_offset,
                dst.file.data(),
                args.dst_offset,
                len,
            )
            .map_err(|e| from_data(&e))?;
        Ok(CopyResOk4 {
            response: WriteResponse4 {
                callback_id: None,
                count: copied,
                committed: StableHow4::Unstable,
                writeverf: Verifier4(ctx.server.write_verifier()),
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: true,
            },
        })
    })();
    status(result.map(|res| res.encode(reply.encoder())))
}

/// CLONE: the destination range shares the source's extents; offsets
/// (and the length, unless it reaches the source's end) must be aligned
/// (`INVAL`), and a file system that cannot clone answers `NOTSUPP`.
pub fn clone(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Clone(args) = op else {
        return Nfsstat4::Serverfault;
    };
    status((|| {
        let (src, dst) = source_and_destination(ctx, &args.src_stateid, &args.dst_stateid)?;
        dst.export
            .data
            .clone_range(
                src.file.data(),
                args.src_offset,
                dst.file.data(),
                args.dst_offset,
                args.count,
            )
            .map_err(|e| from_data(&e))
    })())
}
