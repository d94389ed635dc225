//! Log lines that repeat, a few at a time. A thousand clients stalled at
//! once (an attack, a network partition, a client host that hung) would
//! otherwise write a thousand identical warnings, and a full filesystem one
//! error per WRITE refused (ten thousand in five seconds of an IOR-hard
//! run): the first [`BURST`] of each kind in a [`WINDOW`] are logged one by
//! one, the last of them saying that more are only counted (a metric counts
//! every one), and the next line after the window says how many were not
//! logged.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Lines per kind per window.
pub(crate) const BURST: u32 = 10;

/// The window.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// What to log for one more event of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Say {
    /// Its line; `held_back` events of this kind before it were not
    /// logged; `last`: the window's last line, which says that more are
    /// only counted.
    Line { held_back: u64, last: bool },
    /// Nothing: counted.
    Nothing,
}

/// The lines left for one kind of event.
#[derive(Debug)]
pub(crate) struct LogBudget {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When the current window began (`None`: no line yet).
    since: Option<Instant>,
    /// Lines logged in it.
    logged: u32,
    /// Events not logged since the last line.
    held_back: u64,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::default()),
        }
    }
}

impl LogBudget {
    /// What to log for one more event of this kind at `now`.
    pub(crate) fn next(&self, now: Instant) -> Say {
        let mut st = self.state.lock();
        if st
            .since
            .is_none_or(|since| now.duration_since(since) >= WINDOW)
        {
            st.since = Some(now);
            st.logged = 0;
        }
        if st.logged == BURST {
            st.held_back += 1;
            return Say::Nothing;
        }
        st.logged += 1;
        Say::Line {
            held_back: std::mem::take(&mut st.held_back),
            last: st.logged == BURST,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_logged_then_counted_then_summed_up_after_the_window() {
        let log = LogBudget::default();
        let t0 = Instant::now();
        let line = |held_back, last| Say::Line { held_back, last };
        for i in 1..BURST {
            assert_eq!(log.next(t0), line(0, false), "line {i}");
        }
        assert_eq!(log.next(t0), line(0, true));
        for _ in 0..990 {
            assert_eq!(log.next(t0 + WINDOW / 2), Say::Nothing);
        }
        // The next window's first line says how many were not logged.
        assert_eq!(log.next(t0 + WINDOW), line(990, false));
        assert_eq!(log.next(t0 + WINDOW), line(0, false));
        // A quiet spell: a new window, nothing held back.
        assert_eq!(log.next(t0 + 5 * WINDOW), line(0, false));
    }
}
