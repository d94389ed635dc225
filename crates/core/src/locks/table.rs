//! The byte-range lock table: for every file with locks, one open file
//! description per lock owner, holding that owner's byte-range locks as
//! OFD locks; and the blocked locks waiting for a conflicting lock to go.
//!
//! The kernel decides every conflict: between owners of different
//! clients, between owners of one client, and with processes on the
//! server itself (`fcntl` locks conflict with OFD locks). Upgrades,
//! downgrades and the split of a lock by a partial unlock are the
//! kernel's POSIX semantics on the owner's description. The table keeps
//! its own copy of each owner's ranges, as the kernel holds them, only to
//! know when an owner holds nothing more (its description is then
//! closed), whom to name as the holder in a TEST's denial, who waits for
//! whom (deadlocks), and how many ranges each client address holds (a
//! lock, or an unlock splitting one, past its bound is refused before the
//! kernel is asked: [`super::limits::MAX_RANGES_PER_CLIENT`]).
//!
//! Everything here is synchronous and quick (non-blocking `fcntl`s under
//! the caller's mutex); the services call it from blocking threads.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::time::Instant;

use dionfs_sys::lock::{ofd_getlk, ofd_setlk, LockType};

use super::limits::{
    Descriptions, Limit, Ranges, MAX_RANGES_PER_CLIENT, MAX_WAITERS_PER_CLIENT,
    MAX_WAITERS_PER_CLIENT_TOTAL, RANGE_SPLITS_PAST_BOUND,
};
use super::{LockOwner, Span};

/// What one owner holds on one file.
struct Held {
    fd: OwnedFd,
    /// Whether `fd` is open for writing (exclusive locks need it).
    writable: bool,
    /// The owner's locks as the kernel holds them on `fd`: disjoint, by
    /// start, each (end, exclusive), adjacent locks of one kind merged
    /// into one as the kernel merges them (`posix_lock_inode`), so that
    /// their number is the kernel's. Ordered, so that a lock or unlock
    /// looks only at the ranges it touches.
    ranges: BTreeMap<u64, (u64, bool)>,
    /// What the owner's last call called it (NLM's owner handle), to
    /// name it in a TEST's denial.
    label: Vec<u8>,
}

/// What a lock or unlock does to an owner's ranges: the ranges it takes
/// away (by start) and those it puts in their place.
struct Change {
    removed: Vec<u64>,
    added: Vec<(Span, bool)>,
}

impl Change {
    /// How many ranges more the owner holds after it.
    fn grows_by(&self) -> isize {
        // Both are at most the owner's ranges plus two: far below isize::MAX.
        self.added.len() as isize - self.removed.len() as isize
    }
}

impl Held {
    /// The owner's ranges sharing a byte with `span`, by start.
    fn overlapping(&self, span: Span) -> impl Iterator<Item = (Span, bool)> + '_ {
        // The one range that may start before `span` and reach into it
        // (the ranges are disjoint), then those starting in it.
        let before = self
            .ranges
            .range(..span.start)
            .next_back()
            .filter(|(_, &(end, _))| end >= span.start)
            .map_or(span.start, |(&start, _)| start);
        // `before` is at most `span.start`, so at most its end but for a
        // span ending before it starts, which `range` would panic at.
        self.ranges
            .range(before..=span.end.max(before))
            .map(|(&start, &(end, exclusive))| (Span { start, end }, exclusive))
    }

    /// What taking `span` (`Some(exclusive)`) or releasing it (`None`)
    /// does to the owner's ranges, as the kernel does it: ranges of
    /// another kind (all, for a release) lose the bytes of `span`, which
    /// splits one that reaches past both its ends in two; ranges of the
    /// lock's kind overlapping or adjacent to it are merged into it.
    fn plan(&self, span: Span, lock: Option<bool>) -> Change {
        let mut change = Change {
            removed: Vec::new(),
            added: Vec::new(),
        };
        let mut merged = span;
        // A lock also looks at the bytes next to it, to merge with.
        let touching = match lock {
            Some(_) => Span {
                start: span.start.saturating_sub(1),
                end: span.end.saturating_add(1),
            },
            None => span,
        };
        for (r, exclusive) in self.overlapping(touching) {
            if lock == Some(exclusive) {
                merged.start = merged.start.min(r.start);
                merged.end = merged.end.max(r.end);
                change.removed.push(r.start);
                continue;
            }
            if !r.overlaps(span) {
                // Adjacent, of another kind: untouched.
                continue;
            }
            change.removed.push(r.start);
            if r.start < span.start {
                let left = Span {
                    start: r.start,
                    end: span.start - 1,
                };
                change.added.push((left, exclusive));
            }
            if r.end > span.end {
                let right = Span {
                    start: span.end + 1,
                    end: r.end,
                };
                change.added.push((right, exclusive));
            }
        }
        if let Some(exclusive) = lock {
            change.added.push((merged, exclusive));
        }
        change
    }

    fn apply(&mut self, change: Change) {
        for start in change.removed {
            self.ranges.remove(&start);
        }
        for (span, exclusive) in change.added {
            self.ranges.insert(span.start, (span.end, exclusive));
        }
    }
}

