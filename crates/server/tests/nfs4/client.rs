//! A raw NFSv4.1 COMPOUND client for tests, built on `dionfs_proto::nfs4`'s
//! client-side codec (design section 10): it sends whatever ops (or
//! bytes) a test asks, on one connection, one call at a time, and
//! decodes the results as a client does. Blocking: run the server on a
//! runtime of its own.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use dionfs_proto::nfs4::{
    ArgOp, ChannelAttrs4, ClientOwner4, CompoundHead, CompoundResHead, CreateSessionArgs4,
    CreateSessionResOk4, ExchangeIdArgs4, ExchangeIdResOk4, Nfsstat4, Opaque4,
    ReclaimCompleteArgs4, Res4, ResOp, SequenceArgs4, SessionId4, StateProtect4A, Utf8Str,
    Verifier4, EXCHGID4_FLAG_USE_NON_PNFS, NFS4_PROGRAM, NFS_V4,
};
use dionfs_rpc::ReplyStatus;
use dionfs_rpc::{encode_call, framed, read_record_blocking, AuthSys, Credential, ReplyHeader};
use dionfs_xdr::{Decode, Decoder, Encode, Encoder};

/// One connection to the server.
pub struct Client {
    stream: TcpStream,
    next_xid: u32,
    cred: Credential,
}

/// A COMPOUND's reply, decoded.
#[derive(Debug)]
pub struct CompoundRes {
    pub status: Nfsstat4,
    pub tag: Vec<u8>,
    pub results: Vec<ResOp>,
    /// The `COMPOUND4res` bytes (everything after the RPC reply header).
    pub raw: Vec<u8>,
}

impl CompoundRes {
    /// The status of each result, in order.
    pub fn statuses(&self) -> Vec<(u32, Nfsstat4)> {
        self.results
            .iter()
            .map(|r| (r.opnum().as_u32(), result_status(r)))
            .collect()
    }
}

/// A result's status, whatever its type.
pub fn result_status(r: &ResOp) -> Nfsstat4 {
    // Every result starts with its status, after the opnum.
    let bytes = r.to_xdr();
    Nfsstat4::decode(&mut Decoder::new(&bytes[4..])).expect("a result has a status")
}

/// A session of this client, and the next sequence id of each slot.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: SessionId4,
    pub clientid: u64,
    pub attrs: ChannelAttrs4,
    /// The seqid the next new request on each slot carries.
    pub next_seqid: Vec<u32>,
}

/// Fore-channel attributes that fit the tests' calls.
pub fn fore_attrs() -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 4096,
        maxoperations: 16,
        maxrequests: 8,
        rdma_ird: None,
    }
}

fn back_attrs() -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 4096,
        maxresponsesize: 4096,
        maxresponsesize_cached: 0,
        maxoperations: 2,
        maxrequests: 1,
        rdma_ird: None,
    }
}

