//! The server's one set of lock tables, shared by every program that locks:
//! the owners of byte-range locks and share reservations as an enum over
//! the protocols (NLM's client hosts and processes, NFSv4's client ids and
//! opaque owners), and the one instance ([`Locks`]) of
//! [`dionfs_core::locks`]' generic tables they all use, so that a v3 lock
//! and a v4 lock on one file see each other, as knfsd's lockd and nfsd
//! share the kernel's lock lists.
//!
//! Programs never call each other: what NLM and NFSv4 both need of locks
//! lives here, below them. Each keeps its own constructors (an NLM owner
//! from its call's arguments, `nlm/owner.rs`).

use std::any::Any;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use dionfs_core::locks::shares::{Reservation, Reserve, ShareTable};
use dionfs_core::locks::table::{Attempt, LockTable, Opener, Unlock};
use dionfs_core::locks::{LockOwner, Span};

/// An NFSv4 client, by the id the server gave it at EXCHANGE_ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// A client host as NLM knows it: the name its lock manager gives
/// (`caller_name`) and the address its calls come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NlmHost {
    pub name: Vec<u8>,
    pub ip: IpAddr,
}

/// An NLM lock owner: a process (`svid`) of a client host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NlmOwner {
    pub host: NlmHost,
    pub svid: i32,
}

/// An NLM share reservation's owner: an owner handle of a client host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NlmShareOwner {
    pub host: NlmHost,
    pub oh: Vec<u8>,
}

/// Whose state goes together ([`LockOwner::Client`]): an NLM host when it
/// reboots or frees all, an NFSv4 client when its lease expires or it is
/// destroyed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    Nlm(NlmHost),
    V4(ClientId),
}

/// A byte-range lock owner of either protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    Nlm(NlmOwner),
    /// A v4 lock-owner: the client's opaque `owner` under its client id,
    /// calling from `address`.
    V4 {
        client: ClientId,
        owner: Vec<u8>,
        address: IpAddr,
    },
}

/// A share reservation's owner of either protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ShareOwner {
    Nlm(NlmShareOwner),
    /// A v4 open-owner, calling from `address`.
    V4 {
        client: ClientId,
        open_owner: Vec<u8>,
        address: IpAddr,
    },
}

impl LockOwner for Owner {
    type Client = Client;

    fn client(&self) -> Client {
        match self {
            Owner::Nlm(o) => Client::Nlm(o.host.clone()),
            Owner::V4 { client, .. } => Client::V4(*client),
        }
    }

    fn address(&self) -> IpAddr {
        match self {
            Owner::Nlm(o) => o.host.ip,
            Owner::V4 { address, .. } => *address,
        }
    }
}

impl LockOwner for ShareOwner {
    type Client = Client;

    fn client(&self) -> Client {
        match self {
            ShareOwner::Nlm(o) => Client::Nlm(o.host.clone()),
            ShareOwner::V4 { client, .. } => Client::V4(*client),
        }
    }

    fn address(&self) -> IpAddr {
        match self {
            ShareOwner::Nlm(o) => o.host.ip,
            ShareOwner::V4 { address, .. } => *address,
        }
    }
}

/// What a blocked lock waits with: whatever its program needs to tell the
/// client when the lock is granted (NLM: its GRANTED callback, downcast
/// back). NFSv4 queues none: Linux polls its blocking locks.
pub type Waiter = Box<dyn Any + Send>;

/// Expires a courtesy NFSv4 client whose locks are in another's way;
/// whether it did (set by the v4 program).
pub type Expirer = Arc<dyn Fn(&Client) -> bool + Send + Sync>;

/// How many released files may wait to be told of: past that a release is
/// not told, and its waiters are retried by NLM's every-second retry.
const RELEASED_QUEUE: usize = 1024;

/// The server's lock table and share reservations, one instance made at
/// start whether or not NLM runs. Lock `table` before `shares` where both
/// are.
pub struct Locks {
    pub table: Mutex<LockTable<Owner, Waiter>>,
    pub shares: Mutex<ShareTable<ShareOwner>>,
    /// Files whose locks went other than through NLM (an NFSv4 LOCKU,
    /// CLOSE or expiry): NLM retries their waiters.
    released: mpsc::Sender<Vec<u8>>,
    /// NFSv4's, once it runs.
    expirer: OnceLock<Expirer>,
}

