//! One TCP connection: a loop reading calls, tasks (or blocking threads)
//! running them, replies written in the order the calls finish, and a
//! watchdog that closes the connection when its peer stalls.
//!
//! Replies are written by whoever finishes a call, without waiting, or
//! queued for the connection's writer when the socket is busy or full
//! (`writer.rs`); the connection task runs that writer alongside the
//! reading loop and the watchdog.
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

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use dionfs_rpc::message::AUTH_TLS;
use dionfs_rpc::reply::AuthStat;
use dionfs_rpc::{
    framed, read_message_header, CallError, CallHeader, MessageStart, OpaqueAuth, RecordError,
    RecordReader, ReplyHeader, ReplyStatus, MSG_REPLY,
};
use dionfs_xdr::Encode;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use super::back_channel::BackChannel;
use super::counters::NetCounters;
use super::handshake_failure;
use super::reply::Reply;
use super::spin::Pace;
use super::stream::{CallReader, ReadProgress, Waiting};
use super::tls::{self, HandshakeError, TlsConfig};
use super::writer::{CallPermits, Shared};
use super::{ClientCertificate, ConnInfo, ConnLimits, Place, Received, Service, TlsPeer};

/// Upper bound on `ConnLimits::max_in_flight` and `buffer_share`, so that
/// permit counts fit the semaphore's u32 arithmetic.
const MAX_IN_FLIGHT_CAP: usize = 1 << 16;

/// Why a connection ended.
#[derive(Debug)]
pub enum ConnEnd {
    /// The peer closed its side between two calls.
    PeerClosed,
    /// The peer reset the connection between two calls (ECONNRESET: a
    /// client that closes without waiting, or whose host went away): as
    /// ordinary an end as [`ConnEnd::PeerClosed`].
    PeerReset(io::ErrorKind),
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
    /// The TLS handshake after an RFC 9289 probe failed.
    Handshake(HandshakeError),
}

impl ConnEnd {
    /// Whether the connection ended as connections do (the client closed
    /// or reset it between calls, or went away while its replies were
    /// sent, the server closed it idle, quiet or at shutdown), or for a
    /// reason an operator is told of in a warning of its own: its closing
    /// line is then a debug line. Any other end (a client gone half-way
    /// through a call, a stream that is not RPC) is worth an info line.
    pub fn is_unremarkable(&self) -> bool {
        match self {
            ConnEnd::PeerClosed
            | ConnEnd::PeerReset(_)
            | ConnEnd::Shutdown
            | ConnEnd::Idle(_)
            | ConnEnd::Evicted
            | ConnEnd::Stalled(_)
            | ConnEnd::RepliesUnread(_)
            | ConnEnd::RecordTooLarge { .. }
            | ConnEnd::Handshake(_) => true,
            ConnEnd::WriteError(kind) => is_disconnect(*kind),
            ConnEnd::Truncated | ConnEnd::NotACall | ConnEnd::ReadError(_) => false,
        }
    }
}

/// Whether a socket error only says the peer is gone (a reset, or a write
/// after it closed).
fn is_disconnect(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

impl fmt::Display for ConnEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnEnd::PeerClosed => f.write_str("peer closed"),
            ConnEnd::PeerReset(io::ErrorKind::ConnectionReset) => {
                f.write_str("peer reset the connection between calls")
            }
            ConnEnd::PeerReset(kind) => write!(f, "peer gone between calls ({kind})"),
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
            ConnEnd::Handshake(e) => write!(f, "TLS handshake failed: {e}"),
        }
    }
}

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
    mut conn: ConnInfo,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
) -> ConnEnd {
    if service.resolves_names() {
        conn.look_up_names().await;
    }
    match conn.names() {
        [] => debug!(conn = conn.id, peer = %conn.peer, local = %conn.local, "connection opened"),
        names => debug!(conn = conn.id, peer = %conn.peer, local = %conn.local,
            names = %names.join(" "), "connection opened"),
    }
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
    let shared = Arc::new(Shared::new(
        write_half,
        send_buffer,
        limits.counters.clone(),
    ));
    let back_channel = BackChannel::new(&shared, backlog_limit(&limits));
    conn.back_channel = Some(back_channel.clone());
    let conn = Arc::new(conn);
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
    // No reply can come any more: callers of the back channel are woken
    // now, not after the drain below, which may be waiting for the very
    // calls that wait for them.
    back_channel.close();

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
    if matches!(
        end,
        ConnEnd::PeerClosed | ConnEnd::Shutdown | ConnEnd::Evicted
    ) {
        shared.close_tls();
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

/// The metric that counts every failed TLS handshake.
const HANDSHAKE_FAILURES: &str = "dionfs_tls_handshake_failures_total";

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
        // Counted as they end (`tls_handshake_failures`, in `read_calls`).
        ConnEnd::Handshake(e) => {
            let (kind, why) = handshake_failure::explain(e);
            let budget = match kind {
                handshake_failure::Kind::Certificate => &limits.drop_logs.handshake_certificates,
                handshake_failure::Kind::Other => &limits.drop_logs.handshake_others,
            };
            budget.log(HANDSHAKE_FAILURES, |held_back, more| {
                warn!(
                    conn = conn.id,
                    peer = %conn.peer,
                    error = %e,
                    earlier_not_logged = held_back,
                    "TLS handshake failed, connection closed: {why}{more}"
                );
            });
        }
        ConnEnd::Idle(_) => NetCounters::bump(&counters.idle),
        _ => {}
    }
    if end.is_unremarkable() {
        debug!(conn = conn.id, peer = %conn.peer, reason = %end, calls, "connection closed");
    } else {
        info!(conn = conn.id, peer = %conn.peer, reason = %end, calls, "connection closed");
    }
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
        waiting = %waiting,
        queued = %or_unknown(queued),
        mark = %or_unknown(mark),
        charged = %or_unknown(charged),
        limit = %or_unknown(limit),
        advertised_window = %or_unknown(window.and_then(|w| w.advertised)),
        mss = %or_unknown(window.map(|w| w.mss)),
        "stalled record: the socket's receive side"
    );
}

