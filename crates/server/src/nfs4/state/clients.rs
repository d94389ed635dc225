//! Client records: EXCHANGE_ID (RFC 8881 section 18.35), their
//! confirmation by CREATE_SESSION (section 18.36.4), DESTROY_CLIENTID
//! (section 18.50) and leases.
//!
//! Per client owner (`co_ownerid`) the table keeps at most one confirmed
//! record `C` and one unconfirmed record `U`. EXCHANGE_ID follows the
//! cases of section 18.35.5, as knfsd numbers them in its comments:
//!
//! | UPD | records | verifier | principal | result |
//! |---|---|---|---|---|
//! | no | none | – | – | new `U`, new clientid (case 1) |
//! | no | `C` | same | same | `C`'s clientid, `CONFIRMED_R` (case 2) |
//! | no | `C` | any | different | `C` has state: `CLID_INUSE`; else drop `C`, new `U` (case 3) |
//! | no | `C` | different | same | new `U` beside `C`, which goes when `U` is confirmed (case 5) |
//! | no | `U` only | any | any | replace `U`, new clientid (case 4) |
//! | yes | `C` | same | same | update `C` (case 6) |
//! | yes | `C` | different | same | `NOT_SAME` (case 8) |
//! | yes | `C` | any | different | `PERM` (case 9) |
//! | yes | none, or `U` only | – | – | `NOENT` (case 7) |
//!
//! "State" in case 3 is what knfsd's `client_has_state` counts: sessions,
//! opens and locks. A live lease alone is not: pynfs
//! EID5e destroys its session and expects a new principal to replace the
//! record at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_proto::nfs4::{
    CallbackSecParms4, CreateSessionArgs4, CreateSessionResOk4, ExchangeIdArgs4, ExchangeIdResOk4,
    NfsImplId4, Nfsstat4, Opaque4, ServerOwner4, SessionId4, StateProtect4A, StateProtect4R,
    Verifier4, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, CREATE_SESSION4_FLAG_CONN_RDMA,
    CREATE_SESSION4_FLAG_PERSIST, EXCHGID4_FLAG_BIND_PRINC_STATEID, EXCHGID4_FLAG_CONFIRMED_R,
    EXCHGID4_FLAG_MASK_PNFS, EXCHGID4_FLAG_SUPP_MOVED_MIGR, EXCHGID4_FLAG_SUPP_MOVED_REFER,
    EXCHGID4_FLAG_UPD_CONFIRMED_REC_A, EXCHGID4_FLAG_USE_NON_PNFS,
};
use dionfs_transport::ConnInfo;
use parking_lot::Mutex;
use tracing::debug;

use super::ids::{session_id, ClientId, IdMap};
use super::limits::{Bound, OWNERS_PER_ADDRESS, SESSIONS_PER_CLIENT};
use super::sessions::{self, Session};
use super::stateids::ClientState;
use super::{Principal, State};

mod v40;

pub use v40::{Callback40, CallbackPath};

/// The flags a client may send in `eia_flags` (knfsd's
/// `EXCHGID4_FLAG_MASK_A`). Any other bit, `CONFIRMED_R` (the server's)
/// and undefined ones alike, is `NFS4ERR_INVAL` (pynfs EID4, EID7).
const REQUEST_FLAGS: u32 = EXCHGID4_FLAG_SUPP_MOVED_REFER
    | EXCHGID4_FLAG_SUPP_MOVED_MIGR
    | EXCHGID4_FLAG_BIND_PRINC_STATEID
    | EXCHGID4_FLAG_MASK_PNFS
    | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;

/// The flags CREATE_SESSION knows (`CREATE_SESSION4_FLAG_*`); any other
/// bit is `NFS4ERR_INVAL` (pynfs CSESS15).
const SESSION_FLAGS: u32 = CREATE_SESSION4_FLAG_PERSIST
    | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    | CREATE_SESSION4_FLAG_CONN_RDMA;

/// A client, confirmed or not: who it is, and its lease.
#[derive(Debug)]
pub struct Client {
    pub id: ClientId,
    /// `co_ownerid`: the name the client keeps across its reboots.
    pub owner: Vec<u8>,
    /// `co_verifier`: changes at each of the client's reboots.
    pub verifier: Verifier4,
    /// Who made the record; only that principal may confirm it.
    pub principal: Principal,
    /// Where its EXCHANGE_ID came from.
    pub address: IpAddr,
    lease: Mutex<Lease>,
    /// RECLAIM_COMPLETE (`rca_one_fs` false) was sent.
    reclaim_complete: AtomicBool,
    /// It is in the recovery record (`recovery.rs`).
    pub(super) recorded: AtomicBool,
    /// [`ACTIVE`], [`COURTESY`] or [`EXPIRED`] (design section 4.6).
    life: AtomicU8,
    /// The minor version of the COMPOUND of its last EXCHANGE_ID.
    minor: AtomicU32,
    /// Its opens and locks.
    pub state: Mutex<ClientState>,
    /// Its delegations revoked and not freed yet (FREE_STATEID): SEQUENCE
    /// answers `RECALLABLE_STATE_REVOKED` while there are any.
    pub revoked_delegations: std::sync::atomic::AtomicUsize,
    /// A minor version 0 client's callback path (its SETCLIENTID's,
    /// once confirmed) and whether it answers.
    pub callback40: Mutex<Callback40>,
}

/// A client renewing its lease (or new).
pub const ACTIVE: u8 = 0;
/// A client whose lease ran out holding state: its state and sessions are
/// kept until a conflict, [`super::limits::COURTESY_TIMEOUT`] or too many
/// courtesy clients; its next SEQUENCE makes it active again.
pub const COURTESY: u8 = 1;
/// A courtesy client expired by a conflict: its locks and reservations
/// are gone, its sessions unknown; the laundromat drops its record.
pub const EXPIRED: u8 = 2;

/// When a client last renewed its lease, and how many of its requests
/// run now (a client with a request running never expires).
#[derive(Debug)]
struct Lease {
    renewed: Instant,
    running: u32,
}

/// Who a new client record is for: its owner (EXCHANGE_ID's `co_ownerid`,
/// SETCLIENTID's `id`), its verifier, and the minor version it came in.
struct NewClient<'a> {
    owner: &'a [u8],
    verifier: Verifier4,
    minor: u32,
    who: &'a Principal,
    address: IpAddr,
}

