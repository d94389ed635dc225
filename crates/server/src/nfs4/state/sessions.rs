//! Sessions (RFC 8881 section 2.10): the channel attributes CREATE_SESSION
//! grants, the slot table and its reply cache (SEQUENCE, section 18.46),
//! the connections bound to a session (BIND_CONN_TO_SESSION, section
//! 18.34), its back channel's program and security (BACKCHANNEL_CTL,
//! section 18.33) and DESTROY_SESSION (section 18.37).
//!
//! SEQUENCE runs as a COMPOUND is received:
//!
//! | case | answer |
//! |---|---|
//! | session unknown | `BADSESSION` |
//! | more ops than `ca_maxoperations` | `TOO_MANY_OPS` |
//! | record longer than `ca_maxrequestsize` | `REQ_TOO_BIG` |
//! | `slotid ≥` slots granted | `BADSLOT` |
//! | `seqid == slot.seqid + 1` (wrapping) | new request: slot busy, lease renewed, connection bound |
//! | `seqid == slot.seqid`, request still running | `DELAY` |
//! | `seqid == slot.seqid`, reply cached | the cached COMPOUND4res bytes |
//! | `seqid == slot.seqid`, not cached | `RETRY_UNCACHED_REP` |
//! | `seqid == slot.seqid`, slot never used | `SEQ_MISORDERED` (knfsd) |
//! | any other seqid | `SEQ_MISORDERED` |
//!
//! Every row but the new request leaves the slot as it was. The order of
//! the checks is knfsd's `nfsd4_sequence`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dionfs_proto::nfs4::{
    BindConnToSessionArgs4, BindConnToSessionResOk4, CallbackSecParms4, ChannelAttrs4,
    ChannelDirFromClient4, ChannelDirFromServer4, Nfsstat4, SequenceArgs4, SequenceResOk4,
    SessionId4, SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_CB_PATH_DOWN_SESSION,
    SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
};
use dionfs_transport::{BackChannel, ConnInfo};
use parking_lot::Mutex;

use super::clients::{callback_security, Client};
use super::limits::{
    BACK_MIN_OPERATIONS, BACK_MIN_REQUEST, BACK_MIN_RESPONSE, BACK_SLOTS,
    CONNECTIONS_PER_DIRECTION, FORE_MIN_SIZE, OPERATIONS_PER_COMPOUND, RESPONSE_CACHED,
    SLOTS_PER_SESSION, SLOT_CHARGE_MIN,
};
use super::{Sequenced, State};

/// The fore channel granted for what a client asked (design section 4.3):
/// sizes at most `max_record`, at most 4 KiB cached per slot, at most 64
/// operations. The slots are decided with the budget
/// ([`slots_granted`]); `maxrequests` is left as asked.
pub(super) fn fore_channel(
    asked: &ChannelAttrs4,
    max_record: u32,
) -> Result<ChannelAttrs4, Nfsstat4> {
    // Too small for a SEQUENCE and its reply (pynfs CSESS25, CSESS28).
    if asked.maxrequestsize < FORE_MIN_SIZE || asked.maxresponsesize < FORE_MIN_SIZE {
        return Err(Nfsstat4::Toosmall);
    }
    Ok(ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: asked.maxrequestsize.min(max_record),
        maxresponsesize: asked.maxresponsesize.min(max_record),
        maxresponsesize_cached: asked.maxresponsesize_cached.min(RESPONSE_CACHED),
        maxoperations: asked.maxoperations.min(OPERATIONS_PER_COMPOUND),
        maxrequests: asked.maxrequests,
        rdma_ird: None,
    })
}

/// The back channel granted: the client is its replier, so its sizes are
/// taken as asked, if our CB_SEQUENCE and a recall fit; nothing cached;
/// at most [`BACK_SLOTS`] slots.
pub(super) fn back_channel(asked: &ChannelAttrs4) -> Result<ChannelAttrs4, Nfsstat4> {
    if asked.maxrequestsize < BACK_MIN_REQUEST
        || asked.maxresponsesize < BACK_MIN_RESPONSE
        || asked.maxoperations < BACK_MIN_OPERATIONS
    {
        return Err(Nfsstat4::Toosmall);
    }
    Ok(ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: asked.maxrequestsize,
        maxresponsesize: asked.maxresponsesize,
        maxresponsesize_cached: 0,
        maxoperations: asked.maxoperations,
        maxrequests: asked.maxrequests.min(BACK_SLOTS),
        rdma_ird: None,
    })
}

/// What one slot of a fore channel is charged against the server-wide
/// slot-cache budget: the most it caches.
pub(super) fn slot_charge(fore: &ChannelAttrs4) -> usize {
    (fore.maxresponsesize_cached as usize).max(SLOT_CHARGE_MIN)
}

/// Slots granted for `asked` when each costs `per_slot` and `free` bytes
/// of the budget are left: at least 1 if one fits, at most
/// [`SLOTS_PER_SESSION`]; 0 means the budget is spent (`NFS4ERR_DELAY`,
/// as knfsd's `nfsd4_get_drc_mem`).
pub(super) fn slots_granted(asked: u32, per_slot: usize, free: usize) -> u32 {
    let affordable = u32::try_from(free / per_slot).unwrap_or(u32::MAX);
    asked.clamp(1, SLOTS_PER_SESSION).min(affordable)
}

/// One session of a client.
pub struct Session {
    pub id: SessionId4,
    pub client: Arc<Client>,
    /// The fore channel's attributes as granted.
    pub fore: ChannelAttrs4,
    /// The back channel's attributes as granted.
    pub back: ChannelAttrs4,
    /// Bytes of the slot-cache budget this session reserves.
    charge: usize,
    slots: Mutex<SlotTable>,
    connections: Mutex<Connections>,
    /// Back-channel slot 0, held by a callback (`callback.rs`) from its
    /// first call to its last reply: one at a time per session. An async
    /// lock, taken with no other lock held; the leaf locks are taken
    /// under it for a few lines.
    back_slot: tokio::sync::Mutex<BackSlot>,
    /// Set when a callback failed on every back connection, cleared when
    /// one succeeds: SEQUENCE then reports `CB_PATH_DOWN`.
    callback_failed: AtomicBool,
    /// Set while a probe of the back channel waits to start, so that the
    /// requests that ask for one while it waits share it.
    probe_queued: AtomicBool,
}

