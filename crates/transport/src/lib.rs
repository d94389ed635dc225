//! The transport: TCP connections (and UDP datagrams, [`udp`]) carrying
//! ONC RPC records, handed to an RPC program, or a dispatcher over
//! several, through the [`Service`] trait; the peer's confirmed host names
//! ([`names`]) for client lists that name hosts.
//!
//! This crate knows RPC (framing, call headers, reply headers) and nothing
//! of NFS. Per connection, one loop reads calls one after the other
//! ([`serve_connection`]); each call runs as its own task, so many calls are
//! in flight at once and replies go out in completion order.
//!
//! A call goes through two steps of its [`Service`]:
//! 1. [`Service::receive`], in the reading loop: decode the arguments from
//!    the record (a WRITE payload goes straight into the caller's buffer,
//!    taken only once the payload is in the socket, or its start staged
//!    when the client's window closed first, see [`stage_payload`]). The
//!    loop reads nothing else meanwhile, so a
//!    `receive` that waits (for a pooled buffer, say) is backpressure on
//!    that connection.
//! 2. [`Service::execute`], in a task of its own: run the call and build the
//!    [`Reply`]. A READ reply carries its file data as a [`ReplyPayload`],
//!    written to the socket from where it lies, never copied.
//!
//! A connection also carries calls the other way ([`BackChannel`], in
//! [`ConnInfo::back_channel`]): the server calls the client on the
//! client's own connection (NFSv4.1's callbacks). The call record goes out
//! through the writer replies use, so records never interleave and the
//! same bounds hold; the reading loop hands a reply to a call of the back
//! channel to its caller and reads on, while a reply to nothing closes the
//! connection, as it always did.
//!
//! One client cannot stop the others (see `connection.rs` for how): a
//! record whose bytes stop coming is dropped after `stall_timeout`, replies
//! a client does not read close its connection after `reply_timeout`, calls
//! that hold a large buffer are capped per connection (`buffer_share`), and
//! connections are capped in number (`max_connections`) and closed when idle
//! (`idle_timeout`).

