//! All NFSv4.1 client and session state of one server (design section
//! 4): who the clients are (EXCHANGE_ID, `clients.rs`), their sessions and
//! the slots that give each request exactly-once semantics (SEQUENCE,
//! `sessions.rs`), the ids the server hands out (`ids.rs`), the bounds on
//! all of it (`limits.rs`) and lease expiry (`laundromat.rs`).
//!
//! Locks, taken in this order and never the other way: the client table
//! (one mutex: clients by id and by owner, sessions by id, the slot
//! budget; held for lookups and for the rare operations that change the
//! table), then one session's slot table, then the leaf locks (a
//! session's bound connections, a client's lease), each held for a few
//! lines with nothing else taken inside. Opens and locks (design section
//! 5): a client's opens and locks (`Client::state`, taken once per op)
//! come after the client table and the slot table, then the courtesy
//! clients, then the server's lock tables (`Locks`: table, then shares).
//! The expirer the lock tables call on a conflict with a courtesy client
//! runs with none of the lock tables' mutexes held and takes only the
//! courtesy clients and the lock tables. Nothing here does I/O but
//! [`State::new`] and the lock tables' descriptions (opened and closed
//! by LOCK, CLOSE and expiry).

pub mod clients;
pub mod delegations;
pub mod ids;
pub mod laundromat;
pub mod limits;
pub mod lockowners;
pub mod opens;
pub mod recovery;
pub mod seqids;
pub mod sessions;
pub mod stateids;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_core::delegations::Delegations;
use dionfs_core::grace::Grace;
use dionfs_proto::nfs4::{
    BackchannelCtlArgs4, BindConnToSessionArgs4, CreateSessionArgs4, CreateSessionResOk4,
    ExchangeIdArgs4, ExchangeIdResOk4, Nfsstat4, ReclaimCompleteArgs4, SequenceArgs4, SessionId4,
    SetclientidArgs4, SetclientidConfirmArgs4, SetclientidRes4,
};
use dionfs_rpc::Credential;
use dionfs_transport::ConnInfo;
use parking_lot::Mutex;

pub use clients::{Client, ClientInfo, ClientLife};
pub use lockowners::{lock_span, Denied, LockError, Locker};
pub use seqids::{LastReply, OwnerStep, Refused};
pub use sessions::{Session, SlotGuard};
pub use stateids::{resolve_current, Checked, Use};

use crate::locks::{Client as LockClient, ClientId as LockClientId, Locks};
use clients::{ClientTable, COURTESY, EXPIRED};
use limits::{Bound, Refusals};

/// Who sent a call, as knfsd's `same_creds` compares it: the flavor, and
/// for AUTH_SYS the uid, gid and groups (in any order). A client record
/// belongs to the principal that made it (RFC 8881 section 2.4.1).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Principal {
    /// AUTH_NONE.
    None,
    /// AUTH_SYS; `gids` sorted, so that the order a client lists its
    /// groups in does not matter.
    Sys { uid: u32, gid: u32, gids: Vec<u32> },
    /// Another flavor (the dispatcher refuses those before they come
    /// here).
    Other(u32),
}

impl Principal {
    /// The principal of a call's credential.
    pub fn of(cred: &Credential) -> Principal {
        match cred {
            Credential::None => Principal::None,
            Credential::Sys(sys) => {
                let mut gids = sys.gids.clone();
                gids.sort_unstable();
                Principal::Sys {
                    uid: sys.uid,
                    gid: sys.gid,
                    gids,
                }
            }
            Credential::Unsupported(flavor) => Principal::Other(*flavor),
        }
    }
}

/// The settings the state runs by (from the server's configuration).
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// How long a client keeps its state without renewing it
    /// (`fattr4_lease_time`).
    pub lease_time: Duration,
    /// Bytes every session's slots together may cache replies in
    /// (`nfs4_reply_cache_mib`): each session reserves slots ×
    /// `ca_maxresponsesize_cached` of it.
    pub reply_cache_bytes: usize,
    /// The largest record a connection takes (`ConnLimits::max_record`):
    /// the most a fore channel's `ca_maxrequestsize` and
    /// `ca_maxresponsesize` are granted.
    pub max_record: u32,
    /// The state directory, for the server's identity; `None`: a new
    /// identity each start.
    pub state_dir: Option<PathBuf>,
}

