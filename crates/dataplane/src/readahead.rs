//! Readahead for sequential direct reads.
//!
//! Why: a direct READ costs one device read, and a client with one READ in
//! flight (`nfs-cp`, `dd` through some clients) waits for each before
//! asking for the next, so it reads at the latency of one device read per
//! call instead of at device speed. A client with several in flight (the
//! Linux client's readahead, `fio --iodepth`) does no better than half
//! of them at the device: each READ's reply then waits its turn on the
//! connection, and the client asks for the next range only once it has
//! it (1 MiB READs at qd 8: 3.4-4.3 at the loop device on average, where
//! local `fio --direct=1` at the same depth keeps 6.1). Buffered and
//! `RWF_DONTCACHE` reads get the kernel's readahead; `O_DIRECT` gets none,
//! so the data plane does its own, for the direct path only.
//!
//! How: each [`DataFile`] (one per inode, server-wide) has a [`Readahead`]
//! that watches the READs of the file. When [`MIN_STREAK`] READs in a row
//! each start where the previous one ended ([`MIN_CONCURRENT_STREAK`] when
//! other READs of the file are in flight: a random READ seldom lands next
//! to the one before), the
//! READ hands back [`crate::Prefetch`]es for the next chunks: aligned,
//! `max_transfer`-sized ranges past the end of the stream and past every
//! READ of it in flight, so that no block is read twice. READs in flight
//! together end, and may even begin, out of order: while others are in
//! flight, or once the stream is established, a READ within
//! [`NEAR_READS`] of its own lengths of the stream's end continues it, one
//! that ends behind the end is a late READ of it (neither a step nor a
//! break), and the chunks up to [`LATE_CHUNKS`] behind the READs in flight
//! are kept for late READs. A file follows up to [`MAX_STREAMS`] streams
//! at once, each with its own chunks: clients reading their own parts of
//! one file side by side (8 connections reading an eighth of a file each,
//! among 8 others reading it at random: 1,498-1,499 -> 1,741-1,767 MiB/s,
//! scratch `mix.sh`, the `mixed-16` job's shape). A READ that continues
//! none starts a candidate in the place of the least recently moved one,
//! streams last: random READs pass through the candidates without pushing
//! out a stream, and a stream's first READ, if the client's next is
//! already in flight right after it, outlasts theirs. A stream prefetches
//! only while its READs return at least half of the bytes it moves over
//! ([`MIN_DENSITY`]): a strided reader, each READ near the one before but
//! one record in eight read (each of IOR's connections), would use an
//! eighth of every chunk (bench/run `ior-hard-read` over v4.0: 0.3-0.9 GB
//! prefetched per GB read, nearly all discarded; now none). The server runs
//! each on a blocking thread after the reply ([`crate::Prefetch::run`]); the
//! dataplane stays synchronous and never does readahead I/O on a READ's
//! thread. The window of chunks kept ahead grows 1 -> 2 -> 4 -> 8 while
//! READs hit. A READ covered by prefetched chunks is served from them: from the
//! chunk's own buffer without a copy when the READ ends where the chunk
//! ends (the usual case: a client reading `rtmax` at a time), else by
//! copying into the READ's buffer. A READ that needs a chunk still being
//! read waits for it instead of reading the same blocks again: on the
//! connection's task ([`Reading::serve_ready`], [`Reading::chunk_read`]),
//! or on a blocking thread when it came there (a 1 MiB stream at qd 8:
//! 0.30 against 0.32-0.36 s of server CPU per GiB).
//!
//! Bounds: a chunk's buffer comes from the export's pool, only if one is
//! free right now ([`crate::BufferPool::try_get`]): readahead never waits
//! for, or takes the last, buffers that requests need. At most
//! [`MAX_WINDOW`] chunks per stream and a quarter of the pool per export are
//! held by readahead (the export's `held` count). Chunks unused for
//! [`MAX_AGE`] are dropped (on the file's next READ, or by
//! [`crate::DataPlane::expire_readahead`], which the server calls
//! periodically); a READ that continues no stream while no other READ of
//! the file is in flight (the one client moved) drops them all, and a
//! stream replaced drops its own, so the pool never stays drained by a
//! reader that went away.
//!
//! Coherence: a READ must never see data older than a WRITE or size change
//! that completed before the READ started (RFC 1813 gives no guarantee for
//! ones that overlap in time). Every write path and `DataFile::truncate`
//! call [`Readahead::invalidate`] on the range they change *while holding
//! the exclusive range lock* of that range, and a prefetch reads *and*
//! publishes its chunk while holding the shared range lock of the chunk.
//! The cases:
//! - Prefetch read before the write: it published the chunk before
//!   releasing its shared lock, so before the writer got its exclusive
//!   lock; the writer's invalidate then removes it.
//! - Prefetch read after the write: it took the shared lock after the
//!   writer released its exclusive one, so it read the new data.
//! - A prefetch planned but not yet running (queued, no lock) reads later,
//!   under the lock, so after any write that already holds it: fresh.
//! - A READ that took a chunk before the writer's invalidate overlaps that
//!   write in time; either content is allowed. A READ that starts after the
//!   WRITE replied finds no chunk from before the write (removed under the
//!   writer's lock, before its reply).
//! - Truncate invalidates the whole file under the whole-file lock. Only
//!   chunks that lie wholly below the file size are planned, and a chunk
//!   read short (the file shrank meanwhile) is dropped, so a chunk never
//!   stands for bytes past the end of the file.
//! - Changes made behind the server's back (local writers on the exported
//!   directory) take no range lock; a chunk prefetched before one can be
//!   served for at most [`MAX_AGE`]. (Direct reads racing a local buffered
//!   writer are no more coherent without readahead.)

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::counters::Counters;
use crate::held::Held;
use crate::pool::PooledBuf;

/// Most chunks one stream keeps prefetched or being prefetched; the window
/// grows 1 -> 2 -> 4 -> 8 chunks (8: a client with 8 READs in flight keeps
/// the device about as busy as local `fio` at that depth).
pub(crate) const MAX_WINDOW: usize = 8;

/// Chunks behind the READs in flight kept for READs of the stream that
/// are late.
const LATE_CHUNKS: u64 = 4;

/// How many of its own lengths from the end of the stream a READ may start
/// and still continue it: READs in flight together end out of order.
const NEAR_READS: u64 = 16;