/// A value for a log line, or `unknown` where the kernel did not say.
fn or_unknown<T: fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "unknown".to_string(), |v| v.to_string())
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
        // for a record, the reading loop holds one permit itself; running
        // a call itself, it holds none but the call's.)
        let calls_in_flight = l.permits_taken() > 1 || progress.running_call();
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
    let mut pace = Pace::default();
    // The call before ran on this loop (`run_call_here`).
    let mut ran_here = false;
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
        let ran_before = std::mem::take(&mut ran_here);
        let opened = next_record(l, reader, &mut most_in_flight, &mut pace).await;
        let caught = match opened {
            Ok(Opened::Waited) => false,
            // Sent before the reply to the call this loop ran: the
            // client had two calls out at once, it pipelines.
            Ok(Opened::There) if ran_before => {
                most_in_flight = most_in_flight.max(2);
                false
            }
            Ok(Opened::There) => false,
            Ok(Opened::Caught) => true,
            Ok(Opened::Closed) => return ConnEnd::PeerClosed,
            // Reset with no call started: the client went away between
            // calls, as ordinary as a close.
            Err(RecordError::Io(e)) if is_disconnect(e.kind()) => {
                return ConnEnd::PeerReset(e.kind())
            }
            Err(e) => return record_error_end(e),
        };
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
                // Asked once: the call runs where the answer said.
                let blocks = l.service.execute_blocks(&pending);
                ran_here = caught && !blocks;
                if ran_here {
                    run_call_here(l, pending, permits).await
                } else {
                    run_call(l, pending, permits, blocks)
                }
            }
            Ok(Outcome::Reply(reply)) => l.shared.send(reply, permits),
            Ok(Outcome::Nothing) => {}
            Ok(Outcome::StartTls(xid, config)) => {
                // The probe's place among the calls in flight: the switch
                // waits until all of them are back. Boxed: a handshake's
                // future (the rustls session) is large, and every idle
                // connection's task would hold room for it (16.6 KiB per
                // idle connection unboxed, test_connections).
                drop(permits);
                if let Err(end) = Box::pin(start_tls(l, reader, xid, &config)).await {
                    if matches!(end, ConnEnd::Handshake(_)) {
                        NetCounters::bump(&l.limits.counters.tls_handshake_failures);
                    }
                    return end;
                }
            }
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
/// The first look waits for the connection's `pace`.
async fn next_record<S>(
    l: &Loop<'_, S>,
    reader: &mut RecordReader<CallReader>,
    most_in_flight: &mut usize,
    pace: &mut Pace,
) -> Result<Opened, RecordError> {
    // Over TLS, bytes in the socket (FIONREAD) say nothing of a record:
    // no spin.
    if l.limits.idle_spin.is_zero() || reader.get_ref().is_tls() {
        return reader
            .next_record()
            .await
            .map(|o| Opened::Waited.unless_closed(o));
    }
    let record = reader.next_record();
    tokio::pin!(record);
    if let Poll::Ready(opened) = poll_once(record.as_mut()).await {
        return opened.map(|o| Opened::There.unless_closed(o));
    }
    // Until the calls in flight are answered (every permit but the one the
    // loop holds for the next call is back), the next call may come any
    // time: wait for it without spinning.
    let others = (l.max_in_flight - 1) as u32;
    tokio::select! {
        biased;
        opened = record.as_mut() => return opened.map(|o| Opened::Waited.unless_closed(o)),
        _answered = l.in_flight.acquire_many(others) => {}
    }
    let spinning = if std::mem::take(most_in_flight) <= 1 {
        l.limits.activity.try_spin()
    } else {
        None
    };
    if let Some(_spinning) = spinning {
        NetCounters::bump(&l.limits.counters.idle_spins);
        // The record polled once more with a waker that does nothing, so
        // that the task's own is no longer registered for the socket: the
        // call arriving would otherwise wake this task while it spins,
        // and tokio, finding it woken when its poll returns (the call it
        // catches awaiting the disk, or the spin ending), runs it again
        // as a task that yielded and wakes an idle worker to steal it
        // (`Harness::poll`, `yield_now`). The poll reads nothing unless
        // epoll already reported the socket readable; `record.await`
        // below, after a spin that caught nothing, registers the task's
        // waker again.
        let polled = record
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        if let Poll::Ready(opened) = polled {
            // Come since the calls were answered: a client at one call
            // at a time, as a look's catch.
            return opened.map(|o| Opened::Caught.unless_closed(o));
        }
        let start = std::time::Instant::now();
        let quiet = pace.quiet().min(l.limits.idle_spin);
        while start.elapsed() < quiet && !l.limits.activity.busy() {}
        let mut look = std::time::Instant::now();
        // Looks at the socket every LOOK_EVERY, busy in between without
        // yielding to the runtime: a yield wakes the runtime's other
        // workers to steal (futex wake-ups, context switches, another vCPU
        // woken), which cost more than the spin saves. A look is a read
        // (one non-blocking `recv`): the look that finds the call has read
        // it.
        while look - start < l.limits.idle_spin && !l.limits.activity.busy() {
            NetCounters::bump(&l.limits.counters.spin_looks);
            l.progress.look();
            let polled = poll_once(record.as_mut()).await;
            // The read it polled took the look; cleared anyway, so that no
            // later read of the connection (a payload's) is taken for one.
            l.progress.end_look();
            if let Poll::Ready(opened) = polled {
                NetCounters::bump(&l.limits.counters.spin_catches);
                pace.caught(look - start);
                return opened.map(|o| Opened::Caught.unless_closed(o));
            }
            // No PAUSE here: on a VM, a PAUSE loop is what the host's
            // pause-loop exiting takes for a spinning lock holder.
            while look.elapsed() < LOOK_EVERY {}
            look = std::time::Instant::now();
        }
    }
    record.await.map(|o| Opened::Waited.unless_closed(o))
}

