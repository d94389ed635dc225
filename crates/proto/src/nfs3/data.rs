//! Arguments and results of the NFSv3 data procedures: READ, WRITE, COMMIT
//! (RFC 1813 sections 3.3.6, 3.3.7, 3.3.21).
//!
//! READ replies and WRITE calls carry the bulk data, which the server keeps
//! out of XDR buffers: a WRITE payload is received straight into an aligned
//! buffer, and READ data is sent from the buffer it was read into. So beside
//! the full codecs (for tests and clients) there are split ones:
//! [`WriteArgsHead`] decodes a WRITE call up to its data, and
//! [`encode_read_ok_head`] encodes a READ reply up to its data.

use dionfs_xdr::{pad_len, Decode, Decoder, Encode, Encoder, Result};

use crate::codec::xdr_struct;
use crate::nfs3::types::{NfsFh3, NfsRes, NfsStat3, PostOpAttr, StableHow, WccData, WriteVerf3};

xdr_struct! {
    /// READ3args (RFC 1813 section 3.3.6).
    pub struct ReadArgs {
        pub file: NfsFh3,
        pub offset: u64,
        pub count: u32,
    }
}

/// READ3resok (RFC 1813 section 3.3.6), with the data owned. The server
/// does not build one of these: it uses [`encode_read_ok_head`] and sends
/// the data from its own buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResOk {
    pub file_attributes: PostOpAttr,
    /// Bytes returned; equal to `data.len()`.
    pub count: u32,
    pub eof: bool,
    pub data: Vec<u8>,
}

impl Encode for ReadResOk {
    fn encode(&self, enc: &mut Encoder) {
        debug_assert_eq!(
            self.count as usize,
            self.data.len(),
            "READ count != data length"
        );
        self.file_attributes.encode(enc);
        enc.u32(self.count);
        enc.bool(self.eof);
        enc.opaque_var(&self.data);
    }
}

impl Decode<'_> for ReadResOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            file_attributes: PostOpAttr::decode(dec)?,
            count: dec.u32()?,
            eof: dec.bool()?,
            // Unbounded in RFC 1813; the input length bounds it, and the
            // decoder checks that before copying.
            data: dec.opaque_var(u32::MAX)?.to_vec(),
        })
    }
}

xdr_struct! {
    /// READ3resfail (RFC 1813 section 3.3.6).
    pub struct ReadResFail {
        pub file_attributes: PostOpAttr,
    }
}

/// READ3res (RFC 1813 section 3.3.6).
pub type ReadRes = NfsRes<ReadResOk, ReadResFail>;

/// Encodes a successful READ3res up to and including the length word of
/// its data: status NFS3_OK, `file_attributes`, `count`, `eof`, `data_len`.
/// The caller then sends `data_len` bytes of data from its own buffer and
/// `pad_len(data_len)` zero bytes. `count` and `data_len` are the same
/// number in every correct reply (RFC 1813 section 3.3.6).
pub fn encode_read_ok_head(
    enc: &mut Encoder,
    file_attributes: &PostOpAttr,
    count: u32,
    eof: bool,
    data_len: u32,
) {
    NfsStat3::Ok.encode(enc);
    file_attributes.encode(enc);
    enc.u32(count);
    enc.bool(eof);
    enc.u32(data_len);
}

/// Bytes of WRITE3args before the data, for a file handle of `fh_len`
/// bytes: fh length word, fh and its padding, offset (8), count (4), stable
/// (4), data length word (4). The server reads the fh length word first,
/// checks it against [`NFS3_FHSIZE`](super::NFS3_FHSIZE), then reads the
/// rest of the head exactly and decodes it with
/// [`WriteArgsHead::decode_with_max`].
pub const fn write_head_len(fh_len: usize) -> usize {
    4 + fh_len + pad_len(fh_len) + 8 + 4 + 4 + 4
}

/// WRITE3args (RFC 1813 section 3.3.7) up to and including the length word
/// of `data`, not the data itself, so the server can receive the payload
/// straight into an aligned buffer.
///
/// `count` and `data_len` should be equal; Linux knfsd rejects a call where
/// they differ as GARBAGE_ARGS. That check is the server's, not the codec's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgsHead {
    pub file: NfsFh3,
    pub offset: u64,
    pub count: u32,
    pub stable: StableHow,
    /// Length of the opaque data that follows (then `pad_len(data_len)`
    /// bytes of padding).
    pub data_len: u32,
}

impl WriteArgsHead {
    /// Decodes the head, refusing a data length above `max_data` with
    /// [`XdrError::TooLong`](dionfs_xdr::XdrError::TooLong) before anything
    /// is allocated for the data.
    pub fn decode_with_max(dec: &mut Decoder<'_>, max_data: u32) -> Result<Self> {
        Ok(Self {
            file: NfsFh3::decode(dec)?,
            offset: dec.u64()?,
            count: dec.u32()?,
            stable: StableHow::decode(dec)?,
            data_len: dec.opaque_len(max_data)?,
        })
    }