/// What the server keeps of back-channel slot 0, the only one it uses.
#[derive(Debug)]
pub struct BackSlot {
    /// The sequence id of the next CB_SEQUENCE: 1 first, as the client's
    /// slot starts at 0 (RFC 8881 section 2.10.6.1).
    pub sequenceid: u32,
}

/// What [`Session::new`] is made of.
pub(super) struct NewSession<'a> {
    pub id: SessionId4,
    pub client: Arc<Client>,
    pub fore: ChannelAttrs4,
    pub back: ChannelAttrs4,
    pub charge: usize,
    /// The connection CREATE_SESSION came on: bound to the fore channel,
    /// and to the back channel with `back_chan`.
    pub conn: &'a ConnInfo,
    pub back_chan: bool,
    pub cb_program: u32,
    pub security: CallbackSecParms4,
    /// The server's count of bytes cached by every slot.
    pub cached: Arc<AtomicUsize>,
}

/// The fore channel's slots.
struct SlotTable {
    slots: Vec<Slot>,
    /// The server's count of bytes cached by every slot.
    cached: Arc<AtomicUsize>,
    /// Set when the session is destroyed: replies are no longer kept.
    closed: bool,
}

struct Slot {
    /// The last sequence id seen on the slot.
    seqid: u32,
    state: SlotState,
}

enum SlotState {
    /// No request running; what its last one left.
    Idle(SlotReply),
    /// A request is running; what the one before it left, put back if
    /// this one is abandoned.
    Busy(SlotReply),
}

/// What a slot keeps of its last request.
#[derive(Clone)]
enum SlotReply {
    /// The slot was never used.
    Never,
    /// Done, reply not cached (`sa_cachethis` false, or too long).
    Uncached,
    /// The encoded COMPOUND4res.
    Cached(Arc<[u8]>),
}

impl SlotReply {
    fn cached_len(&self) -> usize {
        match self {
            SlotReply::Cached(bytes) => bytes.len(),
            SlotReply::Never | SlotReply::Uncached => 0,
        }
    }
}

/// The connections bound to a session, and how the server calls the
/// client back on it.
struct Connections {
    fore: VecDeque<Binding>,
    back: VecDeque<Binding>,
    /// `csa_cb_program` / `bca_cb_program`.
    cb_program: u32,
    /// The security of calls on the back channel.
    security: CallbackSecParms4,
}

/// One connection bound to a session, oldest first in its list.
struct Binding {
    conn: u64,
    /// The connection's back channel: how the server calls the client on
    /// it, and how it learns that it closed.
    channel: Option<BackChannel>,
}

impl Binding {
    fn of(conn: &ConnInfo) -> Binding {
        Binding {
            conn: conn.id,
            channel: conn.back_channel.clone(),
        }
    }

    fn closed(&self) -> bool {
        self.channel.as_ref().is_some_and(BackChannel::is_closed)
    }
}

/// Binds `conn` in `list` unless it is there; at
/// [`CONNECTIONS_PER_DIRECTION`] the oldest closed connection makes room,
/// else the oldest.
fn bind(list: &mut VecDeque<Binding>, conn: &ConnInfo) {
    if list.iter().any(|b| b.conn == conn.id) {
        return;
    }
    if list.len() >= CONNECTIONS_PER_DIRECTION {
        let at = list.iter().position(Binding::closed).unwrap_or(0);
        list.remove(at);
    }
    list.push_back(Binding::of(conn));
}

impl Session {
    pub(super) fn new(new: NewSession<'_>) -> Session {
        let slots = (0..new.fore.maxrequests)
            .map(|_| Slot {
                seqid: 0,
                state: SlotState::Idle(SlotReply::Never),
            })
            .collect();
        let mut connections = Connections {
            fore: VecDeque::new(),
            back: VecDeque::new(),
            cb_program: new.cb_program,
            security: new.security,
        };
        bind(&mut connections.fore, new.conn);
        if new.back_chan {
            bind(&mut connections.back, new.conn);
        }
        Session {
            id: new.id,
            client: new.client,
            fore: new.fore,
            back: new.back,
            charge: new.charge,
            slots: Mutex::new(SlotTable {
                slots,
                cached: new.cached,
                closed: false,
            }),
            connections: Mutex::new(connections),
            back_slot: tokio::sync::Mutex::new(BackSlot { sequenceid: 1 }),
            callback_failed: AtomicBool::new(false),
            probe_queued: AtomicBool::new(false),
        }
    }

    /// Bytes of the slot-cache budget this session reserves.
    pub(super) fn charge(&self) -> usize {
        self.charge
    }

    /// Whether `conn` is bound to the session, in either direction.
    pub fn is_bound(&self, conn: &ConnInfo) -> bool {
        let connections = self.connections.lock();
        connections
            .fore
            .iter()
            .chain(&connections.back)
            .any(|b| b.conn == conn.id)
    }

    /// The back channels of the connections bound to the back channel
    /// that have not closed, newest first: where a callback goes (W8).
    pub fn back_channels(&self) -> Vec<BackChannel> {
        let connections = self.connections.lock();
        connections
            .back
            .iter()
            .rev()
            .filter(|b| !b.closed())
            .filter_map(|b| b.channel.clone())
            .collect()
    }

    /// The callback program and the security to call it with.
    pub fn callback(&self) -> (u32, CallbackSecParms4) {
        let connections = self.connections.lock();
        (connections.cb_program, connections.security.clone())
    }

