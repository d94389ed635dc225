//! Small direct-mode READs that cluster: served through the page cache,
//! with drop-behind.
//!
//! Why: IOR-hard's read phase (and any job where many clients read one
//! shared file in small records side by side) sends small READs from many
//! connections that all fall within a few MiB of each other, each one a
//! separate 48 KiB device read in direct mode. Neither our readahead (one
//! contiguous stream, one READ at a time) nor the device's queue helps
//! them: bench/run `ior-aligned-read` read 544 MiB/s direct against 871
//! through NFS-Ganesha's page cache, with the loop device holding 1.25
//! requests on average (fio, same pattern, local: 8). Read through the
//! page cache, the kernel's readahead turns them into large reads, and the
//! records the other connections ask for next are already there: 984
//! MiB/s in the same run shape (ARCHITECTURE.md).
//!
//! How: each [`DataFile`](crate::DataFile) watches its small concurrent
//! READs (several in flight: a lone reader is the readahead's). After
//! [`MIN_STREAK`] of them in a row each start within [`REACH`] of the
//! furthest one (random READs of a file larger than a few times
//! [`REACH`] almost never do), the file's small READs are a cluster and go
//! through the page cache until [`MIN_STREAK`] in a row land far away (a
//! reader left behind reads direct meanwhile). A clustered READ whose
//! bytes are all cached is read on the connection's task
//! (`preadv2(RWF_NOWAIT)`, `ReadPath::read_cached_now`), the others on a
//! blocking thread, which waits for the device.
//!
//! Bounds: direct mode keeps no data cached, so the cluster drops what it
//! leaves behind: pages more than [`BEHIND`] below the furthest READ are
//! dropped (`POSIX_FADV_DONTNEED`) as the front moves on, and everything
//! it read when it ends (READs far away, or no READ for [`IDLE`]:
//! [`crate::DataPlane::expire_readahead`] sweeps; or the file is closed).
//! At most [`MAX_CLUSTERS`] files of an export are clusters at once.

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::align::{round_down, round_up};
use crate::held::Held;

/// How near the furthest READ a small READ must start to count.
pub(crate) const REACH: u64 = 32 << 20;

/// Small concurrent READs in a row near each other that make a cluster.
pub(crate) const MIN_STREAK: u32 = 16;

/// Page cache a cluster may keep below its furthest READ.
pub(crate) const BEHIND: u64 = 32 << 20;

/// A cluster with no READ for this long ends (its pages are dropped).
pub(crate) const IDLE: Duration = Duration::from_secs(1);

/// Files of one export that may be clusters at once.
pub(crate) const MAX_CLUSTERS: usize = 8;

/// Past the furthest READ, what the kernel's readahead may have read too
/// (dropped with the rest when the cluster ends).
const AHEAD: u64 = 8 << 20;

/// Drops happen in steps of at least this much.
const DROP_STEP: u64 = 4 << 20;

/// Dropped ranges start and end at multiples of this: the kernel drops
/// only folios wholly inside the range, and its readahead makes large
/// folios (up to 2 MiB on x86-64, naturally aligned).
const DROP_ALIGN: u64 = 2 << 20;

/// The cluster state of one file.
#[derive(Debug, Default)]
pub(crate) struct Cluster {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Where the furthest recent small READ ended.
    front: u64,
    /// Small concurrent READs in a row that started within `REACH` of
    /// `front`.
    streak: u32,
    /// Small READs in a row that did not (a cluster ends after
    /// `MIN_STREAK`).
    far: u32,
    /// `Some` while the file is a cluster.
    active: Option<Active>,
}

#[derive(Debug)]
struct Active {
    /// Lowest offset read through the page cache.
    low: u64,
    /// Pages below this are dropped already.
    dropped_to: u64,
    last_read: Instant,
    /// A descriptor of the file, for the sweep that ends an idle cluster.
    fd: OwnedFd,
    /// One of the export's [`MAX_CLUSTERS`], given back on drop.
    _slot: Held,
}

/// What a small READ should do, from [`Cluster::note`].
#[derive(Debug, Default)]
pub(crate) struct Route {
    /// Read through the page cache (else direct).
    pub(crate) cached: bool,
    /// Pages to drop (after the READ).
    pub(crate) drop: Option<Range<u64>>,
    /// The file just became a cluster (register it for the sweep).
    pub(crate) started: bool,
}

