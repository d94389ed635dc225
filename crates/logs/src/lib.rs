//! Log lines that repeat, written a few at a time: the one place every
//! layer (data plane, file system, transport, programs) takes its
//! rate-limited logging from.
//!
//! - [`LogBudget`]: a burst of lines per kind per window, then counted,
//!   with the count said on the next line (many clients stalled at once,
//!   a full filesystem refusing every WRITE).
//! - [`ClientWarnings`]: one line per client and export per period (a
//!   refused client calling as fast as it can).
//! - [`LogEvery`]: one line per period for a condition that lasts.
//!
//! And which lines are written at all: [`LogFilter`], the level words an
//! operator gives, checked at start.

mod budget;
mod every;
mod filter;

pub use budget::{ClientWarnings, LogBudget, More, Say, BURST, CLIENT_WARN_EVERY, WINDOW};
pub use every::LogEvery;
pub use filter::{LogFilter, LEVEL_WORDS};
