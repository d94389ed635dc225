//! The reading side of a connection: the socket's read half, with what the
//! connection's watchdog needs to tell a stalled record from a slow one,
//! and the wait for a call's payload before a buffer is taken for it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use dionfs_sys::net::{
    bytes_queued, rcvlowat, receive_memory, receive_window, set_rcvlowat, ReceiveWindow,
};
use rustix::net::RecvFlags;
use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;

use super::tls::{PlainRead, TlsReader};
use super::writer::Shared;

/// The byte stream a [`super::Service`] receives calls from.
pub trait CallStream: AsyncRead + Unpin + Send + Sync {
    /// Waits until `bytes` bytes can be read without waiting, or as many
    /// as the socket can queue (the peer's window is closed, or it closed
    /// the connection); returns how many can be read now (fewer than
    /// `bytes` in the second case); errors are the socket's. Use it
    /// through [`super::wait_for_payload`].
    fn wait_for_queued(&self, bytes: usize) -> impl Future<Output = io::Result<usize>> + Send;
}

/// What the reading side waits for, as the watchdog sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiting {
    /// Nothing from the peer: the loop is working or waiting for the
    /// server's own resources (a permit, a buffer), which is no stall.
    Nothing = 0,
    /// A read from the socket is pending.
    Socket = 1,
    /// A payload is awaited in the socket ([`CallStream::wait_for_queued`]);
    /// progress is then seen with FIONREAD.
    Payload = 2,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Waiting::Nothing => "nothing",
            Waiting::Socket => "socket",
            Waiting::Payload => "payload",
        })
    }
}

/// The reading side's progress, updated by [`CallReader`] and the reading
/// loop, watched by the connection's watchdog.
#[derive(Debug, Default)]
pub(super) struct ReadProgress {
    /// Bytes received so far.
    received: AtomicU64,
    /// A [`Waiting`].
    waiting: AtomicU8,
    /// Bytes of the current record have arrived (set on the first byte
    /// after [`ReadProgress::between_records`]).
    in_record: AtomicBool,
    /// The next read is a spin's look (`spin.rs`): it goes to the socket
    /// even if the runtime has not seen it readable yet, and finding
    /// nothing there it waits for nothing.
    look: AtomicBool,
    /// The loop is running a call itself (`connection.rs`,
    /// `run_call_here`): a call in flight that holds no permit beside the
    /// loop's.
    running_call: AtomicBool,
}

impl ReadProgress {
    pub(super) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    pub(super) fn waiting(&self) -> Waiting {
        match self.waiting.load(Ordering::Relaxed) {
            1 => Waiting::Socket,
            2 => Waiting::Payload,
            _ => Waiting::Nothing,
        }
    }

    fn set_waiting(&self, w: Waiting) {
        self.waiting.store(w as u8, Ordering::Relaxed);
    }

    pub(super) fn in_record(&self) -> bool {
        self.in_record.load(Ordering::Relaxed)
    }

    /// Makes the next read a look (`spin.rs`): one non-blocking `recv`,
    /// which takes what the socket holds without waiting for the
    /// runtime's epoll to report it, and, when nothing is there, leaves
    /// the read pending without registering with the runtime (the
    /// spinning loop polls it again, or awaits it once it stops).
    pub(super) fn look(&self) {
        self.look.store(true, Ordering::Relaxed);
    }

    /// Ends a look that no read took.
    pub(super) fn end_look(&self) {
        self.look.store(false, Ordering::Relaxed);
    }

    /// Whether the loop is running a call itself.
    pub(super) fn running_call(&self) -> bool {
        self.running_call.load(Ordering::Relaxed)
    }

    pub(super) fn set_running_call(&self, running: bool) {
        self.running_call.store(running, Ordering::Relaxed);
    }

    /// The loop is about to wait for the next record: what it waits in now
    /// is idleness, not a stall, until a byte comes.
    pub(super) fn between_records(&self) {
        self.in_record.store(false, Ordering::Relaxed);
    }
}

