//! NFSv4.1 and 4.2 (design: docs/nfs4-design.md).

pub mod callback;
pub mod state;
