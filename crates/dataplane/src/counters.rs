//! Data-plane counters: what the I/O path did, for metrics and tests.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Mode;

/// Live counters of one [`crate::DataPlane`]; all monotonic.
#[derive(Debug, Default)]
pub struct Counters {
    /// READ operations served, per [`Mode`] actually used.
    pub read_ops: [AtomicU64; 3],
    /// Bytes returned by READ, per mode.
    pub read_bytes: [AtomicU64; 3],
    /// WRITE operations completed, per mode.
    pub write_ops: [AtomicU64; 3],
    /// Payload bytes written by WRITE, per mode.
    pub write_bytes: [AtomicU64; 3],
    /// Direct reads that had to be expanded to alignment.
    pub expanded_reads: AtomicU64,
    /// Operations served buffered because `RWF_DONTCACHE` was refused.
    pub dontcache_fallbacks: AtomicU64,
    /// Operations served buffered because the file cannot do direct I/O
    /// (statx reports no alignment, or no `O_DIRECT` descriptor).
    pub no_direct_fallbacks: AtomicU64,
    /// Direct I/Os that failed with `EINVAL` although the alignment math
    /// said they were fine (a bug).
    pub direct_einval: AtomicU64,
    /// Writes the kernel took only part of (the filesystem filled up, or
    /// the file reached the file-size limit, part-way; the rest was tried
    /// again, see `pwrite_all`).
    pub short_writes: AtomicU64,
    /// READ/WRITE/COMMIT/truncate operations that failed.
    pub errors: AtomicU64,
    /// Partial edge blocks (head or tail) of misaligned direct-mode writes
    /// written through the page cache, the payload's own bytes only,
    /// beside the direct write of the aligned interior (see `write_edges`).
    pub buffered_edges: AtomicU64,
    /// Misaligned direct-mode writes of at most
    /// [`crate::write::WHOLE_BUFFERED_MAX`] bytes written whole through
    /// the page cache (`write_small_buffered`).
    pub buffered_misaligned: AtomicU64,
    /// Partial first or last pages of such page-cache writes that held
    /// data on disk and were not cached: read in before the write, both
    /// at once (`read_partial_pages`), so the kernel does not read them
    /// one after the other under the inode lock the write holds.
    pub edge_page_reads: AtomicU64,
    /// Stable (DATA_SYNC/FILE_SYNC) direct writes made durable by the write
    /// itself (`RWF_DSYNC`/`RWF_SYNC`: FUA where the device has it) rather
    /// than by a separate `fdatasync`/`fsync`.
    pub fua_writes: AtomicU64,
    /// Range-lock acquisitions that had to wait for another holder.
    pub range_lock_waits: AtomicU64,
    /// Buffer requests that found the pool empty and waited.
    pub pool_waits: AtomicU64,
    /// Direct READs served from data prefetched by readahead.
    pub readahead_hits: AtomicU64,
    /// Direct READs of a detected sequential stream that readahead had not
    /// prefetched (read from the device).
    pub readahead_misses: AtomicU64,
    /// Readahead hits that waited for their prefetch to finish.
    pub readahead_waits: AtomicU64,
    /// Large direct reads (READs, readahead chunks) that waited for room at
    /// the device while small ones were there (`device_queue.rs`).
    pub large_read_waits: AtomicU64,
    /// Bytes read from the device by readahead.
    pub readahead_bytes: AtomicU64,
    /// Prefetched ranges dropped unused: overwritten, truncated, expired,
    /// the stream stopped, or the read came back short.
    pub readahead_discards: AtomicU64,
    /// Direct READs read through io_uring by the connection's own task,
    /// without a blocking thread.
    pub ring_reads: AtomicU64,
    /// Small direct-mode READs served through the page cache because the
    /// file's small READs cluster (`cluster.rs`).
    pub clustered_reads: AtomicU64,
    /// Aligned direct WRITEs written through io_uring by the connection's
    /// own task.
    pub ring_writes: AtomicU64,
    /// Small UNSTABLE overwrites of cached pages written through the page
    /// cache by the connection's own task, without a blocking thread.
    pub task_writes: AtomicU64,
    /// Small UNSTABLE WRITEs tried there that went to a blocking thread
    /// after all (pages not cached, file extended, other I/O on it).
    pub task_write_handoffs: AtomicU64,
    /// Blocks read whose data did not match their stored CRC32C (the READ
    /// failed with an I/O error).
    pub integrity_errors: AtomicU64,
    /// Files whose checksums were rebuilt because they changed behind the
    /// server's back.
    pub integrity_rebuilds: AtomicU64,
}

