//! The back channel of an accepted TCP connection: calls the server makes
//! to the client on the client's own connection (NFSv4.1's CB_NULL,
//! CB_SEQUENCE, CB_RECALL, RFC 8881 section 2.10.3.1), interleaved with
//! the client's calls and the server's replies.
//!
//! A call's record goes out through the connection's writer (`writer.rs`),
//! as replies do: records never interleave, and the connection's bounds
//! apply to it (no call is queued while the peer leaves too many bytes
//! unread, and replies and calls it does not read close it after
//! `reply_timeout`). Its xid is registered among the connection's
//! outstanding calls, at most [`MAX_OUTSTANDING_CALLS`]. The reading loop
//! (`connection.rs`) hands every reply it meets here: one to an
//! outstanding call is read (at most [`MAX_REPLY`] bytes, under the same
//! stall timeout as a call) and given to its caller, and the loop goes on;
//! a reply to nothing this side asked ends the connection, as any reply
//! did before there was a back channel. When the connection ends, every
//! caller still waiting is woken with [`BackChannelError::Closed`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dionfs_rpc::{encode_call, Credential, RecordError, RecordReader, ReplyHeader, ReplyStatus};
use dionfs_xdr::{Decode, Decoder};
use parking_lot::Mutex;
use tokio::io::AsyncRead;
use tokio::sync::oneshot;

use super::reply::Reply;
use super::writer::{CallPermits, Shared};

/// Back-channel calls one connection may have waiting for their replies;
/// more are refused ([`BackChannelError::TooManyOutstanding`]). NFSv4.1
/// offers a client a few back-channel slots (Linux: one), so this is room
/// to spare, and it bounds what a client that never answers holds.
pub const MAX_OUTSTANDING_CALLS: usize = 16;

/// Largest reply read for a back-channel call: callback results are a few
/// hundred bytes (the client's CB_COMPOUND reply).
const MAX_REPLY: u32 = 64 << 10;

/// Largest arguments a back-channel call sends.
const MAX_ARGS: usize = 1 << 20;

/// Calls to the client on the connection it opened to this server: handed
/// to a [`Service`](super::Service) with each call, in
/// [`ConnInfo::back_channel`](super::ConnInfo::back_channel). Cheap to
/// clone; clones are the same channel. Holds
/// nothing of the connection once it has ended: every call then fails with
/// [`BackChannelError::Closed`].
#[derive(Clone)]
pub struct BackChannel {
    calls: Arc<Calls>,
}

/// What a waiting caller is given: the whole reply message, or why there
/// is none.
type Answer = Result<Vec<u8>, BackChannelError>;

struct Calls {
    /// The connection's writer; gone once the connection has ended and
    /// its last call has finished.
    writer: Weak<Shared>,
    /// Bytes of records waiting for the peer beyond which a call waits
    /// before it is queued: the reading loop's own bound.
    backlog: usize,
    state: Mutex<State>,
}

struct State {
    next_xid: u32,
    /// Calls sent (or about to be) whose reply has not come, by xid.
    waiting: HashMap<u32, oneshot::Sender<Answer>>,
    /// Calls given up on (timed out, or their caller gone), oldest first,
    /// at most [`MAX_OUTSTANDING_CALLS`]: a late reply to one is read and
    /// dropped, where a reply to nothing would end the connection.
    abandoned: VecDeque<u32>,
    /// Set when the connection ends: no call is sent any more.
    closed: bool,
}

/// Why a back-channel call has no results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackChannelError {
    /// No reply came within the call's timeout.
    TimedOut,
    /// The connection ended before the reply came (or before the call).
    Closed,
    /// [`MAX_OUTSTANDING_CALLS`] calls already wait for replies on this
    /// connection.
    TooManyOutstanding,
    /// The arguments are larger than a back-channel call may send.
    ArgsTooLarge,
    /// The reply was longer than 64 KiB (it was skipped).
    ReplyTooLarge,
    /// The reply's header could not be decoded.
    Malformed,
    /// The client answered with another status than SUCCESS (PROG_UNAVAIL,
    /// GARBAGE_ARGS, AUTH_ERROR, ...).
    Refused(ReplyStatus),
}

impl fmt::Display for BackChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackChannelError::TimedOut => f.write_str("no reply in time"),
            BackChannelError::Closed => f.write_str("connection closed"),
            BackChannelError::TooManyOutstanding => write!(
                f,
                "{MAX_OUTSTANDING_CALLS} calls already wait for replies on the connection"
            ),
            BackChannelError::ArgsTooLarge => write!(f, "arguments over {MAX_ARGS} bytes"),
            BackChannelError::ReplyTooLarge => write!(f, "reply over {MAX_REPLY} bytes"),
            BackChannelError::Malformed => f.write_str("malformed reply"),
            BackChannelError::Refused(status) => write!(f, "call answered {status:?}"),
        }
    }
}

impl std::error::Error for BackChannelError {}

impl BackChannel {
    /// The back channel of the connection `writer` writes to; calls wait
    /// while more than `backlog` bytes wait for the peer.
    pub(super) fn new(writer: &Arc<Shared>, backlog: usize) -> Self {
        let mut b = [0; 4];
        let _ = getrandom::fill(&mut b);
        Self {
            calls: Arc::new(Calls {
                writer: Arc::downgrade(writer),
                backlog,
                state: Mutex::new(State {
                    next_xid: u32::from_ne_bytes(b),
                    waiting: HashMap::new(),
                    abandoned: VecDeque::new(),
                    closed: false,
                }),
            }),
        }
    }

