//! One TCP connection: a loop reading calls, tasks running them, and replies
//! written in the order the calls finish.
//!
//! The reading loop owns the read half. The write half sits behind a mutex
//! shared by everyone who has a reply to send (the loop itself for immediate
//! replies, the call tasks for the rest); a reply is written whole, with one
//! vectored write loop, while holding the mutex, so replies never interleave.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dionfs_rpc::record::MAX_FRAGMENT_LEN;
use dionfs_rpc::{
    read_call_header, record_mark, CallError, RecordError, RecordReader, ReplyStatus,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, Notify, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use super::{ConnInfo, ConnLimits, Received, Reply, Service};

/// Upper bound on `ConnLimits::max_in_flight`, so that permit counts fit the
/// semaphore's u32 arithmetic.
const MAX_IN_FLIGHT_CAP: usize = 1 << 16;

/// Why a connection ended.
#[derive(Debug)]
pub enum ConnEnd {
    /// The peer closed its side between two calls.
    PeerClosed,
    /// The server is shutting down.
    Shutdown,
    /// The peer sent a record over the size limit.
    RecordTooLarge { size: u64, max: u32 },
    /// The stream ended inside a record.
    Truncated,
    /// The peer sent something other than a call.
    NotACall,
    /// Reading from the socket failed.
    ReadError(io::Error),
    /// Writing a reply failed or timed out.
    WriteError(io::ErrorKind),
}

impl fmt::Display for ConnEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnEnd::PeerClosed => f.write_str("peer closed"),
            ConnEnd::Shutdown => f.write_str("server shutdown"),
            ConnEnd::RecordTooLarge { size, max } => {
                write!(f, "record of {size} bytes over limit {max}")
            }
            ConnEnd::Truncated => f.write_str("stream ended inside a record"),
            ConnEnd::NotACall => f.write_str("peer sent a non-call message"),
            ConnEnd::ReadError(e) => write!(f, "read error: {e}"),
            ConnEnd::WriteError(kind) => write!(f, "write error: {kind}"),
        }
    }
}

/// The parts of a connection that call tasks share with the reading loop.
struct Shared {
    writer: Mutex<OwnedWriteHalf>,
    write_timeout: Duration,
    /// Set once the connection is closing or a write failed: replies that
    /// finish later are dropped.
    closed: AtomicBool,
    /// The first write failure, for the log line.
    write_error: OnceLock<io::ErrorKind>,
    /// Wakes the reading loop when a write fails.
    write_failed: Notify,
}

impl Shared {
    /// Sends one reply. A failure marks the connection broken and wakes the
    /// reading loop, which then closes it; the caller has nothing to do.
    async fn send(&self, reply: &Reply) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut writer = self.writer.lock().await;
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // Bounded so that a peer that stops reading cannot hold the writer
        // (and every call task queued behind it) forever.
        let result = tokio::time::timeout(self.write_timeout, write_reply(&mut *writer, reply))
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
        if let Err(e) = result {
            self.closed.store(true, Ordering::Release);
            let _ = self.write_error.set(e.kind());
            self.write_failed.notify_one();
        }
    }
}

/// Writes `reply` as one record: record mark, header, payload, padding, with
/// vectored writes (the payload is never copied).
pub(super) async fn write_reply<W: AsyncWrite + Unpin>(w: &mut W, reply: &Reply) -> io::Result<()> {
    let data = reply.data_bytes();
    let pad = dionfs_xdr::pad_len(data.len());
    let total = reply.header.len() + data.len() + pad;
    let len = u32::try_from(total)
        .ok()
        .filter(|len| *len <= MAX_FRAGMENT_LEN)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "reply exceeds one fragment"))?;
    let mark = record_mark(len, true);
    let zeros = [0u8; 3];
    let mut slices = [
        IoSlice::new(&mark),
        IoSlice::new(&reply.header),
        IoSlice::new(data),
        IoSlice::new(&zeros[..pad]),
    ];
    let mut remaining: &mut [IoSlice<'_>] = &mut slices;
    while !remaining.is_empty() {
        let n = w.write_vectored(remaining).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        // Drops the slices written in full and trims the one written in part.
        IoSlice::advance_slices(&mut remaining, n);
    }
    Ok(())
}

