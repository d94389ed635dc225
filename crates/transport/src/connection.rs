//! One TCP connection: a loop reading calls, tasks (or blocking threads)
//! running them, replies written in the order the calls finish, and a
//! watchdog that closes the connection when its peer stalls.
//!
//! Replies are written by whoever finishes a call, without waiting: if no
//! one else is writing and the socket takes the whole reply, that is one
//! `writev` and no hand-off. Otherwise the reply joins the connection's
//! queue and the connection's own writer (a branch of the connection task)
//! sends it when the socket has room. So a thread of the blocking pool never
//! waits on a socket, and a peer that does not read its replies holds its
//! queue, never threads.
//!
//! The bounds, per connection:
//! - `max_in_flight` calls from read to reply written (queued replies
//!   included);
//! - `buffer_share` calls holding a large buffer, likewise;
//! - no new call is read while more than [`backlog_limit`] reply bytes wait
//!   for the peer;
//! - `stall_timeout` without a byte inside a record, `reply_timeout`
//!   without a reply byte taken by a peer that has replies waiting, and
//!   `idle_timeout` with nothing at all, each close the connection and give
//!   back what it holds.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use dionfs_rpc::record::MAX_FRAGMENT_LEN;
use dionfs_rpc::{
    read_call_header, record_mark, CallError, RecordError, RecordReader, ReplyStatus,
};
use parking_lot::Mutex;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use super::counters::NetCounters;
use super::spin::CallInFlight;
use super::stream::{CallReader, ReadProgress, Waiting};
use super::{ConnInfo, ConnLimits, Received, Reply, Service};

/// Upper bound on `ConnLimits::max_in_flight` and `buffer_share`, so that
/// permit counts fit the semaphore's u32 arithmetic.
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
    /// Writing a reply failed.
    WriteError(io::ErrorKind),
    /// No byte of a started record came for the stall timeout.
    Stalled(Duration),
    /// Replies waited for the peer to read them, without progress, for the
    /// reply timeout.
    RepliesUnread(Duration),
    /// No call and no byte for the idle timeout.
    Idle(Duration),
    /// Closed, quiet, for a new connection at `max_connections`.
    Evicted,
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
            ConnEnd::Stalled(t) => write!(f, "record stalled for {}s", t.as_secs_f64()),
            ConnEnd::RepliesUnread(t) => {
                write!(f, "replies unread for {}s", t.as_secs_f64())
            }
            ConnEnd::Idle(t) => write!(f, "idle for {}s", t.as_secs_f64()),
            ConnEnd::Evicted => {
                f.write_str("quiet longest at max_connections: closed for a new connection")
            }
        }
    }
}

/// Send-buffer room a peer gets before it has shown that it reads its
/// replies: one large reply. Each byte the peer then takes adds a byte of
/// room, up to the whole send buffer, so a client reading at its pace has
/// it all after its first few replies, and one that never reads (its
/// socket's receive buffer takes a little, then nothing) gets about one
/// large reply's worth of calls run instead of a send buffer's worth.
const FIRST_ROOM: usize = 1 << 20;

/// The send buffer a connection asks for: room for the reply of each call
/// that may hold a large buffer, and for [`SEND_BACKLOG`] more, at most
/// [`MAX_SEND_RECORDS`] of the largest.
fn send_buffer_len(limits: &ConnLimits) -> usize {
    let records = (limits.buffer_share.max(1) + SEND_BACKLOG).min(MAX_SEND_RECORDS);
    records.saturating_mul(limits.max_record as usize)
}

/// Largest replies the send buffer holds beyond those of calls in progress.
const SEND_BACKLOG: usize = 4;

/// Largest replies a send buffer holds at most, however many buffer shares
/// a connection has.
const MAX_SEND_RECORDS: usize = 64;

/// Reply bytes that may wait for a peer before the connection stops reading
/// calls: two of the largest replies, so a client reading at its own pace
/// never waits on this, and one that does not read costs at most this much
/// beyond what its socket buffers.
fn backlog_limit(limits: &ConnLimits) -> usize {
    2 * limits.max_record as usize
}

/// What a call holds from the moment it is read until its reply is written
/// (or dropped): a place among the connection's calls in flight and, for a
/// call holding a large buffer, one of the connection's buffer shares.
#[derive(Default)]
pub(super) struct CallPermits {
    _in_flight: Option<OwnedSemaphorePermit>,
    _share: Option<OwnedSemaphorePermit>,
    /// Room in the socket's send buffer reserved for the reply.
    room: Option<Room>,
    /// The call counted among the server's calls in flight.
    _call: Option<CallInFlight>,
}

/// Send-buffer room reserved for one reply (see [`Shared::reserve_room`]),
/// given back when the reply is handed to the socket or dropped.
pub(super) struct Room {
    rooms: Arc<Rooms>,
    bytes: usize,
}

/// The room a connection's calls in flight hold for their replies.
#[derive(Default)]
struct Rooms {
    reserved: AtomicUsize,
    /// Wakes the reading loop waiting for room when some is given back.
    freed: Notify,
}

