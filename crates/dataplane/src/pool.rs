//! A bounded pool of aligned data buffers: the server's memory bound and
//! backpressure.
//!
//! Every READ and WRITE holds one buffer (each direction from its own pool,
//! see `DataPlane`) from the moment its payload is about to be received
//! (WRITE) or read (READ) until its reply is sent. When
//! all buffers are out, [`BufferPool::get`] waits, so a connection stops
//! reading new requests instead of allocating: memory never grows because
//! clients are fast.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dionfs_sys::buf::{AlignedBuf, BufArena};
use dionfs_sys::uring::{RingBuf, Uring};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::counters::Counters;

/// The io_uring instance direct READs and aligned direct WRITEs go through
/// without a blocking thread (see [`crate::DataPlane::read_without_blocking`],
/// [`crate::DataPlane::write_without_blocking`]). One per server; the server
/// drives it (`dionfs_sys::uring::drive`).
pub type IoRing = Uring<PooledBuf>;

/// Alignment of every pool buffer's first byte. Files whose
/// `stx_dio_mem_align` is larger are served buffered.
pub const BUF_ALIGN: usize = 4096;

/// Largest direct-I/O offset alignment the data plane expands to. Files
/// whose alignment is larger are served buffered.
pub const MAX_DIO_ALIGN: usize = 64 << 10;

/// Bytes a pool buffer has beyond `max_transfer`: one alignment unit for
/// expanding the start of a request, one for its end.
pub const BUF_SLACK: usize = 2 * MAX_DIO_ALIGN;

/// Buffers longer than this (more than 128 pages of 4 KiB, the segment
/// limit of many block devices) are carved from a [`BufArena`] in huge
/// pages, so that a transfer filling one reaches the device as one
/// request; shorter ones come from the heap.
pub const ARENA_MIN_LEN: usize = 512 << 10;

/// A bounded set of [`AlignedBuf`]s of one size.
pub struct BufferPool {
    permits: Arc<Semaphore>,
    free: Arc<Mutex<Vec<Slot>>>,
    buf_len: usize,
    count: usize,
    /// Where the buffers come from when they are longer than
    /// [`ARENA_MIN_LEN`]: made with the first of them; `None` inside if
    /// the kernel refused the mapping (then the heap, as for short ones).
    arena: std::sync::OnceLock<Option<Arc<BufArena>>>,
    counters: Arc<Counters>,
    /// The ring the pool registers its buffers with as they are allocated
    /// (until the kernel refuses one).
    ring: Mutex<Option<Arc<IoRing>>>,
}

/// A buffer of the pool and the ring slot it is registered at, if any.
struct Slot {
    // Declared first, so dropped first: the slot is given back before the
    // buffer's memory is freed.
    fixed: Option<Fixed>,
    buf: AlignedBuf,
}

/// A pool buffer's fixed slot in a ring, given back when the buffer is
/// freed (its pool dropped, say a data plane a reload retired) so that
/// the kernel unpins its pages and another pool's buffer can take it.
struct Fixed {
    ring: Arc<IoRing>,
    index: u16,
}

impl Drop for Fixed {
    fn drop(&mut self) {
        if let Err(e) = self.ring.unregister_fixed(self.index) {
            tracing::debug!(slot = self.index, error = %e, "cannot unregister a pool buffer from io_uring");
        }
    }
}

