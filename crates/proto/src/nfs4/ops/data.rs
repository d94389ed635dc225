//! The data operations (RFC 8881 section 18, RFC 7862 section 15): READ
//! (its arguments, and its result's head: the payload follows apart),
//! WRITE's head, the part of its arguments
//! [`decode_op`](crate::nfs4::decode_op) reads, COMMIT, and NFSv4.2's
//! ALLOCATE, DEALLOCATE, SEEK, READ_PLUS, COPY and CLONE.
//!
//! The server encodes the results that carry file data by their heads
//! ([`encode_read_ok_head`], [`encode_read_plus_head`] and the segment
//! encoders) and sends the data from its own buffer; a client decodes
//! them whole ([`ReadResOk4`], [`ReadPlusResOk4`]).

use dionfs_xdr::{pad_len, Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{xdr_enum, xdr_struct};
use crate::nfs4::types::{
    decode_array, decode_at_most_one, encode_array, encode_at_most_one, Nfsstat4, StateId4,
    Utf8Str, Verifier4, NFS4_MAX_ARRAY_ITEMS, NFS4_OPAQUE_LIMIT,
};

xdr_enum! {
    /// `stable_how4`: how far a WRITE's data must reach before the reply.
    pub enum StableHow4 {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
}

/// `WRITE4args` up to and including the length word of `data`, not the
/// data: the server receives the payload straight into a buffer of its
/// own. The codec bounds nothing of `data_len` (no memory depends on it);
/// the server refuses one above its transfer size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteHead4 {
    pub stateid: StateId4,
    pub offset: u64,
    pub stable: StableHow4,
    /// Length of the opaque data that follows (then `pad_len(data_len)`
    /// bytes of padding).
    pub data_len: u32,
}

/// The encoded length of a [`WriteHead4`]: stateid, offset, stable and
/// the data's length word.
pub const WRITE_HEAD_LEN: usize = 16 + 8 + 4 + 4;

impl WriteHead4 {
    /// The bytes after the head that belong to the op: the data and its
    /// padding.
    pub fn payload_len(&self) -> usize {
        self.data_len as usize + pad_len(self.data_len as usize)
    }
}

/// Encodes the head only: a client appends `data_len` bytes and their
/// padding.
impl Encode for WriteHead4 {
    fn encode(&self, enc: &mut Encoder) {
        self.stateid.encode(enc);
        enc.u64(self.offset);
        self.stable.encode(enc);
        enc.u32(self.data_len);
    }
}

impl Decode<'_> for WriteHead4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            stateid: StateId4::decode(dec)?,
            offset: dec.u64()?,
            stable: StableHow4::decode(dec)?,
            data_len: dec.u32()?,
        })
    }
}

xdr_struct! {
    /// `WRITE4resok`.
    pub struct WriteResOk4 {
        pub count: u32,
        pub committed: StableHow4,
        pub writeverf: Verifier4,
    }
}

xdr_struct! {
    /// `READ4args`, and `READ_PLUS4args`, which has the same fields.
    #[derive(Copy)]
    pub struct ReadArgs4 {
        pub stateid: StateId4,
        pub offset: u64,
        pub count: u32,
    }
}

/// `READ4resok` with the data owned, as a client decodes it. The server
/// does not build one: it writes [`encode_read_ok_head`] and sends the
/// data from its own buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResOk4 {
    pub eof: bool,
    pub data: Vec<u8>,
}

impl Encode for ReadResOk4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.bool(self.eof);
        enc.opaque_var(&self.data);
    }
}

impl Decode<'_> for ReadResOk4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            eof: dec.bool()?,
            // Unbounded in RFC 8881; the input bounds it, and the decoder
            // checks that before copying.
            data: dec.opaque_var(u32::MAX)?.to_vec(),
        })
    }
}

/// Encodes `READ4resok` up to and including the length word of its data,
/// after [`encode_result_head`](crate::nfs4::encode_result_head)`(READ,
/// NFS4_OK)`: `eof`, then `data_len`. The caller then sends `data_len`
/// bytes from its own buffer and `pad_len(data_len)` zero bytes.
pub fn encode_read_ok_head(enc: &mut Encoder, eof: bool, data_len: u32) {
    enc.bool(eof);
    enc.u32(data_len);
}