    /// Whether the server has no way to call the client back on this
    /// session: no back-channel slot, no open connection bound to the
    /// back channel, or the last callback failed on every one.
    pub fn back_channel_down(&self) -> bool {
        self.back_down_of(&self.connections.lock())
    }

    /// [`Self::back_channel_down`], with the connections already locked.
    fn back_down_of(&self, connections: &Connections) -> bool {
        self.back.maxrequests == 0
            || self.callback_failed()
            || connections.back.iter().all(Binding::closed)
    }

    /// Back-channel slot 0, once no other callback of the session holds
    /// it.
    pub async fn back_slot(&self) -> tokio::sync::MutexGuard<'_, BackSlot> {
        self.back_slot.lock().await
    }

    /// Whether the last callback (probe or CB_COMPOUND) failed on every
    /// back connection.
    pub fn callback_failed(&self) -> bool {
        self.callback_failed.load(Ordering::Relaxed)
    }

    /// Records what the last callback found: `true` when it failed on
    /// every back connection.
    pub fn set_callback_failed(&self, failed: bool) {
        self.callback_failed.store(failed, Ordering::Relaxed);
    }

    /// Asks for a probe of the back channel: `false` when one already
    /// waits to start, which will do.
    pub fn queue_probe(&self) -> bool {
        !self.probe_queued.swap(true, Ordering::AcqRel)
    }

    /// The probe queued starts: a probe asked from now on is another one.
    pub fn probe_started(&self) {
        self.probe_queued.store(false, Ordering::Release);
    }

    /// BACKCHANNEL_CTL: a new callback program and security.
    pub(super) fn set_callback(&self, cb_program: u32, parms: &[CallbackSecParms4]) -> Nfsstat4 {
        let security = match callback_security(parms) {
            Ok(security) => security,
            Err(status) => return status,
        };
        let mut connections = self.connections.lock();
        connections.cb_program = cb_program;
        connections.security = security;
        Nfsstat4::Ok
    }

    /// Requests running on the session, but for the one on `except`.
    fn running(&self, except: Option<u32>) -> usize {
        let slots = self.slots.lock();
        slots
            .slots
            .iter()
            .enumerate()
            .filter(|&(at, slot)| {
                matches!(slot.state, SlotState::Busy(_)) && Some(at as u32) != except
            })
            .count()
    }

    /// The session is destroyed: its cached replies are dropped, and a
    /// request still running on it (the DESTROY_SESSION itself) keeps
    /// nothing when it completes.
    pub(super) fn close(&self) {
        let mut table = self.slots.lock();
        table.closed = true;
        let mut freed = 0;
        for slot in &mut table.slots {
            let (SlotState::Idle(reply) | SlotState::Busy(reply)) = &mut slot.state;
            freed += reply.cached_len();
            *reply = SlotReply::Uncached;
        }
        table.cached.fetch_sub(freed, Ordering::Relaxed);
    }

    /// SEQUENCE on this session (the table of the module's header), for
    /// a request its client began ([`Client::begin`]).
    fn sequence(
        self: &Arc<Self>,
        args: &SequenceArgs4,
        conn: &ConnInfo,
        numops: u32,
        request_len: Option<u64>,
    ) -> Sequenced {
        if numops > self.fore.maxoperations {
            return Sequenced::Error(Nfsstat4::TooManyOps);
        }
        if request_len.is_some_and(|len| len > u64::from(self.fore.maxrequestsize)) {
            return Sequenced::Error(Nfsstat4::ReqTooBig);
        }
        {
            let mut table = self.slots.lock();
            let Some(slot) = table.slots.get_mut(args.slotid as usize) else {
                return Sequenced::Error(Nfsstat4::Badslot);
            };
            match &mut slot.state {
                SlotState::Busy(_) if args.sequenceid == slot.seqid => {
                    return Sequenced::Error(Nfsstat4::Delay);
                }
                SlotState::Busy(_) => return Sequenced::Error(Nfsstat4::SeqMisordered),
                SlotState::Idle(reply) if args.sequenceid == slot.seqid.wrapping_add(1) => {
                    let previous = std::mem::replace(reply, SlotReply::Never);
                    slot.state = SlotState::Busy(previous);
                    slot.seqid = args.sequenceid;
                }
                SlotState::Idle(reply) if args.sequenceid == slot.seqid => {
                    return match reply {
                        SlotReply::Never => Sequenced::Error(Nfsstat4::SeqMisordered),
                        SlotReply::Uncached => Sequenced::Error(Nfsstat4::RetryUncachedRep),
                        SlotReply::Cached(bytes) => Sequenced::Replay(Arc::clone(bytes)),
                    };
                }
                SlotState::Idle(_) => return Sequenced::Error(Nfsstat4::SeqMisordered),
            }
        }
        // SP4_NONE: a SEQUENCE on a connection not bound to the session
        // binds it to the fore channel (RFC 8881 section 2.10.3.1, pynfs
        // SEQ4). The back channel looked at under the same lock.
        let back_down = {
            let mut connections = self.connections.lock();
            bind(&mut connections.fore, conn);
            self.back_down_of(&connections)
        };
        let mut status_flags = if back_down {
            // Callbacks go on a session's own back channel, so this
            // session's is the client's as far as the server is
            // concerned; a client answers either by binding one.
            SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION
        } else {
            0
        };
        if self.client.revoked_delegations.load(Ordering::Relaxed) > 0 {
            status_flags |= SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
        let highest = self.fore.maxrequests - 1;
        Sequenced::New(SlotGuard {
            session: Arc::clone(self),
            result: SequenceResOk4 {
                sessionid: self.id,
                sequenceid: args.sequenceid,
                slotid: args.slotid,
                highest_slotid: highest,
                target_highest_slotid: highest,
                status_flags,
            },
            cachethis: args.cachethis,
            done: false,
        })
    }

    /// Ends the request on slot `slotid`: `Some(reply)` is what a retry
    /// gets, `None` reverts the slot to what it was before.
    fn finish(&self, slotid: u32, outcome: Option<SlotReply>, now: Instant) {
        {
            let mut table = self.slots.lock();
            let SlotTable {
                slots,
                cached,
                closed,
            } = &mut *table;
            let closed = *closed;
            if let Some(slot) = slots.get_mut(slotid as usize) {
                if let SlotState::Busy(previous) = &mut slot.state {
                    let previous = std::mem::replace(previous, SlotReply::Never);
                    let next = match outcome {
                        Some(SlotReply::Cached(_)) if closed => SlotReply::Uncached,
                        Some(reply) => reply,
                        None => {
                            slot.seqid = slot.seqid.wrapping_sub(1);
                            previous.clone()
                        }
                    };
                    // Uncached after uncached (the usual WRITE and READ)
                    // leaves the shared count alone.
                    let (was, is) = (previous.cached_len(), next.cached_len());
                    if !closed && was != is {
                        cached.fetch_sub(was, Ordering::Relaxed);
                        cached.fetch_add(is, Ordering::Relaxed);
                    }
                    slot.state = SlotState::Idle(next);
                }
            }
        }
        self.client.end(now);
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("client", &self.client.id)
            .field("slots", &self.fore.maxrequests)
            .finish_non_exhaustive()
    }
}

