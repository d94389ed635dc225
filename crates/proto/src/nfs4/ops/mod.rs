//! The arguments and results of each operation, grouped by kind.

mod data;
mod files;
mod session;
mod state;
mod v40;
mod xattr;

pub use data::*;
pub use files::*;
pub use session::*;
pub use state::*;
pub use v40::*;
pub use xattr::*;