impl Locks {
    /// Empty tables, and the receiving end of the files released
    /// ([`Locks::unlock`], [`Locks::drop_clients`]), for NLM.
    pub fn new() -> (Locks, mpsc::Receiver<Vec<u8>>) {
        let (released, rx) = mpsc::channel(RELEASED_QUEUE);
        let locks = Locks {
            table: Mutex::default(),
            shares: Mutex::default(),
            released,
            expirer: OnceLock::new(),
        };
        (locks, rx)
    }

    /// Sets what expires a courtesy client (once; whether it was set now).
    pub fn set_expirer(&self, expirer: Expirer) -> bool {
        self.expirer.set(expirer).is_ok()
    }

    /// Expires `client` if it is a courtesy client holding locks in
    /// another's way; whether it did (never, before the v4 program sets
    /// the expirer).
    pub fn expire(&self, client: &Client) -> bool {
        self.expirer.get().is_some_and(|expire| expire(client))
    }

    /// Tries to take `span` of `fh` for `owner` ([`LockTable::lock`]). A
    /// conflict with a lock of a courtesy NFSv4 client expires that
    /// client ([`Locks::expire`]) and tries once more (design section
    /// 5.3), as knfsd's `lm_expire_lock`: for NLM and v4 callers alike.
    /// The table is not held while the expirer runs (it drops the
    /// client's locks). `open` may be called again to find the holder
    /// (one that cannot leaves a conflict a conflict).
    #[allow(clippy::too_many_arguments)]
    pub fn lock(
        &self,
        fh: &[u8],
        owner: &Owner,
        label: &[u8],
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
        waiter: Option<Waiter>,
    ) -> std::io::Result<Attempt> {
        self.lock_then(fh, owner, label, span, exclusive, open, waiter, |_| {})
    }

