//! A unit counted against a bound: pool buffers an export's readahead
//! holds, files of an export whose small READs cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One unit counted against a bound (a buffer of an export's readahead,
/// one of its clusters, `cluster.rs`); released on drop.
#[derive(Debug)]
pub(crate) struct Held(Arc<AtomicUsize>);

impl Held {
    /// Counts one more buffer in `held`, unless `cap` are already held.
    pub(crate) fn take(held: &Arc<AtomicUsize>, cap: usize) -> Option<Held> {
        held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        })
        .ok()
        .map(|_| Held(held.clone()))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
