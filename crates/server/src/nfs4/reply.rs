//! The reply of a COMPOUND as it is built: the RPC reply header, the head
//! of `COMPOUND4res` (status and result count patched at the end), then
//! each op's result, checked against the session's reply sizes as it is
//! written (RFC 8881 section 2.10.6.4; design section 3).
//!
//! The first READ's data goes out as the reply's zero-copy payload, from
//! the pool buffer it was read into; the results after it go in the
//! reply's trailer. A later READ's data is copied into the results. A
//! READ_PLUS is a READ here: its first data segment is the payload (if no
//! READ's data is), the others are copied.

use std::ops::Range;
use std::sync::Arc;

use dionfs_dataplane::ReadData;
use dionfs_proto::nfs4::{
    encode_read_ok_head, encode_read_plus_data_head, encode_read_plus_head, encode_read_plus_hole,
};
use dionfs_proto::nfs4::{
    encode_result_head, CompoundResHead, Nfsstat4, Utf8Str, NFS4_MAX_TAG_LEN,
};
use dionfs_transport::{Reply, ReplyPayload};
use dionfs_xdr::{pad_len, Encode, Encoder};

use crate::io::ReadPayload;

use crate::reply::success_encoder;

/// The reply sizes a session's fore channel allows (CREATE_SESSION's
/// `ca_maxresponsesize` and, when the request asked to be cached,
/// `ca_maxresponsesize_cached`), in bytes of the whole RPC reply.
#[derive(Debug, Clone, Copy)]
pub struct ReplyLimits {
    pub max: usize,
    /// `Some` when `sa_cachethis` was set.
    pub max_cached: Option<usize>,
}

/// Where an op's result starts: its opnum and status words.
#[derive(Debug, Clone, Copy)]
pub struct OpStart {
    at: usize,
}

/// A COMPOUND's reply being built.
pub struct CompoundReply {
    enc: Encoder,
    /// Where `COMPOUND4res` starts (after the RPC reply header): what a
    /// slot caches.
    res_start: usize,
    status_at: usize,
    numres_at: usize,
    numres: u32,
    limits: Option<ReplyLimits>,
    /// The first READ's data, sent after the bytes of `enc` before `at`
    /// (and its padding before the rest of `enc`, the trailer).
    payload: Option<Placed>,
}

/// A READ's data placed in the reply.
struct Placed {
    at: usize,
    data: Box<dyn ReplyPayload>,
}

impl Placed {
    /// Its bytes on the wire, padding included.
    fn wire_len(&self) -> usize {
        let len = self.data.bytes().len();
        len + pad_len(len)
    }
}

impl CompoundReply {
    /// A reply to call `xid` echoing `tag`, with no results yet, bounded
    /// by `limits` when the COMPOUND runs in a session.
    pub fn new(xid: u32, tag: &Utf8Str<NFS4_MAX_TAG_LEN>, limits: Option<ReplyLimits>) -> Self {
        let mut enc = success_encoder(xid);
        let res_start = enc.len();
        CompoundResHead {
            status: Nfsstat4::Ok,
            tag: tag.clone(),
            numres: 0,
        }
        .encode(&mut enc);
        // The status is the first word of the head, the count its last.
        let numres_at = enc.len() - 4;
        Self {
            enc,
            res_start,
            status_at: res_start,
            numres_at,
            numres: 0,
            limits,
            payload: None,
        }
    }

    /// Starts the result of op `opnum`: its opnum and a status that
    /// [`Self::finish_op`] fills in. The op then encodes the rest of its
    /// result (its `resok`, or what its failure carries) into
    /// [`Self::encoder`].
    pub fn start_op(&mut self, opnum: u32) -> OpStart {
        let at = self.enc.len();
        encode_result_head(&mut self.enc, opnum, Nfsstat4::Ok);
        self.numres += 1;
        OpStart { at }
    }

    /// Where an op writes its result after its status.
    pub fn encoder(&mut self) -> &mut Encoder {
        &mut self.enc
    }

    /// Ends the result started at `start` with `status`, unless the reply
    /// now crosses the session's limits: then the op's result is only
    /// `REP_TOO_BIG` (past `ca_maxresponsesize`) or `REP_TOO_BIG_TO_CACHE`
    /// (past `ca_maxresponsesize_cached` when the reply is to be cached),
    /// which ends the COMPOUND. Returns the op's status as sent.
    pub fn finish_op(&mut self, start: OpStart, status: Nfsstat4) -> Nfsstat4 {
        let refused = match self.limits {
            Some(l) if self.size() > l.max => Some(Nfsstat4::RepTooBig),
            Some(ReplyLimits {
                max_cached: Some(cached),
                ..
            }) if self.size() > cached => Some(Nfsstat4::RepTooBigToCache),
            _ => None,
        };
        let status = match refused {
            Some(refused) => {
                // Only the opnum and the refusal are sent.
                self.truncate(start.at + 8);
                refused
            }
            None => status,
        };
        self.enc.patch_u32(start.at + 4, status.as_u32());
        status
    }

