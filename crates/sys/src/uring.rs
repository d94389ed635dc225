//! Positioned reads and writes through io_uring, completed without a
//! thread waiting.
//!
//! Why: a READ run on a thread of a blocking pool costs a hand-off to that
//! thread and back (wake-ups, context switches) that dominates a 4 KiB
//! direct READ. With io_uring the connection's own task submits the read
//! (one `io_uring_enter`, which issues an `O_DIRECT` read inline) and is
//! woken when it completes: the kernel posts the completion and signals an
//! eventfd, whose readiness the caller's event loop watches and answers
//! with [`Uring::reap`].
//!
//! The read's target buffer is owned by the ring until the kernel is done
//! with it, also when the waiting [`UringOp`] is dropped first (its
//! caller gave up): the buffer is dropped only once its completion has been
//! reaped, so the kernel never writes into freed or reused memory.
//!
//! A tokio task runs [`drive`], which reaps whenever the ring's eventfd
//! is readable; [`Uring::reap`] can also be called by hand (tests).

use std::future::Future;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, types, IoUring};

use crate::buf::AlignedBuf;
use crate::io::RwFlags;

/// A buffer an operation reads into or writes from: it owns (directly or
/// through something it owns) the [`AlignedBuf`] the kernel uses. The ring
/// holds the value, untouched, from submission until the completion is
/// reaped.
pub trait RingBuf: Send + 'static {
    /// The aligned buffer.
    fn aligned_mut(&mut self) -> &mut AlignedBuf;

    /// The index this buffer's aligned buffer was registered under with
    /// [`Uring::register_fixed`] on the ring it is submitted to, if it
    /// was: operations on it then use the pages the kernel pinned once,
    /// instead of pinning them for every read and write. The ring checks
    /// that the operation's bytes lie inside the buffer registered there
    /// (and the kernel checks it again).
    fn fixed_index(&self) -> Option<u16> {
        None
    }
}

impl RingBuf for AlignedBuf {
    fn aligned_mut(&mut self) -> &mut AlignedBuf {
        self
    }
}

/// What a submission does.
enum Op {
    Read,
    Write { flags: RwFlags, personality: u16 },
}

/// The state of one submitted operation.
enum Slot<B> {
    Free,
    /// In the kernel; the future waiting for it last left this waker.
    Waiting {
        buf: B,
        waker: Option<Waker>,
    },
    /// Completed (a byte count or a negative errno), not yet collected.
    Done {
        buf: B,
        result: i32,
    },
    /// In the kernel, and nobody waits for it any more: the buffer is
    /// dropped when it completes.
    Abandoned {
        buf: B,
    },
}

struct Inner<B> {
    ring: IoUring,
    slots: Vec<Slot<B>>,
    free: Vec<u32>,
    /// Address range of the buffer registered at each fixed index.
    fixed: Vec<Option<Range<usize>>>,
}

/// One io_uring instance for reads and writes with buffers of type `B`.
pub struct Uring<B: RingBuf> {
    inner: Mutex<Inner<B>>,
    /// Signalled by the kernel for each completion (`IORING_REGISTER_EVENTFD`).
    event: OwnedFd,
    /// Operations submitted on registered (fixed) buffers.
    fixed_ops: std::sync::atomic::AtomicU64,
}

impl<B: RingBuf> Uring<B> {
    /// A ring with room for `depth` reads in the kernel at once (a read
    /// asked for beyond that is refused with `WouldBlock`: the caller reads
    /// some other way). Fails where io_uring is unavailable (old kernel,
    /// `kernel.io_uring_disabled`, seccomp).
    pub fn new(depth: u32) -> io::Result<Self> {
        Self::with_fixed_buffers(depth, 0)
    }

