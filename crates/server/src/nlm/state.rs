//! What the lock service keeps across restarts, under
//! `STATE_DIR/nlm/` (as rpc.statd keeps `/var/lib/nfs/sm`):
//! - `state`: the server's NSM state number, odd while it runs, moved on
//!   at every start so clients can tell a restart;
//! - `hosts`: the clients that held locks, with the server address they
//!   used, so that a restarted server can tell them (SM_NOTIFY) to reclaim
//!   their locks in its grace period: NLM's client-recovery record
//!   ([`dionfs_core::recovery`]).
//!
//! Both are replaced atomically (write, fsync, rename, fsync the
//! directory): a crash leaves the old or the new version, never half.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::path::Path;

use dionfs_core::recovery::{Entry, Record};
use dionfs_sys::private::Durability;

/// A client to tell when the server restarts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Monitored {
    /// The client's `caller_name`.
    pub name: Vec<u8>,
    pub client: IpAddr,
    /// The server address the client locked through: what it calls the
    /// server (the `mon_name` its statd expects).
    pub server: IpAddr,
}

impl Entry for Monitored {
    fn to_line(&self) -> String {
        format!(
            "{} {} {}",
            hex::encode(&self.name),
            self.client,
            self.server
        )
    }

    fn from_line(line: &str) -> Option<Monitored> {
        let mut it = line.split_whitespace();
        Some(Monitored {
            name: hex::decode(it.next()?).ok()?,
            client: it.next()?.parse().ok()?,
            server: it.next()?.parse().ok()?,
        })
    }

    fn address(&self) -> IpAddr {
        self.client
    }
}

/// The lock service's persistent state.
pub struct NsmState {
    /// This run's NSM state number (odd).
    pub number: i32,
    hosts: Record<Monitored>,
}

/// Records of one client address at which those no longer holding locks
/// are dropped: at most as many names as the lock table lets one address
/// hold locks under ([`dionfs_core::locks::limits::MAX_NAMES_PER_CLIENT`]).
const PRUNE_PER_CLIENT: usize = dionfs_core::locks::limits::MAX_NAMES_PER_CLIENT;

impl NsmState {
    /// Opens (creating) `state_dir/nlm`, moves the state number on, and
    /// returns the clients the previous run had monitored. They stay
    /// recorded until [`NsmState::keep_only`] drops them (after the grace
    /// period), so a crash during the grace period forgets nobody.
    pub fn open(state_dir: &Path) -> io::Result<(NsmState, Vec<Monitored>)> {
        let dir = state_dir.join("nlm");
        dionfs_sys::private::create_dir_all(&dir)?;
        let previous: i32 = match std::fs::read_to_string(dir.join("state")) {
            Ok(s) => s.trim().parse().unwrap_or(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        // Odd while up; past a previous odd value (a crash) by two.
        let number = if previous % 2 == 0 {
            previous.wrapping_add(1)
        } else {
            previous.wrapping_add(2)
        };
        dionfs_sys::private::replace(
            &dir.join("state"),
            format!("{number}\n").as_bytes(),
            Durability::Synced,
        )?;
        let (hosts, previous) = Record::open(&dir.join("hosts"), PRUNE_PER_CLIENT)?;
        Ok((NsmState { number, hosts }, previous))
    }

    /// Records a client that now holds locks; durable before it returns
    /// the first time (a lock granted must be reclaimable after a crash).
    ///
    /// Records are kept until the client reboots or frees its locks, or a
    /// restart's grace period ends; so that clients that lock under ever
    /// new names cannot grow the record without bound, once many are
    /// recorded, or many for one address, those no longer holding locks
    /// are dropped first: `holding` gives the (name, address) pairs that
    /// hold locks now, or `None` (in a grace period, while the previous
    /// run's clients reclaim) to keep all.
    pub fn monitor(
        &self,
        host: Monitored,
        holding: impl FnOnce() -> Option<BTreeSet<(Vec<u8>, IpAddr)>>,
    ) -> io::Result<()> {
        self.hosts.add(host, || {
            let holding = holding()?;
            Some(move |h: &Monitored| holding.contains(&(h.name.clone(), h.client)))
        })
    }

    /// The clients recorded now.
    pub fn monitored(&self) -> usize {
        self.hosts.len()
    }

    /// Forgets the clients `drop` matches (they rebooted or freed all).
    pub fn forget(&self, drop: impl FnMut(&Monitored) -> bool) -> io::Result<()> {
        self.hosts.forget(drop)
    }

    /// Keeps only the clients `keep` matches (those holding locks once
    /// the grace period is over).
    pub fn keep_only(&self, keep: impl FnMut(&Monitored) -> bool) -> io::Result<()> {
        self.hosts.keep_only(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_moves_on_and_hosts_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (s, previous) = NsmState::open(dir.path()).unwrap();
        assert_eq!(s.number, 1);
        assert!(previous.is_empty());
        let host = Monitored {
            name: b"client one".to_vec(),
            client: "192.0.2.7".parse().unwrap(),
            server: "192.0.2.1".parse().unwrap(),
        };
        s.monitor(host.clone(), || None).unwrap();
        drop(s);
        let (s, previous) = NsmState::open(dir.path()).unwrap();
        assert_eq!(s.number, 3);
        assert_eq!(previous, vec![host.clone()]);
        s.keep_only(|_| false).unwrap();
        let (s, previous) = NsmState::open(dir.path()).unwrap();
        assert_eq!(s.number, 5);
        assert!(previous.is_empty());
    }

    #[test]
    fn clients_under_ever_new_names_do_not_grow_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = NsmState::open(dir.path()).unwrap();
        let at = |name: String, client: &str| Monitored {
            name: name.into_bytes(),
            client: client.parse().unwrap(),
            server: "192.0.2.1".parse().unwrap(),
        };
        // One address, a new name per lock, each lock released at once:
        // only the name holding locks now is kept beside a bounded rest.
        for n in 0..3 * PRUNE_PER_CLIENT {
            let name = format!("n{n}");
            let holding =
                BTreeSet::from([(name.clone().into_bytes(), "192.0.2.7".parse().unwrap())]);
            s.monitor(at(name, "192.0.2.7"), || Some(holding)).unwrap();
            assert!(s.monitored() <= PRUNE_PER_CLIENT, "{n}: {}", s.monitored());
        }
        // In a grace period nothing is dropped.
        s.monitor(at("late".into(), "192.0.2.7"), || None).unwrap();
        let before = s.monitored();
        s.monitor(at("later".into(), "192.0.2.7"), || None).unwrap();
        assert_eq!(s.monitored(), before + 1);
        // Many addresses: pruned at recovery::PRUNE_AT, keeping those holding locks.
        for i in 0..2 * dionfs_core::recovery::PRUNE_AT {
            let ip = format!("10.0.{}.{}", i / 250, i % 250);
            let holding = BTreeSet::from([(b"c".to_vec(), "192.0.2.7".parse().unwrap())]);
            s.monitor(at("c".into(), &ip), || Some(holding)).unwrap();
            assert!(
                s.monitored() <= dionfs_core::recovery::PRUNE_AT,
                "{i}: {}",
                s.monitored()
            );
        }
        let text = std::fs::read_to_string(dir.path().join("nlm/hosts")).unwrap();
        assert_eq!(text.lines().count(), s.monitored());
    }
}