/// Contiguous READs that make a stream when other READs of the file are
/// in flight, where a READ within [`NEAR_READS`] of the stream's end
/// counts: random READs almost never make four in a row.
const MIN_CONCURRENT_STREAK: u32 = 4;

/// Contiguous READs that make a sequential stream. Random reads are almost
/// never contiguous twice in a row.
const MIN_STREAK: u32 = 2;

/// A stream prefetches only while its READs returned at least
/// 1/`MIN_DENSITY` of the bytes it moved over: a strided reader (IOR's
/// connections, each reading one record in eight) moves a stream on with
/// READs near its end, but would use an eighth of every chunk.
const MIN_DENSITY: u64 = 2;

/// The span over which a stream's density is judged: past it, what it
/// read and moved over count half, so a reader that turns strided stops
/// prefetching within a few of these.
const DENSITY_SPAN: u64 = 64 << 20;

/// Streams (and candidates) followed per file: clients reading their own
/// parts of one file side by side each get their own, with room left for
/// the random READs among them to start candidates without pushing out a
/// stream.
const MAX_STREAMS: usize = 16;

/// Prefetched data unused this long is dropped and its buffer returned.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// The readahead state of one file; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Readahead {
    state: Mutex<State>,
    /// Signalled whenever a running prefetch ends (or is cancelled), for
    /// READs waiting for its chunk.
    finished: Condvar,
    /// The same, for READs waiting on an async task.
    chunk_read: tokio::sync::Notify,
    /// Whether a data plane already sweeps this file for old chunks.
    registered: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// The sequential streams seen in the file's READs, and candidates
    /// (at most [`MAX_STREAMS`]).
    streams: Vec<Stream>,
    /// The ranges of the READs of this file between `begin_read` and their
    /// end (unordered; one entry per READ).
    in_flight: Vec<Range<u64>>,
    /// Prefetched or planned chunks of every stream, sorted by start, not
    /// overlapping.
    chunks: Vec<Chunk>,
    next_id: u64,
    /// Counts the READs that moved a stream: the least recently moved
    /// stream is the one a new one replaces.
    clock: u64,
}

/// One sequential stream of READs of a file (a client reading its part of
/// it), or a candidate for one.
#[derive(Debug)]
struct Stream {
    id: u64,
    /// Where its last READ ended (the furthest, with READs in flight).
    next: u64,
    /// How many READs in a row continued it.
    streak: u32,
    /// Chunks to keep ahead of it; 0 until it is a stream.
    window: usize,
    /// [`State::clock`] when a READ last moved it.
    used: u64,
    /// Its first READ was followed by one in flight that starts where it
    /// ended (see [`State::start_stream`]).
    followed: bool,
    /// Where the span its density is judged over begins (its first READ's
    /// start, moved up as the span passes [`DENSITY_SPAN`]).
    from: u64,
    /// Bytes its READs returned within that span.
    covered: u64,
}

impl Stream {
    /// A READ of `len` bytes belongs to the stream (whether it moved it
    /// or was late for it).
    fn cover(&mut self, len: u64) {
        self.covered = self.covered.saturating_add(len);
        let span = self.next.saturating_sub(self.from);
        if span > DENSITY_SPAN {
            self.from = self.next - span / 2;
            self.covered /= 2;
        }
    }

    /// Whether its READs read enough of what it moved over to prefetch
    /// (see [`MIN_DENSITY`]).
    fn dense(&self) -> bool {
        let span = self.next.saturating_sub(self.from);
        self.covered.saturating_mul(MIN_DENSITY) >= span
    }
}

#[derive(Debug)]
struct Chunk {
    id: u64,
    /// The [`Stream`] it was planned for.
    stream: u64,
    range: Range<u64>,
    /// When it was planned or, once ready, when its data arrived.
    since: Instant,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Planned; its [`crate::Prefetch`] holds the buffer and has not started.
    Queued,
    /// Its [`crate::Prefetch`] is reading (or waiting for the range lock).
    Running,
    /// The chunk's data, whole.
    Ready(Prefetched),
}

/// A buffer of prefetched data. Dropped without being served, it counts as
/// a discard.
#[derive(Debug)]
struct Prefetched {
    /// `Some` until a READ takes it.
    buf: Option<PooledBuf>,
    counters: Arc<Counters>,
    _held: Held,
}

impl Drop for Prefetched {
    fn drop(&mut self) {
        if self.buf.is_some() {
            Counters::bump(&self.counters.readahead_discards);
        }
    }
}

/// What [`Reading::serve_ready`] found.
pub(crate) enum Lookup {
    Served(Served),
    /// A chunk the READ needs is being read.
    Running,
    /// The chunks do not cover the READ (or one it needs is only queued).
    Miss,
    /// No chunk holds any of its first bytes: it is not a READ of a stream
    /// with chunks (only from [`Reading::serve_ready`]).
    Elsewhere,
}

/// Where a READ served from prefetched chunks finds its bytes.
pub(crate) enum Served {
    /// A chunk's own buffer: file offset `start` is at its byte 0, `len`
    /// bytes are valid.
    Chunk {
        buf: PooledBuf,
        start: u64,
        len: usize,
    },
    /// Copied into the READ's own buffer, from its byte 0.
    Copied,
}

/// A READ in progress on a file (see [`Readahead::begin_read`]).
pub(crate) struct Reading<'a> {
    readahead: &'a Arc<Readahead>,
    /// Whether another READ of the file was in flight when this one began.
    concurrent: bool,
    /// What it reads.
    range: Range<u64>,
}

/// What [`Reading::advance`] needs to plan chunks.
pub(crate) struct Planning<'a> {
    /// The file's direct read alignment.
    pub align: u64,
    /// Length of a chunk (aligned, at most a pool buffer's data length).
    pub chunk_len: u64,
    /// The file size now (asked only when planning).
    pub size: &'a dyn Fn() -> u64,
    /// Takes a buffer and a unit of the readahead bound, or none.
    pub take_buffer: &'a mut dyn FnMut() -> Option<(PooledBuf, Held)>,
}

/// A chunk [`Reading::advance`] planned: the read path makes it a
/// [`crate::Prefetch`] at once (`Prefetch::planned`), which reads it or,
/// dropped, cancels it.
pub(crate) struct Planned {
    pub(crate) id: u64,
    pub(crate) range: Range<u64>,
    /// The pool buffer to read it into.
    pub(crate) buf: PooledBuf,
    /// Its unit of the export's readahead bound.
    pub(crate) held: Held,
}