/// All NFSv4.1 client and session state of one server.
pub struct State {
    config: StateConfig,
    /// This start's boot verifier: the high half of every client id.
    boot: u32,
    /// Mixed into session ids so that they cannot be guessed.
    session_key: u64,
    /// `eir_server_owner.so_major_id` and `eir_server_scope`.
    server_id: [u8; ids::SERVER_ID_LEN],
    table: Mutex<ClientTable>,
    /// Bytes of replies the slots of every session hold now.
    cached: Arc<AtomicUsize>,
    refusals: Refusals,
    /// The server's lock tables, shared with NLM: opens' share
    /// reservations and byte-range locks.
    locks: Arc<Locks>,
    /// The courtesy clients by id, with when each became one: what the
    /// lock tables' expirer may expire (design section 4.6).
    courtesy: Mutex<HashMap<u64, Courtesy>>,
    /// The recovery record and the grace period (design section 4.7).
    recovery: recovery::Recovery,
    /// The server's index of delegations, which every program checks
    /// (`delegations.rs`); off unless the server's is given.
    pub delegations: Arc<Delegations>,
    /// Woken when a holder answers CB_GETATTR (or fails to): the
    /// GETATTRs waiting for its answer (`delegations.rs`).
    getattr_answers: (Mutex<()>, parking_lot::Condvar),
}

/// A grace period never held, for a state without the server's.
fn no_grace() -> Arc<Grace> {
    Arc::new(Grace::new(Duration::ZERO))
}

/// A courtesy client, since when.
struct Courtesy {
    client: Arc<Client>,
    since: Instant,
}

/// What SEQUENCE, run as a COMPOUND is received, decided.
#[derive(Debug)]
pub enum Sequenced {
    /// A new request: the slot is held until the guard completes or
    /// drops.
    New(SlotGuard),
    /// A retransmission of a request whose reply is cached: these are the
    /// encoded COMPOUND4res bytes (everything after the RPC accept
    /// header), to send under a fresh RPC reply header with the retry's
    /// xid; the record's remaining bytes are skipped.
    Replay(Arc<[u8]>),
    /// SEQUENCE fails with this status (BADSESSION, BADSLOT,
    /// SEQ_MISORDERED, DELAY, RETRY_UNCACHED_REP, TOO_MANY_OPS,
    /// REQ_TOO_BIG): the reply is `[SEQUENCE: status]`.
    Error(Nfsstat4),
}

/// How much state there is, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateCounts {
    /// Confirmed clients.
    pub clients: usize,
    /// Client records not confirmed yet.
    pub unconfirmed: usize,
    pub sessions: usize,
    /// Bytes of the slot-cache budget the sessions reserve.
    pub slot_cache_reserved: usize,
    /// Bytes of replies the slots cache now.
    pub slot_cache_used: usize,
    /// Requests refused at a bound (answered `NFS4ERR_DELAY`).
    pub refused: u64,
    /// Courtesy clients (lease expired, state kept).
    pub courtesy: usize,
    /// Open stateids of every client.
    pub opens: usize,
    /// Lock stateids of every client.
    pub locks: usize,
    /// Delegations held (revoked ones not counted).
    pub delegations: usize,
}

impl State {
    /// The state of a server starting now: its boot verifier, and its
    /// identity read from (or made in) `STATE_DIR/nfs4/server-id`. Its
    /// opens and locks go in lock tables of its own, which nobody else
    /// sees and which expire no courtesy client: a server uses
    /// [`State::with_locks`].
    pub fn new(config: StateConfig) -> std::io::Result<State> {
        let (locks, _released) = Locks::new();
        Self::made(config, Arc::new(locks), no_grace())
    }

