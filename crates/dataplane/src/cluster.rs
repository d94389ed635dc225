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
//! Readers left behind: the READs of a cluster's connections do not
//! move at one pace (a client's threads wait for a CPU, a READ that
//! misses the cache waits for the device while its neighbours' hit).
//! Pages are kept for the slowest reader seen lately, not only for the
//! front, and a READ anywhere in what the cluster still keeps is served
//! from it: a reader that fell behind then reads from memory and catches
//! up. Until 2026-12-02 pages more than 32 MiB below the front were
//! dropped and READs below that served direct: a reader that fell that
//! far read every record from the device, slower than the others read
//! from memory, and fell further behind, for the rest of the run
//! (bench/run's `ior-hard-read` and `ior-aligned-read` went 0.56-1.51x
//! from one repetition to the next, 7,000-8,000 of 21,800 READs direct
//! in the slow runs; a scratch replay: 373-641 MiB/s with up to 4,367
//! READs direct in 8 runs before, 474-615 with every READ clustered in
//! 13 runs after).
//!
//! Bounds: direct mode keeps no data cached, so the cluster drops what it
//! leaves behind: pages more than [`BEHIND`] below the furthest READ and
//! below the slowest recent one are dropped (`POSIX_FADV_DONTNEED`) as
//! the front moves on, never more than [`MAX_BEHIND`] below the front
//! kept (a reader further behind reads direct), and everything it read
//! when it ends (READs far away, or no READ for [`IDLE`]:
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

/// Page cache a cluster keeps below its furthest READ.
pub(crate) const BEHIND: u64 = 32 << 20;

/// Page cache a cluster may keep below its furthest READ for a reader
/// left behind.
pub(crate) const MAX_BEHIND: u64 = 256 << 20;

/// The slowest recent reader is the lowest start among the last
/// `LOW_WINDOW` to `2 * LOW_WINDOW` READs.
const LOW_WINDOW: u32 = 256;

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
    /// The lowest start of this window's near READs, and of the window
    /// before (`LOW_WINDOW`).
    low: Low,
    /// `Some` while the file is a cluster.
    active: Option<Active>,
}

/// Where the slowest recent READ started, over two windows of
/// [`LOW_WINDOW`] READs: this one and the one before.
#[derive(Debug)]
struct Low {
    now: u64,
    before: u64,
    reads: u32,
}

impl Default for Low {
    fn default() -> Self {
        Low {
            now: u64::MAX,
            before: u64::MAX,
            reads: 0,
        }
    }
}

impl Low {
    fn note(&mut self, start: u64) {
        self.now = self.now.min(start);
        self.reads += 1;
        if self.reads == LOW_WINDOW {
            self.before = std::mem::replace(&mut self.now, u64::MAX);
            self.reads = 0;
        }
    }

