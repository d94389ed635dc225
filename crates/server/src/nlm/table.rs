//! The lock table of the NLM service: for every file with NLM locks, one
//! open file description per remote lock owner (client host + `svid`),
//! holding that owner's byte-range locks as OFD locks; and the blocked
//! LOCKs waiting for a conflicting lock to go.
//!
//! The kernel decides every conflict: between owners of different
//! clients, between processes of one client, and with processes on the
//! server itself (`fcntl` locks conflict with OFD locks). Upgrades,
//! downgrades and the split of a lock by a partial unlock are the
//! kernel's POSIX semantics on the owner's description. The table keeps
//! its own copy of each owner's ranges only to know when an owner holds
//! nothing more (its description is then closed) and whom to name as the
//! holder in a TEST's denial.
//!
//! Everything here is synchronous and quick (non-blocking `fcntl`s under
//! one mutex); the service calls it from blocking threads.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::time::Instant;

use dionfs_sys::lock::{ofd_getlk, ofd_setlk, LockRange, LockType};

/// A client host as NLM knows it: the name its lock manager gives
/// (`caller_name`) and the address its calls come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host {
    pub name: Vec<u8>,
    pub ip: IpAddr,
}

/// A lock owner: a process (`svid`) of a client host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub host: Host,
    pub svid: i32,
}

/// An inclusive byte range; `end` `u64::MAX` reaches past any end of file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u64,
    pub end: u64,
}

/// The largest offset `fcntl` can lock.
const OFFSET_MAX: u64 = i64::MAX as u64;

impl Span {
    /// The range of an NLM lock (`l_offset`, `l_len`, 0 for "to the end"),
    /// or `None` if it starts beyond what the kernel can lock (NLM4_FBIG).
    /// A range reaching past the largest offset reaches to the end, as in
    /// the kernel's lockd.
    pub fn from_nlm(offset: u64, len: u64) -> Option<Span> {
        if offset > OFFSET_MAX {
            return None;
        }
        let end = match len {
            0 => u64::MAX,
            // Ending at the largest offset is reaching to the end too: from
            // 0, `fcntl`'s length would be 2^63, past an `i64` (the whole
            // file's lock could then be neither taken nor released).
            _ => match offset.checked_add(len - 1) {
                Some(end) if end < OFFSET_MAX => end,
                _ => u64::MAX,
            },
        };
        Some(Span { start: offset, end })
    }

    /// The range as `fcntl` takes it.
    pub fn to_fcntl(self) -> LockRange {
        LockRange {
            start: self.start as i64,
            // 0: to the end (also the only way to say a length past i64).
            len: if self.end == u64::MAX {
                0
            } else {
                i64::try_from(self.end - self.start + 1).unwrap_or(0)
            },
        }
    }

    /// `fcntl`'s range (as `F_OFD_GETLK` reports it) as a span.
    fn from_fcntl(r: LockRange) -> Span {
        let start = r.start.max(0) as u64;
        let end = match r.len {
            0 => u64::MAX,
            n if n > 0 => start.saturating_add(n as u64 - 1),
            // A negative length covers the bytes before start.
            n => {
                let first = start.saturating_sub(n.unsigned_abs());
                return Span {
                    start: first,
                    end: start.saturating_sub(1),
                };
            }
        };
        Span { start, end }
    }

    /// The span as NLM's (`l_offset`, `l_len`).
    pub fn to_nlm(self) -> (u64, u64) {
        if self.end == u64::MAX {
            (self.start, 0)
        } else {
            (self.start, self.end - self.start + 1)
        }
    }

    fn overlaps(self, other: Span) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// What one owner holds on one file.
struct Held {
    fd: OwnedFd,
    /// Whether `fd` is open for writing (exclusive locks need it).
    writable: bool,
    /// The owner's locks as (span, exclusive), as the kernel holds them.
    ranges: Vec<(Span, bool)>,
    /// The owner handle of its last call (for TEST's holder).
    oh: Vec<u8>,
}

impl Held {
    fn remove(&mut self, span: Span) {
        let mut kept = Vec::with_capacity(self.ranges.len() + 1);
        for &(r, excl) in &self.ranges {
            if !r.overlaps(span) {
                kept.push((r, excl));
                continue;
            }
            if r.start < span.start {
                kept.push((
                    Span {
                        start: r.start,
                        end: span.start - 1,
                    },
                    excl,
                ));
            }
            if r.end > span.end {
                kept.push((
                    Span {
                        start: span.end + 1,
                        end: r.end,
                    },
                    excl,
                ));
            }
        }
        self.ranges = kept;
    }