impl Client {
    fn new(id: ClientId, new: &NewClient, now: Instant) -> Client {
        Client {
            id,
            owner: new.owner.to_vec(),
            verifier: new.verifier,
            principal: new.who.clone(),
            address: new.address,
            lease: Mutex::new(Lease {
                renewed: now,
                running: 0,
            }),
            reclaim_complete: AtomicBool::new(false),
            recorded: AtomicBool::new(false),
            life: AtomicU8::new(ACTIVE),
            minor: AtomicU32::new(new.minor),
            state: Mutex::default(),
            revoked_delegations: Default::default(),
            callback40: Mutex::default(),
        }
    }

    /// [`ACTIVE`], [`COURTESY`] or [`EXPIRED`].
    pub fn life(&self) -> u8 {
        self.life.load(Ordering::Acquire)
    }

    /// Moves the client from `from` to `to`; whether it was at `from`
    /// (a SEQUENCE making a courtesy client active and a conflict
    /// expiring it race: one wins).
    pub(super) fn change_life(&self, from: u8, to: u8) -> bool {
        self.life
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the client holds opens or locks.
    pub fn holds_state(&self) -> bool {
        self.state.lock().holds_state()
    }

    /// Whether it holds a delegation (one not revoked).
    pub fn holds_delegations(&self) -> bool {
        self.state
            .lock()
            .stateids
            .values()
            .any(|s| matches!(s, super::stateids::StateRef::Deleg(d) if !d.revoked))
    }

    /// Renews the lease at `now` (never moving it back: a request that
    /// read the clock earlier may finish later).
    pub(super) fn renew(&self, now: Instant) {
        let mut lease = self.lease.lock();
        lease.renewed = lease.renewed.max(now);
    }

    /// A request of the client starts: until it ends, the lease cannot
    /// run out.
    pub(super) fn begin(&self) {
        self.lease.lock().running += 1;
    }

    /// A request of the client ends: its lease runs from now.
    pub(super) fn end(&self, now: Instant) {
        let mut lease = self.lease.lock();
        lease.running = lease.running.saturating_sub(1);
        lease.renewed = lease.renewed.max(now);
    }

    /// Whether the lease ran out by `now`: `lease_time` passed since the
    /// last renewal with no request running.
    pub fn expired(&self, now: Instant, lease_time: Duration) -> bool {
        let lease = self.lease.lock();
        lease.running == 0 && now.saturating_duration_since(lease.renewed) > lease_time
    }

    /// What is left of the lease at `now`: the whole of it while a
    /// request runs, `None` once it ran out.
    pub fn lease_left(&self, now: Instant, lease_time: Duration) -> Option<Duration> {
        let lease = self.lease.lock();
        if lease.running > 0 {
            return Some(lease_time);
        }
        lease_time.checked_sub(now.saturating_duration_since(lease.renewed))
    }

    /// The minor version of its last EXCHANGE_ID.
    pub fn minor(&self) -> u32 {
        self.minor.load(Ordering::Relaxed)
    }

    /// Records the minor version of an EXCHANGE_ID that gave it.
    pub(super) fn set_minor(&self, minor: u32) {
        self.minor.store(minor, Ordering::Relaxed);
    }

    /// Requests of the client running now.
    pub fn running(&self) -> u32 {
        self.lease.lock().running
    }

    /// Records RECLAIM_COMPLETE; false if it was already sent
    /// (`NFS4ERR_COMPLETE_ALREADY`).
    pub(super) fn mark_reclaim_complete(&self) -> bool {
        !self.reclaim_complete.swap(true, Ordering::AcqRel)
    }

    /// Whether RECLAIM_COMPLETE (`rca_one_fs` false) was sent.
    pub fn reclaim_completed(&self) -> bool {
        self.reclaim_complete.load(Ordering::Acquire)
    }
}

/// What `dionfs clients` (W10) shows of one client record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub clientid: u64,
    /// `co_ownerid`.
    pub owner: Vec<u8>,
    pub address: IpAddr,
    pub confirmed: bool,
    /// `eia_flags` as last sent (without `UPD_CONFIRMED_REC_A`).
    pub flags: u32,
    /// `eia_client_impl_id` as last sent.
    pub implementation: Option<NfsImplId4>,
    pub sessions: usize,
    /// The minor version of its last EXCHANGE_ID.
    pub minor: u32,
    /// What is left of its lease; `None` when it ran out.
    pub lease_left: Option<Duration>,
    /// Whether it is a courtesy client: its lease ran out, its state
    /// is kept (or it expired by a conflict, and goes soon).
    pub life: ClientLife,
    /// Its open stateids.
    pub opens: usize,
    /// Its lock stateids.
    pub locks: usize,
}

/// A client's life as `dionfs clients` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientLife {
    /// Renewing its lease (or a new one).
    Active,
    /// Its lease ran out with state held: kept until a conflict.
    Courtesy,
    /// A courtesy client a conflict expired: dropped at the next sweep.
    Expired,
}

impl ClientLife {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientLife::Active => "active",
            ClientLife::Courtesy => "courtesy",
            ClientLife::Expired => "expired",
        }
    }
}

/// Every client record and session of the server.
#[derive(Default)]
pub(super) struct ClientTable {
    records: IdMap<u64, Record>,
    owners: HashMap<Vec<u8>, Owner>,
    sessions: IdMap<SessionId4, Arc<Session>>,
    /// Client owners per address ([`OWNERS_PER_ADDRESS`]).
    per_address: HashMap<IpAddr, usize>,
    /// Bytes of the slot-cache budget the sessions reserve.
    reserved: usize,
    next_client: u32,
    next_session: u32,
}

/// The records of one client owner.
struct Owner {
    /// The address counted for it in `per_address`: that of the
    /// EXCHANGE_ID that made it.
    address: IpAddr,
    confirmed: Option<u64>,
    unconfirmed: Option<u64>,
}

/// One client record and what only the table's operations touch.
struct Record {
    client: Arc<Client>,
    confirmed: bool,
    /// `eia_flags` as last sent (without `UPD_CONFIRMED_REC_A`), and
    /// `eia_client_impl_id`: kept for `dionfs clients` (W10).
    flags: u32,
    impl_id: Option<NfsImplId4>,
    /// CREATE_SESSION's slot: the last `csa_sequence` and its result.
    create_session: CreateSessionSlot,
    sessions: Vec<SessionId4>,
    /// A minor version 0 client's SETCLIENTID: the confirm verifier and
    /// its callback (`v40.rs`).
    setclientid: Option<v40::Setclientid>,
}

