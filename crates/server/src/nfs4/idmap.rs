//! The `owner` and `owner_group` attributes (RFC 8881 section 5.9): the
//! strings NFSv4 names users and groups by, where NFSv3 sent numeric ids.
//!
//! By default they are numeric, `"1000"` both ways, as knfsd answers
//! AUTH_SYS clients with `nfs4_disable_idmapping` (its default), and as
//! the Linux client sends them then. With a domain (`nfs4_id_domain`),
//! ids go out as `name@domain`, the name from the name service
//! (`dionfs_sys::nss`), as `rpc.idmapd`'s `nsswitch` method makes them;
//! an id the name service does not know goes out numeric. Coming in, a
//! numeric string is always accepted (clients fall back to it for ids
//! they cannot name); `name@domain` is looked up; a name nobody has, a
//! name without `@domain`, a foreign domain or bytes that are not a name
//! are [`BadOwner`] (`NFS4ERR_BADOWNER`).
//!
//! Lookups may block (a directory server): they are made on the blocking
//! thread a COMPOUND runs on. Their answers, found or not, are kept for
//! [`TTL`] in an LRU of [`CACHE_ENTRIES`] per direction, so that a GETATTR
//! of a directory's files asks the name service once per owner; a lookup
//! that fails (the directory server is down) is not kept, and is logged
//! at most once a minute.

use std::fmt;
use std::hash::Hash;
use std::io;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use dionfs_logs::LogEvery;
use lru::LruCache;
use parking_lot::Mutex;
use tracing::warn;

/// How long a lookup's answer is kept: as knfsd's idmap cache
/// (`nfsd4_idmap` entries expire after 10 minutes).
pub const TTL: Duration = Duration::from_secs(600);

/// Answers kept, in each direction (ids to names, names to ids).
pub const CACHE_ENTRIES: usize = 4096;

/// An owner or group string that names no user or group here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadOwner;

impl fmt::Display for BadOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no such user or group")
    }
}

impl std::error::Error for BadOwner {}

/// Owner strings for ids and ids for owner strings (see the module
/// documentation). One per server; shared by every COMPOUND.
pub struct Idmap {
    /// `None`: numeric strings only.
    domain: Option<String>,
    directory: Box<dyn Directory>,
    cache: Mutex<Cache>,
    failures: LogEvery,
}

/// Users or groups: the two kinds are looked up apart (a user and a group
/// may share a name or an id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    User,
    Group,
}

impl Idmap {
    /// Numeric strings only if `domain` is `None`, else `name@domain`
    /// through the name service. `domain` is the configuration's
    /// `nfs4_id_domain`, checked there.
    pub fn new(domain: Option<String>) -> Idmap {
        Idmap::with_directory(domain, Box::new(Nss))
    }

    fn with_directory(domain: Option<String>, directory: Box<dyn Directory>) -> Idmap {
        Idmap {
            domain,
            directory,
            cache: Mutex::new(Cache::new()),
            failures: LogEvery::new(Duration::from_secs(60)),
        }
    }

    /// The `owner` string of user `uid`.
    pub fn owner(&self, uid: u32) -> String {
        self.to_string_at(Kind::User, uid, Instant::now())
    }

    /// The `owner_group` string of group `gid`.
    pub fn owner_group(&self, gid: u32) -> String {
        self.to_string_at(Kind::Group, gid, Instant::now())
    }

    /// The user an `owner` string names.
    pub fn uid(&self, owner: &[u8]) -> Result<u32, BadOwner> {
        self.to_id_at(Kind::User, owner, Instant::now())
    }

    /// The group an `owner_group` string names.
    pub fn gid(&self, group: &[u8]) -> Result<u32, BadOwner> {
        self.to_id_at(Kind::Group, group, Instant::now())
    }

    fn to_string_at(&self, kind: Kind, id: u32, now: Instant) -> String {
        let Some(domain) = &self.domain else {
            return id.to_string();
        };
        let cached = self.cache.lock().names.get(&(kind, id), now);
        let name = match cached {
            Some(name) => name,
            None => match self.directory.name(kind, id) {
                Ok(name) => {
                    self.cache.lock().names.put((kind, id), name.clone(), now);
                    name
                }
                Err(e) => {
                    self.failed(kind, &e);
                    None
                }
            },
        };
        match name {
            Some(name) => format!("{name}@{domain}"),
            None => id.to_string(),
        }
    }

    fn to_id_at(&self, kind: Kind, text: &[u8], now: Instant) -> Result<u32, BadOwner> {
        if let Some(id) = numeric(text) {
            return Ok(id);
        }
        let domain = self.domain.as_deref().ok_or(BadOwner)?;
        let text = std::str::from_utf8(text).map_err(|_| BadOwner)?;
        // The last `@`, as libnfsidmap's strip_domain: a name may hold one.
        let (name, theirs) = text.rsplit_once('@').ok_or(BadOwner)?;
        if name.is_empty() || !theirs.eq_ignore_ascii_case(domain) {
            return Err(BadOwner);
        }
        let key = (kind, name.to_owned());
        let cached = self.cache.lock().ids.get(&key, now);
        let id = match cached {
            Some(id) => id,
            None => match self.directory.id(kind, name) {
                Ok(id) => {
                    self.cache.lock().ids.put(key, id, now);
                    id
                }
                Err(e) => {
                    self.failed(kind, &e);
                    None
                }
            },
        };
        id.ok_or(BadOwner)
    }

