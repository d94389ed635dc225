//! NFSv4.1: a client and a session per connection (EXCHANGE_ID,
//! CREATE_SESSION with a slot per request in flight, RECLAIM_COMPLETE),
//! PUTROOTFH + LOOKUP to the export, OPEN (creating, truncating) and
//! CLOSE; each READ and WRITE is SEQUENCE + PUTFH + READ / WRITE on the
//! slot of its request, COMMIT likewise.

use std::time::{Duration, Instant};

use dionfs_proto::nfs4::{
    ArgOp, ChannelAttrs4, ClientOwner4, CloseArgs4, CommitArgs4, Component4, CompoundHead,
    CompoundResHead, CreateHow4, CreateSessionArgs4, DestroyClientidArgs4, DestroySessionArgs4,
    ExchangeIdArgs4, LookupArgs4, NfsFh4, Nfsstat4, Opaque4, OpenArgs4, OpenClaim4, OpenFlag4,
    PutfhArgs4, ReadArgs4, ReclaimCompleteArgs4, Res4, ResOp, SequenceArgs4, SessionId4, SetAttrs4,
    StableHow4, StateId4, StateOwner4, StateProtect4A, Utf8Str, Verifier4, WriteHead4,
    EXCHGID4_FLAG_USE_NON_PNFS, NFS4_PROGRAM, NFS_V4, OPEN4_SHARE_ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE,
};
use dionfs_rpc::Credential;
use dionfs_xdr::{pad_len, Decode, Decoder, Encode};

use crate::version::{Proto, SETUP_TIMEOUT};
use crate::wire::{call_head, put_u32, put_u64, seal, Wire};

/// The COMPOUND procedure.
const COMPOUND: u32 = 1;
/// Slot id bits of an xid (the rest counts calls).
const SETUP_SLOT_XID: u32 = 0x3ff;

/// A connection's client, session, open file and call templates.
pub struct V4 {
    cred: Credential,
    session: SessionId4,
    clientid: u64,
    /// The seqid the next request on each slot carries.
    seqids: Vec<u32>,
    highest_slot: u32,
    fh: NfsFh4,
    stateid: StateId4,
    xid: u32,
    read: Vec<u8>,
    /// Where the template's SEQUENCE seqid (slotid follows) and READ
    /// offset are.
    read_seq: usize,
    read_off: usize,
    write: Vec<u8>,
    write_seq: usize,
    write_off: usize,
    max_request: u64,
    max_response: u64,
}

/// The offset of `sa_sequenceid` in an encoded SEQUENCE op.
const SEQ_SEQID_AT: usize = 4 + 16;
/// The offset of `offset` in an encoded READ or WRITE op.
const DATA_OFF_AT: usize = 4 + 16;

fn compound_args(ops: &[ArgOp]) -> Vec<u8> {
    let mut enc = dionfs_xdr::Encoder::new();
    CompoundHead {
        tag: Utf8Str::default(),
        minorversion: 1,
        numops: ops.len() as u32,
    }
    .encode(&mut enc);
    for op in ops {
        op.encode(&mut enc);
    }
    enc.into_vec()
}

/// A COMPOUND's status and results.
fn decode_results(res: &[u8]) -> Result<(Nfsstat4, Vec<ResOp>), String> {
    let mut dec = Decoder::new(res);
    let head = CompoundResHead::decode(&mut dec).map_err(|e| format!("COMPOUND reply: {e}"))?;
    let mut out = Vec::new();
    for _ in 0..head.numres.min(64) {
        out.push(ResOp::decode(&mut dec).map_err(|e| format!("COMPOUND result: {e}"))?);
    }
    Ok((head.status, out))
}

fn status_of(r: &ResOp) -> Nfsstat4 {
    let bytes = r.to_xdr();
    Nfsstat4::decode(&mut Decoder::new(&bytes[4..])).unwrap_or(Nfsstat4::Badxdr)
}