/// The per-client replay slot of CREATE_SESSION (RFC 8881 section
/// 18.36.4, phase 2).
#[derive(Default)]
struct CreateSessionSlot {
    sequence: u32,
    /// The result for `sequence`; `None` before the first CREATE_SESSION
    /// (a "replay" then is `SEQ_MISORDERED`, knfsd's contrived result,
    /// pynfs CSESS4).
    reply: Option<Result<CreateSessionResOk4, Nfsstat4>>,
}

impl Record {
    /// Whether the client holds state that a new principal may not take
    /// over (case 3), and that DESTROY_CLIENTID refuses to drop: sessions,
    /// opens, locks.
    fn holds_state(&self) -> bool {
        !self.sessions.is_empty() || self.client.holds_state()
    }
}

impl ClientTable {
    /// (confirmed, unconfirmed) records.
    pub(super) fn client_counts(&self) -> (usize, usize) {
        let confirmed = self.records.values().filter(|r| r.confirmed).count();
        (confirmed, self.records.len() - confirmed)
    }

    pub(super) fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub(super) fn reserved(&self) -> usize {
        self.reserved
    }

    pub(super) fn session(&self, id: &SessionId4) -> Option<&Arc<Session>> {
        self.sessions.get(id)
    }

    /// The ids of every client record whose lease ran out by `now`, or
    /// which a conflict expired.
    pub(super) fn expired(&self, now: Instant, lease_time: Duration) -> Vec<(u64, bool)> {
        self.records
            .iter()
            .filter(|(_, r)| r.client.life() == EXPIRED || r.client.expired(now, lease_time))
            .map(|(&id, r)| (id, r.confirmed))
            .collect()
    }

    /// Every client record now.
    pub(super) fn clients_now(&self) -> Vec<Arc<Client>> {
        self.records
            .values()
            .map(|r| Arc::clone(&r.client))
            .collect()
    }

    /// Whether a client record of `owner` exists.
    pub(super) fn has_owner(&self, owner: &[u8]) -> bool {
        self.owners.contains_key(owner)
    }

    /// The sessions of client `id`, newest first (where its callbacks
    /// go).
    pub(super) fn sessions_of(&self, id: u64) -> Vec<Arc<Session>> {
        let Some(record) = self.records.get(&id) else {
            return Vec::new();
        };
        record
            .sessions
            .iter()
            .rev()
            .filter_map(|s| self.sessions.get(s).cloned())
            .collect()
    }

    /// The client of record `id`.
    pub(super) fn client(&self, id: u64) -> Option<&Arc<Client>> {
        self.records.get(&id).map(|r| &r.client)
    }

    /// Drops a client record with its sessions, giving their slot budget
    /// back; the client, whose opens and locks are the caller's to drop
    /// ([`State::forget_client`]).
    pub(super) fn remove_client(&mut self, id: u64) -> Option<Arc<Client>> {
        let record = self.records.remove(&id)?;
        for session in &record.sessions {
            self.remove_session_only(session);
        }
        let owner = &record.client.owner;
        let Some(entry) = self.owners.get_mut(owner) else {
            return Some(record.client);
        };
        if entry.confirmed == Some(id) {
            entry.confirmed = None;
        }
        if entry.unconfirmed == Some(id) {
            entry.unconfirmed = None;
        }
        if entry.confirmed.is_none() && entry.unconfirmed.is_none() {
            let address = entry.address;
            self.owners.remove(owner);
            if let Some(count) = self.per_address.get_mut(&address) {
                *count -= 1;
                if *count == 0 {
                    self.per_address.remove(&address);
                }
            }
        }
        Some(record.client)
    }

    /// Drops a session from the table and its client's list, giving its
    /// slot budget back.
    pub(super) fn remove_session(&mut self, id: &SessionId4) {
        let Some(session) = self.remove_session_only(id) else {
            return;
        };
        if let Some(record) = self.records.get_mut(&session.client.id.0) {
            record.sessions.retain(|s| s != id);
        }
    }

    fn remove_session_only(&mut self, id: &SessionId4) -> Option<Arc<Session>> {
        let session = self.sessions.remove(id)?;
        self.reserved -= session.charge();
        session.close();
        Some(session)
    }

    /// A new unconfirmed record for the owner of `args` (cases 1, 3, 4
    /// and 5), replacing the owner's unconfirmed record if it has one.
    fn new_unconfirmed(
        &mut self,
        args: &ExchangeIdArgs4,
        who: &Principal,
        peer: IpAddr,
        boot: u32,
        now: Instant,
    ) -> Result<u64, Bound> {
        let new = NewClient {
            owner: args.clientowner.ownerid.as_bytes(),
            verifier: args.clientowner.verifier,
            minor: 1,
            who,
            address: peer,
        };
        let record = |client| Record {
            client,
            confirmed: false,
            flags: args.flags & !EXCHGID4_FLAG_UPD_CONFIRMED_REC_A,
            impl_id: args.client_impl_id.clone(),
            create_session: CreateSessionSlot::default(),
            sessions: Vec::new(),
            setclientid: None,
        };
        self.new_record(&new, boot, now, record)
    }

    /// A new unconfirmed record (`record` of its client) for `new`'s
    /// owner, replacing the owner's unconfirmed record if it has one.
    fn new_record(
        &mut self,
        new: &NewClient,
        boot: u32,
        now: Instant,
        record: impl FnOnce(Arc<Client>) -> Record,
    ) -> Result<u64, Bound> {
        let (owner, peer) = (new.owner, new.address);
        if let Some(old) = self.owners.get(owner).and_then(|o| o.unconfirmed) {
            // Never confirmed: no opens or locks.
            self.remove_client(old);
        }
        if !self.owners.contains_key(owner)
            && self.per_address.get(&peer).copied().unwrap_or(0) >= OWNERS_PER_ADDRESS
        {
            return Err(Bound::OwnersPerAddress);
        }
        let id = self.next_client_id(boot);
        let client = Arc::new(Client::new(ClientId(id), new, now));
        self.records.insert(id, record(client));
        let per_address = &mut self.per_address;
        let entry = self.owners.entry(owner.to_vec()).or_insert_with(|| {
            *per_address.entry(peer).or_default() += 1;
            Owner {
                address: peer,
                confirmed: None,
                unconfirmed: None,
            }
        });
        entry.unconfirmed = Some(id);
        Ok(id)
    }