impl Drop for Room {
    fn drop(&mut self) {
        self.rooms.reserved.fetch_sub(self.bytes, Ordering::Relaxed);
        self.rooms.freed.notify_one();
    }
}

/// A reply that could not be written at once, and how much of it was.
struct Outgoing {
    reply: Reply,
    /// Bytes of its record already written.
    sent: usize,
    _permits: CallPermits,
}

/// Who is writing to the socket. Only one at a time, so replies never
/// interleave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// Nobody: the next reply may be written at once by whoever has it.
    Idle,
    /// A call's thread or task, writing its reply without waiting.
    Direct,
    /// The connection's writer, draining the queue.
    Queue,
}

struct ReplyQueue {
    writer: Writer,
    replies: VecDeque<Outgoing>,
}

/// The parts of a connection that call tasks share with the connection
/// task.
struct Shared {
    socket: OwnedWriteHalf,
    queue: Mutex<ReplyQueue>,
    /// Bytes of queued replies not yet written (the reply being written by
    /// the queue writer included).
    unsent: AtomicUsize,
    /// Bytes the queue writer has written: its progress, for the watchdog.
    written: AtomicU64,
    /// Bytes written to the socket by anyone; less the bytes the socket
    /// still holds unacknowledged, what the peer has taken.
    to_socket: AtomicU64,
    /// Wakes the queue writer when a reply is handed to it.
    wake_writer: Notify,
    /// Wakes the reading loop when a queued reply has been written.
    drained: Notify,
    /// Set once the connection is closing or a write failed: replies that
    /// finish later are dropped.
    closed: AtomicBool,
    /// The first write failure, for the log line.
    write_error: OnceLock<io::ErrorKind>,
    /// Wakes the connection task when a write fails.
    write_failed: Notify,
    /// Usable size of the socket's send buffer (fixed at the start).
    send_buffer: usize,
    /// Room reserved for replies of calls in flight.
    rooms: Arc<Rooms>,
    /// Set while the reading loop waits for room in the send buffer: the
    /// peer is not taking its replies.
    waiting_room: AtomicBool,
    counters: Arc<NetCounters>,
}

impl Shared {
    /// Sends one reply, never waiting: written at once if no one else is
    /// writing and the socket takes it, else queued for the connection's
    /// writer (which may then finish a reply written in part). `permits`
    /// are released when the reply is out. A failure marks the connection
    /// broken and wakes the connection task, which then closes it; the
    /// caller has nothing to do.
    fn send(&self, reply: Reply, mut permits: CallPermits) {
        // The reply's bytes now count as queued or as in the socket.
        permits.room = None;
        {
            let mut queue = self.queue.lock();
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            if queue.writer != Writer::Idle {
                self.unsent.fetch_add(record_len(&reply), Ordering::Relaxed);
                queue.replies.push_back(Outgoing {
                    reply,
                    sent: 0,
                    _permits: permits,
                });
                return;
            }
            queue.writer = Writer::Direct;
        }
        let mut sent = 0;
        let written = write_without_waiting(&reply, &mut sent, |slices| {
            self.socket.try_write_vectored(slices)
        });
        self.to_socket.fetch_add(sent as u64, Ordering::Relaxed);
        let mut queue = self.queue.lock();
        match written {
            Ok(true) => {
                drop(permits);
                if queue.replies.is_empty() {
                    queue.writer = Writer::Idle;
                } else {
                    // Replies that finished meanwhile: written from here,
                    // several to a writev, while the socket takes them.
                    drop(queue);
                    self.drain_without_waiting();
                }
            }
            Ok(false) => {
                // The socket is full: the rest waits for room, first in line.
                self.unsent
                    .fetch_add(record_len(&reply) - sent, Ordering::Relaxed);
                queue.replies.push_front(Outgoing {
                    reply,
                    sent,
                    _permits: permits,
                });
                queue.writer = Writer::Queue;
                self.wake_writer.notify_one();
            }
            Err(e) => {
                drop(queue);
                self.fail(e.kind());
            }
        }
    }

    /// Writes queued replies as the socket takes them, for the life of the
    /// connection. Returns only on a write error.
    async fn write_queued(&self) -> io::ErrorKind {
        loop {
            self.wake_writer.notified().await;
            loop {
                let mut batch = {
                    let mut queue = self.queue.lock();
                    if queue.writer != Writer::Queue {
                        break;
                    }
                    if queue.replies.is_empty() {
                        queue.writer = Writer::Idle;
                        break;
                    }
                    take_batch(&mut queue.replies)
                };
                while !batch.is_empty() {
                    match self.write_batch(&mut batch) {
                        Ok(()) if batch.is_empty() => {}
                        Ok(()) => {
                            if let Err(e) = self.socket.writable().await {
                                return e.kind();
                            }
                        }
                        Err(e) => return e.kind(),
                    }
                }
                self.drained.notify_waiters();
            }
        }
    }

