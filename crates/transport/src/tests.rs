//! Loopback tests of the connection layer with a toy echo program.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_dataplane::{BufferPool, Counters, PooledBuf};
use dionfs_rpc::{
    encode_call, record_mark, reply, AuthStat, CallHeader, Credential, RecordError, RecordReader,
    ReplyHeader, ReplyStatus,
};
use dionfs_testfs::wait_until_async;
use dionfs_xdr::{pad_len, Decode, Decoder, Encoder};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::writer::write_without_waiting;
use super::*;

mod tls;

const ECHO_PROG: u32 = 0x2000_0042;
const ECHO_VERS: u32 = 1;
const PROC_NULL: u32 = 0;
/// Args: opaque data. Result: the same opaque data, sent as a payload.
const PROC_ECHO: u32 = 1;
/// Args: delay in ms, opaque data. Result: as ECHO, after the delay.
const PROC_SLOW_ECHO: u32 = 2;
/// Args: raw bytes, at most [`MAX_RAW`]. Result: as ECHO.
const PROC_RAW_ECHO: u32 = 3;
/// Args: opaque data. Result: as ECHO, sent from a pool buffer taken before
/// the data is read (as WRITEs did before they waited for their payload).
const PROC_POOL_ECHO: u32 = 4;
/// As POOL_ECHO, but the buffer is taken once the data is in the socket
/// ([`wait_for_payload`]), as WRITEs are received now.
const PROC_PAYLOAD_ECHO: u32 = 5;
/// Args: timeout in ms, opaque data. Calls the client back on its own
/// connection (CB_PROC of CB_PROG, the opaque data as arguments) and
/// answers with the outcome: a [`CallbackOutcome`] code and the callback's
/// results (empty unless it succeeded).
const PROC_CALL_BACK: u32 = 6;
/// No args. Result: as ECHO, the connection's security as the call sees
/// it ([`ConnInfo::security`]'s word: `none`, `tls`, `mtls`).
const PROC_SECURITY: u32 = 8;
/// No args. Result: as ECHO, the client certificate's identity as calls
/// see it ([`ConnInfo::certificate`], displayed), empty without one.
const PROC_CERTIFICATE: u32 = 9;
/// No args. `execute_blocks` answers yes and no by turns to these calls
/// (whatever the call), as a real service's answer may change while a
/// call waits. Result: as ECHO, where the call ran and how often it was
/// asked: `task`, `blocking` or `asked N times`.
const PROC_PLACE: u32 = 10;
/// The program, version and procedure the toy program calls back.
const CB_PROG: u32 = 0x4000_0042;
const CB_VERS: u32 = 1;
const CB_PROC: u32 = 7;
const MAX_ECHO: u32 = 1 << 20;
const MAX_RAW: u32 = 64;
/// Buffers of the toy program's pool, and their size.
const POOL_BUFFERS: usize = 8;
const POOL_BUF_LEN: usize = 128 << 10;

/// The toy program. Counts how many calls run at once, and oversized
/// arguments refused; POOL_ECHO and PAYLOAD_ECHO hold buffers of its pool.
struct Echo {
    running: AtomicUsize,
    max_running: AtomicUsize,
    oversized: AtomicUsize,
    executed: AtomicUsize,
    /// PAYLOAD_ECHO calls waiting for their payload right now.
    payload_waits: AtomicUsize,
    pool: BufferPool,
    /// What each CALL_BACK's callback came to, in the order they ended.
    callbacks: parking_lot::Mutex<Vec<Result<Vec<u8>, BackChannelError>>>,
    /// `execute_blocks` asked of PLACE calls so far.
    place_asks: AtomicUsize,
    /// The task each ECHO and SLOW_ECHO call ran on, by xid.
    tasks: parking_lot::Mutex<std::collections::HashMap<u32, Option<tokio::task::Id>>>,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            oversized: AtomicUsize::new(0),
            executed: AtomicUsize::new(0),
            payload_waits: AtomicUsize::new(0),
            pool: BufferPool::new(POOL_BUF_LEN, POOL_BUFFERS, Arc::new(Counters::default())),
            callbacks: Default::default(),
            place_asks: AtomicUsize::new(0),
            tasks: Default::default(),
        }
    }
}

impl Echo {
    /// Pool buffers held right now.
    fn buffers_out(&self) -> usize {
        POOL_BUFFERS - self.pool.available()
    }

    /// The task call `xid` ran on (`None`: a blocking thread).
    fn task_of(&self, xid: u32) -> Option<tokio::task::Id> {
        *self.tasks.lock().get(&xid).expect("the call ran")
    }

    /// Callbacks that ended with `error` so far.
    fn callbacks_failed(&self, error: &BackChannelError) -> usize {
        let callbacks = self.callbacks.lock();
        callbacks
            .iter()
            .filter(|c| c.as_ref() == Err(error))
            .count()
    }
}

struct EchoCall {
    xid: u32,
    delay: Duration,
    data: EchoData,
    /// A CALL_BACK: the callback's timeout.
    call_back: Option<Duration>,
    /// A PLACE call: `execute_blocks`' answers to it, counted
    /// (`asked`) and the last one (`blocks`).
    place: Option<Asked>,
}

#[derive(Default)]
struct Asked {
    asked: AtomicUsize,
    blocks: std::sync::atomic::AtomicBool,
}

/// What a CALL_BACK reply says of its callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallbackOutcome {
    Success = 0,
    TimedOut = 1,
    Closed = 2,
    TooManyOutstanding = 3,
    Refused = 4,
    Other = 5,
}

impl CallbackOutcome {
    fn of(result: &Result<Vec<u8>, BackChannelError>) -> Self {
        match result {
            Ok(_) => Self::Success,
            Err(BackChannelError::TimedOut) => Self::TimedOut,
            Err(BackChannelError::Closed) => Self::Closed,
            Err(BackChannelError::TooManyOutstanding) => Self::TooManyOutstanding,
            Err(BackChannelError::Refused(_)) => Self::Refused,
            Err(_) => Self::Other,
        }
    }

    fn from_u32(code: u32) -> Self {
        [
            Self::Success,
            Self::TimedOut,
            Self::Closed,
            Self::TooManyOutstanding,
            Self::Refused,
        ]
        .into_iter()
        .find(|c| *c as u32 == code)
        .unwrap_or(Self::Other)
    }
}

enum EchoData {
    Owned(Vec<u8>),
    /// The first `len` bytes of a pool buffer.
    Pooled(PooledBuf, usize),
}

impl ReplyPayload for EchoData {
    fn bytes(&self) -> &[u8] {
        match self {
            EchoData::Owned(v) => v,
            EchoData::Pooled(buf, len) => &buf[..*len],
        }
    }
}

impl Service for Echo {
    type Pending = EchoCall;

    fn holds_buffer(&self, call: &CallHeader, _args_len: Option<u32>) -> bool {
        matches!(call.proc_, PROC_POOL_ECHO | PROC_PAYLOAD_ECHO)
    }

