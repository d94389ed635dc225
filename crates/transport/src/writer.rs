//! The writing side of a connection: its records (replies, and the calls
//! of its back channel) go out through one queue, so they never
//! interleave, in the order they are ready.
//!
//! Records are written by whoever has one, without waiting: if no one else
//! is writing and the socket takes the whole record, that is one `writev`
//! and no hand-off. Otherwise the record joins the connection's queue and
//! the connection's own writer ([`Shared::write_queued`], a branch of the
//! connection task) sends it when the socket has room. So a thread of the
//! blocking pool never waits on a socket, and a peer that does not read its
//! replies holds its queue, never threads.
//!
//! A call's reply is also given room in the socket's send buffer before the
//! call runs ([`Shared::reserve_room`]), and the reading loop reads no new
//! call while too many bytes wait for the peer
//! ([`Shared::wait_for_backlog`]).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dionfs_rpc::record::MAX_FRAGMENT_LEN;
use dionfs_rpc::record_mark;
use parking_lot::Mutex;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit};

use super::counters::NetCounters;
use super::reply::Reply;
use super::spin::CallInFlight;
use super::tls::TlsSession;
/// Send-buffer room a peer gets before it has shown that it reads its
/// replies: one large reply. Each byte the peer then takes adds a byte of
/// room, up to the whole send buffer, so a client reading at its pace has
/// it all after its first few replies, and one that never reads (its
/// socket's receive buffer takes a little, then nothing) gets about one
/// large reply's worth of calls run instead of a send buffer's worth.
const FIRST_ROOM: usize = 1 << 20;

/// What a call holds from the moment it is read until its reply is written
/// (or dropped): a place among the connection's calls in flight and, for a
/// call holding a large buffer, one of the connection's buffer shares.
/// (Fields drop in order: the call stops counting among the server's
/// calls in flight before its permit is back, so a reading loop that has
/// all its permits back sees an idle server and may spin.)
#[derive(Default)]
pub(super) struct CallPermits {
    /// The call counted among the server's calls in flight.
    pub(super) _call: Option<CallInFlight>,
    pub(super) _in_flight: Option<OwnedSemaphorePermit>,
    pub(super) _share: Option<OwnedSemaphorePermit>,
    /// Room in the socket's send buffer reserved for the reply.
    pub(super) room: Option<Room>,
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
/// task: the socket's write half and what goes out through it.
pub(super) struct Shared {
    pub(super) socket: OwnedWriteHalf,
    queue: Mutex<ReplyQueue>,
    /// Bytes of queued replies not yet written (the reply being written by
    /// the queue writer included).
    pub(super) unsent: AtomicUsize,
    /// Bytes the queue writer has written: its progress, for the watchdog.
    pub(super) written: AtomicU64,
    /// Bytes written to the socket by anyone; less the bytes the socket
    /// still holds unacknowledged, what the peer has taken.
    to_socket: AtomicU64,
    /// What the peer had taken at the last look at the socket
    /// ([`Shared::reserve_room`]): never more than it has taken now.
    taken_seen: AtomicU64,
    /// Wakes the queue writer when a reply is handed to it.
    wake_writer: Notify,
    /// Wakes the reading loop when a queued reply has been written.
    drained: Notify,
    /// Set once the connection is closing or a write failed: replies that
    /// finish later are dropped.
    closed: AtomicBool,
    /// The first write failure, for the log line.
    pub(super) write_error: OnceLock<io::ErrorKind>,
    /// Wakes the connection task when a write fails.
    pub(super) write_failed: Notify,
    /// Usable size of the socket's send buffer (fixed at the start).
    send_buffer: usize,
    /// Room reserved for replies of calls in flight.
    rooms: Arc<Rooms>,
    /// Set while the reading loop waits for room in the send buffer: the
    /// peer is not taking its replies.
    pub(super) waiting_room: AtomicBool,
    counters: Arc<NetCounters>,
    /// Set once the connection has switched to TLS (RFC 9289): records
    /// are then encrypted on their way out ([`Shared::try_write`]).
    tls: OnceLock<Arc<TlsSession>>,
}

impl Shared {
    /// The writing side of a connection on `socket`, whose send buffer
    /// holds `send_buffer` bytes.
    pub(super) fn new(
        socket: OwnedWriteHalf,
        send_buffer: usize,
        counters: Arc<NetCounters>,
    ) -> Self {
        Self {
            socket,
            queue: Mutex::new(ReplyQueue {
                writer: Writer::Idle,
                replies: VecDeque::new(),
            }),
            unsent: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            to_socket: AtomicU64::new(0),
            taken_seen: AtomicU64::new(0),
            wake_writer: Notify::new(),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            write_error: OnceLock::new(),
            write_failed: Notify::new(),
            send_buffer,
            rooms: Arc::default(),
            waiting_room: AtomicBool::new(false),
            counters,
            tls: OnceLock::new(),
        }
    }

