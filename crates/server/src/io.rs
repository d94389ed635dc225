//! What the NFS programs share of READ and WRITE, below them (`nfs/` and
//! `nfs4/` never import each other): finding the file a WRITE goes to,
//! receiving its payload from the socket into a data-plane buffer, the
//! permission check of a READ or WRITE under the caller's credentials,
//! starting the work a READ hands out (readahead, a checksum rebuild),
//! finishing on a blocking thread a call the connection's task could not,
//! and the delegation check of a call that changes a file by its name.
//!
//! Results are the layers' own errors (`FsError`, `DataError`,
//! `RecordError`); each program turns them into its status in its
//! `status.rs`.

use std::sync::Arc;

use dionfs_core::delegations::{Access, Busy, Recalling};
use dionfs_core::exports::Export;
use dionfs_core::server::Server;
use dionfs_dataplane::{DataError, Prefetch, ReadData, Rebuild, Stable, WriteBuffer};
use dionfs_fs::{ops, Attr, FsError, OpenFile};
use dionfs_rpc::{RecordError, RecordReader};
use dionfs_sys::cred::{with_creds, Creds};
use dionfs_transport::{stage_payload, CallStream, ReplyPayload, StagingBudget};
use tracing::error;

/// Runs `handler`, the rest of a call that the connection's task could
/// not finish, on a blocking thread and gives its reply. A handler that
/// panicked (`procedure` names it in the log) answers nothing, as one
/// started on a blocking thread would.
pub async fn on_blocking_thread<R: Send + 'static>(
    procedure: &'static str,
    handler: impl FnOnce() -> Option<R> + Send + 'static,
) -> Option<R> {
    tokio::task::spawn_blocking(handler)
        .await
        .unwrap_or_else(|e| {
            error!(error = %e, "{procedure} handler failed");
            None
        })
}

/// Whether a READ of `export` may try the io_uring on the connection's
/// task, NFSv3's and NFSv4's alike: the server has a ring and the export
/// reads direct (a file may still say no: `DataPlane::read_leaves_task`).
/// No syscall.
pub fn read_may_use_ring(server: &Server, export: &Export) -> bool {
    server.io_ring.is_some() && export.data.ring_may_read()
}

/// The open file a WRITE with handle `fh` goes to. Usually a cache hit,
/// which makes no syscall; a miss opens the file by handle (a short
/// blocking syscall, kept off the other tasks of this worker:
/// `block_in_place` hands the worker to another thread, which costs
/// context switches, so only then). Called while the call is received.
pub fn file_to_write(export: &Export, fh: &[u8]) -> Result<Arc<OpenFile>, FsError> {
    match export.fs.cached_file(fh)? {
        Some(file) => Ok(file),
        None => tokio::task::block_in_place(|| export.fs.open_file(fh)),
    }
}

/// A WRITE payload the data plane gave no buffer to: why, and how many of
/// its bytes were read from the record before it said so (staged bytes,
/// dropped since). The rest of the payload is still in the record.
#[derive(Debug)]
pub struct Refused {
    pub error: DataError,
    pub received: usize,
}

/// Receives the `len` bytes of a WRITE payload for `offset` of `file` from
/// `body` into a write-pool buffer of `export`'s data plane, at the place
/// its direct-I/O path wants it (`offset` modulo the alignment), and
/// returns the buffer, ready to be written. The payload's XDR padding
/// stays in the record, for the caller to read or skip.
///
/// A client that sends the start of a WRITE and stalls must not hold a
/// buffer meanwhile: the buffer is taken once the payload is in the
/// socket, its start staged (charged to `staging`) if the client's window
/// closed first; a stall drops the connection (`Err`). The payload is
/// read in pieces (`WriteBuffer::receive_piece`), so that an export with
/// integrity checksums each one while it is still in the CPU's cache.
pub async fn receive_payload<R: CallStream>(
    body: &mut RecordReader<R>,
    export: &Export,
    file: &OpenFile,
    offset: u64,
    len: usize,
    staging: &StagingBudget,
) -> Result<Result<WriteBuffer, Refused>, RecordError> {
    let staged = stage_payload(body, len, staging).await?;
    let mut buf = match export.data.prepare_write(file.data(), offset, len).await {
        Ok(buf) => buf,
        Err(error) => {
            return Ok(Err(Refused {
                error,
                received: staged.bytes().len(),
            }))
        }
    };
    let received = staged.bytes().len();
    buf.payload_mut()[..received].copy_from_slice(staged.bytes());
    drop(staged);
    buf.arrived(received);
    receive_rest(body, &mut buf, received).await?;
    Ok(Ok(buf))
}