impl BufferPool {
    /// A pool of at most `count` buffers of `buf_len` bytes each, allocated
    /// on first use. Waits are counted in `counters.pool_waits`.
    pub fn new(buf_len: usize, count: usize, counters: Arc<Counters>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(count)),
            free: Arc::new(Mutex::new(Vec::with_capacity(count))),
            buf_len,
            count,
            arena: std::sync::OnceLock::new(),
            counters,
            ring: Mutex::new(None),
        }
    }

    /// Registers the pool's buffers with `ring` as fixed buffers, each at
    /// a free slot (see [`IoRing::register_fixed_free`]): those allocated
    /// already now, the others when first allocated. Ring operations on
    /// them then skip pinning the pages each time. A buffer that finds no
    /// free slot, or that the kernel refuses, works unregistered.
    pub fn register_with(&self, ring: &Arc<IoRing>) {
        let mut ring = Some(ring.clone());
        for slot in self.free.lock().iter_mut() {
            if slot.fixed.is_none() {
                slot.fixed = register(&mut ring, &mut slot.buf);
            }
        }
        *self.ring.lock() = ring;
    }

    /// Size of each buffer in bytes.
    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// Number of buffers not handed out right now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Takes a buffer, waiting while all are in use. The buffer keeps
    /// whatever its previous user left in it.
    pub async fn get(&self) -> std::io::Result<PooledBuf> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.counters.pool_waits.fetch_add(1, Ordering::Relaxed);
                self.permits
                    .clone()
                    .acquire_owned()
                    .await
                    // The semaphore is never closed.
                    .map_err(|_| std::io::Error::other("buffer pool closed"))?
            }
        };
        self.loan(permit)
    }

    /// Takes a buffer only if one is free right now; `Ok(None)` when all
    /// are in use. For work that may be skipped (readahead), so that it
    /// never competes with requests for the last buffers. Not counted as a
    /// wait.
    pub fn try_get(&self) -> std::io::Result<Option<PooledBuf>> {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return Ok(None);
        };
        self.loan(permit).map(Some)
    }

    fn loan(&self, permit: OwnedSemaphorePermit) -> std::io::Result<PooledBuf> {
        let reused = self.free.lock().pop();
        let slot = match reused {
            Some(slot) => slot,
            None => {
                let mut buf = self.allocate()?;
                let fixed = register(&mut self.ring.lock(), &mut buf);
                Slot { fixed, buf }
            }
        };
        Ok(PooledBuf {
            buf: Some(slot.buf),
            fixed: slot.fixed,
            free: self.free.clone(),
            _permit: permit,
        })
    }

    /// A new buffer: the arena's next one for long buffers, else (or once
    /// the arena has none left, which the permits make impossible while
    /// every buffer comes back to `free`) one from the heap.
    fn allocate(&self) -> std::io::Result<AlignedBuf> {
        if self.buf_len > ARENA_MIN_LEN {
            let arena = self.arena.get_or_init(|| {
                BufArena::new(self.buf_len, BUF_ALIGN, self.count)
                    .inspect_err(|e| {
                        tracing::info!(error = %e, buf_len = self.buf_len,
                            "cannot map a buffer arena; buffers come from the heap");
                    })
                    .ok()
            });
            if let Some(buf) = arena.as_ref().and_then(|a| a.take()) {
                return Ok(buf);
            }
        }
        Ok(AlignedBuf::new(self.buf_len, BUF_ALIGN)?)
    }

    /// [`BufferPool::get`] for threads outside an async runtime (tests,
    /// benchmarks, blocking tools). Never call it from async code: it blocks
    /// the thread until a buffer is free.
    pub fn get_blocking(&self) -> std::io::Result<PooledBuf> {
        dionfs_sys::park::run_here(self.get())
    }
}

/// Registers `buf` with `ring` at a free slot, if there is one and the
/// kernel takes it. A refusal forgets the ring: the next buffers are not
/// tried one by one.
fn register(ring: &mut Option<Arc<IoRing>>, buf: &mut AlignedBuf) -> Option<Fixed> {
    let r = ring.as_ref()?;
    match r.register_fixed_free(buf) {
        Ok(Some(index)) => Some(Fixed {
            ring: r.clone(),
            index,
        }),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, "cannot register a pool buffer with io_uring");
            *ring = None;
            None
        }
    }
}

/// A buffer on loan from a [`BufferPool`]; derefs to its bytes and goes
/// back to the pool when dropped.
pub struct PooledBuf {
    /// Always `Some` until `drop` takes it.
    buf: Option<AlignedBuf>,
    /// The ring slot the buffer is registered at.
    fixed: Option<Fixed>,
    free: Arc<Mutex<Vec<Slot>>>,
    _permit: OwnedSemaphorePermit,
}

impl Deref for PooledBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or(&[])
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or(&mut [])
    }
}

/// So an io_uring read can fill a pool buffer (the ring owns it until the
/// kernel is done with it).
impl RingBuf for PooledBuf {
    fn aligned_mut(&mut self) -> &mut AlignedBuf {
        // `buf` is `Some` from `loan` until `drop` takes it, and `drop`
        // cannot run while a `&mut self` exists.
        self.buf
            .as_mut()
            .expect("a pooled buffer holds its buffer until dropped")
    }

    fn fixed_index(&self) -> Option<u16> {
        self.fixed.as_ref().map(|f| f.index)
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            // The buffer is back on the free list before the permit (dropped
            // after this body) lets the next `get` look for it.
            self.free.lock().push(Slot {
                fixed: self.fixed.take(),
                buf,
            });
        }
    }
}