    /// One non-blocking vectored write of record bytes: straight to the
    /// socket, or encrypted once the connection has switched to TLS.
    /// Returns the record bytes taken; counts in `to_socket` the bytes
    /// the socket took (ciphertext over TLS).
    fn try_write(&self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        match self.tls.get() {
            None => {
                let n = self.socket.try_write_vectored(slices)?;
                self.to_socket.fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Some(tls) => tls.write_vectored(self.socket.as_ref(), slices, &self.to_socket),
        }
    }

    /// Whether ciphertext of records already taken waits for room in the
    /// socket (never on a plain connection).
    fn cipher_pending(&self) -> bool {
        self.tls.get().is_some_and(|tls| tls.pending())
    }

    /// Has the connection's writer write out waiting ciphertext (the TLS
    /// session's own records, such as the answer to a KeyUpdate), unless
    /// a writer is at work: it does so before it stops.
    pub(super) fn flush_tls_soon(&self) {
        let mut queue = self.queue.lock();
        if queue.writer == Writer::Idle && !self.closed.load(Ordering::Acquire) {
            queue.writer = Writer::Queue;
            self.wake_writer.notify_one();
        }
    }

    /// Takes the socket for the switch to TLS, once every record queued
    /// before has been written: records sent meanwhile wait in the queue
    /// until [`Shared::end_switch`].
    pub(super) async fn begin_switch(&self) {
        loop {
            {
                let mut queue = self.queue.lock();
                if queue.writer == Writer::Idle && queue.replies.is_empty() {
                    queue.writer = Writer::Direct;
                    return;
                }
            }
            // The queue writer notifies before it marks itself idle: look
            // again shortly as well.
            tokio::select! {
                () = self.drained.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(1)) => {}
            }
        }
    }

    /// Writes `bytes` to the socket as they are (the reply to the TLS
    /// probe, sent before the handshake), waiting for room; only while
    /// the switch holds the socket.
    pub(super) async fn write_plain(&self, bytes: &[u8]) -> io::Result<()> {
        super::tls::write_all(self.socket.as_ref(), bytes, &self.to_socket).await
    }

    /// Ends the switch: from now on records go out encrypted by `tls`,
    /// starting with those queued meanwhile.
    pub(super) fn end_switch(&self, tls: Arc<TlsSession>) {
        let _ = self.tls.set(tls);
        self.drain_without_waiting();
    }

    /// The socket's bytes counter, for the handshake's writes.
    pub(super) fn to_socket(&self) -> &AtomicU64 {
        &self.to_socket
    }

    /// Sends the TLS close_notify alert on a TLS connection, as far as the
    /// socket takes it without waiting.
    pub(super) fn close_tls(&self) {
        if let Some(tls) = self.tls.get() {
            tls.close(self.socket.as_ref());
        }
    }

