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
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// io_uring for reads and writes with buffers of type `B`: one ring for
/// each thread that submits, up to the number asked for
/// ([`Uring::with_rings`]; the server asks for one per CPU, as many as
/// its runtime has workers), each thread submitting to the ring it was
/// given first and, should that one be full, to any other.
///
/// Why more than one: `io_uring_enter` runs a direct read's way through
/// the file system and block layer inline (several microseconds), and a
/// ring takes one submission at a time (the kernel's `uring_lock`, and
/// the completions of its reads run under it too). With one ring for
/// the server, the runtime's workers waited for each other there: a
/// contended lock and a futex sleep for one in seven 4 KiB READs at qd
/// 64, about 1 us of server CPU per READ over NFSv3 and 2 us over v4.1
/// (`perf record` call graphs: `Mutex::lock_contended` under
/// `Uring::submit` and `UringOp::poll`; with the submission moved out of
/// the lock, the same wait in the kernel, `mutex_spin_on_owner`).
///
/// Writes too: a personality ([`Uring::register_personality`]) is
/// registered in every ring, and named by its id in the first.
pub struct Uring<B: RingBuf> {
    rings: Box<[Ring<B>]>,
    /// Held while personalities are registered and unregistered.
    registering: Mutex<()>,
    /// Address range of the buffer registered at each fixed index (the
    /// same in every ring).
    fixed: Mutex<Vec<Option<Range<usize>>>>,
    /// Operations submitted on registered (fixed) buffers.
    fixed_ops: AtomicU64,
}

/// One io_uring instance. A lock for each part, taken in this order and
/// never the reverse: `submitting` or `reaping`, then a slot's, then
/// `free`. Polling an operation takes only its slot's, so it never waits
/// for a submission or a reap.
struct Ring<B> {
    ring: IoUring,
    /// Held to touch the submission queue and to enter the kernel. It
    /// holds the ring's ids of the personalities, by their id in the
    /// first ring (whose own list is empty: its ids are theirs).
    submitting: Mutex<Vec<(u16, u16)>>,
    /// Held to touch the completion queue.
    reaping: Mutex<()>,
    /// Each operation's state, by the index its entry carries.
    slots: Box<[Mutex<Slot<B>>]>,
    /// Indexes of free slots.
    free: Mutex<Vec<u32>>,
    /// Signalled by the kernel for each completion (`IORING_REGISTER_EVENTFD`).
    event: OwnedFd,
}

/// `m` locked. A panic while holding one of the ring's locks leaves no
/// half-done state behind (each changes in single assignments), so a
/// poisoned lock is fine.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The ring a thread submits to first: threads are numbered as they
/// first submit, and thread `n` takes ring `n % rings`.
fn home_ring(rings: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    }
    let home = HOME.with(|h| {
        if h.get() == usize::MAX {
            h.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        h.get()
    });
    home % rings
}

impl<B> Ring<B> {
    /// Unregisters this ring's personality for the first ring's `id`.
    fn forget_personality(&self, id: u16) -> io::Result<()> {
        let own = {
            let mut ids = lock(&self.submitting);
            let Some(at) = ids.iter().position(|&(first, _)| first == id) else {
                return Err(io::ErrorKind::NotFound.into());
            };
            ids.swap_remove(at).1
        };
        self.ring.submitter().unregister_personality(own)
    }

    /// A ring of `depth` entries with its eventfd, and a sparse table of
    /// `fixed` registered buffers if `fixed` is not 0 (false if the
    /// kernel refused it).
    fn new(depth: u32, fixed: u16) -> io::Result<(Self, bool)> {
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
        let table = fixed > 0
            && ring
                .submitter()
                .register_buffers_sparse(u32::from(fixed))
                .is_ok();
        let ring = Ring {
            ring,
            submitting: Mutex::new(Vec::new()),
            reaping: Mutex::new(()),
            slots: (0..depth).map(|_| Mutex::new(Slot::Free)).collect(),
            free: Mutex::new((0..depth).rev().collect()),
            event,
        };
        Ok((ring, table))
    }

