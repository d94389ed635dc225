//! Delegations as every program sees them (RFC 8881 section 10.4): which
//! NFSv4 client holds a read or write delegation of which file, so that a
//! call of any program that conflicts with one (a v3 WRITE, an NLM lock,
//! another v4 client's OPEN) recalls it and answers "try again later"
//! instead of letting the holder's cache go stale.
//!
//! The NFSv4 program owns the delegations themselves (their stateids, the
//! callback that recalls them, revocation); this is the server-wide index
//! every program checks, by file handle, and the [`Recaller`] the NFSv4
//! program sets to be told what to recall.
//!
//! Processes on the server: with [`Delegations::watch_local_opens`] every
//! delegated file is watched with fanotify (`dionfs_sys::fanotify`): an
//! open of it by another process waits (as an open breaking a lease
//! waits) while the delegation is recalled, until it is returned or a
//! lease has passed, and a write to it (by a process that had it open
//! before) recalls it, as does a change made without an open (chmod,
//! chown, utimes, link, unlink, rename: told after the fact). Any open
//! counts, a read-only one too: fanotify does not say how a file is being
//! opened.
//!
//! A grant and a conflicting call must not pass each other: a v3 WRITE
//! that found no delegation must not write under one granted a moment
//! later. So a conflicting call holds the file [`Busy`] while it runs,
//! and a grant is refused while any call holds it (knfsd closes the same
//! race with the inode's write count, which a lease grant checks). The
//! index's mutex is a leaf: nothing else is taken while it is held but
//! the grant's own check ([`Delegations::grant`]), which may take the
//! lock tables.

use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use dionfs_sys::fanotify::{Event, Fanotify, FidWatch};
use dionfs_sys::handle::KernelHandle;
use parking_lot::Mutex;
use tracing::{info, warn};

/// Delegations in all (knfsd bounds them by memory: `max_delegations`).
pub const MAX_DELEGATIONS: usize = 65_536;
/// Delegations per client.
pub const DELEGATIONS_PER_CLIENT: usize = 4_096;
/// A file recalled this recently gets no new delegation (knfsd's bloom
/// filter of recently recalled files, which it keeps for 30 s to a
/// minute): the conflict is likely to come again.
pub const RECALLED_RECENTLY: Duration = Duration::from_secs(30);

/// A delegation: the client holding it (its NFSv4 client id), its
/// stateid's `other`, and whether it is a write delegation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub client: u64,
    pub stateid: [u8; 12],
    pub write: bool,
}

/// What a call does to a file, as a delegation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads its data or attributes: conflicts with write delegations.
    Read,
    /// Changes its data, attributes or names (or locks it): conflicts
    /// with every delegation.
    Write,
}

/// A call conflicts with another client's delegation, which is being
/// recalled: the call answers `NFS4ERR_DELAY` or `NFS3ERR_JUKEBOX` (an
/// NLM lock: denied) and the client tries again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recalling;

/// Why no delegation was granted (RFC 8881's `why_no_delegation4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoGrant {
    /// Delegations are off (`delegations = false`).
    Off,
    /// Another client's open, lock or delegation, a call in progress, or
    /// a recall in the last [`RECALLED_RECENTLY`].
    Contention,
    /// Past [`MAX_DELEGATIONS`] or [`DELEGATIONS_PER_CLIENT`], or the
    /// file could not be watched.
    Resource,
}

/// Told of each delegation to recall (once per delegation), with the
/// file's handle; set by the NFSv4 program. Called with no lock held.
pub type Recaller = Arc<dyn Fn(&[u8], &Held) + Send + Sync>;

#[derive(Default)]
struct Inner {
    /// The delegations of each file, each with whether it is recalled.
    by_fh: HashMap<Vec<u8>, Vec<(Held, bool)>>,
    /// Calls in progress that conflict with delegations, by the hash of
    /// their file's handle (a collision refuses a grant, never more).
    busy: HashMap<u64, u32>,
    /// When each file (by hash) was last recalled.
    recalled: HashMap<u64, Instant>,
    per_client: HashMap<u64, usize>,
    count: usize,
    /// The files watched for other processes' opens, by handle, and
    /// their handles by inode (what a fanotify event names).
    watched: HashMap<Vec<u8>, Watched>,
    by_inode: HashMap<(u64, u64), Vec<u8>>,
    by_handle: HashMap<KernelHandle, Vec<u8>>,
}