/// A blocked lock waiting for its range; `T` is what the service needs
/// to call the client back when it is granted.
pub struct Waiter<O, T> {
    pub owner: O,
    pub span: Span,
    pub exclusive: bool,
    /// When the client last asked (it asks again while it waits).
    pub asked: Instant,
    pub callback: T,
}

impl<O: LockOwner, T> Waiter<O, T> {
    /// Whether this waits for exactly `span`, `exclusive`, for `owner` (a
    /// LOCK asked again, a CANCEL).
    fn is(&self, owner: &O, span: Span, exclusive: bool) -> bool {
        self.owner == *owner && self.span == span && self.exclusive == exclusive
    }
}

/// The locks and waiters of one file.
struct FileLocks<O, T> {
    owners: HashMap<O, Held>,
    waiters: VecDeque<Waiter<O, T>>,
}

impl<O, T> Default for FileLocks<O, T> {
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
    /// A limit is reached (NLM4_DENIED_NOLOCKS).
    NoLocks(Limit),
    /// Waiting would close a cycle of owners each waiting for the next
    /// (NLM4_DEADLCK, EDEADLK to the application).
    Deadlock,
}

/// The outcome of an unlock.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Unlock {
    /// Released (or nothing was held).
    Released,
    /// It would split a lock past the address's bound on ranges; nothing
    /// changed (NLM4_DENIED_NOLOCKS, NFS4ERR_LOCK_RANGE).
    NoLocks(Limit),
}

/// How many wait-for edges a deadlock search follows before it gives up
/// (under the table's mutex).
const DEADLOCK_SEARCH: usize = 1024;

/// Who holds the lock a TEST ran into.
#[derive(Debug, PartialEq, Eq)]
pub struct Holder<O> {
    pub exclusive: bool,
    pub span: Span,
    /// The owner, with what its last call called it, if the lock is one
    /// of the table's (else a process on the server's, or another
    /// server's client's).
    pub owner: Option<(O, Vec<u8>)>,
}

/// What retrying a file's waiters came to: those granted now, in the
/// order they came, and those dropped because taking their lock failed
/// (an `fcntl` error, the caller's to report).
pub struct Retried<O, T> {
    pub granted: Vec<Waiter<O, T>>,
    pub failed: Vec<(Waiter<O, T>, std::io::Error)>,
}

/// Every lock of the server, by file (its NFS handle): see the module
/// doc of [`super`]. `O`: the owners; `T`: see [`Waiter`].
pub struct LockTable<O: LockOwner, T> {
    files: HashMap<Vec<u8>, FileLocks<O, T>>,
    open: Descriptions<O>,
    ranges: Ranges,
}

impl<O: LockOwner, T> Default for LockTable<O, T> {
    fn default() -> Self {
        Self {
            files: HashMap::new(),
            open: Descriptions::default(),
            ranges: Ranges::default(),
        }
    }
}

/// Opens a new description of the file (read-write if it can: the bool).
pub type Opener<'a> = &'a mut dyn FnMut() -> std::io::Result<(OwnedFd, bool)>;