    fn lowest(&self) -> u64 {
        self.now.min(self.before)
    }
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
        // Near the front; or, in a cluster, anywhere above what it
        // dropped (a reader left behind).
        let near = range.start.abs_diff(st.front) <= REACH
            || st.active.as_ref().is_some_and(|a| {
                range.start >= a.dropped_to && range.start <= st.front.saturating_add(REACH)
            });
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
            st.low = Low::default();
            return Route {
                drop: st.active.take().map(|a| a.cached_range(front)),
                ..Route::default()
            };
        }
        st.far = 0;
        st.front = st.front.max(range.end);
        st.low.note(range.start);
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
        let (front, slowest) = (st.front, st.low.lowest());
        let Some(active) = st.active.as_mut() else {
            return Route::default();
        };
        active.low = active.low.min(range.start);
        active.last_read = Instant::now();
        let keep = front
            .saturating_sub(BEHIND)
            .min(slowest)
            .max(front.saturating_sub(MAX_BEHIND));
        let behind = round_down(keep, DROP_ALIGN);
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
        st.low = Low::default();
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

    /// IOR-hard's record size.
    const IOR_REC: u64 = 47008;

    /// Where record `i` of `reader` starts, one of eight reading
    /// [`IOR_REC`]-byte records side by side (IOR's shape).
    fn ior_at(reader: u64, i: u64) -> u64 {
        (i * 8 + reader) * IOR_REC
    }

    /// Record `i` of `reader` read: where it starts and its route.
    fn ior_read(c: &Cluster, count: &Arc<AtomicUsize>, reader: u64, i: u64) -> (u64, Route) {
        let at = ior_at(reader, i);
        let r = c.note(at..at + IOR_REC, true, || {
            Some((Held::take(count, MAX_CLUSTERS)?, fd()))
        });
        (at, r)
    }

    #[test]
    fn a_reader_left_behind_reads_from_what_the_cluster_keeps_for_it() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = Cluster::default();
        let mut dropped = Vec::new();
        // Reader 0 reads one record while the other seven read two
        // each: 300 records (113 MB) behind by the end, more than BEHIND
        // but less than MAX_BEHIND.
        let (mut slow, mut fast) = (0u64, 0u64);
        for _ in 0..300 {
            let (at, r) = ior_read(&c, &count, 0, slow);
            assert!(
                slow < 2 || r.cached,
                "the reader behind, record {slow} at {at}"
            );
            dropped.extend(r.drop);
            // Nothing it reads next is dropped.
            let next = ior_at(0, slow + 1);
            assert!(
                dropped.iter().all(|d| d.end <= next),
                "{dropped:?} past {next}"
            );
            slow += 1;
            for _ in 0..2 {
                for reader in 1..8 {
                    let (_, r) = ior_read(&c, &count, reader, fast);
                    dropped.extend(r.drop);
                }
                fast += 1;
            }
        }
        let front = c.state.lock().front;
        assert!(
            front - ior_at(0, slow) > BEHIND + (64 << 20),
            "{front} {slow}"
        );
        // Then it catches up, and the pages below it go.
        while slow < fast {
            let (_, r) = ior_read(&c, &count, 0, slow);
            assert!(r.cached);
            dropped.extend(r.drop);
            slow += 1;
        }
        for _ in 0..(2 * LOW_WINDOW) {
            for reader in 0..8 {
                let (_, r) = ior_read(&c, &count, reader, fast);
                dropped.extend(r.drop);
            }
            fast += 1;
        }
        let front = c.state.lock().front;
        let end = dropped.last().expect("drops").end;
        assert!(
            end + BEHIND + DROP_STEP + DROP_ALIGN >= front,
            "kept {end}..{front}"
        );
        assert!(c.is_active());
    }

    #[test]
    fn readers_just_behind_the_read_that_made_the_cluster_read_cached() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = Cluster::default();
        // Seven readers make the cluster 4 MiB into the file...
        for i in 0..u64::from(MIN_STREAK) {
            let at = (4 << 20) + i * IOR_REC;
            c.note(at..at + IOR_REC, true, || {
                Some((Held::take(&count, MAX_CLUSTERS)?, fd()))
            });
        }
        assert!(c.is_active());
        // ...and the eighth, a few records behind, below the 2 MiB block
        // it started in, reads through the page cache too.
        let at = (4 << 20) - 3 * IOR_REC;
        assert!(c.note(at..at + IOR_REC, true, || None).cached);
    }

    #[test]
    fn a_reader_further_behind_than_max_behind_reads_direct() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = Cluster::default();
        let mut dropped = Vec::new();
        // Reader 0 stops at record 10 while the others go on, reading
        // one record there now and then.
        for fast in 0..3000u64 {
            for reader in 1..8 {
                let (_, r) = ior_read(&c, &count, reader, fast);
                dropped.extend(r.drop);
            }
            if fast % 50 == 0 {
                let (at, r) = ior_read(&c, &count, 0, 10);
                let front = c.state.lock().front;
                if front > at + MAX_BEHIND + DROP_STEP + DROP_ALIGN {
                    assert!(!r.cached, "{at} is {} below the front", front - at);
                }
                dropped.extend(r.drop);
            }
        }
        // What is kept reaches at most MAX_BEHIND (and a drop step) down.
        let front = c.state.lock().front;
        let end = dropped.last().expect("drops").end;
        assert!(
            front - end <= MAX_BEHIND + DROP_STEP + DROP_ALIGN,
            "kept {end}..{front}"
        );
        assert!(c.is_active(), "one reader behind does not end the cluster");
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