    /// Writes queued replies, in batches, for as long as the socket takes
    /// them without waiting; called by a writer that holds
    /// [`Writer::Direct`]. Leaves the socket to the connection's writer
    /// ([`Writer::Queue`]) when it is full, or [`Writer::Idle`] when the
    /// queue is empty.
    fn drain_without_waiting(&self) {
        loop {
            let mut batch = {
                let mut queue = self.queue.lock();
                if queue.replies.is_empty() {
                    queue.writer = Writer::Idle;
                    return;
                }
                take_batch(&mut queue.replies)
            };
            if let Err(e) = self.write_batch(&mut batch) {
                self.fail(e.kind());
                return;
            }
            self.drained.notify_waiters();
            if !batch.is_empty() {
                // The socket is full: the rest waits for room, first in line.
                let mut queue = self.queue.lock();
                while let Some(out) = batch.pop() {
                    queue.replies.push_front(out);
                }
                queue.writer = Writer::Queue;
                self.wake_writer.notify_one();
                return;
            }
        }
    }

    /// Writes `batch` (in order; its first reply may be written in part)
    /// with one vectored write after another, without waiting: the replies
    /// written in full leave the batch (releasing what they hold); what
    /// remains when the socket would block stays, its first reply's `sent`
    /// updated.
    fn write_batch(&self, batch: &mut Vec<Outgoing>) -> io::Result<()> {
        while !batch.is_empty() {
            let marks: Vec<[u8; 4]> = batch
                .iter()
                .map(|out| record_mark(record_len(&out.reply) as u32 - 4, true))
                .collect();
            let zeros = [0u8; 3];
            let mut slices = Vec::with_capacity(4 * batch.len());
            for (out, mark) in batch.iter().zip(&marks) {
                let data = out.reply.data_bytes();
                slices.extend([
                    IoSlice::new(mark),
                    IoSlice::new(&out.reply.header),
                    IoSlice::new(data),
                    IoSlice::new(&zeros[..dionfs_xdr::pad_len(data.len())]),
                ]);
            }
            let mut remaining: &mut [IoSlice<'_>] = &mut slices;
            IoSlice::advance_slices(&mut remaining, batch[0].sent);
            let n = match self.socket.try_write_vectored(remaining) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.written.fetch_add(n as u64, Ordering::Relaxed);
            self.to_socket.fetch_add(n as u64, Ordering::Relaxed);
            self.unsent.fetch_sub(n, Ordering::Relaxed);
            // Hand the bytes out to the replies, first to last.
            let mut left = n;
            let mut done = 0;
            for out in batch.iter_mut() {
                let rest = record_len(&out.reply) - out.sent;
                if left < rest {
                    out.sent += left;
                    break;
                }
                left -= rest;
                out.sent += rest;
                done += 1;
            }
            if done > 1 {
                NetCounters::add(&self.counters.batched_replies, done as u64);
            }
            batch.drain(..done);
        }
        Ok(())
    }

    /// Reserves room for a reply of `bytes` in the socket's send buffer,
    /// waiting while calls in flight hold it (woken when one gives its room
    /// back) or the peer has not taken enough of what was sent (polling,
    /// since the kernel has no readiness for "this much room").
    /// So a call is run only once its reply can go straight into the
    /// socket: a peer that stops reading its replies gets no more calls run,
    /// and holds no buffer and no thread for them, only its socket's
    /// memory. One reply is always let through on an empty socket, in case
    /// the send buffer is smaller than it (the kernel did not let us set it).
    async fn reserve_room(&self, bytes: usize) -> Room {
        let mut pause = Duration::from_millis(1);
        let mut last_unacked = usize::MAX;
        loop {
            let reserved = self.rooms.reserved.load(Ordering::Relaxed);
            let unsent = self.unsent.load(Ordering::Relaxed);
            let unacked =
                dionfs_sys::net::bytes_unacked(self.socket.as_ref() as &TcpStream).unwrap_or(0);
            let busy = reserved + unsent + unacked;
            if busy + bytes <= self.room(unacked)
                || busy == 0
                || self.closed.load(Ordering::Acquire)
            {
                self.waiting_room.store(false, Ordering::Relaxed);
                self.rooms.reserved.fetch_add(bytes, Ordering::Relaxed);
                return Room {
                    rooms: self.rooms.clone(),
                    bytes,
                };
            }
            self.waiting_room.store(true, Ordering::Relaxed);
            // The peer taking bytes is progress for the reply watchdog.
            if unacked < last_unacked && last_unacked != usize::MAX {
                self.written
                    .fetch_add((last_unacked - unacked) as u64, Ordering::Relaxed);
            }
            last_unacked = unacked;
            tokio::select! {
                () = self.rooms.freed.notified() => {}
                () = tokio::time::sleep(pause) => {
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
            }
        }
    }

    /// The send-buffer room replies may use now, `unacked` bytes being in
    /// the socket unacknowledged: [`FIRST_ROOM`] plus what the peer has
    /// taken, at most the send buffer.
    fn room(&self, unacked: usize) -> usize {
        let taken = self
            .to_socket
            .load(Ordering::Relaxed)
            .saturating_sub(unacked as u64);
        let taken = usize::try_from(taken).unwrap_or(usize::MAX);
        self.send_buffer.min(FIRST_ROOM.saturating_add(taken))
    }

    /// Waits while more than `limit` reply bytes wait for the peer.
    async fn wait_for_backlog(&self, limit: usize) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.unsent.load(Ordering::Relaxed) <= limit || self.closed.load(Ordering::Acquire) {
                return;
            }
            drained.await;
        }
    }