/// The read half of a connection's socket, counting what it receives;
/// after an RFC 9289 handshake, the plaintext of its TLS records.
pub struct CallReader {
    half: OwnedReadHalf,
    progress: Arc<ReadProgress>,
    /// Set once the connection has switched to TLS.
    tls: Option<Box<TlsReading>>,
}

/// A TLS connection's reading side: the records' plaintext comes from
/// `reader`; the connection's writer is told when rustls has something
/// to send (the answer to a KeyUpdate, an alert).
struct TlsReading {
    reader: TlsReader,
    writer: Arc<Shared>,
}

impl std::fmt::Debug for CallReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallReader")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl CallReader {
    pub(super) fn new(half: OwnedReadHalf, progress: Arc<ReadProgress>) -> Self {
        Self {
            half,
            progress,
            tls: None,
        }
    }

    /// The socket.
    pub(super) fn socket(&self) -> &TcpStream {
        self.half.as_ref()
    }

    /// Whether the connection has switched to TLS.
    pub(super) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// From now on, reads the plaintext of `reader`'s TLS session,
    /// telling `writer` when the session has something to send.
    pub(super) fn start_tls(&mut self, reader: TlsReader, writer: Arc<Shared>) {
        self.tls = Some(Box::new(TlsReading { reader, writer }));
    }

    /// See [`ReadProgress::between_records`].
    pub(super) fn between_records(&self) {
        self.progress.between_records();
    }

    /// After [`ReadProgress::look`]: one non-blocking `recv` into `buf`,
    /// bypassing the runtime's readiness (which only epoll sets, and
    /// waiting for that is what the spin saves); nothing there is
    /// `Pending`, with no waker registered (the spin polls again). `None`
    /// if not asked.
    fn read_without_readiness(&mut self, buf: &mut ReadBuf<'_>) -> Option<Poll<io::Result<()>>> {
        if !self.progress.look.swap(false, Ordering::Relaxed) {
            return None;
        }
        let socket: &TcpStream = self.half.as_ref();
        Some(
            match rustix::net::recv(socket, buf.initialize_unfilled(), RecvFlags::DONTWAIT) {
                Ok((n, _)) => {
                    buf.advance(n);
                    Poll::Ready(Ok(()))
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e.into())),
            },
        )
    }
}

impl AsyncRead for CallReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.tls.is_some() {
            return self.poll_read_tls(cx, buf);
        }
        let before = buf.filled().len();
        let polled = match self.read_without_readiness(buf) {
            Some(looked) => looked,
            None => Pin::new(&mut self.half).poll_read(cx, buf),
        };
        let progress = &self.progress;
        match &polled {
            Poll::Pending => progress.set_waiting(Waiting::Socket),
            Poll::Ready(_) => {
                progress.set_waiting(Waiting::Nothing);
                let n = buf.filled().len() - before;
                if n > 0 {
                    progress.received.fetch_add(n as u64, Ordering::Relaxed);
                    progress.in_record.store(true, Ordering::Relaxed);
                }
            }
        }
        polled
    }
}