    /// The state of a server starting now, its opens and locks in the
    /// server's lock tables `locks` (shared with NLM), on which it sets
    /// the expirer of courtesy clients (design section 5.3). It holds no
    /// grace period: a server uses [`State::with_grace`].
    pub fn with_locks(config: StateConfig, locks: Arc<Locks>) -> std::io::Result<Arc<State>> {
        Self::with_grace(config, locks, no_grace())
    }

    /// [`State::with_locks`], and the server's grace period `grace`
    /// (shared with NLM), held if the recovery record under the state
    /// directory names clients of the previous run (design section 4.7).
    pub fn with_grace(
        config: StateConfig,
        locks: Arc<Locks>,
        grace: Arc<Grace>,
    ) -> std::io::Result<Arc<State>> {
        let off = Arc::new(Delegations::new(false));
        Self::with_delegations(config, locks, grace, off)
    }

    /// [`State::with_grace`], granting delegations in the server's index
    /// `delegations` (when it is on).
    pub fn with_delegations(
        config: StateConfig,
        locks: Arc<Locks>,
        grace: Arc<Grace>,
        delegations: Arc<Delegations>,
    ) -> std::io::Result<Arc<State>> {
        let mut made = Self::made(config, Arc::clone(&locks), grace)?;
        made.delegations = delegations;
        let state = Arc::new(made);
        let weak = Arc::downgrade(&state);
        let expirer: crate::locks::Expirer = Arc::new(move |client: &LockClient| match client {
            LockClient::V4(id) => weak
                .upgrade()
                .is_some_and(|state| state.expire_courtesy(id.0)),
            LockClient::Nlm(_) => false,
        });
        if !locks.set_expirer(expirer) {
            tracing::warn!(
                "the lock tables already have an expirer: NFSv4 courtesy clients \
                will keep their locks against conflicts until they go"
            );
        }
        Ok(state)
    }

    fn made(config: StateConfig, locks: Arc<Locks>, grace: Arc<Grace>) -> std::io::Result<State> {
        let server_id = ids::server_identity(config.state_dir.as_deref())?;
        let recovery = recovery::Recovery::open(config.state_dir.as_deref(), grace)?;
        let boot = u32::from_ne_bytes(ids::random_bytes()?);
        let session_key = u64::from_ne_bytes(ids::random_bytes()?);
        Ok(State {
            config,
            boot,
            session_key,
            server_id,
            table: Mutex::new(ClientTable::default()),
            cached: Arc::default(),
            refusals: Refusals::default(),
            locks,
            courtesy: Mutex::default(),
            recovery,
            delegations: Arc::new(Delegations::new(false)),
            getattr_answers: Default::default(),
        })
    }

    /// Expires the courtesy client `id` whose lock or reservation is in
    /// another's way (the lock tables' expirer): its locks and
    /// reservations go now, its record at the next sweep; its sessions
    /// are unknown from now. Whether it was a courtesy client (a SEQUENCE
    /// making it active again wins or loses the race cleanly).
    fn expire_courtesy(&self, id: u64) -> bool {
        let expired = {
            let mut courtesy = self.courtesy.lock();
            let Some(entry) = courtesy.get(&id) else {
                return false;
            };
            if !entry.client.change_life(COURTESY, EXPIRED) {
                return false;
            }
            courtesy.remove(&id)
        };
        tracing::info!(
            clientid = id,
            "NFSv4 courtesy client expired: its state was in another client's way"
        );
        self.locks
            .drop_clients(|c| *c == LockClient::V4(LockClientId(id)));
        self.delegations.remove_client(id);
        if let Some(expired) = expired {
            self.recovery.forget(&expired.client.owner);
        }
        true
    }

    /// Drops client record `id` (its sessions) and its opens and locks.
    fn forget_client(&self, table: &mut ClientTable, id: u64) {
        if let Some(client) = table.remove_client(id) {
            self.release_state(&client);
        }
    }