impl Readahead {
    /// Marks a READ of the file in flight until the returned value drops.
    pub(crate) fn begin_read(self: &Arc<Self>, range: Range<u64>) -> Reading<'_> {
        let mut st = self.state.lock();
        st.in_flight.push(range.clone());
        Reading {
            readahead: self,
            concurrent: st.in_flight.len() > 1,
            range,
        }
    }

    /// Drops prefetched data overlapping `range`. Call it while holding the
    /// exclusive range lock of every byte the caller changes (see the
    /// module documentation for why that is enough).
    pub(crate) fn invalidate(&self, range: Range<u64>) {
        let mut st = self.state.lock();
        st.chunks.retain(|c| {
            let overlaps = c.range.start < range.end && range.start < c.range.end;
            !(overlaps && matches!(c.stage, Stage::Ready(_)))
        });
    }

    /// Drops ready chunks older than [`MAX_AGE`].
    pub(crate) fn expire(&self, now: Instant) {
        self.state.lock().expire(now);
    }

    /// Whether this is the first call (the caller should then sweep the
    /// file for old chunks).
    pub(crate) fn register(&self) -> bool {
        !self.registered.swap(true, Ordering::AcqRel)
    }

    /// A prefetch of chunk `id` begins: whether it is still queued (it is
    /// running from now on) rather than cancelled.
    pub(crate) fn start_chunk(&self, id: u64) -> bool {
        let mut st = self.state.lock();
        match st.chunks.iter_mut().find(|c| c.id == id) {
            Some(c) if matches!(c.stage, Stage::Queued) => {
                c.stage = Stage::Running;
                true
            }
            // Cancelled (a READ got there first, the stream stopped).
            _ => false,
        }
    }

    /// The prefetch of chunk `id` read it, whole, into `buf`: ready for
    /// the READs to come, unless the stream stopped meanwhile.
    pub(crate) fn publish_chunk(
        &self,
        id: u64,
        buf: Option<PooledBuf>,
        counters: Arc<Counters>,
        held: Held,
    ) {
        let data = Prefetched {
            buf,
            counters,
            _held: held,
        };
        let mut st = self.state.lock();
        match st.chunks.iter_mut().find(|c| c.id == id) {
            Some(c) => {
                c.stage = Stage::Ready(data);
                c.since = Instant::now();
            }
            // The stream stopped while it read: `data` drops, a discard.
            None => drop(data),
        }
        drop(st);
        self.chunk_ended();
    }

    /// Removes the chunk `id` unless it is ready, and wakes its waiters.
    pub(crate) fn cancel(&self, id: u64) {
        let mut st = self.state.lock();
        st.chunks
            .retain(|c| c.id != id || matches!(c.stage, Stage::Ready(_)));
        drop(st);
        self.chunk_ended();
    }

    /// Wakes the READs waiting for a running chunk, on blocking threads
    /// and on tasks: it was read, or cancelled.
    fn chunk_ended(&self) {
        self.finished.notify_all();
        self.chunk_read.notify_waiters();
    }

    /// Number of chunks planned, running or ready (for tests).
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.state.lock().chunks.len()
    }
}

impl State {
    fn expire(&mut self, now: Instant) {
        self.chunks.retain(|c| {
            !matches!(c.stage, Stage::Ready(_)) || now.duration_since(c.since) < MAX_AGE
        });
    }

    /// Whether a READ of `count` bytes at `offset` belongs to a stream
    /// that prefetches (for counting misses).
    fn near_a_stream(&self, offset: u64, count: usize) -> bool {
        let near_len = (count as u64).saturating_mul(NEAR_READS);
        self.streams
            .iter()
            .any(|s| s.window > 0 && s.next.abs_diff(offset) <= near_len)
    }

    /// Starts a candidate stream at `end` for the READ `this`, which
    /// continues none. With no other READ of the file in flight, the one
    /// client moved: every stream and chunk goes (queued and running
    /// prefetches find their chunk gone and drop their data). Otherwise
    /// the candidate replaces the least recently moved candidate, or
    /// stream if all are streams, with that one's chunks.
    fn start_stream(&mut self, end: u64, concurrent: bool, this: &Range<u64>) {
        if !concurrent {
            self.streams.clear();
            self.chunks.clear();
        } else if self.streams.len() >= MAX_STREAMS {
            let victim = self
                .streams
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| {
                    let streak = s.streak + u32::from(s.followed);
                    (s.window > 0, streak.min(MIN_CONCURRENT_STREAK), s.used)
                })
                .map(|(i, _)| i)
                .unwrap_or(0);
            let gone = self.streams.swap_remove(victim).id;
            self.chunks.retain(|c| c.stream != gone);
        }
        // A READ in flight that starts where this one ended is the next of
        // a client with several in flight; random READs are never followed
        // so, and among them such a stream is not the first replaced.
        let followed = self.in_flight.iter().any(|r| r != this && r.start == end);
        let id = self.next_id;
        self.next_id += 1;
        self.streams.push(Stream {
            id,
            next: end,
            streak: 1,
            followed,
            window: 0,
            used: self.clock,
            from: this.start,
            covered: end.saturating_sub(this.start),
        });
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut st = self.readahead.state.lock();
        if let Some(i) = st.in_flight.iter().position(|r| *r == self.range) {
            st.in_flight.swap_remove(i);
        }
    }
}