impl Client {
    /// A connection to `addr`, calling as root with AUTH_SYS.
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect to the server");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            stream,
            next_xid: 1,
            cred: Credential::Sys(AuthSys {
                stamp: 1,
                machine_name: b"nfs4-test".to_vec(),
                uid: 0,
                gid: 0,
                gids: Vec::new(),
            }),
        }
    }

    /// A new xid.
    pub fn xid(&mut self) -> u32 {
        self.next_xid += 1;
        self.next_xid
    }

    /// The record of a call of NFSv`vers` procedure `proc_` with `args`.
    pub fn call_record(&self, xid: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let mut msg = encode_call(xid, NFS4_PROGRAM, vers, proc_, &self.cred);
        msg.extend_from_slice(args);
        framed(&msg)
    }

    /// Sends raw bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads one reply record: its header and the results' bytes.
    pub fn read_reply(&mut self) -> (ReplyHeader, Vec<u8>) {
        let record = read_record_blocking(&mut self.stream, 4 << 20).expect("a reply");
        let mut dec = Decoder::new(&record);
        let header = ReplyHeader::decode(&mut dec).expect("a reply header");
        let rest = dec.rest().to_vec();
        (header, rest)
    }

    /// Calls NFSv`vers` procedure `proc_` with `args` and returns the
    /// reply's status and results' bytes.
    pub fn call(&mut self, vers: u32, proc_: u32, args: &[u8]) -> (ReplyStatus, Vec<u8>) {
        let xid = self.xid();
        let record = self.call_record(xid, vers, proc_, args);
        self.send(&record);
        let (header, rest) = self.read_reply();
        assert_eq!(header.xid, xid);
        (header.status, rest)
    }

    /// The arguments of a COMPOUND of `ops` at minor version `minor`.
    pub fn compound_args(tag: &str, minor: u32, ops: &[ArgOp]) -> Vec<u8> {
        let mut enc = Encoder::new();
        CompoundHead {
            tag: Utf8Str::from(tag),
            minorversion: minor,
            numops: ops.len() as u32,
        }
        .encode(&mut enc);
        for op in ops {
            op.encode(&mut enc);
        }
        enc.into_vec()
    }

    /// Sends COMPOUND `args` (already encoded) with `xid`, and decodes
    /// its reply.
    pub fn compound_raw(&mut self, xid: u32, args: &[u8]) -> CompoundRes {
        let record = self.call_record(xid, NFS_V4, 1, args);
        self.send(&record);
        self.read_compound(xid)
    }

    /// Reads and decodes the reply to COMPOUND `xid`.
    pub fn read_compound(&mut self, xid: u32) -> CompoundRes {
        let (header, raw) = self.read_reply();
        assert_eq!(header.xid, xid);
        assert_eq!(header.status, ReplyStatus::Success);
        decode_compound(raw)
    }

    /// A COMPOUND of `ops` outside any session.
    pub fn compound(&mut self, minor: u32, ops: &[ArgOp]) -> CompoundRes {
        let xid = self.xid();
        self.compound_raw(xid, &Self::compound_args("test", minor, ops))
    }

    /// EXCHANGE_ID for `owner`.
    pub fn exchange_id(&mut self, owner: &[u8]) -> ExchangeIdResOk4 {
        let res = self.compound(1, &[exchange_id_op(owner)]);
        match &res.results[..] {
            [ResOp::ExchangeId(Res4::Ok(ok))] => ok.clone(),
            other => panic!("EXCHANGE_ID: {other:?}"),
        }
    }

    /// CREATE_SESSION for `clientid` with `sequence` and fore-channel
    /// `attrs`.
    pub fn create_session(
        &mut self,
        clientid: u64,
        sequence: u32,
        attrs: ChannelAttrs4,
    ) -> Result<CreateSessionResOk4, Nfsstat4> {
        let op = ArgOp::CreateSession(Box::new(CreateSessionArgs4 {
            clientid,
            sequence,
            flags: 0,
            fore_chan_attrs: attrs,
            back_chan_attrs: back_attrs(),
            cb_program: 0x4000_0000,
            sec_parms: Vec::new(),
        }));
        let res = self.compound(1, &[op]);
        match &res.results[..] {
            [ResOp::CreateSession(Res4::Ok(ok))] => Ok(ok.clone()),
            [ResOp::CreateSession(Res4::Fail(status))] => Err(*status),
            other => panic!("CREATE_SESSION: {other:?}"),
        }
    }

    /// A confirmed client `owner` and a session of it with fore-channel
    /// `attrs`.
    pub fn session_with(&mut self, owner: &[u8], attrs: ChannelAttrs4) -> Session {
        let eid = self.exchange_id(owner);
        let cs = self
            .create_session(eid.clientid, eid.sequenceid, attrs)
            .expect("CREATE_SESSION");
        Session {
            id: cs.sessionid,
            clientid: eid.clientid,
            next_seqid: vec![1; cs.fore_chan_attrs.maxrequests as usize],
            attrs: cs.fore_chan_attrs,
        }
    }

    /// A session with [`fore_attrs`].
    pub fn session(&mut self, owner: &[u8]) -> Session {
        self.session_with(owner, fore_attrs())
    }

    /// A session of a client that has said its reclaims are done
    /// (RECLAIM_COMPLETE), as the Linux client does before its first
    /// OPEN: a new OPEN before it is GRACE (RFC 8881 section 18.51.3).
    pub fn session_ready(&mut self, owner: &[u8]) -> Session {
        let mut session = self.session(owner);
        let done = ArgOp::ReclaimComplete(ReclaimCompleteArgs4 { one_fs: false });
        let res = self.in_session(&mut session, 0, false, &[done]);
        assert_eq!(res.status, Nfsstat4::Ok, "RECLAIM_COMPLETE");
        session
    }

    /// The arguments of SEQUENCE on `slot` with `seqid`, then `ops`.
    pub fn sequenced_args(
        session: &Session,
        slot: u32,
        seqid: u32,
        cachethis: bool,
        ops: &[ArgOp],
    ) -> Vec<u8> {
        let mut all = vec![sequence_op(session, slot, seqid, cachethis)];
        all.extend_from_slice(ops);
        Self::compound_args("seq", 1, &all)
    }

    /// A new request on `slot` of `session`: SEQUENCE then `ops`.
    pub fn in_session(
        &mut self,
        session: &mut Session,
        slot: u32,
        cachethis: bool,
        ops: &[ArgOp],
    ) -> CompoundRes {
        let seqid = session.next_seqid[slot as usize];
        let xid = self.xid();
        let res = self.compound_raw(
            xid,
            &Self::sequenced_args(session, slot, seqid, cachethis, ops),
        );
        if matches!(res.results.first(), Some(ResOp::Sequence(Res4::Ok(_)))) {
            session.next_seqid[slot as usize] = seqid.wrapping_add(1);
        }
        res
    }
}

/// SEQUENCE on `slot` with `seqid`.
pub fn sequence_op(session: &Session, slot: u32, seqid: u32, cachethis: bool) -> ArgOp {
    ArgOp::Sequence(SequenceArgs4 {
        sessionid: session.id,
        sequenceid: seqid,
        slotid: slot,
        highest_slotid: session.attrs.maxrequests.saturating_sub(1),
        cachethis,
    })
}

/// EXCHANGE_ID for `owner`, with a fixed verifier.
pub fn exchange_id_op(owner: &[u8]) -> ArgOp {
    ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
        clientowner: ClientOwner4 {
            verifier: Verifier4([7; 8]),
            ownerid: Opaque4::from(owner),
        },
        flags: EXCHGID4_FLAG_USE_NON_PNFS,
        state_protect: StateProtect4A::None,
        client_impl_id: None,
    }))
}

/// Decodes `COMPOUND4res` bytes.
pub fn decode_compound(raw: Vec<u8>) -> CompoundRes {
    let mut dec = Decoder::new(&raw);
    let head = CompoundResHead::decode(&mut dec).expect("a COMPOUND4res head");
    let results = (0..head.numres)
        .map(|_| ResOp::decode(&mut dec).expect("a result"))
        .collect();
    assert_eq!(dec.remaining(), 0, "bytes after the results");
    CompoundRes {
        status: head.status,
        tag: head.tag.as_bytes().to_vec(),
        results,
        raw,
    }
}