    async fn receive<R: CallStream>(
        &self,
        conn: &ConnInfo,
        call: CallHeader,
        body: &mut RecordReader<R>,
    ) -> Result<Received<EchoCall>, RecordError> {
        let status = |s| Ok(Received::Reply(Reply::status(call.xid, s)));
        if call.prog != ECHO_PROG {
            return status(ReplyStatus::ProgUnavail);
        }
        if call.vers != ECHO_VERS {
            return status(ReplyStatus::ProgMismatch { low: 1, high: 1 });
        }
        let mut call_back = None;
        let delay_ms = match call.proc_ {
            PROC_NULL => return status(ReplyStatus::Success),
            PROC_SECURITY => {
                return Ok(Received::Run(EchoCall {
                    xid: call.xid,
                    delay: Duration::ZERO,
                    data: EchoData::Owned(conn.security().name().as_bytes().to_vec()),
                    call_back: None,
                    place: None,
                }));
            }
            PROC_CERTIFICATE => {
                let shown = conn.certificate().map(ToString::to_string);
                return Ok(Received::Run(EchoCall {
                    xid: call.xid,
                    delay: Duration::ZERO,
                    data: EchoData::Owned(shown.unwrap_or_default().into_bytes()),
                    call_back: None,
                    place: None,
                }));
            }
            PROC_ECHO => 0,
            PROC_PLACE => {
                return Ok(Received::Run(EchoCall {
                    xid: call.xid,
                    delay: Duration::ZERO,
                    data: EchoData::Owned(Vec::new()),
                    call_back: None,
                    place: Some(Asked::default()),
                }));
            }
            PROC_SLOW_ECHO => body.read_u32().await?,
            PROC_CALL_BACK => {
                let timeout_ms = body.read_u32().await?;
                call_back = Some(Duration::from_millis(u64::from(timeout_ms)));
                0
            }
            PROC_RAW_ECHO => {
                let mut data = Vec::new();
                body.read_to_end_bounded(&mut data, MAX_RAW).await?;
                return Ok(Received::Run(EchoCall {
                    xid: call.xid,
                    delay: Duration::ZERO,
                    data: EchoData::Owned(data),
                    call_back: None,
                    place: None,
                }));
            }
            PROC_POOL_ECHO | PROC_PAYLOAD_ECHO => {
                let len = body.read_u32().await? as usize;
                if len > POOL_BUF_LEN {
                    return status(ReplyStatus::GarbageArgs);
                }
                if call.proc_ == PROC_PAYLOAD_ECHO {
                    self.payload_waits.fetch_add(1, Ordering::SeqCst);
                    let waited = wait_for_payload(body, len).await;
                    self.payload_waits.fetch_sub(1, Ordering::SeqCst);
                    waited?;
                }
                let mut buf = self.pool.get().await?;
                body.read_exact(&mut buf[..len]).await?;
                return Ok(Received::Run(EchoCall {
                    xid: call.xid,
                    delay: Duration::ZERO,
                    data: EchoData::Pooled(buf, len),
                    call_back: None,
                    place: None,
                }));
            }
            _ => return status(ReplyStatus::ProcUnavail),
        };
        let len = body.read_u32().await?;
        if len > MAX_ECHO {
            return status(ReplyStatus::GarbageArgs);
        }
        let mut data = vec![0u8; len as usize];
        body.read_exact(&mut data).await?;
        let mut pad = [0u8; 3];
        body.read_exact(&mut pad[..pad_len(data.len())]).await?;
        Ok(Received::Run(EchoCall {
            xid: call.xid,
            delay: Duration::from_millis(u64::from(delay_ms)),
            data: EchoData::Owned(data),
            call_back,
            place: None,
        }))
    }

    fn execute_blocks(&self, call: &EchoCall) -> bool {
        let Some(asked) = &call.place else {
            return false;
        };
        let blocks = self.place_asks.fetch_add(1, Ordering::SeqCst) % 2 == 1;
        asked.asked.fetch_add(1, Ordering::SeqCst);
        asked.blocks.store(blocks, Ordering::SeqCst);
        blocks
    }

    fn reply_room(&self, call: &EchoCall) -> usize {
        // As a READ: room for its data.
        call.data.bytes().len()
    }

    fn note_oversized_args(&self) {
        self.oversized.fetch_add(1, Ordering::SeqCst);
    }

    async fn execute(
        self: Arc<Self>,
        conn: Arc<ConnInfo>,
        call: EchoCall,
        place: Place,
    ) -> Option<Reply> {
        if let Some(asked) = &call.place {
            let times = asked.asked.load(Ordering::SeqCst);
            let answered = if asked.blocks.load(Ordering::SeqCst) {
                Place::BlockingThread
            } else {
                Place::Task
            };
            let said = match place {
                _ if times != 1 => format!("asked {times} times"),
                _ if place != answered => format!("told {place:?}, answered {answered:?}"),
                Place::Task => "task".to_string(),
                Place::BlockingThread => "blocking".to_string(),
            };
            let mut enc = Encoder::new();
            reply::accepted_success(&mut enc, call.xid);
            enc.opaque_var(said.as_bytes());
            return Some(Reply::new(enc.into_vec()));
        }
        if let Some(timeout) = call.call_back {
            return Some(
                self.call_back(&conn, call.xid, call.data.bytes(), timeout)
                    .await,
            );
        }
        self.tasks.lock().insert(call.xid, tokio::task::try_id());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(call.delay).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.executed.fetch_add(1, Ordering::SeqCst);
        let mut enc = Encoder::new();
        reply::accepted_success(&mut enc, call.xid);
        enc.u32(call.data.bytes().len() as u32);
        Some(Reply::with_data(enc.into_vec(), Box::new(call.data)))
    }
}

impl Echo {
    /// Runs a CALL_BACK: calls the client back with `data` as opaque
    /// arguments and answers with what came of it.
    async fn call_back(&self, conn: &ConnInfo, xid: u32, data: &[u8], timeout: Duration) -> Reply {
        let mut args = Encoder::new();
        args.opaque_var(data);
        let result = match &conn.back_channel {
            Some(back) => {
                back.call(
                    CB_PROG,
                    CB_VERS,
                    CB_PROC,
                    &Credential::None,
                    args.as_slice(),
                    timeout,
                )
                .await
            }
            None => Err(BackChannelError::Closed),
        };
        let mut enc = Encoder::new();
        reply::accepted_success(&mut enc, xid);
        enc.u32(CallbackOutcome::of(&result) as u32);
        enc.opaque_var(result.as_deref().unwrap_or_default());
        self.callbacks.lock().push(result);
        Reply::new(enc.into_vec())
    }
}

fn echo_call(xid: u32, data: &[u8]) -> Vec<u8> {
    let mut msg = encode_call(xid, ECHO_PROG, ECHO_VERS, PROC_ECHO, &Credential::None);
    let mut enc = Encoder::from_vec(std::mem::take(&mut msg));
    enc.opaque_var(data);
    enc.into_vec()
}

fn proc_call(xid: u32, proc_: u32, data: &[u8]) -> Vec<u8> {
    let msg = encode_call(xid, ECHO_PROG, ECHO_VERS, proc_, &Credential::None);
    let mut enc = Encoder::from_vec(msg);
    enc.opaque_var(data);
    enc.into_vec()
}

/// A CALL_BACK whose callback carries `data` and may wait `timeout_ms`.
fn call_back_call(xid: u32, timeout_ms: u32, data: &[u8]) -> Vec<u8> {
    let msg = encode_call(xid, ECHO_PROG, ECHO_VERS, PROC_CALL_BACK, &Credential::None);
    let mut enc = Encoder::from_vec(msg);
    enc.u32(timeout_ms);
    enc.opaque_var(data);
    enc.into_vec()
}

fn slow_echo_call(xid: u32, delay_ms: u32, data: &[u8]) -> Vec<u8> {
    let msg = encode_call(xid, ECHO_PROG, ECHO_VERS, PROC_SLOW_ECHO, &Credential::None);
    let mut enc = Encoder::from_vec(msg);
    enc.u32(delay_ms);
    enc.opaque_var(data);
    enc.into_vec()
}

/// `msg` as one single-fragment record.
fn framed(msg: &[u8]) -> Vec<u8> {
    let mut out = record_mark(msg.len() as u32, true).to_vec();
    out.extend_from_slice(msg);
    out
}

/// `msg` as a record of `chunk`-byte fragments, with an empty fragment
/// after each one.
fn fragmented(msg: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in msg.chunks(chunk) {
        out.extend_from_slice(&record_mark(piece.len() as u32, false));
        out.extend_from_slice(piece);
        out.extend_from_slice(&record_mark(0, false));
    }
    out.extend_from_slice(&record_mark(0, true));
    out
}