    fn failed(&self, kind: Kind, e: &io::Error) {
        if self.failures.due() {
            warn!(error = %e, ?kind, "the name service failed a lookup for an NFSv4 owner; \
                  ids go out numeric and names are refused until it answers \
                  (repeats are not logged for a minute)");
        }
    }
}

/// An id as a numeric owner string names it: 1 to 10 ASCII digits, as
/// knfsd's `numeric_name_to_id` accepts, below `u32::MAX` (`(uid_t)-1`
/// is no id).
fn numeric(text: &[u8]) -> Option<u32> {
    if text.is_empty() || text.len() > 10 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let id = text.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    u32::try_from(id).ok().filter(|&id| id != u32::MAX)
}

/// Where names and ids come from: the name service, or a test's table.
trait Directory: Send + Sync {
    fn name(&self, kind: Kind, id: u32) -> io::Result<Option<String>>;
    fn id(&self, kind: Kind, name: &str) -> io::Result<Option<u32>>;
}

/// The system's name service.
struct Nss;

impl Directory for Nss {
    fn name(&self, kind: Kind, id: u32) -> io::Result<Option<String>> {
        match kind {
            Kind::User => dionfs_sys::nss::user_name(id),
            Kind::Group => dionfs_sys::nss::group_name(id),
        }
    }

    fn id(&self, kind: Kind, name: &str) -> io::Result<Option<u32>> {
        match kind {
            Kind::User => dionfs_sys::nss::user_id(name),
            Kind::Group => dionfs_sys::nss::group_id(name),
        }
    }
}

/// The answers kept, both ways.
struct Cache {
    names: Expiring<(Kind, u32), Option<String>>,
    ids: Expiring<(Kind, String), Option<u32>>,
}

impl Cache {
    fn new() -> Cache {
        Cache {
            names: Expiring::new(),
            ids: Expiring::new(),
        }
    }
}

/// An LRU of [`CACHE_ENTRIES`] whose entries also expire [`TTL`] after
/// they were put.
struct Expiring<K: Hash + Eq, V> {
    lru: LruCache<K, (Instant, V)>,
}

impl<K: Hash + Eq, V: Clone> Expiring<K, V> {
    fn new() -> Self {
        let capacity = NonZeroUsize::new(CACHE_ENTRIES).unwrap_or(NonZeroUsize::MIN);
        Expiring {
            lru: LruCache::new(capacity),
        }
    }

