//! Duplicate request cache: replays the reply of a non-idempotent call that a
//! client retransmits (same xid, client address, program, version,
//! procedure), instead of running it twice. A REMOVE retransmitted after a
//! lost reply must not turn into NOENT; a retransmitted CREATE GUARDED must
//! not turn into EXIST. Like knfsd's nfscache, bounded and LRU.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;

/// What identifies a retransmission. The args' hash guards against a client
/// that reuses an xid for a different call (after a reboot, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrcKey {
    pub xid: u32,
    pub client: SocketAddr,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub args_hash: u64,
}

/// What the cache says about a call about to run.
#[derive(Debug)]
pub enum Lookup {
    /// Not seen: run it, then `complete` the key.
    New,
    /// The original is still running: drop this copy (the client will get
    /// the original's reply).
    InProgress,
    /// Already answered: send this reply again.
    Replay(Arc<Vec<u8>>),
}

enum Entry {
    InProgress,
    Done(Arc<Vec<u8>>),
}

/// A bounded map from call identity to its reply.
pub struct DuplicateRequestCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

struct Inner {
    map: HashMap<DrcKey, Entry>,
    order: VecDeque<DrcKey>,
}

impl DuplicateRequestCache {
    /// A cache remembering at most `capacity` calls.
    pub fn new(capacity: usize) -> Self {
        DuplicateRequestCache {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
            capacity: capacity.max(1),
        }
    }

    /// Looks a call up; a new call is recorded as in progress.
    pub fn begin(&self, key: DrcKey) -> Lookup {
        let mut inner = self.inner.lock();
        match inner.map.get(&key) {
            Some(Entry::InProgress) => return Lookup::InProgress,
            Some(Entry::Done(reply)) => return Lookup::Replay(reply.clone()),
            None => {}
        }
        while inner.order.len() >= self.capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            inner.map.remove(&old);
        }
        inner.map.insert(key, Entry::InProgress);
        inner.order.push_back(key);
        Lookup::New
    }

    /// Records the reply of a call that `begin` said was new.
    pub fn complete(&self, key: DrcKey, reply: Arc<Vec<u8>>) {
        let mut inner = self.inner.lock();
        if let Some(e) = inner.map.get_mut(&key) {
            *e = Entry::Done(reply);
        }
    }

    /// Forgets a call that produced no reply (so a retransmission runs it).
    pub fn abandon(&self, key: DrcKey) {
        let mut inner = self.inner.lock();
        if matches!(inner.map.get(&key), Some(Entry::InProgress)) {
            inner.map.remove(&key);
            inner.order.retain(|k| *k != key);
        }
    }
}

/// A cheap, well-mixed 64-bit hash of call arguments for [`DrcKey`].
pub fn hash_args(args: &[u8]) -> u64 {
    let h = blake3::hash(args);
    let b = h.as_bytes();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32) -> DrcKey {
        DrcKey {
            xid,
            client: "127.0.0.1:900".parse().unwrap(),
            prog: 100003,
            vers: 3,
            proc_: 12,
            args_hash: 7,
        }
    }

    #[test]
    fn new_then_in_progress_then_replay() {
        let c = DuplicateRequestCache::new(4);
        assert!(matches!(c.begin(key(1)), Lookup::New));
        assert!(matches!(c.begin(key(1)), Lookup::InProgress));
        c.complete(key(1), Arc::new(vec![1, 2, 3]));
        match c.begin(key(1)) {
            Lookup::Replay(r) => assert_eq!(*r, vec![1, 2, 3]),
            other => panic!("expected replay, got {other:?}"),
        }
        let mut other_args = key(1);
        other_args.args_hash = 8;
        assert!(matches!(c.begin(other_args), Lookup::New));
    }

    #[test]
    fn bounded_and_oldest_first() {
        let c = DuplicateRequestCache::new(2);
        for x in 0..3 {
            assert!(matches!(c.begin(key(x)), Lookup::New));
            c.complete(key(x), Arc::new(vec![x as u8]));
        }
        assert!(matches!(c.begin(key(0)), Lookup::New), "oldest evicted");
        assert!(matches!(c.begin(key(2)), Lookup::Replay(_)));
    }

    #[test]
    fn abandoned_calls_run_again() {
        let c = DuplicateRequestCache::new(2);
        assert!(matches!(c.begin(key(5)), Lookup::New));
        c.abandon(key(5));
        assert!(matches!(c.begin(key(5)), Lookup::New));
    }
}
