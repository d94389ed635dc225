//! NFSv4.1 and 4.2 (RFC 8881, RFC 7862): the program, its COMPOUND and
//! its operations (docs/nfs4-design.md).

pub mod attrs;
pub mod idmap;
pub mod namespace;