impl CallReader {
    /// [`AsyncRead::poll_read`] of a TLS connection: plaintext rustls has
    /// already decrypted (or can decrypt from ciphertext read earlier)
    /// comes first, and only when there is none is the socket read: a
    /// record whose bytes are all in rustls is never waited for on the
    /// socket. Ciphertext read counts as received (the watchdog's
    /// progress); a record starts with its first plaintext byte.
    fn poll_read_tls(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        let progress = &self.progress;
        loop {
            let mut wants_write = false;
            let read = tls
                .reader
                .read_plaintext(buf.initialize_unfilled(), &mut wants_write);
            if wants_write {
                tls.writer.flush_tls_soon();
            }
            match read {
                Ok(PlainRead::Read(n)) => {
                    buf.advance(n);
                    progress.set_waiting(Waiting::Nothing);
                    if n > 0 {
                        progress.in_record.store(true, Ordering::Relaxed);
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(PlainRead::NeedCiphertext) => {}
                Err(e) => {
                    progress.set_waiting(Waiting::Nothing);
                    return Poll::Ready(Err(e));
                }
            }
            // Through the runtime's read, which takes a short read as the
            // socket emptied: no `recv` that fails before the next wait.
            let mut space = ReadBuf::new(tls.reader.cipher_space(buf.remaining()));
            match Pin::new(&mut self.half).poll_read(cx, &mut space) {
                Poll::Pending => {
                    progress.set_waiting(Waiting::Socket);
                    return Poll::Pending;
                }
                Poll::Ready(Ok(())) => {
                    let n = space.filled().len();
                    tls.reader.cipher_read(n);
                    progress.received.fetch_add(n as u64, Ordering::Relaxed);
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                Poll::Ready(Err(e)) => {
                    progress.set_waiting(Waiting::Nothing);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

impl CallStream for CallReader {
    async fn wait_for_queued(&self, bytes: usize) -> io::Result<usize> {
        let socket: &TcpStream = self.half.as_ref();
        // Over TLS, what is already decrypted, or read and not yet
        // decrypted, is there as well: waiting for it on the socket would
        // wait for bytes that were never coming.
        let buffered = self.tls.as_ref().map_or(0, |t| t.reader.buffered());
        let Some(in_socket) = bytes.checked_sub(buffered).filter(|&b| b > 0) else {
            return Ok(buffered);
        };
        // The common case: the payload came with its call.
        let queued = bytes_queued(socket)?;
        if queued >= in_socket {
            return Ok(buffered + queued);
        }
        self.progress.set_waiting(Waiting::Payload);
        let waited = wait_with_low_water_mark(socket, in_socket, queued).await;
        self.progress.set_waiting(Waiting::Nothing);
        // Back to "readable on any byte" for the reads that follow, also
        // after a failure (the connection may yet answer the call).
        let reset = set_rcvlowat(socket, 1);
        let queued = waited?;
        reset?;
        Ok(buffered + queued)
    }
}

/// How long [`wait_with_low_water_mark`] trusts the kernel to say that
/// the socket can queue no more before it looks itself.
const PAYLOAD_RECHECK: Duration = Duration::from_millis(20);

/// The longest it waits between looks while the client sends nothing (a
/// paused or stalled client): the look's interval doubles from
/// [`PAYLOAD_RECHECK`] up to this, so a thousand stalled clients cost a few
/// thousand wake-ups a second instead of fifty thousand.
const PAYLOAD_RECHECK_MAX: Duration = Duration::from_millis(640);

/// Waits with `SO_RCVLOWAT` set to `bytes` until epoll says the socket is
/// readable under that mark: the bytes are there, or the peer closed, or the
/// receive window is about to close (the socket cannot queue more: the
/// payload is larger than its buffer). `seen` bytes are queued already.
/// Returns the bytes queued when it stopped waiting.
///
/// The kernel does not always say the last: it decides whether to wake
/// the reader when a segment arrives, and when the queue's memory (each
/// segment's truesize, not its payload) fills the buffer before the
/// mark is met, the window closes, no segment arrives any more and no
/// wake-up comes; the sender waits for the window, the reader for the
/// mark (seen here with nfs-rs WRITEs under load: 295,044 of 296,036
/// bytes queued, 299,840 of 301,933 bytes of receive memory charged, then
/// nothing for the stall timeout). So every [`PAYLOAD_RECHECK`] without a
/// wake-up the queue is looked at: no new bytes and the socket closed to
/// more ([`receive_closed`]) means reading is what comes next. (No new
/// bytes with room left is a client that paused: still waited for,
/// holding no buffer, and looked at less and less often, up to every
/// [`PAYLOAD_RECHECK_MAX`].)
async fn wait_with_low_water_mark(
    socket: &TcpStream,
    bytes: usize,
    mut seen: usize,
) -> io::Result<usize> {
    // Readiness tokio remembers from earlier reads is about bytes already
    // counted in `seen`: forget it, so that the next wake-up comes from the
    // kernel under the new mark. (Clearing before setting the mark: setting
    // it signals at once if it is already met.)
    clear_readable(socket);
    set_rcvlowat(socket, bytes)?;
    // Linux caps the mark at half the largest receive buffer; wait for no
    // more than it kept.
    let mark = rcvlowat(socket)?.clamp(1, bytes);
    let mut recheck = PAYLOAD_RECHECK;
    loop {
        let woken = match tokio::time::timeout(recheck, socket.readable()).await {
            Ok(ready) => {
                ready?;
                true
            }
            Err(_) => false,
        };
        let queued = bytes_queued(socket)?;
        if !woken {
            // No wake-up: still arriving, paused, or stuck below the mark.
            if queued == seen && receive_closed(socket) {
                return Ok(queued);
            }
            recheck = next_recheck(recheck, queued != seen);
            seen = queued;
            continue;
        }
        // Readable without new bytes: the peer closed, or the socket is
        // full. Either way reading is what comes next.
        if queued >= mark || queued == seen || receive_closed(socket) {
            return Ok(queued);
        }
        // New bytes short of the mark: bytes that came in the instant
        // before the mark was set woke us under the old mark, or the
        // kernel saw its window about to close (less than a segment left)
        // and the ACK that closes it is not out yet. Wait again; the next
        // look finds the window closed if it was the second.
        seen = queued;
        clear_readable(socket);
    }
}

/// Whether `socket` can take no more bytes until some are read: its
/// receive memory is (nearly) all charged, or the window it last
/// advertised is under one of the peer's segments. The second comes first
/// with large segments (loopback's are 64 KiB): the kernel closes the
/// window once the space left, in payload terms, is under a segment, which
/// can leave an eighth of the memory free or more (13% and 17% seen). An
/// error says yes: reading then is never wrong.
fn receive_closed(socket: &TcpStream) -> bool {
    let Ok((charged, limit)) = receive_memory(socket) else {
        return true;
    };
    let free = limit.saturating_sub(charged);
    if free < (limit / 16).max(4096) {
        return true;
    }
    match receive_window(socket) {
        Ok(ReceiveWindow {
            advertised: Some(window),
            mss,
        }) => window < mss,
        // A kernel that does not say (before 6.2): payload takes at least
        // half its memory, so a window under a segment has less than two
        // segments of memory free.
        Ok(ReceiveWindow {
            advertised: None,
            mss,
        }) => free < 2 * mss as usize,
        Err(_) => true,
    }
}

/// The wait before the next look of [`wait_with_low_water_mark`], after
/// one that waited `last` and saw new bytes (`progressed`) or none.
fn next_recheck(last: Duration, progressed: bool) -> Duration {
    if progressed {
        PAYLOAD_RECHECK
    } else {
        (last * 2).min(PAYLOAD_RECHECK_MAX)
    }
}

/// Clears tokio's read readiness of `socket`, if it has any.
fn clear_readable(socket: &TcpStream) {
    let _ = socket.try_io(Interest::READABLE, || {
        Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    /// A stalled client is looked at less and less often (a thousand of
    /// them polled every 20 ms took a fifth of a CPU from the server), and
    /// one that sends again at the first interval.
    #[test]
    fn a_stalled_payload_is_looked_at_less_and_less_often() {
        let mut wait = PAYLOAD_RECHECK;
        let mut looks = 0;
        let mut waited = Duration::ZERO;
        while waited < Duration::from_secs(10) {
            waited += wait;
            looks += 1;
            wait = next_recheck(wait, false);
        }
        assert!(looks <= 25, "{looks} looks in 10 s of a stalled client");
        assert_eq!(wait, PAYLOAD_RECHECK_MAX);
        assert_eq!(next_recheck(wait, true), PAYLOAD_RECHECK);
    }

    /// A client that sent part of a payload and paused is waited for
    /// (holding no buffer), however long: only new bytes or a full socket
    /// end the wait.
    #[tokio::test]
    async fn a_paused_payload_is_waited_for() {
        let (mut client, server) = pair().await;
        client.write_all(&[1u8; 10_000]).await.unwrap();
        dionfs_testfs::wait_until_async(
            || bytes_queued(&server).unwrap() == 10_000,
            Duration::from_secs(10),
            "the 10,000 bytes queued",
        )
        .await;
        let queued = bytes_queued(&server).unwrap();
        assert_eq!(queued, 10_000);
        let waited = tokio::time::timeout(
            Duration::from_millis(300),
            wait_with_low_water_mark(&server, 100_000, queued),
        )
        .await;
        assert!(waited.is_err(), "stopped waiting for a paused client");
        // The rest comes: the wait ends.
        let rest = tokio::spawn(async move {
            client.write_all(&[2u8; 90_000]).await.unwrap();
            client
        });
        tokio::time::timeout(
            Duration::from_secs(5),
            wait_with_low_water_mark(&server, 100_000, queued),
        )
        .await
        .expect("the whole payload came")
        .unwrap();
        assert!(bytes_queued(&server).unwrap() >= 100_000 - 4096);
        drop(rest.await.unwrap());
    }

    /// A payload the window closes on before the receive memory is full:
    /// on a connection that carried small calls first, the kernel closes
    /// its window once less than a segment's worth of space is left, with
    /// an eighth of the memory free (here: 121,616 bytes queued, 122,648
    /// of 140,929 bytes charged, window 0, segments of 55,808 bytes). The
    /// wait ends there instead of at the stall timeout (nfs-rs's first
    /// WRITE of 165,074 bytes on a fresh connection was dropped that way
    /// in CI now and then).
    #[tokio::test]
    async fn a_payload_the_window_closes_on_ends_the_wait() {
        use tokio::io::AsyncReadExt;
        for size in [129_919, 149_865, 229_649] {
            let (mut client, mut server) = pair().await;
            let mut small = [0u8; 200];
            for _ in 0..5 {
                client.write_all(&[1u8; 200]).await.unwrap();
                server.read_exact(&mut small).await.unwrap();
                server.write_all(&[2u8; 100]).await.unwrap();
                client.read_exact(&mut small[..100]).await.unwrap();
            }
            // The header and a little, then the rest once the wait has
            // begun: the wake-up the kernel gives as the window is about
            // to close comes with new bytes, short of the mark.
            let sender = tokio::spawn(async move {
                let mut record = vec![3u8; 200];
                record.resize(200 + size, 4);
                client.write_all(&record[..10_200]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                client.write_all(&record[10_200..]).await.unwrap();
                client
            });
            server.read_exact(&mut small).await.unwrap();
            let queued = bytes_queued(&server).unwrap();
            let waited = tokio::time::timeout(
                Duration::from_secs(3),
                wait_with_low_water_mark(&server, size, queued),
            )
            .await;
            let (charged, limit) = receive_memory(&server).unwrap();
            let window = receive_window(&server).unwrap();
            waited
                .unwrap_or_else(|_| {
                    panic!(
                        "{size}: still waiting with {} queued, {charged} of {limit} \
                         charged, {window:?}",
                        bytes_queued(&server).unwrap()
                    )
                })
                .unwrap();
            set_rcvlowat(&server, 1).unwrap();
            let mut rest = vec![0u8; size];
            server.read_exact(&mut rest).await.unwrap();
            assert!(rest.iter().all(|&b| b == 4));
            drop(sender.await.unwrap());
        }
    }

    /// A payload larger than the socket can queue (its receive buffer
    /// fixed small): the wait ends once the queue's memory is full, with
    /// or without the kernel's wake-up.
    #[tokio::test]
    async fn a_payload_the_socket_cannot_queue_ends_the_wait() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(&vec![7u8; 4 << 20]).await;
            s
        });
        let (server, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let queued = bytes_queued(&server).unwrap();
        assert!(
            queued < 4 << 20,
            "the socket queued the whole payload: no test"
        );
        tokio::time::timeout(
            Duration::from_secs(3),
            wait_with_low_water_mark(&server, 4 << 20, queued),
        )
        .await
        .expect("still waiting for a mark the socket cannot reach")
        .unwrap();
        let (charged, limit) = receive_memory(&server).unwrap();
        assert!(
            charged > 0 && charged <= limit + limit / 4,
            "{charged} of {limit}"
        );
        drop(server);
        let _ = sender.await;
    }
}