impl Inner {
    /// Whether a call by `by` doing `access` to `fh` (whose key is `key`)
    /// conflicts with another client's delegation: `None` if not, else
    /// those not recalled yet, which are marked recalled now.
    fn conflicts(
        &mut self,
        fh: &[u8],
        key: u64,
        by: Option<u64>,
        access: Access,
    ) -> Option<Vec<Held>> {
        let held = self.by_fh.get_mut(fh)?;
        let mut conflict = false;
        let mut recall = Vec::new();
        for (h, recalled) in held.iter_mut() {
            if Some(h.client) == by || (access == Access::Read && !h.write) {
                continue;
            }
            conflict = true;
            if !*recalled {
                *recalled = true;
                recall.push(*h);
            }
        }
        if !recall.is_empty() {
            self.recalled.insert(key, Instant::now());
        }
        conflict.then_some(recall)
    }
}

/// A delegated file watched: a descriptor of it (to unwatch it by) and
/// its inode.
struct Watched {
    fd: OwnedFd,
    inode: (u64, u64),
    handle: KernelHandle,
}

/// The server-wide index of delegations.
pub struct Delegations {
    enabled: AtomicBool,
    inner: Mutex<Inner>,
    recaller: OnceLock<Recaller>,
    /// The fanotify group watching delegated files, once
    /// [`Delegations::watch_local_opens`] started it.
    local: OnceLock<(Arc<Fanotify>, Arc<FidWatch>)>,
}

/// A conflicting call in progress on a file: no delegation of it is
/// granted until this drops.
#[must_use]
pub struct Busy {
    index: Option<(Arc<Delegations>, u64)>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some((delegations, key)) = self.index.take() {
            let mut inner = delegations.inner.lock();
            if let Entry::Occupied(mut e) = inner.busy.entry(key) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }
}

fn key(fh: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    fh.hash(&mut h);
    h.finish()
}

impl Delegations {
    /// An empty index; `enabled` as the configuration's `delegations`
    /// (when off, nothing is granted and every check passes at once).
    pub fn new(enabled: bool) -> Delegations {
        Delegations {
            enabled: AtomicBool::new(enabled),
            inner: Mutex::default(),
            recaller: OnceLock::new(),
            local: OnceLock::new(),
        }
    }