/// Operations and bytes of one mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpsBytes {
    /// Operations.
    pub ops: u64,
    /// Bytes.
    pub bytes: u64,
}

/// [`OpsBytes`] per [`Mode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerMode {
    /// Buffered.
    pub buffered: OpsBytes,
    /// Buffered with `RWF_DONTCACHE`.
    pub dontcache: OpsBytes,
    /// Direct.
    pub direct: OpsBytes,
}

impl PerMode {
    /// The counts of one mode.
    pub fn get(&self, mode: Mode) -> OpsBytes {
        match mode {
            Mode::Buffered => self.buffered,
            Mode::DontCache => self.dontcache,
            Mode::Direct => self.direct,
        }
    }
}

/// A point-in-time copy of [`Counters`]; see there for each field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct CounterSnapshot {
    pub read: PerMode,
    pub write: PerMode,
    pub expanded_reads: u64,
    pub dontcache_fallbacks: u64,
    pub no_direct_fallbacks: u64,
    pub direct_einval: u64,
    pub short_writes: u64,
    pub errors: u64,
    pub buffered_edges: u64,
    pub buffered_misaligned: u64,
    pub edge_page_reads: u64,
    pub fua_writes: u64,
    pub range_lock_waits: u64,
    pub pool_waits: u64,
    pub readahead_hits: u64,
    pub readahead_misses: u64,
    pub readahead_waits: u64,
    pub large_read_waits: u64,
    pub readahead_bytes: u64,
    pub readahead_discards: u64,
    pub ring_reads: u64,
    pub clustered_reads: u64,
    pub ring_writes: u64,
    pub task_writes: u64,
    pub task_write_handoffs: u64,
    pub integrity_errors: u64,
    pub integrity_rebuilds: u64,
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn per_mode(ops: &[AtomicU64; 3], bytes: &[AtomicU64; 3]) -> PerMode {
    let at = |m: Mode| OpsBytes {
        ops: load(&ops[m.index()]),
        bytes: load(&bytes[m.index()]),
    };
    PerMode {
        buffered: at(Mode::Buffered),
        dontcache: at(Mode::DontCache),
        direct: at(Mode::Direct),
    }
}

impl Counters {
    /// Copies every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            read: per_mode(&self.read_ops, &self.read_bytes),
            write: per_mode(&self.write_ops, &self.write_bytes),
            expanded_reads: load(&self.expanded_reads),
            dontcache_fallbacks: load(&self.dontcache_fallbacks),
            no_direct_fallbacks: load(&self.no_direct_fallbacks),
            direct_einval: load(&self.direct_einval),
            short_writes: load(&self.short_writes),
            errors: load(&self.errors),
            buffered_edges: load(&self.buffered_edges),
            buffered_misaligned: load(&self.buffered_misaligned),
            edge_page_reads: load(&self.edge_page_reads),
            fua_writes: load(&self.fua_writes),
            range_lock_waits: load(&self.range_lock_waits),
            pool_waits: load(&self.pool_waits),
            readahead_hits: load(&self.readahead_hits),
            readahead_misses: load(&self.readahead_misses),
            readahead_waits: load(&self.readahead_waits),
            large_read_waits: load(&self.large_read_waits),
            readahead_bytes: load(&self.readahead_bytes),
            readahead_discards: load(&self.readahead_discards),
            ring_reads: load(&self.ring_reads),
            clustered_reads: load(&self.clustered_reads),
            ring_writes: load(&self.ring_writes),
            task_writes: load(&self.task_writes),
            task_write_handoffs: load(&self.task_write_handoffs),
            integrity_errors: load(&self.integrity_errors),
            integrity_rebuilds: load(&self.integrity_rebuilds),
        }
    }

    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_read(&self, mode: Mode, bytes: usize) {
        Self::bump(&self.read_ops[mode.index()]);
        self.read_bytes[mode.index()].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_write(&self, mode: Mode, bytes: usize) {
        Self::bump(&self.write_ops[mode.index()]);
        self.write_bytes[mode.index()].fetch_add(bytes as u64, Ordering::Relaxed);
    }
}