    fn add(&mut self, span: Span, exclusive: bool) {
        self.remove(span);
        self.ranges.push((span, exclusive));
    }
}

/// A blocked LOCK waiting for its range; `T` is what the service needs
/// to call the client back when it is granted.
pub struct Waiter<T> {
    pub owner: Owner,
    pub span: Span,
    pub exclusive: bool,
    /// When the client last asked (it asks again while it waits).
    pub asked: Instant,
    pub callback: T,
}

impl<T> Waiter<T> {
    /// Whether this waits for exactly `span`, `exclusive`, for `owner` (a
    /// LOCK asked again, a CANCEL).
    fn is(&self, owner: &Owner, span: Span, exclusive: bool) -> bool {
        self.owner == *owner && self.span == span && self.exclusive == exclusive
    }
}

/// The locks and waiters of one file.
struct FileLocks<T> {
    owners: HashMap<Owner, Held>,
    waiters: VecDeque<Waiter<T>>,
}

impl<T> Default for FileLocks<T> {
    fn default() -> Self {
        Self {
            owners: HashMap::new(),
            waiters: VecDeque::new(),
        }
    }
}

/// The outcome of a lock attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    Granted,
    /// Another owner holds a conflicting lock.
    Conflict,
    /// The owner's description cannot take an exclusive lock (the file is
    /// read-only to the server).
    ReadOnly,
    /// A limit is reached: NLM4_DENIED_NOLOCKS.
    NoLocks(Limit),
    /// Waiting would close a cycle of NLM owners each waiting for the
    /// next (NLM4_DEADLCK, EDEADLK to the application).
    Deadlock,
}

/// Which bound a LOCK refused with NLM4_DENIED_NOLOCKS ran into. Limits
/// are per client *address*: the name a client gives (`caller_name`) is
/// its own word, and one client could otherwise take any number of
/// descriptors by calling itself by new names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`MAX_DESCRIPTIONS_PER_CLIENT`].
    Descriptions,
    /// [`MAX_NAMES_PER_CLIENT`].
    Names,
    /// The server's own bound, over all clients ([`LockTable::set_max_open`]).
    Server,
    /// [`MAX_WAITERS_PER_CLIENT`].
    Waiters,
    /// [`MAX_WAITERS_PER_CLIENT_TOTAL`].
    AllWaiters,
}

/// Open descriptions (lock owners on files) one client address may have,
/// over all its names: a client cannot run the server out of descriptors.
pub const MAX_DESCRIPTIONS_PER_CLIENT: usize = 4096;
/// Names one client address may hold locks under at once. A client uses
/// one; clients behind one NAT address each use their own.
pub const MAX_NAMES_PER_CLIENT: usize = 256;
/// Blocked locks one client address may have waiting on one file.
pub const MAX_WAITERS_PER_CLIENT: usize = 256;
/// Blocked locks one client address may have waiting, over all files:
/// each keeps the call's cookie, names and owner handle (up to 4 KiB),
/// and the per-file bound times the descriptions an address may hold came
/// to a million of them, gigabytes, retried every second.
pub const MAX_WAITERS_PER_CLIENT_TOTAL: usize = 1024;

/// How many wait-for edges a deadlock search follows before it gives up
/// (under the table's mutex).
const DEADLOCK_SEARCH: usize = 1024;

/// Who holds the lock a TEST ran into.
#[derive(Debug, PartialEq, Eq)]
pub struct Holder {
    pub exclusive: bool,
    pub span: Span,
    /// The NLM owner, if the lock is one (else a process on the server or
    /// another server's client: svid 0).
    pub owner: Option<(i32, Vec<u8>)>,
}

/// Every NLM lock of the server, by file (its NFS handle). `T`: see
/// [`Waiter`].
pub struct LockTable<T> {
    files: HashMap<Vec<u8>, FileLocks<T>>,
    open: Descriptions,
}

impl<T> Default for LockTable<T> {
    fn default() -> Self {
        Self {
            files: HashMap::new(),
            open: Descriptions {
                max: usize::MAX,
                ..Default::default()
            },
        }
    }
}

/// The open descriptions, counted per client address and name.
#[derive(Default)]
struct Descriptions {
    total: usize,
    /// The most the server holds at once.
    max: usize,
    per_client: HashMap<IpAddr, ClientDescriptions>,
}

#[derive(Default)]
struct ClientDescriptions {
    total: usize,
    per_name: HashMap<Vec<u8>, usize>,
}

impl Descriptions {
    /// Whether `host` may open one more description; the bound in the
    /// way if not.
    fn room_for(&self, host: &Host) -> Result<(), Limit> {
        if self.total >= self.max {
            return Err(Limit::Server);
        }
        let Some(client) = self.per_client.get(&host.ip) else {
            return Ok(());
        };
        if client.total >= MAX_DESCRIPTIONS_PER_CLIENT {
            return Err(Limit::Descriptions);
        }
        if !client.per_name.contains_key(&host.name)
            && client.per_name.len() >= MAX_NAMES_PER_CLIENT
        {
            return Err(Limit::Names);
        }
        Ok(())
    }

    fn add(&mut self, host: &Host) {
        self.total += 1;
        let client = self.per_client.entry(host.ip).or_default();
        client.total += 1;
        *client.per_name.entry(host.name.clone()).or_default() += 1;
    }

    /// One description fewer for `host`.
    fn remove(&mut self, host: &Host) {
        let Some(client) = self.per_client.get_mut(&host.ip) else {
            return;
        };
        let Some(n) = client.per_name.get_mut(&host.name) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            client.per_name.remove(&host.name);
        }
        client.total -= 1;
        if client.total == 0 {
            self.per_client.remove(&host.ip);
        }
        self.total -= 1;
    }
}

