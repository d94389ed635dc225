//! What the connection layer counts for operators: connections open and
//! refused, connections dropped and why, calls held back by the
//! per-connection buffer share, spins of an idle server.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Live counters, shared by every listener of a server (through
/// `ConnLimits::counters`).
#[derive(Debug, Default)]
pub struct NetCounters {
    /// Connections open right now (the cap `max_connections` applies to it).
    pub(super) open: AtomicUsize,
    pub(super) refused: AtomicU64,
    pub(super) evicted: AtomicU64,
    pub(super) stalled: AtomicU64,
    pub(super) unread_replies: AtomicU64,
    pub(super) idle: AtomicU64,
    pub(super) too_large: AtomicU64,
    pub(super) share_delays: AtomicU64,
    pub(super) batched_replies: AtomicU64,
    pub(super) idle_spins: AtomicU64,
    pub(super) spin_catches: AtomicU64,
    pub(super) spin_looks: AtomicU64,
    pub(super) udp_replies_dropped: AtomicU64,
    pub(super) tls_connections: AtomicU64,
    pub(super) mtls_connections: AtomicU64,
    pub(super) tls_handshake_failures: AtomicU64,
}

/// A copy of [`NetCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetSnapshot {
    /// Connections open now.
    pub open: u64,
    /// Connections closed at once because `max_connections` were open.
    pub refused: u64,
    /// Connections closed, quiet, to make room for a new one at
    /// `max_connections`.
    pub evicted: u64,
    /// Connections dropped because a record stopped arriving.
    pub stalled: u64,
    /// Connections closed because the peer did not read its replies.
    pub unread_replies: u64,
    /// Connections closed after `idle_timeout` without calls.
    pub idle: u64,
    /// Connections closed because a record was longer than the limit.
    pub too_large: u64,
    /// Calls that waited because their connection held its share of
    /// buffers.
    pub share_delays: u64,
    /// Replies written together with others in one `writev`.
    pub batched_replies: u64,
    /// Times an idle server's connection looked for its next call before
    /// sleeping (`idle_spin`).
    pub idle_spins: u64,
    /// Calls those looks found, each a sleep and wake-up saved.
    pub spin_catches: u64,
    /// The looks themselves: one non-blocking `recv` each (the look that
    /// finds the call reads it).
    pub spin_looks: u64,
    /// UDP replies larger than their call dropped over the rate they are
    /// sent at (`udp::LargerReplies`).
    pub udp_replies_dropped: u64,
    /// Connections switched to TLS (RFC 9289) without a client
    /// certificate.
    pub tls_connections: u64,
    /// Connections switched to TLS with a verified client certificate.
    pub mtls_connections: u64,
    /// TLS handshakes that failed or timed out (each its connection).
    pub tls_handshake_failures: u64,
}

impl NetCounters {
    /// A copy of the counters.
    pub fn snapshot(&self) -> NetSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NetSnapshot {
            open: self.open.load(Ordering::Relaxed) as u64,
            refused: get(&self.refused),
            evicted: get(&self.evicted),
            stalled: get(&self.stalled),
            unread_replies: get(&self.unread_replies),
            idle: get(&self.idle),
            too_large: get(&self.too_large),
            share_delays: get(&self.share_delays),
            batched_replies: get(&self.batched_replies),
            idle_spins: get(&self.idle_spins),
            spin_catches: get(&self.spin_catches),
            spin_looks: get(&self.spin_looks),
            udp_replies_dropped: get(&self.udp_replies_dropped),
            tls_connections: get(&self.tls_connections),
            mtls_connections: get(&self.mtls_connections),
            tls_handshake_failures: get(&self.tls_handshake_failures),
        }
    }

    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