    /// Size of the head's encoding; equals `write_head_len(fh_len)`.
    pub fn encoded_len(&self) -> usize {
        write_head_len(self.file.as_bytes().len())
    }
}

/// Encodes the head only: a client sending the data from elsewhere appends
/// `data_len` bytes and their padding.
impl Encode for WriteArgsHead {
    fn encode(&self, enc: &mut Encoder) {
        self.file.encode(enc);
        enc.u64(self.offset);
        enc.u32(self.count);
        self.stable.encode(enc);
        enc.u32(self.data_len);
    }
}

/// WRITE3args (RFC 1813 section 3.3.7) with the data owned, for tests and
/// clients. The server decodes [`WriteArgsHead`] instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs {
    /// `head.count` and `head.data_len` equal `data.len()`.
    pub head: WriteArgsHead,
    pub data: Vec<u8>,
}

impl WriteArgs {
    /// A WRITE of `data` at `offset`, with `count` and the data length set
    /// to `data.len()`. `data` must be shorter than 4 GiB.
    pub fn new(file: NfsFh3, offset: u64, stable: StableHow, data: Vec<u8>) -> Self {
        debug_assert!(
            u32::try_from(data.len()).is_ok(),
            "WRITE data of 4 GiB or more"
        );
        let len = data.len() as u32;
        Self {
            head: WriteArgsHead {
                file,
                offset,
                count: len,
                stable,
                data_len: len,
            },
            data,
        }
    }
}

impl Encode for WriteArgs {
    fn encode(&self, enc: &mut Encoder) {
        debug_assert_eq!(
            self.head.data_len as usize,
            self.data.len(),
            "WRITE data_len != data length"
        );
        self.head.encode(enc);
        enc.opaque_fixed(&self.data);
    }
}

impl Decode<'_> for WriteArgs {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        // No limit beyond the input: the decoder checks the data is there
        // before copying it.
        let head = WriteArgsHead::decode_with_max(dec, u32::MAX)?;
        let data = dec.opaque_fixed(head.data_len as usize)?.to_vec();
        Ok(Self { head, data })
    }
}

xdr_struct! {
    /// WRITE3resok (RFC 1813 section 3.3.7): `committed` is how durable the
    /// data is now; `verf` changes when the server restarts.
    pub struct WriteResOk {
        pub file_wcc: WccData,
        pub count: u32,
        pub committed: StableHow,
        pub verf: WriteVerf3,
    }
}

xdr_struct! {
    /// WRITE3resfail (RFC 1813 section 3.3.7).
    pub struct WriteResFail {
        pub file_wcc: WccData,
    }
}

/// WRITE3res (RFC 1813 section 3.3.7).
pub type WriteRes = NfsRes<WriteResOk, WriteResFail>;

xdr_struct! {
    /// COMMIT3args (RFC 1813 section 3.3.21): `count` 0 means to the end of file.
    pub struct CommitArgs {
        pub file: NfsFh3,
        pub offset: u64,
        pub count: u32,
    }
}

xdr_struct! {
    /// COMMIT3resok (RFC 1813 section 3.3.21).
    pub struct CommitResOk {
        pub file_wcc: WccData,
        pub verf: WriteVerf3,
    }
}

xdr_struct! {
    /// COMMIT3resfail (RFC 1813 section 3.3.21).
    pub struct CommitResFail {
        pub file_wcc: WccData,
    }
}