/// Opens a new description of the file (read-write if it can: the bool).
pub type Opener<'a> = &'a mut dyn FnMut() -> std::io::Result<(OwnedFd, bool)>;

impl<T> LockTable<T> {
    /// Bounds the descriptions open at once, over all clients (a LOCK that
    /// needs one more is refused, [`Limit::Server`]); none by default.
    pub fn set_max_open(&mut self, max: usize) {
        self.open.max = max;
    }

    /// Descriptions open, over all clients.
    pub fn open_count(&self) -> usize {
        self.open.total
    }

    /// Tries to take `span` for `owner` on file `fh` without waiting.
    /// `open` gives the owner a description if it has none on the file.
    /// On a conflict, `waiter` (a blocking LOCK) is queued, keeping the
    /// owner's description open for when it can be granted.
    #[allow(clippy::too_many_arguments)]
    pub fn lock(
        &mut self,
        fh: &[u8],
        owner: &Owner,
        oh: &[u8],
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
        waiter: Option<T>,
    ) -> std::io::Result<Attempt> {
        let file = self.files.entry(fh.to_vec()).or_default();
        if !file.owners.contains_key(owner) {
            if let Err(limit) = self.open.room_for(&owner.host) {
                self.tidy(fh);
                return Ok(Attempt::NoLocks(limit));
            }
            let (fd, writable) = open()?;
            self.open.add(&owner.host);
            file.owners.insert(
                owner.clone(),
                Held {
                    fd,
                    writable,
                    ranges: Vec::new(),
                    oh: oh.to_vec(),
                },
            );
        }
        let result = Self::try_take(file, owner, span, exclusive);
        match (&result, waiter) {
            (Ok(Attempt::Granted), _) => {
                if let Some(held) = file.owners.get_mut(owner) {
                    held.oh = oh.to_vec();
                }
                // A blocking LOCK asked again while waiting, granted now.
                file.waiters.retain(|w| !w.is(owner, span, exclusive));
            }
            (Ok(Attempt::Conflict), Some(callback)) => {
                let waiting = file
                    .waiters
                    .iter()
                    .filter(|w| w.owner.host.ip == owner.host.ip)
                    .count();
                let again = file.waiters.iter().any(|w| w.is(owner, span, exclusive));
                if waiting >= MAX_WAITERS_PER_CLIENT && !again {
                    self.tidy(fh);
                    return Ok(Attempt::NoLocks(Limit::Waiters));
                }
                // Over all files: a scan, made only for a LOCK that is to
                // wait (waiters are few but under contention, and bounded
                // per address).
                if !again && self.waiters_of(owner.host.ip) >= MAX_WAITERS_PER_CLIENT_TOTAL {
                    self.tidy(fh);
                    return Ok(Attempt::NoLocks(Limit::AllWaiters));
                }
                if !again && self.would_deadlock(fh, owner, span, exclusive) {
                    self.tidy(fh);
                    return Ok(Attempt::Deadlock);
                }
                if let Some(file) = self.files.get_mut(fh) {
                    Self::wait(
                        file,
                        Waiter {
                            owner: owner.clone(),
                            span,
                            exclusive,
                            asked: Instant::now(),
                            callback,
                        },
                    )
                }
            }
            _ => {}
        }
        self.tidy(fh);
        result
    }

    fn try_take(
        file: &mut FileLocks<T>,
        owner: &Owner,
        span: Span,
        exclusive: bool,
    ) -> std::io::Result<Attempt> {
        let Some(held) = file.owners.get_mut(owner) else {
            return Ok(Attempt::Conflict);
        };
        if exclusive && !held.writable {
            return Ok(Attempt::ReadOnly);
        }
        let kind = if exclusive {
            LockType::Write
        } else {
            LockType::Read
        };
        if ofd_setlk(&held.fd, kind, span.to_fcntl())? {
            held.add(span, exclusive);
            Ok(Attempt::Granted)
        } else {
            Ok(Attempt::Conflict)
        }
    }

    /// Releases `span` of `owner`'s locks on `fh` (nothing held: nothing
    /// to do), and drops the owner's waiters overlapping it (a client
    /// unlocks what it stopped waiting for, as knfsd's unlock cancels).
    pub fn unlock(&mut self, fh: &[u8], owner: &Owner, span: Span) -> std::io::Result<()> {
        let Some(file) = self.files.get_mut(fh) else {
            return Ok(());
        };
        file.waiters
            .retain(|w| !(w.owner == *owner && w.span.overlaps(span)));
        if let Some(held) = file.owners.get_mut(owner) {
            ofd_setlk(&held.fd, LockType::Unlock, span.to_fcntl())?;
            held.remove(span);
        }
        self.tidy(fh);
        Ok(())
    }