    /// A result that is only a status: an op refused before it ran
    /// (`BADXDR`, `NOTSUPP`, `OP_ILLEGAL`...). Returns the status as
    /// sent, which the reply limits may change.
    pub fn op_status(&mut self, opnum: u32, status: Nfsstat4) -> Nfsstat4 {
        let start = self.start_op(opnum);
        self.finish_op(start, status)
    }

    /// The results written, and the COMPOUND's status: that of its last
    /// result (RFC 8881 section 16.2.3), or `status` when there is none
    /// (`MINOR_VERS_MISMATCH`, an empty COMPOUND).
    fn seal(&mut self, status: Nfsstat4) {
        self.enc.patch_u32(self.numres_at, self.numres);
        self.enc.patch_u32(self.status_at, status.as_u32());
    }

    /// The reply, with the COMPOUND's `status`, and its `COMPOUND4res`
    /// bytes when `cache` (what a slot keeps for a retransmission).
    pub fn finish(mut self, status: Nfsstat4, cache: bool) -> (Reply, Option<Arc<[u8]>>) {
        self.seal(status);
        let Some(placed) = self.payload.take() else {
            let cached = cache.then(|| Arc::from(&self.enc.as_slice()[self.res_start..]));
            return (Reply::new(self.enc.into_vec()), cached);
        };
        // A cached reply holds the data too: bounded, as the whole reply,
        // by the session's cached reply size.
        let cached = cache.then(|| {
            let bytes = self.enc.as_slice();
            let data = placed.data.bytes();
            let mut res = Vec::with_capacity(self.size() - self.res_start);
            res.extend_from_slice(&bytes[self.res_start..placed.at]);
            res.extend_from_slice(data);
            res.resize(res.len() + pad_len(data.len()), 0);
            res.extend_from_slice(&bytes[placed.at..]);
            Arc::from(res)
        });
        let mut header = self.enc.into_vec();
        let trailer = header.split_off(placed.at);
        let reply = Reply::with_data(header, placed.data).with_trailer(trailer);
        (reply, cached)
    }

    /// The result of the op started at `start` after its status, as
    /// written so far (what a minor version 0 owner keeps of its last
    /// op: `state/seqids.rs`).
    pub fn op_result(&self, start: OpStart) -> &[u8] {
        self.enc.as_slice().get(start.at + 8..).unwrap_or_default()
    }

    /// The bytes of the reply so far, RPC header included.
    pub fn size(&self) -> usize {
        self.enc.len() + self.payload.as_ref().map_or(0, Placed::wire_len)
    }

    /// How many bytes of data a READ's result may carry and stay within
    /// the session's reply size (its head and a little more for the
    /// results after it left out).
    pub fn data_room(&self) -> usize {
        match self.limits {
            Some(l) => l.max.saturating_sub(self.size() + 512),
            None => usize::MAX,
        }
    }

    /// Writes a READ's result after its status: `eof`, then the data. The
    /// first READ's data is sent from its buffer; a later one's is copied.
    pub fn read_data(&mut self, data: ReadData) {
        let len = data.len();
        encode_read_ok_head(&mut self.enc, data.eof(), len as u32);
        if self.payload.is_some() {
            self.enc.opaque_fixed(data.data());
            return;
        }
        self.payload = Some(Placed {
            at: self.enc.len(),
            data: Box::new(ReadPayload(data)),
        });
    }

    /// Writes a READ_PLUS result after its status: `eof`, then
    /// `segments` of `data` (read at file offset `offset`), in order.
    /// The first data segment is sent from the read buffer when no READ's
    /// data is already; the others are copied.
    pub fn read_plus_data(&mut self, data: ReadData, offset: u64, segments: &[Segment]) {
        encode_read_plus_head(&mut self.enc, data.eof(), segments.len() as u32);
        let mut placed = None;
        for segment in segments {
            let at = |range: &Range<usize>| offset + range.start as u64;
            match segment {
                Segment::Hole(range) => {
                    encode_read_plus_hole(&mut self.enc, at(range), range.len() as u64);
                }
                Segment::Data(range) => {
                    encode_read_plus_data_head(&mut self.enc, at(range), range.len() as u32);
                    if self.payload.is_none() && placed.is_none() {
                        placed = Some((self.enc.len(), range.clone()));
                    } else {
                        self.enc.opaque_fixed(&data.data()[range.clone()]);
                    }
                }
            }
        }
        if let Some((at, range)) = placed {
            self.payload = Some(Placed {
                at,
                data: Box::new(ReadSlice { data, range }),
            });
        }
    }

    /// Takes back [`Self::start_op`] of an op that did not run here
    /// (it encoded nothing): the reply is as it was before.
    pub fn abandon_op(&mut self, start: OpStart) {
        self.truncate(start.at);
        self.numres -= 1;
    }

