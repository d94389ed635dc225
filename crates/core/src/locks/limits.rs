//! What one client address may hold in the lock tables, and the
//! accounting of the descriptions the table keeps open. Limits are per
//! client *address*: what a client calls itself (an NLM `caller_name`, an
//! NFSv4 client id) is its own word, and one client could otherwise take
//! any number of descriptors by calling itself by new names.

use std::collections::HashMap;
use std::net::IpAddr;

use super::LockOwner;

/// Which bound a lock refused for want of room (NLM4_DENIED_NOLOCKS) ran
/// into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`MAX_DESCRIPTIONS_PER_CLIENT`].
    Descriptions,
    /// [`MAX_NAMES_PER_CLIENT`].
    Names,
    /// The server's own bound, over all clients
    /// ([`super::table::LockTable::set_max_open`]).
    Server,
    /// [`MAX_WAITERS_PER_CLIENT`].
    Waiters,
    /// [`MAX_WAITERS_PER_CLIENT_TOTAL`].
    AllWaiters,
    /// [`MAX_RANGES_PER_CLIENT`] (for an unlock that splits a lock,
    /// [`RANGE_SPLITS_PAST_BOUND`] more).
    Ranges,
}

/// Open descriptions (lock owners on files) one client address may have,
/// over all its names: a client cannot run the server out of descriptors.
pub const MAX_DESCRIPTIONS_PER_CLIENT: usize = 4096;
/// Names (clients: NLM hosts, NFSv4 client ids) one client address may
/// hold locks under at once. A client uses one; clients behind one NAT
/// address each use their own.
pub const MAX_NAMES_PER_CLIENT: usize = 256;
/// Blocked locks one client address may have waiting on one file.
pub const MAX_WAITERS_PER_CLIENT: usize = 256;
/// Blocked locks one client address may have waiting, over all files:
/// each keeps the call's cookie, names and owner handle (up to 4 KiB),
/// and the per-file bound times the descriptions an address may hold came
/// to a million of them, gigabytes, retried every second.
pub const MAX_WAITERS_PER_CLIENT_TOTAL: usize = 1024;
/// Share reservations one client address may hold, over all files: each
/// costs memory, and a reservation of no access or deny mode conflicts
/// with none.
pub const MAX_SHARES_PER_CLIENT: usize = 4096;
/// Byte ranges one client address may hold locked, over all its owners
/// and files, as the kernel holds them (adjacent ranges of one kind are
/// one). Each is a kernel `file_lock` (about 200 bytes) and an entry in
/// the table; and every `fcntl` on a file walks all of the file's locks
/// (`posix_lock_inode`: three quarters of the time of a client locking
/// 16,384 ranges of one file went there), so a client locking one-byte
/// ranges without end would take memory without end and make every lock
/// on the file, anyone's, slower than the last. Twice
/// [`MAX_DESCRIPTIONS_PER_CLIENT`]: a client holding every description it
/// may has room for two ranges in each (a lock and a split of it), and
/// one owner may hold them all (record locks in one file); at the bound
/// an address costs about 2 MiB, and a walk of a file's locks 8,192
/// entries more.
pub const MAX_RANGES_PER_CLIENT: usize = 2 * MAX_DESCRIPTIONS_PER_CLIENT;
/// How far past [`MAX_RANGES_PER_CLIENT`] an unlock may still go by
/// splitting a lock in two (unlocking its middle): a LOCK is refused at
/// the bound, but an unlock refused leaves the client's application
/// thinking the range free while the server holds it, so a client at the
/// bound may still split this many (a sixteenth of the bound). Past it the unlock is refused too
/// (NLM4_DENIED_NOLOCKS, as lockd answers an unlock the kernel could not
/// make; NFSv4 `NFS4ERR_LOCK_RANGE`), else unlocking the middle of one
/// long lock byte after byte would be the unbounded way in.
pub const RANGE_SPLITS_PAST_BOUND: usize = MAX_RANGES_PER_CLIENT / 16;

/// The open descriptions, counted per client address and name.
pub(super) struct Descriptions<O: LockOwner> {
    total: usize,
    /// The most the server holds at once.
    max: usize,
    per_address: HashMap<IpAddr, AddressDescriptions<O::Client>>,
}

struct AddressDescriptions<C> {
    total: usize,
    per_name: HashMap<C, usize>,
}

impl<O: LockOwner> Default for Descriptions<O> {
    fn default() -> Self {
        Self {
            total: 0,
            max: usize::MAX,
            per_address: HashMap::new(),
        }
    }
}

impl<O: LockOwner> Descriptions<O> {
    /// Bounds the descriptions open at once, over all clients.
    pub(super) fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// Descriptions open, over all clients.
    pub(super) fn total(&self) -> usize {
        self.total
    }