    /// Sends one reply, never waiting: written at once if no one else is
    /// writing and the socket takes it, else queued for the connection's
    /// writer (which may then finish a reply written in part). `permits`
    /// are released when the reply is out. A failure marks the connection
    /// broken and wakes the connection task, which then closes it; the
    /// caller has nothing to do.
    pub(super) fn send(&self, reply: Reply, mut permits: CallPermits) {
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
        let written = write_without_waiting(&reply, &mut sent, |slices| self.try_write(slices));
        let mut queue = self.queue.lock();
        match written {
            Ok(true) => {
                drop(permits);
                if queue.replies.is_empty() {
                    queue.writer = Writer::Idle;
                    if self.cipher_pending() {
                        // Over TLS: the record is taken, part of its
                        // ciphertext waits for room.
                        queue.writer = Writer::Queue;
                        self.wake_writer.notify_one();
                    }
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
    pub(super) async fn write_queued(&self) -> io::ErrorKind {
        loop {
            self.wake_writer.notified().await;
            loop {
                let mut batch = {
                    let mut queue = self.queue.lock();
                    if queue.writer != Writer::Queue {
                        break;
                    }
                    if queue.replies.is_empty() {
                        if !self.cipher_pending() {
                            queue.writer = Writer::Idle;
                            break;
                        }
                        Vec::new()
                    } else {
                        take_batch(&mut queue.replies)
                    }
                };
                if batch.is_empty() {
                    // Over TLS: ciphertext of records taken waits.
                    if let Err(kind) = self.flush_waiting().await {
                        return kind;
                    }
                    continue;
                }
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
                    if self.cipher_pending() {
                        // Over TLS: the rest of the ciphertext waits for
                        // room, with the connection's writer.
                        queue.writer = Writer::Queue;
                        self.wake_writer.notify_one();
                    } else {
                        queue.writer = Writer::Idle;
                    }
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
            let mut slices = Vec::with_capacity(MAX_SLICES * batch.len());
            for (out, mark) in batch.iter().zip(&marks) {
                let (parts, used) = record_slices(&out.reply, mark);
                slices.extend_from_slice(&parts[..used]);
            }
            let mut remaining: &mut [IoSlice<'_>] = &mut slices;
            IoSlice::advance_slices(&mut remaining, batch[0].sent);
            let n = match self.try_write(remaining) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.written.fetch_add(n as u64, Ordering::Relaxed);
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
    ///
    /// The socket is looked at (`SIOCOUTQ`, a system call) only when the
    /// reply might not fit: if it fits even were everything sent since the
    /// last look still unacknowledged, it fits now. A client reading its
    /// 4 KiB replies at once is looked at about once per 250 calls.
    pub(super) async fn reserve_room(&self, bytes: usize) -> Room {
        let mut pause = Duration::from_millis(1);
        let mut last_unacked = usize::MAX;
        loop {
            let reserved = self.rooms.reserved.load(Ordering::Relaxed);
            let unsent = self.unsent.load(Ordering::Relaxed);
            if self.tls.get().is_none() {
                let sent = self.to_socket.load(Ordering::Relaxed);
                let taken = self.taken_seen.load(Ordering::Relaxed);
                let most_unacked =
                    usize::try_from(sent.saturating_sub(taken)).unwrap_or(usize::MAX);
                let busy = reserved.saturating_add(unsent).saturating_add(most_unacked);
                if busy.saturating_add(bytes) <= self.room(taken) {
                    return self.reserved(bytes);
                }
            }
            // Read before the look: bytes written after it only make what
            // the peer is seen to have taken smaller.
            let sent = self.to_socket.load(Ordering::Relaxed);
            let unacked =
                dionfs_sys::net::bytes_unacked(self.socket.as_ref() as &TcpStream).unwrap_or(0);
            let taken = sent.saturating_sub(unacked as u64);
            self.taken_seen.fetch_max(taken, Ordering::Relaxed);
            // Over TLS: what is queued in the socket is ciphertext, the
            // reply will be too, and up to a chunk of it may wait in the
            // session.
            let (bytes, waiting) = match self.tls.get() {
                None => (bytes, 0),
                Some(tls) => (
                    super::tls::ciphertext_len(bytes),
                    if tls.pending() {
                        super::tls::ENCRYPT_CHUNK
                    } else {
                        0
                    },
                ),
            };
            let busy = reserved + unsent + unacked + waiting;
            if busy + bytes <= self.room(taken) || busy == 0 || self.closed.load(Ordering::Acquire)
            {
                return self.reserved(bytes);
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

    /// Reserves `bytes` of room, found to be there.
    fn reserved(&self, bytes: usize) -> Room {
        self.waiting_room.store(false, Ordering::Relaxed);
        self.rooms.reserved.fetch_add(bytes, Ordering::Relaxed);
        Room {
            rooms: self.rooms.clone(),
            bytes,
        }
    }

    /// The send-buffer room replies may use once the peer has taken
    /// `taken` bytes: [`FIRST_ROOM`] plus those, at most the send buffer.
    fn room(&self, taken: u64) -> usize {
        let taken = usize::try_from(taken).unwrap_or(usize::MAX);
        self.send_buffer.min(FIRST_ROOM.saturating_add(taken))
    }

    /// Waits while more than `limit` reply bytes wait for the peer.
    pub(super) async fn wait_for_backlog(&self, limit: usize) {
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

    /// Writes the session's waiting ciphertext as the socket takes room,
    /// counting it as the writer's progress.
    async fn flush_waiting(&self) -> Result<(), io::ErrorKind> {
        let Some(tls) = self.tls.get() else {
            return Ok(());
        };
        loop {
            let before = self.to_socket.load(Ordering::Relaxed);
            let flushed = tls.flush(self.socket.as_ref(), &self.to_socket);
            let n = self.to_socket.load(Ordering::Relaxed) - before;
            self.written.fetch_add(n, Ordering::Relaxed);
            match flushed {
                Ok(true) => return Ok(()),
                Ok(false) => self.socket.writable().await.map_err(|e| e.kind())?,
                Err(e) => return Err(e.kind()),
            }
        }
    }

    fn fail(&self, kind: io::ErrorKind) {
        let _ = self.write_error.set(kind);
        self.close();
        self.write_failed.notify_one();
    }

    /// Drops every queued reply (their buffers and permits go back) and
    /// every reply that finishes later.
    pub(super) fn close(&self) {
        let dropped = {
            let mut queue = self.queue.lock();
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut queue.replies)
        };
        self.unsent.store(0, Ordering::Relaxed);
        drop(dropped);
    }
}

/// Replies written with one `writev` at most ([`MAX_SLICES`] slices each
/// at most, well under `IOV_MAX`).
const MAX_BATCH: usize = 64;

/// Slices of one reply's record: mark, header, payload, padding, trailer.
const MAX_SLICES: usize = 5;

/// Zero bytes for a payload's XDR padding.
static ZEROS: [u8; 3] = [0; 3];

/// The first [`MAX_BATCH`] queued replies, in order.
fn take_batch(replies: &mut VecDeque<Outgoing>) -> Vec<Outgoing> {
    let n = replies.len().min(MAX_BATCH);
    replies.drain(..n).collect()
}

/// Bytes of `reply`'s record: record mark, header, payload, padding,
/// trailer.
fn record_len(reply: &Reply) -> usize {
    let data = reply.data_bytes().len();
    4 + reply.header.len() + data + dionfs_xdr::pad_len(data) + reply.trailer.len()
}

/// The slices of `reply`'s record under record mark `mark`: mark, header,
/// payload, padding and trailer; the first `.1` of them are used (an empty
/// trailer adds no slice, so an NFSv3 reply is written as it always was).
fn record_slices<'a>(reply: &'a Reply, mark: &'a [u8; 4]) -> ([IoSlice<'a>; MAX_SLICES], usize) {
    let data = reply.data_bytes();
    let slices = [
        IoSlice::new(mark),
        IoSlice::new(&reply.header),
        IoSlice::new(data),
        IoSlice::new(&ZEROS[..dionfs_xdr::pad_len(data.len())]),
        IoSlice::new(&reply.trailer),
    ];
    let used = if reply.trailer.is_empty() {
        MAX_SLICES - 1
    } else {
        MAX_SLICES
    };
    (slices, used)
}

/// Writes `reply` as one record (record mark, header, payload, padding,
/// trailer), from byte `*sent` on, with vectored writes through `write`
/// (the payload is never copied), until it is all written (`Ok(true)`) or
/// `write` would block (`Ok(false)`); `*sent` follows.
pub(super) fn write_without_waiting(
    reply: &Reply,
    sent: &mut usize,
    mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
) -> io::Result<bool> {
    let len = u32::try_from(record_len(reply) - 4)
        .ok()
        .filter(|len| *len <= MAX_FRAGMENT_LEN)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "reply exceeds one fragment"))?;
    let mark = record_mark(len, true);
    loop {
        let (mut slices, used) = record_slices(reply, &mark);
        let mut remaining: &mut [IoSlice<'_>] = &mut slices[..used];
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
        let shared = Shared::new(write, 1 << 20, Arc::default());
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

    /// Reply `i` with a trailer: as [`reply`], but every eighth without
    /// payload, and `1 + i % 11` trailer bytes derived from `i` (after
    /// payloads of every padding length).
    fn trailed(i: u32) -> Reply {
        let trailer: Vec<u8> = (0..=(i % 11)).map(|j| (i * 7 + j) as u8 | 0x80).collect();
        let r = reply(i);
        let r = if i.is_multiple_of(8) {
            Reply::new(r.header)
        } else {
            r
        };
        r.with_trailer(trailer)
    }

    /// What the peer must read of [`trailed`]`(i)`, built by hand.
    fn expected_trailed(i: u32) -> Vec<u8> {
        let r = trailed(i);
        let data = r.data_bytes();
        let mut out = r.header.clone();
        out.extend_from_slice(data);
        out.extend(std::iter::repeat_n(0, (4 - data.len() % 4) % 4));
        out.extend_from_slice(&r.trailer);
        out
    }

    /// Reads the next record from `peer` and checks it is `want`.
    async fn read_record(peer: &mut RecordReader<TcpStream>, want: &[u8], what: &str) {
        assert!(peer.next_record().await.unwrap(), "{what}: no record");
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        assert!(
            got == want,
            "{what}: {} bytes, wanted {}",
            got.len(),
            want.len()
        );
    }

    #[tokio::test]
    async fn reply_with_trailer_goes_out_at_once_when_the_socket_has_room() {
        let (shared, mut peer) = pair().await;
        for i in [0, 5] {
            // 0: no payload; 5: 185 bytes of payload, so 3 of padding.
            shared.send(trailed(i), CallPermits::default());
            // Written by the sender itself: nothing was queued.
            assert_eq!(shared.queue.lock().writer, Writer::Idle);
            assert!(shared.queue.lock().replies.is_empty());
            assert_eq!(shared.unsent.load(Ordering::Relaxed), 0);
            read_record(&mut peer, &expected_trailed(i), &format!("reply {i}")).await;
        }
    }

    #[tokio::test]
    async fn replies_with_trailers_queued_behind_a_full_socket_go_out_batched() {
        let (shared, mut peer) = pair().await;
        // Fill the socket (the peer reads nothing yet) until a reply has to
        // wait: the writer of the queue then has the socket.
        let filler = |i: u32| Reply::with_data(vec![i as u8; 8], Box::new(vec![0xee; 256 << 10]));
        let mut fillers = 0;
        while shared.queue.lock().writer != Writer::Queue {
            assert!(fillers < 1024, "256 MiB sent and the socket still not full");
            shared.send(filler(fillers), CallPermits::default());
            fillers += 1;
        }
        let before = shared.unsent.load(Ordering::Relaxed);
        assert!(before > 0);
        const N: u32 = MAX_BATCH as u32;
        for i in 0..N {
            shared.send(trailed(i), CallPermits::default());
        }
        // The backlog counts every queued byte, trailers included: record
        // mark, header, payload, padding, trailer.
        let queued: usize = (0..N).map(|i| 4 + expected_trailed(i).len()).sum();
        assert_eq!(shared.unsent.load(Ordering::Relaxed) - before, queued);
        assert_eq!(shared.queue.lock().replies.len(), 1 + N as usize);

        let read = async {
            for i in 0..fillers {
                let mut want = vec![i as u8; 8];
                want.extend_from_slice(&[0xee; 256 << 10]);
                read_record(&mut peer, &want, &format!("filler {i}")).await;
            }
            for i in 0..N {
                read_record(&mut peer, &expected_trailed(i), &format!("reply {i}")).await;
            }
        };
        tokio::select! {
            e = shared.write_queued() => panic!("writer failed: {e:?}"),
            () = read => {}
        }
        assert_eq!(shared.unsent.load(Ordering::Relaxed), 0);
        assert!(shared.queue.lock().replies.is_empty());
        let batched = shared.counters.snapshot().batched_replies;
        assert!(
            batched >= u64::from(N) / 2,
            "{batched} of {N} replies batched"
        );
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