    fn fail(&self, kind: io::ErrorKind) {
        let _ = self.write_error.set(kind);
        self.close();
        self.write_failed.notify_one();
    }

    /// Drops every queued reply (their buffers and permits go back) and
    /// every reply that finishes later.
    fn close(&self) {
        let dropped = {
            let mut queue = self.queue.lock();
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut queue.replies)
        };
        self.unsent.store(0, Ordering::Relaxed);
        drop(dropped);
    }
}

/// Bytes of `reply`'s record: record mark, header, payload, padding.
/// Replies written with one `writev` at most (4 slices each, well under
/// `IOV_MAX`).
const MAX_BATCH: usize = 64;

/// The first [`MAX_BATCH`] queued replies, in order.
fn take_batch(replies: &mut VecDeque<Outgoing>) -> Vec<Outgoing> {
    let n = replies.len().min(MAX_BATCH);
    replies.drain(..n).collect()
}

fn record_len(reply: &Reply) -> usize {
    let data = reply.data_bytes().len();
    4 + reply.header.len() + data + dionfs_xdr::pad_len(data)
}

/// Writes `reply` as one record (record mark, header, payload, padding),
/// from byte `*sent` on, with vectored writes through `write` (the payload
/// is never copied), until it is all written (`Ok(true)`) or `write` would
/// block (`Ok(false)`); `*sent` follows.
pub(super) fn write_without_waiting(
    reply: &Reply,
    sent: &mut usize,
    mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
) -> io::Result<bool> {
    let data = reply.data_bytes();
    let pad = dionfs_xdr::pad_len(data.len());
    let total = reply.header.len() + data.len() + pad;
    let len = u32::try_from(total)
        .ok()
        .filter(|len| *len <= MAX_FRAGMENT_LEN)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "reply exceeds one fragment"))?;
    let mark = record_mark(len, true);
    let zeros = [0u8; 3];
    loop {
        let mut slices = [
            IoSlice::new(&mark),
            IoSlice::new(&reply.header),
            IoSlice::new(data),
            IoSlice::new(&zeros[..pad]),
        ];
        let mut remaining: &mut [IoSlice<'_>] = &mut slices;
        // Drops the slices written in full and trims the one written in part.
        IoSlice::advance_slices(&mut remaining, *sent);
        if remaining.is_empty() {
            return Ok(true);
        }
        match write(remaining) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
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
    if service.resolves_names() {
        conn.look_up_names().await;
    }
    let conn = Arc::new(conn);
    info!(conn = conn.id, peer = %conn.peer, local = %conn.local, names = ?conn.names(),
        "connection opened");
    // A fixed send buffer: replies are sent only into room reserved there
    // (`reserve_room`), before their calls run, so it must hold the replies
    // of every large call the connection may have in progress (its buffer
    // shares; with less, a client with many READs outstanding has only as
    // many read from the device at once as the buffer holds replies) plus
    // a backlog of a few of the largest replies for the peer to take.
    // Kernel memory is taken only by bytes actually queued.
    let send_buffer = dionfs_sys::net::set_send_buffer(&stream, send_buffer_len(&limits))
        .unwrap_or_else(|e| {
            debug!(conn = conn.id, error = %e, "cannot set the send buffer size");
            0
        });
    let (read_half, write_half) = stream.into_split();
    let shared = Arc::new(Shared {
        socket: write_half,
        queue: Mutex::new(ReplyQueue {
            writer: Writer::Idle,
            replies: VecDeque::new(),
        }),
        unsent: AtomicUsize::new(0),
        written: AtomicU64::new(0),
        to_socket: AtomicU64::new(0),
        wake_writer: Notify::new(),
        drained: Notify::new(),
        closed: AtomicBool::new(false),
        write_error: OnceLock::new(),
        write_failed: Notify::new(),
        send_buffer,
        rooms: Arc::default(),
        waiting_room: AtomicBool::new(false),
        counters: limits.counters.clone(),
    });
    let max_in_flight = limits.max_in_flight.clamp(1, MAX_IN_FLIGHT_CAP);
    let in_flight = Arc::new(Semaphore::new(max_in_flight));
    let shares = Arc::new(Semaphore::new(
        limits.buffer_share.clamp(1, MAX_IN_FLIGHT_CAP),
    ));
    let progress = Arc::new(ReadProgress::default());
    let mut reader = RecordReader::new(
        CallReader::new(read_half, progress.clone()),
        limits.max_record,
    );
    let registration = limits.quiet.register(conn.id);
    let loop_state = Loop {
        quiet: &registration.quiet,
        service: &service,
        conn: &conn,
        shared: &shared,
        in_flight: &in_flight,
        max_in_flight,
        shares: &shares,
        limits: &limits,
        progress: &progress,
    };

    // One writer for the life of the connection, polled by both phases
    // below: a reply it is half-way through survives the switch.
    let writer = shared.write_queued();
    tokio::pin!(writer);

    let end = tokio::select! {
        biased;
        () = stop => ConnEnd::Shutdown,
        () = registration.quiet.evicted.notified() => ConnEnd::Evicted,
        () = shared.write_failed.notified() => write_end(&shared),
        kind = &mut writer => ConnEnd::WriteError(kind),
        end = watch(&loop_state, &progress) => end,
        end = read_calls(&loop_state, &mut reader) => end,
    };
    // What the reading loop held (a call half-received, a buffer taken for
    // it) is gone with its future.

    if matches!(
        end,
        ConnEnd::PeerClosed | ConnEnd::Shutdown | ConnEnd::Evicted
    ) {
        // Let the calls in flight send their replies: wait until every permit
        // is back (queued replies hold theirs), with the writer running.
        // `max_in_flight` is capped far below u32::MAX.
        let all = max_in_flight as u32;
        tokio::select! {
            _ = tokio::time::timeout(limits.drain_timeout, in_flight.acquire_many(all)) => {}
            _ = &mut writer => {}
        }
    }
    shared.close();
    // Send FIN (or, for a peer we gave up on, close both ways); the socket
    // itself closes when the last call still holding the write half
    // finishes.
    let how = match end {
        ConnEnd::PeerClosed | ConnEnd::Shutdown | ConnEnd::Evicted => rustix::net::Shutdown::Write,
        _ => rustix::net::Shutdown::Both,
    };
    let socket: &TcpStream = shared.socket.as_ref();
    let _ = rustix::net::shutdown(socket, how);
    let calls = registration.quiet.calls.load(Ordering::Relaxed);
    log_end(&conn, &end, &limits, calls);
    end
}

fn write_end(shared: &Shared) -> ConnEnd {
    ConnEnd::WriteError(
        shared
            .write_error
            .get()
            .copied()
            .unwrap_or(io::ErrorKind::Other),
    )
}

/// The metric that counts every connection a warning is held back for.
const DROPPED: &str = "dionfs_connections_dropped_total";

/// The closing log line, and for the ends an operator may act on, the
/// counter and a warning saying what happened (a few per reason at a
/// time: `log_budget.rs`).
fn log_end(conn: &ConnInfo, end: &ConnEnd, limits: &ConnLimits, calls: u64) {
    let counters: &NetCounters = &limits.counters;
    match end {
        ConnEnd::Stalled(t) => {
            NetCounters::bump(&counters.stalled);
            limits.drop_logs.stalled.log(DROPPED, |held_back, more| {
                warn!(
                    conn = conn.id,
                    peer = %conn.peer,
                    stall_timeout_s = t.as_secs_f64(),
                    earlier_not_logged = held_back,
                    "dropping connection: a call stopped arriving half-way for the stall timeout \
                     (a hung, overloaded or hostile client); its buffers are free again. \
                     Raise stall_timeout if clients are this slow on purpose{more}"
                );
            });
        }
        ConnEnd::RepliesUnread(t) => {
            NetCounters::bump(&counters.unread_replies);
            limits
                .drop_logs
                .replies_unread
                .log(DROPPED, |held_back, more| {
                    warn!(
                        conn = conn.id,
                        peer = %conn.peer,
                        reply_timeout_s = t.as_secs_f64(),
                        earlier_not_logged = held_back,
                        "dropping connection: the client read none of its replies for the reply \
                         timeout (hung or hostile); its buffers are free again{more}"
                    );
                });
        }
        ConnEnd::RecordTooLarge { size, max } => {
            NetCounters::bump(&counters.too_large);
            limits.drop_logs.too_large.log(DROPPED, |held_back, more| {
                warn!(
                    conn = conn.id,
                    peer = %conn.peer,
                    size,
                    max,
                    earlier_not_logged = held_back,
                    "record too large, closing connection (a misconfigured or hostile \
                     client){more}"
                );
            });
        }
        ConnEnd::Idle(_) => NetCounters::bump(&counters.idle),
        _ => {}
    }
    info!(conn = conn.id, peer = %conn.peer, reason = %end, calls, "connection closed");
}

/// What the socket of a connection dropped for a stalled record held: a
/// client that truly stopped sending leaves room in it; a full receive
/// memory or a closed window with the bytes unread would be the server's
/// fault (`stream.rs`, [`super::stream`]'s wait for a payload).
fn log_stalled_socket(conn: &ConnInfo, socket: &TcpStream, waiting: Waiting) {
    use dionfs_sys::net::{bytes_queued, rcvlowat, receive_memory, receive_window};
    let queued = bytes_queued(socket).ok();
    let mark = rcvlowat(socket).ok();
    let (charged, limit) = receive_memory(socket).map_or((None, None), |(c, l)| (Some(c), Some(l)));
    let window = receive_window(socket).ok();
    info!(
        conn = conn.id,
        ?waiting,
        ?queued,
        ?mark,
        ?charged,
        ?limit,
        advertised_window = ?window.and_then(|w| w.advertised),
        mss = ?window.map(|w| w.mss),
        "stalled record: the socket's receive side"
    );
}

/// What the reading loop and the watchdog share.
struct Loop<'a, S> {
    service: &'a Arc<S>,
    conn: &'a Arc<ConnInfo>,
    shared: &'a Arc<Shared>,
    in_flight: &'a Arc<Semaphore>,
    max_in_flight: usize,
    shares: &'a Arc<Semaphore>,
    limits: &'a ConnLimits,
    progress: &'a Arc<ReadProgress>,
    quiet: &'a super::quiet::Quiet,
}

