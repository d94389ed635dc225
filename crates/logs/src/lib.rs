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

mod budget;
mod every;

pub use budget::{ClientWarnings, LogBudget, More, Say, BURST, CLIENT_WARN_EVERY, WINDOW};
pub use every::LogEvery;
