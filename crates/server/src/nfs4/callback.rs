//! The server's side of the NFSv4.1 back channel (RFC 8881 sections
//! 2.10.3.1 and 20, design section 4.4): the CB_NULL probe that tells
//! whether a session's back channel answers, and CB_COMPOUND led by
//! CB_SEQUENCE on back-channel slot 0.
//!
//! Calls go through the [`BackChannel`] of a connection the client bound
//! to the session's back channel, newest first, with the program and the
//! credential CREATE_SESSION or BACKCHANNEL_CTL set. A callback holds the
//! session's back slot from its first call to its last reply, so the
//! session's callbacks run one at a time (the server uses slot 0 alone).
//! One that fails on every back connection (no reply in time, the
//! connection closed, the call refused, a reply that does not decode, or
//! a CB_SEQUENCE error) marks the session's back channel down, which
//! SEQUENCE reports as `CB_PATH_DOWN`; one that succeeds clears it.
//!
//! Recalls are the operations [`cb_compound`] sends after CB_SEQUENCE.
//!
//! A minor version 0 client has no sessions: the server calls it on a
//! connection of its own to the address of the client's confirmed
//! SETCLIENTID (RFC 7530 section 3.3.3), [`probe40`] after the
//! confirmation and [`cb_compound40`] for a recall, without CB_SEQUENCE
//! and with the client's `callback_ident`. Each call waits a tenth of a
//! lease for its answer, 1 to 10 s (knfsd's callback timeout), and its
//! outcome is the path's state, which RENEW reports as `CB_PATH_DOWN`.

use std::fmt;
use std::time::Duration;

use dionfs_proto::nfs4::{
    decode_cb_compound_reply, CallbackSecParms4, CbArgOp, CbCompoundArgs4, CbCompoundRes4, CbResOp,
    CbSequenceArgs4, Nfsstat4, Res4, SessionId4, Utf8Str, CB_COMPOUND, CB_NULL,
};
use std::sync::Arc;

use dionfs_rpc::{AuthSys, Credential};
use dionfs_transport::client::{self as rpc_client, Call as RpcCall};
use dionfs_transport::{BackChannel, BackChannelError};
use dionfs_xdr::Encode;
use tracing::{debug, info};

use super::state::clients::CallbackPath;
use super::state::sessions::BackSlot;
use super::state::{Client, Session, State};

/// The callback program's version (RFC 8881 section 20).
pub const CB_VERSION: u32 = 1;

/// How long a probe waits for the client's answer on one connection.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a CB_COMPOUND should wait for its reply on one connection.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Calls one connection is sent for one CB_COMPOUND at most: the first,
/// and those sent again after CB_SEQUENCE answered that the slot's
/// sequence id was off or that the client was busy.
const CALLS_PER_CONNECTION: usize = 3;

/// The minor version a CB_COMPOUND carries: its client's (that of the
/// COMPOUND its EXCHANGE_ID came in, as knfsd's `cl_minorversion`), 1 at
/// least. A client may refuse another (pynfs at minor version 2 does).
fn cb_minor_version(session: &Session) -> u32 {
    session.client.minor().max(1)
}

/// Why a callback has no results. The session's back channel is marked
/// down when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackError {
    /// No open connection is bound to the session's back channel, it has
    /// no slot, or its security is one the server cannot call with.
    NoBackChannel,
    /// The call failed on the last connection tried.
    Transport(BackChannelError),
    /// The last connection's reply did not decode, or did not begin with
    /// the result of our CB_SEQUENCE.
    BadReply,
    /// CB_SEQUENCE (or the whole CB_COMPOUND, before it) failed with this
    /// status on the last connection tried.
    Sequence(Nfsstat4),
    /// A minor version 0 client's callback address could not be
    /// connected to, or gave no answer in time.
    Unreachable(String),
}

impl fmt::Display for CallbackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallbackError::NoBackChannel => f.write_str("no back channel to call on"),
            CallbackError::Transport(e) => write!(f, "back channel call failed: {e}"),
            CallbackError::BadReply => f.write_str("malformed CB_COMPOUND reply"),
            CallbackError::Sequence(status) => write!(f, "CB_SEQUENCE failed: {status:?}"),
            CallbackError::Unreachable(e) => write!(f, "callback address unreachable: {e}"),
        }
    }
}

impl std::error::Error for CallbackError {}