    /// The first lock in the way of `owner` taking `span` on `fh`, if any.
    /// `open` gives a description to ask through when the owner has none.
    pub fn test(
        &mut self,
        fh: &[u8],
        owner: &Owner,
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
    ) -> std::io::Result<Option<Holder>> {
        let kind = if exclusive {
            LockType::Write
        } else {
            LockType::Read
        };
        let own = self
            .files
            .get(fh)
            .and_then(|f| f.owners.get(owner))
            .map(|h| ofd_getlk(&h.fd, kind, span.to_fcntl()));
        let found = match own {
            Some(r) => r?,
            None => {
                let (fd, _) = open()?;
                ofd_getlk(&fd, kind, span.to_fcntl())?
            }
        };
        let Some((excl, range)) = found else {
            return Ok(None);
        };
        let span = Span::from_fcntl(range);
        let owner = self.files.get(fh).and_then(|f| {
            f.owners.iter().find_map(|(o, h)| {
                (o != owner && h.ranges.iter().any(|&(r, e)| e == excl && r.overlaps(span)))
                    .then(|| (o.svid, h.oh.clone()))
            })
        });
        Ok(Some(Holder {
            exclusive: excl,
            span,
            owner,
        }))
    }

    /// Whether `owner` waiting for `span` of `fh` would close a cycle: an
    /// owner in its way waits, directly or through others, for a lock
    /// `owner` holds. OFD locks have no deadlock detection, where knfsd's
    /// POSIX locks have the kernel's, so the table looks along its own
    /// owners and waiters (processes on the server are not seen, as a
    /// process's wait for an NLM lock is not). The walk visits each owner
    /// once and stops after [`DEADLOCK_SEARCH`] wait-for edges, answering
    /// no: it runs under the table's mutex, for every LOCK that would wait.
    fn would_deadlock(&self, fh: &[u8], owner: &Owner, span: Span, exclusive: bool) -> bool {
        // Who waits for what, over all files: one pass.
        let mut waits = HashMap::new();
        for (wfh, file) in &self.files {
            for w in &file.waiters {
                waits
                    .entry(&w.owner)
                    .or_insert_with(Vec::new)
                    .push((wfh.as_slice(), w));
            }
        }
        let mut seen: HashSet<&Owner> = HashSet::new();
        let mut todo: Vec<&Owner> = Vec::new();
        let mut edges = 0;
        let mut found = self.in_the_way(fh, owner, span, exclusive);
        loop {
            for o in found.drain(..) {
                edges += 1;
                if o == owner {
                    return true;
                }
                if edges > DEADLOCK_SEARCH {
                    return false;
                }
                if seen.insert(o) {
                    todo.push(o);
                }
            }
            let Some(o) = todo.pop() else {
                return false;
            };
            for &(wfh, w) in waits.get(o).map_or(&[][..], Vec::as_slice) {
                found.extend(self.in_the_way(wfh, o, w.span, w.exclusive));
            }
        }
    }

    /// The owners other than `owner` holding locks on `fh` that conflict
    /// with taking `span` (`exclusive` or not).
    fn in_the_way(&self, fh: &[u8], owner: &Owner, span: Span, exclusive: bool) -> Vec<&Owner> {
        let Some(file) = self.files.get(fh) else {
            return Vec::new();
        };
        file.owners
            .iter()
            .filter(|(o, held)| {
                *o != owner
                    && held
                        .ranges
                        .iter()
                        .any(|&(r, e)| r.overlaps(span) && (e || exclusive))
            })
            .map(|(o, _)| o)
            .collect()
    }

    /// Queues a blocked LOCK, unless the same one already waits (a client
    /// asks again while it waits): then only refreshes it.
    fn wait(file: &mut FileLocks<T>, waiter: Waiter<T>) {
        if let Some(w) = file
            .waiters
            .iter_mut()
            .find(|w| w.is(&waiter.owner, waiter.span, waiter.exclusive))
        {
            w.asked = waiter.asked;
            w.callback = waiter.callback;
            return;
        }
        file.waiters.push_back(waiter);
    }

    /// Drops `owner`'s waiter for exactly `span`/`exclusive` (CANCEL);
    /// whether there was one.
    pub fn cancel(&mut self, fh: &[u8], owner: &Owner, span: Span, exclusive: bool) -> bool {
        let Some(file) = self.files.get_mut(fh) else {
            return false;
        };
        let before = file.waiters.len();
        file.waiters.retain(|w| !w.is(owner, span, exclusive));
        let cancelled = file.waiters.len() != before;
        self.tidy(fh);
        cancelled
    }

    /// Grants what waiters of `fh` can now have, in the order they came;
    /// returns them (their callbacks are the caller's to make).
    pub fn grant_waiters(&mut self, fh: &[u8]) -> Vec<Waiter<T>> {
        let Some(file) = self.files.get_mut(fh) else {
            return Vec::new();
        };
        let mut granted = Vec::new();
        let mut waiting = VecDeque::with_capacity(file.waiters.len());
        while let Some(w) = file.waiters.pop_front() {
            match Self::try_take(file, &w.owner, w.span, w.exclusive) {
                Ok(Attempt::Granted) => granted.push(w),
                Ok(_) => waiting.push_back(w),
                Err(e) => {
                    tracing::warn!(error = %e, svid = w.owner.svid, "NLM: a blocked lock failed");
                }
            }
        }
        file.waiters = waiting;
        self.tidy(fh);
        granted
    }