    /// [`Uring::new`] with an empty table of `fixed` buffer slots, filled
    /// with [`Uring::register_fixed`]. A kernel that refuses the table
    /// (too old, or the buffers would exceed `RLIMIT_MEMLOCK` for a
    /// process without `CAP_IPC_LOCK`) leaves the ring without one: see
    /// [`Uring::fixed_slots`].
    pub fn with_fixed_buffers(depth: u32, fixed: u16) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        // The completion queue is twice the submission queue by default,
        // and at most `depth` reads are ever in flight, so it can never
        // overflow and `io_uring_enter` never refuses work for that.
        let ring = IoUring::builder().build(depth)?;
        // SAFETY: eventfd(2) takes no pointers; a non-negative result is a
        // new descriptor that nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(event.as_raw_fd())?;
        let slots = (0..depth).map(|_| Slot::Free).collect();
        let free = (0..depth).rev().collect();
        let fixed = if fixed > 0
            && ring
                .submitter()
                .register_buffers_sparse(u32::from(fixed))
                .is_ok()
        {
            vec![None; usize::from(fixed)]
        } else {
            Vec::new()
        };
        Ok(Self {
            inner: Mutex::new(Inner {
                ring,
                slots,
                free,
                fixed,
            }),
            event,
            fixed_ops: Default::default(),
        })
    }

    /// Fixed buffer slots the ring has (0 if it has no table).
    pub fn fixed_slots(&self) -> u16 {
        u16::try_from(self.lock().fixed.len()).unwrap_or(u16::MAX)
    }

    /// Operations submitted on fixed buffers so far.
    pub fn fixed_ops(&self) -> u64 {
        self.fixed_ops.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Registers `buf` at fixed slot `index`: the kernel pins its pages
    /// now, once. From then on a [`RingBuf`] whose `fixed_index` is
    /// `index` is read into and written from through that registration.
    /// Before `buf` is freed, give the slot back
    /// ([`Uring::unregister_fixed`]): else its pages stay pinned, the
    /// kernel's, for as long as the ring lives (operations naming the
    /// index never touch the new owner of the addresses: the ring refuses
    /// operations outside the registered range).
    pub fn register_fixed(&self, index: u16, buf: &mut AlignedBuf) -> io::Result<()> {
        Self::register_at(&mut self.lock(), index, buf)
    }

    /// [`Uring::register_fixed`] at the first empty slot, which it
    /// returns; `None` when every slot is taken (or the ring has no
    /// table).
    pub fn register_fixed_free(&self, buf: &mut AlignedBuf) -> io::Result<Option<u16>> {
        let mut inner = self.lock();
        let Some(index) = inner.fixed.iter().position(Option::is_none) else {
            return Ok(None);
        };
        // The table has at most u16::MAX slots (`with_fixed_buffers`).
        let index = u16::try_from(index).map_err(|_| io::ErrorKind::InvalidInput)?;
        Self::register_at(&mut inner, index, buf)?;
        Ok(Some(index))
    }

    /// Empties fixed slot `index`: the kernel drops its pin on the pages
    /// registered there (after operations in flight on them, which hold
    /// their own reference), and the slot can be registered again. Call
    /// it before the buffer registered there is freed, once no operation
    /// will name the slot for it any more.
    pub fn unregister_fixed(&self, index: u16) -> io::Result<()> {
        let mut inner = self.lock();
        match inner.fixed.get(usize::from(index)) {
            Some(Some(_)) => {}
            Some(None) => return Err(io::ErrorKind::NotFound.into()),
            None => return Err(io::ErrorKind::InvalidInput.into()),
        }
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: an empty iovec (null, 0) hands the kernel no memory: it
        // makes the slot sparse again (IORING_REGISTER_BUFFERS_UPDATE,
        // Linux 5.19+, as the sparse table itself).
        unsafe {
            inner
                .ring
                .submitter()
                .register_buffers_update(u32::from(index), &[empty], None)?;
        }
        inner.fixed[usize::from(index)] = None;
        Ok(())
    }

    fn register_at(inner: &mut Inner<B>, index: u16, buf: &mut AlignedBuf) -> io::Result<()> {
        let Some(slot) = inner.fixed.get(usize::from(index)) else {
            return Err(io::ErrorKind::InvalidInput.into());
        };
        if slot.is_some() {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let bytes: &mut [u8] = buf;
        let iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        let start = bytes.as_ptr() as usize;
        // SAFETY: the iovec describes `buf`'s own allocation, valid now;
        // the kernel pins its pages during this call and keeps them, so
        // nothing the caller later does with the allocation can make the
        // kernel touch memory it does not hold. Operations are only ever
        // submitted on it for ranges inside it (checked in `submit`).
        unsafe {
            inner
                .ring
                .submitter()
                .register_buffers_update(u32::from(index), &[iov], None)?;
        }
        inner.fixed[usize::from(index)] = Some(start..start + bytes.len());
        Ok(())
    }

    /// The eventfd that becomes readable when reads complete: call
    /// [`Uring::reap`] then.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    fn lock(&self) -> MutexGuard<'_, Inner<B>> {
        // A panic while holding the lock leaves no half-done state behind
        // (slots change in single assignments), so a poisoned lock is fine.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `range.len()` bytes at `offset` of `file` into `range` of
    /// `buf`'s aligned buffer. The read is in the kernel when this returns;
    /// the future yields the buffer back with the byte count. `file` only
    /// needs to be open during this call (the kernel holds its own
    /// reference from submission on).
    ///
    /// Errors: `WouldBlock` when the ring is full; an out-of-bounds `range`
    /// is `InvalidInput`. The buffer comes back with the error.
    pub fn read(
        self: &Arc<Self>,
        file: BorrowedFd<'_>,
        buf: B,
        range: Range<usize>,
        offset: u64,
    ) -> Result<UringOp<B>, (io::Error, B)> {
        self.submit(Op::Read, file, buf, range, offset)
    }

    /// Writes `range` of `buf`'s aligned buffer at `offset` of `file`,
    /// with per-write `flags` (`RWF_DSYNC`, `RWF_SYNC`, as `pwritev2`),
    /// as the credentials registered under `personality` (see
    /// [`Uring::register_personality`]): the kernel checks and applies them
    /// as for that user's own write (set-id bits cleared, quotas), also
    /// when it finishes the write on one of its worker threads. Otherwise
    /// as [`Uring::read`].
    pub fn write(
        self: &Arc<Self>,
        file: BorrowedFd<'_>,
        buf: B,
        range: Range<usize>,
        offset: u64,
        flags: RwFlags,
        personality: u16,
    ) -> Result<UringOp<B>, (io::Error, B)> {
        self.submit(Op::Write { flags, personality }, file, buf, range, offset)
    }

    /// [`Uring::write`], then, while the kernel writes, `observe` on the
    /// bytes being written (`range` of the buffer): work over the data
    /// that overlaps the write, such as checksumming it (seed 003), on a
    /// buffer nobody can change meanwhile. Returns the operation and what
    /// `observe` returned; on a submission error `observe` is not called.
    // `write`'s arguments plus the observer.
    #[allow(clippy::too_many_arguments)]
    pub fn write_observed<R>(
        self: &Arc<Self>,
        file: BorrowedFd<'_>,
        mut buf: B,
        range: Range<usize>,
        offset: u64,
        flags: RwFlags,
        personality: u16,
        observe: impl FnOnce(&[u8]) -> R,
    ) -> Result<(UringOp<B>, R), (io::Error, B)> {
        let Some(bytes) = buf.aligned_mut().get(range.clone()) else {
            return Err((io::ErrorKind::InvalidInput.into(), buf));
        };
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        let op = self.submit(Op::Write { flags, personality }, file, buf, range, offset)?;
        // SAFETY: `ptr..ptr + len` lies inside the aligned buffer of the
        // value now stored in the operation's slot, a heap allocation of
        // its own that moving the value does not move. The buffer is
        // neither dropped nor written until `op` has completed *and* been
        // collected or dropped: `op` is still here, so it is neither
        // (`reap` only moves a completed buffer into `Slot::Done`, where
        // it stays until `op` collects it). The kernel only reads the
        // bytes of a write, and nothing else can reach them, so a shared
        // slice over them is sound for the duration of `observe`.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
        let seen = observe(bytes);
        Ok((op, seen))
    }

    /// Registers the calling thread's current credentials (fsuid, fsgid,
    /// groups, capabilities) with the ring; the id names them in
    /// [`Uring::write`]. Operations in flight keep their own reference, so
    /// [`Uring::unregister_personality`] is safe at any time.
    pub fn register_personality(&self) -> io::Result<u16> {
        self.lock().ring.submitter().register_personality()
    }

    /// Forgets a personality registered with [`Uring::register_personality`].
    pub fn unregister_personality(&self, id: u16) -> io::Result<()> {
        self.lock().ring.submitter().unregister_personality(id)
    }

    fn submit(
        self: &Arc<Self>,
        op: Op,
        file: BorrowedFd<'_>,
        mut buf: B,
        range: Range<usize>,
        offset: u64,
    ) -> Result<UringOp<B>, (io::Error, B)> {
        let target = buf.aligned_mut();
        if range.start > range.end || range.end > target.len() {
            return Err((io::ErrorKind::InvalidInput.into(), buf));
        }
        let Ok(len) = u32::try_from(range.len()) else {
            return Err((io::ErrorKind::InvalidInput.into(), buf));
        };
        // The pointer stays valid while `buf` lives, wherever `buf` moves:
        // an AlignedBuf's bytes are a heap allocation of their own.
        let ptr = target[range].as_mut_ptr();
        let fixed_index = buf.fixed_index();
        let mut inner = self.lock();
        // A fixed index is used only if the bytes lie inside the buffer
        // registered there.
        let bytes = ptr as usize..ptr as usize + len as usize;
        let fixed = fixed_index.filter(|&i| {
            inner.fixed.get(usize::from(i)).is_some_and(|r| {
                r.as_ref()
                    .is_some_and(|r| r.start <= bytes.start && bytes.end <= r.end)
            })
        });
        let Some(slot) = inner.free.pop() else {
            return Err((io::ErrorKind::WouldBlock.into(), buf));
        };
        let fd = types::Fd(file.as_raw_fd());
        let entry = match (op, fixed) {
            (Op::Read, None) => opcode::Read::new(fd, ptr, len).offset(offset).build(),
            (Op::Read, Some(i)) => opcode::ReadFixed::new(fd, ptr, len, i)
                .offset(offset)
                .build(),
            (Op::Write { flags, personality }, None) => opcode::Write::new(fd, ptr, len)
                .offset(offset)
                .rw_flags(flags.bits() as i32)
                .build()
                .personality(personality),
            (Op::Write { flags, personality }, Some(i)) => opcode::WriteFixed::new(fd, ptr, len, i)
                .offset(offset)
                .rw_flags(flags.bits() as i32)
                .build()
                .personality(personality),
        }
        .user_data(u64::from(slot));
        if fixed.is_some() {
            self.fixed_ops
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: the entry's buffer (`ptr`, `len`) lies inside `buf`'s
        // aligned buffer (checked above), and `buf` is stored in the slot
        // below and kept there, unmoved in memory terms and unused, until
        // `reap` has seen this entry's completion. The descriptor is open
        // for the duration of this call, and the entry is submitted before
        // the call returns (below), at which point the kernel holds its own
        // reference to the file.
        let pushed = unsafe { inner.ring.submission().push(&entry) };
        if pushed.is_err() {
            // The submission queue holds at most `depth` entries and each
            // is submitted at once, so it is never full; be safe anyway.
            inner.free.push(slot);
            return Err((io::ErrorKind::WouldBlock.into(), buf));
        }
        inner.slots[slot as usize] = Slot::Waiting { buf, waker: None };
        // The entry must reach the kernel now, while the descriptor is
        // known to be open: retry interrupted or momentarily refused
        // submissions (no completion queue overflow is possible, see `new`).
        loop {
            match inner.ring.submit() {
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) || e.raw_os_error() == Some(libc::EBUSY) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => {
                    // Not submitted, and still in the queue: it would be
                    // submitted later with a descriptor that may be closed
                    // by then. Nothing sane can follow.
                    eprintln!("dionfs: io_uring submission failed: {e}; aborting");
                    std::process::abort();
                }
            }
        }
        Ok(UringOp {
            ring: self.clone(),
            slot,
            finished: false,
        })
    }

    /// Collects completed reads: wakes the futures waiting for them and
    /// drops the buffers of abandoned ones. Call it when
    /// [`Uring::event_fd`] is readable (and whenever, harmlessly).
    pub fn reap(&self) {
        // The eventfd's count is never read back (a system call per
        // completion for nothing): [`drive`] watches it edge-triggered, and
        // every completion signals it anew, which is a new edge whatever
        // the count (the kernel caps it rather than fail or stop waking).
        let mut wake = Vec::new();
        let mut dropped = Vec::new();
        {
            let mut inner = self.lock();
            let Inner {
                ring, slots, free, ..
            } = &mut *inner;
            for cqe in ring.completion() {
                let Ok(index) = usize::try_from(cqe.user_data()) else {
                    continue;
                };
                let Some(slot) = slots.get_mut(index) else {
                    continue;
                };
                match std::mem::replace(slot, Slot::Free) {
                    Slot::Waiting { buf, waker } => {
                        *slot = Slot::Done {
                            buf,
                            result: cqe.result(),
                        };
                        wake.extend(waker);
                    }
                    Slot::Abandoned { buf } => {
                        dropped.push(buf);
                        free.push(index as u32);
                    }
                    other => *slot = other,
                }
            }
        }
        // Outside the lock: a buffer's drop or a wake may take other locks.
        drop(dropped);
        wake.into_iter().for_each(Waker::wake);
    }
}

/// Reaps `ring`'s completions whenever its eventfd is readable, on the
/// current tokio runtime; returns only if watching the eventfd fails (then
/// reads already submitted would never be reported: the caller must stop).
pub async fn drive<B: RingBuf>(ring: Arc<Uring<B>>) -> io::Error {
    struct Event<B: RingBuf>(Arc<Uring<B>>);
    impl<B: RingBuf> AsRawFd for Event<B> {
        fn as_raw_fd(&self) -> RawFd {
            self.0.event.as_raw_fd()
        }
    }
    // SAFETY: the eventfd is owned by the ring, which `Event` keeps alive
    // for as long as the registration exists, and nothing closes or
    // replaces it meanwhile.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(Event(ring), tokio::io::Interest::READABLE)
    };
    let event = match registered {
        Ok(event) => event,
        Err(e) => return e.into(),
    };
    // tokio's epoll registrations are edge-triggered (mio's `EPOLLET`):
    // each signal of the eventfd is reported once, so its count need not
    // be drained (`Uring::reap`).
    loop {
        match event.readable().await {
            // Cleared before reaping: a read completing after the reap
            // signals the eventfd again, which is a new readiness.
            Ok(mut ready) => ready.clear_ready(),
            Err(e) => return e,
        }
        event.get_ref().0.reap();
    }
}