    /// A client id of this boot no record has.
    fn next_client_id(&mut self, boot: u32) -> u64 {
        loop {
            self.next_client = self.next_client.wrapping_add(1);
            let id = ClientId::new(boot, self.next_client).0;
            if !self.records.contains_key(&id) {
                return id;
            }
        }
    }

    /// Confirms `U` (CREATE_SESSION, case 5's second half): the owner's
    /// confirmed record, if another, goes with all its state (the client
    /// gone, whose opens and locks the caller drops).
    fn confirm(&mut self, id: u64) -> Option<Arc<Client>> {
        let record = self.records.get_mut(&id)?;
        record.confirmed = true;
        let owner = record.client.owner.clone();
        let entry = self.owners.get_mut(&owner)?;
        let old = entry.confirmed.replace(id);
        if entry.unconfirmed == Some(id) {
            entry.unconfirmed = None;
        }
        let old = old.filter(|&old| old != id)?;
        debug!(clientid = old, "NFSv4 client rebooted: its old record goes");
        self.remove_client(old)
    }
}

/// The security the server is to use on the back channel: the first
/// AUTH_NONE or AUTH_SYS of the client's list; an empty list is AUTH_NONE
/// (knfsd's decoder, generous); GSS alone is `NFS4ERR_ENCR_ALG_UNSUPP`,
/// as knfsd's `nfsd4_check_cb_sec` (dionfs has no RPCSEC_GSS).
pub(super) fn callback_security(
    parms: &[CallbackSecParms4],
) -> Result<CallbackSecParms4, Nfsstat4> {
    if parms.is_empty() {
        return Ok(CallbackSecParms4::AuthNone);
    }
    parms
        .iter()
        .find(|p| !matches!(p, CallbackSecParms4::RpcsecGss(_)))
        .cloned()
        .ok_or(Nfsstat4::EncrAlgUnsupp)
}

impl State {
    pub(super) fn exchange_id_at(
        &self,
        args: &ExchangeIdArgs4,
        who: &Principal,
        peer: IpAddr,
        now: Instant,
    ) -> Result<ExchangeIdResOk4, Nfsstat4> {
        if args.flags & !REQUEST_FLAGS != 0 {
            return Err(Nfsstat4::Inval);
        }
        match args.state_protect {
            StateProtect4A::None => {}
            // Without RPCSEC_GSS there is no machine credential (knfsd).
            StateProtect4A::MachCred(_) => return Err(Nfsstat4::Inval),
            StateProtect4A::Ssv(_) => return Err(Nfsstat4::EncrAlgUnsupp),
        }
        let update = args.flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0;
        let owner = args.clientowner.ownerid.as_bytes();
        let mut table = self.table.lock();
        if let Some(id) = self.confirmed_record(&mut table, owner) {
            let Some(record) = table.records.get_mut(&id) else {
                return Err(Nfsstat4::Serverfault);
            };
            let same_principal = record.client.principal == *who;
            let same_verifier = record.client.verifier == args.clientowner.verifier;
            if update {
                if !same_principal {
                    return Err(Nfsstat4::Perm); // case 9
                }
                if !same_verifier {
                    return Err(Nfsstat4::NotSame); // case 8
                }
                // Case 6: what the client says of itself is updated.
                record.flags = args.flags & !EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;
                record.impl_id = args.client_impl_id.clone();
                record.client.renew(now);
                return Ok(self.exchange_reply(id, record));
            }
            if !same_principal {
                // Case 3: another principal takes the name only if the
                // record holds nothing.
                if record.holds_state() {
                    return Err(Nfsstat4::ClidInuse);
                }
                self.forget_client(&mut table, id);
            } else if same_verifier {
                // Case 2: a retry, or another mount of the same client.
                record.client.renew(now);
                return Ok(self.exchange_reply(id, record));
            }
            // Case 5 (same principal, new verifier: the client rebooted):
            // a new record beside `C`, which goes when it is confirmed.
        } else if update {
            return Err(Nfsstat4::Noent); // case 7
        }
        // Cases 1 and 4, and 3 and 5 from above.
        let id = table
            .new_unconfirmed(args, who, peer, self.boot, now)
            .map_err(|bound| self.refusals.refuse(bound, peer))?;
        let Some(record) = table.records.get(&id) else {
            return Err(Nfsstat4::Serverfault);
        };
        Ok(self.exchange_reply(id, record))
    }

    /// The id of `owner`'s confirmed record, if it has one; one a
    /// conflict expired (a courtesy client's) is gone already.
    fn confirmed_record(&self, table: &mut ClientTable, owner: &[u8]) -> Option<u64> {
        let id = table.owners.get(owner).and_then(|o| o.confirmed)?;
        (!self.forget_if_expired(table, id)).then_some(id)
    }

    /// Drops client `id`'s record if a conflict expired it (a courtesy
    /// client's): whether it did.
    fn forget_if_expired(&self, table: &mut ClientTable, id: u64) -> bool {
        let expired = table.client(id).is_some_and(|c| c.life() == EXPIRED);
        if expired {
            self.forget_client(table, id);
        }
        expired
    }