impl V4 {
    /// Set-up of a connection as client `owner`: a session with `qd`
    /// slots and channels for `max_record`-byte calls, the export at
    /// `export`, and `file` under it opened (created, truncated, when
    /// `create`; for writing when `write`). Templates for `bs`-byte calls.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        w: &mut Wire,
        cred: Credential,
        owner: &str,
        qd: u32,
        max_record: u32,
        export: &str,
        file: &str,
        create: bool,
        write: bool,
        bs: u32,
    ) -> Result<V4, String> {
        let mut me = V4 {
            cred,
            session: SessionId4::default(),
            clientid: 0,
            seqids: Vec::new(),
            highest_slot: qd - 1,
            fh: NfsFh4::default(),
            stateid: StateId4::default(),
            xid: SETUP_SLOT_XID,
            read: Vec::new(),
            read_seq: 0,
            read_off: 0,
            write: Vec::new(),
            write_seq: 0,
            write_off: 0,
            max_request: 0,
            max_response: 0,
        };
        let eid = ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
            clientowner: ClientOwner4 {
                verifier: Verifier4(*b"dionfslg"),
                ownerid: Opaque4::from(owner),
            },
            flags: EXCHGID4_FLAG_USE_NON_PNFS,
            state_protect: StateProtect4A::None,
            client_impl_id: None,
        }));
        let (clientid, sequence) = match &me.compound(w, &[eid])?.1[..] {
            [ResOp::ExchangeId(Res4::Ok(ok))] => (ok.clientid, ok.sequenceid),
            other => return Err(format!("EXCHANGE_ID: {other:?}")),
        };
        me.clientid = clientid;
        let fore = ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: max_record,
            maxresponsesize: max_record,
            maxresponsesize_cached: 1024,
            maxoperations: 16,
            maxrequests: qd,
            rdma_ird: None,
        };
        let back = ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: 4096,
            maxresponsesize: 4096,
            maxresponsesize_cached: 0,
            maxoperations: 2,
            maxrequests: 1,
            rdma_ird: None,
        };
        let cs = ArgOp::CreateSession(Box::new(CreateSessionArgs4 {
            clientid,
            sequence,
            flags: 0,
            fore_chan_attrs: fore,
            back_chan_attrs: back,
            cb_program: 0x4000_0000,
            sec_parms: Vec::new(),
        }));
        let granted = match &me.compound(w, &[cs])?.1[..] {
            [ResOp::CreateSession(Res4::Ok(ok))] => ok.clone(),
            other => return Err(format!("CREATE_SESSION: {other:?}")),
        };
        if granted.fore_chan_attrs.maxrequests < qd {
            return Err(format!(
                "the server granted {} slots, fewer than --qd {qd}",
                granted.fore_chan_attrs.maxrequests
            ));
        }
        me.session = granted.sessionid;
        me.seqids = vec![1; granted.fore_chan_attrs.maxrequests as usize];
        me.max_request = granted.fore_chan_attrs.maxrequestsize.into();
        me.max_response = granted.fore_chan_attrs.maxresponsesize.into();
        me.sequenced(
            w,
            &[ArgOp::ReclaimComplete(ReclaimCompleteArgs4 {
                one_fs: false,
            })],
            "RECLAIM_COMPLETE",
        )?;

        // the export's directories, then the file's
        let mut ops = vec![ArgOp::Putrootfh];
        let names: Vec<&str> = export
            .split('/')
            .chain(file.split('/'))
            .filter(|c| !c.is_empty())
            .collect();
        let (last, dirs) = names.split_last().ok_or("empty file name")?;
        for name in dirs {
            ops.push(ArgOp::Lookup(LookupArgs4 {
                objname: Component4::from(name.as_bytes()),
            }));
        }
        let how = if create {
            OpenFlag4::Create(CreateHow4::Unchecked(
                SetAttrs4 {
                    size: Some(0),
                    mode: Some(0o644),
                    ..SetAttrs4::default()
                }
                .to_fattr(),
            ))
        } else {
            OpenFlag4::NoCreate
        };
        ops.push(ArgOp::Open(Box::new(OpenArgs4 {
            seqid: 0,
            share_access: if write || create {
                OPEN4_SHARE_ACCESS_BOTH
            } else {
                OPEN4_SHARE_ACCESS_READ
            },
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: StateOwner4 {
                clientid,
                owner: Opaque4::from(owner),
            },
            openhow: how,
            claim: OpenClaim4::Null(Component4::from(last.as_bytes())),
        })));
        ops.push(ArgOp::Getfh);
        // A server in its grace period (or busy) answers GRACE or DELAY:
        // ask again for a while.
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let results = loop {
            match me.sequenced(w, &ops, "OPEN") {
                Err(e)
                    if (e.contains("Grace") || e.contains("Delay"))
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => break other?,
            }
        };
        for r in &results {
            match r {
                ResOp::Open(Res4::Ok(ok)) => me.stateid = ok.stateid,
                ResOp::Getfh(Res4::Ok(ok)) => me.fh = ok.object.clone(),
                _ => {}
            }
        }
        me.templates(bs)?;
        Ok(me)
    }

    /// A set-up COMPOUND of `ops` (nothing else in flight).
    fn compound(&mut self, w: &mut Wire, ops: &[ArgOp]) -> Result<(Nfsstat4, Vec<ResOp>), String> {
        self.xid = self.xid.wrapping_add(1 << 10);
        let mut enc = call_head(NFS4_PROGRAM, NFS_V4, COMPOUND, &self.cred);
        enc.opaque_fixed(&compound_args(ops));
        seal(&mut enc, 0);
        let mut rec = enc.into_vec();
        put_u32(&mut rec, 4, self.xid);
        let res = w
            .call(&rec, self.xid, SETUP_TIMEOUT)
            .map_err(|e| format!("COMPOUND: {e}"))?;
        decode_results(&res)
    }

    /// SEQUENCE on slot 0, then `ops`; their results, or the first
    /// failure.
    fn sequenced(&mut self, w: &mut Wire, ops: &[ArgOp], what: &str) -> Result<Vec<ResOp>, String> {
        let mut all = vec![self.sequence_op(0)];
        all.extend_from_slice(ops);
        let (status, results) = self.compound(w, &all)?;
        if matches!(results.first(), Some(ResOp::Sequence(Res4::Ok(_)))) {
            self.seqids[0] = self.seqids[0].wrapping_add(1);
        }
        if status != Nfsstat4::Ok {
            let failed = results.iter().find(|r| status_of(r) != Nfsstat4::Ok);
            return Err(format!(
                "{what}: {status:?} ({:?})",
                failed.map(|r| r.opnum())
            ));
        }
        Ok(results)
    }

    fn sequence_op(&self, slot: u32) -> ArgOp {
        ArgOp::Sequence(SequenceArgs4 {
            sessionid: self.session,
            sequenceid: self.seqids[slot as usize],
            slotid: slot,
            highest_slotid: self.highest_slot,
            cachethis: false,
        })
    }

    /// The READ and WRITE COMPOUNDs, with the xid, slot, seqid and offset
    /// to be set.
    fn templates(&mut self, bs: u32) -> Result<(), String> {
        let head = CompoundHead {
            tag: Utf8Str::default(),
            minorversion: 1,
            numops: 3,
        };
        let putfh = ArgOp::Putfh(PutfhArgs4 {
            object: self.fh.clone(),
        });

        let mut enc = call_head(NFS4_PROGRAM, NFS_V4, COMPOUND, &self.cred);
        head.encode(&mut enc);
        self.read_seq = enc.len() + SEQ_SEQID_AT;
        self.sequence_op(0).encode(&mut enc);
        putfh.encode(&mut enc);
        self.read_off = enc.len() + DATA_OFF_AT;
        ArgOp::Read(ReadArgs4 {
            stateid: self.stateid,
            offset: 0,
            count: bs,
        })
        .encode(&mut enc);
        seal(&mut enc, 0);
        self.read = enc.into_vec();

        let mut enc = call_head(NFS4_PROGRAM, NFS_V4, COMPOUND, &self.cred);
        head.encode(&mut enc);
        self.write_seq = enc.len() + SEQ_SEQID_AT;
        self.sequence_op(0).encode(&mut enc);
        putfh.encode(&mut enc);
        self.write_off = enc.len() + DATA_OFF_AT;
        ArgOp::Write(WriteHead4 {
            stateid: self.stateid,
            offset: 0,
            stable: StableHow4::Unstable,
            data_len: bs,
        })
        .encode(&mut enc);
        let payload = bs as usize + pad_len(bs as usize);
        seal(&mut enc, payload);
        self.write = enc.into_vec();
        // Each is a whole record on the wire (its mark not counted).
        if (self.write.len() - 4 + payload) as u64 > self.max_request {
            return Err(format!(
                "a {bs}-byte WRITE does not fit the session's {}-byte requests",
                self.max_request
            ));
        }
        if u64::from(bs) + 512 > self.max_response {
            return Err(format!(
                "a {bs}-byte READ's reply may not fit the session's {}-byte replies",
                self.max_response
            ));
        }
        Ok(())
    }

    /// SEQUENCE's result at the head of `res`, the slot's seqid moved on
    /// when it succeeded; the decoder stands after PUTFH's result.
    fn sequence_done<'a>(
        &mut self,
        slot: usize,
        res: &'a [u8],
        what: &str,
    ) -> Result<Decoder<'a>, String> {
        let mut dec = Decoder::new(res);
        let bad = |e| format!("{what} reply: {e}");
        let head = CompoundResHead::decode(&mut dec).map_err(bad)?;
        match ResOp::decode(&mut dec).map_err(bad)? {
            ResOp::Sequence(Res4::Ok(_)) => self.seqids[slot] = self.seqids[slot].wrapping_add(1),
            other => return Err(format!("{what}: SEQUENCE {:?}", status_of(&other))),
        }
        if head.numres < 2 {
            return Err(format!("{what}: {:?}", head.status));
        }
        match ResOp::decode(&mut dec).map_err(bad)? {
            ResOp::Putfh(Nfsstat4::Ok) => Ok(dec),
            other => Err(format!("{what}: PUTFH {:?}", status_of(&other))),
        }
    }
}

