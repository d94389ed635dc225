//! SHARE and UNSHARE: DOS share reservations, kept in the service's share
//! table ([`dionfs_core::locks::shares`]) among NLM clients (processes on the
//! server know nothing of them, as with knfsd).

use dionfs_proto::nlm4::{Nlm4ShareArgs, Nlm4Stat};
use dionfs_transport::ConnInfo;
use tracing::warn;

use super::locking::export_for;
use super::owner::share_owner;
use super::LockService;
use crate::locks::ShareOwner;
use dionfs_core::locks::limits::MAX_SHARES_PER_CLIENT;
use dionfs_core::locks::shares::{Reservation, Reserve};

/// SHARE (`take`) or UNSHARE.
pub(super) fn share(svc: &LockService, conn: &ConnInfo, a: &Nlm4ShareArgs, take: bool) -> Nlm4Stat {
    if take && svc.reboots.in_grace() != a.reclaim {
        return Nlm4Stat::DeniedGracePeriod;
    }
    // A handle the export issued, MAC and all: a reservation is kept
    // under it (LOCK verifies its handle by opening the file).
    match export_for(svc, conn, &a.share.fh) {
        Ok(export) if export.fs.verify_handle(&a.share.fh.0).is_ok() => {}
        _ => return Nlm4Stat::StaleFh,
    }
    let owner = ShareOwner::Nlm(share_owner(conn, &a.share));
    let fh = &a.share.fh.0;
    if !take {
        svc.locks.shares.lock().release(fh, &owner);
        return Nlm4Stat::Granted;
    }
    let reservation = Reservation::new(a.share.access as u32, a.share.mode as u32);
    // Through `Locks::reserve`: a reservation of a courtesy NFSv4 client
    // in the way expires it (design section 5.3).
    match svc.locks.reserve(fh, &owner, reservation) {
        Reserve::Granted => Nlm4Stat::Granted,
        Reserve::Conflict => Nlm4Stat::Denied,
        Reserve::NoRoom => {
            if svc.nolocks_warning.due() {
                warn!(client = %conn.peer, "NLM SHARE refused (DENIED_NOLOCKS): the client's \
                    address holds {MAX_SHARES_PER_CLIENT} share reservations, as many as one \
                    address may (repeats are not logged for 10 s)");
            }
            Nlm4Stat::DeniedNolocks
        }
    }
}