    /// EXCHANGE_ID's answer for a record.
    fn exchange_reply(&self, id: u64, record: &Record) -> ExchangeIdResOk4 {
        let mut flags = EXCHGID4_FLAG_USE_NON_PNFS;
        if record.confirmed {
            flags |= EXCHGID4_FLAG_CONFIRMED_R;
        }
        ExchangeIdResOk4 {
            clientid: id,
            sequenceid: record.create_session.sequence.wrapping_add(1),
            flags,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Opaque4::from(&self.server_id[..]),
            },
            server_scope: Opaque4::from(&self.server_id[..]),
            server_impl_id: None,
        }
    }

    /// Every client record, by client id.
    pub fn clients(&self) -> Vec<ClientInfo> {
        let now = Instant::now();
        let lease_time = self.lease_time();
        let table = self.table.lock();
        let mut clients: Vec<ClientInfo> = table
            .records
            .iter()
            .map(|(&clientid, record)| {
                let client = &record.client;
                // (The table, then a client's state: the order
                // `Record::holds_state` takes them in.)
                let (opens, locks) = client.state.lock().counts();
                let life = match client.life() {
                    ACTIVE => ClientLife::Active,
                    COURTESY => ClientLife::Courtesy,
                    _ => ClientLife::Expired,
                };
                ClientInfo {
                    clientid,
                    owner: client.owner.clone(),
                    address: client.address,
                    confirmed: record.confirmed,
                    flags: record.flags,
                    implementation: record.impl_id.clone(),
                    sessions: record.sessions.len(),
                    minor: client.minor(),
                    // A courtesy client's lease ran out, whatever a
                    // request of it that is running says.
                    lease_left: match life {
                        ClientLife::Active => client.lease_left(now, lease_time),
                        _ => None,
                    },
                    life,
                    opens,
                    locks,
                }
            })
            .collect();
        clients.sort_by_key(|c| c.clientid);
        clients
    }

    pub(super) fn create_session_at(
        &self,
        args: &CreateSessionArgs4,
        who: &Principal,
        conn: &ConnInfo,
        now: Instant,
    ) -> Result<CreateSessionResOk4, Nfsstat4> {
        // Checks of the arguments alone come first: they neither use nor
        // cache the sequence id (pynfs CSESS29 sends TOOSMALL 10,000
        // times, then the same seqid again with good attributes).
        if args.flags & !SESSION_FLAGS != 0 {
            return Err(Nfsstat4::Inval);
        }
        let security = callback_security(&args.sec_parms)?;
        let mut fore = sessions::fore_channel(&args.fore_chan_attrs, self.config.max_record)?;
        let back = sessions::back_channel(&args.back_chan_attrs)?;

        let mut table = self.table.lock();
        self.forget_if_expired(&mut table, args.clientid);
        let Some(record) = table.records.get_mut(&args.clientid) else {
            // Unknown, or another boot's (or expired).
            return Err(Nfsstat4::StaleClientid);
        };
        // Phase 2: the sequence id.
        let slot = &mut record.create_session;
        if args.sequence == slot.sequence {
            return slot.reply.clone().unwrap_or(Err(Nfsstat4::SeqMisordered));
        }
        if args.sequence != slot.sequence.wrapping_add(1) {
            return Err(Nfsstat4::SeqMisordered);
        }
        // Phase 3: only the principal that made an unconfirmed record
        // confirms it (CSESS9); a confirmed one takes any (CSESS10).
        if !record.confirmed && record.client.principal != *who {
            *slot = CreateSessionSlot {
                sequence: args.sequence,
                reply: Some(Err(Nfsstat4::ClidInuse)),
            };
            return Err(Nfsstat4::ClidInuse);
        }
        // Bounds: DELAY is never cached, and the sequence id stays
        // unused for the client's retry.
        let address = record.client.address;
        if record.sessions.len() >= SESSIONS_PER_CLIENT {
            return Err(self.refusals.refuse(Bound::SessionsPerClient, address));
        }
        let per_slot = sessions::slot_charge(&fore);
        let free = self.config.reply_cache_bytes.saturating_sub(table.reserved);
        fore.maxrequests = sessions::slots_granted(fore.maxrequests, per_slot, free);
        if fore.maxrequests == 0 {
            return Err(self.refusals.refuse(Bound::SlotBudget, address));
        }
        let charge = per_slot * fore.maxrequests as usize;

        // Phase 4: the session.
        if let Some(old) = table.confirm(args.clientid) {
            self.release_state(&old);
        }
        let Some(record) = table.records.get(&args.clientid) else {
            return Err(Nfsstat4::Serverfault);
        };
        let client = Arc::clone(&record.client);
        let id = loop {
            table.next_session = table.next_session.wrapping_add(1);
            let id = session_id(client.id, table.next_session, self.session_key);
            if !table.sessions.contains_key(&id) {
                break id;
            }
        };
        let back_chan =
            args.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 && conn.back_channel.is_some();
        // Persistent sessions and RDMA are never granted.
        let flags = if back_chan {
            CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        };
        let session = Arc::new(Session::new(sessions::NewSession {
            id,
            client: Arc::clone(&client),
            fore: fore.clone(),
            back: back.clone(),
            charge,
            conn,
            back_chan,
            cb_program: args.cb_program,
            security,
            cached: Arc::clone(&self.cached),
        }));
        table.sessions.insert(id, session);
        table.reserved += charge;
        let reply = CreateSessionResOk4 {
            sessionid: id,
            sequence: args.sequence,
            flags,
            fore_chan_attrs: fore,
            back_chan_attrs: back,
        };
        let Some(record) = table.records.get_mut(&args.clientid) else {
            return Err(Nfsstat4::Serverfault);
        };
        record.sessions.push(id);
        record.create_session = CreateSessionSlot {
            sequence: args.sequence,
            reply: Some(Ok(reply.clone())),
        };
        client.renew(now);
        Ok(reply)
    }

    pub(super) fn destroy_clientid_now(
        &self,
        clientid: u64,
        current: Option<&sessions::SlotGuard>,
    ) -> Nfsstat4 {
        let mut table = self.table.lock();
        self.forget_if_expired(&mut table, clientid);
        let Some(record) = table.records.get(&clientid) else {
            return Nfsstat4::StaleClientid;
        };
        // A client destroying itself from one of its own sessions has
        // that session: busy too, said plainly.
        if record.holds_state() || current.is_some_and(|slot| slot.clientid() == clientid) {
            return Nfsstat4::ClientidBusy;
        }
        let owner = record.client.owner.clone();
        self.forget_client(&mut table, clientid);
        // The recovery record is written with the table free.
        drop(table);
        self.recovery.forget(&owner);
        Nfsstat4::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::Sequenced;
    use super::*;
    use dionfs_proto::nfs4::{Bitmap4, SsvSpParms4, StateProtectOps4, EXCHGID4_FLAG_USE_PNFS_MDS};

    fn eid(
        state: &State,
        owner: &str,
        verifier: u8,
        who: u32,
        flags: u32,
    ) -> Result<ExchangeIdResOk4, Nfsstat4> {
        state.exchange_id(&exchange(owner, verifier, flags), &sys(who), peer())
    }

    /// A confirmed client: EXCHANGE_ID then CREATE_SESSION.
    fn confirmed(
        state: &State,
        owner: &str,
        verifier: u8,
        who: u32,
    ) -> (ExchangeIdResOk4, SessionId4) {
        let e = eid(state, owner, verifier, who, 0).unwrap();
        let cs = state
            .create_session(&create(e.clientid, e.sequenceid), &sys(who), &conn(1))
            .unwrap();
        (e, cs.sessionid)
    }

    const UPD: u32 = EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;

    #[test]
    fn case_1_new_owner_gets_an_unconfirmed_record() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        assert_eq!(e.flags, EXCHGID4_FLAG_USE_NON_PNFS);
        assert_eq!(e.sequenceid, 1);
        assert_eq!(e.state_protect, StateProtect4R::None);
        assert_eq!(e.server_owner.major_id.as_bytes(), &state.server_id[..]);
        assert_eq!(e.server_scope.as_bytes(), &state.server_id[..]);
        assert_eq!(ClientId(e.clientid).boot(), state.boot);
        assert_eq!(state.counts().unconfirmed, 1);
        assert_eq!(state.counts().clients, 0);
    }

    #[test]
    fn case_2_same_verifier_and_principal_is_the_confirmed_record() {
        let state = state();
        let (first, _) = confirmed(&state, "a", 1, 1);
        let again = eid(&state, "a", 1, 1, 0).unwrap();
        assert_eq!(again.clientid, first.clientid);
        assert_eq!(
            again.flags,
            EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_CONFIRMED_R
        );
        // The next CREATE_SESSION's sequence id (pynfs EID5h).
        assert_eq!(again.sequenceid, first.sequenceid.wrapping_add(1));
    }

    #[test]
    fn case_3_another_principal_is_refused_while_the_client_has_sessions() {
        let state = state();
        let (first, session) = confirmed(&state, "a", 1, 1);
        assert_eq!(eid(&state, "a", 1, 2, 0), Err(Nfsstat4::ClidInuse));
        assert_eq!(eid(&state, "a", 9, 2, 0), Err(Nfsstat4::ClidInuse));
        // Without sessions it takes the name over (pynfs EID5e, EID5g).
        assert_eq!(
            state.destroy_session(&session, &conn(1), None, true),
            Nfsstat4::Ok
        );
        let taken = eid(&state, "a", 9, 2, 0).unwrap();
        assert_ne!(taken.clientid, first.clientid);
        assert_eq!(
            state.create_session(
                &create(first.clientid, first.sequenceid + 1),
                &sys(1),
                &conn(1)
            ),
            Err(Nfsstat4::StaleClientid)
        );
        assert_eq!(state.counts().clients, 0);
        assert_eq!(state.counts().unconfirmed, 1);
    }

    #[test]
    fn case_4_an_unconfirmed_record_is_replaced_with_a_new_clientid() {
        let state = state();
        // Whatever the verifier and principal (pynfs EID5a to EID5d).
        for (verifier, who) in [(1, 1), (2, 1), (2, 2), (3, 1)] {
            let before = eid(&state, "a", 1, 1, 0).unwrap();
            let after = eid(&state, "a", verifier, who, 0).unwrap();
            assert_ne!(after.clientid, before.clientid);
            assert_eq!(
                state.create_session(
                    &create(before.clientid, before.sequenceid),
                    &sys(1),
                    &conn(1)
                ),
                Err(Nfsstat4::StaleClientid)
            );
            assert_eq!(state.counts().unconfirmed, 1, "at most one U per owner");
        }
    }

    #[test]
    fn case_5_a_rebooted_client_replaces_its_record_when_confirmed() {
        let state = state();
        let (old, old_session) = confirmed(&state, "a", 1, 1);
        let new = eid(&state, "a", 2, 1, 0).unwrap();
        assert_ne!(new.clientid, old.clientid);
        assert_eq!(new.flags, EXCHGID4_FLAG_USE_NON_PNFS);
        // The old session works until the new record is confirmed (EID5f).
        drop(new_request(&state, old_session, 0, 1));
        state
            .create_session(&create(new.clientid, new.sequenceid), &sys(1), &conn(1))
            .unwrap();
        assert!(matches!(
            state.sequence(&seq(old_session, 0, 1), &conn(1), 1, None),
            Sequenced::Error(Nfsstat4::Badsession)
        ));
        assert_eq!(state.counts().clients, 1);
        assert_eq!(state.counts().sessions, 1);
    }

    #[test]
    fn case_6_update_of_the_confirmed_record() {
        let state = state();
        let (first, _) = confirmed(&state, "a", 1, 1);
        let mut args = exchange("a", 1, UPD | EXCHGID4_FLAG_SUPP_MOVED_REFER);
        let implementation = NfsImplId4 {
            domain: "example.org".into(),
            name: "a client".into(),
            date: Default::default(),
        };
        args.client_impl_id = Some(implementation.clone());
        let updated = state.exchange_id(&args, &sys(1), peer()).unwrap();
        assert_eq!(updated.clientid, first.clientid);
        assert_ne!(updated.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
        let mut clients = state.clients();
        // A lease just renewed, of the whole lease time at most.
        let left = clients[0].lease_left.take().unwrap();
        assert!(left <= state.lease_time() && left * 2 > state.lease_time());
        assert_eq!(
            clients,
            vec![ClientInfo {
                clientid: first.clientid,
                owner: b"a".to_vec(),
                address: peer(),
                confirmed: true,
                flags: EXCHGID4_FLAG_SUPP_MOVED_REFER,
                implementation: Some(implementation),
                sessions: 1,
                minor: 1,
                lease_left: None,
                life: ClientLife::Active,
                opens: 0,
                locks: 0,
            }]
        );
    }

    #[test]
    fn case_7_update_without_a_confirmed_record_is_noent() {
        let state = state();
        assert_eq!(eid(&state, "a", 1, 1, UPD), Err(Nfsstat4::Noent));
        eid(&state, "a", 1, 1, 0).unwrap();
        // An unconfirmed record is not updated (pynfs EID6a to EID6d).
        assert_eq!(eid(&state, "a", 1, 1, UPD), Err(Nfsstat4::Noent));
        assert_eq!(eid(&state, "a", 2, 2, UPD), Err(Nfsstat4::Noent));
    }

    #[test]
    fn case_8_update_with_another_verifier_is_not_same() {
        let state = state();
        confirmed(&state, "a", 1, 1);
        assert_eq!(eid(&state, "a", 2, 1, UPD), Err(Nfsstat4::NotSame));
    }

    #[test]
    fn case_9_update_by_another_principal_is_perm() {
        let state = state();
        confirmed(&state, "a", 1, 1);
        assert_eq!(eid(&state, "a", 1, 2, UPD), Err(Nfsstat4::Perm));
        assert_eq!(eid(&state, "a", 2, 2, UPD), Err(Nfsstat4::Perm));
    }

    #[test]
    fn undefined_and_server_only_flags_are_inval() {
        let state = state();
        // EID4: 0x4 is not a flag a client may send.
        assert_eq!(eid(&state, "a", 1, 1, 0x4), Err(Nfsstat4::Inval));
        // EID7: CONFIRMED_R is the server's.
        assert_eq!(
            eid(
                &state,
                "a",
                1,
                1,
                EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_CONFIRMED_R
            ),
            Err(Nfsstat4::Inval)
        );
        // The pNFS bits a client may send; we answer USE_NON_PNFS.
        let e = eid(&state, "a", 1, 1, EXCHGID4_FLAG_USE_PNFS_MDS).unwrap();
        assert_eq!(e.flags, EXCHGID4_FLAG_USE_NON_PNFS);
        assert_eq!(state.counts().unconfirmed, 1);
    }

    #[test]
    fn state_protection_is_sp4_none_only() {
        let state = state();
        let ops = StateProtectOps4 {
            must_enforce: Bitmap4::default(),
            must_allow: Bitmap4::default(),
        };
        let mut args = exchange("a", 1, 0);
        args.state_protect = StateProtect4A::MachCred(ops.clone());
        assert_eq!(
            state.exchange_id(&args, &sys(1), peer()),
            Err(Nfsstat4::Inval)
        );
        args.state_protect = StateProtect4A::Ssv(SsvSpParms4 {
            ops,
            hash_algs: vec![],
            encr_algs: vec![],
            window: 1,
            num_gss_handles: 1,
        });
        assert_eq!(
            state.exchange_id(&args, &sys(1), peer()),
            Err(Nfsstat4::EncrAlgUnsupp)
        );
        assert_eq!(state.counts().unconfirmed, 0);
    }

    #[test]
    fn another_boots_clientid_is_stale() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        let other_boot = ClientId::new(state.boot.wrapping_add(1), ClientId(e.clientid).counter());
        assert_eq!(
            state.create_session(&create(other_boot.0, e.sequenceid), &sys(1), &conn(1)),
            Err(Nfsstat4::StaleClientid)
        );
        assert_eq!(
            state.destroy_clientid(other_boot.0, None),
            Nfsstat4::StaleClientid
        );
    }

    #[test]
    fn owners_per_address_are_bounded() {
        let state = state();
        for n in 0..OWNERS_PER_ADDRESS {
            eid(&state, &format!("owner-{n}"), 1, 1, 0).unwrap();
        }
        assert_eq!(eid(&state, "one too many", 1, 1, 0), Err(Nfsstat4::Delay));
        assert_eq!(state.counts().refused, 1);
        // A known owner still gets its new record, and another address
        // its own owners.
        eid(&state, "owner-0", 2, 1, 0).unwrap();
        state
            .exchange_id(
                &exchange("elsewhere", 1, 0),
                &sys(1),
                IpAddr::from([192, 0, 2, 99]),
            )
            .unwrap();
    }

    #[test]
    fn create_session_replays_its_result_errors_included() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        // CSESS4: before any CREATE_SESSION, the seqid before is misordered.
        assert_eq!(
            state.create_session(
                &create(e.clientid, e.sequenceid.wrapping_sub(1)),
                &sys(1),
                &conn(1)
            ),
            Err(Nfsstat4::SeqMisordered)
        );
        // CSESS6: the wrong principal's CLID_INUSE is replayed...
        let args = create(e.clientid, e.sequenceid);
        assert_eq!(
            state.create_session(&args, &sys(2), &conn(1)),
            Err(Nfsstat4::ClidInuse)
        );
        assert_eq!(
            state.create_session(&args, &sys(1), &conn(1)),
            Err(Nfsstat4::ClidInuse)
        );
        // ...and the next seqid is a new request.
        let next = create(e.clientid, e.sequenceid + 1);
        let first = state.create_session(&next, &sys(1), &conn(1)).unwrap();
        assert_eq!(first.sequence, next.sequence, "CSESS24");
        // CSESS5: a success is replayed, same session.
        assert_eq!(state.create_session(&next, &sys(1), &conn(1)), Ok(first));
        assert_eq!(state.counts().sessions, 1);
        // CSESS7, CSESS8: two ahead, or behind, is misordered.
        for sequence in [e.sequenceid + 3, e.sequenceid] {
            assert_eq!(
                state.create_session(&create(e.clientid, sequence), &sys(1), &conn(1)),
                Err(Nfsstat4::SeqMisordered)
            );
        }
    }

    #[test]
    fn a_confirmed_client_takes_any_principal() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        // CSESS9.
        assert_eq!(
            state.create_session(&create(e.clientid, e.sequenceid), &sys(2), &conn(1)),
            Err(Nfsstat4::ClidInuse)
        );
        state
            .create_session(&create(e.clientid, e.sequenceid + 1), &sys(1), &conn(1))
            .unwrap();
        // CSESS10.
        state
            .create_session(&create(e.clientid, e.sequenceid + 2), &sys(2), &conn(1))
            .unwrap();
        assert_eq!(state.counts().sessions, 2);
    }

    #[test]
    fn create_session_argument_errors_leave_the_seqid_unused() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        // CSESS15: unknown flags.
        let mut args = create(e.clientid, e.sequenceid);
        args.flags = 0xf;
        assert_eq!(
            state.create_session(&args, &sys(1), &conn(1)),
            Err(Nfsstat4::Inval)
        );
        // CSESS29: a back channel too small, many times.
        let mut args = create(e.clientid, e.sequenceid);
        args.back_chan_attrs.maxrequestsize = 10;
        for _ in 0..3 {
            assert_eq!(
                state.create_session(&args, &sys(1), &conn(1)),
                Err(Nfsstat4::Toosmall)
            );
        }
        // GSS alone for the back channel.
        let mut args = create(e.clientid, e.sequenceid);
        args.sec_parms = vec![gss()];
        assert_eq!(
            state.create_session(&args, &sys(1), &conn(1)),
            Err(Nfsstat4::EncrAlgUnsupp)
        );
        // The same seqid still creates the session.
        state
            .create_session(&create(e.clientid, e.sequenceid), &sys(1), &conn(1))
            .unwrap();
    }

    #[test]
    fn create_session_grants_what_the_design_says() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        let mut args = create(e.clientid, e.sequenceid);
        args.flags |= CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_RDMA;
        args.fore_chan_attrs = dionfs_proto::nfs4::ChannelAttrs4 {
            headerpadsize: 100,
            maxrequestsize: u32::MAX,
            maxresponsesize: u32::MAX,
            maxresponsesize_cached: u32::MAX,
            maxoperations: 1000,
            maxrequests: 2049, // CSESS22
            rdma_ird: Some(57),
        };
        args.back_chan_attrs.maxrequests = 16;
        // A mix of flavors, GSS among them (CSESS16).
        args.sec_parms = vec![gss(), CallbackSecParms4::AuthSys(Default::default())];
        let cs = state.create_session(&args, &sys(1), &conn(1)).unwrap();
        // No back channel on a unit test's connection; never PERSIST or RDMA.
        assert_eq!(cs.flags, 0);
        let fore = cs.fore_chan_attrs;
        assert_eq!(fore.headerpadsize, 0);
        assert_eq!(fore.maxrequestsize, (1 << 20) + 8192);
        assert_eq!(fore.maxresponsesize, (1 << 20) + 8192);
        assert_eq!(fore.maxresponsesize_cached, 4096);
        assert_eq!(fore.maxoperations, 64);
        assert_eq!(fore.maxrequests, 64);
        assert_eq!(fore.rdma_ird, None);
        let back = cs.back_chan_attrs;
        assert_eq!(back.maxrequests, 4);
        assert_eq!(back.maxresponsesize_cached, 0);
        assert_eq!(back.maxrequestsize, 8192);
        assert_eq!(state.counts().slot_cache_reserved, 64 * 4096);
    }

    #[test]
    fn sessions_per_client_are_bounded() {
        let state = state();
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        let mut sequence = e.sequenceid;
        for _ in 0..SESSIONS_PER_CLIENT {
            state
                .create_session(&create(e.clientid, sequence), &sys(1), &conn(1))
                .unwrap();
            sequence += 1;
        }
        assert_eq!(
            state.create_session(&create(e.clientid, sequence), &sys(1), &conn(1)),
            Err(Nfsstat4::Delay)
        );
        // DELAY is not cached: the retry with the same seqid is new.
        assert_eq!(
            state.create_session(&create(e.clientid, sequence), &sys(1), &conn(1)),
            Err(Nfsstat4::Delay)
        );
        assert_eq!(state.counts().refused, 2);
    }

    #[test]
    fn destroy_clientid() {
        let state = state();
        // DESCID3: unknown.
        assert_eq!(state.destroy_clientid(12345, None), Nfsstat4::StaleClientid);
        // DESCID1: an unconfirmed record.
        let e = eid(&state, "a", 1, 1, 0).unwrap();
        assert_eq!(state.destroy_clientid(e.clientid, None), Nfsstat4::Ok);
        // DESCID8: twice.
        assert_eq!(
            state.destroy_clientid(e.clientid, None),
            Nfsstat4::StaleClientid
        );
        // DESCID5: with a session.
        let (e, session) = confirmed(&state, "b", 1, 1);
        assert_eq!(
            state.destroy_clientid(e.clientid, None),
            Nfsstat4::ClientidBusy
        );
        // DESCID6: from one of its own sessions.
        let guard = new_request(&state, session, 0, 1);
        assert_eq!(
            state.destroy_clientid(e.clientid, Some(&guard)),
            Nfsstat4::ClientidBusy
        );
        guard.complete(None);
        assert_eq!(
            state.destroy_session(&session, &conn(1), None, true),
            Nfsstat4::Ok
        );
        assert_eq!(state.destroy_clientid(e.clientid, None), Nfsstat4::Ok);
        assert_eq!(state.counts(), Default::default());
        // The owner is free again.
        assert_eq!(
            eid(&state, "b", 1, 1, 0).unwrap().flags,
            EXCHGID4_FLAG_USE_NON_PNFS
        );
    }

    #[test]
    fn opens_keep_a_client_busy_and_its_record_taken() {
        let (state, _released) = locking_state();
        let (e, session) = confirmed(&state, "a", 1, 1);
        let client = Arc::clone(state.table.lock().client(e.clientid).unwrap());
        let open = state.open(&client, b"o", b"f", 1, 0).unwrap();
        assert_eq!(
            state.destroy_session(&session, &conn(1), None, true),
            Nfsstat4::Ok
        );
        // No sessions, but an open: busy, and not another principal's.
        assert_eq!(
            state.destroy_clientid(e.clientid, None),
            Nfsstat4::ClientidBusy
        );
        assert_eq!(eid(&state, "a", 1, 2, 0), Err(Nfsstat4::ClidInuse));
        state.close(&client, &open, b"f").unwrap();
        assert_eq!(state.destroy_clientid(e.clientid, None), Nfsstat4::Ok);
    }

    #[test]
    fn a_rebooted_clients_opens_go_when_its_new_record_is_confirmed() {
        let (state, _released) = locking_state();
        let (old, _) = confirmed(&state, "a", 1, 1);
        let client = Arc::clone(state.table.lock().client(old.clientid).unwrap());
        // Reading, denying writers.
        state.open(&client, b"o", b"f", 1, 2).unwrap();
        let (b, _) = confirmed(&state, "b", 1, 1);
        let other = Arc::clone(state.table.lock().client(b.clientid).unwrap());
        assert_eq!(
            state.open(&other, b"o", b"f", 2, 0),
            Err(Nfsstat4::ShareDenied)
        );
        confirmed(&state, "a", 2, 1);
        assert!(!client.holds_state());
        state.open(&other, b"o", b"f", 2, 0).unwrap();
    }

    #[test]
    fn principals_compare_groups_in_any_order() {
        let a = dionfs_rpc::AuthSys {
            stamp: 1,
            machine_name: b"a".to_vec(),
            uid: 5,
            gid: 6,
            gids: vec![3, 1, 2],
        };
        let b = dionfs_rpc::AuthSys {
            stamp: 2,
            machine_name: b"b".to_vec(),
            gids: vec![1, 2, 3],
            ..a.clone()
        };
        let c = dionfs_rpc::AuthSys {
            gids: vec![1, 2],
            ..a.clone()
        };
        let of =
            |sys: &dionfs_rpc::AuthSys| Principal::of(&dionfs_rpc::Credential::Sys(sys.clone()));
        assert_eq!(of(&a), of(&b));
        assert_ne!(of(&a), of(&c));
        assert_ne!(of(&a), Principal::of(&dionfs_rpc::Credential::None));
    }
}