xdr_struct! {
    /// `COMMIT4args`.
    pub struct CommitArgs4 {
        pub offset: u64,
        pub count: u32,
    }
}

xdr_struct! {
    /// `COMMIT4resok`.
    pub struct CommitResOk4 {
        pub writeverf: Verifier4,
    }
}

xdr_struct! {
    /// `ALLOCATE4args` and `DEALLOCATE4args` (RFC 7862 sections 15.1 and
    /// 15.4), which have the same fields; each result is its status.
    pub struct AllocateArgs4 {
        pub stateid: StateId4,
        pub offset: u64,
        pub length: u64,
    }
}

xdr_enum! {
    /// `data_content4` (RFC 7862 section 15.11): what SEEK looks for, and
    /// what a READ_PLUS segment holds.
    pub enum DataContent4 {
        Data = 0,
        Hole = 1,
    }
}

xdr_struct! {
    /// `SEEK4args`.
    pub struct SeekArgs4 {
        pub stateid: StateId4,
        pub offset: u64,
        pub what: DataContent4,
    }
}

xdr_struct! {
    /// `seek_res4`: where the data or hole starts, or `eof` if none does.
    pub struct SeekResOk4 {
        pub eof: bool,
        pub offset: u64,
    }
}

/// The most segments of a `read_plus_res4` decoded. A dionfs reply has
/// at most one data segment and the holes around it.
pub const READ_PLUS_MAX_SEGMENTS: u32 = NFS4_MAX_ARRAY_ITEMS;

/// The shortest `read_plus_content` on the wire: a data segment without
/// data (discriminant, offset, length word).
const SEGMENT_MIN_LEN: usize = 4 + 8 + 4;

xdr_struct! {
    /// `data_info4` (RFC 7862 section 15.10.3): a hole of READ_PLUS.
    /// (pynfs's `nfs4.x` has an older draft's fields here; this is the
    /// RFC's, as Linux encodes it.)
    #[derive(Copy)]
    pub struct DataInfo4 {
        pub offset: u64,
        pub length: u64,
    }
}

/// `data4`: a data segment of READ_PLUS, with the data owned, as a client
/// decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data4 {
    pub offset: u64,
    pub data: Vec<u8>,
}

impl Encode for Data4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.offset);
        enc.opaque_var(&self.data);
    }
}

impl Decode<'_> for Data4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            offset: dec.u64()?,
            // Bounded by the input, checked before copying.
            data: dec.opaque_var(u32::MAX)?.to_vec(),
        })
    }
}

/// `read_plus_content`: one segment of a READ_PLUS result. The union's
/// void default arm is unreachable: `data_content4` has only these two
/// values, and any other is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadPlusContent4 {
    Data(Data4),
    Hole(DataInfo4),
}

impl Encode for ReadPlusContent4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            ReadPlusContent4::Data(data) => {
                DataContent4::Data.encode(enc);
                data.encode(enc);
            }
            ReadPlusContent4::Hole(hole) => {
                DataContent4::Hole.encode(enc);
                hole.encode(enc);
            }
        }
    }
}

impl Decode<'_> for ReadPlusContent4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match DataContent4::decode(dec)? {
            DataContent4::Data => ReadPlusContent4::Data(Decode::decode(dec)?),
            DataContent4::Hole => ReadPlusContent4::Hole(Decode::decode(dec)?),
        })
    }
}

/// `read_plus_res4`, as a client decodes it: at most
/// [`READ_PLUS_MAX_SEGMENTS`] segments. The server writes
/// [`encode_read_plus_head`] and each segment instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPlusResOk4 {
    pub eof: bool,
    pub contents: Vec<ReadPlusContent4>,
}

impl Encode for ReadPlusResOk4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.bool(self.eof);
        encode_array(enc, &self.contents);
    }
}

impl Decode<'_> for ReadPlusResOk4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            eof: dec.bool()?,
            contents: decode_array(dec, READ_PLUS_MAX_SEGMENTS, SEGMENT_MIN_LEN)?,
        })
    }
}

