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

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Ports below this are reserved: binding them needs root
/// (`CAP_NET_BIND_SERVICE`). `IPPORT_RESERVED` of <netinet/in.h>.
pub const IPPORT_RESERVED: u16 = 1024;

/// A client refused for its port is logged again after this long, so an
/// operator sees it is still happening without one line per call.
pub const WARN_EVERY: Duration = Duration::from_secs(600);

/// Clients remembered at most; see [`InsecurePortWarnings::should_warn`].
const MAX_REMEMBERED: usize = 4096;

/// Whether a source `port` is a reserved one.
pub fn is_reserved(port: u16) -> bool {
    port < IPPORT_RESERVED
}

/// Remembers when each (client, export) was last logged as refused for its
/// source port: one warning line per client and export per [`WARN_EVERY`].
#[derive(Default)]
pub struct InsecurePortWarnings {
    last: Mutex<HashMap<(IpAddr, u16), Instant>>,
}

impl InsecurePortWarnings {
    /// True if a refusal of `client` on export `export_id` at `now` should
    /// be logged. Memory is bounded: with [`MAX_REMEMBERED`] clients logged
    /// within the last [`WARN_EVERY`], further new clients are not logged
    /// until old entries expire (a flood of addresses cannot grow the map
    /// or the log without bound).
    pub fn should_warn(&self, client: IpAddr, export_id: u16, now: Instant) -> bool {
        let mut last = self.last.lock();
        let recent = |at: &Instant| now.saturating_duration_since(*at) < WARN_EVERY;
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
    fn reserved_ports_are_those_below_1024() {
        assert!(is_reserved(0));
        assert!(is_reserved(111));
        assert!(is_reserved(1023));
        assert!(!is_reserved(1024));
        assert!(!is_reserved(40000));
    }

    #[test]
    fn one_warning_per_client_and_export_per_period() {
        let w = InsecurePortWarnings::default();
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(w.should_warn(a, 1, t0));
        assert!(!w.should_warn(a, 1, t0 + Duration::from_secs(1)));
        assert!(!w.should_warn(a, 1, t0 + WARN_EVERY - Duration::from_secs(1)));
        // Another client, or the same client on another export, is news.
        assert!(w.should_warn(b, 1, t0));
        assert!(w.should_warn(a, 2, t0));
        // Still happening a period later: logged again.
        assert!(w.should_warn(a, 1, t0 + WARN_EVERY));
        assert!(!w.should_warn(a, 1, t0 + WARN_EVERY + Duration::from_secs(1)));
    }

    #[test]
    fn memory_is_bounded_under_a_flood_of_clients() {
        let w = InsecurePortWarnings::default();
        let t0 = Instant::now();
        let client = |i: usize| IpAddr::from(u32::try_from(i).unwrap().to_be_bytes());
        for i in 0..MAX_REMEMBERED {
            assert!(w.should_warn(client(i), 1, t0));
        }
        // Full of recent entries: a new client is not logged (nor stored).
        assert!(!w.should_warn(client(MAX_REMEMBERED), 1, t0));
        assert_eq!(w.last.lock().len(), MAX_REMEMBERED);
        // Once they expire, new clients are logged again.
        assert!(w.should_warn(client(MAX_REMEMBERED), 1, t0 + WARN_EVERY));
        assert_eq!(w.last.lock().len(), 1);
    }
}
