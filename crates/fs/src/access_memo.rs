//! Remembered READ/WRITE permission decisions of an open file, so that a
//! caller reading or writing the same file again needs no credential
//! switch and no `faccessat2`: about a dozen system calls of a 4 KiB READ
//! on the io_uring path (`setgroups`, `setfsgid` and `setfsuid` twice
//! each, `capget`/`capset`, and back again).
//!
//! A decision is kept with the credentials it was made for and the
//! file's [`Stamp`] — owner, group, mode and ctime — from a statx taken
//! *before* the check. Anything that can change the kernel's answer for an
//! open file changes one of those: `chmod`, `chown`, ACLs and other
//! extended attributes, `chattr` all move the ctime (and on Linux 6.13+
//! the ctime is fine-grained once it has been read, so two changes within
//! one clock tick still differ). A change made after that statx is seen by
//! the next call's statx as a different stamp, and the kernel is asked
//! again. The credentials carry the caller's groups as the client sent
//! them, so a client that sends other groups is checked afresh.
//!
//! Only grants are kept; a refusal always goes to the kernel again (and is
//! logged and answered by the blocking path).

use dionfs_sys::cred::Creds;
use parking_lot::Mutex;

use crate::attr::{Attr, Time};

/// Decisions kept per file: a handful of users working on one file.
const ENTRIES: usize = 4;

/// What an access decision of a file depends on, besides the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    uid: u32,
    gid: u32,
    mode: u32,
    ctime: Time,
}

impl Stamp {
    /// The stamp of a file whose attributes are `attr`.
    pub fn of(attr: &Attr) -> Stamp {
        Stamp {
            uid: attr.uid,
            gid: attr.gid,
            mode: attr.mode,
            ctime: attr.ctime,
        }
    }
}

#[derive(Debug)]
struct Grant {
    creds: Creds,
    write: bool,
    stamp: Stamp,
}

/// The remembered grants of one open file.
#[derive(Debug, Default)]
pub(crate) struct AccessMemo {
    /// Most recent last.
    grants: Mutex<Vec<Grant>>,
}

impl AccessMemo {
    /// Whether `creds` were granted `write` (or read) access while the file
    /// had `stamp`.
    pub(crate) fn granted(&self, creds: &Creds, write: bool, stamp: Stamp) -> bool {
        self.grants
            .lock()
            .iter()
            .any(|g| g.write == write && g.stamp == stamp && g.creds == *creds)
    }

    /// Records that the kernel granted `creds` access after a statx showed
    /// `stamp`. Replaces the caller's older grant, or the oldest one.
    pub(crate) fn grant(&self, creds: &Creds, write: bool, stamp: Stamp) {
        let mut grants = self.grants.lock();
        grants.retain(|g| !(g.write == write && g.creds == *creds));
        if grants.len() == ENTRIES {
            grants.remove(0);
        }
        grants.push(Grant {
            creds: creds.clone(),
            write,
            stamp,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(mode: u32, nanos: u32) -> Stamp {
        Stamp {
            uid: 1000,
            gid: 1000,
            mode,
            ctime: Time { seconds: 1, nanos },
        }
    }

    fn user(uid: u32, groups: &[u32]) -> Creds {
        Creds {
            uid,
            gid: uid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn a_grant_holds_only_for_its_caller_direction_and_stamp() {
        let memo = AccessMemo::default();
        let alice = user(1000, &[]);
        memo.grant(&alice, false, stamp(0o644, 1));
        assert!(memo.granted(&alice, false, stamp(0o644, 1)));
        assert!(
            !memo.granted(&alice, true, stamp(0o644, 1)),
            "read is not write"
        );
        assert!(!memo.granted(&user(1001, &[]), false, stamp(0o644, 1)));
        assert!(
            !memo.granted(&user(1000, &[5]), false, stamp(0o644, 1)),
            "other groups are other credentials"
        );
        assert!(!memo.granted(&alice, false, stamp(0o600, 1)), "chmod");
        assert!(!memo.granted(&alice, false, stamp(0o644, 2)), "ctime moved");
    }

    #[test]
    fn a_new_grant_replaces_the_callers_old_one_and_the_oldest_goes() {
        let memo = AccessMemo::default();
        let alice = user(1000, &[]);
        memo.grant(&alice, false, stamp(0o644, 1));
        memo.grant(&alice, false, stamp(0o644, 2));
        assert!(!memo.granted(&alice, false, stamp(0o644, 1)));
        assert!(memo.granted(&alice, false, stamp(0o644, 2)));
        for uid in 2000..2000 + ENTRIES as u32 {
            memo.grant(&user(uid, &[]), false, stamp(0o644, 2));
        }
        assert!(!memo.granted(&alice, false, stamp(0o644, 2)), "oldest out");
        assert!(memo.granted(
            &user(2000 + ENTRIES as u32 - 1, &[]),
            false,
            stamp(0o644, 2)
        ));
        assert_eq!(memo.grants.lock().len(), ENTRIES);
    }
}