/// Encodes `read_plus_res4` up to its segments, after
/// [`encode_result_head`](crate::nfs4::encode_result_head)`(READ_PLUS,
/// NFS4_OK)`: `eof` and the count of segments that follow, each written
/// by [`encode_read_plus_hole`] or [`encode_read_plus_data_head`].
pub fn encode_read_plus_head(enc: &mut Encoder, eof: bool, segments: u32) {
    enc.bool(eof);
    enc.u32(segments);
}

/// Encodes a hole segment of READ_PLUS: `length` bytes of zeros from
/// `offset`.
pub fn encode_read_plus_hole(enc: &mut Encoder, offset: u64, length: u64) {
    ReadPlusContent4::Hole(DataInfo4 { offset, length }).encode(enc);
}

/// Encodes a data segment of READ_PLUS up to and including the length
/// word of its data. The caller then sends `data_len` bytes from its own
/// buffer and `pad_len(data_len)` zero bytes.
pub fn encode_read_plus_data_head(enc: &mut Encoder, offset: u64, data_len: u32) {
    DataContent4::Data.encode(enc);
    enc.u64(offset);
    enc.u32(data_len);
}

/// The longest `netloc4` name or URL decoded.
pub const NFS4_MAX_NETLOC_LEN: u32 = NFS4_OPAQUE_LIMIT;
/// The longest `na_r_netid` decoded (RFC 5665 netids are a few bytes).
pub const NFS4_MAX_NETID_LEN: u32 = 32;
/// The longest `na_r_addr` decoded (an IPv6 universal address is at
/// most 48 bytes).
pub const NFS4_MAX_UADDR_LEN: u32 = 128;
/// The most source servers of a COPY decoded. dionfs copies within
/// itself only, so it refuses any; a client sends a few at most.
pub const NFS4_MAX_COPY_SOURCES: u32 = 8;

xdr_struct! {
    /// `netaddr4` (RFC 8881 section 3.3.9): a netid and a universal
    /// address (RFC 5665).
    pub struct Netaddr4 {
        pub netid: Utf8Str<NFS4_MAX_NETID_LEN>,
        pub addr: Utf8Str<NFS4_MAX_UADDR_LEN>,
    }
}

xdr_enum! {
    /// `netloc_type4`.
    pub enum NetlocType4 {
        Name = 1,
        Url = 2,
        Netaddr = 3,
    }
}

/// `netloc4` (RFC 7862 section 11.2.1): where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Netloc4 {
    Name(Utf8Str<NFS4_MAX_NETLOC_LEN>),
    Url(Utf8Str<NFS4_MAX_NETLOC_LEN>),
    Netaddr(Netaddr4),
}

impl Encode for Netloc4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Netloc4::Name(name) => {
                NetlocType4::Name.encode(enc);
                name.encode(enc);
            }
            Netloc4::Url(url) => {
                NetlocType4::Url.encode(enc);
                url.encode(enc);
            }
            Netloc4::Netaddr(addr) => {
                NetlocType4::Netaddr.encode(enc);
                addr.encode(enc);
            }
        }
    }
}

impl Decode<'_> for Netloc4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match NetlocType4::decode(dec)? {
            NetlocType4::Name => Netloc4::Name(Decode::decode(dec)?),
            NetlocType4::Url => Netloc4::Url(Decode::decode(dec)?),
            NetlocType4::Netaddr => Netloc4::Netaddr(Decode::decode(dec)?),
        })
    }
}

/// `COPY4args` (RFC 7862 section 15.2): from the saved file to the
/// current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyArgs4 {
    pub src_stateid: StateId4,
    pub dst_stateid: StateId4,
    pub src_offset: u64,
    pub dst_offset: u64,
    /// Bytes to copy; 0 is "to the source's end".
    pub count: u64,
    pub consecutive: bool,
    pub synchronous: bool,
    /// `ca_source_server<>`: empty for a copy within the server; at most
    /// [`NFS4_MAX_COPY_SOURCES`] decoded.
    pub source_server: Vec<Netloc4>,
}