impl<S> Loop<'_, S> {
    /// Permits of `in_flight` taken: the calls in flight, plus the one the
    /// reading loop holds while it reads the next call.
    fn permits_taken(&self) -> usize {
        self.max_in_flight - self.in_flight.available_permits()
    }
}

/// Watches the connection for the timeouts of [`ConnLimits`] and returns
/// the first one that expires.
///
/// Clocks run only while the peer is the one awaited: the stall clock while
/// a read inside a record (or a payload) is pending with no byte arriving,
/// the reply clock while replies wait and none of their bytes go out, the
/// idle clock while nothing at all happens. A periodic check, not a timer
/// per read, so the calls themselves pay nothing for it.
async fn watch<S>(l: &Loop<'_, S>, progress: &ReadProgress) -> ConnEnd {
    let limits = l.limits;
    let shortest = limits
        .stall_timeout
        .min(limits.reply_timeout)
        .min(limits.idle_timeout);
    let period = (shortest / 4).max(Duration::from_millis(5));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let socket: &TcpStream = l.shared.socket.as_ref();
    let now = Instant::now();
    let (mut last_read, mut last_write, mut last_busy) = (now, now, now);
    let mut received = progress.received();
    let mut written = l.shared.written.load(Ordering::Relaxed);
    let mut queued = 0;
    let (mut calls, mut last_call) = (l.quiet.calls.load(Ordering::Relaxed), now);
    loop {
        ticks.tick().await;
        let now = Instant::now();
        let waiting = progress.waiting();
        // Read side: progress is bytes received, or while awaiting a
        // payload, bytes queued in the socket.
        let r = progress.received();
        let q = match waiting {
            Waiting::Payload => dionfs_sys::net::bytes_queued(socket).unwrap_or(0),
            _ => 0,
        };
        if r != received || q != queued || waiting == Waiting::Nothing {
            (received, queued, last_read) = (r, q, now);
        }
        let in_record = progress.in_record();
        if waiting != Waiting::Nothing && in_record && now - last_read >= limits.stall_timeout {
            log_stalled_socket(l.conn, socket, waiting);
            return ConnEnd::Stalled(limits.stall_timeout);
        }
        // Write side: queued replies, and the queue writer's progress.
        let unsent = l.shared.unsent.load(Ordering::Relaxed);
        let w = l.shared.written.load(Ordering::Relaxed);
        let stuck = unsent > 0 || l.shared.waiting_room.load(Ordering::Relaxed);
        if !stuck || w != written {
            (written, last_write) = (w, now);
        } else if now - last_write >= limits.reply_timeout {
            return ConnEnd::RepliesUnread(limits.reply_timeout);
        }
        // Idle: waiting for the next call, with none in flight. (Waiting
        // for a record, the reading loop holds one permit itself.)
        let calls_in_flight = l.permits_taken() > 1;
        if waiting != Waiting::Socket || in_record || calls_in_flight || unsent > 0 {
            last_busy = now;
        }
        if now - last_busy.max(last_read) >= limits.idle_timeout {
            return ConnEnd::Idle(limits.idle_timeout);
        }
        // Quiet (for `quiet.rs`): no call in flight or reply waiting, and
        // none received in full since `last_call`. A record arriving does
        // not count: a client could keep every slot with a byte a second.
        let c = l.quiet.calls.load(Ordering::Relaxed);
        let busy = calls_in_flight || unsent > 0;
        if c != calls || busy {
            (calls, last_call) = (c, now);
        }
        limits
            .quiet
            .set(l.quiet, (!busy).then_some(last_call.into_std()));
    }
}

