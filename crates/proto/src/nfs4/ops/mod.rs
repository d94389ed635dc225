//! The arguments and results of each operation, grouped by kind.

mod files;
mod session;

pub use files::*;
pub use session::*;