mod back_channel;
pub mod client;
mod connection;
mod counters;
mod handshake_failure;
mod identity;
mod listener;
pub mod names;
mod quiet;
mod reply;
mod spin;
mod stream;
#[cfg(test)]
mod tests;
mod tls;
pub mod udp;
mod writer;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_logs::LogBudget;
use dionfs_rpc::{CallHeader, RecordError, RecordReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use back_channel::{BackChannel, BackChannelError, MAX_OUTSTANDING_CALLS};
pub use connection::{serve_connection, ConnEnd};
pub use counters::{NetCounters, NetSnapshot};
pub use identity::{ClientCertificate, TlsPeer};
pub use listener::{next_conn_id, serve};
pub use reply::{Reply, ReplyPayload};
pub use spin::{Activity, DEFAULT_IDLE_SPIN};
pub use stream::{CallReader, CallStream};
pub use tls::{HandshakeError, TlsConfig, TlsSetupError, ALPN_SUNRPC};

/// An RPC program (or a dispatcher over several) as seen by the connection
/// loop. Used generically, never as a trait object.
pub trait Service: Send + Sync + 'static {
    /// What [`receive`](Self::receive) hands to [`execute`](Self::execute):
    /// the decoded call.
    type Pending: Send + 'static;

    /// Whether [`execute`](Self::execute) does blocking work (file-system
    /// calls) for this call. If so the connection runs it on one thread of
    /// tokio's blocking pool, which then tries to write the reply without
    /// waiting (and otherwise queues it for the connection's writer): one
    /// thread hand-off per call, where a task that waits for a blocking
    /// thread and is then woken to send the reply costs two more (measured:
    /// most of a small call's time). Otherwise it runs as a task.
    /// Asked once per call: [`execute`](Self::execute) is told the answer
    /// (its [`Place`]), since what it depends on (a file's cached pages, a
    /// range held, the ring's room) may change before `execute` runs.
    fn execute_blocks(&self, _pending: &Self::Pending) -> bool {
        false
    }

    /// Whether the call will hold one of the service's large buffers (a
    /// READ's or WRITE's pool buffer) until its reply is sent, as far as
    /// its header and `args_len` tell (the bytes of arguments left in the
    /// record, when the record is one fragment: `None` when more may
    /// follow). The connection lets at most `ConnLimits::buffer_share`
    /// such calls of one connection be in flight at once (from before
    /// `receive` until the reply is written), so that no connection,
    /// however busy or however slow to read its replies, holds more than
    /// its share of a pool.
    fn holds_buffer(&self, _call: &CallHeader, _args_len: Option<u32>) -> bool {
        false
    }

    /// Whether a received call the header did not mark as holding a large
    /// buffer ([`Service::holds_buffer`]) will hold one after all, told by
    /// its arguments (a READ's count): it then takes a buffer share before
    /// it is prepared and run.
    fn holds_buffer_after_receive(&self, _pending: &Self::Pending) -> bool {
        false
    }

    /// Whether a new connection's peer host names are looked up before
    /// its first call ([`ConnInfo::names`]): some client list names hosts
    /// or wildcards. Asked once per connection, as it opens.
    fn resolves_names(&self) -> bool {
        false
    }

    /// Bytes a received call's reply may take, if it is large (a READ's
    /// data, and the results after it in its trailer): the call is
    /// prepared and run only once that much room is free in the
    /// connection's send buffer, so its reply goes straight into the
    /// socket. 0 (the default) runs it at once.
    fn reply_room(&self, _pending: &Self::Pending) -> usize {
        0
    }

    /// Readies a received call to run, after its reply room is reserved:
    /// e.g. takes the buffer a READ is read into. Waiting here is
    /// backpressure on the connection, like waiting in `receive`.
    fn prepare(
        &self,
        _conn: &ConnInfo,
        _pending: &mut Self::Pending,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Decodes the call's arguments from `body`, which is positioned right
    /// after the call header. Whatever is left of the record afterwards is
    /// skipped by the caller.
    ///
    /// Arguments are read with a bound that fits the procedure
    /// ([`read_args`] or exact reads), never with only the record's size
    /// limit as bound.
    ///
    /// Errors are the stream's. Two are answered with GARBAGE_ARGS by the
    /// connection, which then skips the rest of the record and goes on:
    /// [`RecordError::PastEnd`] (the arguments are shorter than they claim)
    /// and [`RecordError::RestTooLarge`] (longer than the procedure allows;
    /// see also [`note_oversized_args`](Self::note_oversized_args)). Any
    /// other error closes the connection. Malformed arguments that were read
    /// successfully are the service's to answer (usually
    /// `Received::Reply(Reply::status(xid, GarbageArgs))`).
    fn receive<R: CallStream>(
        &self,
        conn: &ConnInfo,
        call: CallHeader,
        body: &mut RecordReader<R>,
    ) -> impl Future<Output = Result<Received<Self::Pending>, RecordError>> + Send;

    /// Called when a call was answered GARBAGE_ARGS because `receive`
    /// refused its arguments as too long ([`RecordError::RestTooLarge`]),
    /// for the service's counters. The connection has logged it.
    fn note_oversized_args(&self) {}

    /// Runs a received call, in a task of its own or on a blocking thread
    /// (`place`, as [`execute_blocks`](Self::execute_blocks) answered for
    /// it), and returns the reply to send, if any. On a task it must not
    /// block: a runtime worker waiting on, say, a lock that a task holds
    /// across an await can leave no worker to run that task.
    fn execute(
        self: Arc<Self>,
        conn: Arc<ConnInfo>,
        pending: Self::Pending,
        place: Place,
    ) -> impl Future<Output = Option<Reply>> + Send;
}

/// Where [`Service::execute`] runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A task on the runtime's workers: nothing may block.
    Task,
    /// A thread of tokio's blocking pool.
    BlockingThread,
}

/// Reads a call's arguments, the rest of its record, if they are at most
/// `max` bytes: the longest the procedure's can be. A longer call is
/// refused before its bytes are read ([`RecordError::RestTooLarge`], which
/// the connection answers with GARBAGE_ARGS): without such a bound any call
/// could make the server allocate a whole record's worth (about the largest
/// WRITE) for nothing.
pub async fn read_args<R: tokio::io::AsyncRead + Unpin>(
    body: &mut RecordReader<R>,
    max: usize,
) -> Result<Vec<u8>, RecordError> {
    let mut args = Vec::new();
    // Procedure limits are a few KiB; saturating is only for the type.
    let max = u32::try_from(max).unwrap_or(u32::MAX);
    body.read_to_end_bounded(&mut args, max).await?;
    Ok(args)
}