/// The reading loop: one call after the other until the connection ends.
async fn read_calls<S: Service>(l: &Loop<'_, S>, reader: &mut RecordReader<CallReader>) -> ConnEnd {
    // The most calls this connection had in flight since it last had none.
    let mut most_in_flight = 0;
    loop {
        // Backpressure: with every permit taken by calls in flight, the
        // connection reads nothing more until one of them finishes.
        let Ok(permit) = l.in_flight.clone().acquire_owned().await else {
            // The semaphore is never closed.
            return ConnEnd::Shutdown;
        };
        // A peer that does not read its replies gets no new calls read.
        l.shared.wait_for_backlog(backlog_limit(l.limits)).await;
        reader.get_ref().between_records();
        match next_record(l, reader, &mut most_in_flight).await {
            Ok(true) => {}
            Ok(false) => return ConnEnd::PeerClosed,
            Err(e) => return record_error_end(e),
        }
        most_in_flight = most_in_flight.max(l.permits_taken());
        let mut permits = CallPermits {
            _in_flight: Some(permit),
            _share: None,
            room: None,
            _call: Some(l.limits.activity.call()),
        };
        let call = read_call(l, reader, &mut permits).await;
        if call.is_ok() {
            // The connection's count of calls (for its closing line, and
            // the quiet clock).
            l.quiet.calls.fetch_add(1, Ordering::Relaxed);
        }
        match call {
            Ok(Outcome::Run(mut pending)) => {
                if permits._share.is_none() && l.service.holds_buffer_after_receive(&pending) {
                    permits._share = take_share(l).await;
                }
                let bytes = l.service.reply_room(&pending);
                if bytes > 0 {
                    permits.room = Some(l.shared.reserve_room(bytes).await);
                }
                l.service.prepare(l.conn, &mut pending).await;
                run_call(l, pending, permits)
            }
            Ok(Outcome::Reply(reply)) => l.shared.send(reply, permits),
            Ok(Outcome::Nothing) => {}
            Err(end) => return end,
        }
    }
}

