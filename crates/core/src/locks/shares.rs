//! Share reservations: DOS-style open modes, an owner's access to a file
//! (read, write) and what it denies others, as NLM's SHARE takes them and
//! NFSv4's OPEN will. They are kept among the server's clients only:
//! processes on the server know nothing of them, as with knfsd.

use std::collections::HashMap;
use std::net::IpAddr;

use super::limits::MAX_SHARES_PER_CLIENT;
use super::LockOwner;

/// A reservation: the access it takes and the access it denies others,
/// each as bits (1 read, 2 write), as NLM's `fsh4_access` and
/// `fsh4_mode` and NFSv4's `OPEN4_SHARE_ACCESS_*` and `_DENY_*` give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    access: u32,
    deny: u32,
}

impl Reservation {
    /// A reservation of `access`, denying `deny` (bits beyond read and
    /// write are ignored).
    pub fn new(access: u32, deny: u32) -> Reservation {
        Reservation {
            access: access & 3,
            deny: deny & 3,
        }
    }

    /// Whether either denies what the other takes.
    fn conflicts(self, other: Reservation) -> bool {
        self.deny & other.access != 0 || other.deny & self.access != 0
    }
}

/// The outcome of [`ShareTable::reserve`].
#[derive(Debug, PartialEq, Eq)]
pub enum Reserve {
    Granted,
    /// Another owner's reservation is in the way.
    Conflict,
    /// The owner's address holds [`MAX_SHARES_PER_CLIENT`] reservations.
    NoRoom,
}

/// An owner's reservation of a file.
struct Share<O> {
    owner: O,
    reservation: Reservation,
}

/// The share reservations, by file (its NFS handle, as the lock table
/// keys files), and how many each client address holds.
pub struct ShareTable<O> {
    by_file: HashMap<Vec<u8>, Vec<Share<O>>>,
    per_address: HashMap<IpAddr, usize>,
}

impl<O> Default for ShareTable<O> {
    fn default() -> Self {
        Self {
            by_file: HashMap::new(),
            per_address: HashMap::new(),
        }
    }
}

impl<O: LockOwner> ShareTable<O> {
    /// Takes `reservation` of `fh` for `owner`, or changes the one it
    /// holds. A change is checked against the others' reservations only;
    /// refused, the one it holds stays (knfsd's `nlmsvc_share_file`).
    pub fn reserve(&mut self, fh: &[u8], owner: &O, reservation: Reservation) -> Reserve {
        let list = self.by_file.entry(fh.to_vec()).or_default();
        let conflict = list
            .iter()
            .any(|s| s.owner != *owner && s.reservation.conflicts(reservation));
        if conflict {
            // Not empty: another's reservation is in the way.
            return Reserve::Conflict;
        }
        if let Some(held) = list.iter_mut().find(|s| s.owner == *owner) {
            held.reservation = reservation;
            return Reserve::Granted;
        }
        let ip = owner.address();
        if self.per_address.get(&ip).copied().unwrap_or(0) >= MAX_SHARES_PER_CLIENT {
            if list.is_empty() {
                self.by_file.remove(fh);
            }
            return Reserve::NoRoom;
        }
        *self.per_address.entry(ip).or_default() += 1;
        list.push(Share {
            owner: owner.clone(),
            reservation,
        });
        Reserve::Granted
    }

    /// The clients whose reservations of `fh` are in the way of `owner`
    /// taking `reservation` (to expire courtesy clients among them).
    pub fn conflicting(&self, fh: &[u8], owner: &O, reservation: Reservation) -> Vec<O::Client> {
        let Some(list) = self.by_file.get(fh) else {
            return Vec::new();
        };
        let mut clients: Vec<O::Client> = list
            .iter()
            .filter(|s| s.owner != *owner && s.reservation.conflicts(reservation))
            .map(|s| s.owner.client())
            .collect();
        clients.sort();
        clients.dedup();
        clients
    }

    /// Whether a reservation of `fh` denies any of `access` (bits: 1
    /// read, 2 write): what an I/O without an open (NFSv4's special
    /// stateids) is checked against, as knfsd's `nfs4_share_conflict`.
    pub fn denies(&self, fh: &[u8], access: u32) -> bool {
        self.by_file
            .get(fh)
            .is_some_and(|list| list.iter().any(|s| s.reservation.deny & access != 0))
    }

    /// Whether some reservation of `fh` satisfies `matches` (given its
    /// owner and the access it takes: bits 1 read, 2 write): a
    /// delegation's grant looks for other clients' opens.
    pub fn any(&self, fh: &[u8], mut matches: impl FnMut(&O, u32) -> bool) -> bool {
        self.by_file
            .get(fh)
            .is_some_and(|list| list.iter().any(|s| matches(&s.owner, s.reservation.access)))
    }

    /// Releases `owner`'s reservation of `fh`, if it holds one.
    pub fn release(&mut self, fh: &[u8], owner: &O) {
        let Some(list) = self.by_file.get_mut(fh) else {
            return;
        };
        Self::drop_from(&mut self.per_address, list, |s| s.owner == *owner);
        if list.is_empty() {
            self.by_file.remove(fh);
        }
    }