/// Waits, holding nothing, until the next `bytes` bytes of the record (a
/// WRITE payload, say) have arrived, or as many as the socket can queue;
/// returns how many bytes of the record can be read now (at least `bytes`
/// in the first case, and possibly more). Take the buffer for them
/// afterwards: then a client that sends the start of a call and stalls
/// holds no buffer, only its connection, which the stall timeout drops.
/// Costs one `ioctl` when the bytes are already there. See
/// [`stage_payload`] for a payload the socket cannot queue whole.
pub async fn wait_for_payload<R: CallStream>(
    body: &RecordReader<R>,
    bytes: usize,
) -> Result<usize, RecordError> {
    // Bytes the record reader has already taken from the socket (its read
    // buffer) are there too: waiting for them in the socket would wait for
    // the next call's bytes, or for the stall timeout.
    let buffered = body.buffered();
    let in_socket = bytes.saturating_sub(buffered);
    if in_socket == 0 {
        return Ok(buffered);
    }
    let queued = body.get_ref().wait_for_queued(in_socket).await?;
    Ok(buffered.saturating_add(queued))
}

/// Memory for the starts of payloads read before their buffer is taken
/// ([`stage_payload`]), all connections together.
#[derive(Debug)]
pub struct StagingBudget {
    free: Arc<Semaphore>,
    /// Payloads that had bytes staged, and those bytes, since the start.
    payloads: AtomicU64,
    bytes: AtomicU64,
}

