//! Running a short job on another thread *while* the calling thread does
//! something else, both borrowing the caller's data: [`Helpers::join`].
//!
//! Why not a general pool (rayon): its idle workers spin, calling
//! `sched_yield` dozens of times after every job before they sleep, which
//! on a small machine costs more CPU than the job itself (a 1 MiB CRC32C
//! is about 20 µs). A helper here sleeps on its condition variable the
//! moment it has nothing to do, and a caller that finds every helper busy
//! runs the job itself, so nobody ever waits for a helper to come free.
//!
//! The one `unsafe` step: a job borrows the caller's stack, which a thread
//! spawned long before cannot name, so its lifetime is erased when it is
//! handed over. [`Helpers::join`] does not return, nor unwind, before the
//! helper has reported the job finished (a guard waits in its `Drop`), so
//! the borrow outlives every use of it, as with `std::thread::scope`.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// A fixed set of parked helper threads; see the module documentation.
pub struct Helpers {
    slots: Vec<Arc<Slot>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Helpers")
            .field("threads", &self.threads.len())
            .finish()
    }
}

/// One helper's mailbox.
struct Slot {
    state: Mutex<State>,
    changed: Condvar,
}

enum State {
    Idle,
    /// Handed over, not yet finished.
    Job(Job),
    Running,
    /// Finished; the panic payload if the job panicked.
    Done(Option<Box<dyn Any + Send>>),
    Exit,
}

