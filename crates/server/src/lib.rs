//! dionfs server: the connection loop ([`net`]) that carries ONC RPC calls
//! to the programs served (NFS v3, MOUNT v3, portmap v2).

pub mod net;
pub mod portmap;