/// COMMIT3res (RFC 1813 section 3.3.21).
pub type CommitRes = NfsRes<CommitResOk, CommitResFail>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use dionfs_xdr::XdrError;
    use proptest::prelude::*;

    #[test]
    fn write_head_len_counts_every_word() {
        assert_eq!(write_head_len(0), 24);
        assert_eq!(write_head_len(1), 28);
        assert_eq!(write_head_len(4), 28);
        assert_eq!(write_head_len(32), 56);
        assert_eq!(write_head_len(64), 88);
    }

    #[test]
    fn write_head_stops_at_the_data() {
        let fh = NfsFh3::new(vec![5; 30]).unwrap();
        let args = WriteArgs::new(fh, 4096, StableHow::FileSync, b"hello".to_vec());
        let bytes = args.to_xdr();
        let head_len = write_head_len(30);
        assert_eq!(bytes.len(), head_len + 8);

        let mut dec = Decoder::new(&bytes);
        let head = WriteArgsHead::decode_with_max(&mut dec, 1 << 20).unwrap();
        assert_eq!(dec.position(), head_len);
        assert_eq!(head, args.head);
        assert_eq!(head.encoded_len(), head_len);
        assert_eq!(dec.rest(), b"hello\0\0\0");

        // The server's exact reads: fh length word, then the rest of the head.
        let fh_len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(write_head_len(fh_len), head_len);
        // A head alone (no data present yet) decodes.
        let mut dec = Decoder::new(&bytes[..head_len]);
        assert_eq!(
            WriteArgsHead::decode_with_max(&mut dec, 5),
            Ok(args.head.clone())
        );
        assert_eq!(dec.remaining(), 0);
    }

    #[test]
    fn write_data_over_the_limit_is_rejected() {
        let args = WriteArgs::new(NfsFh3::default(), 0, StableHow::Unstable, vec![1; 100]);
        let bytes = args.to_xdr();
        assert_eq!(
            WriteArgsHead::decode_with_max(&mut Decoder::new(&bytes), 99),
            Err(XdrError::TooLong { len: 100, max: 99 })
        );
        // A huge declared length with no data behind it.
        let mut head = args.head.clone();
        head.data_len = u32::MAX;
        let bytes = head.to_xdr();
        assert!(matches!(
            WriteArgsHead::decode_with_max(&mut Decoder::new(&bytes), 1 << 20),
            Err(XdrError::TooLong { .. })
        ));
        assert!(matches!(
            WriteArgs::from_xdr(&bytes),
            Err(XdrError::Truncated { .. })
        ));
    }

    #[test]
    fn bad_stable_how_is_rejected() {
        let mut bytes = WriteArgs::new(NfsFh3::default(), 0, StableHow::Unstable, vec![]).to_xdr();
        // fh (4) + offset (8) + count (4), then stable.
        bytes[16..20].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(
            WriteArgs::from_xdr(&bytes),
            Err(XdrError::BadDiscriminant {
                type_name: "StableHow",
                value: 3
            })
        ));
    }

    #[test]
    fn read_head_plus_data_plus_padding_equals_the_full_reply() {
        let attrs = PostOpAttr(Some(sample_fattr3()));
        let data = b"0123456789".to_vec();
        let full: ReadRes = NfsRes::Ok(ReadResOk {
            file_attributes: attrs.clone(),
            count: 10,
            eof: true,
            data: data.clone(),
        });

        let mut enc = Encoder::new();
        encode_read_ok_head(&mut enc, &attrs, 10, true, 10);
        let mut split = enc.into_vec();
        split.extend_from_slice(&data);
        split.extend_from_slice(&[0u8; 3][..pad_len(data.len())]);
        assert_eq!(split, full.to_xdr());
        assert_codec(&full);
    }

    proptest! {
        #[test]
        fn args_round_trip(
            file in nfs_fh3(),
            offset in any::<u64>(),
            count in any::<u32>(),
            stable in stable_how(),
            data in bytes(64),
        ) {
            assert_codec(&ReadArgs { file: file.clone(), offset, count });
            assert_codec(&CommitArgs { file: file.clone(), offset, count });
            let write = WriteArgs::new(file, offset, stable, data);
            prop_assert_eq!(write.head.encoded_len() + write.data.len() + pad_len(write.data.len()), write.to_xdr().len());
            assert_codec(&write);
        }

        #[test]
        fn results_round_trip(
            read in nfs_res(
                (post_op_attr(), any::<bool>(), bytes(64)).prop_map(|(file_attributes, eof, data)| ReadResOk {
                    file_attributes,
                    count: data.len() as u32,
                    eof,
                    data,
                }),
                post_op_attr().prop_map(|file_attributes| ReadResFail { file_attributes }),
            ),
            write in nfs_res(
                (wcc_data(), any::<u32>(), stable_how(), verf()).prop_map(|(file_wcc, count, committed, v)| WriteResOk {
                    file_wcc,
                    count,
                    committed,
                    verf: WriteVerf3(v),
                }),
                wcc_data().prop_map(|file_wcc| WriteResFail { file_wcc }),
            ),
            commit in nfs_res(
                (wcc_data(), verf()).prop_map(|(file_wcc, v)| CommitResOk { file_wcc, verf: WriteVerf3(v) }),
                wcc_data().prop_map(|file_wcc| CommitResFail { file_wcc }),
            ),
        ) {
            assert_codec(&read);
            assert_codec(&write);
            assert_codec(&commit);
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256), max in any::<u32>()) {
            let _ = ReadArgs::from_xdr(&bytes);
            let _ = WriteArgs::from_xdr(&bytes);
            let _ = WriteArgsHead::decode_with_max(&mut Decoder::new(&bytes), max);
            let _ = CommitArgs::from_xdr(&bytes);
            let _ = ReadRes::from_xdr(&bytes);
            let _ = WriteRes::from_xdr(&bytes);
            let _ = CommitRes::from_xdr(&bytes);
        }
    }
}