    /// Sets fixed buffer slot `index` to `iov` (an empty one empties it).
    ///
    /// # Safety
    ///
    /// `iov` describes memory the caller owns and keeps valid while
    /// operations on it may run (or is empty).
    unsafe fn set_fixed(&self, index: u16, iov: libc::iovec) -> io::Result<()> {
        // SAFETY: as the caller promises; the kernel pins the pages of a
        // non-empty iovec during this call and keeps them.
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(u32::from(index), &[iov], None)?;
        }
        Ok(())
    }
}

impl<B: RingBuf> Uring<B> {
    /// One ring with room for `depth` reads in the kernel at once (a read
    /// asked for beyond that is refused with `WouldBlock`: the caller reads
    /// some other way). Fails where io_uring is unavailable (old kernel,
    /// `kernel.io_uring_disabled`, seccomp).
    pub fn new(depth: u32) -> io::Result<Self> {
        Self::with_rings(1, depth, 0)
    }

    /// [`Uring::new`] with an empty table of `fixed` buffer slots, filled
    /// with [`Uring::register_fixed`]. A kernel that refuses the table
    /// (too old, or the buffers would exceed `RLIMIT_MEMLOCK` for a
    /// process without `CAP_IPC_LOCK`) leaves the ring without one: see
    /// [`Uring::fixed_slots`].
    pub fn with_fixed_buffers(depth: u32, fixed: u16) -> io::Result<Self> {
        Self::with_rings(1, depth, fixed)
    }

