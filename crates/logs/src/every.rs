//! A log line that may come once per call, written at most once a period:
//! for conditions that last (the state directory's filesystem full) and
//! that every call on a file would otherwise report again. [`LogEvery::due`]
//! says only whether to write; [`LogEvery::count`] also says how many
//! events the line stands for (connections refused over the cap).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// When a line was last written; [`LogEvery::due`] says whether to write
/// it again.
pub struct LogEvery {
    every: Duration,
    last: Mutex<Last>,
}

struct Last {
    /// When the line was last written (`None`: never).
    at: Option<Instant>,
    /// Events since then, written or not.
    events: u64,
}

impl LogEvery {
    /// A line written at most once per `every`.
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            last: Mutex::new(Last {
                at: None,
                events: 0,
            }),
        }
    }

    /// Whether to write the line now (and then not again for the period).
    pub fn due(&self) -> bool {
        self.count_at(Instant::now()).is_some()
    }

    /// One more event: if the line is due, how many events it stands for
    /// (this one and those not written since the last line).
    pub fn count(&self) -> Option<u64> {
        self.count_at(Instant::now())
    }

    fn count_at(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock();
        last.events += 1;
        if last
            .at
            .is_some_and(|at| now.saturating_duration_since(at) < self.every)
        {
            return None;
        }
        last.at = Some(now);
        Some(std::mem::take(&mut last.events))
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
        assert_eq!(log.count_at(t0), Some(1));
        assert_eq!(log.count_at(t0 + minute / 2), None);
        assert_eq!(log.count_at(t0 + minute / 2), None);
        // The next line stands for the two held back and itself.
        assert_eq!(log.count_at(t0 + minute), Some(3));
        assert_eq!(log.count_at(t0 + minute + minute / 2), None);
        assert_eq!(log.count_at(t0 + 3 * minute), Some(2));
    }
}