/// The shortest `netloc4`: a type and an empty name.
const NETLOC_MIN_LEN: usize = 8;

impl Encode for CopyArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        self.src_stateid.encode(enc);
        self.dst_stateid.encode(enc);
        enc.u64(self.src_offset);
        enc.u64(self.dst_offset);
        enc.u64(self.count);
        enc.bool(self.consecutive);
        enc.bool(self.synchronous);
        encode_array(enc, &self.source_server);
    }
}

impl Decode<'_> for CopyArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            src_stateid: Decode::decode(dec)?,
            dst_stateid: Decode::decode(dec)?,
            src_offset: dec.u64()?,
            dst_offset: dec.u64()?,
            count: dec.u64()?,
            consecutive: dec.bool()?,
            synchronous: dec.bool()?,
            source_server: decode_array(dec, NFS4_MAX_COPY_SOURCES, NETLOC_MIN_LEN)?,
        })
    }
}

/// `write_response4` (RFC 7862 section 11.2.5): what COPY (and
/// WRITE_SAME) wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteResponse4 {
    /// `wr_callback_id<1>`: only for an asynchronous copy.
    pub callback_id: Option<StateId4>,
    pub count: u64,
    pub committed: StableHow4,
    pub writeverf: Verifier4,
}

impl Encode for WriteResponse4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_at_most_one(enc, self.callback_id.as_ref());
        enc.u64(self.count);
        self.committed.encode(enc);
        self.writeverf.encode(enc);
    }
}

impl Decode<'_> for WriteResponse4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            callback_id: decode_at_most_one(dec)?,
            count: dec.u64()?,
            committed: Decode::decode(dec)?,
            writeverf: Decode::decode(dec)?,
        })
    }
}

xdr_struct! {
    /// `copy_requirements4`: how the server copied (or, with
    /// `NFS4ERR_OFFLOAD_NO_REQS`, would copy).
    #[derive(Copy)]
    pub struct CopyRequirements4 {
        pub consecutive: bool,
        pub synchronous: bool,
    }
}

xdr_struct! {
    /// `COPY4resok`.
    pub struct CopyResOk4 {
        pub response: WriteResponse4,
        pub requirements: CopyRequirements4,
    }
}

/// `COPY4res`: `NFS4ERR_OFFLOAD_NO_REQS` carries the requirements the
/// server could meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyRes4 {
    /// `NFS4_OK`.
    Ok(CopyResOk4),
    /// `NFS4ERR_OFFLOAD_NO_REQS`.
    OffloadNoReqs(CopyRequirements4),
    /// Any other status; never `NFS4_OK` or `NFS4ERR_OFFLOAD_NO_REQS`.
    Fail(Nfsstat4),
}

impl CopyRes4 {
    /// The status on the wire.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            CopyRes4::Ok(_) => Nfsstat4::Ok,
            CopyRes4::OffloadNoReqs(_) => Nfsstat4::OffloadNoReqs,
            CopyRes4::Fail(status) => *status,
        }
    }
}

impl Encode for CopyRes4 {
    fn encode(&self, enc: &mut Encoder) {
        self.status().encode(enc);
        match self {
            CopyRes4::Ok(ok) => ok.encode(enc),
            CopyRes4::OffloadNoReqs(requirements) => requirements.encode(enc),
            CopyRes4::Fail(status) => debug_assert!(
                !matches!(status, Nfsstat4::Ok | Nfsstat4::OffloadNoReqs),
                "CopyRes4::Fail with {status:?}"
            ),
        }
    }
}

impl Decode<'_> for CopyRes4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match Nfsstat4::decode(dec)? {
            Nfsstat4::Ok => CopyRes4::Ok(Decode::decode(dec)?),
            Nfsstat4::OffloadNoReqs => CopyRes4::OffloadNoReqs(Decode::decode(dec)?),
            status => CopyRes4::Fail(status),
        })
    }
}

xdr_struct! {
    /// `CLONE4args` (RFC 7862 section 15.13): from the saved file to the
    /// current one; the result is its status.
    pub struct CloneArgs4 {
        pub src_stateid: StateId4,
        pub dst_stateid: StateId4,
        pub src_offset: u64,
        pub dst_offset: u64,
        pub count: u64,
    }
}

