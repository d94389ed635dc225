//! A bounded pool of aligned data buffers: the server's memory bound and
//! backpressure.
//!
//! Every READ and WRITE holds one buffer (each direction from its own pool,
//! see `DataPlane`) from the moment its payload is about to be received
//! (WRITE) or read (READ) until its reply is sent. When
//! all buffers are out, [`BufferPool::get`] waits, so a connection stops
//! reading new requests instead of allocating: memory never grows because
//! clients are fast.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use dionfs_sys::buf::AlignedBuf;
use dionfs_sys::uring::RingBuf;
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::counters::Counters;
use crate::read::IoRing;

/// Alignment of every pool buffer's first byte. Files whose
/// `stx_dio_mem_align` is larger are served buffered.
pub const BUF_ALIGN: usize = 4096;

/// Largest direct-I/O offset alignment the data plane expands to. Files
/// whose alignment is larger are served buffered.
pub const MAX_DIO_ALIGN: usize = 64 << 10;

/// Bytes a pool buffer has beyond `max_transfer`: one alignment unit for
/// expanding the start of a request, one for its end.
pub const BUF_SLACK: usize = 2 * MAX_DIO_ALIGN;

/// A bounded set of [`AlignedBuf`]s of one size.
pub struct BufferPool {
    permits: Arc<Semaphore>,
    free: Arc<Mutex<Vec<Slot>>>,
    buf_len: usize,
    counters: Arc<Counters>,
    /// The ring the pool registers its buffers with as they are allocated.
    fixed: Mutex<Option<FixedSlots>>,
}

/// A buffer of the pool and the ring slot it is registered at, if any.
struct Slot {
    buf: AlignedBuf,
    fixed: Option<u16>,
}

/// Fixed buffer slots of a ring set aside for one pool.
struct FixedSlots {
    ring: Arc<IoRing>,
    next: u16,
    end: u16,
}

impl BufferPool {
    /// A pool of at most `count` buffers of `buf_len` bytes each, allocated
    /// on first use. Waits are counted in `counters.pool_waits`.
    pub fn new(buf_len: usize, count: usize, counters: Arc<Counters>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(count)),
            free: Arc::new(Mutex::new(Vec::with_capacity(count))),
            buf_len,
            counters,
            fixed: Mutex::new(None),
        }
    }

    /// Registers the pool's buffers with `ring` as fixed buffers at
    /// `slots` (see [`IoRing::register_fixed`]): those allocated already
    /// now, the others when first allocated. Ring operations on them then
    /// skip pinning the pages each time. Buffers beyond the slots, or that
    /// the kernel refuses, work unregistered.
    pub fn register_with(&self, ring: &Arc<IoRing>, slots: std::ops::Range<u16>) {
        let mut fixed = FixedSlots {
            ring: ring.clone(),
            next: slots.start,
            end: slots.end,
        };
        for slot in self.free.lock().iter_mut() {
            if slot.fixed.is_none() {
                slot.fixed = fixed.register(&mut slot.buf);
            }
        }
        *self.fixed.lock() = Some(fixed);
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
                let mut buf = AlignedBuf::new(self.buf_len, BUF_ALIGN)?;
                let fixed = self
                    .fixed
                    .lock()
                    .as_mut()
                    .and_then(|f| f.register(&mut buf));
                Slot { buf, fixed }
            }
        };
        Ok(PooledBuf {
            buf: Some(slot.buf),
            fixed: slot.fixed,
            free: self.free.clone(),
            _permit: permit,
        })
    }

    /// [`BufferPool::get`] for threads outside an async runtime (tests,
    /// benchmarks, blocking tools). Never call it from async code: it blocks
    /// the thread until a buffer is free.
    pub fn get_blocking(&self) -> std::io::Result<PooledBuf> {
        block_on(self.get())
    }
}

impl FixedSlots {
    /// Registers `buf` at the next free slot, if there is one and the
    /// kernel takes it.
    fn register(&mut self, buf: &mut AlignedBuf) -> Option<u16> {
        if self.next >= self.end {
            return None;
        }
        match self.ring.register_fixed(self.next, buf) {
            Ok(()) => {
                self.next += 1;
                Some(self.next - 1)
            }
            Err(e) => {
                tracing::debug!(slot = self.next, error = %e, "cannot register a pool buffer with io_uring");
                // Do not try the remaining slots one by one.
                self.next = self.end;
                None
            }
        }
    }
}

/// A buffer on loan from a [`BufferPool`]; derefs to its bytes and goes
/// back to the pool when dropped.
pub struct PooledBuf {
    /// Always `Some` until `drop` takes it.
    buf: Option<AlignedBuf>,
    /// The ring slot the buffer is registered at.
    fixed: Option<u16>,
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
        self.fixed
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            // The buffer is back on the free list before the permit (dropped
            // after this body) lets the next `get` look for it.
            self.free.lock().push(Slot {
                buf,
                fixed: self.fixed,
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

/// Runs a future to completion on the current thread, parking it while the
/// future is pending. Enough for the pool's semaphore, which needs only a
/// waker, not a runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
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
        std::thread::sleep(Duration::from_millis(50));
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