/// Reads the rest of `buf`'s payload, from byte `received` on, from
/// `body`, in the pieces [`WriteBuffer::receive_piece`] asks for.
pub async fn receive_rest<R: CallStream>(
    body: &mut RecordReader<R>,
    buf: &mut WriteBuffer,
    mut received: usize,
) -> Result<(), RecordError> {
    let len = buf.len();
    while received < len {
        let end = len.min(received + buf.receive_piece());
        body.read_exact(&mut buf.payload_mut()[received..end])
            .await?;
        received = end;
        buf.arrived(received);
    }
    Ok(())
}

/// Reads and drops the next `len` bytes of the record (a payload refused,
/// its padding), through the record reader's own buffer: a 4 KiB stack
/// buffer here made every future that may skip (NFSv4's boxed COMPOUND
/// receive among them) 4 KiB larger.
pub async fn skip<R: CallStream>(
    body: &mut RecordReader<R>,
    len: usize,
) -> Result<(), RecordError> {
    body.skip(len).await
}

/// Whether a WRITE of `buf` to `file` may be written on the connection's
/// task, into the page cache (`DataPlane::may_write_on_task`: a small
/// UNSTABLE write without integrity to a file on which nothing of ours
/// but such page-cache writes is in flight). No
/// syscall: what NFSv3 and NFSv4 ask before starting a WRITE on a task.
pub fn may_write_on_task(
    export: &Export,
    file: &OpenFile,
    buf: &WriteBuffer,
    stable: Stable,
) -> bool {
    export
        .data
        .may_write_on_task(file.data(), buf.len(), stable)
}

/// Runs `f` as `creds` (see `dionfs_sys::cred::with_creds`). A switch the
/// kernel refused is logged and counted as a server fault, and is
/// `FsError::ServerFault`; `f` did not run then.
pub fn run_as<T>(server: &Server, creds: &Creds, f: impl FnOnce() -> T) -> Result<T, FsError> {
    with_creds(creds, f).map_err(|e| {
        error!(error = %e, "cannot switch to the client's credentials");
        server.note_server_fault();
        FsError::ServerFault
    })
}

/// The permission check of a READ (`write == false`) or WRITE of `file` by
/// `creds`: granted to the same credentials since the file last changed
/// (`attr`, from a statx made for this call; no system call then), or
/// asked of the kernel under those credentials (and remembered if
/// granted).
pub fn check_io_access(
    server: &Server,
    creds: &Creds,
    file: &OpenFile,
    write: bool,
    attr: Option<&Attr>,
) -> Result<(), FsError> {
    if let Some(attr) = attr {
        if ops::file_access_granted(file, creds, write, attr) {
            return Ok(());
        }
    }
    run_as(server, creds, || match attr {
        Some(attr) => ops::check_file_access_remembered(file, write, attr),
        None => ops::check_file_access(file, write),
    })?
}

/// A READ's data as its reply's payload, sent from the pool buffer it was
/// read into.
pub struct ReadPayload(pub ReadData);

impl ReplyPayload for ReadPayload {
    fn bytes(&self) -> &[u8] {
        self.0.data()
    }
}

/// Starts what a READ of `file` handed out with its data: readahead and a
/// rebuild of the file's checksums (see [`start_prefetch`] and
/// [`start_rebuild`]).
pub fn start_read_followups(file: &Arc<OpenFile>, data: &mut ReadData) {
    start_prefetch(file, data.take_prefetch());
    if let Some(rebuild) = data.take_rebuild() {
        start_rebuild(file, rebuild);
    }
}