    /// Calls procedure `proc_` of program `prog`, version `vers`, on the
    /// client, with `cred` (and an AUTH_NONE verifier) and `args` (XDR,
    /// appended as they are); returns the results of an accepted,
    /// successful reply. Everything, from waiting for the peer to take
    /// earlier records to the reply's arrival, is bounded by `timeout`.
    pub async fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: &Credential,
        args: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, BackChannelError> {
        if args.len() > MAX_ARGS {
            return Err(BackChannelError::ArgsTooLarge);
        }
        let (xid, answer) = self.register()?;
        // Until the reply is taken: dropped on a timeout, or with the
        // future, it leaves the call abandoned.
        let _outstanding = Outstanding {
            calls: &self.calls,
            xid,
        };
        let exchange = async {
            let writer = self
                .calls
                .writer
                .upgrade()
                .ok_or(BackChannelError::Closed)?;
            writer.wait_for_backlog(self.calls.backlog).await;
            let mut msg = encode_call(xid, prog, vers, proc_, cred);
            msg.extend_from_slice(args);
            // Dropped, not sent, once the connection is closing; the
            // channel is closed first, so the answer is then `Closed`.
            writer.send(Reply::new(msg), CallPermits::default());
            drop(writer);
            answer.await.unwrap_or(Err(BackChannelError::Closed))
        };
        let reply = tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(BackChannelError::TimedOut))?;
        results(&reply)
    }

    /// Whether the connection has ended: every call now fails with
    /// [`BackChannelError::Closed`]. (What holds channels of many
    /// connections, as an NFSv4.1 session does, drops closed ones first.)
    pub fn is_closed(&self) -> bool {
        self.calls.state.lock().closed
    }

    /// Calls waiting for their replies now.
    pub fn outstanding(&self) -> usize {
        self.calls.state.lock().waiting.len()
    }

    /// A fresh xid, registered as waiting; refused once the connection has
    /// ended or with too many calls waiting.
    fn register(&self) -> Result<(u32, oneshot::Receiver<Answer>), BackChannelError> {
        let mut state = self.calls.state.lock();
        if state.closed {
            return Err(BackChannelError::Closed);
        }
        if state.waiting.len() >= MAX_OUTSTANDING_CALLS {
            return Err(BackChannelError::TooManyOutstanding);
        }
        // After the xids wrap, skip one still in use (a few dozen at most).
        let mut xid = state.next_xid;
        while state.waiting.contains_key(&xid) || state.abandoned.contains(&xid) {
            xid = xid.wrapping_add(1);
        }
        state.next_xid = xid.wrapping_add(1);
        let (caller, answer) = oneshot::channel();
        state.waiting.insert(xid, caller);
        Ok((xid, answer))
    }

    /// Takes a reply the reading loop met, of which `start` has been read
    /// from `body`: if it answers a call of this channel (waiting, or
    /// abandoned), reads the rest of it and hands it to its caller, if
    /// still there; returns whether it did. The record may have more left
    /// (a reply over [`MAX_REPLY`]): the caller skips it. A read error is
    /// the connection's end.
    pub(super) async fn take_reply<R: AsyncRead + Unpin>(
        &self,
        xid: u32,
        start: Vec<u8>,
        body: &mut RecordReader<R>,
    ) -> Result<bool, RecordError> {
        let caller = {
            let mut state = self.calls.state.lock();
            match state.waiting.remove(&xid) {
                Some(caller) => Some(caller),
                None => {
                    let Some(at) = state.abandoned.iter().position(|&x| x == xid) else {
                        return Ok(false);
                    };
                    state.abandoned.remove(at);
                    None
                }
            }
        };
        let mut reply = start;
        // `start` is the 32 bytes of a call's fixed header at most.
        let max = MAX_REPLY.saturating_sub(reply.len() as u32);
        let answer = match body.read_to_end_bounded(&mut reply, max).await {
            Ok(()) => Ok(reply),
            Err(RecordError::RestTooLarge { .. }) => Err(BackChannelError::ReplyTooLarge),
            Err(e) => return Err(e),
        };
        if let Some(caller) = caller {
            // The caller may have given up meanwhile: nothing to do then.
            let _ = caller.send(answer);
        }
        Ok(true)
    }

    /// Ends the channel with its connection: every caller waiting is woken
    /// with [`BackChannelError::Closed`], and later calls are refused.
    pub(super) fn close(&self) {
        let waiting = {
            let mut state = self.calls.state.lock();
            state.closed = true;
            state.abandoned.clear();
            std::mem::take(&mut state.waiting)
        };
        // Dropping the senders wakes their callers.
        drop(waiting);
    }
}

/// Two handles are equal when they are the same connection's channel.
impl PartialEq for BackChannel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.calls, &other.calls)
    }
}

impl Eq for BackChannel {}

impl fmt::Debug for BackChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.calls.state.lock();
        f.debug_struct("BackChannel")
            .field("outstanding", &state.waiting.len())
            .field("closed", &state.closed)
            .finish()
    }
}

/// A call sent and not yet answered; dropped before its reply is taken
/// (timed out, or its caller gone), it is moved to the abandoned calls.
struct Outstanding<'a> {
    calls: &'a Calls,
    xid: u32,
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        let mut state = self.calls.state.lock();
        if state.waiting.remove(&self.xid).is_some() {
            if state.abandoned.len() == MAX_OUTSTANDING_CALLS {
                state.abandoned.pop_front();
            }
            state.abandoned.push_back(self.xid);
        }
    }
}

/// The results of an accepted, successful reply message (its xid already
/// matched).
fn results(reply: &[u8]) -> Result<Vec<u8>, BackChannelError> {
    let mut dec = Decoder::new(reply);
    let header = ReplyHeader::decode(&mut dec).map_err(|_| BackChannelError::Malformed)?;
    match header.status {
        ReplyStatus::Success => Ok(dec.rest().to_vec()),
        status => Err(BackChannelError::Refused(status)),
    }
}