/// Opens the next record; first, once this connection has answered all
/// its calls, spins for it while the server is idle (see `spin.rs`), if
/// the connection sends one call at a time (`most_in_flight`, reset here
/// when all are answered, was 1): a client with several calls in flight
/// is not waiting on each reply, and one that drained them all is
/// thinking (verifying what it read, say) rather than about to send.
async fn next_record<S>(
    l: &Loop<'_, S>,
    reader: &mut RecordReader<CallReader>,
    most_in_flight: &mut usize,
) -> Result<bool, RecordError> {
    if l.limits.idle_spin.is_zero() {
        return reader.next_record().await;
    }
    let record = reader.next_record();
    tokio::pin!(record);
    if let Poll::Ready(opened) = poll_once(record.as_mut()).await {
        return opened;
    }
    // Until the calls in flight are answered (every permit but the one the
    // loop holds for the next call is back), the next call may come any
    // time: wait for it without spinning.
    let others = (l.max_in_flight - 1) as u32;
    tokio::select! {
        biased;
        opened = record.as_mut() => return opened,
        _answered = l.in_flight.acquire_many(others) => {}
    }
    let spinning = if std::mem::take(most_in_flight) <= 1 {
        l.limits.activity.try_spin()
    } else {
        None
    };
    if let Some(_spinning) = spinning {
        NetCounters::bump(&l.limits.counters.idle_spins);
        let socket: &TcpStream = l.shared.socket.as_ref();
        let start = std::time::Instant::now();
        let mut look = start;
        // Looks at the socket every LOOK_EVERY, busy in between without
        // yielding to the runtime: a yield wakes the runtime's other
        // workers to steal (futex wake-ups, context switches, another vCPU
        // woken), which cost more than the spin saves.
        while look - start < l.limits.idle_spin && !l.limits.activity.busy() {
            match dionfs_sys::net::bytes_queued(socket) {
                Ok(0) => {}
                Ok(_) => {
                    l.progress.read_now();
                    if let Poll::Ready(opened) = poll_once(record.as_mut()).await {
                        NetCounters::bump(&l.limits.counters.spin_catches);
                        return opened;
                    }
                }
                Err(_) => break,
            }
            // No PAUSE here: on a VM, a PAUSE loop is what the host's
            // pause-loop exiting takes for a spinning lock holder.
            while look.elapsed() < LOOK_EVERY {}
            look = std::time::Instant::now();
        }
    }
    record.await
}

/// How often a spinning connection looks at its socket (one `FIONREAD`).
const LOOK_EVERY: Duration = Duration::from_micros(2);

/// Polls `f` once.
async fn poll_once<F: Future>(mut f: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
}

/// Starts a received call: on a blocking thread if it blocks, else as a
/// task. Either way the reply is sent from there, without waiting.
fn run_call<S: Service>(l: &Loop<'_, S>, pending: S::Pending, permits: CallPermits) {
    let (service, conn, shared) = (l.service.clone(), l.conn.clone(), l.shared.clone());
    if service.execute_blocks(&pending) {
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            if let Some(reply) = runtime.block_on(service.execute(conn, pending)) {
                shared.send(reply, permits);
            }
        });
    } else {
        tokio::spawn(async move {
            if let Some(reply) = service.execute(conn, pending).await {
                shared.send(reply, permits);
            }
        });
    }
}

/// What became of one call read by [`read_call`].
enum Outcome<P> {
    Run(P),
    Reply(Reply),
    Nothing,
}

/// Reads one call from the record just opened, through `service.receive`,
/// and consumes the rest of the record. A call that will hold a large
/// buffer first takes one of the connection's buffer shares into
/// `permits`.
async fn read_call<S: Service>(
    l: &Loop<'_, S>,
    reader: &mut RecordReader<CallReader>,
    permits: &mut CallPermits,
) -> Result<Outcome<S::Pending>, ConnEnd> {
    let conn = l.conn;
    let call = match read_call_header(reader).await {
        Ok(call) => call,
        Err(CallError::Record(e)) => return Err(record_error_end(e)),
        Err(CallError::NotACall { xid, msg_type }) => {
            debug!(
                conn = conn.id,
                xid, msg_type, "peer sent a non-call message"
            );
            return Err(ConnEnd::NotACall);
        }
        Err(e) => {
            debug!(conn = conn.id, error = %e, "call refused");
            reader.skip_rest().await.map_err(record_error_end)?;
            return Ok(e.reply().map_or(Outcome::Nothing, |header| {
                Outcome::Reply(Reply::new(header))
            }));
        }
    };
    let args_len = reader
        .is_last_fragment()
        .then(|| reader.fragment_remaining());
    if l.service.holds_buffer(&call, args_len) {
        permits._share = take_share(l).await;
    }
    let (xid, prog, proc_) = (call.xid, call.prog, call.proc_);
    let received = match l.service.receive(conn, call, reader).await {
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
            l.service.note_oversized_args();
            Received::Reply(Reply::status(xid, ReplyStatus::GarbageArgs))
        }
        Err(e) => return Err(record_error_end(e)),
    };
    reader.skip_rest().await.map_err(record_error_end)?;
    Ok(match received {
        Received::Run(pending) => Outcome::Run(pending),
        Received::Reply(reply) => Outcome::Reply(reply),
        Received::NoReply => Outcome::Nothing,
    })
}