    /// Drops `client`'s opens and locks, here and in the lock tables
    /// (NLM is told of the files), as a client expires or goes.
    fn release_state(&self, client: &Client) {
        self.courtesy.lock().remove(&client.id.0);
        let held = {
            let mut state = client.state.lock();
            let held = state.holds_state();
            state.clear();
            held
        };
        if held {
            self.locks
                .drop_clients(|c| *c == LockClient::V4(LockClientId(client.id.0)));
            self.delegations.remove_client(client.id.0);
        }
    }

    /// The lease every client is given.
    pub fn lease_time(&self) -> Duration {
        self.config.lease_time
    }

    /// EXCHANGE_ID (RFC 8881 section 18.35) from `peer`.
    /// SETCLIENTID (minor version 0): `clients/v40.rs`.
    pub fn setclientid(
        &self,
        args: &SetclientidArgs4,
        who: &Principal,
        peer: std::net::IpAddr,
    ) -> SetclientidRes4 {
        self.setclientid_at(args, who, peer, Instant::now())
    }

    /// SETCLIENTID_CONFIRM (minor version 0).
    pub fn setclientid_confirm(&self, args: &SetclientidConfirmArgs4, who: &Principal) -> Nfsstat4 {
        self.setclientid_confirm_at(args, who, Instant::now())
    }

    /// RENEW (minor version 0).
    pub fn renew(&self, clientid: u64) -> Nfsstat4 {
        self.renew_at(clientid, Instant::now())
    }

    pub fn exchange_id(
        &self,
        args: &ExchangeIdArgs4,
        who: &Principal,
        peer: std::net::IpAddr,
    ) -> Result<ExchangeIdResOk4, Nfsstat4> {
        self.exchange_id_at(args, who, peer, Instant::now())
    }

    /// Records that the EXCHANGE_ID which gave `clientid` came in a
    /// COMPOUND of minor version `minor` (`dionfs clients`).
    pub fn exchanged_in_minor(&self, clientid: u64, minor: u32) {
        if let Some(client) = self.table.lock().client(clientid) {
            client.set_minor(minor);
        }
    }

    /// CREATE_SESSION (RFC 8881 section 18.36) on connection `conn`.
    pub fn create_session(
        &self,
        args: &CreateSessionArgs4,
        who: &Principal,
        conn: &ConnInfo,
    ) -> Result<CreateSessionResOk4, Nfsstat4> {
        self.create_session_at(args, who, conn, Instant::now())
    }

    /// SEQUENCE (RFC 8881 section 18.46), run as the COMPOUND is
    /// received. `numops` and `request_len` (the record's length when
    /// known) are checked against the session's channel attributes
    /// (TOO_MANY_OPS, REQ_TOO_BIG) before the slot is taken.
    pub fn sequence(
        &self,
        args: &SequenceArgs4,
        conn: &ConnInfo,
        numops: u32,
        request_len: Option<u64>,
    ) -> Sequenced {
        self.sequence_at(args, conn, numops, request_len, Instant::now)
    }

    /// DESTROY_SESSION (RFC 8881 section 18.37) on `conn`; `current` is
    /// the COMPOUND's SEQUENCE, if it has one, and `last_op` whether this
    /// is its last operation.
    pub fn destroy_session(
        &self,
        id: &SessionId4,
        conn: &ConnInfo,
        current: Option<&SlotGuard>,
        last_op: bool,
    ) -> Nfsstat4 {
        self.destroy_session_now(id, conn, current, last_op)
    }

    /// DESTROY_CLIENTID (RFC 8881 section 18.50); `current` is the
    /// COMPOUND's SEQUENCE, if it has one.
    pub fn destroy_clientid(&self, clientid: u64, current: Option<&SlotGuard>) -> Nfsstat4 {
        self.destroy_clientid_now(clientid, current)
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 section 18.34) of `conn`.
    pub fn bind_conn(
        &self,
        args: &BindConnToSessionArgs4,
        conn: &ConnInfo,
    ) -> Result<dionfs_proto::nfs4::BindConnToSessionResOk4, Nfsstat4> {
        self.bind_conn_at(args, conn, Instant::now())
    }

