//! The client-recovery record: the clients that hold state a restart
//! would lose, kept durably under the state directory so that a restarted
//! server knows whom to tell (NLM: SM_NOTIFY to each client's statd) or
//! whom to let reclaim in its grace period (NFSv4 next: the client owners
//! that had state, as knfsd's `nfsdcld` keeps them).
//!
//! One [`Record`] per protocol, each in a file of its own, one line per
//! client, in the protocol's own words ([`Entry`]). The file is replaced
//! whole, atomically and durably (write, fsync, rename, fsync the
//! directory): a crash leaves the old or the new version, never half. An
//! entry is durable before [`Record::add`] returns, so state granted
//! after it can always be reclaimed.
//!
//! The record is bounded: clients that take state under ever new names
//! would otherwise grow it (and the cost of rewriting it) without end.
//! Past [`PRUNE_AT`] entries, or [`Record::new`]'s `per_address` for one
//! client address, the entries of clients holding nothing any more are
//! dropped first.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use dionfs_sys::private::Durability;
use parking_lot::Mutex;

/// One client in a [`Record`], as its protocol writes it.
pub trait Entry: Clone + Ord + Sized {
    /// Its line in the file (no newline).
    fn to_line(&self) -> String;
    /// The entry a line holds, or `None` for a line that is not one
    /// (skipped: a damaged line costs that client its reclaim, not the
    /// server its start).
    fn from_line(line: &str) -> Option<Self>;
    /// The client's address, which bounds its entries.
    fn address(&self) -> IpAddr;
}

/// Entries at which those of clients holding nothing are dropped (and at
/// twice as many as are left then, so that a server with many clients
/// holding state does not prune at every new one).
pub const PRUNE_AT: usize = 1024;

/// The recorded clients of one protocol.
pub struct Record<E> {
    file: PathBuf,
    per_address: usize,
    entries: Mutex<Entries<E>>,
}

struct Entries<E> {
    set: BTreeSet<E>,
    /// Prune when this many are recorded.
    prune_at: usize,
}

impl<E: Entry> Record<E> {
    /// Opens the record in `file` (its directory must exist, owner-only)
    /// and returns the clients the previous run recorded. They stay
    /// recorded until [`Record::keep_only`] drops them (after the grace
    /// period), so a crash during the grace period forgets nobody. One
    /// address keeps at most `per_address` entries of clients holding
    /// nothing.
    pub fn open(file: &Path, per_address: usize) -> io::Result<(Record<E>, Vec<E>)> {
        let set: BTreeSet<E> = match std::fs::read_to_string(file) {
            Ok(text) => text.lines().filter_map(E::from_line).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(e),
        };
        let previous = set.iter().cloned().collect();
        let record = Record {
            file: file.to_owned(),
            per_address,
            entries: Mutex::new(Entries {
                set,
                prune_at: PRUNE_AT,
            }),
        };
        Ok((record, previous))
    }

    /// Records a client that now holds state; durable before it returns
    /// the first time. When the record is full (see the module doc),
    /// `holding` says which recorded entries still hold state, or is
    /// `None` (in a grace period, while the previous run's clients
    /// reclaim) to keep them all.
    pub fn add<H: Fn(&E) -> bool>(
        &self,
        entry: E,
        holding: impl FnOnce() -> Option<H>,
    ) -> io::Result<()> {
        let mut entries = self.entries.lock();
        if entries.set.contains(&entry) {
            return Ok(());
        }
        let address = entry.address();
        let same_address = entries
            .set
            .iter()
            .filter(|e| e.address() == address)
            .count();
        if entries.set.len() >= entries.prune_at || same_address >= self.per_address {
            if let Some(holding) = holding() {
                entries.set.retain(|e| holding(e));
                entries.prune_at = PRUNE_AT.max(2 * entries.set.len());
            }
        }
        entries.set.insert(entry);
        self.write(&entries.set)
    }

    /// The clients recorded now.
    pub fn len(&self) -> usize {
        self.entries.lock().set.len()
    }

    /// Whether no client is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the clients `drop` matches (they rebooted, or gave up all
    /// they held).
    pub fn forget(&self, mut drop: impl FnMut(&E) -> bool) -> io::Result<()> {
        let mut entries = self.entries.lock();
        let before = entries.set.len();
        entries.set.retain(|e| !drop(e));
        if entries.set.len() == before {
            return Ok(());
        }
        self.write(&entries.set)
    }

    /// Keeps only the clients `keep` matches (those holding state once
    /// the grace period is over).
    pub fn keep_only(&self, mut keep: impl FnMut(&E) -> bool) -> io::Result<()> {
        self.forget(|e| !keep(e))
    }

    fn write(&self, set: &BTreeSet<E>) -> io::Result<()> {
        let mut text = String::new();
        for e in set {
            text.push_str(&e.to_line());
            text.push('\n');
        }
        dionfs_sys::private::replace(&self.file, text.as_bytes(), Durability::Synced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client as another protocol might record it: an owner and an
    /// address.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Owner(String, IpAddr);

    impl Entry for Owner {
        fn to_line(&self) -> String {
            format!("{} {}", self.0, self.1)
        }

        fn from_line(line: &str) -> Option<Self> {
            let (name, ip) = line.split_once(' ')?;
            Some(Owner(name.to_owned(), ip.parse().ok()?))
        }

        fn address(&self) -> IpAddr {
            self.1
        }
    }

    fn owner(name: &str, ip: &str) -> Owner {
        Owner(name.to_owned(), ip.parse().unwrap())
    }

    #[test]
    fn entries_survive_a_restart_and_damaged_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("clients");
        let (r, previous) = Record::<Owner>::open(&file, 8).unwrap();
        assert!(previous.is_empty());
        r.add(owner("a", "192.0.2.7"), || None::<fn(&Owner) -> bool>)
            .unwrap();
        r.add(owner("b", "192.0.2.8"), || None::<fn(&Owner) -> bool>)
            .unwrap();
        drop(r);
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str("not an entry\n");
        std::fs::write(&file, text).unwrap();
        let (r, previous) = Record::<Owner>::open(&file, 8).unwrap();
        assert_eq!(
            previous,
            vec![owner("a", "192.0.2.7"), owner("b", "192.0.2.8")]
        );
        r.keep_only(|o| o.0 == "b").unwrap();
        let (_, previous) = Record::<Owner>::open(&file, 8).unwrap();
        assert_eq!(previous, vec![owner("b", "192.0.2.8")]);
    }

    #[test]
    fn one_address_under_ever_new_names_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (r, _) = Record::<Owner>::open(&dir.path().join("clients"), 4).unwrap();
        for n in 0..20 {
            let name = format!("n{n}");
            let now = name.clone();
            r.add(owner(&name, "192.0.2.7"), || {
                Some(move |o: &Owner| o.0 == now)
            })
            .unwrap();
            assert!(r.len() <= 4, "{n}: {}", r.len());
        }
        // With `holding` None (a grace period) nothing is dropped.
        let before = r.len();
        r.add(owner("late", "192.0.2.7"), || None::<fn(&Owner) -> bool>)
            .unwrap();
        assert_eq!(r.len(), before + 1);
    }
}
