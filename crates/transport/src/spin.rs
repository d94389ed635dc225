//! Spinning before sleeping, while the server is idle.
//!
//! A client with one call at a time (a small overwrite, `stat` after
//! `stat`) sends its next call a few microseconds after it reads our reply.
//! If the server's thread has gone to sleep in `epoll_wait` meanwhile, that
//! call has to wake it: on a virtual machine whose idle vCPUs halt
//! (`haltpoll` with `guest_halt_poll_ns = 0`, as here), an inter-processor
//! interrupt and a halt exit, tens of microseconds, more than the call
//! itself costs. So when a connection that sends one call at a time (it
//! never had more in flight) has answered its call and no call is in
//! flight anywhere on the server, its reading loop keeps
//! looking at its socket for up to `idle_spin` before it sleeps: a
//! non-blocking `recv` every 4 µs, busy in between, on its own thread.
//! The look that finds bytes has read them, without waiting for the
//! runtime's epoll to report the socket readable (`ReadProgress::look`).
//! (Looks were a `FIONREAD` each until 2026-12-01, and the call then
//! a `recv` more.) It does not yield to the runtime between
//! looks: a yield (`tokio::task::yield_now`) makes the runtime wake its
//! other workers to steal work, and those futex wake-ups and context
//! switches cost more than the spin saved (measured: 2.1 -> 5.5 context
//! switches per 4 KiB READ at qd 1, no faster).
//!
//! Bounds, so that spinning never takes a CPU from work: one connection
//! spins at a time, server-wide; a spin stops as soon as a call is in
//! flight on any connection (work for that CPU) and after `idle_spin`
//! (so an idle server sleeps; at most 1 ms); a connection with calls of
//! its own in flight does not spin (its next call comes after their
//! replies). `idle_spin = 0` turns it off.
//!
//! Paced: a connection's spin does not look before seven eighths of the
//! time its last catch took (`Pace`): a client answers at its own pace,
//! and looks before its next call can be there are system calls for
//! nothing. Busy meanwhile, as between looks. Measured over 5,000 4 KiB
//! READs at qd 1, v3 and v4.1 (`perf stat` of the server by system call,
//! runs whose spins all caught): 13.5-15.5 looks per READ unpaced,
//! 3.6-4.4 paced at three quarters and a look every 2 µs; over v3 and
//! v4.0 (bench/run's `calls-read-4k`, 3 runs each): 4.0-4.8 looks at
//! three quarters and 2 µs, 1.8-2.8 at seven eighths and 4 µs, the p50
//! latency within the runs' noise (±15%).
//!
//! What it catches runs on the reading loop itself (the connection's
//! `run_call_here`), not as a task of its own, and the spin takes the
//! task's waker off the socket as it begins: otherwise the loop and the
//! call's task, or the socket and the spinning task, wake each other
//! every call, and tokio answers a task woken while it runs, and the
//! third wake-up in a row of tasks handing over to each other, by waking
//! its idle worker to steal (measured before this: 0.9 such wake-ups
//! per 1 KiB WRITE at qd 1, on the CPU the client runs on).
//!
//! What it costs others: the spin holds its runtime worker, and while a
//! worker runs a task the runtime's epoll may be polled by no one (tokio
//! polls it from a worker about to sleep). So a call from another client
//! that arrives during a spin (on a server with no call in flight) may
//! wait until the spin ends: at most `idle_spin`, 100 µs by default.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The default `idle_spin`: about what a client on another CPU takes from
/// reading a reply to sending its next call here.
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(100);

/// Calls in flight on the whole server and whether a connection spins:
/// shared by every connection of a server (through
/// [`super::ConnLimits::activity`]).
#[derive(Debug, Default)]
pub struct Activity {
    /// Calls read and not yet answered (reply written or dropped).
    calls: AtomicUsize,
    /// A connection's reading loop is spinning.
    spinning: AtomicBool,
}

/// One call in flight, counted in [`Activity`] until dropped.
pub(super) struct CallInFlight(Arc<Activity>);

impl Drop for CallInFlight {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::Release);
    }
}

/// The one spin allowed at a time; ended when dropped.
pub(super) struct Spinning<'a>(&'a Activity);

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        self.0.spinning.store(false, Ordering::Release);
    }
}

impl Activity {
    /// Counts a call that was just read, until the returned guard drops.
    pub(super) fn call(self: &Arc<Self>) -> CallInFlight {
        self.calls.fetch_add(1, Ordering::Acquire);
        CallInFlight(self.clone())
    }

    /// Whether any call is in flight on the server.
    pub(super) fn busy(&self) -> bool {
        self.calls.load(Ordering::Acquire) > 0
    }

    /// The right to spin, if the server is idle and no other connection
    /// spins.
    pub(super) fn try_spin(&self) -> Option<Spinning<'_>> {
        if self.busy() {
            return None;
        }
        self.spinning
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Spinning(self))
    }
}

/// When a connection's next spin first looks at its socket.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// How long the last spin that found a call looked (from its start to
    /// the look that found it).
    last_catch: Option<Duration>,
}

impl Pace {
    /// How long a spin waits before its first look: seven eighths of the
    /// last catch (so a client that got faster is found at the first look,
    /// and sets the pace lower for the next), nothing without one.
    pub(super) fn quiet(&self) -> Duration {
        self.last_catch.map_or(Duration::ZERO, |c| c * 7 / 8)
    }

    /// The spin found a call `after` its start.
    pub(super) fn caught(&mut self, after: Duration) {
        self.last_catch = Some(after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spinner_and_only_while_no_call_is_in_flight() {
        let a = Arc::new(Activity::default());
        let first = a.try_spin().expect("idle server");
        assert!(a.try_spin().is_none(), "a second spinner");
        drop(first);
        let call = a.call();
        assert!(a.busy());
        assert!(a.try_spin().is_none(), "spinning beside a call");
        drop(call);
        assert!(!a.busy());
        assert!(a.try_spin().is_some());
    }

    #[test]
    fn a_spin_first_looks_at_seven_eighths_of_the_last_catch() {
        let mut pace = Pace::default();
        assert_eq!(pace.quiet(), Duration::ZERO);
        pace.caught(Duration::from_micros(40));
        assert_eq!(pace.quiet(), Duration::from_micros(35));
        // A faster client: caught at the first look, the pace follows.
        pace.caught(Duration::from_micros(35));
        assert_eq!(pace.quiet(), Duration::from_nanos(30_625));
    }
}
