//! The data plane: READ, WRITE and COMMIT on an open file, usable and
//! tested without any network.
//!
//! Each export has one [`DataPlane`] (its [`DataConfig`]: a [`Mode`] per
//! direction, the transfer size, the READ and WRITE buffers in flight). Files
//! are [`DataFile`]s, opened by the filesystem backend with a buffered and
//! (if possible) an `O_DIRECT` descriptor.
//!
//! Serving a READ (the server, on a connection task):
//! 1. `let buf = plane.read_buffer_for(count).await?` — waits while the
//!    read pool (the small one for at most `SMALL_IO` bytes) is empty
//!    (backpressure);
//! 2. on a blocking thread: `let data = plane.read(&file, buf, offset,
//!    count)?`;
//! 3. send the reply header, then `data.data()` from the same buffer, with
//!    `data.eof()`; drop `data` afterwards;
//! 4. run each of `data.take_prefetch()` (readahead of a sequential direct
//!    stream, see `readahead.rs`) on a blocking thread: `p.run(&file)`.
//!
//! Serving a WRITE:
//! 1. after decoding the WRITE arguments up to the payload:
//!    `let mut wb = plane.prepare_write(&file, offset, count).await?`
//!    (from the write pool, which READs never touch; the server takes it
//!    only once the payload has arrived in the socket);
//! 2. receive the payload from the socket straight into `wb.payload_mut()`;
//! 3. on a blocking thread: `plane.write(&file, wb, stable)?`.
//!
//! [`DataPlane`] (`plane.rs`) hands each call to the export's read path
//! (`read.rs`) or write path (`write.rs`), passing them what the two share
//! (`paths.rs`: configuration, counters, which I/O path a file gets, range
//! locking, direct I/O's error policy, and the checksum hooks of
//! `checksums.rs`); COMMIT and truncate are its own. NFSv4.2's calls go to
//! `space.rs` (SEEK, ALLOCATE, DEALLOCATE) and `copy.rs` (COPY, CLONE),
//! which take the same range locks as WRITE and truncate.
//!
//! Direct I/O, modes and alignment follow `DESIGN.md` ("The data plane");
//! the pieces are named after what they do: [`align`] holds the arithmetic
//! (`expand_to_alignment`, `read_reply`, `split_edges`), `read.rs` has
//! `read_direct`/`read_cached`, `write.rs` has
//! `write_direct`/`write_edges`/`write_cached`, [`range_lock`] the per-file
//! range locks, `readahead.rs` the prefetching of sequential direct
//! reads. No write path rounds the file size up to a block (the
//! partial edge blocks of a misaligned write go buffered, see
//! [`align::split_edges`]), so the kernel's `i_size` is always exact;
//! `size.rs` hides half-done extending writes from the sizes reported.

pub mod align;
mod checksums;
mod cluster;
mod config;
mod copy;
mod counters;
mod device_queue;
mod error;
mod file;
mod held;
mod page_cache;
mod paths;
mod plane;
mod pool;
mod prefetch;
pub mod range_lock;
mod read;
mod readahead;
mod size;
mod space;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod write;
mod write_buffer;

pub use checksums::{Rebuild, MAX_REBUILDS};
pub use config::{is_small, DataConfig, Mode, LARGE_READ_DEPTH, MAX_TRANSFER_LIMIT, SMALL_IO};
pub use copy::COPY_MAX;
pub use counters::{CounterSnapshot, Counters, OpsBytes, PerMode};
pub use error::DataError;
pub use file::{DataFile, SizeProbe, SizeSeen};
pub use plane::DataPlane;
pub use pool::{BufferPool, IoRing, PooledBuf, BUF_ALIGN, BUF_SLACK, MAX_DIO_ALIGN};
pub use prefetch::Prefetch;
pub use read::{ReadAttempt, ReadData};
pub use readahead::MAX_AGE as READAHEAD_MAX_AGE;
pub use space::Seek;
pub use write::{Stable, WriteAttempt, WriteDone};
pub use write_buffer::WriteBuffer;
