//! RPC over UDP for the small programs that must speak it: the port
//! mapper (clients such as `sm-notify` ask it over UDP) and NSM (a
//! rebooted client's `sm-notify` sends SM_NOTIFY over UDP). One datagram
//! is one call and one reply; the same [`Service`] as over TCP handles it,
//! reading the datagram as a one-fragment record.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_logs::LogEvery;
use dionfs_rpc::message::read_call_header;
use dionfs_rpc::{record_mark, RecordReader, ReplyStatus};
use parking_lot::Mutex;
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::{next_conn_id, CallStream, ConnInfo, NetCounters, Place, Received, Reply, Service};

/// A datagram already in memory has all its bytes queued.
impl CallStream for &[u8] {
    async fn wait_for_queued(&self, _bytes: usize) -> io::Result<usize> {
        Ok(self.len())
    }
}

/// Largest datagram read.
const MAX_DATAGRAM: usize = 64 << 10;

/// Calls of one UDP socket running at once. While they all run, no
/// datagram is read: the socket's receive buffer fills and the kernel
/// drops what comes (counted in its UDP receive errors), and the client
/// retransmits, as over UDP it must. A task per datagram without a bound
/// let a flood of NSM NULLs (anyone can send them, from any address) take
/// every one of the 512 blocking threads NFS calls run on, and 420 MB.
const MAX_IN_FLIGHT: usize = 16;

/// Replies larger than their call sent per second over UDP, over all the
/// UDP sockets sharing one [`LargerReplies`] (and as many at once after a
/// quiet second).
pub const LARGER_REPLIES_PER_SECOND: u32 = 16;

/// Rations the replies that are larger than the datagram that asked for
/// them. Over UDP the source address is the sender's word: DUMP (portmap
/// v2, rpcbind v3/v4) sent with a victim's address as its source made the
/// server send that victim a reply 8 to 25 times the call's size, as fast
/// as calls came: the reflection attacks port mappers are known for. Now
/// at most [`LARGER_REPLIES_PER_SECOND`] such replies a second leave the
/// server, a few kilobytes; replies no larger than their call (GETPORT,
/// GETADDR, NULL, the NSM procedures) are not rationed. Clients that want
/// more ask over TCP, as `rpcinfo -p` does; a dropped reply is
/// retransmitted for, as over UDP it must be.
pub struct LargerReplies {
    bucket: Mutex<Bucket>,
    counters: Arc<NetCounters>,
    warning: LogEvery,
}

/// Replies that may be sent now, refilled with time.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl LargerReplies {
    pub fn new(counters: Arc<NetCounters>) -> Self {
        Self {
            bucket: Mutex::new(Bucket {
                tokens: f64::from(LARGER_REPLIES_PER_SECOND),
                at: Instant::now(),
            }),
            counters,
            warning: LogEvery::new(Duration::from_secs(10)),
        }
    }

    /// Whether a reply of `reply` bytes to a datagram of `call` bytes may
    /// be sent now; counts and (every 10 s) logs one that may not.
    fn allow(&self, call: usize, reply: usize) -> bool {
        if reply <= call || self.take(Instant::now()) {
            return true;
        }
        NetCounters::bump(&self.counters.udp_replies_dropped);
        if self.warning.due() {
            warn!(
                per_second = LARGER_REPLIES_PER_SECOND,
                call_bytes = call,
                reply_bytes = reply,
                "UDP replies larger than their call (DUMP) are limited to {LARGER_REPLIES_PER_SECOND} a second \
                 and more were asked for: dropped (counted in dionfs_udp_replies_dropped_total), \
                 since a forged source address would turn them on a victim; clients can ask over TCP \
                 (rpcinfo -p does)"
            );
        }
        false
    }

    fn take(&self, now: Instant) -> bool {
        let per_second = f64::from(LARGER_REPLIES_PER_SECOND);
        let mut b = self.bucket.lock();
        let refill = now.saturating_duration_since(b.at).as_secs_f64() * per_second;
        b.tokens = (b.tokens + refill).min(per_second);
        b.at = now;
        if b.tokens < 1.0 {
            return false;
        }
        b.tokens -= 1.0;
        true
    }
}