    /// BACKCHANNEL_CTL (RFC 8881 section 18.33) in the session of `slot`.
    pub fn backchannel_ctl(&self, slot: &SlotGuard, args: &BackchannelCtlArgs4) -> Nfsstat4 {
        slot.session()
            .set_callback(args.cb_program, &args.sec_parms)
    }

    /// RECLAIM_COMPLETE (RFC 8881 section 18.51) of the client of `slot`.
    /// With `rca_one_fs` the caller has checked there is a current
    /// filehandle (`NFS4ERR_NOFILEHANDLE`); the file system is not
    /// reclaiming anything then. Otherwise the client is recorded in the
    /// recovery record, durably, before the reply (as knfsd does).
    pub fn reclaim_complete(&self, slot: &SlotGuard, args: &ReclaimCompleteArgs4) -> Nfsstat4 {
        if args.one_fs {
            return Nfsstat4::Ok;
        }
        let client = slot.client();
        if !client.mark_reclaim_complete() {
            return Nfsstat4::CompleteAlready;
        }
        self.record(client);
        Nfsstat4::Ok
    }

    /// Whether `client` may be granted an OPEN or a LOCK now; `reclaim`
    /// for OPEN's CLAIM_PREVIOUS and LOCK's `reclaim` (RFC 8881 section
    /// 9.11, design section 4.7). In the grace period a reclaim is
    /// granted only to a client of the previous run (`NO_GRACE` to
    /// another) that has not sent RECLAIM_COMPLETE (`RECLAIM_BAD`), and
    /// anything else is `GRACE`; after it a reclaim is `NO_GRACE`. When
    /// the answer is yes the client is in the recovery record, durably,
    /// before this returns (and so before the reply).
    pub fn grace_check(&self, client: &Client, reclaim: bool) -> Result<(), Nfsstat4> {
        let claim = if reclaim {
            recovery::Claim::Reclaim
        } else {
            recovery::Claim::New
        };
        self.recovery
            .check(&client.owner, client.reclaim_completed(), claim)?;
        self.record(client);
        Ok(())
    }

    /// Whether the server's grace period is on: REMOVE and RENAME answer
    /// `GRACE` then (as knfsd's), so that no file a client may reclaim
    /// goes away under it.
    pub fn in_grace(&self) -> bool {
        self.recovery.in_grace()
    }

    /// Puts `client` in the recovery record, durably, unless it is there.
    fn record(&self, client: &Client) {
        if client.recorded.load(Ordering::Acquire) {
            return;
        }
        let present = |owner: &[u8]| self.table.lock().has_owner(owner);
        if self.recovery.record(&client.owner, client.address, present) {
            client.recorded.store(true, Ordering::Release);
        }
    }

    /// One laundromat sweep at `now`: see [`laundromat::sweep`].
    pub fn sweep(&self, now: Instant) {
        laundromat::sweep(self, now);
        if self.delegations.count() > 0 {
            let clients = self.table.lock().clients_now();
            self.revoke_overdue(&clients, now);
        }
        self.delegations.sweep();
        self.recovery
            .sweep(|owner| self.table.lock().has_owner(owner));
    }