/// Serves one connection until the peer closes it or it fails: reads calls,
/// hands them to `service`, sends the replies. Logs one line when the
/// connection opens and one when it closes. Returns why it ended.
///
/// The caller sets up the socket (TCP_NODELAY is set by [`super::serve`]).
pub async fn serve_connection<S: Service>(
    service: Arc<S>,
    stream: TcpStream,
    conn: ConnInfo,
    limits: ConnLimits,
) -> ConnEnd {
    run_connection(service, stream, conn, limits, std::future::pending()).await
}

/// [`serve_connection`] that also stops reading when `stop` completes, then
/// lets the calls in flight finish (bounded by `limits.drain_timeout`).
pub(super) async fn run_connection<S: Service>(
    service: Arc<S>,
    stream: TcpStream,
    conn: ConnInfo,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
) -> ConnEnd {
    let conn = Arc::new(conn);
    info!(conn = conn.id, peer = %conn.peer, local = %conn.local, "connection opened");
    let (read_half, write_half) = stream.into_split();
    let shared = Arc::new(Shared {
        writer: Mutex::new(write_half),
        write_timeout: limits.write_timeout,
        closed: AtomicBool::new(false),
        write_error: OnceLock::new(),
        write_failed: Notify::new(),
    });
    let max_in_flight = limits.max_in_flight.clamp(1, MAX_IN_FLIGHT_CAP);
    let in_flight = Arc::new(Semaphore::new(max_in_flight));
    let mut reader = RecordReader::new(read_half, limits.max_record);
    let mut calls = 0u64;

    let end = tokio::select! {
        biased;
        () = stop => ConnEnd::Shutdown,
        () = shared.write_failed.notified() => {
            ConnEnd::WriteError(shared.write_error.get().copied().unwrap_or(io::ErrorKind::Other))
        }
        end = read_calls(&service, &conn, &mut reader, &shared, &in_flight, &mut calls) => end,
    };

    if matches!(end, ConnEnd::PeerClosed | ConnEnd::Shutdown) {
        // Let the calls in flight send their replies: wait until every permit
        // is back. `max_in_flight` is capped far below u32::MAX.
        let all = max_in_flight as u32;
        let _ = tokio::time::timeout(limits.drain_timeout, in_flight.acquire_many(all)).await;
    }
    shared.closed.store(true, Ordering::Release);
    // Send FIN now; the socket itself closes when the last call task that
    // still holds the write half finishes. Bounded: a reply being written
    // holds the lock for at most the write timeout.
    let _ = tokio::time::timeout(limits.write_timeout, async {
        shared.writer.lock().await.shutdown().await
    })
    .await;
    info!(conn = conn.id, peer = %conn.peer, reason = %end, calls, "connection closed");
    end
}

/// The reading loop: one call after the other until the connection ends.
async fn read_calls<S: Service>(
    service: &Arc<S>,
    conn: &Arc<ConnInfo>,
    reader: &mut RecordReader<OwnedReadHalf>,
    shared: &Arc<Shared>,
    in_flight: &Arc<Semaphore>,
    calls: &mut u64,
) -> ConnEnd {
    loop {
        // Backpressure: with every permit taken by calls in flight, the
        // connection reads nothing more until one of them finishes.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            // The semaphore is never closed.
            return ConnEnd::Shutdown;
        };
        match reader.next_record().await {
            Ok(true) => {}
            Ok(false) => return ConnEnd::PeerClosed,
            Err(e) => return record_error_end(e, conn),
        }
        match read_call(service, conn, reader, shared, calls).await {
            Ok(Some(pending)) => {
                let task = run_call(
                    service.clone(),
                    conn.clone(),
                    shared.clone(),
                    pending,
                    permit,
                );
                if S::EXECUTE_BLOCKS {
                    let runtime = tokio::runtime::Handle::current();
                    tokio::task::spawn_blocking(move || runtime.block_on(task));
                } else {
                    tokio::spawn(task);
                }
            }
            Ok(None) => {}
            Err(end) => return end,
        }
    }
}