/// Starts the readahead a READ asked for, each chunk on tokio's blocking
/// pool so that the reply goes out meanwhile. The prefetch runs with the
/// server's own identity: it only reads the already-open descriptor, for
/// data this client's READ of the file was just allowed to read. Without a
/// runtime (unit tests) the chunks are dropped, which cancels them.
pub fn start_prefetch(file: &Arc<OpenFile>, prefetch: Vec<Prefetch>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    for chunk in prefetch {
        let file = file.clone();
        runtime.spawn_blocking(move || chunk.run(file.data()));
    }
}

/// Starts the rebuild of a file's checksums a READ handed out, on a
/// thread of its own: a pass over the whole file (minutes for a large
/// one), which no NFS call waits for, nor a stop of the server (a rebuild
/// cut short leaves the checksums stale, to be rebuilt after the next
/// start). If no thread can be made, a later READ hands it out again.
pub fn start_rebuild(file: &Arc<OpenFile>, rebuild: Rebuild) {
    let file = file.clone();
    let spawned = std::thread::Builder::new()
        .name("dionfs-rebuild".into())
        .spawn(move || rebuild.run(file.data()));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start a thread to rebuild a file's checksums; a later READ tries again");
    }
}

/// Before a call by NFSv4 client `by` (`None`: v3) that changes the file
/// `name` in directory `dir` of `export` by its name (REMOVE, RENAME: its
/// links, its ctime): [`Delegations::enter`](dionfs_core::delegations::Delegations::enter)
/// for that file. Nothing to hold when delegations are off or there is no
/// such file (the call answers that itself).
pub fn enter_named(
    server: &Server,
    export: &Export,
    dir: &dionfs_fs::Node,
    name: &[u8],
    by: Option<u64>,
) -> Result<Option<Busy>, Recalling> {
    if !server.delegations.enabled() {
        return Ok(None);
    }
    match export.fs.lookup(dir, name) {
        Ok((node, _)) => server
            .delegations
            .enter(node.fh(), by, Access::Write)
            .map(Some),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_dataplane::Stable;

    /// A payload lands in the buffer whole, at a misaligned offset too, and
    /// what follows it in the record (its padding, here) stays there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_payload_is_received_whole_and_its_padding_left_in_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let path = root.join("export");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("f"), b"").unwrap();
        let server = crate::testing::server(&root, &path);
        let exports = server.exports();
        let export = &exports[0];
        let top = export.fs.resolve(export.fs.root_handle()).unwrap();
        let (node, _) = export.fs.lookup(&top, b"f").unwrap();
        let file = file_to_write(export, node.fh()).unwrap();

        let payload: Vec<u8> = (0..10_001u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut record = payload.clone();
        record.extend_from_slice(&[0, 0, 0]); // XDR padding to 10,004
        let bytes = dionfs_rpc::framed(&record);
        let mut body = RecordReader::new(&bytes[..], 1 << 20);
        assert!(body.next_record().await.unwrap());
        let offset = 4096 + 5;
        let buf = receive_payload(
            &mut body,
            export,
            &file,
            offset,
            payload.len(),
            &server.staging,
        )
        .await
        .unwrap()
        .unwrap();
        let mut padding = [9u8; 3];
        body.read_exact(&mut padding).await.unwrap();
        assert_eq!(padding, [0, 0, 0]);
        assert!(body.at_record_end());

        let done =
            tokio::task::block_in_place(|| export.data.write(file.data(), buf, Stable::FileSync))
                .unwrap();
        assert_eq!(done.count, payload.len());
        let written = std::fs::read(path.join("f")).unwrap();
        assert_eq!(written.len(), offset as usize + payload.len());
        assert!(written[..offset as usize].iter().all(|&b| b == 0));
        assert_eq!(&written[offset as usize..], &payload[..]);
    }
}