/// A minimal RPC client over one TCP connection.
struct Client {
    reader: RecordReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        let (read, writer) = TcpStream::connect(addr).await.unwrap().into_split();
        Self {
            reader: RecordReader::new(read, 1 << 24),
            writer,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    /// The next reply: its header and the bytes after it.
    async fn reply(&mut self) -> (ReplyHeader, Vec<u8>) {
        let next = tokio::time::timeout(Duration::from_secs(10), self.reader.next_record());
        assert!(
            next.await.expect("reply in time").unwrap(),
            "connection closed"
        );
        let mut msg = Vec::new();
        self.reader.read_to_end(&mut msg).await.unwrap();
        let mut d = Decoder::new(&msg);
        let header = ReplyHeader::decode(&mut d).unwrap();
        let rest = d.rest().to_vec();
        (header, rest)
    }

    /// The next reply, which must be an echo: (xid, echoed data).
    async fn echo_reply(&mut self) -> (u32, Vec<u8>) {
        let (header, rest) = self.reply().await;
        assert_eq!(header.status, ReplyStatus::Success);
        let mut d = Decoder::new(&rest);
        let data = d.opaque_var(MAX_ECHO).unwrap().to_vec();
        d.finish().unwrap();
        (header.xid, data)
    }

    /// The next record, a call or a reply.
    async fn message(&mut self) -> Message {
        let next = tokio::time::timeout(Duration::from_secs(10), self.reader.next_record());
        assert!(
            next.await.expect("message in time").unwrap(),
            "connection closed"
        );
        let mut msg = Vec::new();
        self.reader.read_to_end(&mut msg).await.unwrap();
        let mut d = Decoder::new(&msg);
        if msg.get(4..8) == Some(&[0, 0, 0, 0]) {
            let header = CallHeader::decode(&mut d).unwrap();
            Message::Call(header, d.rest().to_vec())
        } else {
            let header = ReplyHeader::decode(&mut d).unwrap();
            Message::Reply(header, d.rest().to_vec())
        }
    }

    /// The next record, which must be the server's callback (CB_PROC of
    /// CB_PROG): its xid and the opaque data it carries.
    async fn callback(&mut self) -> (u32, Vec<u8>) {
        match self.message().await {
            Message::Call(header, args) => callback_of(&header, &args),
            Message::Reply(header, _) => panic!("reply {header:?} instead of a callback"),
        }
    }

    /// Answers callback `xid` with `results` as opaque data.
    async fn answer(&mut self, xid: u32, results: &[u8]) {
        let mut enc = Encoder::new();
        reply::accepted_success(&mut enc, xid);
        enc.opaque_var(results);
        self.send(&framed(enc.as_slice())).await;
    }

    /// The next record, which must be the reply to a CALL_BACK: its xid,
    /// what came of the callback, and the callback's results.
    async fn call_back_reply(&mut self) -> (u32, CallbackOutcome, Vec<u8>) {
        let (header, rest) = self.reply().await;
        call_back_outcome(&header, &rest)
    }

    /// Waits until the server closes the connection.
    async fn expect_closed(&mut self) {
        let next = tokio::time::timeout(Duration::from_secs(10), self.reader.next_record());
        match next.await.expect("close in time") {
            Ok(false) | Err(_) => {}
            Ok(true) => panic!("unexpected record instead of close"),
        }
    }
}

/// A record the server sent: a reply, or a call of its back channel.
enum Message {
    Call(CallHeader, Vec<u8>),
    Reply(ReplyHeader, Vec<u8>),
}

/// The xid and opaque data of a callback of the toy program, checked to be
/// one.
fn callback_of(header: &CallHeader, args: &[u8]) -> (u32, Vec<u8>) {
    assert_eq!(
        (header.prog, header.vers, header.proc_),
        (CB_PROG, CB_VERS, CB_PROC)
    );
    assert_eq!(header.cred, Credential::None);
    let mut d = Decoder::new(args);
    let data = d.opaque_var(MAX_ECHO).unwrap().to_vec();
    d.finish().unwrap();
    (header.xid, data)
}

/// What a CALL_BACK reply says: (xid, outcome, the opaque data the
/// callback's results hold, if it succeeded).
fn call_back_outcome(header: &ReplyHeader, rest: &[u8]) -> (u32, CallbackOutcome, Vec<u8>) {
    assert_eq!(header.status, ReplyStatus::Success);
    let mut d = Decoder::new(rest);
    let outcome = CallbackOutcome::from_u32(d.u32().unwrap());
    let mut results = d.opaque_var(MAX_ECHO).unwrap().to_vec();
    d.finish().unwrap();
    if outcome == CallbackOutcome::Success {
        let mut d = Decoder::new(&results);
        let data = d.opaque_var(MAX_ECHO).unwrap().to_vec();
        d.finish().unwrap();
        results = data;
    }
    (header.xid, outcome, results)
}

struct Server {
    addr: SocketAddr,
    echo: Arc<Echo>,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn start(limits: ConnLimits) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let echo = Arc::new(Echo::default());
    let (shutdown, rx) = oneshot::channel();
    let task = tokio::spawn(serve(listener, echo.clone(), limits, async {
        let _ = rx.await;
    }));
    Server {
        addr,
        echo,
        shutdown,
        task,
    }
}

#[tokio::test]
async fn echo_round_trip_with_padding() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    for (xid, data) in [(1, &b""[..]), (2, b"a"), (3, b"abcd"), (4, b"hello")] {
        c.send(&framed(&echo_call(xid, data))).await;
        assert_eq!(c.echo_reply().await, (xid, data.to_vec()));
    }
    // NULL answers from receive, without a task.
    let null = encode_call(5, ECHO_PROG, ECHO_VERS, PROC_NULL, &Credential::None);
    c.send(&framed(&null)).await;
    let (h, rest) = c.reply().await;
    assert_eq!((h.xid, h.status), (5, ReplyStatus::Success));
    assert!(rest.is_empty());
}

/// A call runs where `execute_blocks` said, asked once: a service whose
/// answer changes meanwhile (a WRITE's file pages cached, then not) must
/// not run blocking work on a task, where a few such calls waiting on a
/// lock held across an await stalled every runtime worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_where_execute_blocks_said_once() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut burst = Vec::new();
    for xid in 1..=8u32 {
        burst.extend(framed(&encode_call(
            xid,
            ECHO_PROG,
            ECHO_VERS,
            PROC_PLACE,
            &Credential::None,
        )));
    }
    c.send(&burst).await;
    let mut places = Vec::new();
    for _ in 0..8 {
        let (_, said) = c.echo_reply().await;
        places.push(String::from_utf8(said).unwrap());
    }
    places.sort();
    assert_eq!(places, [["blocking"; 4], ["task"; 4]].concat());
}

/// The same for calls the idle spin catches, one at a time: the loop
/// runs the ones that do not block itself, and asks no more than once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_call_runs_where_execute_blocks_said_once() {
    let (server, counters) = spinning_server(Duration::from_millis(200)).await;
    let addr = server.addr;
    elsewhere(async move {
        let mut c = Client::connect(addr).await;
        let mut places = Vec::new();
        for xid in 1..=8u32 {
            let call = encode_call(xid, ECHO_PROG, ECHO_VERS, PROC_PLACE, &Credential::None);
            c.send(&framed(&call)).await;
            let (_, said) = c.echo_reply().await;
            places.push(String::from_utf8(said).unwrap());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(counters.snapshot().spin_catches >= 7);
        places.sort();
        assert_eq!(places, [["blocking"; 4], ["task"; 4]].concat());
    })
    .await;
}

#[tokio::test]
async fn pipelined_calls_reply_in_completion_order() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut burst = framed(&slow_echo_call(1, 300, b"slow"));
    for xid in 2..=5u32 {
        burst.extend(framed(&echo_call(xid, format!("fast-{xid}").as_bytes())));
    }
    c.send(&burst).await;
    let mut order = Vec::new();
    for _ in 0..5 {
        let (xid, data) = c.echo_reply().await;
        let expected = if xid == 1 {
            b"slow".to_vec()
        } else {
            format!("fast-{xid}").into_bytes()
        };
        assert_eq!(data, expected);
        order.push(xid);
    }
    assert_eq!(
        order.last(),
        Some(&1),
        "slow call must finish last: {order:?}"
    );
    order.sort_unstable();
    assert_eq!(order, [1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn multi_fragment_call_and_large_payload() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let data: Vec<u8> = (0..1001u32).map(|i| i as u8).collect();
    // Fragments of 7 bytes split the header, the length and the payload.
    c.send(&fragmented(&echo_call(7, &data), 7)).await;
    assert_eq!(c.echo_reply().await, (7, data));
    let big = vec![0x5a; 300_000];
    c.send(&framed(&echo_call(8, &big))).await;
    assert_eq!(c.echo_reply().await, (8, big));
}

#[tokio::test]
async fn oversized_record_closes_only_that_connection() {
    let limits = ConnLimits {
        max_record: 4096,
        ..ConnLimits::default()
    };
    let server = start(limits).await;
    let mut good = Client::connect(server.addr).await;
    let mut bad = Client::connect(server.addr).await;
    // Only the record mark: the server must refuse without waiting for the body.
    bad.send(&record_mark(1 << 20, true)).await;
    bad.expect_closed().await;
    good.send(&framed(&echo_call(1, b"still here"))).await;
    assert_eq!(good.echo_reply().await, (1, b"still here".to_vec()));
    // A call just under the limit is fine; the sum of fragments counts.
    let msg = echo_call(2, &[1u8; 3000]);
    good.send(&fragmented(&msg, 1000)).await;
    assert_eq!(good.echo_reply().await.0, 2);
    let msg = echo_call(3, &[1u8; 4096]);
    good.send(&fragmented(&msg, 1000)).await;
    good.expect_closed().await;
}

#[tokio::test]
async fn program_errors_come_from_the_service() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let calls = [
        (
            encode_call(1, 999, 1, 0, &Credential::None),
            ReplyStatus::ProgUnavail,
        ),
        (
            encode_call(2, ECHO_PROG, 9, 0, &Credential::None),
            ReplyStatus::ProgMismatch { low: 1, high: 1 },
        ),
        (
            encode_call(3, ECHO_PROG, ECHO_VERS, 77, &Credential::None),
            ReplyStatus::ProcUnavail,
        ),
    ];
    for (msg, status) in calls {
        c.send(&framed(&msg)).await;
        assert_eq!(c.reply().await.0.status, status);
    }
}