    /// [`Uring::with_fixed_buffers`] with `rings` rings (at least one),
    /// each of `depth` entries and with the table of `fixed` slots:
    /// fixed buffers are used only if every ring took its table.
    pub fn with_rings(rings: usize, depth: u32, fixed: u16) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        let mut all = Vec::new();
        let mut tables = true;
        for _ in 0..rings.clamp(1, 64) {
            let (ring, table) = Ring::new(depth, fixed)?;
            tables &= table;
            all.push(ring);
        }
        let fixed = if fixed > 0 && tables {
            vec![None; usize::from(fixed)]
        } else {
            for ring in &all {
                let _ = ring.ring.submitter().unregister_buffers();
            }
            Vec::new()
        };
        Ok(Self {
            rings: all.into_boxed_slice(),
            registering: Mutex::new(()),
            fixed: Mutex::new(fixed),
            fixed_ops: Default::default(),
        })
    }

    /// How many rings it has.
    pub fn rings(&self) -> usize {
        self.rings.len()
    }

    /// Fixed buffer slots the rings have (0 if they have no table).
    pub fn fixed_slots(&self) -> u16 {
        u16::try_from(lock(&self.fixed).len()).unwrap_or(u16::MAX)
    }

    /// Operations submitted on fixed buffers so far.
    pub fn fixed_ops(&self) -> u64 {
        self.fixed_ops.load(Ordering::Relaxed)
    }

    /// Registers `buf` at fixed slot `index`, in every ring: the kernel
    /// pins its pages now, once. From then on a [`RingBuf`] whose
    /// `fixed_index` is `index` is read into and written from through
    /// that registration. Before `buf` is freed, give the slot back
    /// ([`Uring::unregister_fixed`]): else its pages stay pinned, the
    /// kernel's, for as long as the ring lives (operations naming the
    /// index never touch the new owner of the addresses: the ring refuses
    /// operations outside the registered range).
    pub fn register_fixed(&self, index: u16, buf: &mut AlignedBuf) -> io::Result<()> {
        self.register_at(&mut lock(&self.fixed), index, buf)
    }

    /// [`Uring::register_fixed`] at the first empty slot, which it
    /// returns; `None` when every slot is taken (or the ring has no
    /// table).
    pub fn register_fixed_free(&self, buf: &mut AlignedBuf) -> io::Result<Option<u16>> {
        let mut fixed = lock(&self.fixed);
        let Some(index) = fixed.iter().position(Option::is_none) else {
            return Ok(None);
        };
        // The table has at most u16::MAX slots (`with_fixed_buffers`).
        let index = u16::try_from(index).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.register_at(&mut fixed, index, buf)?;
        Ok(Some(index))
    }

    /// Empties fixed slot `index` in every ring: the kernel drops its pin
    /// on the pages registered there (after operations in flight on them,
    /// which hold their own reference), and the slot can be registered
    /// again. Call it before the buffer registered there is freed, once no
    /// operation will name the slot for it any more.
    pub fn unregister_fixed(&self, index: u16) -> io::Result<()> {
        let mut fixed = lock(&self.fixed);
        match fixed.get(usize::from(index)) {
            Some(Some(_)) => {}
            Some(None) => return Err(io::ErrorKind::NotFound.into()),
            None => return Err(io::ErrorKind::InvalidInput.into()),
        }
        let mut result = Ok(());
        for ring in self.rings.iter() {
            // SAFETY: an empty iovec hands the kernel no memory: it makes
            // the slot sparse again (IORING_REGISTER_BUFFERS_UPDATE, Linux
            // 5.19+, as the sparse table itself).
            let emptied = unsafe { ring.set_fixed(index, EMPTY_IOVEC) };
            result = result.and(emptied);
        }
        // Empty where it could be emptied; where not, the kernel keeps its
        // pin until the ring goes, and nothing names the index meanwhile
        // unless registered again (which replaces the registration).
        fixed[usize::from(index)] = None;
        result
    }

    /// Under the `fixed` lock (`fixed` is its table), so that `submit`
    /// and registrations see one table. All rings or none: a ring that
    /// refuses has the others emptied again.
    fn register_at(
        &self,
        fixed: &mut [Option<Range<usize>>],
        index: u16,
        buf: &mut AlignedBuf,
    ) -> io::Result<()> {
        let Some(slot) = fixed.get(usize::from(index)) else {
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
        for (n, ring) in self.rings.iter().enumerate() {
            // SAFETY: the iovec describes `buf`'s own allocation, valid
            // now; the kernel pins its pages during this call and keeps
            // them, so nothing the caller later does with the allocation
            // can make the kernel touch memory it does not hold.
            // Operations are only ever submitted on it for ranges inside
            // it (checked in `submit`).
            if let Err(e) = unsafe { ring.set_fixed(index, iov) } {
                for ring in &self.rings[..n] {
                    // SAFETY: an empty iovec hands the kernel no memory.
                    let _ = unsafe { ring.set_fixed(index, EMPTY_IOVEC) };
                }
                return Err(e);
            }
        }
        fixed[usize::from(index)] = Some(start..start + bytes.len());
        Ok(())
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
    /// groups, capabilities) with every ring; the id names them in
    /// [`Uring::write`]. Operations in flight keep their own reference,
    /// so [`Uring::unregister_personality`] is safe at any time.
    pub fn register_personality(&self) -> io::Result<u16> {
        let _registering = lock(&self.registering);
        let id = self.rings[0].ring.submitter().register_personality()?;
        for (n, ring) in self.rings.iter().enumerate().skip(1) {
            match ring.ring.submitter().register_personality() {
                Ok(own) => lock(&ring.submitting).push((id, own)),
                Err(e) => {
                    for ring in &self.rings[1..n] {
                        let _ = ring.forget_personality(id);
                    }
                    let _ = self.rings[0].ring.submitter().unregister_personality(id);
                    return Err(e);
                }
            }
        }
        Ok(id)
    }

    /// Forgets a personality registered with [`Uring::register_personality`].
    pub fn unregister_personality(&self, id: u16) -> io::Result<()> {
        let _registering = lock(&self.registering);
        let mut result = Ok(());
        for ring in self.rings.iter().skip(1) {
            result = result.and(ring.forget_personality(id));
        }
        result.and(self.rings[0].ring.submitter().unregister_personality(id))
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
        // A fixed index is used only if the bytes lie inside the buffer
        // registered there. (Its registration cannot change before the
        // entry is submitted: `buf` is registered there, and a slot is
        // given back only once no operation names it, `unregister_fixed`.)
        let bytes = ptr as usize..ptr as usize + len as usize;
        let fixed = fixed_index.filter(|&i| {
            lock(&self.fixed).get(usize::from(i)).is_some_and(|r| {
                r.as_ref()
                    .is_some_and(|r| r.start <= bytes.start && bytes.end <= r.end)
            })
        });
        // The thread's own ring first, then any with a free slot.
        let n = self.rings.len();
        let home = home_ring(n);
        let Some((index, slot)) = (0..n)
            .map(|k| (home + k) % n)
            .find_map(|i| lock(&self.rings[i].free).pop().map(|slot| (i, slot)))
        else {
            return Err((io::ErrorKind::WouldBlock.into(), buf));
        };
        let ring = &self.rings[index];
        let submitting = lock(&ring.submitting);
        // A write's personality, as this ring knows it; one this ring
        // does not know (not registered through `register_personality`)
        // is the first ring's id as given, and goes there.
        let (index, ring, slot, submitting, op) = match op {
            Op::Write { flags, personality } if index != 0 => {
                match submitting.iter().find(|&&(first, _)| first == personality) {
                    Some(&(_, own)) => (
                        index,
                        ring,
                        slot,
                        submitting,
                        Op::Write {
                            flags,
                            personality: own,
                        },
                    ),
                    None => {
                        drop(submitting);
                        lock(&ring.free).push(slot);
                        let Some(slot) = lock(&self.rings[0].free).pop() else {
                            return Err((io::ErrorKind::WouldBlock.into(), buf));
                        };
                        let first = &self.rings[0];
                        (0, first, slot, lock(&first.submitting), op)
                    }
                }
            }
            op => (index, ring, slot, submitting, op),
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
            self.fixed_ops.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the submission queue is taken only under `submitting`,
        // held here, so no other handle to it exists. The entry's buffer
        // (`ptr`, `len`) lies inside `buf`'s aligned buffer (checked
        // above), and `buf` is stored in the slot below and kept there,
        // unmoved in memory terms and unused, until `reap` has seen this
        // entry's completion. The descriptor is open for the duration of
        // this call, and the entry is submitted before the call returns
        // (below), at which point the kernel holds its own reference to
        // the file.
        let pushed = unsafe { ring.ring.submission_shared().push(&entry) };
        if pushed.is_err() {
            // The submission queue holds at most `depth` entries and each
            // is submitted at once, so it is never full; be safe anyway.
            drop(submitting);
            lock(&ring.free).push(slot);
            return Err((io::ErrorKind::WouldBlock.into(), buf));
        }
        // Before the kernel sees the entry (only `io_uring_enter` under
        // `submitting` shows it the queue), so its completion finds it.
        *lock(&ring.slots[slot as usize]) = Slot::Waiting { buf, waker: None };
        // The entry must reach the kernel now, while the descriptor is
        // known to be open: retry interrupted or momentarily refused
        // submissions (no completion queue overflow is possible, see `new`).
        loop {
            match ring.ring.submit() {
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
        drop(submitting);
        Ok(UringOp {
            uring: self.clone(),
            ring: index as u32,
            slot,
            finished: false,
        })
    }

    /// Collects completed operations of every ring: wakes the futures
    /// waiting for them and drops the buffers of abandoned ones. Call it
    /// when an eventfd of the rings is readable (and whenever,
    /// harmlessly).
    pub fn reap(&self) {
        for index in 0..self.rings.len() {
            self.reap_ring(index);
        }
    }

    /// [`Uring::reap`] of ring `index`.
    fn reap_ring(&self, index: usize) {
        // The eventfd's count is never read back (a system call per
        // completion for nothing): [`drive`] watches it edge-triggered, and
        // every completion signals it anew, which is a new edge whatever
        // the count (the kernel caps it rather than fail or stop waking).
        let Some(ring) = self.rings.get(index) else {
            return;
        };
        let mut wake = Vec::new();
        let mut dropped = Vec::new();
        {
            let _reaping = lock(&ring.reaping);
            // SAFETY: a ring's completion queue is taken only here, under
            // its `reaping`, so no other handle to it exists.
            for cqe in unsafe { ring.ring.completion_shared() } {
                let Ok(slot) = usize::try_from(cqe.user_data()) else {
                    continue;
                };
                let Some(cell) = ring.slots.get(slot) else {
                    continue;
                };
                let mut state = lock(cell);
                match std::mem::replace(&mut *state, Slot::Free) {
                    Slot::Waiting { buf, waker } => {
                        *state = Slot::Done {
                            buf,
                            result: cqe.result(),
                        };
                        wake.extend(waker);
                    }
                    Slot::Abandoned { buf } => {
                        drop(state);
                        dropped.push(buf);
                        lock(&ring.free).push(slot as u32);
                    }
                    other => *state = other,
                }
            }
        }
        // Outside the lock: a buffer's drop or a wake may take other locks.
        drop(dropped);
        wake.into_iter().for_each(Waker::wake);
    }
}

/// An empty iovec: given to a fixed slot, it empties it.
const EMPTY_IOVEC: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// Reaps `ring`'s completions whenever one of its eventfds is readable,
/// on the current tokio runtime (a task for each ring); returns only if
/// watching an eventfd fails (then operations already submitted would
/// never be reported: the caller must stop).
pub async fn drive<B: RingBuf>(ring: Arc<Uring<B>>) -> io::Error {
    let mut watchers = tokio::task::JoinSet::new();
    for index in 0..ring.rings.len() {
        watchers.spawn(drive_ring(ring.clone(), index));
    }
    match watchers.join_next().await {
        Some(Ok(e)) => e,
        Some(Err(e)) => io::Error::other(format!("io_uring watcher ended: {e}")),
        None => io::Error::other("io_uring has no ring to watch"),
    }
}

/// [`drive`] of ring `index`.
async fn drive_ring<B: RingBuf>(uring: Arc<Uring<B>>, index: usize) -> io::Error {
    struct Event<B: RingBuf>(Arc<Uring<B>>, usize);
    impl<B: RingBuf> AsRawFd for Event<B> {
        fn as_raw_fd(&self) -> RawFd {
            self.0.rings[self.1].event.as_raw_fd()
        }
    }
    // SAFETY: the eventfd is owned by the ring, which `Event` keeps alive
    // for as long as the registration exists, and nothing closes or
    // replaces it meanwhile.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            Event(uring, index),
            tokio::io::Interest::READABLE,
        )
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
        let Event(uring, index) = event.get_ref();
        uring.reap_ring(*index);
    }
}

/// A read in the kernel; resolves to the buffer and the byte count (or the
/// read's error). Dropping it before then abandons the read: its buffer is
/// dropped once the kernel is done with it.
pub struct UringOp<B: RingBuf> {
    uring: Arc<Uring<B>>,
    ring: u32,
    slot: u32,
    finished: bool,
}

impl<B: RingBuf> UringOp<B> {
    fn ring(&self) -> &Ring<B> {
        &self.uring.rings[self.ring as usize]
    }
}

impl<B: RingBuf> Future for UringOp<B> {
    type Output = (io::Result<usize>, B);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.finished {
            panic!("UringOp polled after completion");
        }
        let this = &mut *self;
        let ring = &this.uring.rings[this.ring as usize];
        let mut slot = lock(&ring.slots[this.slot as usize]);
        match std::mem::replace(&mut *slot, Slot::Free) {
            Slot::Done { buf, result } => {
                drop(slot);
                lock(&ring.free).push(this.slot);
                this.finished = true;
                let result = usize::try_from(result)
                    .map_err(|_| io::Error::from_raw_os_error(result.saturating_neg()));
                Poll::Ready((result, buf))
            }
            Slot::Waiting { buf, waker } => {
                // The waker of the last poll, kept if it would wake the
                // same task (no clone).
                let waker = match waker {
                    Some(w) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                *slot = Slot::Waiting {
                    buf,
                    waker: Some(waker),
                };
                Poll::Pending
            }
            other => {
                *slot = other;
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
        let ring = self.ring();
        let done = {
            let mut slot = lock(&ring.slots[self.slot as usize]);
            match std::mem::replace(&mut *slot, Slot::Free) {
                Slot::Waiting { buf, .. } => {
                    *slot = Slot::Abandoned { buf };
                    None
                }
                Slot::Done { buf, .. } => {
                    drop(slot);
                    lock(&ring.free).push(self.slot);
                    Some(buf)
                }
                other => {
                    *slot = other;
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
    use std::os::fd::AsFd;
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
        let got = unsafe {
            libc::read(
                ring.rings[0].event.as_raw_fd(),
                count.as_mut_ptr().cast(),
                8,
            )
        };
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

    /// Threads submitting, polling and abandoning reads at once over two
    /// rings while another reaps (each part of a ring under its own
    /// lock): every read completes with its own bytes, none is lost, and
    /// every slot of every ring comes back.
    #[test]
    fn concurrent_submits_polls_and_reaps_lose_nothing() {
        const THREADS: u64 = 4;
        const READS: u64 = 300;
        const DEPTH: u32 = 8;
        let data: Vec<u8> = (0..64 * 4096u32)
            .map(|i| (i / 4096 * 7 + i % 13) as u8)
            .collect();
        let f = Arc::new(file_with(&data));
        const RINGS: usize = 2;
        let ring = Arc::new(Uring::<AlignedBuf>::with_rings(RINGS, DEPTH, 0).unwrap());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reaper = {
            let (ring, stop) = (ring.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ring.reap();
                    std::thread::yield_now();
                }
            })
        };
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ring, f, data) = (ring.clone(), f.clone(), data.clone());
                std::thread::spawn(move || {
                    let flag = Arc::new(Flag(Default::default()));
                    let waker = Waker::from(flag.clone());
                    let mut cx = Context::from_waker(&waker);
                    let mut done = 0;
                    for i in 0..READS {
                        let block = (t * READS + i) % 64;
                        let mut buf = AlignedBuf::new(4096, 4096).unwrap();
                        let mut op = loop {
                            match ring.read(f.as_fd(), buf, 0..4096, block * 4096) {
                                Ok(op) => break op,
                                Err((e, back)) => {
                                    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                                    buf = back;
                                    std::thread::yield_now();
                                }
                            }
                        };
                        if i % 5 == 0 {
                            // Given up on at once: its slot comes back when
                            // the reaper sees it complete.
                            drop(op);
                            continue;
                        }
                        let deadline =
                            std::time::Instant::now() + std::time::Duration::from_secs(20);
                        let (n, buf) = loop {
                            if let Poll::Ready(out) = Pin::new(&mut op).poll(&mut cx) {
                                break out;
                            }
                            assert!(
                                std::time::Instant::now() < deadline,
                                "read {i} of thread {t} lost"
                            );
                            std::thread::yield_now();
                        };
                        assert_eq!(n.unwrap(), 4096);
                        let at = (block * 4096) as usize;
                        assert!(buf[..4096] == data[at..at + 4096], "block {block}");
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let done: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(done, THREADS * (READS - READS / 5));
        // Every slot is free again once the abandoned reads are reaped.
        let mut held = Vec::new();
        dionfs_testfs::wait_until(
            || {
                let buf = AlignedBuf::new(4096, 4096).unwrap();
                if let Ok(op) = ring.read(f.as_fd(), buf, 0..4096, 0) {
                    held.push(op);
                }
                held.len() == RINGS * DEPTH as usize
            },
            std::time::Duration::from_secs(10),
            "every slot to come back",
        );
        stop.store(true, Ordering::Relaxed);
        reaper.join().unwrap();
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

    /// Personalities of root (this test's credentials) and of nobody,
    /// registered with `ring`.
    fn root_and_nobody<B: RingBuf>(ring: &Uring<B>) -> (u16, u16) {
        let root = ring.register_personality().unwrap();
        let nobody = crate::cred::Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        };
        let user = crate::cred::with_creds(&nobody, || ring.register_personality())
            .unwrap()
            .unwrap();
        (root, user)
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
        let (root, user) = root_and_nobody(&ring);
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

    /// With two rings, a write runs as its personality on either ring:
    /// one write held in flight on each (one slot per ring), as another
    /// user (the set-user-ID bit of its file cleared) and as root (kept).
    #[test]
    fn writes_run_as_their_personality_on_every_ring() {
        use std::os::unix::fs::PermissionsExt;
        if !dionfs_testfs::runs_as_root("an io_uring personality of another user", &[]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let suid_file = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, [0u8; 4096]).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o4777)).unwrap();
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            (path, f)
        };
        let mode =
            |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
        let ring = Arc::new(Uring::<AlignedBuf>::with_rings(2, 1, 0).unwrap());
        // The second ring's ids one ahead of the first's: a write there
        // under the first's id would run as the wrong personality.
        ring.rings[1]
            .ring
            .submitter()
            .register_personality()
            .unwrap();
        let (root, user) = root_and_nobody(&ring);
        for (who, kept) in [(user, 0o0777), (root, 0o4777)] {
            let (a, fa) = suid_file("a");
            let (b, fb) = suid_file("b");
            let write = |f: &std::fs::File| {
                ring.write(
                    f.as_fd(),
                    AlignedBuf::new(4096, 4096).unwrap(),
                    0..4096,
                    0,
                    RwFlags::NONE,
                    who,
                )
                .ok()
                .unwrap()
            };
            let first = write(&fa);
            let second = write(&fb);
            assert_ne!(first.ring, second.ring, "one write on each ring");
            for (op, path) in [(first, &a), (second, &b)] {
                let (n, _) = run(&ring, op);
                assert_eq!(n.unwrap(), 4096);
                assert_eq!(mode(path), kept, "{path:?} as personality {who}");
            }
        }
        ring.unregister_personality(user).unwrap();
        ring.unregister_personality(root).unwrap();
        assert_eq!(
            ring.unregister_personality(user).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
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

    /// With several rings, a thread whose ring is full submits to
    /// another, and a fixed buffer is one in every ring: reads through it
    /// from either ring are fixed reads of the right bytes, and an
    /// emptied slot is empty in both.
    #[test]
    fn a_full_ring_overflows_to_another_with_the_same_fixed_buffers() {
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 247) as u8).collect();
        let f = file_with(&data);
        let ring = Arc::new(Uring::<Fixed>::with_rings(2, 1, 2).unwrap());
        assert_eq!(ring.rings(), 2);
        if ring.fixed_slots() == 0 {
            eprintln!("skipped: no fixed buffer table (kernel or RLIMIT_MEMLOCK)");
            return;
        }
        let mut a = AlignedBuf::new(4096, 4096).unwrap();
        let mut b = AlignedBuf::new(4096, 4096).unwrap();
        ring.register_fixed(0, &mut a).unwrap();
        ring.register_fixed(1, &mut b).unwrap();
        // One slot per ring: the second read in flight takes the other
        // ring, and a third finds both full.
        let first = ring.read(f.as_fd(), Fixed(a, 0), 0..4096, 0).ok().unwrap();
        let second = ring
            .read(f.as_fd(), Fixed(b, 1), 0..4096, 8192)
            .ok()
            .unwrap();
        assert_ne!(first.ring, second.ring);
        let third = ring.read(
            f.as_fd(),
            Fixed(AlignedBuf::new(4096, 4096).unwrap(), 0),
            0..4096,
            0,
        );
        assert_eq!(
            third.err().map(|(e, _)| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
        let (n, Fixed(a, _)) = run(&ring, first);
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(&a[..], &data[..4096]);
        let (n, Fixed(b, _)) = run(&ring, second);
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(&b[..], &data[8192..12288]);
        assert_eq!(ring.fixed_ops(), 2);
        ring.unregister_fixed(0).unwrap();
        ring.unregister_fixed(1).unwrap();
        assert_eq!(
            ring.register_fixed_free(&mut AlignedBuf::new(4096, 4096).unwrap())
                .unwrap(),
            Some(0)
        );
        ring.unregister_fixed(0).unwrap();
        drop((a, b));
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