impl StagingBudget {
    /// A budget of `bytes` (at most `u32::MAX`).
    pub fn new(bytes: usize) -> Self {
        let permits = bytes.min(u32::MAX as usize).min(Semaphore::MAX_PERMITS);
        Self {
            free: Arc::new(Semaphore::new(permits)),
            payloads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// `len` bytes of the budget for one payload, counted; `None` when it
    /// has not that many free.
    fn charge(&self, len: usize) -> Option<OwnedSemaphorePermit> {
        let held = u32::try_from(len)
            .ok()
            .and_then(|n| self.free.clone().try_acquire_many_owned(n).ok())?;
        self.payloads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        Some(held)
    }

    /// Payloads that had bytes staged since the start, and those bytes.
    pub fn staged(&self) -> (u64, u64) {
        (
            self.payloads.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// The start of a payload, read from the socket before a buffer was taken
/// for it (see [`stage_payload`]); holds its part of the budget until
/// dropped.
#[derive(Debug, Default)]
pub struct Staged {
    bytes: Vec<u8>,
    held: Option<OwnedSemaphorePermit>,
}

impl Staged {
    /// The payload's first bytes, in order.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Waits, holding no pool buffer, for the next `len` bytes of the record
/// (a WRITE payload), as [`wait_for_payload`] does, and also when the
/// socket cannot queue them all: a client's receive window is closed
/// before a whole payload has come (a fresh connection's window is about
/// 64 KiB, and grows only as the server reads). Then the bytes queued are
/// read into memory charged to `budget`, which opens the window, and the
/// wait goes on for the rest. So a client that sends the start of a large
/// WRITE and stalls holds a little of the budget, never a pool buffer that
/// others wait for, until the stall timeout drops it. Returns what was
/// read that way: the caller takes its buffer, copies these bytes to its
/// start and reads the rest into it. With the budget spent (or the peer
/// gone), staging stops and the caller's buffer is read into directly.
pub async fn stage_payload<R: CallStream>(
    body: &mut RecordReader<R>,
    len: usize,
    budget: &StagingBudget,
) -> Result<Staged, RecordError> {
    let mut staged = Staged::default();
    loop {
        let want = len - staged.bytes.len();
        if want == 0 {
            return Ok(staged);
        }
        let ready = wait_for_payload(body, want).await?;
        if ready >= want {
            return Ok(staged);
        }
        let Some(held) = u32::try_from(ready)
            .ok()
            .filter(|&n| n > 0)
            .and_then(|n| budget.free.clone().try_acquire_many_owned(n).ok())
        else {
            return Ok(staged);
        };
        budget.bytes.fetch_add(ready as u64, Ordering::Relaxed);
        match &mut staged.held {
            Some(all) => all.merge(held),
            None => {
                budget.payloads.fetch_add(1, Ordering::Relaxed);
                staged.held = Some(held);
            }
        }
        let start = staged.bytes.len();
        staged.bytes.resize(start + ready, 0);
        body.read_exact(&mut staged.bytes[start..]).await?;
    }
}

/// Reads the next `len` bytes of the record whole into memory charged to
/// `budget` (a payload with no pool buffer to go to yet: NFSv4 WRITEs
/// whose file is not known while they are received). `None`, nothing
/// read, when the budget has no room for them.
pub async fn stage_whole<R: CallStream>(
    body: &mut RecordReader<R>,
    len: usize,
    budget: &StagingBudget,
) -> Result<Option<Staged>, RecordError> {
    let Some(held) = budget.charge(len) else {
        return Ok(None);
    };
    let mut bytes = vec![0; len];
    body.read_exact(&mut bytes).await?;
    Ok(Some(Staged {
        bytes,
        held: Some(held),
    }))
}

/// `bytes`, a payload already read (with the record around it), copied
/// into memory charged to `budget`, as [`stage_whole`] would have read
/// it; `None` when the budget has no room.
pub fn stage_bytes(bytes: &[u8], budget: &StagingBudget) -> Option<Staged> {
    let held = budget.charge(bytes.len())?;
    Some(Staged {
        bytes: bytes.to_vec(),
        held: Some(held),
    })
}

/// What [`Service::receive`] decided about a call.
pub enum Received<P> {
    /// Run the call: `execute` is spawned with this value.
    Run(P),
    /// Answer at once without running anything (errors, trivial calls).
    Reply(Reply),
    /// Send nothing (e.g. a retransmission of a call still in progress).
    NoReply,
}

impl<P> Received<P> {
    /// The same decision about a call received as `f` makes of it.
    pub fn map<Q>(self, f: impl FnOnce(P) -> Q) -> Received<Q> {
        match self {
            Received::Run(p) => Received::Run(f(p)),
            Received::Reply(r) => Received::Reply(r),
            Received::NoReply => Received::NoReply,
        }
    }
}

/// `addr` as the server sees its clients: an IPv4 client of a socket on
/// the IPv6 any-address arrives as `::ffff:a.b.c.d`, which client lists,
/// lock owners, the port mapper's answers and the logs take as the IPv4
/// address it is.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// Unique per process, for logs.
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// The call came in a UDP datagram: its source address is whatever
    /// the sender wrote there, so nothing may rest on it.
    pub datagram: bool,
    /// The peer's confirmed host names, looked up before the first call
    /// when an export matches clients by name ([`Service::resolves_names`]),
    /// or before a later call once one does (an export a reload added);
    /// see [`ConnInfo::names`].
    pub names: std::sync::OnceLock<Vec<String>>,
    /// Set once, when the connection switches to TLS (RFC 9289): whether
    /// the client presented a certificate that verified, and who it names
    /// (taken from it then, never again); unset while the connection is
    /// plain (always, for a datagram). Read per call
    /// ([`ConnInfo::security`], [`ConnInfo::certificate`]): one load on
    /// the plaintext path.
    pub tls: std::sync::OnceLock<TlsPeer>,
    /// Calls to the peer on this connection, answered on it (NFSv4.1's
    /// callbacks): set by [`serve_connection`] for each TCP connection it
    /// serves, whatever the caller put here; `None` for a datagram.
    pub back_channel: Option<BackChannel>,
    /// What the program above ties to the connection, 0 for nothing
    /// (NFSv4.0: the client a state op on it named last, so that its ops
    /// that name none are still known to be its own).
    pub client_tag: ClientTag,
}

/// A value the program above ties to a connection ([`ConnInfo::client_tag`]):
/// none until set, then the last one set.
#[derive(Debug, Default)]
pub struct ClientTag(std::sync::atomic::AtomicU64);

impl ClientTag {
    /// The value last set, if any (0 is none).
    pub fn get(&self) -> Option<u64> {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            tag => Some(tag),
        }
    }

    pub fn set(&self, tag: u64) {
        self.0.store(tag, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clone for ClientTag {
    fn clone(&self) -> Self {
        Self(std::sync::atomic::AtomicU64::new(
            self.0.load(std::sync::atomic::Ordering::Relaxed),
        ))
    }
}

impl PartialEq for ClientTag {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for ClientTag {}

/// How a connection's calls are protected, in the words of an export's
/// `xprtsec` option (knfsd's, `exports(5)`): each connection is exactly
/// one of these, as knfsd's `check_xprtsec_policy` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportSecurity {
    /// Plain TCP or UDP.
    Plain,
    /// TLS, the client presenting no certificate.
    Tls,
    /// TLS, the client presenting a certificate that verified against
    /// the server's `client_ca` (rustls refuses the handshake of one that
    /// does not).
    Mtls,
}

impl TransportSecurity {
    /// The `xprtsec` word: `none`, `tls` or `mtls`.
    pub fn name(self) -> &'static str {
        match self {
            TransportSecurity::Plain => "none",
            TransportSecurity::Tls => "tls",
            TransportSecurity::Mtls => "mtls",
        }
    }
}

impl ConnInfo {
    /// How this connection's calls are protected now.
    pub fn security(&self) -> TransportSecurity {
        match self.tls.get() {
            None => TransportSecurity::Plain,
            Some(TlsPeer::Anonymous) => TransportSecurity::Tls,
            Some(TlsPeer::Certified(_)) => TransportSecurity::Mtls,
        }
    }

    /// The client's certificate, if it presented one over TLS and it
    /// verified against `client_ca` (an `mtls` connection).
    pub fn certificate(&self) -> Option<&ClientCertificate> {
        match self.tls.get() {
            Some(TlsPeer::Certified(c)) => Some(c),
            _ => None,
        }
    }

    /// The peer's confirmed host names; empty if it has none or they were
    /// not looked up (no export matches clients by name).
    pub fn names(&self) -> &[String] {
        self.names.get().map_or(&[], Vec::as_slice)
    }

    /// Looks the peer's host names up (the system resolver, cached per
    /// address for a minute, a few lookups at a time:
    /// [`crate::names::client_names_shared`]), unless that was done.
    pub async fn look_up_names(&self) {
        if self.names.get().is_some() {
            return;
        }
        let names = crate::names::client_names_shared(self.peer.ip()).await;
        let _ = self.names.set(names);
    }
}

/// The dropped-connection warnings of a server, one budget per reason.
#[derive(Debug, Default)]
pub struct DropLogs {
    stalled: LogBudget,
    replies_unread: LogBudget,
    /// Connections closed for a record longer than the limit.
    too_large: LogBudget,
    /// TLS handshakes that failed over a certificate, the client's or the
    /// server's.
    handshake_certificates: LogBudget,
    /// TLS handshakes that failed otherwise (stalled, garbage, closed):
    /// apart, so that a flood of them hides no certificate to fix.
    handshake_others: LogBudget,
}

/// Limits applied to each connection, and the counters of the listeners
/// that share them.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Largest record (RPC call) accepted, checked before it is read; a
    /// larger one closes the connection.
    pub max_record: u32,
    /// Calls of one connection that may be in flight at once; when they are
    /// all taken the connection stops reading.
    pub max_in_flight: usize,
    /// Calls of one connection holding a large buffer at once (see
    /// [`Service::holds_buffer`]); more wait, and the connection reads
    /// nothing else meanwhile.
    pub buffer_share: usize,
    /// When a connection ends (peer closed, server shutdown), how long its
    /// calls in flight may take to send their replies before it is closed.
    pub drain_timeout: Duration,
    /// A record (a call) whose bytes stop coming for this long is dropped
    /// with its connection; a record that keeps coming, however slowly, is
    /// not.
    pub stall_timeout: Duration,
    /// A connection whose replies make no progress (the peer does not read
    /// them) for this long is closed.
    pub reply_timeout: Duration,
    /// A connection with no call in flight and no bytes received for this
    /// long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once across every listener sharing `counters`.
    /// A connection over it closes the connection quiet longest, if one has
    /// been quiet for `evict_after` (`quiet.rs`); else it is accepted and
    /// closed at once.
    pub max_connections: usize,
    /// See `max_connections`.
    pub evict_after: Duration,
    /// The connections' quiet clocks (shared by clones, like `counters`).
    pub quiet: Arc<quiet::QuietClocks>,
    /// How long a connection sending one call at a time that has answered
    /// it looks for its next one before sleeping, while no call is in
    /// flight anywhere (see `spin.rs`); zero never.
    pub idle_spin: Duration,
    /// Counters of the connections served with these limits (shared by
    /// clones: one set for all listeners of a server).
    pub counters: Arc<NetCounters>,
    /// Calls in flight on every connection served with these limits, and
    /// the one spinning (shared by clones, like `counters`).
    pub activity: Arc<Activity>,
    /// The warnings left for dropped connections (shared by clones, like
    /// `counters`): a few per reason at a time (`log_budget.rs`).
    pub drop_logs: Arc<DropLogs>,
    /// RPC-with-TLS (RFC 9289): a client's AUTH_TLS probe switches its
    /// connection to TLS with this configuration; `None`, or one that is
    /// off, refuses probes (clients then go on in plaintext).
    pub tls: Option<TlsConfig>,
    /// A TLS handshake not done in this long closes its connection.
    pub handshake_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            // A 1 MiB WRITE plus generous room for the call and NFS headers.
            max_record: (1 << 20) + 8192,
            max_in_flight: 64,
            buffer_share: 8,
            drain_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(30),
            // As knfsd (svc_age_temp_xprts: 6 minutes).
            idle_timeout: Duration::from_secs(360),
            max_connections: 4096,
            evict_after: Duration::from_secs(5),
            quiet: Arc::default(),
            idle_spin: DEFAULT_IDLE_SPIN,
            counters: Arc::default(),
            activity: Arc::default(),
            drop_logs: Arc::default(),
            tls: None,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}