    /// Counts for metrics and tests.
    pub fn counts(&self) -> StateCounts {
        let table = self.table.lock();
        let (clients, unconfirmed) = table.client_counts();
        // (The table, then each client's state: `clients`' order.)
        let (opens, locks) = table
            .clients_now()
            .iter()
            .map(|c| c.state.lock().counts())
            .fold((0, 0), |(o, l), (a, b)| (o + a, l + b));
        StateCounts {
            opens,
            locks,
            clients,
            unconfirmed,
            sessions: table.session_count(),
            slot_cache_reserved: table.reserved(),
            slot_cache_used: self.cached.load(Ordering::Relaxed),
            refused: Bound::ALL
                .into_iter()
                .map(|bound| self.refusals.count(bound))
                .sum(),
            courtesy: self.courtesy.lock().len(),
            delegations: self.delegations.count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<State>();
        shared::<SlotGuard>();
        shared::<Sequenced>();
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! What the state's tests share: a state, connections, principals and
    //! the arguments clients send.

    use std::net::{IpAddr, SocketAddr};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use dionfs_proto::nfs4::{
        CallbackSecParms4, ChannelAttrs4, ClientOwner4, CreateSessionArgs4, ExchangeIdArgs4,
        GssCbHandles4, Opaque4, SequenceArgs4, SessionId4, StateProtect4A, Verifier4,
        CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    };
    use dionfs_rpc::{CallHeader, RecordError, RecordReader};
    use dionfs_transport::{
        next_conn_id, serve_connection, CallStream, ConnInfo, ConnLimits, Place, Received, Reply,
        Service,
    };

    use super::{Principal, Sequenced, SlotGuard, State, StateConfig};

    pub const LEASE: Duration = Duration::from_secs(90);

    /// A state with a 90 s lease, `budget` bytes of slot cache and no
    /// state directory.
    pub fn state_with_budget(budget: usize) -> State {
        State::new(StateConfig {
            lease_time: LEASE,
            reply_cache_bytes: budget,
            max_record: (1 << 20) + 8192,
            state_dir: None,
        })
        .unwrap()
    }

    pub fn state() -> State {
        state_with_budget(64 << 20)
    }

    pub fn peer() -> IpAddr {
        IpAddr::from([192, 0, 2, 7])
    }

    /// A connection with no back channel (as a unit test has none).
    pub fn conn(id: u64) -> ConnInfo {
        ConnInfo {
            id,
            peer: SocketAddr::new(peer(), 800),
            local: SocketAddr::from(([192, 0, 2, 1], 2049)),
            datagram: false,
            names: Default::default(),
            tls: Default::default(),
            back_channel: None,
            client_tag: Default::default(),
        }
    }

    /// RPCSEC_GSS handles for the back channel, which dionfs refuses.
    pub fn gss() -> CallbackSecParms4 {
        CallbackSecParms4::RpcsecGss(GssCbHandles4 {
            service: 1,
            handle_from_server: Default::default(),
            handle_from_client: Default::default(),
        })
    }

    pub fn sys(uid: u32) -> Principal {
        Principal::Sys {
            uid,
            gid: uid,
            gids: vec![],
        }
    }

    pub fn exchange(owner: &str, verifier: u8, flags: u32) -> ExchangeIdArgs4 {
        ExchangeIdArgs4 {
            clientowner: ClientOwner4 {
                verifier: Verifier4([verifier; 8]),
                ownerid: Opaque4::from(owner),
            },
            flags,
            state_protect: StateProtect4A::None,
            client_impl_id: None,
        }
    }

    /// Channel attributes as pynfs asks them: 8 KiB sizes, 128
    /// operations, `slots` slots.
    pub fn attrs(slots: u32) -> ChannelAttrs4 {
        ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: 8192,
            maxresponsesize: 8192,
            maxresponsesize_cached: 8192,
            maxoperations: 128,
            maxrequests: slots,
            rdma_ird: None,
        }
    }

    pub fn create(clientid: u64, sequence: u32) -> CreateSessionArgs4 {
        CreateSessionArgs4 {
            clientid,
            sequence,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: attrs(8),
            back_chan_attrs: attrs(8),
            cb_program: 0x4000_0000,
            sec_parms: vec![CallbackSecParms4::AuthNone],
        }
    }

    pub fn seq(session: SessionId4, slot: u32, seqid: u32) -> SequenceArgs4 {
        SequenceArgs4 {
            sessionid: session,
            sequenceid: seqid,
            slotid: slot,
            highest_slotid: slot,
            cachethis: true,
        }
    }

    /// A confirmed client of `owner` (principal uid 1) and its first
    /// session, made at `now`: (clientid, session).
    pub fn session_at(state: &State, owner: &str, now: Instant) -> (u64, SessionId4) {
        let eid = state
            .exchange_id_at(&exchange(owner, 1, 0), &sys(1), peer(), now)
            .unwrap();
        let cs = state
            .create_session_at(
                &create(eid.clientid, eid.sequenceid),
                &sys(1),
                &conn(1),
                now,
            )
            .unwrap();
        (eid.clientid, cs.sessionid)
    }

    pub fn session(state: &State, owner: &str) -> (u64, SessionId4) {
        session_at(state, owner, Instant::now())
    }

    /// The client of `owner` with a session (made now).
    pub fn client(state: &State, owner: &str) -> Arc<super::Client> {
        let (id, _) = session(state, owner);
        Arc::clone(state.table.lock().client(id).unwrap())
    }

    /// A state on lock tables of its own, with their expirer set, and
    /// what those tables tell NLM of.
    pub fn locking_state() -> (Arc<State>, tokio::sync::mpsc::Receiver<Vec<u8>>) {
        let (locks, released) = crate::locks::Locks::new();
        let state = State::with_locks(
            StateConfig {
                lease_time: LEASE,
                reply_cache_bytes: 64 << 20,
                max_record: (1 << 20) + 8192,
                state_dir: None,
            },
            Arc::new(locks),
        )
        .unwrap();
        (state, released)
    }

    /// A locking state and the client of `owner`.
    pub fn state_and_client(owner: &str) -> (Arc<State>, Arc<super::Client>) {
        let (state, _) = locking_state();
        let client = client(&state, owner);
        (state, client)
    }

    /// SEQUENCE on connection 1 that must be a new request.
    pub fn new_request(state: &State, session: SessionId4, slot: u32, seqid: u32) -> SlotGuard {
        match state.sequence(&seq(session, slot, seqid), &conn(1), 1, None) {
            Sequenced::New(guard) => guard,
            other => panic!("SEQUENCE slot {slot} seqid {seqid}: {other:?}"),
        }
    }

    /// A service that hands each connection's [`ConnInfo`] to the test
    /// on its first call and answers nothing.
    struct Capture(std::sync::mpsc::Sender<ConnInfo>);

    impl Service for Capture {
        type Pending = ();

        async fn receive<R: CallStream>(
            &self,
            conn: &ConnInfo,
            _call: CallHeader,
            _body: &mut RecordReader<R>,
        ) -> Result<Received<()>, RecordError> {
            let _ = self.0.send(conn.clone());
            Ok(Received::NoReply)
        }

        async fn execute(
            self: Arc<Self>,
            _conn: Arc<ConnInfo>,
            _pending: (),
            _place: Place,
        ) -> Option<Reply> {
            None
        }
    }

    /// A connection served by the transport, so with a live back
    /// channel; it closes when the returned stream is dropped.
    pub async fn live_conn() -> (ConnInfo, tokio::net::TcpStream) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let conn = ConnInfo {
            id: next_conn_id(),
            peer,
            local: addr,
            datagram: false,
            names: Default::default(),
            tls: Default::default(),
            back_channel: None,
            client_tag: Default::default(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        tokio::spawn(serve_connection(
            Arc::new(Capture(tx)),
            stream,
            conn,
            ConnLimits::default(),
        ));
        // One NULL call (program 100003, version 4) so the service sees
        // the connection.
        let call = dionfs_rpc::encode_call(1, 100003, 4, 0, &dionfs_rpc::Credential::None);
        let mut record = ((call.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
        record.extend_from_slice(&call);
        client.write_all(&record).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(conn) = rx.try_recv() {
                assert!(conn.back_channel.is_some());
                return (conn, client);
            }
            assert!(Instant::now() < deadline, "the connection's first call");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits (polling, at most 10 s) until `conn`'s back channel is
    /// closed.
    pub async fn until_closed(conn: &ConnInfo) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !conn.back_channel.as_ref().unwrap().is_closed() {
            assert!(Instant::now() < deadline, "the connection to close");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