/// How [`next_record`] found the next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// The peer closed the connection instead.
    Closed,
    /// There already when the loop came for it.
    There,
    /// Read when it came (the runtime reported the socket readable).
    Waited,
    /// Found by the idle spin (by one of its looks, or as it began).
    Caught,
}

impl Opened {
    /// `self`, or [`Opened::Closed`] if the peer closed instead
    /// (`RecordReader::next_record`'s false).
    fn unless_closed(self, opened: bool) -> Self {
        if opened {
            self
        } else {
            Opened::Closed
        }
    }
}

/// How often a spinning connection looks at its socket (one `recv`).
const LOOK_EVERY: Duration = Duration::from_micros(4);

/// Polls `f` once.
async fn poll_once<F: Future>(mut f: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
}

/// Starts a received call: on a blocking thread if it blocks, else as a
/// task. Either way the reply is sent from there, without waiting.
/// `blocks`: what `execute_blocks` answered for it.
fn run_call<S: Service>(l: &Loop<'_, S>, pending: S::Pending, permits: CallPermits, blocks: bool) {
    if blocks {
        let (service, conn, shared) = (l.service.clone(), l.conn.clone(), l.shared.clone());
        tokio::task::spawn_blocking(move || {
            let execute = service.execute(conn, pending, Place::BlockingThread);
            // Polled here, not through `Handle::block_on` (see
            // `dionfs_sys::park::run_here`).
            if let Some(reply) = dionfs_sys::park::run_here(execute) {
                shared.send(reply, permits);
            }
        });
    } else {
        tokio::spawn(answer_on_task(l, pending, permits));
    }
}