/// CB_NULL on `channel`: the client's callback program `program` answers
/// within `timeout`, or not.
pub async fn cb_null(
    channel: &BackChannel,
    program: u32,
    cred: &Credential,
    timeout: Duration,
) -> Result<(), BackChannelError> {
    channel
        .call(program, CB_VERSION, CB_NULL, cred, &[], timeout)
        .await
        .map(drop)
}

/// Probes the back channel of session `id` in a spawned task (CB_NULL,
/// [`PROBE_TIMEOUT`] per connection), which marks it down or up. Called
/// after CREATE_SESSION, after BIND_CONN_TO_SESSION for the back channel
/// and after BACKCHANNEL_CTL. A probe asked while another waits to start
/// is that one; without a back connection nothing is sent.
pub fn probe(state: &State, id: &SessionId4) {
    let Some(session) = state.session(id) else {
        return;
    };
    // The op handlers run on the runtime; nothing to spawn on otherwise.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if !session.queue_probe() {
        return;
    }
    runtime.spawn(async move {
        let _ = run_probe(&session, PROBE_TIMEOUT).await;
    });
}

/// The probe itself: CB_NULL on the session's back connections, newest
/// first, until one answers.
async fn run_probe(session: &Session, timeout: Duration) -> Result<(), CallbackError> {
    let _slot = session.back_slot().await;
    session.probe_started();
    let result = null_on_any(session, timeout).await;
    record(session, &result);
    result
}

async fn null_on_any(session: &Session, timeout: Duration) -> Result<(), CallbackError> {
    let (program, cred) = caller(session)?;
    let mut last = CallbackError::NoBackChannel;
    for channel in session.back_channels() {
        match cb_null(&channel, program, &cred, timeout).await {
            Ok(()) => return Ok(()),
            Err(e) => last = CallbackError::Transport(e),
        }
    }
    Err(last)
}

/// CB_COMPOUND on `session`: CB_SEQUENCE on back-channel slot 0, then
/// `ops`, through the newest back connection that answers, each waiting
/// at most `timeout` ([`CALL_TIMEOUT`]) for its reply. Waits while
/// another callback of the session runs. Returns the client's reply, its
/// first result our CB_SEQUENCE's; the status of the operations after it
/// is the caller's to read.
pub async fn cb_compound(
    session: &Session,
    ops: &[CbArgOp],
    timeout: Duration,
) -> Result<CbCompoundRes4, CallbackError> {
    let mut slot = session.back_slot().await;
    let result = compound_on_any(session, &mut slot, ops, timeout).await;
    record(session, &result);
    result
}

async fn compound_on_any(
    session: &Session,
    slot: &mut BackSlot,
    ops: &[CbArgOp],
    timeout: Duration,
) -> Result<CbCompoundRes4, CallbackError> {
    if session.back.maxrequests == 0 {
        return Err(CallbackError::NoBackChannel);
    }
    let (program, cred) = caller(session)?;
    let call = Call {
        session,
        program,
        cred: &cred,
        ops,
        timeout,
    };
    let mut last = CallbackError::NoBackChannel;
    for channel in session.back_channels() {
        match call.on(&channel, slot).await {
            Ok(res) => return Ok(res),
            Err(e) => {
                debug!(session = ?session.id, error = %e, "CB_COMPOUND failed on a back connection");
                last = e;
            }
        }
    }
    Err(last)
}

/// One CB_COMPOUND, as sent on any connection.
struct Call<'a> {
    session: &'a Session,
    program: u32,
    cred: &'a Credential,
    ops: &'a [CbArgOp],
    timeout: Duration,
}

