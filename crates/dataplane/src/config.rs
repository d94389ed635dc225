//! Per-export data-plane settings: which I/O mode each direction uses, the
//! largest transfer, and how many transfers may hold a buffer at once.

use serde::Deserialize;

use crate::DataError;

/// How file data moves between the disk and the server's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Plain `pread`/`pwrite` through the page cache.
    Buffered,
    /// Buffered I/O with `RWF_DONTCACHE` (Linux 6.14+): pages are dropped
    /// after the I/O. Falls back to `Buffered` where the filesystem refuses.
    DontCache,
    /// `O_DIRECT`, with misaligned reads expanded to the alignment and the
    /// partial edge blocks of misaligned writes written buffered (their
    /// pages dropped again at COMMIT) by the data plane.
    Direct,
}

impl std::fmt::Display for Mode {
    /// The mode in the config's words (`read_mode = "dontcache"`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Buffered => "buffered",
            Mode::DontCache => "dontcache",
            Mode::Direct => "direct",
        })
    }
}

impl Mode {
    /// Index into per-mode counter arrays.
    pub(crate) fn index(self) -> usize {
        match self {
            Mode::Buffered => 0,
            Mode::DontCache => 1,
            Mode::Direct => 2,
        }
    }
}

/// Data-plane settings of one export.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// Mode for READ.
    pub read_mode: Mode,
    /// Mode for WRITE.
    pub write_mode: Mode,
    /// Largest READ or WRITE payload in bytes (the server advertises it as
    /// `rtmax`/`wtmax` in FSINFO). Longer READs are answered short; longer
    /// WRITEs are refused.
    pub max_transfer: usize,
    /// How many READs may hold a data buffer at once: the read pool has
    /// this many buffers and READs beyond wait (backpressure).
    pub read_buffers: usize,
    /// The same for WRITEs, from a pool of their own: neither direction can
    /// take the buffers the other needs.
    pub write_buffers: usize,
    /// READs and WRITEs of at most [`SMALL_IO`] bytes take their buffers
    /// from two pools of their own (one per direction) of this many small
    /// buffers each, so that many small requests in flight neither wait
    /// for nor tie up the large buffers.
    pub small_buffers: usize,
    /// While a small direct READ is at the device, large direct reads
    /// (READs over [`SMALL_IO`], readahead chunks) start only while less
    /// than this many bytes of them are there (`device_queue.rs`); 0: no
    /// limit.
    pub large_read_depth: u64,
}

/// The largest READ or WRITE served from the small pools
/// ([`DataConfig::small_buffers`]).
pub const SMALL_IO: usize = 64 << 10;

/// Whether a request of `len` bytes is served from the small pools.
pub fn is_small(len: usize) -> bool {
    len <= SMALL_IO
}

/// Bytes of large reads the device may hold while a small read is there,
/// by default (`large_read_depth_mib`): in the `mixed-16` shape the random
/// READs' p50 went from 10.3-12.0 ms to 3.9-4.5 ms with 4 MiB (5.7-6.8 ms
/// with 8), and the sequential readers' throughput stayed within the noise
/// (scratch, two rounds each). Less trades sequential throughput for
/// random latency: 2 MiB gave 2.5 ms at 1,766-1,829 MiB/s, 1 MiB 1.9-2.0 ms
/// at 1,535-1,553, against 3.6-3.7 ms at 2,082-2,110 with 4 MiB (scratch
/// `mix.sh`, two rounds, 2026-11-26).
pub const LARGE_READ_DEPTH: u64 = 4 << 20;

/// Upper bound on `max_transfer`: beyond this a single request ties up too
/// much memory for too long.
pub const MAX_TRANSFER_LIMIT: usize = 64 << 20;

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            read_mode: Mode::Buffered,
            write_mode: Mode::Buffered,
            max_transfer: 1 << 20,
            read_buffers: 16,
            write_buffers: 16,
            small_buffers: 64,
            large_read_depth: LARGE_READ_DEPTH,
        }
    }
}

impl DataConfig {
    /// Checks the limits a [`crate::DataPlane`] relies on.
    pub fn validate(&self) -> Result<(), DataError> {
        if self.max_transfer == 0 || self.max_transfer > MAX_TRANSFER_LIMIT {
            return Err(DataError::InvalidConfig(
                "max_transfer must be between 1 byte and 64 MiB",
            ));
        }
        if self.read_buffers == 0 || self.write_buffers == 0 || self.small_buffers == 0 {
            return Err(DataError::InvalidConfig(
                "read_buffers, write_buffers and small_buffers must be at least 1",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        DataConfig::default().validate().unwrap();
    }

    #[test]
    fn rejects_zero_limits() {
        let zero_transfer = DataConfig {
            max_transfer: 0,
            ..DataConfig::default()
        };
        assert!(zero_transfer.validate().is_err());
        for (read_buffers, write_buffers) in [(0, 1), (1, 0)] {
            let zero_pool = DataConfig {
                read_buffers,
                write_buffers,
                ..DataConfig::default()
            };
            assert!(zero_pool.validate().is_err());
        }
    }
}
