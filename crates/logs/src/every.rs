//! A log line that may come once per call, written at most once a period:
//! for conditions that last (the state directory's filesystem full) and
//! that every call on a file would otherwise report again.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// When a line was last written; [`LogEvery::due`] says whether to write
/// it again.
pub struct LogEvery {
    every: Duration,
    last: Mutex<Option<Instant>>,
}

impl LogEvery {
    /// A line written at most once per `every`.
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            last: Mutex::new(None),
        }
    }

    /// Whether to write the line now (and then not again for the period).
    pub fn due(&self) -> bool {
        self.due_at(Instant::now())
    }

    fn due_at(&self, now: Instant) -> bool {
        let mut last = self.last.lock();
        if last.is_some_and(|at| now.saturating_duration_since(at) < self.every) {
            return false;
        }
        *last = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_period() {
        let minute = Duration::from_secs(60);
        let log = LogEvery::new(minute);
        let t0 = Instant::now();
        assert!(log.due_at(t0));
        assert!(!log.due_at(t0 + minute / 2));
        assert!(log.due_at(t0 + minute));
        assert!(!log.due_at(t0 + minute + minute / 2));
    }
}