impl Call<'_> {
    /// The call on `channel`, sent again (at most
    /// [`CALLS_PER_CONNECTION`] in all) when CB_SEQUENCE answers as RFC
    /// 8881 section 2.10.6 lets a requester recover from. A call with no
    /// reply leaves the slot's sequence id as it is: the next connection
    /// is sent the same one, a retry, which the client answers
    /// `RETRY_UNCACHED_REP` if the first got through.
    async fn on(
        &self,
        channel: &BackChannel,
        slot: &mut BackSlot,
    ) -> Result<CbCompoundRes4, CallbackError> {
        let mut calls = 0;
        loop {
            calls += 1;
            let args = self.args(slot.sequenceid);
            let reply = channel
                .call(
                    self.program,
                    CB_VERSION,
                    CB_COMPOUND,
                    self.cred,
                    &args,
                    self.timeout,
                )
                .await
                .map_err(CallbackError::Transport)?;
            let res = decode_cb_compound_reply(&reply).map_err(|_| CallbackError::BadReply)?;
            let status = match res.results.first() {
                Some(CbResOp::Sequence(Res4::Ok(ok))) => {
                    // knfsd's nfsd4_cb_sequence_done checks the same.
                    if ok.sessionid != self.session.id
                        || ok.sequenceid != slot.sequenceid
                        || ok.slotid != 0
                    {
                        return Err(CallbackError::BadReply);
                    }
                    slot.sequenceid = slot.sequenceid.wrapping_add(1);
                    return Ok(res);
                }
                Some(CbResOp::Sequence(Res4::Fail(status))) => *status,
                // The client failed the COMPOUND before running anything
                // (MINOR_VERS_MISMATCH, a tag it refused...).
                None if res.status != Nfsstat4::Ok => {
                    return Err(CallbackError::Sequence(res.status))
                }
                _ => return Err(CallbackError::BadReply),
            };
            if calls == CALLS_PER_CONNECTION {
                return Err(CallbackError::Sequence(status));
            }
            match status {
                // The client ran this sequence id already: an earlier call
                // went through and its reply was lost (RFC 8881 section
                // 2.10.6.1). Its ops are sent again as a new request.
                Nfsstat4::RetryUncachedRep | Nfsstat4::SeqFalseRetry => {
                    slot.sequenceid = slot.sequenceid.wrapping_add(1);
                }
                // The client's slot is not where ours is (it made its slot
                // table anew): start again at 1, once, as knfsd does.
                Nfsstat4::SeqMisordered if slot.sequenceid != 1 => slot.sequenceid = 1,
                // The slot is busy on the client: the same call a little
                // later.
                Nfsstat4::Delay => tokio::time::sleep(self.timeout / 10).await,
                _ => return Err(CallbackError::Sequence(status)),
            }
        }
    }

    /// The encoded CB_COMPOUND4args with `sequenceid` on slot 0.
    fn args(&self, sequenceid: u32) -> Vec<u8> {
        let sequence = CbArgOp::Sequence(CbSequenceArgs4 {
            sessionid: self.session.id,
            sequenceid,
            slotid: 0,
            highest_slotid: 0,
            // The client caches nothing for us (its back channel's
            // maxresponsesize_cached is 0).
            cachethis: false,
            referring_call_lists: Vec::new(),
        });
        CbCompoundArgs4 {
            tag: Utf8Str::default(),
            minorversion: cb_minor_version(self.session),
            callback_ident: 0,
            ops: std::iter::once(sequence)
                .chain(self.ops.iter().cloned())
                .collect(),
        }
        .to_xdr()
    }
}

