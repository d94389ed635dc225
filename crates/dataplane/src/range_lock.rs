//! Per-file byte-range locks, shared (readers) or exclusive (writers,
//! truncate).
//!
//! Why: a misaligned direct-mode write mixes a direct write of its
//! interior with buffered writes of its edge blocks, and Linux direct I/O
//! flushes and invalidates the page cache of its range, which races with a
//! buffered writer in the same pages (the IOR-hard corruption in the NFSD
//! O_DIRECT thread). A reader must also never see a write half done (some
//! blocks new, some old). So every I/O holds a lock on the blocks it
//! touches: shared for reads, exclusive for writes.
//!
//! Grants are first come, first served among conflicting requests (a
//! request waits for every earlier conflicting request, granted or not), so
//! a stream of readers cannot starve a writer or a truncate. A thread holds
//! at most one range lock of a file at a time, which with FIFO order rules
//! out deadlock: a COPY or CLONE within one file, which needs two ranges,
//! takes them as one request ([`RangeLocks::lock_both`]).

use std::ops::Range;

use parking_lot::{Condvar, Mutex};

/// How a range is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Any number of shared holders may overlap.
    Shared,
    /// Overlaps nothing else.
    Exclusive,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    range: Range<u64>,
    kind: LockKind,
}

impl Entry {
    fn conflicts(&self, range: &Range<u64>, kind: LockKind) -> bool {
        let overlap = !self.range.is_empty()
            && !range.is_empty()
            && self.range.start < range.end
            && range.start < self.range.end;
        overlap && (self.kind == LockKind::Exclusive || kind == LockKind::Exclusive)
    }
}

#[derive(Debug, Default)]
struct Table {
    next_ticket: u64,
    /// Granted and waiting requests, in ticket order.
    entries: Vec<Entry>,
}

/// The range-lock table of one file.
#[derive(Debug, Default)]
pub struct RangeLocks {
    table: Mutex<Table>,
    changed: Condvar,
}

/// A held range lock; released on drop.
#[must_use = "the range is unlocked when the guard is dropped"]
#[derive(Debug)]
pub struct RangeGuard<'a> {
    locks: &'a RangeLocks,
    ticket: u64,
    waited: bool,
}

impl RangeGuard<'_> {
    /// Whether acquiring this lock had to wait for another holder.
    pub fn waited(&self) -> bool {
        self.waited
    }
}

