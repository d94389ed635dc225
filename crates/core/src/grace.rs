//! The server's one grace period after a restart: while it lasts, clients
//! of the previous run reclaim the locks (and, with NFSv4, the opens and
//! delegations) they held, and nothing new that could conflict with a
//! reclaim is granted. One for every program, as knfsd's lockd and nfsd
//! share one (`locks_in_grace`): a v3 client's NLM lock and a v4 client's
//! lock on one file are reclaimed in the same period, and neither program
//! grants the other's clients' ranges away before it ends.
//!
//! A program that finds clients recorded by the previous run holds the
//! grace period ([`Grace::hold`]) when it starts serving: it lasts
//! `period` from then, or from the last program's hold if several do.
//! Nobody holding it (a first start, or no client held state): no grace
//! period at all.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The grace period of one server start.
#[derive(Debug)]
pub struct Grace {
    /// How long the period lasts once held.
    period: Duration,
    /// When it ends, once a program has held it.
    until: Mutex<Option<Instant>>,
}

impl Grace {
    /// A server whose grace periods last `period`.
    pub fn new(period: Duration) -> Grace {
        Grace {
            period,
            until: Mutex::new(None),
        }
    }

    /// A program had clients before the restart: the grace period is on
    /// for `period` from now (or longer, if another program held it
    /// later), unless its length is zero. Whether it is on.
    pub fn hold(&self) -> bool {
        self.hold_at(Instant::now())
    }

    fn hold_at(&self, now: Instant) -> bool {
        if self.period.is_zero() {
            return false;
        }
        let mut until = self.until.lock();
        let end = now + self.period;
        *until = Some(until.map_or(end, |t| t.max(end)));
        true
    }

    /// Whether the grace period is on now: only reclaims are granted.
    pub fn active(&self) -> bool {
        self.active_at(Instant::now())
    }

    fn active_at(&self, now: Instant) -> bool {
        self.until.lock().is_some_and(|t| now < t)
    }

    /// Whether a grace period was held at all this run.
    pub fn was_held(&self) -> bool {
        self.until.lock().is_some()
    }

    /// Its length.
    pub fn period(&self) -> Duration {
        self.period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_grace_unless_a_program_holds_it() {
        let start = Instant::now();
        let s = Duration::from_secs;
        let g = Grace::new(s(90));
        assert!(!g.active_at(start));
        assert!(!g.was_held());
        assert!(g.hold_at(start));
        assert!(g.active_at(start + s(89)));
        assert!(!g.active_at(start + s(90)));
        // A program holding it later makes it end later, never earlier.
        assert!(g.hold_at(start + s(10)));
        assert!(g.active_at(start + s(99)));
        assert!(!g.active_at(start + s(100)));
        assert!(g.hold_at(start));
        assert!(g.active_at(start + s(99)));
    }

    #[test]
    fn a_zero_period_is_never_held() {
        let start = Instant::now();
        let g = Grace::new(Duration::ZERO);
        assert!(!g.hold_at(start));
        assert!(!g.active_at(start));
        assert!(!g.was_held());
    }
}