/// How long a call to a minor version 0 client waits for its answer: a
/// tenth of the lease, 1 to 10 s.
fn timeout40(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Probes a minor version 0 client's callback path (CB_NULL) in a
/// spawned task: the path is up once it answers. Called after
/// SETCLIENTID_CONFIRM set a path not known to answer.
pub fn probe40(state: &State, client: Arc<Client>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let timeout = timeout40(state.lease_time());
    runtime.spawn(async move {
        let Some((path, generation)) = path40(&client) else {
            return;
        };
        let answered = call40(&path, CB_NULL, Vec::new(), timeout).await;
        if let Err(e) = &answered {
            info!(
                clientid = client.id.0,
                address = %client.address,
                error = %e,
                "NFSv4.0 client's callback path does not answer: it gets no delegations"
            );
        }
        record40(&client, generation, &answered);
    });
}

/// CB_COMPOUND (minor version 0, no CB_SEQUENCE) of `ops` to a minor
/// version 0 client, on a connection of its own.
pub async fn cb_compound40(
    state: &State,
    client: &Client,
    ops: &[CbArgOp],
) -> Result<CbCompoundRes4, CallbackError> {
    let (path, generation) = path40(client).ok_or(CallbackError::NoBackChannel)?;
    let args = CbCompoundArgs4 {
        tag: Utf8Str::default(),
        minorversion: 0,
        callback_ident: path.ident,
        ops: ops.to_vec(),
    }
    .to_xdr();
    let timeout = timeout40(state.lease_time());
    let result = call40(&path, CB_COMPOUND, args, timeout)
        .await
        .and_then(|reply| {
            let res = decode_cb_compound_reply(&reply).map_err(|_| CallbackError::BadReply)?;
            if res.results.is_empty() && res.status != Nfsstat4::Ok {
                return Err(CallbackError::Sequence(res.status));
            }
            Ok(res)
        });
    record40(client, generation, &result);
    result
}

/// The client's callback path, if it has one the server calls, and its
/// generation.
fn path40(client: &Client) -> Option<(CallbackPath, u64)> {
    let callback = client.callback40.lock();
    let path = callback.path.clone().filter(|p| p.to.is_some())?;
    Some((path, callback.generation))
}

/// One call of procedure `proc_` to `path`, on a blocking thread (a
/// connection of its own from the server's address the client used,
/// as the server's other callbacks).
async fn call40(
    path: &CallbackPath,
    proc_: u32,
    args: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, CallbackError> {
    let Some(to) = path.to else {
        return Err(CallbackError::NoBackChannel);
    };
    let (from, program) = (path.from, path.program);
    let called = tokio::task::spawn_blocking(move || {
        let call = RpcCall {
            prog: program,
            vers: CB_VERSION,
            proc_,
            args: &args,
        };
        rpc_client::tcp_call_within(from, to, &machine_credential(), call, timeout)
    })
    .await;
    match called {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(CallbackError::Unreachable(e.to_string())),
        Err(e) => Err(CallbackError::Unreachable(e.to_string())),
    }
}

/// What a call to a minor version 0 client found: the path's state.
fn record40<T>(client: &Client, generation: u64, result: &Result<T, CallbackError>) {
    let mut callback = client.callback40.lock();
    if callback.up != result.is_ok() {
        match result {
            Err(e) => debug!(clientid = client.id.0, error = %e, "callback path down"),
            Ok(_) => debug!(clientid = client.id.0, "callback path up"),
        }
    }
    callback.record(generation, result.is_ok());
}

/// The credential of calls to a minor version 0 client: AUTH_SYS as
/// root, as knfsd's machine credential for them.
fn machine_credential() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine_name: b"dionfs".to_vec(),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    })
}

/// The session's callback program and the credential to call it with.
fn caller(session: &Session) -> Result<(u32, Credential), CallbackError> {
    let (program, security) = session.callback();
    let cred = match security {
        CallbackSecParms4::AuthNone => Credential::None,
        CallbackSecParms4::AuthSys(sys) => Credential::Sys(AuthSys {
            stamp: sys.stamp,
            machine_name: sys.machinename.0,
            uid: sys.uid,
            gid: sys.gid,
            // At most 16, as decoded.
            gids: sys.gids,
        }),
        // CREATE_SESSION and BACKCHANNEL_CTL refuse it; nothing to call
        // with.
        CallbackSecParms4::RpcsecGss(_) => return Err(CallbackError::NoBackChannel),
    };
    Ok((program, cred))
}