/// A call run on a task, its reply sent: as a task of its own
/// ([`run_call`]) or on the reading loop ([`run_call_here`]). The call's
/// future is boxed where it is made: a task then holds a pointer, not the
/// future (4 KiB, the largest of every program's calls), which tokio
/// would copy as it spawns, first polls and completes the task, and the
/// reading loop holds no room for it while it waits for a record.
fn answer_on_task<S: Service>(
    l: &Loop<'_, S>,
    pending: S::Pending,
    permits: CallPermits,
) -> impl Future<Output = ()> + Send + 'static {
    let execute = Box::pin(
        l.service
            .clone()
            .execute(l.conn.clone(), pending, Place::Task),
    );
    let shared = l.shared.clone();
    async move {
        if let Some(reply) = execute.await {
            shared.send(reply, permits);
        }
    }
}

/// Runs a call the idle spin caught (`next_record`) on the reading loop
/// itself and sends its reply, rather than as a task of its own: the
/// client sends one call at a time and the server has nothing else to
/// do, so there is nothing to run beside it. A task would cost more than
/// its spawn: the loop and the call's task wake each other call after
/// call (the loop awaits the call's permits), and after three such
/// wake-ups in a row tokio stops running the woken task next on its
/// worker (`MAX_LIFO_POLLS_PER_TICK`) and wakes its idle worker to steal
/// it instead, every call: a futex or eventfd wake-up and a context
/// switch, on the CPU where the client runs (measured: 0.9 such wake-ups
/// per 1 KiB WRITE at qd 1, the client preempted by them in 1,181 of
/// 5,000 calls over v4.1).
///
/// A client that sends its next call before this reply is not kept
/// waiting past this one call: that call is there when the loop looks
/// next, so it is not a catch and runs as a task (as every call after
/// it, until the client drains its calls again).
async fn run_call_here<S: Service>(l: &Loop<'_, S>, pending: S::Pending, permits: CallPermits) {
    let answer = answer_on_task(l, pending, permits);
    // In flight for the watchdog (the idle and quiet clocks) until the
    // reply is sent, or the loop is dropped with it.
    let _running = RunningHere::new(l.progress);
    answer.await
}

/// A call the reading loop runs itself, as its watchdog sees it.
struct RunningHere<'a>(&'a ReadProgress);

impl<'a> RunningHere<'a> {
    fn new(progress: &'a ReadProgress) -> Self {
        progress.set_running_call(true);
        RunningHere(progress)
    }
}

impl Drop for RunningHere<'_> {
    fn drop(&mut self) {
        self.0.set_running_call(false);
    }
}