#[cfg(test)]
mod tests {
    use dionfs_xdr::XdrError;

    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{encode_result_head, ArgOp, Opnum4, Res4};
    use crate::test_util::assert_codec;

    #[test]
    fn write_head_and_result_round_trip() {
        let head = WriteHead4 {
            stateid: stateid(),
            offset: 1 << 40,
            stable: StableHow4::FileSync,
            data_len: 5,
        };
        assert_codec(&head);
        assert_eq!(head.to_xdr().len(), WRITE_HEAD_LEN);
        assert_eq!(head.payload_len(), 8);
        let huge = WriteHead4 {
            data_len: u32::MAX,
            ..head
        };
        assert_codec(&huge);
        assert_eq!(huge.payload_len(), u32::MAX as usize + 1);
        assert_codec(&Res4::Ok(WriteResOk4 {
            count: 5,
            committed: StableHow4::Unstable,
            writeverf: Verifier4([4; 8]),
        }));
    }

    #[test]
    fn data_args_round_trip() {
        let mut seen = 0;
        for op in typical_ops() {
            seen += 1;
            match op {
                ArgOp::Read(a) | ArgOp::ReadPlus(a) => assert_codec(&a),
                ArgOp::Commit(a) => assert_codec(&a),
                ArgOp::Allocate(a) | ArgOp::Deallocate(a) => assert_codec(&a),
                ArgOp::Seek(a) => assert_codec(&a),
                ArgOp::Copy(a) => assert_codec(&*a),
                ArgOp::Clone(a) => assert_codec(&a),
                _ => seen -= 1,
            }
        }
        assert!(seen >= 9, "only {seen} data ops sampled");
        for netloc in [
            Netloc4::Name(Utf8Str::from("server.example.org")),
            Netloc4::Url(Utf8Str::from("nfs://server/export")),
            Netloc4::Netaddr(Netaddr4 {
                netid: Utf8Str::from("tcp6"),
                addr: Utf8Str::from("::1.8.1"),
            }),
        ] {
            assert_codec(&netloc);
        }
    }

    #[test]
    fn data_results_round_trip() {
        assert_codec(&Res4::Ok(ReadResOk4 {
            eof: true,
            data: b"hello".to_vec(),
        }));
        assert_codec(&Res4::Ok(ReadResOk4 {
            eof: false,
            data: Vec::new(),
        }));
        assert_codec(&Res4::<ReadResOk4>::Fail(Nfsstat4::Openmode));
        assert_codec(&Res4::Ok(CommitResOk4 {
            writeverf: Verifier4([3; 8]),
        }));
        assert_codec(&Res4::Ok(SeekResOk4 {
            eof: false,
            offset: 1 << 20,
        }));
        assert_codec(&Res4::Ok(ReadPlusResOk4 {
            eof: true,
            contents: vec![
                ReadPlusContent4::Hole(DataInfo4 {
                    offset: 0,
                    length: 4096,
                }),
                ReadPlusContent4::Data(Data4 {
                    offset: 4096,
                    data: vec![7; 5],
                }),
                ReadPlusContent4::Hole(DataInfo4 {
                    offset: 4101,
                    length: 3,
                }),
            ],
        }));
        let response = WriteResponse4 {
            callback_id: None,
            count: 4 << 20,
            committed: StableHow4::Unstable,
            writeverf: Verifier4([9; 8]),
        };
        let sync = CopyRequirements4 {
            consecutive: true,
            synchronous: true,
        };
        assert_codec(&CopyRes4::Ok(CopyResOk4 {
            response: response.clone(),
            requirements: sync,
        }));
        assert_codec(&CopyRes4::Ok(CopyResOk4 {
            response: WriteResponse4 {
                callback_id: Some(stateid()),
                ..response
            },
            requirements: sync,
        }));
        assert_codec(&CopyRes4::OffloadNoReqs(sync));
        assert_codec(&CopyRes4::Fail(Nfsstat4::Inval));
    }

