//! Making room at `max_connections`: when every slot is taken, the
//! connection that has been quiet longest (no call received in full, none
//! in flight, no reply waiting) for at least `evict_after` is closed for
//! the new one, as knfsd closes its least recently used connection when it
//! has too many. Without it, a client that opened `max_connections`
//! connections and kept them open (a call now and then is enough against
//! the idle timeout) locked every other client out: their connections
//! were accepted and closed at once. A client whose connection is closed
//! so reconnects at its next call, as after an idle close.
//!
//! Each connection registers here; its watchdog (`connection.rs`, `watch`)
//! publishes when it last saw a call, and the listener picks the quietest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Every open connection's quiet clock (shared by the listeners of a
/// server, through `ConnLimits::quiet`).
#[derive(Debug)]
pub struct QuietClocks {
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<Quiet>>>,
}

impl Default for QuietClocks {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            conns: Mutex::default(),
        }
    }
}

/// One connection's clock.
#[derive(Debug)]
pub struct Quiet {
    /// Calls received in full: the reading loop counts them, the watchdog
    /// compares, the connection's closing line says how many.
    pub calls: AtomicU64,
    /// Milliseconds after `epoch` since which the connection is quiet;
    /// `u64::MAX` while busy.
    since_ms: AtomicU64,
    /// Told to close, for a new connection.
    pub evicted: Notify,
}

/// A connection's registration: its clock, gone from the list when
/// dropped.
pub struct Registration {
    clocks: Arc<QuietClocks>,
    id: u64,
    pub quiet: Arc<Quiet>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.clocks.conns.lock().remove(&self.id);
    }
}

impl QuietClocks {
    /// Registers connection `id`, quiet from now (a connection that never
    /// sends a call is as quiet as one that stopped).
    pub fn register(self: &Arc<Self>, id: u64) -> Registration {
        let quiet = Arc::new(Quiet {
            calls: AtomicU64::new(0),
            since_ms: AtomicU64::new(self.ms(Instant::now())),
            evicted: Notify::new(),
        });
        self.conns.lock().insert(id, quiet.clone());
        Registration {
            clocks: self.clone(),
            id,
            quiet,
        }
    }

    /// Publishes that the connection of `quiet` is busy (`None`) or quiet
    /// since `since`.
    pub fn set(&self, quiet: &Quiet, since: Option<Instant>) {
        let ms = since.map_or(u64::MAX, |t| self.ms(t));
        quiet.since_ms.store(ms, Ordering::Relaxed);
    }

    /// Tells the connection quiet longest, for at least `at_least`, to
    /// close; how long it has been quiet, or `None` if no connection has
    /// been quiet that long.
    pub fn evict_quietest(&self, at_least: Duration) -> Option<Duration> {
        let now = self.ms(Instant::now());
        // Nobody has been open that long yet.
        let limit = now.checked_sub(at_least.as_millis() as u64)?;
        let conns = self.conns.lock();
        let (_, quiet, since) = conns
            .iter()
            .map(|(id, q)| (*id, q, q.since_ms.load(Ordering::Relaxed)))
            .filter(|&(_, _, since)| since <= limit)
            .min_by_key(|&(id, _, since)| (since, id))?;
        // Not quiet any more, for the next pick: it is closing.
        quiet.since_ms.store(u64::MAX, Ordering::Relaxed);
        quiet.evicted.notify_one();
        Some(Duration::from_millis(now - since))
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quietest_connection_long_enough_is_picked_once() {
        let clocks = Arc::new(QuietClocks {
            epoch: Instant::now() - Duration::from_secs(60),
            conns: Mutex::default(),
        });
        let a = clocks.register(1);
        let b = clocks.register(2);
        let c = clocks.register(3);
        let now = Instant::now();
        clocks.set(&a.quiet, Some(now - Duration::from_secs(5)));
        clocks.set(&b.quiet, Some(now - Duration::from_secs(9)));
        clocks.set(&c.quiet, None);
        assert!(clocks.evict_quietest(Duration::from_secs(10)).is_none());
        let quiet = clocks.evict_quietest(Duration::from_secs(2)).unwrap();
        assert!(quiet >= Duration::from_secs(9), "{quiet:?}");
        // b was told; a is next; the busy one never.
        assert!(clocks.evict_quietest(Duration::from_secs(2)).unwrap() >= Duration::from_secs(5));
        assert!(clocks.evict_quietest(Duration::from_secs(2)).is_none());
        drop(b);
        assert_eq!(clocks.conns.lock().len(), 2);
    }
}