impl RangeLocks {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks `range` (byte offsets, end exclusive), blocking until every
    /// earlier conflicting request has been released. An empty range
    /// conflicts with nothing.
    pub fn lock(&self, range: Range<u64>, kind: LockKind) -> RangeGuard<'_> {
        let mut table = self.table.lock();
        let ticket = table.next_ticket;
        table.next_ticket += 1;
        table.entries.push(Entry {
            ticket,
            range: range.clone(),
            kind,
        });
        let mut waited = false;
        while Self::blocked(&table, ticket, &range, kind) {
            waited = true;
            self.changed.wait(&mut table);
        }
        RangeGuard {
            locks: self,
            ticket,
            waited,
        }
    }

    /// Locks two ranges of the file as one request (one ticket, one
    /// guard): granted once neither conflicts with an earlier request. The
    /// two never wait for each other, so they may overlap (a copy's
    /// source and destination sharing a page).
    pub fn lock_both(
        &self,
        (first, first_kind): (Range<u64>, LockKind),
        (second, second_kind): (Range<u64>, LockKind),
    ) -> RangeGuard<'_> {
        let mut table = self.table.lock();
        let ticket = table.next_ticket;
        table.next_ticket += 1;
        for (range, kind) in [(&first, first_kind), (&second, second_kind)] {
            table.entries.push(Entry {
                ticket,
                range: range.clone(),
                kind,
            });
        }
        let mut waited = false;
        while Self::blocked(&table, ticket, &first, first_kind)
            || Self::blocked(&table, ticket, &second, second_kind)
        {
            waited = true;
            self.changed.wait(&mut table);
        }
        RangeGuard {
            locks: self,
            ticket,
            waited,
        }
    }

    /// Locks `range` only if that needs no waiting: `None` when a request
    /// conflicting with it is granted or waits (a waiting writer keeps its
    /// place in line). For callers that must not block (an async task),
    /// which then take the blocking path.
    pub fn try_lock(&self, range: Range<u64>, kind: LockKind) -> Option<RangeGuard<'_>> {
        let mut table = self.table.lock();
        if table.entries.iter().any(|e| e.conflicts(&range, kind)) {
            return None;
        }
        let ticket = table.next_ticket;
        table.next_ticket += 1;
        table.entries.push(Entry {
            ticket,
            range,
            kind,
        });
        Some(RangeGuard {
            locks: self,
            ticket,
            waited: false,
        })
    }

    /// Whether a request earlier than `ticket` (granted or waiting)
    /// conflicts with it. Entries are kept in ticket order, so the earlier
    /// ones are those before it.
    fn blocked(table: &Table, ticket: u64, range: &Range<u64>, kind: LockKind) -> bool {
        table
            .entries
            .iter()
            .take_while(|e| e.ticket != ticket)
            .any(|e| e.conflicts(range, kind))
    }

    /// Number of granted or waiting requests (for tests).
    pub fn len(&self) -> usize {
        self.table.lock().entries.len()
    }

    /// Whether no range is locked or waited for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut table = self.locks.table.lock();
        table.entries.retain(|e| e.ticket != self.ticket);
        drop(table);
        self.locks.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_testfs::wait_until;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Waits until `locks` holds `n` granted or waiting requests: a thread
    /// whose request is among them and conflicts with an earlier one is
    /// queued behind it (it checks and enters the table under one lock).
    fn wait_for_requests(locks: &RangeLocks, n: usize) {
        wait_until(
            || locks.len() == n,
            Duration::from_secs(10),
            &format!("{n} requests in the table"),
        );
    }

    #[test]
    fn two_ranges_locked_as_one_request_wait_for_both_and_not_for_each_other() {
        let locks = Arc::new(RangeLocks::new());
        // Overlapping ranges of one request (a copy's source and
        // destination sharing a page) do not wait for each other.
        let both = locks.lock_both((0..4096, LockKind::Shared), (0..8192, LockKind::Exclusive));
        assert!(!both.waited());
        assert!(locks.try_lock(4096..8192, LockKind::Shared).is_none());
        assert!(locks.try_lock(8192..9000, LockKind::Exclusive).is_some());
        drop(both);
        assert!(locks.is_empty());
        // Held: one reader of the first range, one writer of the second.
        let reader = locks.lock(0..100, LockKind::Shared);
        let writer = locks.lock(10_000..10_100, LockKind::Exclusive);
        let granted = Arc::new(AtomicU64::new(0));
        let waiter = {
            let (locks, granted) = (locks.clone(), granted.clone());
            std::thread::spawn(move || {
                let g = locks.lock_both(
                    (0..100, LockKind::Shared),
                    (10_000..10_100, LockKind::Exclusive),
                );
                granted.store(1, Ordering::SeqCst);
                assert!(g.waited());
            })
        };
        wait_for_requests(&locks, 4);
        drop(reader);
        // Its second range is still held.
        assert_eq!(granted.load(Ordering::SeqCst), 0);
        drop(writer);
        waiter.join().unwrap();
        assert_eq!(granted.load(Ordering::SeqCst), 1);
        assert!(locks.is_empty());
    }

    #[test]
    fn try_lock_never_waits_and_never_jumps_the_line() {
        let locks = Arc::new(RangeLocks::new());
        let shared = locks.try_lock(0..4096, LockKind::Shared).unwrap();
        assert!(locks.try_lock(0..8192, LockKind::Shared).is_some());
        assert!(locks.try_lock(4096..8192, LockKind::Exclusive).is_some());
        assert!(locks.try_lock(0..1, LockKind::Exclusive).is_none());
        // A writer waiting behind the reader: a new reader of its range
        // does not get ahead of it.
        let writer = {
            let locks = locks.clone();
            std::thread::spawn(move || {
                let _w = locks.lock(0..4096, LockKind::Exclusive);
            })
        };
        wait_for_requests(&locks, 2);
        assert!(locks.try_lock(1024..2048, LockKind::Shared).is_none());
        assert!(locks.try_lock(8192..9000, LockKind::Shared).is_some());
        drop(shared);
        writer.join().unwrap();
        assert!(locks.try_lock(0..4096, LockKind::Shared).is_some());
    }

    #[test]
    fn shared_overlap_exclusive_does_not() {
        let locks = RangeLocks::new();
        let a = locks.lock(0..4096, LockKind::Shared);
        let b = locks.lock(0..8192, LockKind::Shared);
        assert!(!a.waited() && !b.waited());
        let c = locks.lock(8192..12288, LockKind::Exclusive);
        assert!(!c.waited());
        assert_eq!(locks.len(), 3);
        drop((a, b, c));
        assert!(locks.is_empty());
    }

    #[test]
    fn empty_range_conflicts_with_nothing() {
        let locks = RangeLocks::new();
        let _a = locks.lock(0..u64::MAX, LockKind::Exclusive);
        let b = locks.lock(100..100, LockKind::Exclusive);
        assert!(!b.waited());
    }

    #[test]
    fn exclusive_waits_for_shared() {
        let locks = Arc::new(RangeLocks::new());
        let reader = locks.lock(0..4096, LockKind::Shared);
        let l2 = locks.clone();
        let writer = std::thread::spawn(move || l2.lock(4000..5000, LockKind::Exclusive).waited());
        // Queued behind the reader: it cannot have finished.
        wait_for_requests(&locks, 2);
        assert!(!writer.is_finished());
        drop(reader);
        assert!(writer.join().unwrap());
    }

    #[test]
    fn writer_is_not_starved_by_later_readers() {
        let locks = Arc::new(RangeLocks::new());
        let first_reader = locks.lock(0..4096, LockKind::Shared);
        let l2 = locks.clone();
        let writer = std::thread::spawn(move || {
            let _w = l2.lock(0..4096, LockKind::Exclusive);
        });
        wait_for_requests(&locks, 2);
        let l3 = locks.clone();
        let late_reader = std::thread::spawn(move || l3.lock(0..4096, LockKind::Shared).waited());
        // The late reader queues behind the waiting writer even though it
        // does not conflict with the granted reader.
        wait_for_requests(&locks, 3);
        assert!(!late_reader.is_finished());
        drop(first_reader);
        writer.join().unwrap();
        assert!(late_reader.join().unwrap());
    }

    /// Several threads increment a counter per block with a non-atomic
    /// read-then-write (split by a yield) under exclusive locks of random
    /// ranges, while readers check that what they see under a shared lock
    /// does not change. Any mutual-exclusion bug loses increments.
    #[test]
    fn stress_exclusive_ranges_do_not_lose_updates() {
        const BLOCKS: usize = 16;
        let locks = Arc::new(RangeLocks::new());
        let cells: Arc<Vec<AtomicU64>> = Arc::new((0..BLOCKS).map(|_| AtomicU64::new(0)).collect());
        let expected: Arc<Vec<AtomicU64>> =
            Arc::new((0..BLOCKS).map(|_| AtomicU64::new(0)).collect());
        let threads: Vec<_> = (0..6u64)
            .map(|t| {
                let (locks, cells, expected) = (locks.clone(), cells.clone(), expected.clone());
                std::thread::spawn(move || {
                    let mut seed = t * 7919 + 1;
                    for _ in 0..400 {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let a = (seed >> 33) as usize % BLOCKS;
                        let b = (seed >> 45) as usize % BLOCKS;
                        let (lo, hi) = (a.min(b), a.max(b) + 1);
                        let range = (lo as u64 * 4096)..(hi as u64 * 4096);
                        if t % 3 == 0 {
                            let _g = locks.lock(range, LockKind::Shared);
                            let before: Vec<u64> =
                                (lo..hi).map(|i| cells[i].load(Ordering::Relaxed)).collect();
                            std::thread::yield_now();
                            let after: Vec<u64> =
                                (lo..hi).map(|i| cells[i].load(Ordering::Relaxed)).collect();
                            assert_eq!(before, after, "changed under a shared lock");
                        } else {
                            let _g = locks.lock(range, LockKind::Exclusive);
                            for (i, cell) in cells.iter().enumerate().take(hi).skip(lo) {
                                let v = cell.load(Ordering::Relaxed);
                                std::thread::yield_now();
                                cell.store(v + 1, Ordering::Relaxed);
                                expected[i].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for i in 0..BLOCKS {
            assert_eq!(
                cells[i].load(Ordering::Relaxed),
                expected[i].load(Ordering::Relaxed)
            );
        }
        assert!(locks.is_empty());
    }

    proptest! {
        /// Taken without contention, every non-conflicting set of locks is
        /// granted at once, and the table empties when they are dropped.
        #[test]
        fn disjoint_or_shared_never_wait(
            ranges in proptest::collection::vec((0u64..64, 1u64..8, any::<bool>()), 1..12)
        ) {
            let locks = RangeLocks::new();
            let mut held: Vec<(Range<u64>, LockKind, RangeGuard<'_>)> = Vec::new();
            for (start, len, exclusive) in ranges {
                let range = start..start + len;
                let kind = if exclusive { LockKind::Exclusive } else { LockKind::Shared };
                let conflicts = held.iter().any(|(r, k, _)| {
                    r.start < range.end && range.start < r.end
                        && (*k == LockKind::Exclusive || kind == LockKind::Exclusive)
                });
                if !conflicts {
                    let g = locks.lock(range.clone(), kind);
                    prop_assert!(!g.waited());
                    held.push((range, kind, g));
                }
            }
            prop_assert_eq!(locks.len(), held.len());
            drop(held);
            prop_assert!(locks.is_empty());
        }
    }
}
