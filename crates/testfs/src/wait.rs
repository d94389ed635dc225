//! Waiting for a condition with a deadline.
//!
//! A test that sleeps a fixed time and then asserts races the machine: too
//! short on a loaded one, wasted time on an idle one. Polling the condition
//! until a generous deadline says the same without the race. (Something
//! that must *not* happen cannot be shown by polling; such a test waits
//! until the state it is about is observable, then asserts.)

use std::time::{Duration, Instant};

/// The first pause between two looks at a condition; it doubles up to
/// [`MAX_PAUSE`], so that a condition true at once costs little and a slow
/// one is not looked at needlessly often.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Returns once `cond` holds; panics, naming `what`, if it still does not
/// after `timeout` (it is looked at once more at the deadline).
pub fn wait_until(mut cond: impl FnMut() -> bool, timeout: Duration, what: &str) {
    let mut looks = Looks::new(timeout);
    while !cond() {
        std::thread::sleep(looks.pause_before_next(what));
    }
}

/// [`wait_until`] for async tests: sleeps on the tokio timer, so the
/// runtime's other tasks (a server under test) run meanwhile.
pub async fn wait_until_async(mut cond: impl FnMut() -> bool, timeout: Duration, what: &str) {
    let mut looks = Looks::new(timeout);
    while !cond() {
        tokio::time::sleep(looks.pause_before_next(what)).await;
    }
}

/// When to look at a condition again, until a deadline.
struct Looks {
    timeout: Duration,
    deadline: Instant,
    pause: Duration,
}

impl Looks {
    fn new(timeout: Duration) -> Self {
        Looks {
            timeout,
            deadline: Instant::now() + timeout,
            pause: FIRST_PAUSE,
        }
    }

    /// How long to sleep before the next look (never past the deadline);
    /// panics, naming `what` was waited for, once the deadline has passed.
    fn pause_before_next(&mut self, what: &str) -> Duration {
        let now = Instant::now();
        if now >= self.deadline {
            panic!("timed out after {:?} waiting for {what}", self.timeout);
        }
        let pause = self.pause.min(self.deadline - now);
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn returns_once_the_condition_holds() {
        let looks = AtomicUsize::new(0);
        wait_until(
            || looks.fetch_add(1, Ordering::Relaxed) == 3,
            Duration::from_secs(10),
            "the fourth look",
        );
        assert_eq!(looks.load(Ordering::Relaxed), 4);
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible")]
    fn panics_at_the_deadline_naming_what_it_waited_for() {
        wait_until(|| false, Duration::from_millis(20), "the impossible");
    }

    #[test]
    fn async_returns_once_the_condition_holds() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let looks = AtomicUsize::new(0);
        rt.block_on(wait_until_async(
            || looks.fetch_add(1, Ordering::Relaxed) == 3,
            Duration::from_secs(10),
            "the fourth look",
        ));
        assert_eq!(looks.load(Ordering::Relaxed), 4);
    }
}