impl std::fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuf")
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pool(count: usize) -> (Arc<BufferPool>, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        (
            Arc::new(BufferPool::new(8192, count, counters.clone())),
            counters,
        )
    }

    #[test]
    fn buffers_are_aligned_and_reused() {
        let (pool, _) = pool(2);
        let mut a = pool.get_blocking().unwrap();
        assert_eq!(a.len(), 8192);
        assert_eq!(a.as_ptr() as usize % BUF_ALIGN, 0);
        a[0] = 42;
        let addr = a.as_ptr() as usize;
        drop(a);
        let b = pool.get_blocking().unwrap();
        assert_eq!(b.as_ptr() as usize, addr);
        assert_eq!(b[0], 42, "a reused buffer keeps its old bytes");
    }

    #[test]
    fn empty_pool_waits_and_counts() {
        let (pool, counters) = pool(1);
        let held = pool.get_blocking().unwrap();
        assert_eq!(pool.available(), 0);
        let p2 = pool.clone();
        let waiter = std::thread::spawn(move || p2.get_blocking().map(|b| b.len()));
        // Counted as a wait: it found no buffer, and none comes back while
        // `held` is held.
        dionfs_testfs::wait_until(
            || counters.pool_waits.load(Ordering::Relaxed) == 1,
            Duration::from_secs(10),
            "the second get to wait",
        );
        assert!(!waiter.is_finished());
        drop(held);
        assert_eq!(waiter.join().unwrap().unwrap(), 8192);
        assert_eq!(counters.pool_waits.load(Ordering::Relaxed), 1);
        assert_eq!(pool.available(), 1);
    }

    #[test]
    fn try_get_never_waits() {
        let (pool, counters) = pool(1);
        let held = pool.try_get().unwrap().expect("a free buffer");
        assert!(pool.try_get().unwrap().is_none());
        drop(held);
        assert!(pool.try_get().unwrap().is_some());
        assert_eq!(counters.pool_waits.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn fixed_slots_are_taken_while_free_and_given_back_with_the_buffers() {
        let Ok(ring) = IoRing::with_fixed_buffers(4, 2) else {
            println!("skipped: no io_uring here");
            return;
        };
        if ring.fixed_slots() == 0 {
            println!("skipped: no fixed buffer table");
            return;
        }
        let ring = Arc::new(ring);
        let (first, _) = pool(3);
        first.register_with(&ring);
        let held: Vec<PooledBuf> = (0..3).map(|_| first.get_blocking().unwrap()).collect();
        let mut slots: Vec<Option<u16>> = held.iter().map(|b| b.fixed_index()).collect();
        slots.sort();
        assert_eq!(
            slots,
            [None, Some(0), Some(1)],
            "two slots for three buffers"
        );
        // A second pool finds none free; once the first pool and its
        // buffers are gone, their slots are.
        let (second, _) = pool(2);
        second.register_with(&ring);
        let b = second.get_blocking().unwrap();
        assert_eq!(b.fixed_index(), None);
        drop(b);
        drop(held);
        assert_eq!(
            first.free.lock().len(),
            3,
            "back in the pool: still registered"
        );
        drop(first);
        let mut probe = AlignedBuf::new(4096, BUF_ALIGN).unwrap();
        assert_eq!(ring.register_fixed_free(&mut probe).unwrap(), Some(0));
        ring.unregister_fixed(0).unwrap();
        // The second pool's next new buffer takes one.
        let (b, c) = (
            second.get_blocking().unwrap(),
            second.get_blocking().unwrap(),
        );
        assert_eq!(
            [b.fixed_index(), c.fixed_index()].iter().flatten().count(),
            1,
            "its first buffer was allocated before the slots came free"
        );
    }

    #[test]
    fn long_buffers_come_from_one_arena_and_short_ones_from_the_heap() {
        let counters = Arc::new(Counters::default());
        let len = (1 << 20) + BUF_SLACK;
        let long = BufferPool::new(len, 3, counters.clone());
        let bufs: Vec<PooledBuf> = (0..3).map(|_| long.get_blocking().unwrap()).collect();
        let mut at: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        at.sort();
        assert_eq!(
            at[0] % dionfs_sys::buf::HUGE_PAGE,
            0,
            "the arena starts on a huge page"
        );
        assert_eq!(
            [at[1] - at[0], at[2] - at[1]],
            [len, len],
            "side by side in one mapping"
        );
        assert!(bufs.iter().all(|b| b.len() == len));
        drop(bufs);
        // Reused, not carved again.
        let again = long.get_blocking().unwrap();
        assert!(at.contains(&(again.as_ptr() as usize)));

        let short = BufferPool::new(ARENA_MIN_LEN, 2, counters);
        let (a, b) = (short.get_blocking().unwrap(), short.get_blocking().unwrap());
        assert_ne!(
            (b.as_ptr() as usize).abs_diff(a.as_ptr() as usize),
            ARENA_MIN_LEN
        );
        assert_eq!(a.as_ptr() as usize % BUF_ALIGN, 0);
    }

    #[test]
    fn never_more_than_count_buffers_out() {
        let (pool, _) = pool(3);
        let out = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (pool, out) = (pool.clone(), out.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _b = pool.get_blocking().unwrap();
                        let now = out.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= 3);
                        std::thread::yield_now();
                        out.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(pool.free.lock().len() <= 3);
    }
}