    /// [`Locks::lock`], running `granted` on the table, still locked, if
    /// the lock is granted (NLM marks there a GRANTED callback of the
    /// owner answered, which must not release what was just granted).
    #[allow(clippy::too_many_arguments)]
    pub fn lock_then(
        &self,
        fh: &[u8],
        owner: &Owner,
        label: &[u8],
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
        waiter: Option<Waiter>,
        granted: impl FnOnce(&LockTable<Owner, Waiter>),
    ) -> std::io::Result<Attempt> {
        let mut granted = Some(granted);
        let mut attempt = |open: Opener<'_>, waiter: Option<Waiter>| {
            let mut table = self.table.lock();
            let attempt = table.lock(fh, owner, label, span, exclusive, open, waiter)?;
            if attempt == Attempt::Granted {
                if let Some(granted) = granted.take() {
                    granted(&table);
                }
            }
            Ok(attempt)
        };
        let first = attempt(&mut *open, waiter)?;
        if first != Attempt::Conflict || self.expirer.get().is_none() {
            return Ok(first);
        }
        // The holder, through the owner's description or a new one: an
        // opener that gives only one leaves the conflict as it is.
        let Ok(holder) = self
            .table
            .lock()
            .test(fh, owner, span, exclusive, &mut *open)
        else {
            return Ok(first);
        };
        let courtesy = match holder.and_then(|h| h.owner) {
            Some((holder @ Owner::V4 { .. }, _)) => self.expire(&holder.client()),
            _ => false,
        };
        if !courtesy {
            return Ok(first);
        }
        // A waiter queued by the first try is dropped if this one is
        // granted (the table's `lock` does that).
        attempt(open, None)
    }

    /// Takes `reservation` of `fh` for `owner` ([`ShareTable::reserve`]).
    /// If every reservation in the way is a courtesy NFSv4 client's, those
    /// clients are expired and the reservation tried once more.
    pub fn reserve(&self, fh: &[u8], owner: &ShareOwner, reservation: Reservation) -> Reserve {
        let first = self.shares.lock().reserve(fh, owner, reservation);
        if first != Reserve::Conflict || self.expirer.get().is_none() {
            return first;
        }
        let holders = self.shares.lock().conflicting(fh, owner, reservation);
        if !holders.iter().all(|c| matches!(c, Client::V4(_))) {
            return first;
        }
        // Every one is asked, so that none stays in the way.
        let expired = holders.iter().filter(|c| self.expire(c)).count();
        if expired != holders.len() {
            return first;
        }
        self.shares.lock().reserve(fh, owner, reservation)
    }

    /// Releases `span` of `owner`'s locks on `fh`, and tells of the file
    /// ([`LockTable::unlock`]: an unlock splitting a lock past the
    /// address's bound on ranges is refused). (NLM releases its own
    /// owners' locks on the table and grants their waiters under the same
    /// lock.)
    pub fn unlock(&self, fh: &[u8], owner: &Owner, span: Span) -> std::io::Result<Unlock> {
        let unlocked = self.table.lock().unlock(fh, owner, span)?;
        if unlocked == Unlock::Released {
            self.tell_released(fh.to_vec());
        }
        Ok(unlocked)
    }

    /// Drops every lock, waiter and share reservation of the clients
    /// `client` matches (an NFSv4 client expired or destroyed), and tells
    /// of the files whose locks went. The number of files.
    pub fn drop_clients(&self, client: impl Fn(&Client) -> bool) -> usize {
        let touched = self.table.lock().drop_clients(&client);
        self.shares.lock().drop_where(|_| true, &client);
        let files = touched.len();
        for fh in touched {
            self.tell_released(fh);
        }
        files
    }

    /// Releases the locks, blocked locks and share reservations held on
    /// files of the exports `ids`, which a reload removed: their clients
    /// can no longer reach those files to unlock them, and processes on the
    /// server would wait on the locks for ever (knfsd keeps them until an
    /// administrator writes the filesystem to `unlock_filesystem`). The
    /// numbers of locks and of reservations released.
    pub fn release_exports(&self, ids: &[u16]) -> (usize, usize) {
        let removed =
            |fh: &[u8]| dionfs_fs::handle::export_id(fh).is_some_and(|id| ids.contains(&id));
        let locks = self.table.lock().drop_files(removed);
        let reservations = self.shares.lock().drop_where(removed, |_| true);
        (locks, reservations)
    }

    /// Tells NLM that locks of `fh` went. A full queue or no NLM: not
    /// told (the every-second retry sees the file).
    fn tell_released(&self, fh: Vec<u8>) {
        let _ = self.released.try_send(fh);
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::os::fd::OwnedFd;
    use std::path::Path;

    use super::*;

    fn ip() -> IpAddr {
        "192.0.2.1".parse().unwrap()
    }

    fn host() -> NlmHost {
        NlmHost {
            name: b"client".to_vec(),
            ip: ip(),
        }
    }

    fn nlm_owner() -> Owner {
        Owner::Nlm(NlmOwner {
            host: host(),
            svid: 1,
        })
    }

    fn v4_owner() -> Owner {
        Owner::V4 {
            client: ClientId(7),
            owner: b"lock-owner".to_vec(),
            address: ip(),
        }
    }

    fn span(offset: u64, len: u64) -> Span {
        Span::from_nlm(offset, len).unwrap()
    }

    fn opener(path: &Path) -> impl FnMut() -> std::io::Result<(OwnedFd, bool)> + '_ {
        move || {
            let f = OpenOptions::new().read(true).write(true).open(path)?;
            Ok((f.into(), true))
        }
    }

    #[test]
    fn nlm_and_v4_owners_conflict_through_one_instance() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let (locks, mut released) = Locks::new();
        let fh = b"fh".as_slice();
        let mut open = opener(&path);
        let mut lock = |o: &Owner, exclusive, waiter: Option<Waiter>| {
            locks
                .table
                .lock()
                .lock(fh, o, b"label", span(0, 10), exclusive, &mut open, waiter)
                .unwrap()
        };
        assert_eq!(lock(&v4_owner(), true, None), Attempt::Granted);
        // The NLM owner waits, with its program's waiter, for the v4 lock.
        assert_eq!(
            lock(&nlm_owner(), false, Some(Box::new(42_u32))),
            Attempt::Conflict
        );
        let holder = locks
            .table
            .lock()
            .test(fh, &nlm_owner(), span(0, 1), false, &mut opener(&path))
            .unwrap()
            .unwrap();
        assert_eq!(holder.owner, Some((v4_owner(), b"label".to_vec())));
        assert!(released.try_recv().is_err());
        // The v4 unlock names the file; the waiter can then be granted and
        // downcast back.
        assert_eq!(
            locks.unlock(fh, &v4_owner(), span(0, 0)).unwrap(),
            Unlock::Released
        );
        assert_eq!(released.try_recv().unwrap(), fh);
        let granted = locks.table.lock().grant_waiters(fh).granted;
        assert_eq!(granted.len(), 1);
        let w = granted.into_iter().next().unwrap();
        assert_eq!(w.owner, nlm_owner());
        assert_eq!(*w.callback.downcast::<u32>().unwrap(), 42);
    }

    #[test]
    fn dropping_one_kind_of_client_leaves_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let (locks, mut released) = Locks::new();
        let mut open = opener(&path);
        for (o, at) in [(nlm_owner(), 0), (v4_owner(), 100)] {
            let attempt = locks
                .table
                .lock()
                .lock(b"f", &o, b"", span(at, 10), true, &mut open, None)
                .unwrap();
            assert_eq!(attempt, Attempt::Granted);
        }
        let v4_share = ShareOwner::V4 {
            client: ClientId(7),
            open_owner: b"open-owner".to_vec(),
            address: ip(),
        };
        let none = Reservation::new(0, 0);
        assert_eq!(
            locks.shares.lock().reserve(b"f", &v4_share, none),
            Reserve::Granted
        );
        assert_eq!(
            locks.table.lock().clients(),
            [Client::Nlm(host()), Client::V4(ClientId(7))]
        );
        assert_eq!(locks.drop_clients(|c| *c == Client::V4(ClientId(7))), 1);
        assert_eq!(released.try_recv().unwrap(), b"f");
        assert_eq!(locks.table.lock().clients(), [Client::Nlm(host())]);
        assert_eq!(locks.table.lock().lock_count(), 1);
        // The v4 reservation went with its client: another may deny all.
        let nlm_share = ShareOwner::Nlm(NlmShareOwner {
            host: host(),
            oh: b"oh".to_vec(),
        });
        assert_eq!(
            locks
                .shares
                .lock()
                .reserve(b"f", &nlm_share, Reservation::new(3, 3)),
            Reserve::Granted
        );
    }

    #[test]
    fn nlm_shares_and_v4_opens_conflict() {
        const READ: u32 = 1;
        const WRITE: u32 = 2;
        let (locks, _released) = Locks::new();
        let nlm = ShareOwner::Nlm(NlmShareOwner {
            host: host(),
            oh: b"oh".to_vec(),
        });
        let v4 = ShareOwner::V4 {
            client: ClientId(7),
            open_owner: b"open-owner".to_vec(),
            address: ip(),
        };
        let mut shares = locks.shares.lock();
        // An NLM share denying writers refuses a v4 OPEN for writing...
        let read_deny_write = Reservation::new(READ, WRITE);
        assert_eq!(
            shares.reserve(b"f", &nlm, read_deny_write),
            Reserve::Granted
        );
        let write = Reservation::new(WRITE, 0);
        assert_eq!(shares.reserve(b"f", &v4, write), Reserve::Conflict);
        shares.release(b"f", &nlm);
        // ...and a v4 OPEN denying readers refuses an NLM share reading.
        let write_deny_read = Reservation::new(WRITE, READ);
        assert_eq!(shares.reserve(b"f", &v4, write_deny_read), Reserve::Granted);
        let read = Reservation::new(READ, 0);
        assert_eq!(shares.reserve(b"f", &nlm, read), Reserve::Conflict);
    }

    /// An expirer that expires the v4 clients in `courtesy` (dropping
    /// their locks and reservations, as the v4 program's does) and counts
    /// its calls.
    fn courtesy_expirer(
        locks: &Arc<Locks>,
        courtesy: Vec<ClientId>,
    ) -> Arc<std::sync::atomic::AtomicUsize> {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let weak = Arc::downgrade(locks);
        let courtesy = Mutex::new(courtesy);
        let expirer: Expirer = Arc::new(move |c| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Client::V4(id) = c else { return false };
            let mut courtesy = courtesy.lock();
            if !courtesy.contains(id) {
                return false;
            }
            courtesy.retain(|x| x != id);
            drop(courtesy);
            if let Some(locks) = weak.upgrade() {
                locks.drop_clients(|x| x == c);
            }
            true
        });
        assert!(locks.set_expirer(expirer));
        calls
    }

    fn v4(client: u64, owner: &[u8]) -> Owner {
        Owner::V4 {
            client: ClientId(client),
            owner: owner.to_vec(),
            address: ip(),
        }
    }

    #[test]
    fn a_lock_in_the_way_of_a_courtesy_client_expires_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let (locks, _released) = Locks::new();
        let locks = Arc::new(locks);
        let fh = b"fh".as_slice();
        let mut open = opener(&path);
        let mut lock = |o: &Owner, at: u64| {
            locks
                .lock(fh, o, b"", span(at, 10), true, &mut open, None)
                .unwrap()
        };
        // No expirer yet: a plain conflict.
        assert_eq!(lock(&v4(1, b"a"), 0), Attempt::Granted);
        assert_eq!(lock(&nlm_owner(), 0), Attempt::Conflict);
        let calls = courtesy_expirer(&locks, vec![ClientId(1)]);
        assert_eq!(lock(&v4(2, b"b"), 100), Attempt::Granted);
        // An NLM lock in the way of client 1 (courtesy) gets it; one in
        // the way of client 2 (active) does not.
        assert_eq!(lock(&nlm_owner(), 0), Attempt::Granted);
        assert_eq!(lock(&nlm_owner(), 100), Attempt::Conflict);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert_eq!(
            locks.table.lock().clients(),
            [Client::Nlm(host()), Client::V4(ClientId(2))]
        );
        // A process on the server's lock expires nobody.
        let local = dir.path().join("g");
        std::fs::write(&local, b"data").unwrap();
        let held = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&local)
            .unwrap();
        let range = dionfs_sys::lock::LockRange { start: 0, len: 0 };
        assert!(
            dionfs_sys::lock::ofd_setlk(&held, dionfs_sys::lock::LockType::Write, range).unwrap()
        );
        let attempt = locks
            .lock(
                b"g",
                &v4(2, b"b"),
                b"",
                span(0, 1),
                true,
                &mut opener(&local),
                None,
            )
            .unwrap();
        assert_eq!(attempt, Attempt::Conflict);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn an_opener_of_one_description_leaves_the_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let (locks, _released) = Locks::new();
        let locks = Arc::new(locks);
        let first = locks
            .lock(
                b"f",
                &v4(1, b"a"),
                b"",
                span(0, 10),
                true,
                &mut opener(&path),
                None,
            )
            .unwrap();
        assert_eq!(first, Attempt::Granted);
        let calls = courtesy_expirer(&locks, vec![ClientId(1)]);
        let mut once = {
            let mut fd = Some(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map(|f| (OwnedFd::from(f), true)),
            );
            move || {
                fd.take()
                    .unwrap_or_else(|| Err(std::io::Error::other("opened twice")))
            }
        };
        let attempt = locks
            .lock(b"f", &nlm_owner(), b"", span(0, 1), true, &mut once, None)
            .unwrap();
        assert_eq!(attempt, Attempt::Conflict);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn a_reservation_in_the_way_of_courtesy_clients_only_expires_them() {
        const READ: u32 = 1;
        const WRITE: u32 = 2;
        let (locks, _released) = Locks::new();
        let locks = Arc::new(locks);
        let share = |client: u64| ShareOwner::V4 {
            client: ClientId(client),
            open_owner: b"o".to_vec(),
            address: ip(),
        };
        let nlm = ShareOwner::Nlm(NlmShareOwner {
            host: host(),
            oh: b"oh".to_vec(),
        });
        let deny_write = Reservation::new(READ, WRITE);
        let write = Reservation::new(WRITE, 0);
        assert_eq!(locks.reserve(b"f", &share(1), deny_write), Reserve::Granted);
        assert_eq!(locks.reserve(b"f", &share(3), deny_write), Reserve::Granted);
        let calls = courtesy_expirer(&locks, vec![ClientId(1)]);
        // Client 3 is active: nothing is retried (1 is asked, and expired).
        assert_eq!(locks.reserve(b"f", &nlm, write), Reserve::Conflict);
        locks.shares.lock().release(b"f", &share(3));
        // Without client 3: client 1 went already; now granted at once.
        assert_eq!(locks.reserve(b"f", &nlm, write), Reserve::Granted);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
        // An NLM reservation in the way is never expired.
        assert_eq!(
            locks.reserve(b"f", &share(4), deny_write),
            Reserve::Conflict
        );
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn the_expirer_is_asked_once_set() {
        let (locks, _released) = Locks::new();
        let v4 = Client::V4(ClientId(7));
        assert!(!locks.expire(&v4));
        let expirer: Expirer = Arc::new(|c| matches!(c, Client::V4(_)));
        assert!(locks.set_expirer(expirer.clone()));
        assert!(!locks.set_expirer(expirer));
        assert!(locks.expire(&v4));
        assert!(!locks.expire(&Client::Nlm(host())));
    }
}