    /// Drops the reservations of the clients `client` names on the files
    /// `file` names; how many.
    pub fn drop_where(
        &mut self,
        file: impl Fn(&[u8]) -> bool,
        client: impl Fn(&O::Client) -> bool,
    ) -> usize {
        let ShareTable {
            by_file,
            per_address,
        } = self;
        let mut dropped = 0;
        by_file.retain(|fh, list| {
            if file(fh) {
                let before = list.len();
                Self::drop_from(per_address, list, |s| client(&s.owner.client()));
                dropped += before - list.len();
            }
            !list.is_empty()
        });
        dropped
    }

    /// Drops the reservations `drop` matches from `list`, counting them
    /// off their addresses.
    fn drop_from(
        per_address: &mut HashMap<IpAddr, usize>,
        list: &mut Vec<Share<O>>,
        mut drop: impl FnMut(&Share<O>) -> bool,
    ) {
        list.retain(|s| {
            if !drop(s) {
                return true;
            }
            let ip = s.owner.address();
            if let Some(n) = per_address.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    per_address.remove(&ip);
                }
            }
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    const READ: u32 = 1;
    const WRITE: u32 = 2;

    #[test]
    fn owners_of_two_protocols_conflict_on_a_file() {
        let mut t: ShareTable<TestOwner> = ShareTable::default();
        let nlm = owner(1);
        let v4 = TestOwner::State {
            clientid: 7,
            ip: client_ip(),
            owner: b"open-owner".to_vec(),
        };
        // Reading, denying writers: another may read, not write.
        let read_deny_write = Reservation::new(READ, WRITE);
        assert_eq!(t.reserve(b"f", &nlm, read_deny_write), Reserve::Granted);
        let write = Reservation::new(READ | WRITE, 0);
        assert_eq!(t.reserve(b"f", &v4, write), Reserve::Conflict);
        assert_eq!(t.reserve(b"g", &v4, write), Reserve::Granted);
        assert_eq!(
            t.reserve(b"f", &v4, Reservation::new(READ, 0)),
            Reserve::Granted
        );
        // Denying what another holds is refused; the one held stays.
        let deny_read = Reservation::new(READ, READ);
        assert_eq!(t.reserve(b"f", &v4, deny_read), Reserve::Conflict);
        assert_eq!(t.reserve(b"f", &nlm, write), Reserve::Granted);
        assert_eq!(t.reserve(b"f", &v4, write), Reserve::Granted);
        // A released reservation is in nobody's way.
        t.release(b"f", &nlm);
        t.release(b"f", &nlm);
        assert_eq!(t.reserve(b"f", &v4, deny_read), Reserve::Granted);
        // Dropping one client's leaves the other's.
        assert_eq!(t.drop_where(|_| true, |c| *c == TestClient::Id(7)), 2);
        assert_eq!(t.reserve(b"f", &nlm, deny_read), Reserve::Granted);
        assert!(t.per_address.contains_key(&client_ip()));
        assert_eq!(t.drop_where(|fh| fh == b"f", |_| true), 1);
        assert!(t.by_file.is_empty() && t.per_address.is_empty());
    }

    #[test]
    fn conflicting_clients_and_denied_access_are_told() {
        let mut t: ShareTable<TestOwner> = ShareTable::default();
        let (a, b) = (owner(1), other_client());
        assert!(t
            .conflicting(b"f", &a, Reservation::new(READ, 0))
            .is_empty());
        assert!(!t.denies(b"f", READ | WRITE));
        assert_eq!(
            t.reserve(b"f", &a, Reservation::new(READ, WRITE)),
            Reserve::Granted
        );
        assert_eq!(
            t.reserve(b"f", &b, Reservation::new(READ, 0)),
            Reserve::Granted
        );
        // A writer is in a's way only; a's own reservation is never.
        assert_eq!(
            t.conflicting(b"f", &b, Reservation::new(WRITE, 0)),
            [a.client()]
        );
        assert!(t
            .conflicting(b"f", &a, Reservation::new(WRITE, 0))
            .is_empty());
        assert_eq!(
            t.conflicting(b"f", &owner(2), Reservation::new(READ, READ))
                .len(),
            2
        );
        assert!(t.denies(b"f", WRITE));
        assert!(!t.denies(b"f", READ));
        assert!(!t.denies(b"g", WRITE));
    }

    #[test]
    fn an_address_holds_a_bounded_number_of_reservations() {
        let mut t: ShareTable<TestOwner> = ShareTable::default();
        let none = Reservation::new(0, 0);
        for svid in 0..MAX_SHARES_PER_CLIENT as i32 {
            assert_eq!(t.reserve(b"f", &owner(svid), none), Reserve::Granted);
        }
        let one_more = owner(MAX_SHARES_PER_CLIENT as i32);
        assert_eq!(t.reserve(b"f", &one_more, none), Reserve::NoRoom);
        // Refused on a file it holds nothing of: nothing is kept for it.
        assert_eq!(t.reserve(b"g", &one_more, none), Reserve::NoRoom);
        assert!(!t.by_file.contains_key(b"g".as_slice()));
        // A change of one held is no new one; another address is apart.
        assert_eq!(
            t.reserve(b"f", &owner(0), Reservation::new(READ, 0)),
            Reserve::Granted
        );
        assert_eq!(t.reserve(b"f", &other_client(), none), Reserve::Granted);
        t.release(b"f", &owner(3));
        assert_eq!(t.reserve(b"f", &one_more, none), Reserve::Granted);
    }
}