    /// Whether `owner` may open one more description; the bound in the
    /// way if not.
    pub(super) fn room_for(&self, owner: &O) -> Result<(), Limit> {
        if self.total >= self.max {
            return Err(Limit::Server);
        }
        let Some(address) = self.per_address.get(&owner.address()) else {
            return Ok(());
        };
        if address.total >= MAX_DESCRIPTIONS_PER_CLIENT {
            return Err(Limit::Descriptions);
        }
        if !address.per_name.contains_key(&owner.client())
            && address.per_name.len() >= MAX_NAMES_PER_CLIENT
        {
            return Err(Limit::Names);
        }
        Ok(())
    }

    pub(super) fn add(&mut self, owner: &O) {
        self.total += 1;
        let address =
            self.per_address
                .entry(owner.address())
                .or_insert_with(|| AddressDescriptions {
                    total: 0,
                    per_name: HashMap::new(),
                });
        address.total += 1;
        *address.per_name.entry(owner.client()).or_default() += 1;
    }

    /// One description fewer for `owner`.
    pub(super) fn remove(&mut self, owner: &O) {
        let ip = owner.address();
        let Some(address) = self.per_address.get_mut(&ip) else {
            return;
        };
        let client = owner.client();
        let Some(n) = address.per_name.get_mut(&client) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            address.per_name.remove(&client);
        }
        address.total -= 1;
        if address.total == 0 {
            self.per_address.remove(&ip);
        }
        self.total -= 1;
    }

    /// Whether any description is open for address `ip`.
    #[cfg(test)]
    pub(super) fn has_address(&self, ip: IpAddr) -> bool {
        self.per_address.contains_key(&ip)
    }
}

/// The byte ranges held, counted per client address.
#[derive(Default)]
pub(super) struct Ranges {
    per_address: HashMap<IpAddr, usize>,
}

impl Ranges {
    /// Whether address `ip` may go from what it holds to `grows_by` more
    /// and stay within `max` (a change that does not grow always may).
    pub(super) fn room(&self, ip: IpAddr, grows_by: isize, max: usize) -> bool {
        let held = self.held(ip);
        grows_by <= 0 || held.saturating_add(grows_by.unsigned_abs()) <= max
    }

    /// Address `ip` holds `removed` ranges fewer and `added` more.
    pub(super) fn change(&mut self, ip: IpAddr, removed: usize, added: usize) {
        let held = self.per_address.entry(ip).or_default();
        *held = (*held + added).saturating_sub(removed);
        if *held == 0 {
            self.per_address.remove(&ip);
        }
    }