impl Cluster {
    /// Whether the file is a cluster now (for tests).
    #[cfg(test)]
    fn is_active(&self) -> bool {
        self.state.lock().active.is_some()
    }

    /// Notes a small READ of `range`; `concurrent`: other READs of the file
    /// were in flight when it began. `slot` gives one of the export's
    /// cluster slots (and `fd` a descriptor of the file) if it may become
    /// one.
    pub(crate) fn note(
        &self,
        range: Range<u64>,
        concurrent: bool,
        slot: impl FnOnce() -> Option<(Held, OwnedFd)>,
    ) -> Route {
        let mut st = self.state.lock();
        let near = range.start.abs_diff(st.front) <= REACH;
        if !near {
            st.far += 1;
            if st.active.is_some() && st.far < MIN_STREAK {
                // A reader left behind (or one stray READ): served direct,
                // and the cluster goes on for the others.
                return Route::default();
            }
            // What the cluster cached reaches its own front, wherever
            // the READ that ends it lands (behind it: a reader starting
            // over).
            let front = std::mem::replace(&mut st.front, range.end);
            st.streak = u32::from(concurrent);
            return Route {
                drop: st.active.take().map(|a| a.cached_range(front)),
                ..Route::default()
            };
        }
        st.far = 0;
        st.front = st.front.max(range.end);
        if concurrent {
            st.streak = st.streak.saturating_add(1);
        }
        let mut started = false;
        if st.active.is_none() && st.streak >= MIN_STREAK {
            if let Some((slot, fd)) = slot() {
                st.active = Some(Active {
                    low: range.start,
                    dropped_to: round_down(range.start, DROP_ALIGN),
                    last_read: Instant::now(),
                    fd,
                    _slot: slot,
                });
                started = true;
            }
        }
        let front = st.front;
        let Some(active) = st.active.as_mut() else {
            return Route::default();
        };
        active.low = active.low.min(range.start);
        active.last_read = Instant::now();
        let behind = round_down(front.saturating_sub(BEHIND), DROP_ALIGN);
        let drop = (behind >= active.dropped_to + DROP_STEP).then(|| {
            let from = active.dropped_to;
            active.dropped_to = behind;
            from..behind
        });
        Route {
            cached: true,
            drop,
            started,
        }
    }

    /// Ends the cluster if it saw no READ for [`IDLE`]: its pages are
    /// dropped here.
    pub(crate) fn expire(&self, now: Instant) {
        let mut st = self.state.lock();
        let idle = st
            .active
            .as_ref()
            .is_some_and(|a| now.duration_since(a.last_read) >= IDLE);
        if !idle {
            return;
        }
        let front = st.front;
        st.streak = 0;
        if let Some(a) = st.active.take() {
            drop(st);
            let range = a.cached_range(front);
            drop_pages(a.fd_ref(), range);
        }
    }
}

impl Drop for Cluster {
    /// The file is closed (the open-file cache let it go) while a cluster:
    /// the sweep can no longer reach it, so its pages are dropped here.
    fn drop(&mut self) {
        let st = self.state.get_mut();
        if let Some(a) = st.active.take() {
            drop_pages(a.fd_ref(), a.cached_range(st.front));
        }
    }
}

impl Active {
    /// What the cluster may have left in the page cache, up to `front`.
    fn cached_range(&self, front: u64) -> Range<u64> {
        let low = round_down(self.low, DROP_ALIGN);
        low..round_up(front.saturating_add(AHEAD), DROP_ALIGN).max(low)
    }