/// A slot held by a request from SEQUENCE to its reply.
/// [`SlotGuard::complete`] records the reply; dropped without it (the
/// connection ended mid-record, the request was abandoned), the slot goes
/// back to its previous sequence id and cached reply, so that the
/// client's retry is a new request again.
pub struct SlotGuard {
    session: Arc<Session>,
    result: SequenceResOk4,
    cachethis: bool,
    done: bool,
}

impl SlotGuard {
    /// What SEQUENCE answers.
    pub fn result(&self) -> &SequenceResOk4 {
        &self.result
    }

    /// `sa_cachethis`: whether the client asked for the reply to be
    /// cached.
    pub fn cachethis(&self) -> bool {
        self.cachethis
    }

    /// `ca_maxresponsesize` of the fore channel.
    pub fn max_response(&self) -> u32 {
        self.session.fore.maxresponsesize
    }

    /// `ca_maxresponsesize_cached` of the fore channel.
    pub fn max_response_cached(&self) -> u32 {
        self.session.fore.maxresponsesize_cached
    }

    /// `ca_maxrequestsize` of the fore channel.
    pub fn max_request(&self) -> u32 {
        self.session.fore.maxrequestsize
    }

    pub fn clientid(&self) -> u64 {
        self.session.client.id.0
    }

    pub fn sessionid(&self) -> &SessionId4 {
        &self.session.id
    }

    pub fn slotid(&self) -> u32 {
        self.result.slotid
    }

    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.session.client
    }

    /// The request is done; `reply` is the encoded COMPOUND4res when it is
    /// to be cached (`sa_cachethis` and it fit), else `None` ("done,
    /// uncached"). Called after the reply is built, before it is sent. A
    /// reply longer than the slot was charged for is not kept.
    pub fn complete(self, reply: Option<Arc<[u8]>>) {
        self.complete_at(reply, Instant::now());
    }

    /// [`Self::complete`] with the time it ended, read already.
    pub fn complete_at(mut self, reply: Option<Arc<[u8]>>, now: Instant) {
        let limit = slot_charge(&self.session.fore);
        let kept = match reply {
            Some(bytes) if bytes.len() <= limit => SlotReply::Cached(bytes),
            _ => SlotReply::Uncached,
        };
        self.done = true;
        self.session.finish(self.result.slotid, Some(kept), now);
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if !self.done {
            self.session
                .finish(self.result.slotid, None, Instant::now());
        }
    }
}

impl fmt::Debug for SlotGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotGuard")
            .field("session", &self.session.id)
            .field("slot", &self.result.slotid)
            .field("seqid", &self.result.sequenceid)
            .finish()
    }
}

impl State {
    /// SEQUENCE; `now` read only if it takes no slot (see
    /// [`Self::find_session`]).
    pub(super) fn sequence_at(
        &self,
        args: &SequenceArgs4,
        conn: &ConnInfo,
        numops: u32,
        request_len: Option<u64>,
        now: impl FnOnce() -> Instant,
    ) -> Sequenced {
        let Some(session) = self.find_session(&args.sessionid) else {
            return Sequenced::Error(Nfsstat4::Badsession);
        };
        let sequenced = session.sequence(args, conn, numops, request_len);
        if !matches!(sequenced, Sequenced::New(_)) {
            // No slot taken, so no guard to end the request: ended here,
            // the lease renewed as by any SEQUENCE of a known session.
            session.client.end(now());
        }
        sequenced
    }

    /// The session `id`, if it exists (its client's lease untouched).
    pub fn session(&self, id: &SessionId4) -> Option<Arc<Session>> {
        self.table.lock().session(id).map(Arc::clone)
    }

    /// The session `id`, a request of its client begun: begun under the
    /// table's lock, so that a sweep cannot expire the client between
    /// this lookup and the request taking its slot. (A client with a
    /// request running never expires, and the lease runs from the end of
    /// its last one: renewing it here too would move nothing anyone sees,
    /// for one more lock of a line both workers write, and a clock read.)
    fn find_session(&self, id: &SessionId4) -> Option<Arc<Session>> {
        let table = self.table.lock();
        let session = table.session(id)?;
        match session.client.life() {
            super::clients::EXPIRED => return None,
            // A courtesy client is active again (if a conflict did not
            // expire it first).
            super::clients::COURTESY => {
                if !session
                    .client
                    .change_life(super::clients::COURTESY, super::clients::ACTIVE)
                {
                    return None;
                }
                self.courtesy.lock().remove(&session.client.id.0);
                tracing::info!(
                    clientid = session.client.id.0,
                    "NFSv4 courtesy client is back: active again"
                );
            }
            _ => {}
        }
        session.client.begin();
        Some(Arc::clone(session))
    }

