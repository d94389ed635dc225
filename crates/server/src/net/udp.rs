//! RPC over UDP for the small programs that must speak it: the port
//! mapper (clients such as `sm-notify` ask it over UDP) and NSM (a
//! rebooted client's `sm-notify` sends SM_NOTIFY over UDP). One datagram
//! is one call and one reply; the same [`Service`] as over TCP handles it,
//! reading the datagram as a one-fragment record.

use std::future::Future;
use std::io;
use std::sync::Arc;

use dionfs_rpc::message::read_call_header;
use dionfs_rpc::{record_mark, RecordReader, ReplyStatus};
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tracing::debug;

use super::{next_conn_id, CallStream, ConnInfo, Received, Reply, Service};

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

/// Serves `service` on `socket` until `shutdown` completes. Each call runs
/// as its own task, at most [`MAX_IN_FLIGHT`] at once; a reply that cannot
/// be sent is dropped (the client retransmits, as over UDP it must).
pub async fn serve<S: Service>(
    socket: UdpSocket,
    service: Arc<S>,
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
        let conn = Arc::new(ConnInfo {
            id: next_conn_id(),
            peer,
            local,
            names: Default::default(),
        });
        let (socket, service) = (socket.clone(), service.clone());
        tokio::spawn(async move {
            if let Some(reply) = call(&framed, conn, service).await {
                let mut out = reply.header;
                if let Some(data) = reply.data {
                    out.extend_from_slice(data.bytes());
                }
                let _ = socket.send_to(&out, peer).await;
            }
            drop(permit);
        });
    }
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
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || runtime.block_on(service.execute(conn, pending)))
            .await
            .ok()?
    } else {
        service.execute(conn, pending).await
    }
}