    #[test]
    fn read_heads_match_what_a_client_decodes() {
        let data = b"hello";
        let mut enc = Encoder::new();
        encode_result_head(&mut enc, Opnum4::Read.as_u32(), Nfsstat4::Ok);
        encode_read_ok_head(&mut enc, true, data.len() as u32);
        enc.opaque_fixed(data);
        let whole = Res4::Ok(ReadResOk4 {
            eof: true,
            data: data.to_vec(),
        });
        let mut expected = Opnum4::Read.as_u32().to_xdr();
        expected.extend(whole.to_xdr());
        assert_eq!(enc.into_vec(), expected);

        let result = ReadPlusResOk4 {
            eof: false,
            contents: vec![
                ReadPlusContent4::Hole(DataInfo4 {
                    offset: 0,
                    length: 8192,
                }),
                ReadPlusContent4::Data(Data4 {
                    offset: 8192,
                    data: data.to_vec(),
                }),
                ReadPlusContent4::Hole(DataInfo4 {
                    offset: 8197,
                    length: 1 << 30,
                }),
            ],
        };
        let mut enc = Encoder::new();
        encode_read_plus_head(&mut enc, false, 3);
        encode_read_plus_hole(&mut enc, 0, 8192);
        encode_read_plus_data_head(&mut enc, 8192, data.len() as u32);
        // The payload and its padding, as the reply sends them.
        enc.opaque_fixed(data);
        encode_read_plus_hole(&mut enc, 8197, 1 << 30);
        assert_eq!(enc.into_vec(), result.to_xdr());
    }

    #[test]
    fn data_bounds_are_errors_before_allocation() {
        // A million segments claimed: refused by count, before anything
        // is read or allocated.
        let mut many = vec![0, 0, 0, 1];
        many.extend_from_slice(&1_000_000u32.to_be_bytes());
        assert_eq!(
            ReadPlusResOk4::from_xdr(&many),
            Err(XdrError::TooLong {
                len: 1_000_000,
                max: READ_PLUS_MAX_SEGMENTS
            })
        );
        // As many as allowed, but the input cannot hold them.
        let mut claimed = vec![0, 0, 0, 1];
        claimed.extend_from_slice(&READ_PLUS_MAX_SEGMENTS.to_be_bytes());
        assert!(matches!(
            ReadPlusResOk4::from_xdr(&claimed),
            Err(XdrError::Truncated { .. })
        ));
        // A data segment of 4 GiB in a short input.
        let mut huge = DataContent4::Data.to_xdr();
        huge.extend_from_slice(&[0; 8]);
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            ReadPlusContent4::from_xdr(&huge),
            Err(XdrError::Truncated { .. })
        ));
        let copy = CopyArgs4 {
            src_stateid: stateid(),
            dst_stateid: stateid(),
            src_offset: 0,
            dst_offset: 0,
            count: 0,
            consecutive: false,
            synchronous: true,
            source_server: vec![
                Netloc4::Name(Utf8Str::from("a"));
                NFS4_MAX_COPY_SOURCES as usize + 1
            ],
        };
        assert_eq!(
            CopyArgs4::from_xdr(&copy.to_xdr()),
            Err(XdrError::TooLong {
                len: NFS4_MAX_COPY_SOURCES + 1,
                max: NFS4_MAX_COPY_SOURCES
            })
        );
        let mut long_name = Encoder::new();
        NetlocType4::Name.encode(&mut long_name);
        long_name.string(&[b'n'; NFS4_MAX_NETLOC_LEN as usize + 1]);
        assert!(matches!(
            Netloc4::from_xdr(long_name.as_slice()),
            Err(XdrError::TooLong { .. })
        ));
        assert!(matches!(
            ReadPlusContent4::from_xdr(&2u32.to_be_bytes()),
            Err(XdrError::BadDiscriminant { .. })
        ));
        // `wr_callback_id<1>` holds at most one.
        let mut two = vec![0, 0, 0, 2];
        two.extend_from_slice(&[0; 64]);
        assert!(WriteResponse4::from_xdr(&two).is_err());
    }
}