    pub(super) fn destroy_session_now(
        &self,
        id: &SessionId4,
        conn: &ConnInfo,
        current: Option<&SlotGuard>,
        last_op: bool,
    ) -> Nfsstat4 {
        let mut table = self.table.lock();
        let Some(session) = table.session(id) else {
            return Nfsstat4::Badsession;
        };
        let own_slot = current
            .filter(|slot| slot.sessionid() == id)
            .map(SlotGuard::slotid);
        // Destroying the session a COMPOUND runs in: nothing may follow.
        if own_slot.is_some() && !last_op {
            return Nfsstat4::NotOnlyOp;
        }
        if !session.is_bound(conn) {
            return Nfsstat4::ConnNotBoundToSession;
        }
        if session.running(own_slot) > 0 {
            return Nfsstat4::Delay;
        }
        table.remove_session(id);
        Nfsstat4::Ok
    }

    pub(super) fn bind_conn_at(
        &self,
        args: &BindConnToSessionArgs4,
        conn: &ConnInfo,
        now: Instant,
    ) -> Result<BindConnToSessionResOk4, Nfsstat4> {
        let Some(session) = self.find_session(&args.sessid) else {
            return Err(Nfsstat4::Badsession);
        };
        let bound = bind_conn_to(&session, args, conn);
        // A request of the client, as a SEQUENCE: its lease renewed.
        session.client.end(now);
        bound
    }
}