#[tokio::test]
async fn short_arguments_get_garbage_args_and_the_connection_goes_on() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut msg = encode_call(1, ECHO_PROG, ECHO_VERS, PROC_ECHO, &Credential::None);
    msg.extend_from_slice(&100u32.to_be_bytes());
    msg.extend_from_slice(b"only ten b");
    c.send(&framed(&msg)).await;
    let (h, _) = c.reply().await;
    assert_eq!((h.xid, h.status), (1, ReplyStatus::GarbageArgs));
    c.send(&framed(&echo_call(2, b"next"))).await;
    assert_eq!(c.echo_reply().await, (2, b"next".to_vec()));
}

#[tokio::test]
async fn oversized_arguments_get_garbage_args_and_the_connection_goes_on() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let raw = |xid: u32, len: usize| {
        let mut msg = encode_call(xid, ECHO_PROG, ECHO_VERS, PROC_RAW_ECHO, &Credential::None);
        msg.extend(std::iter::repeat_n(0x61, len));
        msg
    };
    // Exactly the limit, in fragments: served.
    c.send(&fragmented(&raw(1, MAX_RAW as usize), 10)).await;
    assert_eq!(c.echo_reply().await, (1, vec![0x61; MAX_RAW as usize]));
    // One byte over, and 1 MiB, in one fragment or many: GARBAGE_ARGS.
    for (xid, len, chunk) in [(2, 65, None), (3, 1 << 20, None), (4, 1000, Some(30))] {
        let msg = raw(xid, len);
        let bytes = chunk.map_or_else(|| framed(&msg), |n| fragmented(&msg, n));
        c.send(&bytes).await;
        let (h, rest) = c.reply().await;
        assert_eq!((h.xid, h.status), (xid, ReplyStatus::GarbageArgs));
        assert!(rest.is_empty());
    }
    // The record mark and call header first, the rest later: refused on
    // the mark, and the rest skipped when it comes.
    let msg = raw(5, 100_000);
    let head = 40 + 4;
    c.send(&framed(&msg)[..head]).await;
    wait_until_async(
        || server.echo.oversized.load(Ordering::SeqCst) == 4,
        Duration::from_secs(10),
        "the call refused on its record mark",
    )
    .await;
    c.send(&framed(&msg)[head..]).await;
    let (h, _) = c.reply().await;
    assert_eq!((h.xid, h.status), (5, ReplyStatus::GarbageArgs));
    c.send(&framed(&echo_call(6, b"after"))).await;
    assert_eq!(c.echo_reply().await, (6, b"after".to_vec()));
    assert_eq!(server.echo.oversized.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn wrong_rpc_version_gets_rpc_mismatch() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut msg = echo_call(11, b"x");
    msg[8..12].copy_from_slice(&3u32.to_be_bytes());
    c.send(&framed(&msg)).await;
    let (h, rest) = c.reply().await;
    assert_eq!(h.xid, 11);
    assert_eq!(h.status, ReplyStatus::RpcMismatch { low: 2, high: 2 });
    assert!(rest.is_empty());
    c.send(&framed(&echo_call(12, b"y"))).await;
    assert_eq!(c.echo_reply().await, (12, b"y".to_vec()));
}

#[tokio::test]
async fn malformed_auth_sys_gets_auth_error() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut enc = Encoder::new();
    for w in [21u32, 0, 2, ECHO_PROG, ECHO_VERS, PROC_ECHO, 1] {
        enc.u32(w);
    }
    // AUTH_SYS body with 17 groups: one more than RFC 5531 allows.
    let mut body = Encoder::new();
    body.u32(0);
    body.string(b"host");
    body.u32(0);
    body.u32(0);
    body.u32(17);
    for g in 0..17 {
        body.u32(g);
    }
    enc.opaque_var(body.as_slice());
    enc.u32(0);
    enc.u32(0);
    enc.opaque_var(b"args");
    c.send(&framed(enc.as_slice())).await;
    let (h, _) = c.reply().await;
    assert_eq!(h.xid, 21);
    assert_eq!(h.status, ReplyStatus::AuthError(AuthStat::BadCred));
    c.send(&framed(&echo_call(22, b"z"))).await;
    assert_eq!(c.echo_reply().await, (22, b"z".to_vec()));
}

#[tokio::test]
async fn a_reply_message_closes_the_connection() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut enc = Encoder::new();
    reply::accepted_success(&mut enc, 1);
    c.send(&framed(enc.as_slice())).await;
    c.expect_closed().await;
}

/// A reply `xid` with status `status` and nothing after the header.
fn bare_reply(xid: u32, status: ReplyStatus) -> Vec<u8> {
    framed(&Reply::status(xid, status).header)
}

#[tokio::test]
async fn a_call_calls_back_on_its_own_connection() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    c.send(&framed(&call_back_call(1, 10_000, b"ping"))).await;
    let (cb, data) = c.callback().await;
    assert_eq!(data, b"ping");
    c.answer(cb, b"pong").await;
    assert_eq!(
        c.call_back_reply().await,
        (1, CallbackOutcome::Success, b"pong".to_vec())
    );
    // A callback answered with an error status: the caller is told, and
    // the next callback has another xid.
    c.send(&framed(&call_back_call(2, 10_000, b"again"))).await;
    let (cb2, data) = c.callback().await;
    assert_eq!(data, b"again");
    assert_ne!(cb2, cb);
    c.send(&bare_reply(cb2, ReplyStatus::ProcUnavail)).await;
    assert_eq!(
        c.call_back_reply().await,
        (2, CallbackOutcome::Refused, Vec::new())
    );
    assert_eq!(
        server.echo.callbacks.lock()[1],
        Err(BackChannelError::Refused(ReplyStatus::ProcUnavail))
    );
    // The connection serves calls as before.
    c.send(&framed(&echo_call(3, b"after"))).await;
    assert_eq!(c.echo_reply().await, (3, b"after".to_vec()));
}

#[tokio::test]
async fn callbacks_interleave_with_the_clients_calls() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let mut burst = framed(&call_back_call(1, 10_000, b"first"));
    burst.extend(framed(&call_back_call(2, 10_000, b"second")));
    c.send(&burst).await;
    let mut callbacks = [c.callback().await, c.callback().await];
    callbacks.sort_by(|a, b| a.1.cmp(&b.1));
    let [(first, _), (second, _)] = callbacks;
    // The client calls the server before it answers, and gets its reply
    // while both callbacks wait.
    c.send(&framed(&echo_call(3, b"meanwhile"))).await;
    assert_eq!(c.echo_reply().await, (3, b"meanwhile".to_vec()));
    // Answered in the other order, each reply goes to its own caller. The
    // answer to the second is sent in fragments, with a call between the
    // two answers.
    let mut enc = Encoder::new();
    reply::accepted_success(&mut enc, second);
    enc.opaque_var(b"for the second");
    let mut bytes = fragmented(enc.as_slice(), 5);
    bytes.extend(framed(&echo_call(4, b"between")));
    c.send(&bytes).await;
    assert_eq!(
        c.call_back_reply().await,
        (2, CallbackOutcome::Success, b"for the second".to_vec())
    );
    assert_eq!(c.echo_reply().await, (4, b"between".to_vec()));
    c.answer(first, b"for the first").await;
    assert_eq!(
        c.call_back_reply().await,
        (1, CallbackOutcome::Success, b"for the first".to_vec())
    );
}