    /// The value kept for `key`, unless it has expired by `now` (then it
    /// is dropped).
    fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        let (put, value) = self.lru.get(key)?;
        if now.saturating_duration_since(*put) < TTL {
            return Some(value.clone());
        }
        self.lru.pop(key);
        None
    }

    fn put(&mut self, key: K, value: V, now: Instant) {
        self.lru.put(key, (now, value));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lru.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A name service of two users and one group, counting its lookups;
    /// uid 13 makes it fail.
    #[derive(Default)]
    struct Table {
        lookups: Arc<AtomicUsize>,
    }

    impl Directory for Table {
        fn name(&self, kind: Kind, id: u32) -> io::Result<Option<String>> {
            self.lookups.fetch_add(1, Ordering::Relaxed);
            Ok(match (kind, id) {
                (_, 13) => return Err(io::Error::from(io::ErrorKind::TimedOut)),
                (Kind::User, 1000) => Some("alice".into()),
                (Kind::User, 1001) => Some("bob".into()),
                (Kind::Group, 1000) => Some("staff".into()),
                _ => None,
            })
        }

        fn id(&self, kind: Kind, name: &str) -> io::Result<Option<u32>> {
            self.lookups.fetch_add(1, Ordering::Relaxed);
            Ok(match (kind, name) {
                (Kind::User, "alice") => Some(1000),
                (Kind::User, "bob") => Some(1001),
                (Kind::Group, "staff") => Some(1000),
                _ => None,
            })
        }
    }

    fn with_table(domain: Option<&str>) -> (Idmap, Arc<AtomicUsize>) {
        let table = Table::default();
        let lookups = table.lookups.clone();
        (
            Idmap::with_directory(domain.map(str::to_owned), Box::new(table)),
            lookups,
        )
    }

    #[test]
    fn without_a_domain_owners_are_numeric_both_ways() {
        let (map, lookups) = with_table(None);
        assert_eq!(map.owner(1000), "1000");
        assert_eq!(map.owner_group(0), "0");
        assert_eq!(map.uid(b"1000"), Ok(1000));
        assert_eq!(map.gid(b"0"), Ok(0));
        assert_eq!(map.uid(b"4294967294"), Ok(u32::MAX - 1));
        for bad in [
            &b"alice@example.org"[..],
            b"alice",
            b"",
            b"-1",
            b"+5",
            b" 5",
            b"4294967295",
            b"4294967296",
            b"00000000001",
            b"12a",
        ] {
            assert_eq!(
                map.uid(bad),
                Err(BadOwner),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(map.gid(bad), Err(BadOwner));
        }
        assert_eq!(lookups.load(Ordering::Relaxed), 0, "no name service asked");
    }

    #[test]
    fn with_a_domain_names_go_both_ways_and_unknown_ids_stay_numeric() {
        let (map, _) = with_table(Some("example.org"));
        assert_eq!(map.owner(1000), "alice@example.org");
        assert_eq!(map.owner(1001), "bob@example.org");
        assert_eq!(map.owner_group(1000), "staff@example.org");
        // Owner and group apart: group 1001 and user 7 are nobody.
        assert_eq!(map.owner_group(1001), "1001");
        assert_eq!(map.owner(7), "7");

        assert_eq!(map.uid(b"alice@example.org"), Ok(1000));
        assert_eq!(map.uid(b"bob@EXAMPLE.org"), Ok(1001), "domains ignore case");
        assert_eq!(map.gid(b"staff@example.org"), Ok(1000));
        assert_eq!(
            map.gid(b"alice@example.org"),
            Err(BadOwner),
            "a user, no group"
        );
        assert_eq!(map.uid(b"staff@example.org"), Err(BadOwner));
        assert_eq!(map.uid(b"1000"), Ok(1000), "numeric always accepted");
        assert_eq!(map.gid(b"65534"), Ok(65534));
        for bad in [
            &b"alice@example.com"[..],
            b"alice",
            b"alice@",
            b"@example.org",
            b"carol@example.org",
            b"ali\xffce@example.org",
        ] {
            assert_eq!(
                map.uid(bad),
                Err(BadOwner),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn answers_are_kept_for_the_ttl_and_failures_are_not() {
        let (map, lookups) = with_table(Some("example.org"));
        let asked = || lookups.load(Ordering::Relaxed);
        let start = Instant::now();
        assert_eq!(
            map.to_string_at(Kind::User, 1000, start),
            "alice@example.org"
        );
        assert_eq!(map.to_string_at(Kind::User, 7, start), "7");
        assert_eq!(
            map.to_id_at(Kind::User, b"alice@example.org", start),
            Ok(1000)
        );
        assert_eq!(
            map.to_id_at(Kind::User, b"carol@example.org", start),
            Err(BadOwner)
        );
        assert_eq!(asked(), 4);
        // Found and not found alike are kept.
        let later = start + TTL - Duration::from_secs(1);
        assert_eq!(
            map.to_string_at(Kind::User, 1000, later),
            "alice@example.org"
        );
        assert_eq!(map.to_string_at(Kind::User, 7, later), "7");
        assert_eq!(
            map.to_id_at(Kind::User, b"alice@example.org", later),
            Ok(1000)
        );
        assert_eq!(
            map.to_id_at(Kind::User, b"carol@example.org", later),
            Err(BadOwner)
        );
        assert_eq!(asked(), 4);
        // The group of the same id is another lookup.
        assert_eq!(
            map.to_string_at(Kind::Group, 1000, later),
            "staff@example.org"
        );
        assert_eq!(asked(), 5);
        // Past the TTL, asked again.
        let expired = start + TTL;
        assert_eq!(
            map.to_string_at(Kind::User, 1000, expired),
            "alice@example.org"
        );
        assert_eq!(
            map.to_id_at(Kind::User, b"alice@example.org", expired),
            Ok(1000)
        );
        assert_eq!(asked(), 7);
        // A failed lookup goes out numeric and is asked again each time.
        assert_eq!(map.to_string_at(Kind::User, 13, start), "13");
        assert_eq!(map.to_string_at(Kind::User, 13, start), "13");
        assert_eq!(asked(), 9);
    }

    #[test]
    fn the_cache_holds_at_most_its_entries() {
        let (map, lookups) = with_table(Some("example.org"));
        let now = Instant::now();
        for uid in 0..(CACHE_ENTRIES as u32 + 100) {
            map.to_string_at(Kind::User, 2000 + uid, now);
        }
        assert_eq!(map.cache.lock().names.len(), CACHE_ENTRIES);
        // The oldest went first: uid 2000 is asked again, the newest not.
        let asked = lookups.load(Ordering::Relaxed);
        map.to_string_at(Kind::User, 2000 + CACHE_ENTRIES as u32 + 99, now);
        assert_eq!(lookups.load(Ordering::Relaxed), asked);
        map.to_string_at(Kind::User, 2000, now);
        assert_eq!(lookups.load(Ordering::Relaxed), asked + 1);
    }

    #[test]
    fn the_system_name_service_knows_root() {
        let map = Idmap::new(Some("example.org".into()));
        assert_eq!(map.owner(0), "root@example.org");
        assert_eq!(map.owner_group(0), "root@example.org");
        assert_eq!(map.uid(b"root@example.org"), Ok(0));
        assert_eq!(map.gid(b"root@example.org"), Ok(0));
        assert_eq!(map.uid(b"dionfs-no-such-user@example.org"), Err(BadOwner));
        assert_eq!(map.owner(u32::MAX - 2), (u32::MAX - 2).to_string());
    }
}