    fn fd_ref(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Drops the clean cached pages of `range` (dirty ones are written back
/// first by the kernel's own writeback, not waited for here).
pub(crate) fn drop_pages(fd: BorrowedFd<'_>, range: Range<u64>) {
    if range.is_empty() {
        return;
    }
    if let Err(e) = dionfs_sys::io::fadvise_dontneed(fd, range.start, range.end - range.start) {
        tracing::debug!(error = %e, "POSIX_FADV_DONTNEED after clustered reads failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn fd() -> OwnedFd {
        tempfile::tempfile().unwrap().into()
    }

    #[test]
    fn concurrent_reads_near_each_other_make_a_cluster_and_drop_behind() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = Cluster::default();
        let rec = 47008u64;
        let mut started = 0;
        let mut dropped = Vec::new();
        for i in 0..4000u64 {
            // Eight readers, each a record apart, as IOR reads.
            let at = (i * 8 + (i * 3) % 8) * rec / 8;
            let r = c.note(at..at + rec, true, || {
                Some((Held::take(&count, MAX_CLUSTERS)?, fd()))
            });
            started += u32::from(r.started);
            if i < u64::from(MIN_STREAK) - 1 {
                assert!(!r.cached, "read {i} before the streak");
            } else {
                assert!(r.cached, "read {i}");
            }
            dropped.extend(r.drop);
        }
        assert_eq!(started, 1);
        assert_eq!(count.load(Ordering::Acquire), 1);
        // Dropped in steps, back to back, never within BEHIND of the front.
        assert!(dropped.len() > 10, "{dropped:?}");
        for w in dropped.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        let front = c.state.lock().front;
        assert!(dropped.last().unwrap().end <= front - BEHIND);
        for d in &dropped {
            assert!(
                d.start % DROP_ALIGN == 0 && d.end % DROP_ALIGN == 0,
                "{d:?}"
            );
        }
        // READs far away are served direct; MIN_STREAK in a row end it,
        // dropping what it cached.
        for i in 1..MIN_STREAK {
            let r = c.note(10 << 30..(10 << 30) + 4096, true, || unreachable!());
            assert!(!r.cached && r.drop.is_none(), "far read {i}");
            assert!(c.is_active());
        }
        let r = c.note(10 << 30..(10 << 30) + 4096, true, || unreachable!());
        assert!(!r.cached);
        let d = r.drop.expect("the cluster's pages");
        assert!(d.start <= dropped[0].start && d.end >= front, "{d:?}");
        assert_eq!(count.load(Ordering::Acquire), 0, "slot given back");
    }

    #[test]
    fn a_cluster_ended_by_reads_behind_it_drops_up_to_its_own_front() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = Cluster::default();
        let rec = 47008u64;
        // Readers side by side up to ~60 MiB.
        for i in 0..1300u64 {
            let at = i * rec;
            c.note(at..at + rec, true, || {
                Some((Held::take(&count, MAX_CLUSTERS)?, fd()))
            });
        }
        assert!(c.is_active());
        let front = c.state.lock().front;
        assert!(front > REACH + AHEAD);
        // Readers starting over at the file's beginning, far behind it:
        // MIN_STREAK of them end the cluster, whose drop reaches past the
        // front it had, not only past where they read.
        let mut drop = None;
        for i in 0..u64::from(MIN_STREAK) {
            let r = c.note(i * 4096..(i + 1) * 4096, true, || None);
            assert!(!r.cached, "far read {i}");
            drop = drop.or(r.drop);
        }
        assert!(!c.is_active());
        let d = drop.expect("the cluster's pages");
        assert!(d.end >= front, "{d:?} stops before the front {front}");
        assert_eq!(count.load(Ordering::Acquire), 0, "slot given back");
    }

    #[test]
    fn random_and_lone_reads_never_cluster() {
        let c = Cluster::default();
        let mut x: u64 = 99;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = ((x >> 33) % (4 << 30)) & !4095;
            let r = c.note(at..at + 4096, true, || {
                Some((Held::take(&Arc::default(), 1)?, fd()))
            });
            assert!(!r.cached && !r.started);
        }
        // Near each other but one at a time: the readahead's, not ours.
        for i in 0..1000u64 {
            let r = c.note(i * 4096..(i + 1) * 4096, false, || unreachable!());
            assert!(!r.cached);
        }
    }

    #[test]
    fn at_most_max_clusters_and_idle_ones_end() {
        let count = Arc::new(AtomicUsize::new(0));
        let files: Vec<Cluster> = (0..MAX_CLUSTERS + 2).map(|_| Cluster::default()).collect();
        for c in &files {
            for i in 0..u64::from(MIN_STREAK) {
                c.note(i * 4096..(i + 1) * 4096, true, || {
                    Some((Held::take(&count, MAX_CLUSTERS)?, fd()))
                });
            }
        }
        let active = files.iter().filter(|c| c.is_active()).count();
        assert_eq!(active, MAX_CLUSTERS);
        files[0].expire(Instant::now());
        assert!(files[0].is_active(), "not idle yet");
        files[0].expire(Instant::now() + IDLE);
        assert!(!files[0].is_active());
        assert_eq!(count.load(Ordering::Acquire), MAX_CLUSTERS - 1);
    }
}