/// A read in the kernel; resolves to the buffer and the byte count (or the
/// read's error). Dropping it before then abandons the read: its buffer is
/// dropped once the kernel is done with it.
pub struct UringOp<B: RingBuf> {
    ring: Arc<Uring<B>>,
    slot: u32,
    finished: bool,
}

impl<B: RingBuf> Future for UringOp<B> {
    type Output = (io::Result<usize>, B);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.finished {
            panic!("UringOp polled after completion");
        }
        let index = self.slot as usize;
        let ring = self.ring.clone();
        let mut inner = ring.lock();
        match std::mem::replace(&mut inner.slots[index], Slot::Free) {
            Slot::Done { buf, result } => {
                inner.free.push(self.slot);
                drop(inner);
                self.finished = true;
                let result = usize::try_from(result)
                    .map_err(|_| io::Error::from_raw_os_error(result.saturating_neg()));
                Poll::Ready((result, buf))
            }
            Slot::Waiting { buf, .. } => {
                inner.slots[index] = Slot::Waiting {
                    buf,
                    waker: Some(cx.waker().clone()),
                };
                Poll::Pending
            }
            other => {
                inner.slots[index] = other;
                Poll::Pending
            }
        }
    }
}

impl<B: RingBuf> Drop for UringOp<B> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let index = self.slot as usize;
        let done = {
            let mut inner = self.ring.lock();
            match std::mem::replace(&mut inner.slots[index], Slot::Free) {
                Slot::Waiting { buf, .. } => {
                    inner.slots[index] = Slot::Abandoned { buf };
                    None
                }
                Slot::Done { buf, .. } => {
                    inner.free.push(self.slot);
                    Some(buf)
                }
                other => {
                    inner.slots[index] = other;
                    None
                }
            }
        };
        // Outside the lock, as in `reap`.
        drop(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Polls `fut` to completion, reaping whenever it is pending.
    fn run<B: RingBuf>(ring: &Uring<B>, mut fut: UringOp<B>) -> (io::Result<usize>, B) {
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(out) = Pin::new(&mut fut).poll(&mut cx) {
                return out;
            }
            ring.reap();
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    fn file_with(data: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(data).unwrap();
        f
    }

    #[test]
    fn reads_into_the_range_and_returns_the_buffer() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let f = file_with(&data);
        let ring = Arc::new(Uring::<AlignedBuf>::new(4).unwrap());
        let buf = AlignedBuf::new(16384, 4096).unwrap();
        let fut = ring.read(f.as_fd(), buf, 100..8292, 4096).ok().unwrap();
        let (n, buf) = run(&ring, fut);
        assert_eq!(n.unwrap(), 8192);
        assert_eq!(&buf[100..8292], &data[4096..4096 + 8192]);
        // Short at end of file.
        let fut = ring.read(f.as_fd(), buf, 0..16384, 16384).ok().unwrap();
        let (n, _) = run(&ring, fut);
        assert_eq!(n.unwrap(), 20_000 - 16384);
    }

    /// [`drive`] sees every completion although nothing reads the
    /// eventfd's count back: each one is a new edge. Reads one at a time,
    /// each awaited through the runtime, far more than any count that a
    /// level-triggered watch would need drained.
    #[test]
    fn drive_is_woken_by_every_completion_without_draining_the_eventfd() {
        let f = file_with(&[5u8; 8192]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ring = Arc::new(Uring::<AlignedBuf>::new(2).unwrap());
        rt.spawn(drive(ring.clone()));
        let mut buf = AlignedBuf::new(4096, 4096).unwrap();
        for i in 0..2000u64 {
            let op = ring
                .read(f.as_fd(), buf, 0..4096, (i % 2) * 4096)
                .ok()
                .unwrap();
            let (n, back) = rt
                .block_on(async {
                    tokio::time::timeout(std::time::Duration::from_secs(10), op).await
                })
                .unwrap_or_else(|_| panic!("read {i} never reported"));
            assert_eq!(n.unwrap(), 4096);
            buf = back;
        }
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `count`, on our stack.
        let got = unsafe { libc::read(ring.event.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        assert_eq!(got, 8);
        assert!(
            u64::from_ne_bytes(count) >= 2000,
            "every completion signalled it"
        );
    }

    #[test]
    fn errors_come_back_as_errno() {
        let f = file_with(b"x");
        // A write-only descriptor cannot be read: EBADF.
        let path = format!("/proc/self/fd/{}", f.as_raw_fd());
        let w = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let ring = Arc::new(Uring::<AlignedBuf>::new(2).unwrap());
        let buf = AlignedBuf::new(4096, 4096).unwrap();
        let fut = ring.read(w.as_fd(), buf, 0..4096, 0).ok().unwrap();
        let (n, _) = run(&ring, fut);
        assert_eq!(n.unwrap_err().raw_os_error(), Some(libc::EBADF));
    }

    #[test]
    fn a_full_ring_refuses_and_abandoned_reads_free_their_slot() {
        let f = file_with(&[7u8; 8192]);
        let ring = Arc::new(Uring::<AlignedBuf>::new(1).unwrap());
        let first = ring
            .read(f.as_fd(), AlignedBuf::new(4096, 4096).unwrap(), 0..4096, 0)
            .ok()
            .unwrap();
        let refused = ring.read(f.as_fd(), AlignedBuf::new(4096, 4096).unwrap(), 0..4096, 0);
        assert_eq!(
            refused.err().map(|(e, _)| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
        // Give up on the first: its slot comes back once it completes.
        drop(first);
        let mut again = None;
        dionfs_testfs::wait_until(
            || {
                ring.reap();
                let buf = AlignedBuf::new(4096, 4096).unwrap();
                again = ring.read(f.as_fd(), buf, 0..4096, 4096).ok();
                again.is_some()
            },
            std::time::Duration::from_secs(10),
            "the abandoned read's slot to come back",
        );
        let (n, buf) = run(&ring, again.expect("the abandoned read's slot came back"));
        assert_eq!(n.unwrap(), 4096);
        assert!(buf[..4096].iter().all(|&b| b == 7));
    }

    #[test]
    fn an_observed_write_shows_the_bytes_it_writes() {
        let f = file_with(&[0u8; 16384]);
        let ring = Arc::new(Uring::<AlignedBuf>::new(2).unwrap());
        let mut buf = AlignedBuf::new(16384, 4096).unwrap();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 249) as u8;
        }
        let want: Vec<u8> = buf[4096..12288].to_vec();
        let (op, seen) = ring
            .write_observed(f.as_fd(), buf, 4096..12288, 8192, RwFlags::NONE, 0, |b| {
                b.to_vec()
            })
            .ok()
            .unwrap();
        assert_eq!(seen, want);
        let (n, _) = run(&ring, op);
        assert_eq!(n.unwrap(), 8192);
        let mut back = vec![0u8; 8192];
        let n = crate::io::preadv2(f.as_fd(), &mut back, 8192, RwFlags::NONE).unwrap();
        assert_eq!(n, 8192);
        assert_eq!(back, want);
        // A range outside the buffer is refused before anything is seen.
        let buf = AlignedBuf::new(4096, 4096).unwrap();
        let refused = ring.write_observed(f.as_fd(), buf, 0..8192, 0, RwFlags::NONE, 0, |_| {
            panic!("observed a refused write")
        });
        assert_eq!(
            refused.err().map(|(e, _)| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
    }

    #[test]
    fn writes_run_as_their_personality() {
        use std::os::unix::fs::PermissionsExt;
        if !dionfs_testfs::runs_as_root("an io_uring personality of another user", &[]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suid");
        std::fs::write(&path, [0u8; 8192]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o4777)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let ring = Arc::new(Uring::<AlignedBuf>::new(2).unwrap());
        let root = ring.register_personality().unwrap();
        let nobody = crate::cred::Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        };
        let user = crate::cred::with_creds(&nobody, || ring.register_personality())
            .unwrap()
            .unwrap();
        let mut buf = AlignedBuf::new(4096, 4096).unwrap();
        buf[..4096].fill(5);
        // As root (CAP_FSETID) the set-user-ID bit stays.
        let fut = ring
            .write(f.as_fd(), buf, 0..4096, 0, RwFlags::NONE, root)
            .ok()
            .unwrap();
        let (n, buf) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4096);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o4777);
        // As nobody it is cleared, as by nobody's own write.
        let fut = ring
            .write(f.as_fd(), buf, 0..4096, 4096, RwFlags::DSYNC, user)
            .ok()
            .unwrap();
        let (n, _) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4096);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o0777, "set-user-ID kept: {mode:o}");
        assert_eq!(std::fs::read(&path).unwrap(), [5u8; 8192]);
        ring.unregister_personality(user).unwrap();
    }

    #[test]
    fn out_of_range_targets_are_refused() {
        let f = file_with(b"abc");
        let ring = Arc::new(Uring::<AlignedBuf>::new(1).unwrap());
        let buf = AlignedBuf::new(4096, 4096).unwrap();
        let err = ring.read(f.as_fd(), buf, 0..8192, 0).err().unwrap();
        assert_eq!(err.0.kind(), io::ErrorKind::InvalidInput);
    }

    /// An AlignedBuf that says it is registered at slot `index`.
    struct Fixed(AlignedBuf, u16);
    impl RingBuf for Fixed {
        fn aligned_mut(&mut self) -> &mut AlignedBuf {
            &mut self.0
        }
        fn fixed_index(&self) -> Option<u16> {
            Some(self.1)
        }
    }

    #[test]
    fn fixed_buffers_are_read_into_and_written_from() {
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 249) as u8).collect();
        let f = file_with(&data);
        let ring = Arc::new(Uring::<Fixed>::with_fixed_buffers(4, 2).unwrap());
        if ring.fixed_slots() == 0 {
            eprintln!("skipped: no fixed buffer table (kernel or RLIMIT_MEMLOCK)");
            return;
        }
        let mut a = AlignedBuf::new(8192, 4096).unwrap();
        ring.register_fixed(1, &mut a).unwrap();
        assert_eq!(
            ring.register_fixed(1, &mut AlignedBuf::new(4096, 4096).unwrap())
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        let fut = ring
            .read(f.as_fd(), Fixed(a, 1), 100..4196, 4096)
            .ok()
            .unwrap();
        let (n, Fixed(mut a, _)) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(&a[100..4196], &data[4096..8192]);
        assert_eq!(ring.fixed_ops(), 1);
        a[..4].copy_from_slice(b"abcd");
        let fut = ring
            .write(f.as_fd(), Fixed(a, 1), 0..4, 3, RwFlags::NONE, 0)
            .ok()
            .unwrap();
        let (n, Fixed(a, _)) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4);
        assert_eq!(ring.fixed_ops(), 2);
        let mut back = vec![0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut back, 0).unwrap();
        assert_eq!(&back, &[0, 1, 2, b'a', b'b', b'c', b'd', 7]);
        // A buffer claiming a slot it is not registered at is not read
        // through it (slot 0 is empty): a plain read, not a fixed one.
        let other = AlignedBuf::new(4096, 4096).unwrap();
        let fut = ring
            .read(f.as_fd(), Fixed(other, 0), 0..4096, 0)
            .ok()
            .unwrap();
        let (n, _) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(ring.fixed_ops(), 2);
        ring.unregister_fixed(1).unwrap();
        drop(a);
    }

    #[test]
    fn fixed_slots_are_given_back_and_taken_again() {
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let f = file_with(&data);
        let ring = Arc::new(Uring::<Fixed>::with_fixed_buffers(4, 2).unwrap());
        if ring.fixed_slots() == 0 {
            eprintln!("skipped: no fixed buffer table (kernel or RLIMIT_MEMLOCK)");
            return;
        }
        let mut a = AlignedBuf::new(4096, 4096).unwrap();
        let mut b = AlignedBuf::new(4096, 4096).unwrap();
        let mut c = AlignedBuf::new(4096, 4096).unwrap();
        assert_eq!(ring.register_fixed_free(&mut a).unwrap(), Some(0));
        assert_eq!(ring.register_fixed_free(&mut b).unwrap(), Some(1));
        assert_eq!(ring.register_fixed_free(&mut c).unwrap(), None, "full");
        ring.unregister_fixed(0).unwrap();
        assert_eq!(
            ring.unregister_fixed(0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            ring.unregister_fixed(9).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        drop(a);
        // The freed slot is not used for a buffer still claiming it.
        let stale = AlignedBuf::new(4096, 4096).unwrap();
        let fut = ring
            .read(f.as_fd(), Fixed(stale, 0), 0..4096, 0)
            .ok()
            .unwrap();
        let (n, _) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(ring.fixed_ops(), 0);
        // Taken again by another buffer, and read through.
        assert_eq!(ring.register_fixed_free(&mut c).unwrap(), Some(0));
        let fut = ring
            .read(f.as_fd(), Fixed(c, 0), 0..4096, 4096)
            .ok()
            .unwrap();
        let (n, Fixed(c, _)) = run(&ring, fut);
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(&c[..4096], &data[4096..]);
        assert_eq!(ring.fixed_ops(), 1);
        ring.unregister_fixed(0).unwrap();
        ring.unregister_fixed(1).unwrap();
        drop((b, c));
    }
}