#[tokio::test]
async fn an_unanswered_callback_times_out_and_the_connection_goes_on() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    c.send(&framed(&call_back_call(1, 200, b"ignored"))).await;
    let (cb, _) = c.callback().await;
    assert_eq!(
        c.call_back_reply().await,
        (1, CallbackOutcome::TimedOut, Vec::new())
    );
    c.send(&framed(&echo_call(2, b"still here"))).await;
    assert_eq!(c.echo_reply().await, (2, b"still here".to_vec()));
    // The answer, too late, is dropped; the connection goes on.
    c.answer(cb, b"late").await;
    c.send(&framed(&echo_call(3, b"and here"))).await;
    assert_eq!(c.echo_reply().await, (3, b"and here".to_vec()));
    assert_eq!(server.echo.callbacks_failed(&BackChannelError::TimedOut), 1);
}

#[tokio::test]
async fn an_oversized_answer_is_skipped_and_the_connection_goes_on() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    c.send(&framed(&call_back_call(1, 10_000, b"small"))).await;
    let (cb, _) = c.callback().await;
    // Over the 64 KiB a callback's reply may take, in fragments.
    let mut enc = Encoder::new();
    reply::accepted_success(&mut enc, cb);
    enc.opaque_var(&vec![7u8; 70 << 10]);
    c.send(&fragmented(enc.as_slice(), 16 << 10)).await;
    assert_eq!(
        c.call_back_reply().await,
        (1, CallbackOutcome::Other, Vec::new())
    );
    assert_eq!(
        server
            .echo
            .callbacks_failed(&BackChannelError::ReplyTooLarge),
        1
    );
    c.send(&framed(&echo_call(2, b"next"))).await;
    assert_eq!(c.echo_reply().await, (2, b"next".to_vec()));
}

#[tokio::test]
async fn a_closed_connection_wakes_its_callers_at_once() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    // A minute to answer; the client closes instead.
    c.send(&framed(&call_back_call(1, 60_000, b"bye"))).await;
    c.callback().await;
    drop(c);
    wait_until_async(
        || server.echo.callbacks_failed(&BackChannelError::Closed) == 1,
        Duration::from_secs(10),
        "the caller to learn the connection closed",
    )
    .await;
}

#[tokio::test]
async fn a_reply_to_no_callback_still_closes_the_connection() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    c.send(&framed(&call_back_call(1, 60_000, b"waiting")))
        .await;
    let (cb, _) = c.callback().await;
    // A reply, but not to the callback waiting.
    c.send(&bare_reply(cb ^ 0x8000_0000, ReplyStatus::Success))
        .await;
    c.expect_closed().await;
    wait_until_async(
        || server.echo.callbacks_failed(&BackChannelError::Closed) == 1,
        Duration::from_secs(10),
        "the caller to learn the connection closed",
    )
    .await;
}

#[tokio::test]
async fn callbacks_waiting_are_bounded_per_connection() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    let calls = MAX_OUTSTANDING_CALLS as u32 + 1;
    let mut burst = Vec::new();
    for xid in 0..calls {
        burst.extend(framed(&call_back_call(xid, 10_000, &xid.to_be_bytes())));
    }
    c.send(&burst).await;
    // Every call but one calls back; that one is refused.
    let mut callbacks = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..calls {
        match c.message().await {
            Message::Call(header, args) => callbacks.push(callback_of(&header, &args)),
            Message::Reply(header, rest) => refused.push(call_back_outcome(&header, &rest)),
        }
    }
    assert_eq!(callbacks.len(), MAX_OUTSTANDING_CALLS);
    let [(refused_xid, outcome, _)] = refused[..] else {
        panic!("{refused:?}");
    };
    assert_eq!(outcome, CallbackOutcome::TooManyOutstanding);
    // Answered, they free their places.
    for (cb, data) in &callbacks {
        c.answer(*cb, data).await;
    }
    for _ in 0..MAX_OUTSTANDING_CALLS {
        let (xid, outcome, results) = c.call_back_reply().await;
        assert_eq!(outcome, CallbackOutcome::Success);
        assert_eq!(results, xid.to_be_bytes());
        assert_ne!(xid, refused_xid);
    }
    c.send(&framed(&call_back_call(100, 10_000, b"room again")))
        .await;
    let (cb, _) = c.callback().await;
    c.answer(cb, b"ok").await;
    assert_eq!(
        c.call_back_reply().await,
        (100, CallbackOutcome::Success, b"ok".to_vec())
    );
}