/// Serves `service` on `socket` until `shutdown` completes. Each call runs
/// as its own task, at most [`MAX_IN_FLIGHT`] at once; a reply that cannot
/// be sent is dropped (the client retransmits, as over UDP it must), and
/// so is one larger than its call that `larger` does not allow.
pub async fn serve<S: Service>(
    socket: UdpSocket,
    service: Arc<S>,
    larger: Arc<LargerReplies>,
    shutdown: impl Future<Output = ()>,
) {
    let socket = Arc::new(socket);
    let local = match socket.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let running = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return,
            p = running.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (n, peer) = tokio::select! {
            _ = &mut shutdown => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    debug!(error = %e, "UDP receive failed");
                    continue;
                }
            },
        };
        let mut framed = record_mark(n as u32, true).to_vec();
        framed.extend_from_slice(&buf[..n]);
        // Replies go to `peer` as it came; the call sees the client as
        // its IPv4 address if it is one, and the socket's any-address in
        // the client's family (the port mapper names it in its answers).
        let client = super::canonical(peer);
        let local = match (local.ip(), client.ip()) {
            (IpAddr::V6(v6), IpAddr::V4(_)) if v6.is_unspecified() => {
                SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), local.port())
            }
            _ => local,
        };
        let conn = Arc::new(ConnInfo {
            id: next_conn_id(),
            peer: client,
            local,
            datagram: true,
            names: Default::default(),
            tls: Default::default(),
            back_channel: None,
            client_tag: Default::default(),
        });
        let (socket, service, larger) = (socket.clone(), service.clone(), larger.clone());
        tokio::spawn(async move {
            if let Some(reply) = call(&framed, conn, service).await {
                let out = datagram(reply);
                if larger.allow(n, out.len()) {
                    let _ = socket.send_to(&out, peer).await;
                }
            }
            drop(permit);
        });
    }
}

/// `reply` as one datagram: header, payload, padding, trailer.
fn datagram(reply: Reply) -> Vec<u8> {
    let mut out = reply.header;
    let data = reply.data.as_deref().map_or(&[][..], |d| d.bytes());
    out.extend_from_slice(data);
    out.resize(out.len() + dionfs_xdr::pad_len(data.len()), 0);
    out.extend_from_slice(&reply.trailer);
    out
}

/// One call from a datagram (framed as a record), its reply if any.
async fn call<S: Service>(framed: &[u8], conn: Arc<ConnInfo>, service: Arc<S>) -> Option<Reply> {
    let mut reader = RecordReader::new(framed, MAX_DATAGRAM as u32 + 4);
    if !reader.next_record().await.ok()? {
        return None;
    }
    let call = match read_call_header(&mut reader).await {
        Ok(call) => call,
        Err(e) => return e.reply().map(Reply::new),
    };
    let xid = call.xid;
    let pending = match service.receive(&conn, call, &mut reader).await {
        Ok(Received::Run(p)) => p,
        Ok(Received::Reply(r)) => return Some(r),
        Ok(Received::NoReply) => return None,
        Err(_) => return Some(Reply::status(xid, ReplyStatus::GarbageArgs)),
    };
    if service.execute_blocks(&pending) {
        tokio::task::spawn_blocking(move || {
            dionfs_sys::park::run_here(service.execute(conn, pending, Place::BlockingThread))
        })
        .await
        .ok()?
    } else {
        // Boxed, as `connection::run_call` does it: the spawned task then
        // holds a pointer, not the 4 KiB future, which tokio would copy.
        Box::pin(service.execute(conn, pending, Place::Task)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_holds_header_payload_padding_and_trailer() {
        assert_eq!(datagram(Reply::new(vec![1, 2, 3, 4])), [1, 2, 3, 4]);
        let reply =
            Reply::with_data(vec![1, 2, 3, 4], Box::new(vec![5, 6, 7])).with_trailer(vec![8, 9]);
        assert_eq!(datagram(reply), [1, 2, 3, 4, 5, 6, 7, 0, 8, 9]);
    }

    #[test]
    fn larger_replies_are_rationed_and_smaller_ones_are_not() {
        let counters = Arc::new(NetCounters::default());
        let larger = LargerReplies::new(counters.clone());
        let start = Instant::now();
        for _ in 0..LARGER_REPLIES_PER_SECOND {
            assert!(larger.take(start));
        }
        assert!(!larger.take(start));
        // A reply no larger than its call is never held back.
        assert!(larger.allow(100, 100));
        // One more after a sixteenth of a second, not two.
        let later = start + Duration::from_secs(1) / LARGER_REPLIES_PER_SECOND;
        assert!(larger.take(later));
        assert!(!larger.take(later));
        // A long quiet spell refills a burst, no more.
        let much_later = later + Duration::from_secs(60);
        for _ in 0..LARGER_REPLIES_PER_SECOND {
            assert!(larger.take(much_later));
        }
        assert!(!larger.take(much_later));
        assert_eq!(counters.snapshot().udp_replies_dropped, 0);
    }
}
