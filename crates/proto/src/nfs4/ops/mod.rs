//! The arguments and results of each operation, grouped by kind.

mod data;
mod files;
mod session;

pub use data::*;
pub use files::*;
pub use session::*;
