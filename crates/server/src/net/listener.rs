//! The accept loop: one task per connection, until shutdown.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use super::connection::run_connection;
use super::{ConnInfo, ConnLimits, Service};

/// Pause after a failed accept (e.g. EMFILE), so that a persistent failure
/// neither spins nor floods the log.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Connection ids, unique across all listeners of the process.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh connection id, for [`ConnInfo::id`].
pub fn next_conn_id() -> u64 {
    NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed)
}

/// Accepts connections on `listener` and serves each with `service` until
/// `shutdown` completes. Then stops accepting, tells every connection to
/// stop reading, and waits while they finish their calls in flight (each
/// bounded by `limits.drain_timeout`). Dropping the returned future aborts
/// the connections at once.
///
/// An idle connection costs one task, a socket and a few hundred bytes of
/// state: buffers are allocated per call, as large as the call needs.
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    let local = listener.local_addr().ok();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Replies are whole records written at once: Nagle would
                    // only delay them.
                    if let Err(e) = stream.set_nodelay(true) {
                        debug!(%peer, error = %e, "cannot set TCP_NODELAY");
                    }
                    let Ok(local) = stream.local_addr() else {
                        continue; // the socket is already gone
                    };
                    let conn = ConnInfo { id: next_conn_id(), peer, local };
                    let mut stop = stop_rx.clone();
                    let stopped = async move {
                        // An error means the sender is gone: stop as well.
                        let _ = stop.wait_for(|stop| *stop).await;
                    };
                    connections.spawn(run_connection(
                        service.clone(),
                        stream,
                        conn,
                        limits.clone(),
                        stopped,
                    ));
                }
                Err(e) => {
                    warn!(listener = ?local, error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(joined) = connections.join_next() => log_join(joined),
        }
    }
    info!(listener = ?local, connections = connections.len(), "listener shutting down");
    stop_tx.send_replace(true);
    while let Some(joined) = connections.join_next().await {
        log_join(joined);
    }
}

fn log_join<T>(joined: Result<T, tokio::task::JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            error!(error = %e, "connection task panicked");
        }
    }
}