/// A job with its lifetime erased (see the module documentation).
struct Job(*mut (dyn FnMut() + Send + 'static));

// SAFETY: the pointee is `Send` (the bound on the erased trait object), and
// the pointer is only dereferenced by the one helper it was handed to,
// while the caller that owns the pointee waits for it.
unsafe impl Send for Job {}

fn lock(slot: &Slot) -> MutexGuard<'_, State> {
    // A job's panic is caught outside the lock, so poisoning cannot come
    // from one; the state is plain data either way.
    slot.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `slot` until `take` accepts its state (`Ok`), leaving `leave`
/// in its place; a state `take` hands back (`Err`) stays as it was.
fn take_when<T>(slot: &Slot, leave: State, take: impl Fn(State) -> Result<T, State>) -> T {
    let mut state = lock(slot);
    loop {
        // `Running` only while the lock is held: nobody sees it.
        match take(std::mem::replace(&mut *state, State::Running)) {
            Ok(out) => {
                *state = leave;
                return out;
            }
            Err(other) => {
                *state = other;
                state = slot
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

impl Helpers {
    /// `threads` helpers named `name-N`. Fewer if the system refuses to
    /// start threads (the callers then run their jobs themselves).
    pub fn new(threads: usize, name: &str) -> Helpers {
        let mut slots = Vec::new();
        let mut handles = Vec::new();
        for i in 0..threads {
            let slot = Arc::new(Slot {
                state: Mutex::new(State::Idle),
                changed: Condvar::new(),
            });
            let mine = slot.clone();
            match std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || serve(&mine))
            {
                Ok(handle) => {
                    slots.push(slot);
                    handles.push(handle);
                }
                Err(_) => break,
            }
        }
        Helpers {
            slots,
            threads: handles,
        }
    }

    /// Runs `beside` on an idle helper while this thread runs `here`, and
    /// returns `here`'s result once both are done. With no helper idle,
    /// runs `here` and then `beside` on this thread. A panic in either is
    /// propagated to the caller, after both have ended.
    pub fn join<T>(&self, beside: impl FnOnce() + Send, here: impl FnOnce() -> T) -> T {
        let mut beside = Some(beside);
        let mut job = move || {
            if let Some(f) = beside.take() {
                f();
            }
        };
        let Some(slot) = self.claim_idle() else {
            let out = here();
            job();
            return out;
        };
        let job: &mut (dyn FnMut() + Send + '_) = &mut job;
        let job: *mut (dyn FnMut() + Send + '_) = job;
        // SAFETY: only the lifetime changes (same fat pointer layout). The
        // pointee lives on this frame, which the `Waiter` below keeps from
        // returning or unwinding until the helper reports the job done;
        // the helper does not touch the pointer after reporting.
        let job: *mut (dyn FnMut() + Send + 'static) = unsafe { std::mem::transmute(job) };
        *lock(slot) = State::Job(Job(job));
        slot.changed.notify_all();
        let waiter = Waiter(slot);
        let out = here();
        if let Some(payload) = waiter.wait() {
            panic::resume_unwind(payload);
        }
        out
    }

    /// An idle helper, now marked busy by the caller (which must hand it a
    /// job at once). Waits for a slot's lock rather than trying it: the lock
    /// is only ever held for a state change, and a helper that holds it for
    /// one (say, on its way back to sleep) is idle, not busy.
    fn claim_idle(&self) -> Option<&Arc<Slot>> {
        self.slots.iter().find(|slot| {
            let mut state = lock(slot);
            if matches!(*state, State::Idle) {
                *state = State::Running;
                true
            } else {
                false
            }
        })
    }
}

/// Waits for the job handed to a slot to finish, on [`Waiter::wait`] or,
/// while unwinding, on drop.
struct Waiter<'a>(&'a Slot);

impl Waiter<'_> {
    fn wait(self) -> Option<Box<dyn Any + Send>> {
        let payload = self.finish();
        std::mem::forget(self);
        payload
    }

    fn finish(&self) -> Option<Box<dyn Any + Send>> {
        take_when(self.0, State::Idle, |state| match state {
            State::Done(payload) => Ok(payload),
            other => Err(other),
        })
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // Unwinding out of `here`: the job still borrows this frame.
        let _ = self.finish();
    }
}

/// A helper thread's loop.
fn serve(slot: &Slot) {
    loop {
        let job = take_when(slot, State::Running, |state| match state {
            State::Job(job) => Ok(Some(job)),
            State::Exit => Ok(None),
            other => Err(other),
        });
        let Some(job) = job else {
            return;
        };
        // SAFETY: the caller that handed over `job` waits (in `Waiter`)
        // until `Done` is set below, so the pointee is alive and nobody
        // else uses it meanwhile.
        let run = AssertUnwindSafe(|| unsafe { (*job.0)() });
        let result = panic::catch_unwind(run);
        *lock(slot) = State::Done(result.err());
        slot.changed.notify_all();
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        for slot in &self.slots {
            // No job can be in flight: `join` borrows `self`.
            *lock(slot) = State::Exit;
            slot.changed.notify_all();
        }
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn the_job_runs_on_a_helper_while_the_caller_works() {
        let helpers = Helpers::new(1, "test-helper");
        let data = vec![7u8; 1000];
        let mut sum = 0u64;
        let caller = std::thread::current().id();
        let mut ran_on = None;
        // Both sides wait for each other: only true concurrency ends this.
        let both = Barrier::new(2);
        let here = helpers.join(
            || {
                ran_on = Some(std::thread::current().id());
                sum = data.iter().map(|&b| b as u64).sum();
                both.wait();
            },
            || {
                both.wait();
                data.len()
            },
        );
        assert_eq!(here, 1000);
        assert_eq!(sum, 7000);
        assert_ne!(ran_on, Some(caller));
        assert!(ran_on.is_some());
    }

    #[test]
    fn with_every_helper_busy_the_caller_runs_the_job() {
        let helpers = Helpers::new(1, "test-helper");
        let caller = std::thread::current().id();
        let mut inner_ran_on = None;
        // The outer job holds the only helper until the inner `join` ends.
        let hold = Barrier::new(2);
        helpers.join(
            || {
                hold.wait();
            },
            || {
                helpers.join(|| inner_ran_on = Some(std::thread::current().id()), || ());
                hold.wait();
            },
        );
        assert_eq!(inner_ran_on, Some(caller));
    }

    #[test]
    fn a_panicking_job_reaches_the_caller_after_both_ended_and_the_helper_lives_on() {
        let helpers = Helpers::new(1, "test-helper");
        let here_done = AtomicUsize::new(0);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            helpers.join(
                || panic!("job failed"),
                || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    here_done.fetch_add(1, Ordering::Relaxed);
                },
            )
        }));
        assert!(r.is_err());
        assert_eq!(here_done.load(Ordering::Relaxed), 1);
        // The helper still serves.
        let mut v = 0;
        helpers.join(|| v = 5, || ());
        assert_eq!(v, 5);
    }

    #[test]
    fn a_panicking_caller_waits_for_the_job_before_unwinding() {
        let helpers = Helpers::new(1, "test-helper");
        let finished = AtomicUsize::new(0);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            helpers.join(
                || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    finished.fetch_add(1, Ordering::Relaxed);
                },
                || panic!("caller failed"),
            )
        }));
        assert!(r.is_err());
        // The job borrowed this frame's `finished`: it ended before the
        // unwind left `join`.
        assert_eq!(finished.load(Ordering::Relaxed), 1);
    }
}
