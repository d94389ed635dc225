//! Blocked LOCKs granted later: what the server needs to call a waiting
//! client back (GRANTED), the callbacks being made, and the calls
//! themselves. A LOCK that must wait is answered BLOCKED and queued in
//! the lock table ([`dionfs_core::locks::table`]); when its range can be had,
//! the server takes it and calls the client back. The client may also ask
//! again meanwhile and be answered GRANTED: then the callback, whatever
//! it hears, must not release the lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_proto::nlm4::{Nlm4Res, Nlm4Stat, Nlm4TestArgs, NlmProc4, NLM_PROGRAM, NLM_V4};
use dionfs_xdr::{Decode, Encode};
use parking_lot::Mutex;
use tracing::{debug, warn};

use super::client::{self, Peer};
use crate::locks::{NlmHost, NlmOwner, Owner, Waiter};
use dionfs_core::locks::table::{LockTable, Retried};
use dionfs_core::locks::Span;

/// How long a blocked LOCK waits for its client to ask again before it
/// is dropped (the Linux client asks every 30 s while it waits).
pub(super) const WAITER_TTL: Duration = Duration::from_secs(120);
/// How often waiters are retried without a release seen through NLM.
pub(super) const RETRY_EVERY: Duration = Duration::from_secs(1);

/// A GRANTED callback to make: to whom, and what.
#[derive(Clone)]
pub struct Callback {
    pub(super) peer: Peer,
    pub(super) args: Nlm4TestArgs,
    /// Whether the LOCK was monitored (not NM_LOCK): a lock granted to it
    /// records its client for a restart, as a LOCK granted at once does.
    pub(super) monitor: bool,
}

/// A GRANTED callback being made: set once the owner's LOCK, asked again,
/// was answered GRANTED, so the client has the lock whatever the callback
/// now hears (knfsd unlinks the blocked lock then, and a late answer to
/// its callback finds nothing to release).
type Answered = Arc<AtomicBool>;

/// A GRANTED callback in the making's key: file, owner, range.
type GrantKey = (Vec<u8>, NlmOwner, Span);

/// A lock taken for a blocked LOCK, to call its client back about.
pub(super) struct Grant {
    pub(super) fh: Vec<u8>,
    pub(super) owner: NlmOwner,
    pub(super) span: Span,
    pub(super) callback: Callback,
    answered: Answered,
}

impl Grant {
    /// Whether the owner's LOCK, asked again, was answered GRANTED.
    pub(super) fn answered(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }
}

/// The GRANTED callbacks being made, by file, owner and range. Locked
/// after the lock table where both are.
#[derive(Default)]
pub(super) struct Granting {
    made: Mutex<HashMap<GrantKey, Answered>>,
}

impl Granting {
    /// The locks `retried` took on `fh` for blocked LOCKs, each recorded
    /// as a GRANTED callback being made while the table is still locked
    /// (`_table`): the owner's LOCK, asked again as soon as the table is free,
    /// must find the record and mark it answered. Waiters whose lock
    /// failed are dropped, and logged.
    pub(super) fn record(
        &self,
        _table: &LockTable<Owner, Waiter>,
        fh: &[u8],
        retried: Retried<Owner, Waiter>,
    ) -> Vec<Grant> {
        for (w, e) in retried.failed {
            match &w.owner {
                Owner::Nlm(o) => warn!(error = %e, svid = o.svid, "NLM: a blocked lock failed"),
                Owner::V4 { address, .. } => {
                    warn!(error = %e, client = %address, "NFSv4: a blocked lock failed")
                }
            }
        }
        let mut made = self.made.lock();
        let mut grants = Vec::with_capacity(retried.granted.len());
        for w in retried.granted {
            // Only NLM queues waiters (NFSv4 clients poll); another's is
            // granted with nobody to tell.
            let (Owner::Nlm(owner), Ok(callback)) = (w.owner, w.callback.downcast::<Callback>())
            else {
                warn!("a blocked lock not NLM's was granted; nobody to call back");
                continue;
            };
            let answered = Answered::default();
            made.insert((fh.to_vec(), owner.clone(), w.span), answered.clone());
            grants.push(Grant {
                fh: fh.to_vec(),
                owner,
                span: w.span,
                callback: *callback,
                answered,
            });
        }
        grants
    }

    /// The owner's LOCK of `span` on `fh`, asked again while its GRANTED
    /// callback is being made, was answered GRANTED: the client has its
    /// answer. Called under the lock table's lock, so that the callback
    /// never releases what this answer granted.
    pub(super) fn answer(&self, fh: &[u8], owner: &NlmOwner, span: Span) {
        let mut made = self.made.lock();
        // The key is built only when callbacks are being made.
        if !made.is_empty() {
            if let Some(answered) = made.remove(&(fh.to_vec(), owner.clone(), span)) {
                answered.store(true, Ordering::Release);
            }
        }
    }

    /// The callbacks to the hosts `host` matches are over (they rebooted
    /// or freed all): a refusal heard now must not release a lock granted
    /// to the client since.
    pub(super) fn drop_hosts(&self, host: impl Fn(&NlmHost) -> bool) {
        self.made.lock().retain(|(_, owner, _), answered| {
            let dropped = host(&owner.host);
            if dropped {
                answered.store(true, Ordering::Release);
            }
            !dropped
        });
    }

    /// A GRANTED callback is over (made, given up or dropped).
    pub(super) fn done(&self, g: &Grant) {
        let mut made = self.made.lock();
        let key = (g.fh.clone(), g.owner.clone(), g.span);
        if made.get(&key).is_some_and(|a| Arc::ptr_eq(a, &g.answered)) {
            made.remove(&key);
        }
    }
}

/// What a GRANTED callback came to.
pub(super) enum Heard {
    /// The client has the lock: it answered GRANTED, or its LOCK, asked
    /// again, was answered.
    Taken,
    /// The client answered that it no longer waits (`stat`).
    Refused(Nlm4Stat),
    /// No answer after a few tries: the last error.
    Nothing(Option<std::io::Error>),
}

/// GRANTED to the client, a few times, until it answers or its LOCK,
/// asked again, is answered.
pub(super) fn call(g: &Grant) -> Heard {
    let (owner, cb) = (&g.owner, &g.callback);
    let args = cb.args.to_xdr();
    let mut last = None;
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_secs(2));
        }
        if g.answered() {
            return Heard::Taken;
        }
        let granted = NlmProc4::Granted as u32;
        let r = client::call(cb.peer, NLM_PROGRAM, NLM_V4, granted, &args, false);
        let r = r.map(|res| Nlm4Res::from_xdr(&res));
        debug!(client = %cb.peer.client, svid = owner.svid, attempt, result = ?r, "NLM GRANTED callback");
        match r {
            Ok(Ok(res)) if res.stat == Nlm4Stat::Granted => return Heard::Taken,
            Ok(Ok(res)) => return Heard::Refused(res.stat),
            Ok(Err(e)) => last = Some(std::io::Error::other(format!("bad reply: {e}"))),
            Err(e) => last = Some(e),
        }
    }
    Heard::Nothing(last)
}
