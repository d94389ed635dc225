//! The data operations (RFC 8881 section 18): so far WRITE's head, the
//! part of its arguments [`decode_op`](crate::nfs4::decode_op) reads,
//! and its result. READ, COMMIT and the NFSv4.2 operations join them
//! with the rest of the codec (W3 of the design).

use dionfs_xdr::{pad_len, Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{xdr_enum, xdr_struct};
use crate::nfs4::types::{StateId4, Verifier4};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::samples::stateid;
    use crate::nfs4::Res4;
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
}