/// Reads one call from the record just opened, through `service.receive`,
/// and consumes the rest of the record. Replies at once where the call
/// needs no task. Returns the call to run, if any.
async fn read_call<S: Service>(
    service: &Arc<S>,
    conn: &Arc<ConnInfo>,
    reader: &mut RecordReader<OwnedReadHalf>,
    shared: &Shared,
    calls: &mut u64,
) -> Result<Option<S::Pending>, ConnEnd> {
    let call = match read_call_header(reader).await {
        Ok(call) => call,
        Err(CallError::Record(e)) => return Err(record_error_end(e, conn)),
        Err(CallError::NotACall { xid, msg_type }) => {
            debug!(
                conn = conn.id,
                xid, msg_type, "peer sent a non-call message"
            );
            return Err(ConnEnd::NotACall);
        }
        Err(e) => {
            debug!(conn = conn.id, error = %e, "call refused");
            reader
                .skip_rest()
                .await
                .map_err(|e| record_error_end(e, conn))?;
            if let Some(header) = e.reply() {
                shared.send(&Reply::new(header)).await;
            }
            return Ok(None);
        }
    };
    *calls += 1;
    let (xid, prog, proc_) = (call.xid, call.prog, call.proc_);
    let received = match service.receive(conn, call, reader).await {
        Ok(received) => received,
        // The arguments claimed more bytes than the record holds.
        Err(RecordError::PastEnd) => Received::Reply(Reply::status(xid, ReplyStatus::GarbageArgs)),
        // The arguments are longer than the procedure's can be: refused
        // before they were read; the rest of the record is skipped below,
        // through a small buffer, and the connection goes on.
        Err(RecordError::RestTooLarge { size, max }) => {
            debug!(
                conn = conn.id,
                peer = %conn.peer,
                xid,
                prog,
                proc_,
                size,
                max,
                "arguments over the procedure's limit: GARBAGE_ARGS"
            );
            service.note_oversized_args();
            Received::Reply(Reply::status(xid, ReplyStatus::GarbageArgs))
        }
        Err(e) => return Err(record_error_end(e, conn)),
    };
    reader
        .skip_rest()
        .await
        .map_err(|e| record_error_end(e, conn))?;
    match received {
        Received::Run(pending) => return Ok(Some(pending)),
        Received::Reply(reply) => shared.send(&reply).await,
        Received::NoReply => {}
    }
    Ok(None)
}

/// Runs one call in its own task; the permit returns when the reply is out.
async fn run_call<S: Service>(
    service: Arc<S>,
    conn: Arc<ConnInfo>,
    shared: Arc<Shared>,
    pending: S::Pending,
    _permit: OwnedSemaphorePermit,
) {
    if let Some(reply) = service.execute(conn, pending).await {
        shared.send(&reply).await;
    }
}

/// How a read failure ends the connection. An oversized record is worth a
/// warning: it is a misconfigured or hostile client.
fn record_error_end(e: RecordError, conn: &ConnInfo) -> ConnEnd {
    match e {
        RecordError::TooLarge { size, max } => {
            warn!(conn = conn.id, peer = %conn.peer, size, max, "record too large, closing connection");
            ConnEnd::RecordTooLarge { size, max }
        }
        RecordError::Truncated | RecordError::PastEnd => ConnEnd::Truncated,
        RecordError::Io(e) => ConnEnd::ReadError(e),
        // Neither is raised by the reads this loop makes itself; a service
        // that lets one through has lost track of the stream.
        RecordError::NoRecord | RecordError::RestTooLarge { .. } => {
            ConnEnd::ReadError(io::Error::other(e))
        }
    }
}