impl Proto for V4 {
    fn queue_read(&mut self, w: &mut Wire, slot: usize, xid: u32, off: u64) {
        put_u32(&mut self.read, 4, xid);
        put_u32(&mut self.read, self.read_seq, self.seqids[slot]);
        put_u32(&mut self.read, self.read_seq + 4, slot as u32);
        put_u64(&mut self.read, self.read_off, off);
        w.queue(&self.read);
    }

    fn send_write(
        &mut self,
        w: &mut Wire,
        slot: usize,
        xid: u32,
        off: u64,
        data: &[u8],
    ) -> std::io::Result<()> {
        put_u32(&mut self.write, 4, xid);
        put_u32(&mut self.write, self.write_seq, self.seqids[slot]);
        put_u32(&mut self.write, self.write_seq + 4, slot as u32);
        put_u64(&mut self.write, self.write_off, off);
        w.send_with_payload(&self.write, data, pad_len(data.len()))
    }

    fn read_done<'a>(&mut self, slot: usize, res: &'a [u8]) -> Result<&'a [u8], String> {
        let mut dec = self.sequence_done(slot, res, "READ")?;
        let bad = |e| format!("READ reply: {e}");
        let _opnum = dec.u32().map_err(bad)?;
        let status = Nfsstat4::decode(&mut dec).map_err(bad)?;
        if status != Nfsstat4::Ok {
            return Err(format!("READ: {status:?}"));
        }
        let _eof = dec.bool().map_err(bad)?;
        dec.opaque_var(u32::MAX).map_err(bad)
    }

    fn write_done(&mut self, slot: usize, res: &[u8]) -> Result<u64, String> {
        let mut dec = self.sequence_done(slot, res, "WRITE")?;
        match ResOp::decode(&mut dec).map_err(|e| format!("WRITE reply: {e}"))? {
            ResOp::Write(Res4::Ok(ok)) => Ok(ok.count.into()),
            other => Err(format!("WRITE: {:?}", status_of(&other))),
        }
    }

    fn commit(&mut self, w: &mut Wire) -> Result<(), String> {
        let ops = [
            ArgOp::Putfh(PutfhArgs4 {
                object: self.fh.clone(),
            }),
            ArgOp::Commit(CommitArgs4 {
                offset: 0,
                count: 0,
            }),
        ];
        self.sequenced(w, &ops, "COMMIT").map(|_| ())
    }

    fn close(&mut self, w: &mut Wire) {
        // Best effort: the server forgets a client whose lease runs out.
        let close = [
            ArgOp::Putfh(PutfhArgs4 {
                object: self.fh.clone(),
            }),
            ArgOp::Close(CloseArgs4 {
                seqid: 0,
                open_stateid: self.stateid,
            }),
        ];
        let _ = self.sequenced(w, &close, "CLOSE");
        let _ = self.compound(
            w,
            &[ArgOp::DestroySession(DestroySessionArgs4 {
                sessionid: self.session,
            })],
        );
        let _ = self.compound(
            w,
            &[ArgOp::DestroyClientid(DestroyClientidArgs4 {
                clientid: self.clientid,
            })],
        );
    }

    fn maxes(&self) -> (u64, u64) {
        (self.max_response, self.max_request)
    }
}