/// What a callback found: its failure marks the session's back channel
/// down, its success clears that.
fn record<T>(session: &Session, result: &Result<T, CallbackError>) {
    let failed = result.is_err();
    if failed != session.callback_failed() {
        match result {
            Err(e) => debug!(session = ?session.id, error = %e, "back channel down"),
            Ok(_) => debug!(session = ?session.id, "back channel up"),
        }
    }
    session.set_callback_failed(failed);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use dionfs_proto::nfs4::{
        AuthSysParms, BackchannelCtlArgs4, BindConnToSessionArgs4, CbSequenceResOk4,
        ChannelDirFromClient4, SEQ4_STATUS_CB_PATH_DOWN,
    };
    use dionfs_rpc::{framed, CallHeader, RecordReader, ReplyHeader, ReplyStatus};
    use dionfs_transport::ConnInfo;
    use dionfs_xdr::{Decode, Decoder, Encoder};
    use tokio::io::AsyncWriteExt;
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
    use tokio::net::TcpStream;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::nfs4::state::testing::*;
    use crate::nfs4::state::Sequenced;

    /// A timeout for calls the test answers.
    const ANSWERED: Duration = Duration::from_secs(10);
    /// A timeout for calls nobody answers.
    const UNANSWERED: Duration = Duration::from_millis(300);

    /// The client's end of a connection it bound to a session's back
    /// channel: it reads the server's calls and answers them.
    struct FakeClient {
        reader: RecordReader<OwnedReadHalf>,
        writer: OwnedWriteHalf,
    }

    impl FakeClient {
        fn new(stream: TcpStream) -> FakeClient {
            let (reader, writer) = stream.into_split();
            FakeClient {
                reader: RecordReader::new(reader, 1 << 20),
                writer,
            }
        }

        /// The next call the server sends (within 10 s): its header and
        /// arguments.
        async fn call(&mut self) -> (CallHeader, Vec<u8>) {
            let next = tokio::time::timeout(Duration::from_secs(10), self.reader.next_record());
            assert!(
                next.await.expect("a call in time").unwrap(),
                "connection closed"
            );
            let mut msg = Vec::new();
            self.reader.read_to_end(&mut msg).await.unwrap();
            let mut dec = Decoder::new(&msg);
            let header = CallHeader::decode(&mut dec).unwrap();
            (header, dec.rest().to_vec())
        }

        /// The next call, which must be CB_NULL of program `program`.
        async fn null(&mut self, program: u32) -> CallHeader {
            let (header, args) = self.call().await;
            assert_eq!(
                (header.prog, header.vers, header.proc_),
                (program, 1, CB_NULL)
            );
            assert!(args.is_empty());
            header
        }

        /// The next call, which must be CB_COMPOUND of the usual program.
        async fn compound(&mut self) -> (CallHeader, CbCompoundArgs4) {
            let (header, args) = self.call().await;
            assert_eq!(
                (header.prog, header.vers, header.proc_),
                (0x4000_0000, 1, CB_COMPOUND)
            );
            (header, CbCompoundArgs4::from_xdr(&args).unwrap())
        }

        /// The next CB_COMPOUND's CB_SEQUENCE: (xid, its arguments).
        async fn sequence(&mut self) -> (u32, CbSequenceArgs4) {
            let (header, args) = self.compound().await;
            match &args.ops[..] {
                [CbArgOp::Sequence(sequence)] => (header.xid, sequence.clone()),
                ops => panic!("not a lone CB_SEQUENCE: {ops:?}"),
            }
        }

        /// Answers call `xid` with `status` and `results` after the
        /// header.
        async fn reply(&mut self, xid: u32, status: ReplyStatus, results: &[u8]) {
            let mut msg = ReplyHeader::new(xid, status).to_xdr();
            msg.extend_from_slice(results);
            self.writer.write_all(&framed(&msg)).await.unwrap();
        }

        /// Answers call `xid` with an empty success (CB_NULL's).
        async fn answer_null(&mut self, xid: u32) {
            self.reply(xid, ReplyStatus::Success, &[]).await;
        }

        /// Answers the CB_COMPOUND `xid` whose CB_SEQUENCE was `args`:
        /// with its echo, or with `status`.
        async fn answer(&mut self, xid: u32, args: &CbSequenceArgs4, status: Nfsstat4) {
            let result = match status {
                Nfsstat4::Ok => Res4::Ok(CbSequenceResOk4 {
                    sessionid: args.sessionid,
                    sequenceid: args.sequenceid,
                    slotid: args.slotid,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                }),
                status => Res4::Fail(status),
            };
            let res = CbCompoundRes4 {
                status,
                tag: Utf8Str::default(),
                results: vec![CbResOp::Sequence(result)],
            };
            self.reply(xid, ReplyStatus::Success, &res.to_xdr()).await;
        }

        /// Takes the next CB_COMPOUND, checks it carries `sequenceid`, and
        /// answers it with `status`.
        async fn expect_and_answer(&mut self, sequenceid: u32, status: Nfsstat4) {
            let (xid, args) = self.sequence().await;
            assert_eq!(args.sequenceid, sequenceid);
            self.answer(xid, &args, status).await;
        }
    }

    /// A session of a new client, made on a live connection it bound to
    /// the back channel: (session, the connection, the client's end).
    async fn live_session(state: &State) -> (Arc<Session>, ConnInfo, FakeClient) {
        let (conn, stream) = live_conn().await;
        let e = state
            .exchange_id(&exchange("a", 1, 0), &sys(1), peer())
            .unwrap();
        let cs = state
            .create_session(&create(e.clientid, e.sequenceid), &sys(1), &conn)
            .unwrap();
        let session = state.session(&cs.sessionid).unwrap();
        (session, conn, FakeClient::new(stream))
    }

    /// Binds a new live connection to the session's back channel: it is
    /// now the newest.
    async fn bind_back(state: &State, session: &Session) -> (ConnInfo, FakeClient) {
        let (conn, stream) = live_conn().await;
        state
            .bind_conn(
                &BindConnToSessionArgs4 {
                    sessid: session.id,
                    dir: ChannelDirFromClient4::Back,
                    use_conn_in_rdma_mode: false,
                },
                &conn,
            )
            .unwrap();
        (conn, FakeClient::new(stream))
    }

    fn spawn_compound(
        session: &Arc<Session>,
        timeout: Duration,
    ) -> JoinHandle<Result<CbCompoundRes4, CallbackError>> {
        let session = Arc::clone(session);
        tokio::spawn(async move { cb_compound(&session, &[], timeout).await })
    }

    fn spawn_probe(
        session: &Arc<Session>,
        timeout: Duration,
    ) -> JoinHandle<Result<(), CallbackError>> {
        let session = Arc::clone(session);
        tokio::spawn(async move { run_probe(&session, timeout).await })
    }

    /// The `CB_PATH_DOWN` flag of a SEQUENCE on the session, slot 0.
    fn sequence_says_down(state: &State, session: &Session, conn: &ConnInfo, seqid: u32) -> bool {
        match state.sequence(&seq(session.id, 0, seqid), conn, 1, None) {
            Sequenced::New(guard) => {
                let down = guard.result().status_flags & SEQ4_STATUS_CB_PATH_DOWN != 0;
                guard.complete(None);
                down
            }
            other => panic!("{other:?}"),
        }
    }

    /// Waits (polling, at most 10 s) until `done`.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn an_answered_probe_clears_the_path_down() {
        let state = state();
        let (session, conn, mut client) = live_session(&state).await;
        assert!(!session.back_channel_down());
        session.set_callback_failed(true);
        assert!(sequence_says_down(&state, &session, &conn, 1));
        // What CREATE_SESSION and BIND_CONN_TO_SESSION call.
        probe(&state, &session.id);
        let header = client.null(0x4000_0000).await;
        assert_eq!(header.cred, Credential::None);
        client.answer_null(header.xid).await;
        until("the probe to clear the flag", || {
            !session.back_channel_down()
        })
        .await;
        assert!(!sequence_says_down(&state, &session, &conn, 2));
    }

    #[tokio::test]
    async fn an_unanswered_probe_times_out_and_marks_the_path_down() {
        let state = state();
        let (session, conn, mut client) = live_session(&state).await;
        let probe = spawn_probe(&session, UNANSWERED);
        client.null(0x4000_0000).await;
        assert_eq!(
            probe.await.unwrap(),
            Err(CallbackError::Transport(BackChannelError::TimedOut))
        );
        assert!(session.callback_failed());
        assert!(sequence_says_down(&state, &session, &conn, 1));
    }

    #[tokio::test]
    async fn probes_asked_while_one_waits_are_that_one() {
        let state = state();
        let (session, _conn, mut client) = live_session(&state).await;
        probe(&state, &session.id);
        probe(&state, &session.id);
        probe(&state, &session.id);
        let call = spawn_compound(&session, ANSWERED);
        let header = client.null(0x4000_0000).await;
        client.answer_null(header.xid).await;
        // Next comes the CB_COMPOUND queued after the one probe, not a
        // second probe.
        client.expect_and_answer(1, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_closed_connection_marks_the_path_down_until_another_answers() {
        let state = state();
        let (session, conn, mut client) = live_session(&state).await;
        let call = spawn_compound(&session, ANSWERED);
        client.sequence().await;
        drop(client);
        assert_eq!(
            call.await.unwrap(),
            Err(CallbackError::Transport(BackChannelError::Closed))
        );
        assert!(session.callback_failed());
        until_closed(&conn).await;
        // No back connection left: nothing is called.
        assert_eq!(
            cb_compound(&session, &[], ANSWERED).await,
            Err(CallbackError::NoBackChannel)
        );
        // A new one is bound; the path stays down until it answers.
        let (_new, mut client) = bind_back(&state, &session).await;
        assert!(session.back_channel_down());
        probe(&state, &session.id);
        let header = client.null(0x4000_0000).await;
        client.answer_null(header.xid).await;
        until("the probe to clear the flag", || {
            !session.back_channel_down()
        })
        .await;
    }

    #[tokio::test]
    async fn a_dead_newest_connection_falls_back_to_the_next() {
        let state = state();
        let (session, _first, mut first) = live_session(&state).await;
        let (_second, mut second) = bind_back(&state, &session).await;
        // The newest is tried first; it never answers. The older one is
        // sent the same sequence id: the first call may not have got
        // through.
        let call = spawn_compound(&session, Duration::from_secs(2));
        let (_, args) = second.sequence().await;
        assert_eq!(args.sequenceid, 1);
        first.expect_and_answer(1, Nfsstat4::Ok).await;
        let res = call.await.unwrap().unwrap();
        assert_eq!(res.status, Nfsstat4::Ok);
        assert!(!session.back_channel_down());
        assert_eq!(session.back_slot().await.sequenceid, 2);
        // The same for a probe.
        let probe = spawn_probe(&session, Duration::from_secs(2));
        second.null(0x4000_0000).await;
        let header = first.null(0x4000_0000).await;
        first.answer_null(header.xid).await;
        assert_eq!(probe.await.unwrap(), Ok(()));
        assert!(!session.callback_failed());
    }

    #[tokio::test]
    async fn cb_sequence_follows_the_slot_with_the_sessions_credential() {
        let state = state();
        let (session, conn, mut client) = live_session(&state).await;
        // BACKCHANNEL_CTL: another program, AUTH_SYS.
        let guard = match state.sequence(&seq(session.id, 0, 1), &conn, 1, None) {
            Sequenced::New(guard) => guard,
            other => panic!("{other:?}"),
        };
        let parms = AuthSysParms {
            stamp: 5,
            machinename: Utf8Str::from("client"),
            uid: 7,
            gid: 8,
            gids: vec![9, 10],
        };
        let ctl = BackchannelCtlArgs4 {
            cb_program: 77,
            sec_parms: vec![CallbackSecParms4::AuthSys(parms)],
        };
        assert_eq!(state.backchannel_ctl(&guard, &ctl), Nfsstat4::Ok);
        guard.complete(None);
        let cred = Credential::Sys(AuthSys {
            stamp: 5,
            machine_name: b"client".to_vec(),
            uid: 7,
            gid: 8,
            gids: vec![9, 10],
        });
        for sequenceid in 1..=3 {
            let call = spawn_compound(&session, ANSWERED);
            let (header, args) = client.call().await;
            assert_eq!(
                (header.prog, header.vers, header.proc_),
                (77, 1, CB_COMPOUND)
            );
            assert_eq!(header.cred, cred);
            let args = CbCompoundArgs4::from_xdr(&args).unwrap();
            let expected = CbSequenceArgs4 {
                sessionid: session.id,
                sequenceid,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
                referring_call_lists: Vec::new(),
            };
            assert_eq!(
                args,
                CbCompoundArgs4 {
                    tag: Utf8Str::default(),
                    minorversion: 1,
                    callback_ident: 0,
                    ops: vec![CbArgOp::Sequence(expected.clone())],
                }
            );
            client.answer(header.xid, &expected, Nfsstat4::Ok).await;
            let res = call.await.unwrap().unwrap();
            assert!(matches!(
                &res.results[..],
                [CbResOp::Sequence(Res4::Ok(ok))] if ok.sequenceid == sequenceid
            ));
        }
        // The probe uses them too.
        let probe = spawn_probe(&session, ANSWERED);
        let header = client.null(77).await;
        assert_eq!(header.cred, cred);
        client.answer_null(header.xid).await;
        assert_eq!(probe.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn cb_sequence_errors_are_recovered_from_as_rfc_8881_says() {
        let state = state();
        let (session, _conn, mut client) = live_session(&state).await;
        let call = spawn_compound(&session, ANSWERED);
        client.expect_and_answer(1, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());

        // SEQ_MISORDERED: the client's slot starts again at 1.
        let call = spawn_compound(&session, ANSWERED);
        client.expect_and_answer(2, Nfsstat4::SeqMisordered).await;
        client.expect_and_answer(1, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());
        // RETRY_UNCACHED_REP: the client ran seqid 2 already; 3 is new.
        let call = spawn_compound(&session, ANSWERED);
        client
            .expect_and_answer(2, Nfsstat4::RetryUncachedRep)
            .await;
        client.expect_and_answer(3, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());
        // DELAY: the same call again.
        let call = spawn_compound(&session, Duration::from_secs(1));
        client.expect_and_answer(4, Nfsstat4::Delay).await;
        client.expect_and_answer(4, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());
        assert!(!session.back_channel_down());

        // SEQ_MISORDERED at 1: nothing left to try.
        session.back_slot().await.sequenceid = 1;
        let call = spawn_compound(&session, ANSWERED);
        client.expect_and_answer(1, Nfsstat4::SeqMisordered).await;
        assert_eq!(
            call.await.unwrap(),
            Err(CallbackError::Sequence(Nfsstat4::SeqMisordered))
        );
        assert!(session.back_channel_down());
        // Another error: the path is down, the slot as it was.
        let call = spawn_compound(&session, ANSWERED);
        client.expect_and_answer(1, Nfsstat4::Badsession).await;
        assert_eq!(
            call.await.unwrap(),
            Err(CallbackError::Sequence(Nfsstat4::Badsession))
        );
        assert!(session.back_channel_down());
        // DELAY for ever: three calls, then down.
        let call = spawn_compound(&session, Duration::from_secs(1));
        for _ in 0..3 {
            client.expect_and_answer(1, Nfsstat4::Delay).await;
        }
        assert_eq!(
            call.await.unwrap(),
            Err(CallbackError::Sequence(Nfsstat4::Delay))
        );
        // A call that succeeds brings the path back.
        let call = spawn_compound(&session, ANSWERED);
        client.expect_and_answer(1, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());
        assert!(!session.back_channel_down());
    }

    #[tokio::test]
    async fn malformed_refused_or_oversized_replies_mark_the_path_down() {
        let state = state();
        let (session, _conn, mut client) = live_session(&state).await;
        let garbage = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        let wrong_session = {
            let mut res = CbCompoundRes4 {
                status: Nfsstat4::Ok,
                tag: Utf8Str::default(),
                results: vec![CbResOp::Sequence(Res4::Ok(CbSequenceResOk4 {
                    sessionid: SessionId4([9; 16]),
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                }))],
            };
            let wrong = res.to_xdr();
            res.results.clear();
            (wrong, res.to_xdr())
        };
        let cases: [(ReplyStatus, Vec<u8>, CallbackError); 5] = [
            (
                ReplyStatus::Success,
                garbage.to_vec(),
                CallbackError::BadReply,
            ),
            (
                ReplyStatus::Success,
                wrong_session.0,
                CallbackError::BadReply,
            ),
            // No result at all, with OK.
            (
                ReplyStatus::Success,
                wrong_session.1,
                CallbackError::BadReply,
            ),
            (
                ReplyStatus::GarbageArgs,
                Vec::new(),
                CallbackError::Transport(BackChannelError::Refused(ReplyStatus::GarbageArgs)),
            ),
            (
                ReplyStatus::Success,
                vec![0; 70 << 10],
                CallbackError::Transport(BackChannelError::ReplyTooLarge),
            ),
        ];
        for (status, results, error) in cases {
            let call = spawn_compound(&session, ANSWERED);
            let (xid, args) = client.sequence().await;
            // Nothing came back right: the slot stays where it was.
            assert_eq!(args.sequenceid, 1);
            client.reply(xid, status, &results).await;
            assert_eq!(call.await.unwrap(), Err(error));
            assert!(session.back_channel_down());
            session.set_callback_failed(false);
        }
        // A reply header that does not decode.
        let call = spawn_compound(&session, ANSWERED);
        let (xid, _) = client.sequence().await;
        let mut bad_header = Encoder::new();
        bad_header.u32(xid);
        bad_header.u32(1);
        bad_header.u32(7);
        client
            .writer
            .write_all(&framed(bad_header.as_slice()))
            .await
            .unwrap();
        assert_eq!(
            call.await.unwrap(),
            Err(CallbackError::Transport(BackChannelError::Malformed))
        );
        assert!(session.back_channel_down());
        // The connection goes on, and a good reply brings the path back.
        let call = spawn_compound(&session, ANSWERED);
        client.expect_and_answer(1, Nfsstat4::Ok).await;
        assert!(call.await.unwrap().is_ok());
        assert!(!session.back_channel_down());
    }

    #[tokio::test]
    async fn without_a_back_connection_nothing_is_called() {
        let state = state();
        // A session made on a connection with no back channel.
        let (_, id) = session(&state, "a");
        let session = state.session(&id).unwrap();
        assert!(session.back_channels().is_empty());
        assert_eq!(
            cb_compound(&session, &[], ANSWERED).await,
            Err(CallbackError::NoBackChannel)
        );
        assert_eq!(
            run_probe(&session, ANSWERED).await,
            Err(CallbackError::NoBackChannel)
        );
        assert!(session.back_channel_down());
        // Probing an unknown session is nothing.
        probe(&state, &SessionId4([7; 16]));
    }
}