    fn truncate(&mut self, len: usize) {
        if self.payload.as_ref().is_some_and(|p| p.at > len) {
            self.payload = None;
        }
        let mut bytes = std::mem::take(&mut self.enc).into_vec();
        bytes.truncate(len);
        self.enc = Encoder::from_vec(bytes);
    }
}

/// A segment of a READ_PLUS result: a range of the bytes read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Sent as `NFS4_CONTENT_DATA`, with its bytes.
    Data(Range<usize>),
    /// Sent as `NFS4_CONTENT_HOLE`: its bytes are zeros.
    Hole(Range<usize>),
}

/// A part of a READ's data, sent from its buffer.
struct ReadSlice {
    data: ReadData,
    range: Range<usize>,
}

impl ReplyPayload for ReadSlice {
    fn bytes(&self) -> &[u8] {
        &self.data.data()[self.range.clone()]
    }
}

/// A reply of cached `COMPOUND4res` bytes (a slot's, for a
/// retransmission) under a fresh RPC reply header for call `xid`.
pub fn replay(xid: u32, res: &[u8]) -> Reply {
    let mut enc = success_encoder(xid);
    let mut bytes = std::mem::take(&mut enc).into_vec();
    bytes.extend_from_slice(res);
    Reply::new(bytes)
}

/// A reply with no results and `status` (`MINOR_VERS_MISMATCH`, an empty
/// COMPOUND, an invalid tag).
pub fn without_results(xid: u32, tag: &Utf8Str<NFS4_MAX_TAG_LEN>, status: Nfsstat4) -> Reply {
    CompoundReply::new(xid, tag, None).finish(status, false).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_proto::nfs4::{CompoundResHead, Opnum4, Res4, ResOp};
    use dionfs_rpc::ReplyHeader;
    use dionfs_xdr::{Decode, Decoder};

    fn results(reply: &Reply) -> (CompoundResHead, Vec<ResOp>) {
        let mut dec = Decoder::new(&reply.header);
        ReplyHeader::decode(&mut dec).unwrap();
        let head = CompoundResHead::decode(&mut dec).unwrap();
        let ops = (0..head.numres)
            .map(|_| ResOp::decode(&mut dec).unwrap())
            .collect();
        assert_eq!(dec.remaining(), 0);
        (head, ops)
    }

    #[test]
    fn results_are_counted_and_the_status_is_patched() {
        let tag = Utf8Str::from("t");
        let mut reply = CompoundReply::new(7, &tag, None);
        reply.op_status(Opnum4::Putrootfh.as_u32(), Nfsstat4::Ok);
        reply.op_status(Opnum4::Getfh.as_u32(), Nfsstat4::Nofilehandle);
        let (reply, cached) = reply.finish(Nfsstat4::Nofilehandle, true);
        let (head, ops) = results(&reply);
        assert_eq!(
            (head.status, head.numres, head.tag),
            (Nfsstat4::Nofilehandle, 2, tag)
        );
        assert_eq!(ops[0], ResOp::Putrootfh(Nfsstat4::Ok));
        assert_eq!(ops[1], ResOp::Getfh(Res4::Fail(Nfsstat4::Nofilehandle)));
        // The cached bytes are the COMPOUND4res, and replay under a new xid.
        let again = replay(8, &cached.unwrap());
        assert_eq!(&again.header[4..], &reply.header[4..]);
        assert_eq!(&again.header[..4], &8u32.to_be_bytes());
    }

    #[test]
    fn a_result_past_the_limits_is_refused() {
        let tag = Utf8Str::default();
        let limits = ReplyLimits {
            max: 200,
            max_cached: Some(100),
        };
        let mut reply = CompoundReply::new(1, &tag, Some(limits));
        let base = reply.size();
        let start = reply.start_op(Opnum4::Getfh.as_u32());
        reply.encoder().opaque_var(&[1; 40]);
        assert!(reply.size() <= 100, "{}", reply.size() - base);
        assert_eq!(reply.finish_op(start, Nfsstat4::Ok), Nfsstat4::Ok);
        let start = reply.start_op(Opnum4::Getfh.as_u32());
        reply.encoder().opaque_var(&[1; 40]);
        assert_eq!(
            reply.finish_op(start, Nfsstat4::Ok),
            Nfsstat4::RepTooBigToCache
        );
        let start = reply.start_op(Opnum4::Getfh.as_u32());
        reply.encoder().opaque_var(&[1; 300]);
        assert_eq!(reply.finish_op(start, Nfsstat4::Ok), Nfsstat4::RepTooBig);
        let (reply, _) = reply.finish(Nfsstat4::RepTooBig, false);
        let (_, ops) = results(&reply);
        assert_eq!(
            ops[1..],
            [
                ResOp::Getfh(Res4::Fail(Nfsstat4::RepTooBigToCache)),
                ResOp::Getfh(Res4::Fail(Nfsstat4::RepTooBig)),
            ]
        );
    }
}