    /// Grants what every file's waiters can now have (locks released by
    /// processes on the server are seen this way), and drops waiters whose
    /// client has not asked since `stale` (it stopped waiting without a
    /// CANCEL). Returns the granted ones with their file handles.
    pub fn grant_all(&mut self, stale: Instant) -> Vec<(Vec<u8>, Waiter<T>)> {
        let handles: Vec<Vec<u8>> = self
            .files
            .iter_mut()
            .filter_map(|(fh, f)| {
                f.waiters.retain(|w| w.asked >= stale);
                (!f.waiters.is_empty()).then(|| fh.clone())
            })
            .collect();
        let mut out = Vec::new();
        for fh in handles {
            for w in self.grant_waiters(&fh) {
                out.push((fh.clone(), w));
            }
        }
        let all: Vec<Vec<u8>> = self.files.keys().cloned().collect();
        for fh in all {
            self.tidy(&fh);
        }
        out
    }

    /// Drops every lock and waiter of the hosts `host` matches (a client
    /// rebooted: FREE_ALL, SM_NOTIFY); returns the files that had some,
    /// whose waiters may now be granted.
    pub fn drop_hosts(&mut self, mut matches: impl FnMut(&Host) -> bool) -> Vec<Vec<u8>> {
        let mut touched = Vec::new();
        let open = &mut self.open;
        for (fh, file) in self.files.iter_mut() {
            let before = file.owners.len() + file.waiters.len();
            // Closing the description releases its locks.
            file.owners.retain(|o, _| {
                let drop = matches(&o.host);
                if drop {
                    open.remove(&o.host);
                }
                !drop
            });
            file.waiters.retain(|w| !matches(&w.owner.host));
            if file.owners.len() + file.waiters.len() != before {
                touched.push(fh.clone());
            }
        }
        for fh in &touched {
            self.tidy(fh);
        }
        touched
    }

    /// Drops every lock and waiter on the files `matches` names (closing
    /// the descriptions releases the locks); the number of locks dropped.
    pub fn drop_files(&mut self, mut matches: impl FnMut(&[u8]) -> bool) -> usize {
        let mut dropped = 0;
        let open = &mut self.open;
        self.files.retain(|fh, file| {
            if !matches(fh) {
                return true;
            }
            for (o, held) in file.owners.drain() {
                dropped += held.ranges.len();
                open.remove(&o.host);
            }
            false
        });
        dropped
    }