#[tokio::test]
async fn in_flight_calls_are_bounded_per_connection() {
    let limits = ConnLimits {
        max_in_flight: 2,
        ..ConnLimits::default()
    };
    let server = start(limits).await;
    let mut c = Client::connect(server.addr).await;
    let mut burst = Vec::new();
    for xid in 0..6 {
        burst.extend(framed(&slow_echo_call(xid, 100, b"w")));
    }
    c.send(&burst).await;
    let mut xids: Vec<u32> = Vec::new();
    for _ in 0..6 {
        xids.push(c.echo_reply().await.0);
    }
    xids.sort_unstable();
    assert_eq!(xids, [0, 1, 2, 3, 4, 5]);
    assert_eq!(server.echo.max_running.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn shutdown_lets_calls_in_flight_reply() {
    let server = start(ConnLimits::default()).await;
    let mut c = Client::connect(server.addr).await;
    c.send(&framed(&slow_echo_call(1, 200, b"late"))).await;
    // The call started before the shutdown.
    wait_until_async(
        || server.echo.running.load(Ordering::SeqCst) == 1,
        Duration::from_secs(10),
        "the call to start",
    )
    .await;
    server.shutdown.send(()).unwrap();
    assert_eq!(c.echo_reply().await, (1, b"late".to_vec()));
    c.expect_closed().await;
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("serve returns after shutdown")
        .unwrap();
}

#[tokio::test]
async fn serve_connection_reports_why_it_ended() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut c = Client::connect(addr).await;
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
    let limits = ConnLimits {
        max_record: 100,
        ..ConnLimits::default()
    };
    let task = tokio::spawn(serve_connection(
        Arc::new(Echo::default()),
        stream,
        conn,
        limits,
    ));
    c.send(&record_mark(101, true)).await;
    let end = task.await.unwrap();
    assert!(
        matches!(
            end,
            ConnEnd::RecordTooLarge {
                size: 101,
                max: 100
            }
        ),
        "{end}"
    );
}

/// How a connection ends when its client, having sent `calls` and read
/// the reply to the first, resets it (SO_LINGER 0, then close).
async fn end_after_reset(calls: &[u8]) -> ConnEnd {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
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
    let task = tokio::spawn(serve_connection(
        Arc::new(Echo::default()),
        stream,
        conn,
        ConnLimits::default(),
    ));
    // One small write: on loopback the server reads it whole, so once the
    // first reply is back it holds whatever followed the first call.
    client.write_all(calls).await.unwrap();
    let mut reader = RecordReader::new(&mut client, 1 << 20);
    assert!(reader.next_record().await.unwrap(), "a reply");
    drop(reader);
    rustix::net::sockopt::set_socket_linger(&client, Some(Duration::ZERO)).unwrap();
    drop(client);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the connection ends")
        .unwrap()
}

#[tokio::test]
async fn a_reset_between_calls_is_an_ordinary_end_and_one_inside_a_call_is_not() {
    let end = end_after_reset(&framed(&echo_call(1, b"x"))).await;
    assert!(matches!(end, ConnEnd::PeerReset(_)), "{end}");
    assert!(end.is_unremarkable(), "{end}");

    let mut calls = framed(&echo_call(1, b"x"));
    let second = framed(&echo_call(2, b"cut short"));
    calls.extend_from_slice(&second[..second.len() / 2]);
    let end = end_after_reset(&calls).await;
    assert!(
        matches!(end, ConnEnd::ReadError(_) | ConnEnd::Truncated),
        "{end}"
    );
    assert!(!end.is_unremarkable(), "{end}");
}

#[test]
fn reply_record_layout_survives_partial_writes() {
    // A writer that takes at most 3 bytes per call, and refuses (would
    // block) every other call. Also returns how many slices the first
    // call was given.
    let trickle = |reply: &Reply| {
        let mut out = Vec::new();
        let mut sent = 0;
        let mut refuse = false;
        let mut rounds = 0;
        let mut first_slices = None;
        loop {
            let done = write_without_waiting(reply, &mut sent, |slices| {
                first_slices.get_or_insert(slices.len());
                refuse = !refuse;
                if refuse {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                let mut n = 0;
                for s in slices {
                    let take = (3 - n).min(s.len());
                    out.extend_from_slice(&s[..take]);
                    n += take;
                    if n == 3 {
                        break;
                    }
                }
                Ok(n)
            })
            .unwrap();
            assert_eq!(sent, out.len());
            rounds += 1;
            if done {
                return (out, rounds, first_slices.unwrap());
            }
        }
    };
    // Without trailer (every NFSv3 reply): mark, header, payload, padding,
    // and no slice for the empty trailer.
    let reply = Reply::with_data(vec![1, 2, 3, 4, 5, 6, 7, 8], Box::new(b"abcde".to_vec()));
    let (bytes, rounds, slices) = trickle(&reply);
    let mut expected = record_mark(16, true).to_vec();
    expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    expected.extend_from_slice(b"abcde\0\0\0");
    assert_eq!(bytes, expected);
    assert_eq!(slices, 4);
    assert!(
        rounds > 1,
        "the writer would block: resumed from where it was"
    );

    let (bytes, _, _) = trickle(&Reply::new(vec![9; 4]));
    assert_eq!(bytes, [0x80, 0, 0, 4, 9, 9, 9, 9]);

    // With a trailer: it follows the payload's padding, inside the record.
    let reply = Reply::with_data(vec![1, 2, 3, 4, 5, 6, 7, 8], Box::new(b"abcde".to_vec()))
        .with_trailer(vec![0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6]);
    let (bytes, _, slices) = trickle(&reply);
    let mut expected = record_mark(22, true).to_vec();
    expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    expected.extend_from_slice(b"abcde\0\0\0");
    expected.extend_from_slice(&[0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6]);
    assert_eq!(bytes, expected);
    assert_eq!(slices, 5);

    // A trailer without payload follows the header, with no padding.
    let reply = Reply::new(vec![9; 4]).with_trailer(vec![7; 5]);
    let (bytes, _, _) = trickle(&reply);
    assert_eq!(bytes, [0x80, 0, 0, 9, 9, 9, 9, 9, 7, 7, 7, 7, 7]);
}

#[test]
fn prog_mismatch_names_the_versions_served() {
    let reply = Reply::only_versions(7, 3, 4);
    assert!(reply.data.is_none() && reply.trailer.is_empty());
    let mut dec = Decoder::new(&reply.header);
    let header = ReplyHeader::decode(&mut dec).unwrap();
    assert_eq!(header.xid, 7);
    assert_eq!(header.status, ReplyStatus::ProgMismatch { low: 3, high: 4 });
    assert_eq!(
        Reply::only_version(7, 3).header,
        Reply::status(7, ReplyStatus::ProgMismatch { low: 3, high: 3 }).header
    );
}

/// Waits until the echo program has run calls and then runs no more for
/// 100 ms (its connections are no longer served); returns how many it ran.
async fn executed_stops_growing(echo: &Echo) -> usize {
    let mut last = (usize::MAX, tokio::time::Instant::now());
    wait_until_async(
        || {
            let now = echo.executed.load(Ordering::SeqCst);
            if now != last.0 {
                last = (now, tokio::time::Instant::now());
            }
            now > 0 && last.1.elapsed() >= Duration::from_millis(100)
        },
        Duration::from_secs(10),
        "the server to stop running calls",
    )
    .await;
    last.0
}

#[tokio::test]
async fn stalled_record_is_dropped_and_its_buffer_returned() {
    let limits = ConnLimits {
        stall_timeout: Duration::from_millis(300),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    // A call that takes its buffer before its data, then stops half-way.
    let mut stalled = Client::connect(server.addr).await;
    let record = framed(&proc_call(1, PROC_POOL_ECHO, &[7u8; 10_000]));
    stalled.send(&record[..5000]).await;
    wait_until_async(
        || server.echo.buffers_out() == 1,
        Duration::from_secs(2),
        "the stalled call to take its buffer",
    )
    .await;
    // A record that keeps coming, more slowly than the stall timeout in
    // total but never pausing that long, is served.
    let mut slow = Client::connect(server.addr).await;
    let record = framed(&echo_call(2, &[3u8; 100]));
    for piece in record.chunks(10) {
        slow.send(piece).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(slow.echo_reply().await, (2, vec![3u8; 100]));
    stalled.expect_closed().await;
    wait_until_async(
        || server.echo.buffers_out() == 0,
        Duration::from_secs(2),
        "the stalled call's buffer back",
    )
    .await;
    assert_eq!(counters.snapshot().stalled, 1);
    // An idle connection is no stalled record.
    slow.send(&framed(&echo_call(3, b"still"))).await;
    assert_eq!(slow.echo_reply().await, (3, b"still".to_vec()));
}

#[tokio::test]
async fn stalled_payload_holds_no_buffer() {
    let limits = ConnLimits {
        stall_timeout: Duration::from_millis(500),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let record = framed(&proc_call(1, PROC_PAYLOAD_ECHO, &data));
    // Head and part of the payload, then a pause shorter than the stall
    // timeout: no buffer is taken meanwhile, and the call is served when
    // the rest comes.
    let mut late = Client::connect(server.addr).await;
    late.send(&record[..60_000]).await;
    let mut stalled = Client::connect(server.addr).await;
    stalled.send(&record[..60_000]).await;
    wait_until_async(
        || server.echo.payload_waits.load(Ordering::SeqCst) == 2,
        Duration::from_secs(10),
        "both calls to wait for their payloads",
    )
    .await;
    // The pause is what is tested (a wait that took a buffer after a
    // recheck or two would show only after a while), so it is a fixed
    // one: half the stall timeout.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(server.echo.buffers_out(), 0);
    late.send(&record[60_000..]).await;
    assert_eq!(late.echo_reply().await, (1, data.clone()));
    // The other never sends the rest: dropped after the stall timeout,
    // without ever having held a buffer.
    stalled.expect_closed().await;
    assert_eq!(counters.snapshot().stalled, 1);
    assert_eq!(server.echo.buffers_out(), 0);
    // A payload that is there at once takes the fast path.
    late.send(&framed(&proc_call(2, PROC_PAYLOAD_ECHO, &data)))
        .await;
    assert_eq!(late.echo_reply().await, (2, data));
}

/// A peer that never read a reply gets about one large reply's worth of
/// calls run (the send buffer's room opens as the peer takes bytes), not
/// a send buffer's worth; one that reads gets every call run.
#[tokio::test]
async fn a_peer_that_never_reads_gets_little_room_and_a_reader_all() {
    let limits = ConnLimits::default();
    let counters = limits.counters.clone();
    let server = start(limits).await;
    let call = |xid| framed(&echo_call(xid, &[0x44; 256 << 10]));
    let deaf = TcpStream::connect(server.addr).await.unwrap();
    let (_unread, mut writer) = deaf.into_split();
    // Sends until the server stops reading calls (the send blocks).
    let sender = tokio::spawn(async move {
        for xid in 0..40 {
            if writer.write_all(&call(xid)).await.is_err() {
                break;
            }
        }
    });
    executed_stops_growing(&server.echo).await;
    // 1 MiB of room and what the client's receive buffer took: a few
    // 256 KiB replies. (A send buffer's worth, 4 MiB, would be 16 or more.)
    let deaf_calls = server.echo.executed.load(Ordering::SeqCst);
    assert!(
        deaf_calls <= 8,
        "{deaf_calls} calls run for a peer that reads nothing {:?}",
        counters.snapshot()
    );
    // A client that reads its replies while it sends its calls.
    let (read, mut writer) = TcpStream::connect(server.addr).await.unwrap().into_split();
    let calls = tokio::spawn(async move {
        for xid in 100..140 {
            writer.write_all(&call(xid)).await.unwrap();
        }
        writer
    });
    let mut replies = RecordReader::new(read, 1 << 24);
    for _ in 100..140 {
        let next = tokio::time::timeout(Duration::from_secs(10), replies.next_record());
        assert!(next.await.expect("reply in time").unwrap());
        let mut msg = Vec::new();
        replies.read_to_end(&mut msg).await.unwrap();
        assert!(msg.len() > 256 << 10, "{}", msg.len());
    }
    drop(calls.await.unwrap());
    sender.abort();
}

/// A client with many large READs outstanding has as many run at once as
/// its buffer shares allow: the send buffer holds all their replies, so
/// reserving room for them does not hold the calls back (with room for
/// four, sequential 1 MiB reads kept the device at under two requests).
#[tokio::test]
async fn every_buffer_share_can_have_its_large_call_running() {
    let share = 8;
    let limits = ConnLimits {
        buffer_share: share,
        ..ConnLimits::default()
    };
    let server = start(limits).await;
    let mut c = Client::connect(server.addr).await;
    let data = vec![0x5a; 900 << 10];
    // First the client shows that it reads its replies: room is earned.
    for xid in 0..share as u32 {
        c.send(&framed(&echo_call(xid, &data))).await;
        assert_eq!(c.echo_reply().await, (xid, data.clone()));
    }
    for xid in 0..share as u32 {
        c.send(&framed(&slow_echo_call(xid, 500, &data))).await;
    }
    for _ in 0..share {
        assert_eq!(c.echo_reply().await.1, data);
    }
    assert_eq!(server.echo.max_running.load(Ordering::SeqCst), share);
}

#[tokio::test]
async fn connection_not_reading_replies_stops_being_served_and_holds_its_share() {
    let share = 2;
    let limits = ConnLimits {
        buffer_share: share,
        reply_timeout: Duration::from_secs(1),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    // A small receive buffer on the client, so its replies back up soon.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 << 10).unwrap();
    let stream = socket.connect(server.addr).await.unwrap();
    let (_unread, mut writer) = stream.into_split();
    let call = framed(&proc_call(1, PROC_POOL_ECHO, &[0x33; 100 << 10]));
    // Sends calls until the server stops reading them (the send blocks).
    let sender = tokio::spawn(async move {
        for _ in 0..10_000 {
            if writer.write_all(&call).await.is_err() {
                break;
            }
        }
    });
    // Served for a while, then no more. (That none runs later cannot be
    // waited for: 300 ms more, many calls' time on loopback, stand for it.)
    let last = executed_stops_growing(&server.echo).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.echo.executed.load(Ordering::SeqCst), last);
    assert!(
        server.echo.buffers_out() <= share,
        "{} buffers held, share {share}",
        server.echo.buffers_out()
    );
    // Others are served meanwhile.
    let mut other = Client::connect(server.addr).await;
    other
        .send(&framed(&proc_call(2, PROC_POOL_ECHO, b"other")))
        .await;
    assert_eq!(other.echo_reply().await, (2, b"other".to_vec()));
    // Closed after the reply timeout, its buffers back.
    wait_until_async(
        || counters.snapshot().unread_replies == 1,
        Duration::from_secs(5),
        "the connection closed for its unread replies",
    )
    .await;
    wait_until_async(
        || server.echo.buffers_out() == 0,
        Duration::from_secs(2),
        "its buffers back",
    )
    .await;
    assert!(counters.snapshot().share_delays > 0);
    sender.abort();
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once() {
    let limits = ConnLimits {
        max_connections: 2,
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    for (c, xid) in [(&mut a, 1), (&mut b, 2)] {
        c.send(&framed(&echo_call(xid, b"in"))).await;
        assert_eq!(c.echo_reply().await, (xid, b"in".to_vec()));
    }
    let mut over = Client::connect(server.addr).await;
    over.expect_closed().await;
    assert_eq!(counters.snapshot().refused, 1);
    assert_eq!(counters.snapshot().open, 2);
    drop(a);
    wait_until_async(
        || counters.snapshot().open == 1,
        Duration::from_secs(5),
        "one connection open",
    )
    .await;
    let mut c = Client::connect(server.addr).await;
    c.send(&framed(&echo_call(3, b"room again"))).await;
    assert_eq!(c.echo_reply().await, (3, b"room again".to_vec()));
}

#[tokio::test]
async fn at_the_cap_the_quietest_connection_makes_room() {
    let limits = ConnLimits {
        max_connections: 3,
        evict_after: Duration::from_millis(300),
        stall_timeout: Duration::from_millis(400),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    let mut quiet = Client::connect(server.addr).await;
    quiet.send(&framed(&echo_call(1, b"once"))).await;
    assert_eq!(quiet.echo_reply().await, (1, b"once".to_vec()));
    let mut busy = Client::connect(server.addr).await;
    busy.send(&framed(&slow_echo_call(2, 3000, b"long"))).await;
    let mut chatty = Client::connect(server.addr).await;
    // Too soon: nobody has been quiet for 300 ms.
    let mut early = Client::connect(server.addr).await;
    early.expect_closed().await;
    assert_eq!(counters.snapshot().refused, 1);
    for xid in 10..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        chatty.send(&framed(&echo_call(xid, b"hi"))).await;
        assert_eq!(chatty.echo_reply().await, (xid, b"hi".to_vec()));
    }
    // `quiet` has been, for a second; `busy` has a call running and
    // `chatty` calls every 100 ms.
    let mut new = Client::connect(server.addr).await;
    new.send(&framed(&echo_call(3, b"room"))).await;
    assert_eq!(new.echo_reply().await, (3, b"room".to_vec()));
    quiet.expect_closed().await;
    assert_eq!(counters.snapshot().evicted, 1);
    assert_eq!(busy.echo_reply().await, (2, b"long".to_vec()));
    chatty.send(&framed(&echo_call(30, b"still"))).await;
    assert_eq!(chatty.echo_reply().await, (30, b"still".to_vec()));
    wait_until_async(
        || counters.snapshot().open == 3,
        Duration::from_secs(5),
        "three connections open",
    )
    .await;
}

#[tokio::test]
async fn idle_connections_are_closed_but_not_while_a_call_runs() {
    let limits = ConnLimits {
        idle_timeout: Duration::from_millis(300),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    let mut idle = Client::connect(server.addr).await;
    let mut busy = Client::connect(server.addr).await;
    busy.send(&framed(&slow_echo_call(1, 1000, b"long"))).await;
    idle.expect_closed().await;
    assert_eq!(counters.snapshot().idle, 1);
    assert_eq!(busy.echo_reply().await, (1, b"long".to_vec()));
    busy.expect_closed().await;
    assert_eq!(counters.snapshot().idle, 2);
}

#[tokio::test]
async fn payload_already_in_the_read_buffer_is_not_waited_for() {
    // A small WRITE-like call arrives whole in one segment: the record
    // reader's buffer takes it all, so nothing of its payload is left in
    // the socket. Waiting for the payload there would wait for the next
    // call's bytes, or until the stall timeout dropped the connection.
    let limits = ConnLimits {
        stall_timeout: Duration::from_secs(30),
        ..ConnLimits::default()
    };
    let server = start(limits).await;
    let mut c = Client::connect(server.addr).await;
    let data = vec![5u8; 4000];
    c.send(&framed(&proc_call(1, PROC_PAYLOAD_ECHO, &data)))
        .await;
    let reply = tokio::time::timeout(Duration::from_secs(5), c.echo_reply()).await;
    assert_eq!(reply.expect("answered without waiting"), (1, data));
}

/// Calls `n` echoes one at a time, `gap` apart, checking each reply.
async fn one_at_a_time(c: &mut Client, first_xid: u32, n: u32, gap: Duration) {
    for xid in first_xid..first_xid + n {
        let data = format!("call {xid}");
        c.send(&framed(&echo_call(xid, data.as_bytes()))).await;
        assert_eq!(c.echo_reply().await, (xid, data.into_bytes()));
        tokio::time::sleep(gap).await;
    }
}

/// A server whose idle spin lasts `idle_spin`, and its counters.
async fn spinning_server(idle_spin: Duration) -> (Server, Arc<NetCounters>) {
    let limits = ConnLimits {
        idle_spin,
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    (start(limits).await, counters)
}

/// Runs `f` on a runtime and a thread of its own: clients that must not
/// depend on the server's runtime, one of whose workers a spin holds (its
/// I/O driver may then go unpolled for up to `idle_spin`).
async fn elsewhere<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_spins_for_the_next_call_and_a_busy_one_does_not() {
    // A spin far longer than the gaps between calls, so that every call
    // after the first is caught by one, however slow this machine is.
    let spin = Duration::from_millis(200);
    let (server, counters) = spinning_server(spin).await;
    let (addr, echo) = (server.addr, server.echo.clone());
    elsewhere(async move {
        let mut a = Client::connect(addr).await;
        one_at_a_time(&mut a, 1, 20, Duration::from_millis(1)).await;
        let idle = counters.snapshot();
        assert!(idle.spin_catches >= 19, "{idle:?}");
        assert!(idle.idle_spins >= idle.spin_catches, "{idle:?}");

        // Two calls at a time: no spin after them (the first burst may be
        // caught by the spin still going after the last single call).
        let before = counters.snapshot();
        for xid in (100..110).step_by(2) {
            let mut burst = framed(&slow_echo_call(xid, 5, b"first"));
            burst.extend(framed(&echo_call(xid + 1, b"second")));
            a.send(&burst).await;
            let mut got = [a.echo_reply().await.0, a.echo_reply().await.0];
            got.sort_unstable();
            assert_eq!(got, [xid, xid + 1]);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let pipelined = counters.snapshot();
        assert!(
            pipelined.spin_catches <= before.spin_catches + 1,
            "{before:?} {pipelined:?}"
        );

        // A call in flight on another connection: no connection spins (the
        // CPU may be needed), and the replies still come.
        // (Read once the spin of `a` ends: a spin holds its runtime
        // worker, and the runtime may poll no other socket meanwhile.)
        let mut b = Client::connect(addr).await;
        b.send(&framed(&slow_echo_call(100, 3000, b"slow"))).await;
        wait_until_async(
            || echo.running.load(Ordering::SeqCst) == 1,
            Duration::from_secs(10),
            "the slow call to run",
        )
        .await;
        // No counter shows the spin of `a` end; it lasts `spin` at most.
        tokio::time::sleep(2 * spin + Duration::from_millis(100)).await;
        let before = counters.snapshot();
        one_at_a_time(&mut a, 21, 10, Duration::from_millis(1)).await;
        let busy = counters.snapshot();
        assert_eq!(busy.idle_spins, before.idle_spins, "{before:?} {busy:?}");
        assert_eq!(busy.spin_catches, before.spin_catches);
        assert_eq!(b.echo_reply().await, (100, b"slow".to_vec()));

        // Idle again: spins again.
        one_at_a_time(&mut a, 31, 5, Duration::from_millis(1)).await;
        assert!(counters.snapshot().spin_catches >= busy.spin_catches + 4);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_spin_catches_runs_on_the_reading_loop_and_calls_behind_it_as_tasks() {
    let (server, counters) = spinning_server(Duration::from_millis(200)).await;
    let (addr, echo) = (server.addr, server.echo.clone());
    elsewhere(async move {
        // One call at a time: those the spin caught ran on one task, the
        // connection's (its reading loop), not a task each.
        let mut a = Client::connect(addr).await;
        one_at_a_time(&mut a, 1, 20, Duration::from_millis(1)).await;
        let caught = counters.snapshot().spin_catches;
        assert!(caught >= 19, "{caught}");
        let mut on: std::collections::HashMap<tokio::task::Id, u64> = Default::default();
        for xid in 1..=20 {
            *on.entry(echo.task_of(xid).expect("on a task")).or_default() += 1;
        }
        let (&reading_loop, &most) = on.iter().max_by_key(|(_, n)| **n).unwrap();
        assert!(most >= caught, "{on:?}, {caught} caught");

        // A caught call that takes a while, and two calls the client
        // sends before its reply: read once it is answered, each runs as
        // a task of its own, side by side (the client pipelines now).
        a.send(&framed(&slow_echo_call(100, 300, b"caught"))).await;
        wait_until_async(
            || echo.running.load(Ordering::SeqCst) == 1,
            Duration::from_secs(10),
            "the caught call to run",
        )
        .await;
        let mut behind = framed(&slow_echo_call(101, 300, b"behind"));
        behind.extend(framed(&slow_echo_call(102, 300, b"behind")));
        a.send(&behind).await;
        assert_eq!(a.echo_reply().await, (100, b"caught".to_vec()));
        let mut got = [a.echo_reply().await.0, a.echo_reply().await.0];
        got.sort_unstable();
        assert_eq!(got, [101, 102]);
        assert_eq!(echo.task_of(100), Some(reading_loop));
        let (t101, t102) = (echo.task_of(101), echo.task_of(102));
        assert!(t101 != Some(reading_loop) && t102 != Some(reading_loop) && t101 != t102);
        assert_eq!(echo.max_running.load(Ordering::SeqCst), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_running_a_caught_call_is_not_quiet() {
    // At the cap, a connection whose reading loop runs a call the spin
    // caught has a call in flight: no room is made by closing it.
    let limits = ConnLimits {
        max_connections: 2,
        evict_after: Duration::from_millis(300),
        stall_timeout: Duration::from_millis(400),
        idle_spin: Duration::from_millis(200),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let server = start(limits).await;
    let (addr, echo) = (server.addr, server.echo.clone());
    elsewhere(async move {
        let mut a = Client::connect(addr).await;
        one_at_a_time(&mut a, 1, 5, Duration::from_millis(1)).await;
        let caught = counters.snapshot().spin_catches;
        a.send(&framed(&slow_echo_call(10, 1500, b"long"))).await;
        wait_until_async(
            || echo.running.load(Ordering::SeqCst) == 1,
            Duration::from_secs(10),
            "the long call to run",
        )
        .await;
        assert_eq!(counters.snapshot().spin_catches, caught + 1);
        // Quiet long enough, were the call not counted.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let _b = Client::connect(addr).await;
        let mut c = Client::connect(addr).await;
        c.expect_closed().await;
        let s = counters.snapshot();
        assert_eq!((s.evicted, s.refused), (0, 1), "{s:?}");
        assert_eq!(a.echo_reply().await, (10, b"long".to_vec()));
        // On the reading loop, as the calls before it the spin caught.
        let before: Vec<_> = (2..=5).map(|xid| echo.task_of(xid)).collect();
        assert!(before.contains(&echo.task_of(10)), "{before:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_a_spin_that_caught_nothing_is_answered() {
    // Spins far shorter than the client's pauses: each ends with nothing
    // caught, and the loop must then wait for the socket as before (the
    // spin polls it with a waker that does nothing).
    let (server, counters) = spinning_server(Duration::from_micros(200)).await;
    let addr = server.addr;
    elsewhere(async move {
        let mut a = Client::connect(addr).await;
        let each = async {
            one_at_a_time(&mut a, 1, 10, Duration::from_millis(50)).await;
        };
        tokio::time::timeout(Duration::from_secs(30), each)
            .await
            .expect("every call answered");
        let s = counters.snapshot();
        assert!(s.idle_spins >= 9 && s.spin_catches < s.idle_spins, "{s:?}");
    })
    .await;
}

/// One echo call and its reply.
async fn echo_one(c: &mut Client, xid: u32) {
    c.send(&framed(&echo_call(xid, b"paced"))).await;
    assert_eq!(c.echo_reply().await, (xid, b"paced".to_vec()));
}

/// A steady client's 2 ms between a reply and its next call, slept on
/// this thread (not the timer wheel's millisecond).
fn gap() {
    std::thread::sleep(Duration::from_millis(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_waits_for_its_clients_pace_before_looking() {
    let (server, counters) = spinning_server(Duration::from_millis(200)).await;
    let addr = server.addr;
    elsewhere(async move {
        // A connection's first spin knows no pace: it looks all the time.
        // The most looks of three first spins, each on a new connection,
        // counted from the spin's start (the server's thread may start it
        // late, or lose its CPU in it, on a loaded machine: it then looks
        // less, never more).
        let mut unpaced = 0;
        let mut c = None;
        for conn in 0..3 {
            // The spin of the connection before (its socket closed) ends
            // within `idle_spin`.
            if let Some(old) = c.take() {
                drop(old);
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let mut client = Client::connect(addr).await;
            let spins = counters.snapshot().idle_spins;
            echo_one(&mut client, conn * 100 + 1).await;
            wait_until_async(
                || counters.snapshot().idle_spins > spins,
                Duration::from_secs(10),
                "the first spin to start",
            )
            .await;
            let before = counters.snapshot();
            gap();
            echo_one(&mut client, conn * 100 + 2).await;
            let first = counters.snapshot();
            assert_eq!(first.spin_catches, before.spin_catches + 1, "{first:?}");
            unpaced = unpaced.max(first.spin_looks - before.spin_looks);
            c = Some(client);
        }
        let mut c = c.expect("a connection");
        let first = counters.snapshot();
        for xid in 3..23 {
            gap();
            echo_one(&mut c, xid).await;
        }
        let paced = counters.snapshot();
        assert!(paced.spin_catches >= first.spin_catches + 19, "{paced:?}");
        let paced_looks = (paced.spin_looks - first.spin_looks) as f64
            / (paced.spin_catches - first.spin_catches) as f64;
        // A quarter of the looks, give or take the gaps' jitter.
        assert!(
            paced_looks < 0.6 * unpaced as f64,
            "{paced_looks} looks per caught call, {unpaced} unpaced"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_spin_zero_never_spins() {
    let (server, counters) = spinning_server(Duration::ZERO).await;
    let mut a = Client::connect(server.addr).await;
    one_at_a_time(&mut a, 1, 10, Duration::ZERO).await;
    let s = counters.snapshot();
    assert_eq!((s.idle_spins, s.spin_catches), (0, 0), "{s:?}");
}