    /// Whether delegations may be granted.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Grants no more delegations (processes on the server cannot be
    /// watched).
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }

    /// Sets what recalls a delegation (once; whether it was set now).
    pub fn set_recaller(&self, recaller: Recaller) -> bool {
        self.recaller.set(recaller).is_ok()
    }

    /// Before a call by NFSv4 client `by` (`None`: a v3 or NLM client)
    /// that does `access` to file `fh`: the call may go on, holding the
    /// file busy while it runs, unless another client's delegation
    /// conflicts. Then that delegation is recalled (once: a call retried
    /// while the recall is out recalls nothing more) and the call must
    /// answer "later".
    pub fn enter(
        self: &Arc<Self>,
        fh: &[u8],
        by: Option<u64>,
        access: Access,
    ) -> Result<Busy, Recalling> {
        if !self.enabled() {
            return Ok(Busy { index: None });
        }
        let key = key(fh);
        let recall = {
            let mut inner = self.inner.lock();
            match inner.conflicts(fh, key, by, access) {
                None => {
                    *inner.busy.entry(key).or_insert(0) += 1;
                    return Ok(Busy {
                        index: Some((Arc::clone(self), key)),
                    });
                }
                Some(recall) => recall,
            }
        };
        self.recall(fh, &recall);
        Err(Recalling)
    }

    /// [`Delegations::enter`] for a call that leaves nothing behind that
    /// a later grant must see (a READ, a GETATTR): the conflict check
    /// alone, holding nothing busy.
    pub fn check(&self, fh: &[u8], by: Option<u64>, access: Access) -> Result<(), Recalling> {
        if !self.enabled() {
            return Ok(());
        }
        let recall = self.inner.lock().conflicts(fh, key(fh), by, access);
        match recall {
            None => Ok(()),
            Some(recall) => {
                self.recall(fh, &recall);
                Err(Recalling)
            }
        }
    }

    /// The write delegation of `fh` another client than `by` holds, if
    /// one is held and not being recalled: a GETATTR asks its holder for
    /// the size and change it has (CB_GETATTR) instead of recalling it.
    pub fn write_held(&self, fh: &[u8], by: Option<u64>) -> Option<Held> {
        if !self.enabled() {
            return None;
        }
        let inner = self.inner.lock();
        inner
            .by_fh
            .get(fh)?
            .iter()
            .find(|(h, recalled)| h.write && !*recalled && Some(h.client) != by)
            .map(|(h, _)| *h)
    }

    /// Tells the recaller of `recall` (no lock held).
    fn recall(&self, fh: &[u8], recall: &[Held]) {
        if let Some(recaller) = self.recaller.get() {
            for held in recall {
                recaller(fh, held);
            }
        }
    }

    /// Grants `held` of file `fh` (`file` a descriptor of it, an `O_PATH`
    /// one will do) if nothing is in its way: no call holds the file busy,
    /// no other client has a delegation of it that conflicts (and
    /// `held.client` none of it at all), it was not recalled in the last
    /// [`RECALLED_RECENTLY`], the bounds allow, and `clear` (the caller's
    /// check of opens and locks, run under the index's mutex) says yes.
    /// The file is watched for other processes from then on.
    pub fn grant(
        &self,
        fh: &[u8],
        file: BorrowedFd<'_>,
        held: Held,
        clear: impl FnOnce() -> bool,
    ) -> Result<(), NoGrant> {
        if !self.enabled() {
            return Err(NoGrant::Off);
        }
        let key = key(fh);
        let mut inner = self.inner.lock();
        if inner.busy.contains_key(&key) {
            return Err(NoGrant::Contention);
        }
        if let Some(at) = inner.recalled.get(&key) {
            if at.elapsed() < RECALLED_RECENTLY {
                return Err(NoGrant::Contention);
            }
            inner.recalled.remove(&key);
        }
        if let Some(others) = inner.by_fh.get(fh) {
            if others
                .iter()
                .any(|(h, _)| h.client == held.client || h.write || held.write)
            {
                return Err(NoGrant::Contention);
            }
        }
        if inner.count >= MAX_DELEGATIONS
            || inner.per_client.get(&held.client).copied().unwrap_or(0) >= DELEGATIONS_PER_CLIENT
        {
            return Err(NoGrant::Resource);
        }
        if !clear() {
            return Err(NoGrant::Contention);
        }
        if let Some((fan, fid)) = self.local.get() {
            if !inner.watched.contains_key(fh) {
                if inner.watched.len() >= max_watched() {
                    return Err(NoGrant::Resource);
                }
                let watched = watch(fan, fid, file).map_err(|e| {
                    warn!(error = %e, "a file to delegate could not be watched: no delegation");
                    NoGrant::Resource
                })?;
                inner.by_inode.insert(watched.inode, fh.to_vec());
                inner.by_handle.insert(watched.handle.clone(), fh.to_vec());
                inner.watched.insert(fh.to_vec(), watched);
            }
        }
        inner
            .by_fh
            .entry(fh.to_vec())
            .or_default()
            .push((held, false));
        *inner.per_client.entry(held.client).or_insert(0) += 1;
        inner.count += 1;
        Ok(())
    }

    /// Removes delegation `stateid` of file `fh` (returned, revoked or
    /// its client gone); whether it was there.
    pub fn remove(&self, fh: &[u8], stateid: &[u8; 12]) -> bool {
        let mut inner = self.inner.lock();
        let Some(held) = inner.by_fh.get_mut(fh) else {
            return false;
        };
        let Some(at) = held.iter().position(|(h, _)| h.stateid == *stateid) else {
            return false;
        };
        let (gone, _) = held.swap_remove(at);
        if held.is_empty() {
            inner.by_fh.remove(fh);
            self.unwatch(&mut inner, fh);
        }
        inner.count -= 1;
        if let Entry::Occupied(mut e) = inner.per_client.entry(gone.client) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        true
    }

    /// Removes every delegation of `client` (expired, gone); how many.
    pub fn remove_client(&self, client: u64) -> usize {
        let mut inner = self.inner.lock();
        if inner.per_client.remove(&client).is_none() {
            return 0;
        }
        let mut removed = 0;
        let mut emptied = Vec::new();
        inner.by_fh.retain(|fh, held| {
            let before = held.len();
            held.retain(|(h, _)| h.client != client);
            removed += before - held.len();
            if held.is_empty() {
                emptied.push(fh.clone());
            }
            !held.is_empty()
        });
        inner.count -= removed;
        for fh in emptied {
            self.unwatch(&mut inner, &fh);
        }
        removed
    }

    /// Stops watching `fh`, which has no delegation left.
    fn unwatch(&self, inner: &mut Inner, fh: &[u8]) {
        if let Some(watched) = inner.watched.remove(fh) {
            inner.by_inode.remove(&watched.inode);
            inner.by_handle.remove(&watched.handle);
            if let Some((fan, fid)) = self.local.get() {
                let _ = fan.unwatch(watched.fd.as_fd());
                let _ = fid.unwatch(watched.fd.as_fd());
            }
        }
    }

    /// Whether `fh` has a delegation now.
    fn delegated(&self, fh: &[u8]) -> bool {
        self.inner.lock().by_fh.contains_key(fh)
    }

    /// Watches the delegated files for other processes (the module's
    /// header): three threads, one answering this process's own opens at
    /// once and handing the others' events to a second, which recalls and
    /// holds an open until the delegation is gone or `break_time` (the
    /// lease) has passed, and a third recalling for the changes made
    /// without an open. Fails without `CAP_SYS_ADMIN`.
    pub fn watch_local_opens(self: &Arc<Self>, break_time: Duration) -> std::io::Result<()> {
        let fan = Arc::new(Fanotify::new()?);
        let fid = Arc::new(FidWatch::new()?);
        if self
            .local
            .set((Arc::clone(&fan), Arc::clone(&fid)))
            .is_err()
        {
            return Ok(());
        }
        let (tx, rx) = mpsc::channel::<Event>();
        let me = std::process::id() as i32;
        let reader = Arc::clone(&fan);
        std::thread::Builder::new()
            .name("dionfs-fanotify".into())
            .spawn(move || loop {
                let events = match reader.read() {
                    Ok(events) => events,
                    Err(e) => {
                        warn!(error = %e, "fanotify read failed: processes on the server no longer recall delegations");
                        return;
                    }
                };
                for event in events {
                    if event.pid == me {
                        // This server's own: never waits on the other
                        // thread (which may need a lock an opener holds).
                        allow(&reader, &event);
                    } else if tx.send(event).is_err() {
                        return;
                    }
                }
            })?;
        let index = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("dionfs-fanotify-fid".into())
            .spawn(move || loop {
                let events = match fid.read() {
                    Ok(events) => events,
                    Err(e) => {
                        warn!(error = %e, "fanotify read failed: renames and attribute changes on the server no longer recall delegations");
                        return;
                    }
                };
                let Some(index) = index.upgrade() else {
                    return;
                };
                for event in events.into_iter().filter(|e| e.pid != me) {
                    let fh = event
                        .handle
                        .and_then(|h| index.inner.lock().by_handle.get(&h).cloned());
                    if let Some(fh) = fh {
                        if index.check(&fh, None, Access::Write).is_err() {
                            tracing::debug!(pid = event.pid, "a process on the server changed a delegated file: recalled");
                        }
                    }
                }
            })?;
        let index = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("dionfs-local-opens".into())
            .spawn(move || {
                let mut waiting: Vec<(Vec<u8>, Event, Instant)> = Vec::new();
                loop {
                    let event = match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(event) => Some(event),
                        Err(mpsc::RecvTimeoutError::Timeout) => None,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    };
                    let Some(index) = index.upgrade() else {
                        return;
                    };
                    if let Some(event) = event {
                        if let Some(wait) = index.local_event(&fan, event) {
                            waiting.push((wait.0, wait.1, Instant::now() + break_time));
                        }
                    }
                    waiting.retain(|(fh, event, until)| {
                        let done = !index.delegated(fh) || Instant::now() >= *until;
                        if done {
                            allow(&fan, event);
                        }
                        !done
                    });
                }
            })?;
        Ok(())
    }

    /// Another process opened or wrote a watched file: a delegation of it
    /// is recalled. An open to hold until it is gone is given back.
    fn local_event(self: &Arc<Self>, fan: &Fanotify, event: Event) -> Option<(Vec<u8>, Event)> {
        if event.is_overflow() {
            warn!("fanotify's queue overflowed: opens of delegated files by processes on the server may have recalled nothing");
            return None;
        }
        let fh = event
            .file
            .as_ref()
            .and_then(|f| rustix::fs::fstat(f).ok())
            .and_then(|st| {
                let inode = (st.st_dev, st.st_ino);
                self.inner.lock().by_inode.get(&inode).cloned()
            });
        let Some(fh) = fh else {
            allow(fan, &event);
            return None;
        };
        match self.check(&fh, None, Access::Write) {
            Ok(()) => {
                allow(fan, &event);
                None
            }
            Err(Recalling) if event.is_permission() => {
                info!(pid = event.pid, "a process on the server opens a delegated file: recalled, the open waits for its return");
                Some((fh, event))
            }
            Err(Recalling) => {
                // Each write is an event: told at debug level only.
                tracing::debug!(
                    pid = event.pid,
                    "a process on the server wrote a delegated file: recalled"
                );
                None
            }
        }
    }

    /// Forgets recalls older than [`RECALLED_RECENTLY`] (the laundromat).
    pub fn sweep(&self) {
        self.inner
            .lock()
            .recalled
            .retain(|_, at| at.elapsed() < RECALLED_RECENTLY);
    }

    /// Delegations held now.
    pub fn count(&self) -> usize {
        self.inner.lock().count
    }
}