/// What became of one call read by [`read_call`].
enum Outcome<P> {
    Run(P),
    Reply(Reply),
    Nothing,
    /// An RFC 9289 probe (its xid) to accept: answer it, then switch the
    /// connection to TLS.
    StartTls(u32, TlsConfig),
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
    let call = match read_message_header(reader).await {
        Ok(MessageStart::Call(call)) => call,
        Ok(MessageStart::Reply { xid, start }) => {
            let taken = match &conn.back_channel {
                Some(back) => back
                    .take_reply(xid, start, reader)
                    .await
                    .map_err(record_error_end)?,
                None => false,
            };
            if !taken {
                // A reply to nothing this side asked: as any other
                // message that is not a call.
                debug!(
                    conn = conn.id,
                    xid,
                    msg_type = MSG_REPLY,
                    "peer sent a non-call message"
                );
                return Err(ConnEnd::NotACall);
            }
            // A reply over the size cap is skipped.
            reader.skip_rest().await.map_err(record_error_end)?;
            return Ok(Outcome::Nothing);
        }
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
    if call.cred.flavor() == AUTH_TLS {
        // The RFC 9289 probe: the transport's, whatever the program.
        reader.skip_rest().await.map_err(record_error_end)?;
        let tls = l
            .limits
            .tls
            .as_ref()
            .filter(|t| t.is_on() && !reader.get_ref().is_tls());
        return Ok(match probe_refusal(&call, tls.is_some()) {
            Some(stat) => {
                debug!(
                    conn = conn.id,
                    xid = call.xid,
                    proc_ = call.proc_,
                    ?stat,
                    "AUTH_TLS call refused"
                );
                Outcome::Reply(Reply::status(call.xid, ReplyStatus::AuthError(stat)))
            }
            // `probe_refusal` refuses every probe without TLS to start.
            None => match tls {
                Some(tls) => Outcome::StartTls(call.xid, tls.clone()),
                None => Outcome::Nothing,
            },
        });
    }
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

/// Why an AUTH_TLS call is refused, if it is (what knfsd's
/// `svcauth_tls_accept` answers): AUTH_TLS is only for the NULL procedure,
/// with an AUTH_NONE verifier (its empty credential body is checked as the
/// header is read). A server that cannot start TLS (none configured, or
/// the connection is TLS already) answers as one that does not know the
/// flavor (RFC 5531 section 9: AUTH_BADCRED); RFC 9289 section 4.1 has the
/// client go on without TLS on any reply but the STARTTLS one.
fn probe_refusal(call: &CallHeader, can_start: bool) -> Option<AuthStat> {
    if call.proc_ != 0 {
        return Some(AuthStat::BadCred);
    }
    if call.verf.flavor != dionfs_rpc::message::AUTH_NONE || !call.verf.body.is_empty() {
        return Some(AuthStat::BadVerf);
    }
    (!can_start).then_some(AuthStat::BadCred)
}

/// The reply that accepts an RFC 9289 probe: MSG_ACCEPTED, SUCCESS, and an
/// AUTH_NONE verifier whose body is `STARTTLS` (section 4.1).
fn starttls_reply(xid: u32) -> Vec<u8> {
    ReplyHeader {
        xid,
        verf: OpaqueAuth {
            flavor: dionfs_rpc::message::AUTH_NONE,
            body: tls::STARTTLS.to_vec(),
        },
        status: ReplyStatus::Success,
    }
    .to_xdr()
}

/// Switches the connection to TLS after a probe (`xid`) was accepted:
/// once every call read before it is answered and every record queued is
/// written, sends the STARTTLS reply in plaintext, runs the TLS handshake
/// (bounded by `handshake_timeout`; ALPN `sunrpc`, or none), and has the
/// reader and the writer go through the session from then on. Records
/// sent meanwhile (a back channel's calls) wait and go out encrypted.
async fn start_tls<S>(
    l: &Loop<'_, S>,
    reader: &mut RecordReader<CallReader>,
    xid: u32,
    config: &TlsConfig,
) -> Result<(), ConnEnd> {
    // `max_in_flight` is capped far below u32::MAX; the semaphore is never
    // closed.
    let _all = l
        .in_flight
        .acquire_many(l.max_in_flight as u32)
        .await
        .map_err(|_| ConnEnd::Shutdown)?;
    l.shared.begin_switch().await;
    l.shared
        .write_plain(&framed(&starttls_reply(xid)))
        .await
        .map_err(|e| ConnEnd::WriteError(e.kind()))?;
    let session = config
        .accept()
        .map_err(|e| ConnEnd::Handshake(HandshakeError::Tls(e)))?;
    // A client may send its ClientHello without waiting for the reply.
    let early = reader.take_buffered();
    let socket = reader.get_ref().socket();
    let timeout = l.limits.handshake_timeout;
    let shaken = tokio::time::timeout(
        timeout,
        tls::handshake(session, socket, early, l.shared.to_socket()),
    )
    .await;
    let shaken = match shaken {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => return Err(ConnEnd::Handshake(e)),
        Err(_) => return Err(ConnEnd::Handshake(HandshakeError::TimedOut(timeout))),
    };
    // RFC 9289 section 5.2: a client offers ALPN "sunrpc", the server
    // answers with it; rustls refuses a client offering only other ids. One
    // offering none is served, as knfsd serves it: the Linux client's
    // handshake agent, tlshd (ktls-utils 1.0), offers none.
    // Who the client is, once: calls read it from the connection.
    let peer = match shaken.conn.peer_certificates().and_then(<[_]>::first) {
        Some(certificate) => TlsPeer::Certified(ClientCertificate::from_der(certificate)),
        None => TlsPeer::Anonymous,
    };
    let (session, tls_reader) = shaken
        .split(config)
        .map_err(|e| ConnEnd::Handshake(HandshakeError::Io(e)))?;
    reader.get_mut().start_tls(tls_reader, l.shared.clone());
    l.shared.end_switch(session);
    // No call is in flight (every permit is held): the calls read from
    // now on, all over TLS, see it.
    let counted = match &peer {
        TlsPeer::Certified(certificate) => {
            debug!(conn = l.conn.id, peer = %l.conn.peer, %certificate,
                "switched to TLS, with a client certificate");
            &l.limits.counters.mtls_connections
        }
        TlsPeer::Anonymous => {
            debug!(conn = l.conn.id, peer = %l.conn.peer,
                "switched to TLS, without a client certificate");
            &l.limits.counters.tls_connections
        }
    };
    NetCounters::bump(counted);
    let _ = l.conn.tls.set(peer);
    Ok(())
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