/// One of the connection's buffer shares; waits (counted) while all are
/// held by its calls in flight or replies unsent.
async fn take_share<S>(l: &Loop<'_, S>) -> Option<OwnedSemaphorePermit> {
    if let Ok(share) = l.shares.clone().try_acquire_owned() {
        return Some(share);
    }
    NetCounters::bump(&l.limits.counters.share_delays);
    // `None` only if the semaphore were closed, which it never is.
    l.shares.clone().acquire_owned().await.ok()
}

/// How a read failure ends the connection. An oversized record is worth a
/// warning (a misconfigured or hostile client; `log_end` gives it, a few a
/// minute).
fn record_error_end(e: RecordError) -> ConnEnd {
    match e {
        RecordError::TooLarge { size, max } => ConnEnd::RecordTooLarge { size, max },
        RecordError::Truncated | RecordError::PastEnd => ConnEnd::Truncated,
        RecordError::Io(e) => ConnEnd::ReadError(e),
        // Neither is raised by the reads this loop makes itself; a service
        // that lets one through has lost track of the stream.
        RecordError::NoRecord | RecordError::RestTooLarge { .. } => {
            ConnEnd::ReadError(io::Error::other(e))
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;
    use dionfs_rpc::RecordReader;
    use tokio::net::TcpListener;

    /// A connection's shared half on one end of a loopback connection, and
    /// the peer's reading end.
    async fn pair() -> (Shared, RecordReader<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ours, theirs) = tokio::join!(listener.accept(), TcpStream::connect(addr));
        let (_read, write) = ours.unwrap().0.into_split();
        let shared = Shared {
            socket: write,
            queue: Mutex::new(ReplyQueue {
                writer: Writer::Idle,
                replies: VecDeque::new(),
            }),
            unsent: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            to_socket: AtomicU64::new(0),
            wake_writer: Notify::new(),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            write_error: OnceLock::new(),
            write_failed: Notify::new(),
            send_buffer: 1 << 20,
            rooms: Arc::default(),
            waiting_room: AtomicBool::new(false),
            counters: Arc::default(),
        };
        (shared, RecordReader::new(theirs.unwrap(), 1 << 24))
    }

    /// Reply `i`: a header of `i % 7` bytes and `i * 37 % 600` data bytes
    /// (every padding length), all bytes derived from `i`. (All of them
    /// fit the socket's buffers: nothing has to wait for the peer.)
    fn reply(i: u32) -> Reply {
        let header = vec![i as u8; (i % 7) as usize];
        let data: Vec<u8> = (0..(i * 37 % 600)).map(|j| (i + j) as u8).collect();
        Reply::with_data(header, Box::new(data))
    }

    fn expected(i: u32) -> Vec<u8> {
        let r = reply(i);
        let mut out = r.header.clone();
        out.extend_from_slice(r.data_bytes());
        out.resize(out.len() + dionfs_xdr::pad_len(r.data_bytes().len()), 0);
        out
    }

    #[tokio::test]
    async fn queued_replies_go_out_in_batches_whole_and_in_order() {
        let (shared, mut peer) = pair().await;
        const N: u32 = 300;
        // A writer is busy, so every reply queues; the first is queued as
        // written in part, as when the socket filled in the middle of it.
        shared.queue.lock().writer = Writer::Direct;
        for i in 0..N {
            shared.send(reply(i), CallPermits::default());
        }
        shared.queue.lock().replies[0].sent = 3;
        shared.unsent.fetch_sub(3, Ordering::Relaxed);
        let partial_head = {
            let r = &shared.queue.lock().replies[0].reply;
            let mark = record_mark(record_len(r) as u32 - 4, true);
            mark[..3].to_vec()
        };
        // What the busy writer would have sent of it.
        shared.socket.try_write(&partial_head).unwrap();
        shared.drain_without_waiting();
        assert_eq!(shared.queue.lock().writer, Writer::Idle);
        assert_eq!(shared.unsent.load(Ordering::Relaxed), 0);
        for i in 0..N {
            assert!(peer.next_record().await.unwrap(), "record {i}");
            let mut got = Vec::new();
            peer.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, expected(i), "reply {i}");
        }
        let batched = shared.counters.snapshot().batched_replies;
        assert!(
            batched >= u64::from(N) / 2,
            "{batched} of {N} replies batched"
        );
    }
}