/// BIND_CONN_TO_SESSION of `conn` to `session`, found.
fn bind_conn_to(
    session: &Session,
    args: &BindConnToSessionArgs4,
    conn: &ConnInfo,
) -> Result<BindConnToSessionResOk4, Nfsstat4> {
    // Both when the client leaves the choice to us; the back channel
    // only where there is one (not over UDP).
    let can_call_back = conn.back_channel.is_some();
    let dir = match args.dir {
        ChannelDirFromClient4::Fore => ChannelDirFromServer4::Fore,
        ChannelDirFromClient4::Back if can_call_back => ChannelDirFromServer4::Back,
        ChannelDirFromClient4::Back => return Err(Nfsstat4::Inval),
        ChannelDirFromClient4::ForeOrBoth | ChannelDirFromClient4::BackOrBoth if can_call_back => {
            ChannelDirFromServer4::Both
        }
        ChannelDirFromClient4::ForeOrBoth => ChannelDirFromServer4::Fore,
        ChannelDirFromClient4::BackOrBoth => return Err(Nfsstat4::Inval),
    };
    let mut connections = session.connections.lock();
    if matches!(
        dir,
        ChannelDirFromServer4::Fore | ChannelDirFromServer4::Both
    ) {
        bind(&mut connections.fore, conn);
    }
    if matches!(
        dir,
        ChannelDirFromServer4::Back | ChannelDirFromServer4::Both
    ) {
        bind(&mut connections.back, conn);
    }
    Ok(BindConnToSessionResOk4 {
        sessid: args.sessid,
        dir,
        use_conn_in_rdma_mode: false,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use dionfs_proto::nfs4::{
        AuthSysParms, BackchannelCtlArgs4, ReclaimCompleteArgs4,
        CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    };

    fn sequence(state: &State, session: SessionId4, slot: u32, seqid: u32) -> Sequenced {
        state.sequence(&seq(session, slot, seqid), &conn(1), 1, None)
    }

    fn error(sequenced: Sequenced) -> Nfsstat4 {
        match sequenced {
            Sequenced::Error(status) => status,
            other => panic!("not an error: {other:?}"),
        }
    }

    fn replay(sequenced: Sequenced) -> Arc<[u8]> {
        match sequenced {
            Sequenced::Replay(bytes) => bytes,
            other => panic!("not a replay: {other:?}"),
        }
    }

    fn bytes(text: &str) -> Arc<[u8]> {
        Arc::from(text.as_bytes())
    }

    fn session_of(state: &State, id: SessionId4) -> Arc<Session> {
        Arc::clone(state.table.lock().session(&id).unwrap())
    }

    #[test]
    fn unknown_session_and_slot() {
        let state = state();
        let (_, session) = session(&state, "a");
        // SEQ5.
        assert_eq!(
            error(sequence(&state, SessionId4([7; 16]), 0, 1)),
            Nfsstat4::Badsession
        );
        // SEQ8: 8 slots asked and granted, 0 to 7.
        assert_eq!(error(sequence(&state, session, 8, 1)), Nfsstat4::Badslot);
        drop(new_request(&state, session, 7, 1));
    }

    #[test]
    fn a_new_request_gets_the_slot_and_its_reply_is_replayed() {
        let state = state();
        let (_, session) = session(&state, "a");
        let guard = new_request(&state, session, 2, 1);
        // SEQ12: the result echoes the session, seqid and slot.
        let result = guard.result().clone();
        assert_eq!(result.sessionid, session);
        assert_eq!(result.sequenceid, 1);
        assert_eq!(result.slotid, 2);
        assert_eq!(result.highest_slotid, 7);
        assert_eq!(result.target_highest_slotid, 7);
        assert!(guard.cachethis());
        assert_eq!(guard.max_response_cached(), 4096);
        // While it runs, its retry waits.
        assert_eq!(error(sequence(&state, session, 2, 1)), Nfsstat4::Delay);
        assert_eq!(
            error(sequence(&state, session, 2, 2)),
            Nfsstat4::SeqMisordered
        );
        guard.complete(Some(bytes("reply one")));
        assert_eq!(state.counts().slot_cache_used, 9);
        // SEQ9: the retry gets the same bytes, as often as it comes.
        assert_eq!(&*replay(sequence(&state, session, 2, 1)), b"reply one");
        assert_eq!(&*replay(sequence(&state, session, 2, 1)), b"reply one");
        // The next one replaces the cached reply.
        new_request(&state, session, 2, 2).complete(Some(bytes("two")));
        assert_eq!(&*replay(sequence(&state, session, 2, 2)), b"two");
        assert_eq!(state.counts().slot_cache_used, 3);
        // SEQ13: two ahead, or behind.
        assert_eq!(
            error(sequence(&state, session, 2, 4)),
            Nfsstat4::SeqMisordered
        );
        assert_eq!(
            error(sequence(&state, session, 2, 1)),
            Nfsstat4::SeqMisordered
        );
    }

    #[test]
    fn an_uncached_reply_is_not_replayed() {
        let state = state();
        let (_, session) = session(&state, "a");
        // SEQ10b.
        new_request(&state, session, 0, 1).complete(None);
        assert_eq!(
            error(sequence(&state, session, 0, 1)),
            Nfsstat4::RetryUncachedRep
        );
        // A reply longer than the slot was charged for is not kept.
        new_request(&state, session, 0, 2).complete(Some(Arc::from(vec![0u8; 4097])));
        assert_eq!(
            error(sequence(&state, session, 0, 2)),
            Nfsstat4::RetryUncachedRep
        );
        assert_eq!(state.counts().slot_cache_used, 0);
        // A slot never used has nothing to replay (knfsd).
        assert_eq!(
            error(sequence(&state, session, 1, 0)),
            Nfsstat4::SeqMisordered
        );
    }

    #[test]
    fn seqids_wrap_around() {
        let state = state();
        let (_, session) = session(&state, "a");
        new_request(&state, session, 0, 1).complete(Some(bytes("one")));
        session_of(&state, session).slots.lock().slots[0].seqid = u32::MAX;
        assert_eq!(&*replay(sequence(&state, session, 0, u32::MAX)), b"one");
        new_request(&state, session, 0, 0).complete(Some(bytes("zero")));
        assert_eq!(&*replay(sequence(&state, session, 0, 0)), b"zero");
        assert_eq!(
            error(sequence(&state, session, 0, u32::MAX)),
            Nfsstat4::SeqMisordered
        );
        drop(new_request(&state, session, 0, 1));
    }

    #[test]
    fn too_many_ops_and_too_big_leave_the_slot_alone() {
        let state = state();
        let e = state
            .exchange_id(&exchange("a", 1, 0), &sys(1), peer())
            .unwrap();
        let mut args = create(e.clientid, e.sequenceid);
        // SEQ7 asks for 4 operations, SEQ6 for 512-byte requests.
        args.fore_chan_attrs.maxoperations = 4;
        args.fore_chan_attrs.maxrequestsize = 512;
        let session = state
            .create_session(&args, &sys(1), &conn(1))
            .unwrap()
            .sessionid;
        let args = seq(session, 0, 1);
        assert!(matches!(
            state.sequence(&args, &conn(1), 5, None),
            Sequenced::Error(Nfsstat4::TooManyOps)
        ));
        assert!(matches!(
            state.sequence(&args, &conn(1), 4, Some(513)),
            Sequenced::Error(Nfsstat4::ReqTooBig)
        ));
        // Checked before the slot: even a bad slot gets them.
        assert!(matches!(
            state.sequence(&seq(session, 99, 1), &conn(1), 5, None),
            Sequenced::Error(Nfsstat4::TooManyOps)
        ));
        // The slot is as it was: seqid 1 is still new.
        assert!(matches!(
            state.sequence(&args, &conn(1), 4, Some(512)),
            Sequenced::New(_)
        ));
    }

    #[test]
    fn a_dropped_guard_puts_the_slot_back() {
        let state = state();
        let (_, session) = session(&state, "a");
        new_request(&state, session, 0, 1).complete(Some(bytes("one")));
        let guard = new_request(&state, session, 0, 2);
        assert_eq!(guard.client().running(), 1);
        drop(guard);
        assert_eq!(session_of(&state, session).client.running(), 0);
        // The previous request's reply is still what its retry gets, and
        // seqid 2 is new again.
        assert_eq!(&*replay(sequence(&state, session, 0, 1)), b"one");
        assert_eq!(state.counts().slot_cache_used, 3);
        new_request(&state, session, 0, 2).complete(None);
        assert_eq!(state.counts().slot_cache_used, 0);
        // A first request dropped leaves a slot never used.
        drop(new_request(&state, session, 1, 1));
        assert_eq!(
            error(sequence(&state, session, 1, 0)),
            Nfsstat4::SeqMisordered
        );
        drop(new_request(&state, session, 1, 1));
    }

    #[test]
    fn without_a_back_channel_the_path_is_down() {
        let state = state();
        let (_, session) = session(&state, "a");
        let guard = new_request(&state, session, 0, 1);
        assert_eq!(
            guard.result().status_flags,
            SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION
        );
    }

    #[tokio::test]
    async fn conn_back_chan_binds_the_connections_back_channel() {
        let state = state();
        let (live, stream) = live_conn().await;
        let e = state
            .exchange_id(&exchange("a", 1, 0), &sys(1), peer())
            .unwrap();
        let cs = state
            .create_session(&create(e.clientid, e.sequenceid), &sys(1), &live)
            .unwrap();
        assert_eq!(cs.flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
        let session = session_of(&state, cs.sessionid);
        assert_eq!(
            session.back_channels(),
            vec![live.back_channel.clone().unwrap()]
        );
        assert_eq!(session.callback().0, 0x4000_0000);
        let guard = match state.sequence(&seq(cs.sessionid, 0, 1), &live, 1, None) {
            Sequenced::New(guard) => guard,
            other => panic!("{other:?}"),
        };
        assert_eq!(guard.result().status_flags, 0);
        guard.complete(None);
        // The connection closes: the path is down.
        drop(stream);
        until_closed(&live).await;
        assert!(session.back_channels().is_empty());
        let guard = new_request(&state, cs.sessionid, 0, 2);
        assert_ne!(guard.result().status_flags & SEQ4_STATUS_CB_PATH_DOWN, 0);
    }

    #[test]
    fn sequence_binds_its_connection() {
        let state = state();
        let (_, session) = session(&state, "a");
        // DSESS9001: an unbound connection may not destroy the session...
        assert_eq!(
            state.destroy_session(&session, &conn(2), None, true),
            Nfsstat4::ConnNotBoundToSession
        );
        // ...until a SEQUENCE on it bound it (SEQ4).
        match state.sequence(&seq(session, 0, 1), &conn(2), 1, None) {
            Sequenced::New(guard) => guard.complete(None),
            other => panic!("{other:?}"),
        }
        assert!(session_of(&state, session).is_bound(&conn(2)));
        assert_eq!(
            state.destroy_session(&session, &conn(2), None, true),
            Nfsstat4::Ok
        );
    }

    #[test]
    fn destroy_session() {
        let state = state();
        let (_, session) = session(&state, "a");
        let reserved = state.counts().slot_cache_reserved;
        assert_eq!(reserved, 8 * 4096);
        // DSESS9004: in its own COMPOUND, only as the last op.
        let guard = new_request(&state, session, 0, 1);
        assert_eq!(
            state.destroy_session(&session, &conn(1), Some(&guard), false),
            Nfsstat4::NotOnlyOp
        );
        // Another request of it still running.
        let other = new_request(&state, session, 1, 1);
        assert_eq!(
            state.destroy_session(&session, &conn(1), Some(&guard), true),
            Nfsstat4::Delay
        );
        assert_eq!(
            state.destroy_session(&session, &conn(1), None, true),
            Nfsstat4::Delay
        );
        other.complete(Some(bytes("cached")));
        assert_eq!(state.counts().slot_cache_used, 6);
        assert_eq!(
            state.destroy_session(&session, &conn(1), Some(&guard), true),
            Nfsstat4::Ok
        );
        // Its budget and cache are given back, and the request that
        // destroyed it keeps nothing.
        assert_eq!(state.counts().slot_cache_reserved, 0);
        assert_eq!(state.counts().slot_cache_used, 0);
        guard.complete(Some(bytes("destroyed")));
        assert_eq!(state.counts().slot_cache_used, 0);
        // DSESS1: gone.
        assert_eq!(error(sequence(&state, session, 0, 2)), Nfsstat4::Badsession);
        assert_eq!(
            state.destroy_session(&session, &conn(1), None, true),
            Nfsstat4::Badsession
        );
    }

    #[test]
    fn the_slot_budget_shrinks_sessions_then_delays() {
        // Room for 10 slots of 4 KiB.
        let state = state_with_budget(10 * 4096);
        let e = state
            .exchange_id(&exchange("a", 1, 0), &sys(1), peer())
            .unwrap();
        let mut sequence = e.sequenceid;
        let mut create_one = |state: &State| {
            let mut args = create(e.clientid, sequence);
            args.fore_chan_attrs.maxresponsesize_cached = 4096;
            let result = state.create_session(&args, &sys(1), &conn(1));
            if result.is_ok() {
                sequence += 1;
            }
            result
        };
        let first = create_one(&state).unwrap();
        assert_eq!(first.fore_chan_attrs.maxrequests, 8);
        // Fewer slots than asked, then none.
        assert_eq!(create_one(&state).unwrap().fore_chan_attrs.maxrequests, 2);
        assert_eq!(create_one(&state), Err(Nfsstat4::Delay));
        assert_eq!(state.counts().slot_cache_reserved, 10 * 4096);
        assert_eq!(state.counts().refused, 1);
        // Destroying a session gives its budget back.
        assert_eq!(
            state.destroy_session(&first.sessionid, &conn(1), None, true),
            Nfsstat4::Ok
        );
        assert_eq!(state.counts().slot_cache_reserved, 2 * 4096);
        assert_eq!(create_one(&state).unwrap().fore_chan_attrs.maxrequests, 8);
    }

    #[test]
    fn toosmall_channels() {
        let asked = attrs(8);
        let too_small = |f: fn(&mut ChannelAttrs4)| {
            let mut a = asked.clone();
            f(&mut a);
            a
        };
        // CSESS25, CSESS28.
        let max = 1 << 20;
        assert_eq!(
            fore_channel(&too_small(|a| a.maxresponsesize = 0), max),
            Err(Nfsstat4::Toosmall)
        );
        assert_eq!(
            fore_channel(&too_small(|a| a.maxrequestsize = 20), max),
            Err(Nfsstat4::Toosmall)
        );
        assert!(fore_channel(&too_small(|a| a.maxrequestsize = 256), max).is_ok());
        assert_eq!(
            back_channel(&too_small(|a| a.maxrequestsize = 511)),
            Err(Nfsstat4::Toosmall)
        );
        assert_eq!(
            back_channel(&too_small(|a| a.maxresponsesize = 255)),
            Err(Nfsstat4::Toosmall)
        );
        assert_eq!(
            back_channel(&too_small(|a| a.maxoperations = 1)),
            Err(Nfsstat4::Toosmall)
        );
        // CSESS27: a tiny cache is granted as asked.
        assert_eq!(
            fore_channel(&too_small(|a| a.maxresponsesize_cached = 10), max)
                .unwrap()
                .maxresponsesize_cached,
            10
        );
        assert_eq!(slots_granted(0, 4096, 1 << 20), 1);
        assert_eq!(slots_granted(2049, 4096, 1 << 30), 64);
        assert_eq!(slots_granted(8, 4096, 4095), 0);
    }

    #[test]
    fn bind_conn_to_session() {
        let state = state();
        let (_, session) = session(&state, "a");
        let bind = |dir, conn: &ConnInfo| {
            state.bind_conn(
                &BindConnToSessionArgs4 {
                    sessid: session,
                    dir,
                    use_conn_in_rdma_mode: true,
                },
                conn,
            )
        };
        let bound = bind(ChannelDirFromClient4::Fore, &conn(2)).unwrap();
        assert_eq!(bound.sessid, session);
        assert_eq!(bound.dir, ChannelDirFromServer4::Fore);
        assert!(!bound.use_conn_in_rdma_mode);
        assert!(session_of(&state, session).is_bound(&conn(2)));
        // No back channel on this connection: FORE_OR_BOTH binds the fore
        // channel, BACK is refused.
        assert_eq!(
            bind(ChannelDirFromClient4::ForeOrBoth, &conn(3))
                .unwrap()
                .dir,
            ChannelDirFromServer4::Fore
        );
        assert_eq!(
            bind(ChannelDirFromClient4::Back, &conn(4)),
            Err(Nfsstat4::Inval)
        );
        assert!(!session_of(&state, session).is_bound(&conn(4)));
        assert_eq!(
            state.bind_conn(
                &BindConnToSessionArgs4 {
                    sessid: SessionId4([9; 16]),
                    dir: ChannelDirFromClient4::Fore,
                    use_conn_in_rdma_mode: false,
                },
                &conn(2)
            ),
            Err(Nfsstat4::Badsession)
        );
    }

    #[test]
    fn at_most_16_connections_per_direction_oldest_first() {
        let state = state();
        let (_, session) = session(&state, "a");
        let run =
            |id: u64| match state.sequence(&seq(session, 0, id as u32 - 1), &conn(id), 1, None) {
                Sequenced::New(guard) => guard.complete(None),
                other => panic!("{other:?}"),
            };
        // Connection 1 (CREATE_SESSION's) and 2..=16.
        for id in 2..=16 {
            run(id);
        }
        let s = session_of(&state, session);
        assert!((1..=16).all(|id| s.is_bound(&conn(id))));
        run(17);
        assert!(!s.is_bound(&conn(1)));
        assert!((2..=17).all(|id| s.is_bound(&conn(id))));
    }

    #[tokio::test]
    async fn closed_connections_make_room_first() {
        let state = state();
        let (_, session) = session(&state, "a");
        let s = session_of(&state, session);
        let mut live = Vec::new();
        for _ in 0..16 {
            let (conn, stream) = live_conn().await;
            let bound = state
                .bind_conn(
                    &BindConnToSessionArgs4 {
                        sessid: session,
                        dir: ChannelDirFromClient4::BackOrBoth,
                        use_conn_in_rdma_mode: false,
                    },
                    &conn,
                )
                .unwrap();
            assert_eq!(bound.dir, ChannelDirFromServer4::Both);
            live.push((conn, Some(stream)));
        }
        assert_eq!(s.back_channels().len(), 16);
        // The fifth closes; the next one bound takes its place, in both
        // directions, and the oldest open ones stay.
        live[4].1.take();
        until_closed(&live[4].0).await;
        let (newest, _stream) = live_conn().await;
        state
            .bind_conn(
                &BindConnToSessionArgs4 {
                    sessid: session,
                    dir: ChannelDirFromClient4::Back,
                    use_conn_in_rdma_mode: false,
                },
                &newest,
            )
            .unwrap();
        let channels = s.back_channels();
        assert_eq!(channels.len(), 16);
        assert_eq!(channels[0], newest.back_channel.clone().unwrap());
        assert!(!channels.contains(live[4].0.back_channel.as_ref().unwrap()));
        assert!(channels.contains(live[0].0.back_channel.as_ref().unwrap()));
    }

    #[test]
    fn backchannel_ctl() {
        let state = state();
        let (_, session) = session(&state, "a");
        let guard = new_request(&state, session, 0, 1);
        let sys_parms = CallbackSecParms4::AuthSys(AuthSysParms {
            uid: 7,
            ..AuthSysParms::default()
        });
        let gss = gss();
        let ctl = |program, sec_parms| BackchannelCtlArgs4 {
            cb_program: program,
            sec_parms,
        };
        assert_eq!(
            state.backchannel_ctl(&guard, &ctl(77, vec![gss.clone(), sys_parms.clone()])),
            Nfsstat4::Ok
        );
        assert_eq!(guard.session().callback(), (77, sys_parms));
        // GSS alone is refused, and nothing changes.
        assert_eq!(
            state.backchannel_ctl(&guard, &ctl(78, vec![gss])),
            Nfsstat4::EncrAlgUnsupp
        );
        assert_eq!(guard.session().callback().0, 77);
        assert_eq!(
            state.backchannel_ctl(&guard, &ctl(79, vec![])),
            Nfsstat4::Ok
        );
        assert_eq!(
            guard.session().callback(),
            (79, CallbackSecParms4::AuthNone)
        );
    }

    #[test]
    fn reclaim_complete_once() {
        let state = state();
        let (_, session) = session(&state, "a");
        let guard = new_request(&state, session, 0, 1);
        let all = ReclaimCompleteArgs4 { one_fs: false };
        let one = ReclaimCompleteArgs4 { one_fs: true };
        assert_eq!(state.reclaim_complete(&guard, &one), Nfsstat4::Ok);
        assert_eq!(state.reclaim_complete(&guard, &all), Nfsstat4::Ok);
        assert_eq!(
            state.reclaim_complete(&guard, &all),
            Nfsstat4::CompleteAlready
        );
    }

    #[test]
    fn without_a_recovery_record_reclaims_get_no_grace() {
        let state = state();
        let (_, session) = session(&state, "a");
        let guard = new_request(&state, session, 0, 1);
        assert_eq!(
            state.grace_check(guard.client(), true),
            Err(Nfsstat4::NoGrace)
        );
        assert_eq!(state.grace_check(guard.client(), false), Ok(()));
    }
}