    /// The hosts holding at least one lock.
    pub fn hosts(&self) -> Vec<Host> {
        let mut hosts: Vec<Host> = self
            .files
            .values()
            .flat_map(|f| f.owners.iter())
            .filter(|(_, h)| !h.ranges.is_empty())
            .map(|(o, _)| o.host.clone())
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// Locks held, over all owners and files (for metrics and tests).
    pub fn lock_count(&self) -> usize {
        self.files
            .values()
            .flat_map(|f| f.owners.values())
            .map(|h| h.ranges.len())
            .sum()
    }

    /// Waiters of client address `ip`, over all files.
    fn waiters_of(&self, ip: IpAddr) -> usize {
        self.files
            .values()
            .flat_map(|f| f.waiters.iter())
            .filter(|w| w.owner.host.ip == ip)
            .count()
    }

    /// Waiters queued, over all files.
    pub fn waiter_count(&self) -> usize {
        self.files.values().map(|f| f.waiters.len()).sum()
    }

    /// Closes the descriptions of owners that hold nothing and wait for
    /// nothing, and forgets files with neither.
    fn tidy(&mut self, fh: &[u8]) {
        let Some(file) = self.files.get_mut(fh) else {
            return;
        };
        let waiting: Vec<Owner> = file.waiters.iter().map(|w| w.owner.clone()).collect();
        let open = &mut self.open;
        file.owners.retain(|o, h| {
            let keep = !h.ranges.is_empty() || waiting.contains(o);
            if !keep {
                open.remove(&o.host);
            }
            keep
        });
        if file.owners.is_empty() && file.waiters.is_empty() {
            self.files.remove(fh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::path::Path;

    fn owner(svid: i32) -> Owner {
        Owner {
            host: Host {
                name: b"client".to_vec(),
                ip: "192.0.2.1".parse().unwrap(),
            },
            svid,
        }
    }

    /// An owner at another client address than [`owner`]'s.
    fn other_client() -> Owner {
        Owner {
            host: Host {
                name: b"other".to_vec(),
                ip: "192.0.2.2".parse().unwrap(),
            },
            svid: 1,
        }
    }

    fn opener(path: &Path) -> impl FnMut() -> std::io::Result<(OwnedFd, bool)> + '_ {
        move || {
            let f = OpenOptions::new().read(true).write(true).open(path)?;
            Ok((f.into(), true))
        }
    }

    fn span(offset: u64, len: u64) -> Span {
        Span::from_nlm(offset, len).unwrap()
    }

    /// A file in a fresh directory (kept while the guard lives).
    fn data_file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        (dir, path)
    }

    /// A process's own description of `path`, holding a write lock of
    /// `len` bytes (0: to the end) at 0, as a process on the server would.
    fn locked_locally(path: &Path, len: i64) -> std::fs::File {
        let local = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        assert!(ofd_setlk(&local, LockType::Write, LockRange { start: 0, len }).unwrap());
        local
    }

    #[test]
    fn spans_convert_like_lockd() {
        assert_eq!(span(0, 0).to_fcntl(), LockRange { start: 0, len: 0 });
        assert_eq!(span(10, 5).to_fcntl(), LockRange { start: 10, len: 5 });
        // Past the largest offset: to the end.
        assert_eq!(span(10, u64::MAX).end, u64::MAX);
        assert_eq!(Span::from_nlm(1 << 63, 1), None);
        // To the largest offset, from 0: 2^63 bytes, which `fcntl` takes
        // only as "to the end" (the length wrapped to i64::MIN: EINVAL).
        assert_eq!(span(0, 1 << 63).to_fcntl(), LockRange { start: 0, len: 0 });
        assert_eq!(
            span(5, (1 << 63) - 5).to_fcntl(),
            LockRange { start: 5, len: 0 }
        );
        assert_eq!(
            span(5, (1 << 63) - 6).to_fcntl(),
            LockRange {
                start: 5,
                len: i64::MAX - 5
            }
        );
        assert_eq!(span(7, 3).to_nlm(), (7, 3));
        assert_eq!(span(7, 0).to_nlm(), (7, 0));
    }

    #[test]
    fn a_wait_that_would_close_a_cycle_is_a_deadlock() {
        let (_dir, path) = data_file();
        let (_dir2, path2) = data_file();
        let mut t: LockTable<()> = LockTable::default();
        let (f, g) = (b"f".as_slice(), b"g".as_slice());
        let mut open = opener(&path);
        let mut open2 = opener(&path2);
        let (a, b, c) = (owner(1), owner(2), other_client());
        let mut lock = |t: &mut LockTable<()>, fh: &[u8], o: &Owner, at: u64, wait: bool| {
            let open: Opener<'_> = if fh == f { &mut open } else { &mut open2 };
            t.lock(fh, o, b"oh", span(at, 10), true, open, wait.then_some(()))
                .unwrap()
        };
        assert_eq!(lock(&mut t, f, &a, 0, false), Attempt::Granted);
        assert_eq!(lock(&mut t, f, &b, 20, false), Attempt::Granted);
        assert_eq!(lock(&mut t, g, &c, 0, false), Attempt::Granted);
        // a waits for b; b waiting for a closes the cycle.
        assert_eq!(lock(&mut t, f, &a, 20, true), Attempt::Conflict);
        assert_eq!(lock(&mut t, f, &b, 0, true), Attempt::Deadlock);
        assert_eq!(t.waiter_count(), 1);
        // Through another file and client: c waits for a (who waits for
        // b); b waiting for c's lock on g closes a longer cycle.
        assert_eq!(lock(&mut t, f, &c, 0, true), Attempt::Conflict);
        assert_eq!(lock(&mut t, g, &b, 0, true), Attempt::Deadlock);
        // No cycle: a client waiting for a lock whose holder waits for
        // nobody it holds.
        let d = owner(4);
        assert_eq!(lock(&mut t, g, &d, 0, true), Attempt::Conflict);
        // Not waiting is never a deadlock: denied.
        assert_eq!(lock(&mut t, f, &b, 0, false), Attempt::Conflict);
        // b lets go: a gets its lock, c no longer waits on a cycle.
        t.unlock(f, &b, span(20, 10)).unwrap();
        assert_eq!(t.grant_waiters(f).len(), 1);
    }

    #[test]
    fn owners_conflict_split_and_upgrade() {
        let (_dir, path) = data_file();
        let mut t: LockTable<()> = LockTable::default();
        let fh = b"fh".as_slice();
        let mut open = opener(&path);
        let (a, b) = (owner(1), owner(2));
        assert_eq!(
            t.lock(fh, &a, b"a", span(0, 100), true, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        assert_eq!(
            t.lock(fh, &b, b"b", span(50, 10), false, &mut open, None)
                .unwrap(),
            Attempt::Conflict
        );
        let holder = t
            .test(fh, &b, span(50, 10), false, &mut open)
            .unwrap()
            .unwrap();
        assert_eq!(holder.owner, Some((1, b"a".to_vec())));
        assert_eq!(holder.span, span(0, 100));
        // A partial unlock splits a's lock: the middle is free.
        t.unlock(fh, &a, span(40, 20)).unwrap();
        assert_eq!(
            t.lock(fh, &b, b"b", span(45, 10), true, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        assert_eq!(t.lock_count(), 3);
        // Downgrade a's first part; b may share it.
        assert_eq!(
            t.lock(fh, &a, b"a", span(0, 40), false, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        assert_eq!(
            t.lock(fh, &b, b"b", span(0, 10), false, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        // b waits for a's tail; a's unlock grants it.
        assert_eq!(
            t.lock(fh, &b, b"b", span(60, 0), true, &mut open, Some(()))
                .unwrap(),
            Attempt::Conflict
        );
        assert_eq!(t.waiter_count(), 1);
        assert!(t.grant_waiters(fh).is_empty());
        t.unlock(fh, &a, span(0, 0)).unwrap();
        let granted = t.grant_waiters(fh);
        assert_eq!(granted.len(), 1);
        assert_eq!(t.waiter_count(), 0);
        // The client goes away: everything of it is dropped.
        assert_eq!(t.hosts().len(), 1);
        assert_eq!(t.drop_hosts(|h| h.name == b"client").len(), 1);
        assert_eq!(t.lock_count(), 0);
        assert!(t.files.is_empty());
    }

    #[test]
    fn a_waiter_with_nothing_held_is_granted_after_the_release() {
        let (_dir, path) = data_file();
        let local = locked_locally(&path, 0);
        let mut t: LockTable<u32> = LockTable::default();
        let mut open = opener(&path);
        let c = owner(3);
        assert_eq!(
            t.lock(b"fh", &c, b"c", span(0, 10), true, &mut open, Some(7))
                .unwrap(),
            Attempt::Conflict
        );
        // Asked again while waiting: still one waiter.
        assert_eq!(
            t.lock(b"fh", &c, b"c", span(0, 10), true, &mut open, Some(8))
                .unwrap(),
            Attempt::Conflict
        );
        assert_eq!(t.waiter_count(), 1);
        assert!(t
            .grant_all(Instant::now() - std::time::Duration::from_secs(60))
            .is_empty());
        drop(local);
        let granted = t.grant_all(Instant::now() - std::time::Duration::from_secs(60));
        assert_eq!(granted.len(), 1);
        assert_eq!(granted[0].1.callback, 8);
        assert_eq!(t.lock_count(), 1);
        // A waiter its client stopped asking about is dropped.
        let other = owner(4);
        assert_eq!(
            t.lock(b"fh", &other, b"", span(0, 10), true, &mut open, Some(9))
                .unwrap(),
            Attempt::Conflict
        );
        assert!(t
            .grant_all(Instant::now() + std::time::Duration::from_secs(1))
            .is_empty());
        assert_eq!(t.waiter_count(), 0);
    }

    #[test]
    fn a_client_gets_a_bounded_number_of_descriptions_and_waiters() {
        let (_dir, path) = data_file();
        let mut t: LockTable<()> = LockTable::default();
        let mut open = opener(&path);
        // A LOCK of `at` on one file; a blocking one waits with a `()`.
        let mut lock = |t: &mut LockTable<()>, who: &Owner, at: Span, block: bool| {
            t.lock(b"fh", who, b"", at, block, &mut open, block.then_some(()))
                .unwrap()
        };
        // The client's owners under eight names of its own: one address.
        let named = |svid: i32| Owner {
            host: Host {
                name: format!("client-{}", svid % 8).into_bytes(),
                ip: owner(0).host.ip,
            },
            svid,
        };
        for svid in 0..MAX_DESCRIPTIONS_PER_CLIENT as i32 {
            assert_eq!(
                lock(&mut t, &named(svid), span(svid as u64, 1), false),
                Attempt::Granted
            );
        }
        let one_more = named(MAX_DESCRIPTIONS_PER_CLIENT as i32);
        assert_eq!(
            lock(&mut t, &one_more, span(1 << 30, 1), false),
            Attempt::NoLocks(Limit::Descriptions)
        );
        // Nor under a name it has not used yet.
        assert_eq!(
            lock(&mut t, &owner(1 << 20), span(1 << 30, 1), false),
            Attempt::NoLocks(Limit::Descriptions)
        );
        // Owners already open go on; another client is not affected.
        assert_eq!(lock(&mut t, &named(0), span(0, 2), false), Attempt::Granted);
        let other = other_client();
        assert_eq!(
            lock(&mut t, &other, span(1 << 31, 1), false),
            Attempt::Granted
        );
        assert_eq!(t.open_count(), MAX_DESCRIPTIONS_PER_CLIENT + 1);
        // Releasing gives descriptions back.
        t.unlock(b"fh", &named(5), span(5, 1)).unwrap();
        assert_eq!(
            lock(&mut t, &one_more, span(1 << 30, 1), false),
            Attempt::Granted
        );
        assert_eq!(t.drop_hosts(|h| h.ip == owner(0).host.ip).len(), 1);
        assert!(!t.open.per_client.contains_key(&owner(0).host.ip));
        assert_eq!(t.open_count(), 1);
        // Waiters: at most MAX_WAITERS_PER_CLIENT per file, over its names.
        for i in 0..MAX_WAITERS_PER_CLIENT as u64 {
            assert_eq!(
                lock(&mut t, &named(i as i32), span(1 << 31, 1 + i), true),
                Attempt::Conflict
            );
        }
        assert_eq!(
            lock(&mut t, &named(1), span(1 << 31, 9999), true),
            Attempt::NoLocks(Limit::Waiters)
        );
        assert_eq!(t.waiter_count(), MAX_WAITERS_PER_CLIENT);
    }

    #[test]
    fn a_client_has_a_bounded_number_of_waiters_over_all_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut t: LockTable<()> = LockTable::default();
        let files = MAX_WAITERS_PER_CLIENT_TOTAL / MAX_WAITERS_PER_CLIENT + 1;
        let mut local = Vec::new();
        let mut waiting = 0;
        for f in 0..files {
            let path = dir.path().join(format!("f{f}"));
            std::fs::write(&path, b"data").unwrap();
            local.push(locked_locally(&path, 0));
            let mut open = opener(&path);
            let fh = format!("fh{f}").into_bytes();
            for i in 0..MAX_WAITERS_PER_CLIENT as u64 {
                let got = t
                    .lock(&fh, &owner(1), b"", span(i, 1), true, &mut open, Some(()))
                    .unwrap();
                if waiting < MAX_WAITERS_PER_CLIENT_TOTAL {
                    assert_eq!(got, Attempt::Conflict, "file {f}, waiter {i}");
                    waiting += 1;
                } else {
                    assert_eq!(got, Attempt::NoLocks(Limit::AllWaiters), "file {f}");
                }
            }
        }
        assert_eq!(t.waiter_count(), MAX_WAITERS_PER_CLIENT_TOTAL);
        // Asking again for one already waiting is no new waiter.
        let f0 = dir.path().join("f0");
        let mut open = opener(&f0);
        assert_eq!(
            t.lock(
                b"fh0",
                &owner(1),
                b"",
                span(0, 1),
                true,
                &mut open,
                Some(())
            )
            .unwrap(),
            Attempt::Conflict
        );
        // Another address is not affected.
        let other = other_client();
        assert_eq!(
            t.lock(b"fh0", &other, b"", span(0, 1), true, &mut open, Some(()))
                .unwrap(),
            Attempt::Conflict
        );
        assert_eq!(t.waiter_count(), MAX_WAITERS_PER_CLIENT_TOTAL + 1);
    }

    #[test]
    fn a_client_holds_locks_under_a_bounded_number_of_names() {
        let (_dir, path) = data_file();
        let mut t: LockTable<()> = LockTable::default();
        let mut open = opener(&path);
        let ip = owner(0).host.ip;
        let as_name = |n: usize| Owner {
            host: Host {
                name: format!("name-{n}").into_bytes(),
                ip,
            },
            svid: 1,
        };
        for n in 0..MAX_NAMES_PER_CLIENT {
            let at = span(n as u64, 1);
            assert_eq!(
                t.lock(b"fh", &as_name(n), b"", at, false, &mut open, None)
                    .unwrap(),
                Attempt::Granted
            );
        }
        let at = span(1 << 20, 1);
        let new_name = as_name(MAX_NAMES_PER_CLIENT);
        assert_eq!(
            t.lock(b"fh", &new_name, b"", at, false, &mut open, None)
                .unwrap(),
            Attempt::NoLocks(Limit::Names)
        );
        // A name in use takes more owners; a name given up makes room.
        let again = Owner {
            svid: 2,
            ..as_name(0)
        };
        assert_eq!(
            t.lock(b"fh", &again, b"", at, false, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        t.unlock(b"fh", &as_name(7), span(7, 1)).unwrap();
        assert_eq!(
            t.lock(
                b"fh",
                &new_name,
                b"",
                span(1 << 21, 1),
                false,
                &mut open,
                None
            )
            .unwrap(),
            Attempt::Granted
        );
    }

    #[test]
    fn the_server_holds_a_bounded_number_of_descriptions() {
        let (_dir, path) = data_file();
        let mut t: LockTable<()> = LockTable::default();
        t.set_max_open(10);
        let mut open = opener(&path);
        let client = |i: u8| Owner {
            host: Host {
                name: b"c".to_vec(),
                ip: IpAddr::from([192, 0, 2, i]),
            },
            svid: 1,
        };
        for i in 0..10 {
            let at = span(u64::from(i), 1);
            assert_eq!(
                t.lock(b"fh", &client(i), b"", at, false, &mut open, None)
                    .unwrap(),
                Attempt::Granted
            );
        }
        assert_eq!(
            t.lock(b"fh", &client(10), b"", span(99, 1), false, &mut open, None)
                .unwrap(),
            Attempt::NoLocks(Limit::Server)
        );
        t.unlock(b"fh", &client(3), span(3, 1)).unwrap();
        assert_eq!(
            t.lock(b"fh", &client(10), b"", span(99, 1), false, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
    }

    #[test]
    fn a_process_on_the_server_conflicts() {
        let (_dir, path) = data_file();
        let _local = locked_locally(&path, 1);
        let mut t: LockTable<()> = LockTable::default();
        let mut open = opener(&path);
        assert_eq!(
            t.lock(b"fh", &owner(1), b"", span(0, 0), false, &mut open, None)
                .unwrap(),
            Attempt::Conflict
        );
        let holder = t
            .test(b"fh", &owner(1), span(0, 0), false, &mut open)
            .unwrap()
            .unwrap();
        assert_eq!(holder.owner, None);
        assert!(holder.exclusive);
        // Nothing held, nothing waiting: nothing kept open.
        assert!(t.files.is_empty());
    }
}