impl<O: LockOwner, T> LockTable<O, T> {
    /// Bounds the descriptions open at once, over all clients (a LOCK that
    /// needs one more is refused, [`Limit::Server`]); none by default.
    pub fn set_max_open(&mut self, max: usize) {
        self.open.set_max(max);
    }

    /// Descriptions open, over all clients.
    pub fn open_count(&self) -> usize {
        self.open.total()
    }

    /// The accounting of open descriptions (for tests of the limits).
    #[cfg(test)]
    pub(super) fn descriptions(&self) -> &Descriptions<O> {
        &self.open
    }

    /// The accounting of ranges held (for tests of the limits).
    #[cfg(test)]
    pub(super) fn ranges_held(&self) -> &Ranges {
        &self.ranges
    }

    /// Tries to take `span` for `owner` on file `fh` without waiting;
    /// `label` is what the call calls the owner (see [`Holder`]). `open`
    /// gives the owner a description if it has none on the file. On a
    /// conflict, `waiter` (a blocking lock) is queued, keeping the owner's
    /// description open for when it can be granted.
    #[allow(clippy::too_many_arguments)]
    pub fn lock(
        &mut self,
        fh: &[u8],
        owner: &O,
        label: &[u8],
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
        waiter: Option<T>,
    ) -> std::io::Result<Attempt> {
        let file = self.files.entry(fh.to_vec()).or_default();
        if !file.owners.contains_key(owner) {
            // A new owner's lock is one more range: refused before its
            // description is opened if there is no room for it.
            let room = self
                .open
                .room_for(owner)
                .and_then(|()| Self::room_for_ranges(&self.ranges, owner, 1));
            if let Err(limit) = room {
                self.tidy(fh);
                return Ok(Attempt::NoLocks(limit));
            }
            let (fd, writable) = open()?;
            self.open.add(owner);
            file.owners.insert(
                owner.clone(),
                Held {
                    fd,
                    writable,
                    ranges: BTreeMap::new(),
                    label: label.to_vec(),
                },
            );
        }
        let result = Self::try_take(file, &mut self.ranges, owner, span, exclusive);
        match (&result, waiter) {
            (Ok(Attempt::Granted), _) => {
                if let Some(held) = file.owners.get_mut(owner) {
                    held.label = label.to_vec();
                }
                // A blocking LOCK asked again while waiting, granted now.
                file.waiters.retain(|w| !w.is(owner, span, exclusive));
            }
            (Ok(Attempt::Conflict), Some(callback)) => {
                let waiting = file
                    .waiters
                    .iter()
                    .filter(|w| w.owner.address() == owner.address())
                    .count();
                let again = file.waiters.iter().any(|w| w.is(owner, span, exclusive));
                if waiting >= MAX_WAITERS_PER_CLIENT && !again {
                    self.tidy(fh);
                    return Ok(Attempt::NoLocks(Limit::Waiters));
                }
                // Over all files: a scan, made only for a LOCK that is to
                // wait (waiters are few but under contention, and bounded
                // per address).
                if !again && self.waiters_of(owner.address()) >= MAX_WAITERS_PER_CLIENT_TOTAL {
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

    /// Takes `span` for `owner`, if the kernel grants it and the owner's
    /// address has room for the ranges it comes to (checked first: the
    /// kernel is not asked past the bound).
    fn try_take(
        file: &mut FileLocks<O, T>,
        ranges: &mut Ranges,
        owner: &O,
        span: Span,
        exclusive: bool,
    ) -> std::io::Result<Attempt> {
        let Some(held) = file.owners.get_mut(owner) else {
            return Ok(Attempt::Conflict);
        };
        if exclusive && !held.writable {
            return Ok(Attempt::ReadOnly);
        }
        let change = held.plan(span, Some(exclusive));
        if let Err(limit) = Self::room_for_ranges(ranges, owner, change.grows_by()) {
            return Ok(Attempt::NoLocks(limit));
        }
        let kind = if exclusive {
            LockType::Write
        } else {
            LockType::Read
        };
        if ofd_setlk(&held.fd, kind, span.to_fcntl())? {
            ranges.change(owner.address(), change.removed.len(), change.added.len());
            held.apply(change);
            Ok(Attempt::Granted)
        } else {
            Ok(Attempt::Conflict)
        }
    }

    /// Whether `owner`'s address may hold `grows_by` ranges more with a
    /// lock ([`MAX_RANGES_PER_CLIENT`]).
    fn room_for_ranges(ranges: &Ranges, owner: &O, grows_by: isize) -> Result<(), Limit> {
        if ranges.room(owner.address(), grows_by, MAX_RANGES_PER_CLIENT) {
            Ok(())
        } else {
            Err(Limit::Ranges)
        }
    }

    /// Releases `span` of `owner`'s locks on `fh` (nothing held: nothing
    /// to do), and drops the owner's waiters overlapping it (a client
    /// unlocks what it stopped waiting for, as knfsd's unlock cancels).
    /// An unlock that splits a lock in two, its address holding
    /// [`RANGE_SPLITS_PAST_BOUND`] ranges past [`MAX_RANGES_PER_CLIENT`]
    /// already, is refused and changes nothing.
    pub fn unlock(&mut self, fh: &[u8], owner: &O, span: Span) -> std::io::Result<Unlock> {
        let Some(file) = self.files.get_mut(fh) else {
            return Ok(Unlock::Released);
        };
        if let Some(held) = file.owners.get_mut(owner) {
            let change = held.plan(span, None);
            let max = MAX_RANGES_PER_CLIENT + RANGE_SPLITS_PAST_BOUND;
            if !self.ranges.room(owner.address(), change.grows_by(), max) {
                return Ok(Unlock::NoLocks(Limit::Ranges));
            }
            ofd_setlk(&held.fd, LockType::Unlock, span.to_fcntl())?;
            self.ranges
                .change(owner.address(), change.removed.len(), change.added.len());
            held.apply(change);
        }
        file.waiters
            .retain(|w| !(w.owner == *owner && w.span.overlaps(span)));
        self.tidy(fh);
        Ok(Unlock::Released)
    }

    /// The first lock in the way of `owner` taking `span` on `fh`, if any.
    /// `open` gives a description to ask through when the owner has none.
    pub fn test(
        &mut self,
        fh: &[u8],
        owner: &O,
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
    ) -> std::io::Result<Option<Holder<O>>> {
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
                (o != owner && h.overlapping(span).any(|(_, e)| e == excl))
                    .then(|| (o.clone(), h.label.clone()))
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
    fn would_deadlock(&self, fh: &[u8], owner: &O, span: Span, exclusive: bool) -> bool {
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
        let mut seen: HashSet<&O> = HashSet::new();
        let mut todo: Vec<&O> = Vec::new();
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
    fn in_the_way(&self, fh: &[u8], owner: &O, span: Span, exclusive: bool) -> Vec<&O> {
        let Some(file) = self.files.get(fh) else {
            return Vec::new();
        };
        file.owners
            .iter()
            .filter(|(o, held)| *o != owner && held.overlapping(span).any(|(_, e)| e || exclusive))
            .map(|(o, _)| o)
            .collect()
    }

    /// Queues a blocked LOCK, unless the same one already waits (a client
    /// asks again while it waits): then only refreshes it.
    fn wait(file: &mut FileLocks<O, T>, waiter: Waiter<O, T>) {
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
    pub fn cancel(&mut self, fh: &[u8], owner: &O, span: Span, exclusive: bool) -> bool {
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
    /// returns them (their callbacks are the caller's to make), and those
    /// dropped on an error.
    pub fn grant_waiters(&mut self, fh: &[u8]) -> Retried<O, T> {
        let mut retried = Retried {
            granted: Vec::new(),
            failed: Vec::new(),
        };
        let Some(file) = self.files.get_mut(fh) else {
            return retried;
        };
        let mut waiting = VecDeque::with_capacity(file.waiters.len());
        while let Some(w) = file.waiters.pop_front() {
            match Self::try_take(file, &mut self.ranges, &w.owner, w.span, w.exclusive) {
                Ok(Attempt::Granted) => retried.granted.push(w),
                // In the way, or no room for the range yet (it waits for
                // its client to release some, as for the holder's).
                Ok(_) => waiting.push_back(w),
                Err(e) => retried.failed.push((w, e)),
            }
        }
        file.waiters = waiting;
        self.tidy(fh);
        retried
    }

    /// Grants what every file's waiters can now have (locks released by
    /// processes on the server are seen this way), and drops waiters whose
    /// client has not asked since `stale` (it stopped waiting without a
    /// CANCEL). Returns what each file's retry came to, by file handle.
    pub fn grant_all(&mut self, stale: Instant) -> Vec<(Vec<u8>, Retried<O, T>)> {
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
            let retried = self.grant_waiters(&fh);
            out.push((fh, retried));
        }
        let all: Vec<Vec<u8>> = self.files.keys().cloned().collect();
        for fh in all {
            self.tidy(&fh);
        }
        out
    }

    /// Drops every lock and waiter of the clients `matches` names (a
    /// client rebooted: NLM's FREE_ALL, SM_NOTIFY); returns the files that
    /// had some, whose waiters may now be granted.
    pub fn drop_clients(&mut self, mut matches: impl FnMut(&O::Client) -> bool) -> Vec<Vec<u8>> {
        let mut touched = Vec::new();
        let (open, ranges) = (&mut self.open, &mut self.ranges);
        for (fh, file) in self.files.iter_mut() {
            let before = file.owners.len() + file.waiters.len();
            // Closing the description releases its locks.
            file.owners.retain(|o, held| {
                let drop = matches(&o.client());
                if drop {
                    open.remove(o);
                    ranges.change(o.address(), held.ranges.len(), 0);
                }
                !drop
            });
            file.waiters.retain(|w| !matches(&w.owner.client()));
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
        let (open, ranges) = (&mut self.open, &mut self.ranges);
        self.files.retain(|fh, file| {
            if !matches(fh) {
                return true;
            }
            for (o, held) in file.owners.drain() {
                dropped += held.ranges.len();
                open.remove(&o);
                ranges.change(o.address(), held.ranges.len(), 0);
            }
            false
        });
        dropped
    }

    /// Whether `owner` holds a lock on `fh` (NFSv4's FREE_STATEID of a
    /// lock stateid is refused while its owner does).
    pub fn holds(&self, fh: &[u8], owner: &O) -> bool {
        self.files
            .get(fh)
            .and_then(|f| f.owners.get(owner))
            .is_some_and(|h| !h.ranges.is_empty())
    }

    /// Whether an owner `matches` holds a lock on `fh` (a delegation's
    /// grant looks for other clients' locks).
    pub fn any_holder(&self, fh: &[u8], mut matches: impl FnMut(&O) -> bool) -> bool {
        self.files.get(fh).is_some_and(|f| {
            f.owners
                .iter()
                .any(|(o, h)| !h.ranges.is_empty() && matches(o))
        })
    }

    /// The clients holding at least one lock.
    pub fn clients(&self) -> Vec<O::Client> {
        let mut clients: Vec<O::Client> = self
            .files
            .values()
            .flat_map(|f| f.owners.iter())
            .filter(|(_, h)| !h.ranges.is_empty())
            .map(|(o, _)| o.client())
            .collect();
        clients.sort();
        clients.dedup();
        clients
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
            .filter(|w| w.owner.address() == ip)
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
        let waiting: Vec<O> = file.waiters.iter().map(|w| w.owner.clone()).collect();
        let open = &mut self.open;
        file.owners.retain(|o, h| {
            let keep = !h.ranges.is_empty() || waiting.contains(o);
            if !keep {
                open.remove(o);
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
    use super::super::testing::*;
    use super::*;

    type Table<T> = LockTable<TestOwner, T>;

    #[test]
    fn a_wait_that_would_close_a_cycle_is_a_deadlock() {
        let (_dir, path) = data_file();
        let (_dir2, path2) = data_file();
        let mut t: Table<()> = LockTable::default();
        let (f, g) = (b"f".as_slice(), b"g".as_slice());
        let mut open = opener(&path);
        let mut open2 = opener(&path2);
        let (a, b, c) = (owner(1), owner(2), other_client());
        let mut lock = |t: &mut Table<()>, fh: &[u8], o: &TestOwner, at: u64, wait: bool| {
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
        assert_eq!(t.unlock(f, &b, span(20, 10)).unwrap(), Unlock::Released);
        assert_eq!(t.grant_waiters(f).granted.len(), 1);
    }

    #[test]
    fn owners_conflict_split_and_upgrade() {
        let (_dir, path) = data_file();
        let mut t: Table<()> = LockTable::default();
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
        assert_eq!(holder.owner, Some((a.clone(), b"a".to_vec())));
        assert_eq!(holder.span, span(0, 100));
        // A partial unlock splits a's lock: the middle is free.
        assert_eq!(t.unlock(fh, &a, span(40, 20)).unwrap(), Unlock::Released);
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
        assert!(t.grant_waiters(fh).granted.is_empty());
        assert_eq!(t.unlock(fh, &a, span(0, 0)).unwrap(), Unlock::Released);
        assert_eq!(t.grant_waiters(fh).granted.len(), 1);
        assert_eq!(t.waiter_count(), 0);
        // The client goes away: everything of it is dropped.
        assert_eq!(t.clients().len(), 1);
        let client = |c: &TestClient| matches!(c, TestClient::Host(name, _) if name == b"client");
        assert_eq!(t.drop_clients(client).len(), 1);
        assert_eq!(t.lock_count(), 0);
        assert!(t.files.is_empty());
    }

    #[test]
    fn an_owners_ranges_merge_and_split_as_the_kernel_does() {
        let (_dir, path) = data_file();
        let mut t: Table<()> = LockTable::default();
        let fh = b"fh".as_slice();
        let mut open = opener(&path);
        let a = owner(1);
        let mut lock = |t: &mut Table<()>, at: Span, exclusive: bool| {
            t.lock(fh, &a, b"", at, exclusive, &mut open, None).unwrap()
        };
        // The lock the kernel shows another owner at byte `at`, and the
        // table's count: they must agree.
        let kernel = |t: &mut Table<()>, at: u64| {
            let probe = &mut opener(&path);
            let holder = t.test(fh, &other_client(), span(at, 1), true, probe);
            let holder = holder.unwrap().unwrap();
            (holder.span, holder.exclusive)
        };
        assert_eq!(lock(&mut t, span(0, 10), true), Attempt::Granted);
        // Adjacent, of another kind: two.
        assert_eq!(lock(&mut t, span(10, 10), false), Attempt::Granted);
        assert_eq!(t.lock_count(), 2);
        assert_eq!(kernel(&mut t, 15), (span(10, 10), false));
        // Adjacent, of one kind: merged.
        assert_eq!(lock(&mut t, span(20, 10), false), Attempt::Granted);
        assert_eq!(t.lock_count(), 2);
        assert_eq!(kernel(&mut t, 25), (span(10, 20), false));
        // A write lock across both: merged with the write lock, cutting
        // the read lock short.
        assert_eq!(lock(&mut t, span(5, 20), true), Attempt::Granted);
        assert_eq!(t.lock_count(), 2);
        assert_eq!(kernel(&mut t, 0), (span(0, 25), true));
        assert_eq!(kernel(&mut t, 27), (span(25, 5), false));
        // An unlock in the middle splits it.
        assert_eq!(t.unlock(fh, &a, span(3, 2)).unwrap(), Unlock::Released);
        assert_eq!(t.lock_count(), 3);
        assert_eq!(kernel(&mut t, 0), (span(0, 3), true));
        assert_eq!(kernel(&mut t, 5), (span(5, 20), true));
        // To the end, then all of it: one, then none.
        assert_eq!(lock(&mut t, span(2, 0), false), Attempt::Granted);
        assert_eq!(t.lock_count(), 2);
        assert_eq!(kernel(&mut t, 1 << 40), (span(2, 0), false));
        assert_eq!(t.unlock(fh, &a, span(0, 0)).unwrap(), Unlock::Released);
        assert_eq!(t.lock_count(), 0);
        assert!(t.files.is_empty());
    }

    #[test]
    fn a_waiter_with_nothing_held_is_granted_after_the_release() {
        let (_dir, path) = data_file();
        let local = locked_locally(&path, 0);
        let mut t: Table<u32> = LockTable::default();
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
        let stale = Instant::now() - std::time::Duration::from_secs(60);
        assert!(granted(t.grant_all(stale)).is_empty());
        drop(local);
        assert_eq!(granted(t.grant_all(stale)), [8]);
        assert_eq!(t.lock_count(), 1);
        // A waiter its client stopped asking about is dropped.
        let other = owner(4);
        assert_eq!(
            t.lock(b"fh", &other, b"", span(0, 10), true, &mut open, Some(9))
                .unwrap(),
            Attempt::Conflict
        );
        let now = Instant::now() + std::time::Duration::from_secs(1);
        assert!(granted(t.grant_all(now)).is_empty());
        assert_eq!(t.waiter_count(), 0);
    }

    #[test]
    fn holds_tells_whether_an_owner_has_locks_on_a_file() {
        let (_dir, path) = data_file();
        let mut t: Table<()> = LockTable::default();
        let mut open = opener(&path);
        let a = owner(1);
        assert!(!t.holds(b"fh", &a));
        assert_eq!(
            t.lock(b"fh", &a, b"", span(0, 10), true, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        assert!(t.holds(b"fh", &a));
        assert!(!t.holds(b"other", &a));
        assert!(!t.holds(b"fh", &owner(2)));
        assert_eq!(t.unlock(b"fh", &a, span(0, 0)).unwrap(), Unlock::Released);
        assert!(!t.holds(b"fh", &a));
    }

    #[test]
    fn a_process_on_the_server_conflicts() {
        let (_dir, path) = data_file();
        let _local = locked_locally(&path, 1);
        let mut t: Table<()> = LockTable::default();
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

    #[test]
    fn owners_of_two_protocols_share_a_file_and_conflict() {
        let (_dir, path) = data_file();
        let mut t: Table<u32> = LockTable::default();
        let fh = b"fh".as_slice();
        let mut open = opener(&path);
        let nlm = owner(1);
        let v4 = TestOwner::State {
            clientid: 7,
            ip: client_ip(),
            owner: b"lock-owner".to_vec(),
        };
        let mut lock = |t: &mut Table<u32>, o: &TestOwner, at: Span, excl, wait: Option<u32>| {
            t.lock(fh, o, b"label", at, excl, &mut open, wait).unwrap()
        };
        // One holds, the other is refused, and a TEST names the holder.
        assert_eq!(
            lock(&mut t, &nlm, span(0, 100), true, None),
            Attempt::Granted
        );
        assert_eq!(
            lock(&mut t, &v4, span(50, 10), false, Some(4)),
            Attempt::Conflict
        );
        let holder = t
            .test(fh, &v4, span(50, 10), false, &mut opener(&path))
            .unwrap()
            .unwrap();
        assert_eq!(holder.owner, Some((nlm.clone(), b"label".to_vec())));
        // The v4 owner waits for the NLM one: the NLM one waiting for the
        // v4 one's lock would close a cycle.
        assert_eq!(
            lock(&mut t, &v4, span(200, 10), true, None),
            Attempt::Granted
        );
        assert_eq!(
            lock(&mut t, &nlm, span(200, 10), true, Some(3)),
            Attempt::Deadlock
        );
        // The NLM owner's release wakes the v4 owner's waiter.
        assert_eq!(t.unlock(fh, &nlm, span(0, 0)).unwrap(), Unlock::Released);
        let retried = t.grant_waiters(fh);
        let callbacks: Vec<u32> = retried.granted.iter().map(|w| w.callback).collect();
        assert_eq!(callbacks, [4]);
        assert_eq!(t.clients(), [TestClient::Id(7)]);
        // One address, two clients: counted together, dropped apart.
        assert_eq!(
            lock(&mut t, &nlm, span(300, 1), true, None),
            Attempt::Granted
        );
        assert_eq!(t.open_count(), 2);
        let host = TestClient::Host(b"client".to_vec(), client_ip());
        assert_eq!(t.clients(), [host.clone(), TestClient::Id(7)]);
        assert_eq!(t.drop_clients(|c| *c == TestClient::Id(7)), [fh.to_vec()]);
        assert_eq!(t.clients(), [host]);
        assert_eq!(
            lock(&mut t, &nlm, span(50, 10), true, None),
            Attempt::Granted
        );
    }
}