    /// The ranges address `ip` holds.
    pub(super) fn held(&self, ip: IpAddr) -> usize {
        self.per_address.get(&ip).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::table::{Attempt, LockTable, Unlock};
    use super::super::testing::*;
    use super::super::Span;
    use super::*;

    type Table<T> = LockTable<TestOwner, T>;

    #[test]
    fn a_client_gets_a_bounded_number_of_descriptions_and_waiters() {
        let (_dir, path) = data_file();
        let mut t: Table<()> = LockTable::default();
        let mut open = opener(&path);
        // A LOCK of `at` on one file; a blocking one waits with a `()`.
        let mut lock = |t: &mut Table<()>, who: &TestOwner, at: Span, block: bool| {
            t.lock(b"fh", who, b"", at, block, &mut open, block.then_some(()))
                .unwrap()
        };
        // The client's owners under eight names of its own: one address.
        let named = |svid: i32| process(&format!("client-{}", svid % 8), client_ip(), svid);
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
        assert_eq!(
            t.unlock(b"fh", &named(5), span(5, 1)).unwrap(),
            Unlock::Released
        );
        assert_eq!(
            lock(&mut t, &one_more, span(1 << 30, 1), false),
            Attempt::Granted
        );
        let at_client_ip =
            |c: &TestClient| matches!(c, TestClient::Host(_, ip) if *ip == client_ip());
        assert_eq!(t.drop_clients(at_client_ip).len(), 1);
        assert!(!t.descriptions().has_address(client_ip()));
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
    fn a_client_holds_a_bounded_number_of_ranges_and_splits_a_few_more() {
        let (_dir, path) = data_file();
        let mut t: Table<()> = LockTable::default();
        let mut open = opener(&path);
        let a = owner(1);
        let mut lock = |t: &mut Table<()>, who: &TestOwner, at: Span, exclusive: bool| {
            t.lock(b"fh", who, b"", at, exclusive, &mut open, None)
                .unwrap()
        };
        // One long lock, to split later, and one-byte locks with gaps.
        let long = 1 << 20;
        let splits = RANGE_SPLITS_PAST_BOUND as u64;
        assert_eq!(
            lock(&mut t, &a, span(long, 3 * (splits + 1)), true),
            Attempt::Granted
        );
        for i in 0..MAX_RANGES_PER_CLIENT as u64 - 1 {
            assert_eq!(lock(&mut t, &a, span(2 * i, 1), true), Attempt::Granted);
        }
        assert_eq!(t.lock_count(), MAX_RANGES_PER_CLIENT);
        let past = span(2 * MAX_RANGES_PER_CLIENT as u64, 1);
        assert_eq!(
            lock(&mut t, &a, past, true),
            Attempt::NoLocks(Limit::Ranges)
        );
        // A lock of the gap between two is merged with both, as the kernel
        // merges them: one range fewer, and room for one more.
        assert_eq!(lock(&mut t, &a, span(1, 1), true), Attempt::Granted);
        assert_eq!(t.lock_count(), MAX_RANGES_PER_CLIENT - 1);
        assert_eq!(lock(&mut t, &a, past, true), Attempt::Granted);
        // A read lock in the middle of a write lock would make three of it.
        assert_eq!(
            lock(&mut t, &a, span(1, 1), false),
            Attempt::NoLocks(Limit::Ranges)
        );
        // Another owner of the address is refused before a description is
        // opened for it; another address is not affected.
        let mut opened = 0;
        let mut counting = || {
            opened += 1;
            opener(&path)()
        };
        assert_eq!(
            t.lock(
                b"fh",
                &owner(2),
                b"",
                span(1 << 30, 1),
                true,
                &mut counting,
                None
            )
            .unwrap(),
            Attempt::NoLocks(Limit::Ranges)
        );
        assert_eq!(opened, 0);
        let other = other_client();
        assert_eq!(
            lock(&mut t, &other, span(1 << 30, 1), true),
            Attempt::Granted
        );
        // Unlocks may split the long lock RANGE_SPLITS_PAST_BOUND times past
        // the bound, one byte out of every three (into two-byte locks).
        for k in 0..splits {
            let middle = span(long + 3 * k + 1, 1);
            assert_eq!(t.unlock(b"fh", &a, middle).unwrap(), Unlock::Released);
        }
        let held = MAX_RANGES_PER_CLIENT + RANGE_SPLITS_PAST_BOUND;
        assert_eq!(t.lock_count(), held + 1);
        // One more is refused, and neither the table nor the kernel let go.
        let middle = span(long + 3 * splits + 1, 1);
        assert_eq!(
            t.unlock(b"fh", &a, middle).unwrap(),
            Unlock::NoLocks(Limit::Ranges)
        );
        assert_eq!(t.lock_count(), held + 1);
        let holder = t
            .test(b"fh", &other, middle, true, &mut opener(&path))
            .unwrap()
            .unwrap();
        assert_eq!(holder.owner, Some((a.clone(), Vec::new())));
        // What is left of the long lock, as the kernel holds it.
        assert_eq!(holder.span, span(long + 3 * splits - 1, 4));
        // Unlocks that split nothing always go through; a LOCK still waits
        // for the address to be back within the bound.
        assert_eq!(t.unlock(b"fh", &a, span(0, 3)).unwrap(), Unlock::Released);
        assert_eq!(t.lock_count(), held);
        assert_eq!(
            lock(&mut t, &a, span(0, 1), true),
            Attempt::NoLocks(Limit::Ranges)
        );
        for i in 2..RANGE_SPLITS_PAST_BOUND as u64 + 3 {
            assert_eq!(
                t.unlock(b"fh", &a, span(2 * i, 1)).unwrap(),
                Unlock::Released
            );
        }
        assert_eq!(lock(&mut t, &a, span(0, 1), true), Attempt::Granted);
        // A client dropped gives its ranges back.
        let client = |c: &TestClient| *c == a.client();
        assert_eq!(t.drop_clients(client).len(), 1);
        assert_eq!(t.lock_count(), 1);
        assert_eq!(t.ranges_held().held(client_ip()), 0);
    }

    #[test]
    fn a_client_has_a_bounded_number_of_waiters_over_all_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut t: Table<()> = LockTable::default();
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
        let mut t: Table<()> = LockTable::default();
        let mut open = opener(&path);
        let as_name = |n: usize| process(&format!("name-{n}"), client_ip(), 1);
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
        let again = process("name-0", client_ip(), 2);
        assert_eq!(
            t.lock(b"fh", &again, b"", at, false, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
        assert_eq!(
            t.unlock(b"fh", &as_name(7), span(7, 1)).unwrap(),
            Unlock::Released
        );
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
        let mut t: Table<()> = LockTable::default();
        t.set_max_open(10);
        let mut open = opener(&path);
        let client = |i: u8| process("c", IpAddr::from([192, 0, 2, i]), 1);
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
        assert_eq!(
            t.unlock(b"fh", &client(3), span(3, 1)).unwrap(),
            Unlock::Released
        );
        assert_eq!(
            t.lock(b"fh", &client(10), b"", span(99, 1), false, &mut open, None)
                .unwrap(),
            Attempt::Granted
        );
    }
}
