//! The `secure` export option (exports(5)): NFS and MNT calls must come from
//! a reserved source port, one only root can bind, as the Linux kernel
//! client and `mount.nfs` do by default.
//!
//! knfsd answers NFS3ERR_PERM to an NFS call from another port
//! (`nfsd_setuser_and_check_port` in fs/nfsd/nfsfh.c, checked in
//! `fh_verify` after the handle's export is found and the client admitted);
//! rpc.mountd refuses MNT with MNT3ERR_ACCES and logs "illegal port"
//! (`auth_authenticate_internal` in utils/mountd/auth.c, after the export
//! and client matched). NULL calls, the other MOUNT procedures and the
//! portmapper are not restricted, there as here.

/// Ports below this are reserved: binding them needs root
/// (`CAP_NET_BIND_SERVICE`). `IPPORT_RESERVED` of <netinet/in.h>.
pub const IPPORT_RESERVED: u16 = 1024;

/// Whether a source `port` is a reserved one.
pub fn is_reserved(port: u16) -> bool {
    port < IPPORT_RESERVED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_those_below_1024() {
        assert!(is_reserved(0));
        assert!(is_reserved(111));
        assert!(is_reserved(1023));
        assert!(!is_reserved(1024));
        assert!(!is_reserved(40000));
    }
}
