//! Log lines that repeat, a few at a time. A thousand clients stalled at
//! once (an attack, a network partition, a client host that hung) would
//! otherwise write a thousand identical warnings, and a full filesystem one
//! error per WRITE refused (ten thousand in five seconds of an IOR-hard
//! run): the first [`BURST`] of each kind in a [`WINDOW`] are logged one by
//! one, the last of them saying that more are only counted (a metric counts
//! every one), and the next line after the window says how many were not
//! logged. Refusals of a client (its source port not reserved, its address
//! not in the export's client list) are logged once per client and export
//! every [`CLIENT_WARN_EVERY`] instead ([`ClientWarnings`]): any host that
//! reaches the port could otherwise write the log as fast as it sends calls.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Lines per kind per window.
pub const BURST: u32 = 10;

/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// What to log for one more event of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// Its line; `held_back` events of this kind before it were not
    /// logged; `last`: the window's last line, which says that more are
    /// only counted.
    Line { held_back: u64, last: bool },
    /// Nothing: counted.
    Nothing,
}

/// The lines left for one kind of event.
#[derive(Debug)]
pub struct LogBudget {
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
    /// What to log for one more event of this kind at `now` (the tests'
    /// view of [`LogBudget::log`]).
    #[cfg(test)]
    pub fn next(&self, now: Instant) -> Say {
        Self::decide(&mut self.state.lock(), now)
    }

    fn decide(st: &mut State, now: Instant) -> Say {
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

impl LogBudget {
    /// [`LogBudget::next`] now, as a caller logs it: unless only counted,
    /// `write` writes the line, given how many were held back before it
    /// and what ends it (on the window's last line, that more are only
    /// counted by `metric`). Written before another event of this kind is
    /// decided on, so the lines of a burst are in the log in their order,
    /// the one saying that more are only counted last (two threads ending
    /// connections at once wrote them in either order).
    pub fn log(&self, metric: &'static str, write: impl FnOnce(u64, More)) {
        let mut st = self.state.lock();
        if let Say::Line { held_back, last } = Self::decide(&mut st, Instant::now()) {
            write(held_back, More { last, metric });
        }
    }
}

/// The end of a budgeted line: nothing, or on the window's last line that
/// more like it are only counted by the metric, and that the next line
/// says how many.
pub struct More {
    last: bool,
    metric: &'static str,
}

impl std::fmt::Display for More {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.last {
            write!(
                f,
                ". More like it in the next minute are only counted ({}), and the next line \
                 says how many",
                self.metric
            )?;
        }
        Ok(())
    }
}

/// A client refused (for its source port, its address) is logged again
/// after this long, so an operator sees it is still happening without one
/// line per call.
pub const CLIENT_WARN_EVERY: Duration = Duration::from_secs(600);

/// Clients remembered at most; see [`ClientWarnings::should_warn`].
const MAX_REMEMBERED: usize = 4096;

/// Remembers when each (client, export) was last logged as refused for a
/// reason: one warning line per client and export per
/// [`CLIENT_WARN_EVERY`].
#[derive(Default)]
pub struct ClientWarnings {
    last: Mutex<HashMap<(IpAddr, u16), Instant>>,
}

impl ClientWarnings {
    /// True if a refusal of `client` on export `export_id` at `now` should
    /// be logged. Memory is bounded: with [`MAX_REMEMBERED`] clients logged
    /// within the last [`CLIENT_WARN_EVERY`], further new clients are not logged
    /// until old entries expire (a flood of addresses cannot grow the map
    /// or the log without bound).
    pub fn should_warn(&self, client: IpAddr, export_id: u16, now: Instant) -> bool {
        let mut last = self.last.lock();
        let recent = |at: &Instant| now.saturating_duration_since(*at) < CLIENT_WARN_EVERY;
        if let Some(at) = last.get_mut(&(client, export_id)) {
            if recent(at) {
                return false;
            }
            *at = now;
            return true;
        }
        if last.len() >= MAX_REMEMBERED {
            last.retain(|_, at| recent(at));
            if last.len() >= MAX_REMEMBERED {
                return false;
            }
        }
        last.insert((client, export_id), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_from_many_threads_is_written_in_its_order() {
        let budget = std::sync::Arc::new(LogBudget::default());
        let written = std::sync::Arc::new(Mutex::new(Vec::new()));
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (budget, written) = (budget.clone(), written.clone());
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..20 {
                        budget.log("m", |_, more| {
                            // Writing a line takes a while.
                            std::thread::sleep(std::time::Duration::from_millis(2));
                            written.lock().push(more.last);
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let written = written.lock();
        assert_eq!(written.len(), BURST as usize);
        assert!(written[..written.len() - 1].iter().all(|last| !last));
        assert!(
            written[written.len() - 1],
            "the line saying more are only counted is last"
        );
    }

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

    #[test]
    fn one_warning_per_client_and_export_per_period() {
        let w = ClientWarnings::default();
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(w.should_warn(a, 1, t0));
        assert!(!w.should_warn(a, 1, t0 + Duration::from_secs(1)));
        assert!(!w.should_warn(a, 1, t0 + CLIENT_WARN_EVERY - Duration::from_secs(1)));
        // Another client, or the same client on another export, is news.
        assert!(w.should_warn(b, 1, t0));
        assert!(w.should_warn(a, 2, t0));
        // Still happening a period later: logged again.
        assert!(w.should_warn(a, 1, t0 + CLIENT_WARN_EVERY));
        assert!(!w.should_warn(a, 1, t0 + CLIENT_WARN_EVERY + Duration::from_secs(1)));
    }

    #[test]
    fn memory_is_bounded_under_a_flood_of_clients() {
        let w = ClientWarnings::default();
        let t0 = Instant::now();
        let client = |i: usize| IpAddr::from(u32::try_from(i).unwrap().to_be_bytes());
        for i in 0..MAX_REMEMBERED {
            assert!(w.should_warn(client(i), 1, t0));
        }
        // Full of recent entries: a new client is not logged (nor stored).
        assert!(!w.should_warn(client(MAX_REMEMBERED), 1, t0));
        assert_eq!(w.last.lock().len(), MAX_REMEMBERED);
        // Once they expire, new clients are logged again.
        assert!(w.should_warn(client(MAX_REMEMBERED), 1, t0 + CLIENT_WARN_EVERY));
        assert_eq!(w.last.lock().len(), 1);
    }
}