impl Reading<'_> {
    /// Whether another READ of the file was in flight when this one began.
    pub(crate) fn concurrent(&self) -> bool {
        self.concurrent
    }

    /// Whether the file has prefetched chunks (ready, running or queued):
    /// a READ that must not wait for one takes the blocking path then.
    pub(crate) fn has_chunks(&self) -> bool {
        !self.readahead.state.lock().chunks.is_empty()
    }

    /// Serves `[offset, offset + count)` from prefetched chunks if they
    /// cover it, waiting for running prefetches it needs; copies into `buf`
    /// unless one chunk ends exactly where the READ does. `None`: read it
    /// from the device (a queued prefetch of its range is cancelled, so the
    /// blocks are not read twice).
    pub(crate) fn serve(
        &self,
        offset: u64,
        count: usize,
        buf: &mut [u8],
        counters: &Counters,
    ) -> Option<Served> {
        match self.serve_from_chunks(offset, count, buf, counters, true) {
            Lookup::Served(served) => Some(served),
            Lookup::Running | Lookup::Miss | Lookup::Elsewhere => None,
        }
    }

    /// [`Reading::serve`] without blocking: only from chunks already read.
    /// [`Lookup::Running`] if a chunk it needs is being read (wait for
    /// [`Reading::chunk_read`] and look again), [`Lookup::Miss`] if they do
    /// not cover it (nothing counted, no chunk touched: the caller serves
    /// it with [`Reading::serve`], where it may wait or read),
    /// [`Lookup::Elsewhere`] if no chunk has any of it (read it as if the
    /// file had none).
    pub(crate) fn serve_ready(
        &self,
        offset: u64,
        count: usize,
        buf: &mut [u8],
        counters: &Counters,
    ) -> Lookup {
        self.serve_from_chunks(offset, count, buf, counters, false)
    }

    /// Notified whenever a running prefetch of the file ends (or is
    /// cancelled): for READs waiting on a task for [`Lookup::Running`].
    pub(crate) fn chunk_read(&self) -> &tokio::sync::Notify {
        &self.readahead.chunk_read
    }

    fn serve_from_chunks(
        &self,
        offset: u64,
        count: usize,
        buf: &mut [u8],
        counters: &Counters,
        wait: bool,
    ) -> Lookup {
        let end = offset + count as u64;
        let mut st = self.readahead.state.lock();
        let mut waited = false;
        let miss = |st: &State| {
            if wait && st.near_a_stream(offset, count) {
                Counters::bump(&counters.readahead_misses);
            }
            Lookup::Miss
        };
        if count == 0 {
            return Lookup::Miss;
        }
        loop {
            st.expire(Instant::now());
            // The chunks covering [offset, end) back to back, if any.
            let mut pos = offset;
            let mut first = None;
            let mut last = 0;
            let mut running = false;
            for (i, c) in st.chunks.iter().enumerate() {
                if c.range.end <= pos {
                    continue;
                }
                if c.range.start > pos {
                    break;
                }
                match c.stage {
                    Stage::Queued if !wait => return Lookup::Miss,
                    Stage::Running if !wait => return Lookup::Running,
                    Stage::Queued => {
                        // Its prefetch finds the chunk gone and ends; no
                        // one waits for a chunk that is not running.
                        st.chunks.remove(i);
                        return miss(&st);
                    }
                    Stage::Running => running = true,
                    Stage::Ready(_) => {}
                }
                first.get_or_insert(i);
                last = i;
                pos = c.range.end;
                if pos >= end {
                    break;
                }
            }
            let Some(first) = first else {
                // No chunk has any of it: another stream's READ, or a
                // random one.
                return match wait {
                    true => miss(&st),
                    false => Lookup::Elsewhere,
                };
            };
            if pos < end {
                return miss(&st);
            }
            if running {
                waited = true;
                self.readahead.finished.wait(&mut st);
                continue;
            }
            Counters::bump(&counters.readahead_hits);
            if waited {
                Counters::bump(&counters.readahead_waits);
            }
            if first == last && st.chunks[first].range.end == end {
                let chunk = st.chunks.remove(first);
                let Stage::Ready(mut data) = chunk.stage else {
                    unreachable!("checked ready above");
                };
                let len = (chunk.range.end - chunk.range.start) as usize;
                // `Some` while the chunk is in the state.
                let Some(chunk_buf) = data.buf.take() else {
                    return Lookup::Miss;
                };
                return Lookup::Served(Served::Chunk {
                    buf: chunk_buf,
                    start: chunk.range.start,
                    len,
                });
            }
            for c in &st.chunks[first..=last] {
                let Stage::Ready(data) = &c.stage else {
                    unreachable!("checked ready above");
                };
                let from = offset.max(c.range.start);
                let to = end.min(c.range.end);
                let src = (from - c.range.start) as usize..(to - c.range.start) as usize;
                let dst = (from - offset) as usize..(to - offset) as usize;
                if let Some(chunk_buf) = &data.buf {
                    buf[dst].copy_from_slice(&chunk_buf[src]);
                }
            }
            // Chunks this READ read to their end are used up (served, so
            // their buffers go back uncounted as discards).
            st.chunks.retain_mut(|c| {
                let used = c.range.end <= end && c.range.end > offset;
                if let (true, Stage::Ready(data)) = (used, &mut c.stage) {
                    data.buf = None;
                }
                !used
            });
            return Lookup::Served(Served::Copied);
        }
    }

    /// Records that this READ returned `[offset, end)` and, when the file
    /// is being read as one sequential stream by one READ at a time, plans
    /// the chunks to prefetch next.
    pub(crate) fn advance(
        &self,
        offset: u64,
        end: u64,
        hit: bool,
        plan: Planning<'_>,
    ) -> Vec<Planned> {
        let mut st = self.readahead.state.lock();
        if end <= offset {
            // Nothing returned (end of file): not a step of any stream.
            return Vec::new();
        }
        let concurrent = self.concurrent || st.in_flight.len() > 1;
        st.clock += 1;
        let clock = st.clock;
        // READs in flight together end in any order, and the server may
        // even begin them in another order than they came. So while others
        // are in flight, or once a stream is established, a READ that
        // starts within a few READs' length of the end of the stream
        // continues it, and one that ends behind it is a late READ of the
        // stream, neither a step nor a break. A client reading at random
        // with one READ at a time never gets there: only exactly
        // contiguous READs start a stream.
        let near_len = (end - offset).saturating_mul(NEAR_READS);
        let tolerant = |s: &Stream| concurrent || s.streak >= MIN_CONCURRENT_STREAK;
        let late = |s: &Stream| tolerant(s) && end <= s.next && s.next - end <= near_len;
        let near = |s: &Stream| {
            tolerant(s)
                && offset <= s.next.saturating_add(near_len)
                && s.next <= offset.saturating_add(near_len)
        };
        // The stream it starts exactly after, else one it is late for,
        // else the nearest one it is near.
        let exact = st.streams.iter().position(|s| s.next == offset);
        let late_for = || st.streams.iter().position(late);
        let nearest = || {
            st.streams
                .iter()
                .enumerate()
                .filter(|(_, s)| near(s))
                .min_by_key(|(_, s)| s.next.abs_diff(offset))
                .map(|(i, _)| i)
        };
        let i = match exact {
            Some(i) => i,
            None => {
                if let Some(i) = late_for() {
                    st.streams[i].used = clock;
                    st.streams[i].cover(end - offset);
                    return Vec::new();
                }
                match nearest() {
                    Some(i) => i,
                    None => {
                        st.start_stream(end, concurrent, &self.range);
                        return Vec::new();
                    }
                }
            }
        };
        let min_streak = if concurrent {
            MIN_CONCURRENT_STREAK
        } else {
            MIN_STREAK
        };
        let stream = &mut st.streams[i];
        stream.streak = stream.streak.saturating_add(1);
        stream.next = stream.next.max(end);
        stream.used = clock;
        stream.cover(end - offset);
        if stream.streak < min_streak || !stream.dense() {
            // Several READs in flight keep the device busy by themselves,
            // and their order is not the stream's.
            return Vec::new();
        }
        stream.window = match stream.window {
            0 => 1,
            w if hit => (w * 2).min(MAX_WINDOW),
            w => w,
        };
        let (sid, window) = (stream.id, stream.window);
        // The READs in flight of this stream: near this READ's end (other
        // streams of the file are elsewhere).
        let of_stream = |r: &Range<u64>| {
            r.end.saturating_add(near_len) >= end && r.start <= end.saturating_add(near_len)
        };
        // Chunks behind the stream will not be read again: behind this
        // READ and every other one of it in flight.
        let behind = st
            .in_flight
            .iter()
            .filter(|r| **r != self.range && of_stream(r))
            .map(|r| r.start)
            .fold(end, u64::min);
        // The server may begin READs in another order than they came, so
        // a few chunks behind may still have READs coming for them.
        let keep_from = behind.saturating_sub(LATE_CHUNKS * plan.chunk_len);
        st.chunks
            .retain(|c| c.stream != sid || c.range.end > keep_from);
        st.expire(Instant::now());
        // Past what READs in flight of the stream already read.
        let asked = st
            .in_flight
            .iter()
            .filter(|r| of_stream(r))
            .map(|r| r.end)
            .fold(end, u64::max);
        let mut start = crate::align::round_down(asked, plan.align);
        let mut held = 0;
        for c in st.chunks.iter().filter(|c| c.stream == sid) {
            start = start.max(c.range.end);
            held += 1;
        }
        let mut planned = Vec::new();
        let size = (plan.size)();
        while held < window && start + plan.chunk_len <= size {
            let range = start..start + plan.chunk_len;
            // Sorted by start; a chunk of another stream there (the
            // streams met) ends the planning.
            let at = st.chunks.partition_point(|c| c.range.start < range.start);
            let clear_before = at == 0 || st.chunks[at - 1].range.end <= range.start;
            let clear_after = st.chunks.get(at).is_none_or(|c| c.range.start >= range.end);
            if !(clear_before && clear_after) {
                break;
            }
            let Some((buf, unit)) = (plan.take_buffer)() else {
                break;
            };
            let id = st.next_id;
            st.next_id += 1;
            st.chunks.insert(
                at,
                Chunk {
                    id,
                    stream: sid,
                    range: range.clone(),
                    since: Instant::now(),
                    stage: Stage::Queued,
                },
            );
            planned.push(Planned {
                id,
                range,
                buf,
                held: unit,
            });
            start += plan.chunk_len;
            held += 1;
        }
        drop(st);
        planned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataFile, DataPlane, Mode, Prefetch, Stable};
    use std::sync::atomic::AtomicU64;

    const CHUNK: usize = 64 << 10;

    fn plane(buffers: usize) -> DataPlane {
        plane_with(buffers, CHUNK)
    }

    /// READs of `BIG` are not small ones, which cluster when many are in
    /// flight (`cluster.rs`).
    const BIG: usize = 128 << 10;

    fn plane_with(buffers: usize, max_transfer: usize) -> DataPlane {
        crate::testing::plane(Mode::Direct, Mode::Direct, max_transfer, buffers)
    }

    /// A temp file with an `O_DIRECT` descriptor, or `None` where the temp
    /// directory cannot do direct I/O.
    fn direct_file() -> Option<(tempfile::NamedTempFile, DataFile)> {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let file = crate::testing::open_data_file(tmp.path());
        if !file.is_direct_capable() {
            println!("skipped: temp dir has no direct I/O");
            return None;
        }
        Some((tmp, file))
    }

    /// Writes `data` in WRITEs of at most `CHUNK` bytes.
    fn write(plane: &DataPlane, file: &DataFile, offset: u64, data: &[u8]) {
        for (i, piece) in data.chunks(CHUNK).enumerate() {
            let buf = plane.write_pool().get_blocking().unwrap();
            let at = offset + (i * CHUNK) as u64;
            let mut wb = plane.write_buffer(file, buf, at, piece.len()).unwrap();
            wb.payload_mut().copy_from_slice(piece);
            plane.write(file, wb, Stable::Unstable).unwrap();
        }
    }

    /// Reads like the server does, running the planned prefetches at once
    /// (`inline`) or leaving them to the caller.
    fn read(
        plane: &DataPlane,
        file: &DataFile,
        offset: u64,
        count: usize,
    ) -> (Vec<u8>, Vec<Prefetch>) {
        let buf = plane.read_pool().get_blocking().unwrap();
        let mut data = plane.read(file, buf, offset, count as u32).unwrap();
        (data.data().to_vec(), data.take_prefetch())
    }

    fn read_inline(plane: &DataPlane, file: &DataFile, offset: u64, count: usize) -> Vec<u8> {
        let (data, prefetch) = read(plane, file, offset, count);
        for p in prefetch {
            p.run(file);
        }
        data
    }

    /// The file range of chunk `i`.
    fn chunk(i: usize) -> Range<u64> {
        (i * CHUNK) as u64..((i + 1) * CHUNK) as u64
    }

    /// The file range of chunk `i` of a [`BIG`] plane.
    fn big_chunk(i: usize) -> Range<u64> {
        (i * BIG) as u64..((i + 1) * BIG) as u64
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i / 4096) as u8 ^ (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn sequential_stream_is_prefetched_and_served() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        let content = pattern(16 * CHUNK + 1000, 1);
        write(&plane, &file, 0, &content);
        let mut offset = 0;
        while offset < content.len() {
            let got = read_inline(&plane, &file, offset as u64, CHUNK);
            let want = &content[offset..(offset + CHUNK).min(content.len())];
            assert_eq!(got, want, "at {offset}");
            offset += CHUNK;
        }
        let c = plane.snapshot();
        // Two READs make the stream; every full chunk after them is a hit.
        // The last, partial chunk is never prefetched (it is past the last
        // whole chunk below the file size).
        assert_eq!(c.readahead_hits, 14, "{c:?}");
        assert_eq!(c.readahead_misses, 1, "{c:?}");
        assert_eq!(c.readahead_bytes, 14 * CHUNK as u64);
        assert_eq!(c.readahead_discards, 0);
        assert_eq!(c.read.direct.ops, 17);
        assert_eq!(plane.readahead_buffers(), 0, "all prefetched data was used");
        assert_eq!(plane.read_pool().available(), 16);
    }

    #[test]
    fn misaligned_reads_are_served_across_chunks() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        let content = pattern(12 * CHUNK, 2);
        write(&plane, &file, 0, &content);
        // 40000-byte READs straddle chunk boundaries: served by copying.
        let step = 40000;
        let mut offset = 0;
        while offset + step <= content.len() {
            let got = read_inline(&plane, &file, offset as u64, step);
            assert_eq!(got, &content[offset..offset + step], "at {offset}");
            offset += step;
        }
        assert!(
            plane.snapshot().readahead_hits > 10,
            "{:?}",
            plane.snapshot()
        );
    }

    #[test]
    fn random_reads_never_prefetch() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        write(&plane, &file, 0, &pattern(64 * CHUNK, 3));
        let mut x: u64 = 12345;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let block = (x >> 33) % (64 * CHUNK as u64 / 4096);
            let (_, prefetch) = read(&plane, &file, block * 4096, 4096);
            assert!(prefetch.is_empty());
        }
        let c = plane.snapshot();
        assert_eq!((c.readahead_bytes, c.readahead_hits), (0, 0));
    }

    #[test]
    fn a_stream_with_reads_in_flight_prefetches_past_them() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(32);
        let content = pattern(32 * CHUNK, 4);
        write(&plane, &file, 0, &content);
        // A client with READs in flight: while each READ of the stream
        // runs, the next three are in flight too (begun, not ended).
        let ahead = |i: usize| {
            (i + 1..i + 4)
                .map(|j| file.readahead.begin_read(chunk(j)))
                .collect::<Vec<_>>()
        };
        for i in 0..MIN_CONCURRENT_STREAK as usize - 1 {
            let others = ahead(i);
            let (got, prefetch) = read(&plane, &file, (i * CHUNK) as u64, CHUNK);
            assert_eq!(got, &content[i * CHUNK..(i + 1) * CHUNK]);
            assert!(prefetch.is_empty(), "READ {i}: too early for a stream");
            drop(others);
        }
        let i = MIN_CONCURRENT_STREAK as usize - 1;
        let others = ahead(i);
        let (_, prefetch) = read(&plane, &file, (i * CHUNK) as u64, CHUNK);
        drop(others);
        // Past the READs in flight (i + 1 ..= i + 3), not over them: the
        // device reads no block twice.
        assert_eq!(prefetch.len(), 1);
        let first = prefetch[0].range();
        assert_eq!(first, chunk(i + 4));
        for p in prefetch {
            p.run(&file);
        }
        // The READs in flight end; then the client asks for the next
        // ones, served from the chunk.
        for j in i + 1..=i + 4 {
            let got = read_inline(&plane, &file, (j * CHUNK) as u64, CHUNK);
            assert_eq!(got, &content[j * CHUNK..(j + 1) * CHUNK]);
        }
        let c = plane.snapshot();
        assert!(c.readahead_hits >= 1, "{c:?}");
        assert_eq!(c.readahead_discards, 0);
    }

    #[test]
    fn reads_that_begin_out_of_order_find_their_chunks() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(32);
        let content = pattern(32 * CHUNK, 6);
        write(&plane, &file, 0, &content);
        // One READ at a time until the window holds four chunks ahead.
        let mut next = 0;
        while file.readahead.chunks() < 4 {
            read_inline(&plane, &file, (next * CHUNK) as u64, CHUNK);
            next += 1;
            assert!(next < 16, "the window never grew");
        }
        // The server begins the READ of the chunk after next before the
        // one of next (READs of one client run side by side): the later
        // READ ends first, while the other is in flight, and must not drop
        // the chunk it still needs; that one then ends alone, late.
        let first = file.readahead.begin_read(chunk(next));
        let later = read_inline(&plane, &file, ((next + 1) * CHUNK) as u64, CHUNK);
        assert_eq!(later, &content[(next + 1) * CHUNK..(next + 2) * CHUNK]);
        drop(first);
        let before = plane.snapshot();
        let got = read_inline(&plane, &file, (next * CHUNK) as u64, CHUNK);
        assert_eq!(got, &content[next * CHUNK..(next + 1) * CHUNK]);
        let after = plane.snapshot();
        assert_eq!(after.readahead_hits, before.readahead_hits + 1, "{after:?}");
        assert_eq!(after.readahead_discards, 0, "{after:?}");
    }

    #[test]
    fn interleaved_streams_of_one_file_each_prefetch() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane_with(32, BIG);
        let content = pattern(64 * BIG, 5);
        write(&plane, &file, 0, &content);
        // Two clients reading their own halves, one READ each at a time,
        // each READ beginning while the other client's is in flight.
        let mut planned = [0, 0];
        for i in 0..16 {
            for (k, half) in [0, 32].into_iter().enumerate() {
                let other_half = 32 - half;
                let other = file.readahead.begin_read(big_chunk(other_half + i));
                let at = (half + i) * BIG;
                let (got, prefetch) = read(&plane, &file, at as u64, BIG);
                assert_eq!(got, &content[at..at + BIG]);
                for p in prefetch {
                    let r = p.range();
                    assert!(
                        r.start >= (half * BIG) as u64 && r.end <= ((half + 32) * BIG) as u64,
                        "READ {i} of the half at {half} prefetched {r:?}"
                    );
                    planned[k] += 1;
                    p.run(&file);
                }
                drop(other);
            }
        }
        assert!(planned[0] > 0 && planned[1] > 0, "{planned:?}");
        let c = plane.snapshot();
        // Each half's stream forms after four READs and then hits.
        assert!(c.readahead_hits >= 2 * 10, "{c:?}");
        assert_eq!(c.readahead_discards, 0, "{c:?}");
    }

    /// Reads `records` records of `len` bytes, record `i` at `i * stride`,
    /// each while the next is in flight (a client with two READs in
    /// flight); the prefetches are run. How many were planned.
    fn read_strided(
        plane: &DataPlane,
        file: &DataFile,
        content: &[u8],
        len: usize,
        stride: usize,
        records: usize,
    ) -> usize {
        let mut planned = 0;
        for i in 0..records {
            let next = ((i + 1) * stride) as u64;
            let in_flight = file.readahead.begin_read(next..next + len as u64);
            let at = i * stride;
            let (got, prefetch) = read(plane, file, at as u64, len);
            assert_eq!(got, &content[at..at + len], "record {i}");
            planned += prefetch.len();
            for p in prefetch {
                p.run(file);
            }
            drop(in_flight);
        }
        planned
    }

    #[test]
    fn a_strided_reader_is_not_a_stream() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane_with(32, BIG);
        let content = pattern(256 * BIG, 12);
        write(&plane, &file, 0, &content);
        // Records larger than small READs (those may cluster instead), one
        // in eight of them read, as each of IOR's eight connections does:
        // every READ is near the one before, but a chunk prefetched would
        // be an eighth used.
        let len = 96 << 10;
        let planned = read_strided(&plane, &file, &content, len, 8 * len, 40);
        let c = plane.snapshot();
        assert_eq!(planned, 0, "{c:?}");
        assert_eq!((c.readahead_bytes, c.readahead_discards), (0, 0), "{c:?}");
        // The same reader reading every record is a stream.
        let dense = read_strided(&plane, &file, &content, len, len, 40);
        assert!(dense > 0, "{:?}", plane.snapshot());
        assert!(plane.snapshot().readahead_hits > 0);
    }

    #[test]
    fn random_reads_among_streams_do_not_push_them_out() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane_with(64, BIG);
        let content = pattern(128 * BIG, 11);
        write(&plane, &file, 0, &content);
        // Random READs land all over 1 GiB (holes past the data), too far
        // apart to cluster.
        let size = 1u64 << 30;
        file.truncate(size).unwrap();
        // Four clients read their own quarters of the data; between any
        // two of their READs come more random 4 KiB READs than the file
        // follows streams.
        let mut x: u64 = 99;
        for i in 0..24 {
            for q in 0..4 {
                for _ in 0..2 * MAX_STREAMS {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let at = ((x >> 33) % (size / 4096) * 4096) as usize;
                    let other = file.readahead.begin_read(big_chunk(q * 32 + i));
                    let (got, prefetch) = read(&plane, &file, at as u64, 4096);
                    match content.get(at..at + 4096) {
                        Some(want) => assert_eq!(got, want),
                        None => assert!(got.iter().all(|b| *b == 0)),
                    }
                    assert!(prefetch.is_empty(), "a random READ prefetched");
                    drop(other);
                }
                // The client's next READ is in flight already (qd 2).
                let other = file.readahead.begin_read(big_chunk(q * 32 + i + 1));
                let at = (q * 32 + i) * BIG;
                let (got, prefetch) = read(&plane, &file, at as u64, BIG);
                assert_eq!(got, &content[at..at + BIG]);
                for p in prefetch {
                    p.run(&file);
                }
                drop(other);
            }
        }
        let c = plane.snapshot();
        // Each quarter's stream forms after four READs and then hits.
        assert!(c.readahead_hits >= 4 * 16, "{c:?}");
        assert_eq!(c.readahead_discards, 0, "{c:?}");
        assert_eq!(c.clustered_reads, 0, "{c:?}");
    }

    /// Starts a stream and returns the prefetch of the chunk at `2 * CHUNK`,
    /// not yet run.
    fn planned_third_chunk(plane: &DataPlane, file: &DataFile) -> Prefetch {
        read_inline(plane, file, 0, CHUNK);
        let (_, mut prefetch) = read(plane, file, CHUNK as u64, CHUNK);
        assert_eq!(prefetch.len(), 1);
        let p = prefetch.remove(0);
        assert_eq!(p.range(), 2 * CHUNK as u64..3 * CHUNK as u64);
        p
    }

    #[test]
    fn write_after_prefetch_is_read_fresh() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        write(&plane, &file, 0, &pattern(8 * CHUNK, 5));
        planned_third_chunk(&plane, &file).run(&file);
        // Misaligned, inside the prefetched chunk.
        let at = 2 * CHUNK + 1234;
        write(&plane, &file, at as u64, b"fresh");
        let got = read_inline(&plane, &file, 2 * CHUNK as u64, CHUNK);
        assert_eq!(&got[1234..1239], b"fresh");
        let c = plane.snapshot();
        assert_eq!(c.readahead_discards, 1, "{c:?}");
        assert_eq!(c.readahead_hits, 0, "{c:?}");
    }

    #[test]
    fn write_before_a_queued_prefetch_runs_is_read_fresh() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        write(&plane, &file, 0, &pattern(8 * CHUNK, 6));
        let p = planned_third_chunk(&plane, &file);
        write(&plane, &file, 2 * CHUNK as u64, &[9u8; 4096]);
        p.run(&file);
        let got = read_inline(&plane, &file, 2 * CHUNK as u64, CHUNK);
        assert_eq!(&got[..4096], &[9u8; 4096]);
        assert_eq!(
            plane.snapshot().readahead_hits,
            1,
            "the prefetch read after the write"
        );
    }

    #[test]
    fn truncate_after_prefetch_is_read_fresh() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        write(&plane, &file, 0, &pattern(8 * CHUNK, 7));
        planned_third_chunk(&plane, &file).run(&file);
        // Shrink below the chunk and grow back: the chunk now reads zeros.
        plane.truncate(&file, CHUNK as u64).unwrap();
        plane.truncate(&file, 8 * CHUNK as u64).unwrap();
        let got = read_inline(&plane, &file, 2 * CHUNK as u64, CHUNK);
        assert!(got.iter().all(|&b| b == 0));
        assert_eq!(plane.snapshot().readahead_discards, 1);
    }

    #[test]
    fn dropped_or_cancelled_prefetches_free_their_buffers() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        write(&plane, &file, 0, &pattern(8 * CHUNK, 8));
        drop(planned_third_chunk(&plane, &file));
        assert_eq!(file.readahead.chunks(), 0);
        assert_eq!(plane.readahead_buffers(), 0);
        // A READ that gets to a queued chunk first reads it itself; the
        // prefetch then does nothing.
        let p = planned_third_chunk(&plane, &file);
        let (got, next) = read(&plane, &file, 2 * CHUNK as u64, CHUNK);
        assert_eq!(got, pattern(8 * CHUNK, 8)[2 * CHUNK..3 * CHUNK]);
        drop(next);
        p.run(&file);
        assert_eq!(plane.snapshot().readahead_bytes, 0);
        assert_eq!(plane.read_pool().available(), 16);
    }

    #[test]
    fn readahead_takes_at_most_a_quarter_of_the_pool_and_gives_it_back() {
        let plane = plane(8);
        let files: Vec<_> = (0..4).filter_map(|_| direct_file()).collect();
        if files.len() < 4 {
            return;
        }
        let mut held = Vec::new();
        for (_, file) in &files {
            write(&plane, file, 0, &pattern(16 * CHUNK, 9));
            for i in 0..6 {
                let (_, prefetch) = read(&plane, file, (i * CHUNK) as u64, CHUNK);
                held.extend(prefetch);
            }
        }
        assert_eq!(held.len(), 2, "a quarter of 8 buffers");
        assert_eq!(plane.readahead_buffers(), 2);
        assert_eq!(plane.read_pool().available(), 6);
        for p in held {
            p.run(&files[0].1);
        }
        // The prefetches ran on the wrong file: ignored, buffers back.
        assert_eq!(plane.read_pool().available(), 8);
        // Ready but never read: given back once old enough.
        let (_, file) = &files[1];
        for i in 6..8 {
            read_inline(&plane, file, (i * CHUNK) as u64, CHUNK);
        }
        assert!(plane.readahead_buffers() > 0);
        plane.expire_readahead();
        assert!(plane.readahead_buffers() > 0, "young chunks stay");
        file.readahead.expire(Instant::now() + MAX_AGE);
        assert_eq!(plane.readahead_buffers(), 0);
        assert_eq!(plane.read_pool().available(), 8);
        assert!(plane.snapshot().readahead_discards > 0);
    }

    #[test]
    fn a_non_sequential_read_drops_the_stream() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(16);
        write(&plane, &file, 0, &pattern(16 * CHUNK, 10));
        for i in 0..4 {
            read_inline(&plane, &file, (i * CHUNK) as u64, CHUNK);
        }
        assert!(plane.readahead_buffers() > 0);
        read_inline(&plane, &file, 12 * CHUNK as u64, 4096);
        assert_eq!(plane.readahead_buffers(), 0);
        assert_eq!(plane.read_pool().available(), 16);
    }

    /// Writers overwrite whole 4 KiB blocks with new versions while a
    /// sequential reader streams the file with readahead running on other
    /// threads. Every block read must be whole (one version) and no older
    /// than the last write that completed before the READ began.
    #[test]
    fn stress_writers_and_a_sequential_reader_never_see_stale_data() {
        let Some((_tmp, file)) = direct_file() else {
            return;
        };
        let plane = plane(32);
        const BLOCKS: usize = 512; // 2 MiB
        const WRITERS: usize = 2;
        let block = |b: usize, version: u64| {
            let mut data = vec![(b as u8) ^ (version as u8); 4096];
            data[..8].copy_from_slice(&(b as u64).to_le_bytes());
            data[8..16].copy_from_slice(&version.to_le_bytes());
            data
        };
        let initial: Vec<u8> = (0..BLOCKS).flat_map(|b| block(b, 0)).collect();
        write(&plane, &file, 0, &initial);
        let started: Vec<AtomicU64> = (0..BLOCKS).map(|_| AtomicU64::new(0)).collect();
        let committed: Vec<AtomicU64> = (0..BLOCKS).map(|_| AtomicU64::new(0)).collect();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for w in 0..WRITERS {
                let (plane, file, started, committed, stop) =
                    (&plane, &file, &started, &committed, &stop);
                s.spawn(move || {
                    let mut x = w as u64 + 1;
                    let mut version = 0;
                    while !stop.load(Ordering::Relaxed) {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        // Each writer owns the blocks b % WRITERS == w, so a
                        // block's versions only grow; 1 to 3 blocks a time.
                        let first = ((x >> 33) as usize % (BLOCKS / WRITERS)) * WRITERS + w;
                        let n = 1 + (x >> 20) as usize % 3;
                        version += 1;
                        let blocks: Vec<usize> = (0..n)
                            .map(|i| first + i * WRITERS)
                            .filter(|&b| b < BLOCKS)
                            .collect();
                        for &b in &blocks {
                            started[b].store(version, Ordering::SeqCst);
                            write(plane, file, (b * 4096) as u64, &block(b, version));
                            committed[b].store(version, Ordering::SeqCst);
                        }
                        std::thread::sleep(Duration::from_micros(200));
                    }
                });
            }
            // Stops the writers also when an assertion below fails, or
            // the scope would wait for them forever.
            struct StopOnDrop<'a>(&'a AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = StopOnDrop(&stop);
            let deadline = Instant::now() + Duration::from_secs(3);
            let mut passes = 0;
            while Instant::now() < deadline || passes < 2 {
                for step in 0..BLOCKS * 4096 / CHUNK {
                    let offset = step * CHUNK;
                    let lo: Vec<u64> = (0..CHUNK / 4096)
                        .map(|i| committed[offset / 4096 + i].load(Ordering::SeqCst))
                        .collect();
                    let (data, prefetch) = read(&plane, &file, offset as u64, CHUNK);
                    for p in prefetch {
                        let file = &file;
                        s.spawn(move || p.run(file));
                    }
                    assert_eq!(data.len(), CHUNK);
                    for (i, got) in data.chunks(4096).enumerate() {
                        let b = offset / 4096 + i;
                        let version = u64::from_le_bytes(got[8..16].try_into().unwrap());
                        assert_eq!(got, block(b, version), "block {b} is torn");
                        let hi = started[b].load(Ordering::SeqCst);
                        assert!(
                            lo[i] <= version && version <= hi,
                            "block {b}: read version {version}, expected {}..={hi}",
                            lo[i]
                        );
                    }
                }
                passes += 1;
            }
        });
        let c = plane.snapshot();
        assert!(c.readahead_hits > 0, "{c:?}");
        println!("{c:?}");
        assert!(plane.readahead_buffers() <= 32 / 4);
    }
}
