//! The accept loop: one task per connection, until shutdown.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_logs::LogEvery;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use super::connection::run_connection;
use super::counters::NetCounters;
use super::{ConnInfo, ConnLimits, Service};

/// At most one "connection refused" warning this often, however many
/// connections are refused.
const REFUSAL_WARN_EVERY: Duration = Duration::from_secs(10);

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
/// state: buffers are allocated per call, as large as the call needs. With
/// `limits.max_connections` open (counted across every listener sharing
/// `limits.counters`), a new connection is accepted and closed at once, so
/// the client sees a reset rather than a hang.
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    // For log lines: the address, or `unknown` if the kernel did not say.
    let local = listener
        .local_addr()
        .map_or_else(|_| "unknown".to_string(), |a| a.to_string());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut refusals = Refusals::default();
    let accept_failures = LogEvery::new(REFUSAL_WARN_EVERY);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let peer = super::canonical(peer);
                    let open = match OpenConnection::admit(&limits) {
                        Some(open) => open,
                        // Room made: the quiet connection closes soon, and
                        // this one is counted over the cap until it has.
                        None => match limits.quiet.evict_quietest(limits.evict_after) {
                            Some(quiet) => {
                                refusals.evicted(peer, quiet, &limits);
                                OpenConnection::over_the_cap(&limits)
                            }
                            None => {
                                refusals.note(peer, &limits);
                                drop(stream);
                                continue;
                            }
                        },
                    };
                    // Replies are whole records written at once: Nagle would
                    // only delay them.
                    if let Err(e) = stream.set_nodelay(true) {
                        debug!(%peer, error = %e, "cannot set TCP_NODELAY");
                    }
                    let Ok(local) = stream.local_addr().map(super::canonical) else {
                        continue; // the socket is already gone
                    };
                    let conn = ConnInfo {
                        id: next_conn_id(),
                        peer,
                        local,
                        datagram: false,
                        names: Default::default(),
                        tls: Default::default(),
                        back_channel: None,
                        client_tag: Default::default(),
                    };
                    let mut stop = stop_rx.clone();
                    let stopped = async move {
                        // An error means the sender is gone: stop as well.
                        let _ = stop.wait_for(|stop| *stop).await;
                    };
                    let run = run_connection(
                        service.clone(),
                        stream,
                        conn,
                        limits.clone(),
                        stopped,
                    );
                    connections.spawn(async move {
                        let end = run.await;
                        drop(open);
                        end
                    });
                }
                Err(e) => {
                    // EMFILE lasts: ten tries a second, a line each 10 s.
                    if let Some(failed) = accept_failures.count() {
                        warn!(listener = %local, error = %e, failed,
                            "accept failed (count since the last such warning in `failed`); \
                             with EMFILE, raise the open-file limit (LimitNOFILE)");
                    }
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(joined) = connections.join_next() => log_join(joined),
        }
    }
    info!(listener = %local, connections = connections.len(), "listener shutting down");
    stop_tx.send_replace(true);
    while let Some(joined) = connections.join_next().await {
        log_join(joined);
    }
}

/// One connection counted in `NetCounters::open` until dropped.
struct OpenConnection(Arc<NetCounters>);

impl OpenConnection {
    /// Counts a new connection, unless `max_connections` are open.
    fn admit(limits: &ConnLimits) -> Option<Self> {
        let open = &limits.counters.open;
        let max = limits.max_connections;
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()?;
        Some(Self(limits.counters.clone()))
    }

    /// Counts a new connection whatever the cap (one that took the place of
    /// a connection closing).
    fn over_the_cap(limits: &ConnLimits) -> Self {
        limits.counters.open.fetch_add(1, Ordering::AcqRel);
        Self(limits.counters.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Connections refused over the cap, and connections closed to make room:
/// counted, and warned about at most once per [`REFUSAL_WARN_EVERY`] each.
struct Refusals {
    refused: LogEvery,
    evicted: LogEvery,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            refused: LogEvery::new(REFUSAL_WARN_EVERY),
            evicted: LogEvery::new(REFUSAL_WARN_EVERY),
        }
    }
}

impl Refusals {
    fn note(&mut self, peer: std::net::SocketAddr, limits: &ConnLimits) {
        NetCounters::bump(&limits.counters.refused);
        let Some(refused) = self.refused.count() else {
            return;
        };
        warn!(
            %peer,
            max_connections = limits.max_connections,
            refused,
            "connection refused: max_connections are open and none has been quiet for \
             {}s (count since the last such warning in `refused`); raise max_connections if \
             these clients are legitimate",
            limits.evict_after.as_secs_f64()
        );
    }

    fn evicted(&mut self, peer: std::net::SocketAddr, quiet: Duration, limits: &ConnLimits) {
        NetCounters::bump(&limits.counters.evicted);
        let Some(evicted) = self.evicted.count() else {
            return;
        };
        warn!(
            %peer,
            max_connections = limits.max_connections,
            quiet_s = quiet.as_secs_f64(),
            evicted,
            "max_connections are open: closing the connection quiet longest for a new one \
             (its client reconnects at its next call; count since the last such warning in \
             `evicted`); raise max_connections if these clients are legitimate"
        );
    }
}

fn log_join<T>(joined: Result<T, tokio::task::JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            error!(error = %e, "connection task panicked");
        }
    }
}