/// How many files may be watched at once: each holds a descriptor, so a
/// quarter of the open-file limit (as NLM's lock descriptions take
/// another), and connections and the open-file cache keep the rest.
fn max_watched() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(limit / 4).unwrap_or(usize::MAX).max(64)
}

/// Watches `file` with both groups: a descriptor of it kept, its inode
/// and its kernel handle (what each group's events name).
fn watch(fan: &Fanotify, fid: &FidWatch, file: BorrowedFd<'_>) -> std::io::Result<Watched> {
    let fd = file.try_clone_to_owned()?;
    let st = rustix::fs::fstat(&fd)?;
    let (handle, _) =
        dionfs_sys::handle::name_to_handle_at(&fd, c"", rustix::fs::AtFlags::EMPTY_PATH)?;
    fan.watch(fd.as_fd())?;
    if let Err(e) = fid.watch(fd.as_fd()) {
        let _ = fan.unwatch(fd.as_fd());
        return Err(e);
    }
    Ok(Watched {
        fd,
        inode: (st.st_dev, st.st_ino),
        handle,
    })
}

/// Lets a permission event's open go on (nothing for other events).
fn allow(fan: &Fanotify, event: &Event) {
    if let (true, Some(file)) = (event.is_permission(), &event.file) {
        if let Err(e) = fan.allow(file.as_raw_fd()) {
            warn!(error = %e, "fanotify: an open could not be let go on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A descriptor to grant with (nothing watches it in these tests).
    fn dir() -> std::fs::File {
        std::fs::File::open("/").unwrap()
    }

    fn held(client: u64, id: u8, write: bool) -> Held {
        Held {
            client,
            stateid: [id; 12],
            write,
        }
    }

    fn counting(d: &Delegations) -> Arc<AtomicUsize> {
        let recalls = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&recalls);
        assert!(d.set_recaller(Arc::new(move |_, _| {
            r.fetch_add(1, Ordering::SeqCst);
        })));
        recalls
    }

    #[test]
    fn off_grants_nothing_and_checks_nothing() {
        let d = Arc::new(Delegations::new(false));
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(1, 1, false), || true),
            Err(NoGrant::Off)
        );
        assert!(d.enter(b"f", None, Access::Write).is_ok());
    }

    #[test]
    fn a_conflicting_call_recalls_once_and_waits_for_the_return() {
        let d = Arc::new(Delegations::new(true));
        let recalls = counting(&d);
        d.grant(b"f", dir().as_fd(), held(1, 1, false), || true)
            .unwrap();
        // Reading another's read delegation, or the holder's own call:
        // no conflict.
        assert!(d.enter(b"f", Some(2), Access::Read).is_ok());
        assert!(d.enter(b"f", Some(1), Access::Write).is_ok());
        assert!(d.enter(b"f", None, Access::Read).is_ok());
        assert_eq!(recalls.load(Ordering::SeqCst), 0);
        assert!(d.enter(b"f", None, Access::Write).is_err());
        assert!(d.enter(b"f", Some(2), Access::Write).is_err());
        assert_eq!(recalls.load(Ordering::SeqCst), 1, "recalled once");
        assert!(d.remove(b"f", &[1; 12]));
        assert!(d.enter(b"f", Some(2), Access::Write).is_ok());
        assert_eq!(d.count(), 0);
        // Recalled recently: no new delegation.
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(1, 2, false), || true),
            Err(NoGrant::Contention)
        );
    }

    #[test]
    fn a_write_delegation_conflicts_with_reads() {
        let d = Arc::new(Delegations::new(true));
        let recalls = counting(&d);
        d.grant(b"f", dir().as_fd(), held(1, 1, true), || true)
            .unwrap();
        assert!(d.enter(b"f", Some(2), Access::Read).is_err());
        assert_eq!(recalls.load(Ordering::SeqCst), 1);
        // Nor does it share the file with another delegation.
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(2, 2, false), || true),
            Err(NoGrant::Contention)
        );
    }

    #[test]
    fn a_write_delegation_is_found_for_another_client_until_recalled() {
        let d = Arc::new(Delegations::new(true));
        let recalls = counting(&d);
        d.grant(b"r", dir().as_fd(), held(1, 1, false), || true)
            .unwrap();
        d.grant(b"w", dir().as_fd(), held(1, 2, true), || true)
            .unwrap();
        // A read delegation, or the holder itself: none to ask.
        assert_eq!(d.write_held(b"r", Some(2)), None);
        assert_eq!(d.write_held(b"w", Some(1)), None);
        assert_eq!(d.write_held(b"w", Some(2)), Some(held(1, 2, true)));
        assert_eq!(d.write_held(b"w", None), Some(held(1, 2, true)));
        assert_eq!(recalls.load(Ordering::SeqCst), 0);
        // Once recalled, the plain conflict check answers instead.
        assert!(d.check(b"w", None, Access::Read).is_err());
        assert_eq!(d.write_held(b"w", None), None);
    }

    #[test]
    fn read_delegations_share_but_one_per_client() {
        let d = Arc::new(Delegations::new(true));
        d.grant(b"f", dir().as_fd(), held(1, 1, false), || true)
            .unwrap();
        d.grant(b"f", dir().as_fd(), held(2, 2, false), || true)
            .unwrap();
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(1, 3, false), || true),
            Err(NoGrant::Contention)
        );
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(3, 4, true), || true),
            Err(NoGrant::Contention)
        );
        assert_eq!(d.remove_client(1), 1);
        assert_eq!(d.count(), 1);
    }

    #[test]
    fn no_grant_while_a_conflicting_call_runs() {
        let d = Arc::new(Delegations::new(true));
        let busy = d.enter(b"f", None, Access::Write).unwrap();
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(1, 1, false), || true),
            Err(NoGrant::Contention)
        );
        drop(busy);
        // A check alone (a READ) holds nothing busy.
        assert!(d.check(b"f", None, Access::Write).is_ok());
        assert_eq!(
            d.grant(b"f", dir().as_fd(), held(1, 1, false), || false),
            Err(NoGrant::Contention),
            "the caller's check of opens and locks"
        );
        d.grant(b"f", dir().as_fd(), held(1, 1, false), || true)
            .unwrap();
    }

    #[test]
    fn bounded_per_client() {
        let d = Arc::new(Delegations::new(true));
        for i in 0..DELEGATIONS_PER_CLIENT {
            let fh = (i as u32).to_be_bytes();
            d.grant(&fh, dir().as_fd(), held(1, 1, false), || true)
                .unwrap();
        }
        assert_eq!(
            d.grant(b"last", dir().as_fd(), held(1, 1, false), || true),
            Err(NoGrant::Resource)
        );
        d.grant(b"last", dir().as_fd(), held(2, 1, false), || true)
            .unwrap();
        assert_eq!(d.remove_client(1), DELEGATIONS_PER_CLIENT);
    }

    /// What a test's recaller was told.
    type Recalled = Arc<Mutex<Vec<Held>>>;

    /// An index watching processes on the server, and the delegations
    /// it recalls; None without the privilege to watch.
    fn watching() -> Option<(Arc<Delegations>, Recalled)> {
        let d = Arc::new(Delegations::new(true));
        match d.watch_local_opens(Duration::from_secs(20)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return None,
            Err(e) => panic!("{e}"),
        }
        let recalled = Arc::new(Mutex::new(Vec::<Held>::new()));
        let r = Arc::clone(&recalled);
        assert!(d.set_recaller(Arc::new(move |_, held| r.lock().push(*held))));
        Some((d, recalled))
    }

    #[test]
    fn a_process_opening_a_delegated_file_waits_for_the_return() {
        let Some((d, recalled)) = watching() else {
            return; // not root
        };
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        d.grant(b"f", file.as_fd(), held(1, 1, false), || true)
            .unwrap();
        let started = Instant::now();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("echo y >> {}", path.display()))
            .spawn()
            .unwrap();
        while recalled.lock().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(10), "no recall");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The child's open is held while the delegation is out.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the open went on before the return"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1);
        assert!(d.remove(b"f", &[1; 12]));
        assert!(child.wait().unwrap().success());
        assert_eq!(std::fs::read(&path).unwrap(), b"xy\n");
        assert_eq!(recalled.lock().len(), 1);
        // Unwatched with its last delegation: opens go on at once.
        std::fs::write(&path, b"z").unwrap();
    }

    #[test]
    fn a_process_renaming_or_chmoding_a_delegated_file_recalls_it() {
        let Some((d, recalled)) = watching() else {
            return; // not root
        };
        let tmp = tempfile::tempdir().unwrap();
        for (n, command) in ["chmod 600 {}", "mv {} {}.moved", "rm {}"]
            .iter()
            .enumerate()
        {
            let path = tmp.path().join(format!("f{n}"));
            std::fs::write(&path, b"x").unwrap();
            let fh = format!("f{n}").into_bytes();
            let file = std::fs::File::open(&path).unwrap();
            d.grant(&fh, file.as_fd(), held(1, n as u8, false), || true)
                .unwrap();
            drop(file);
            let shell = command.replace("{}", &path.display().to_string());
            assert!(std::process::Command::new("sh")
                .arg("-c")
                .arg(&shell)
                .status()
                .unwrap()
                .success());
            let started = Instant::now();
            while recalled.lock().len() <= n {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "`{shell}` recalled nothing"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(d.remove(&fh, &[n as u8; 12]));
        }
    }
}
