//! XDR (RFC 4506) primitives: a bounds-checked decoder over a borrowed byte
//! slice and an append-only encoder.
//!
//! Every decoder returns a typed [`XdrError`] for malformed input; nothing here
//! panics on untrusted bytes. Variable-length items are checked against a
//! caller-supplied maximum *before* anything is allocated or sliced, so a
//! length field of 0xffffffff costs an error, not memory.

use thiserror::Error;

/// Why a piece of XDR could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum XdrError {
    /// The input ended before the item did.
    #[error("truncated: needed {needed} bytes, {available} left")]
    Truncated { needed: usize, available: usize },
    /// A variable-length item declared a length above its limit.
    #[error("length {len} exceeds limit {max}")]
    TooLong { len: u32, max: u32 },
    /// An enum or union discriminant had a value the type does not define.
    #[error("bad discriminant {value} for {type_name}")]
    BadDiscriminant { type_name: &'static str, value: u32 },
    /// A boolean was neither 0 nor 1 (RFC 4506 section 4.4).
    #[error("bad boolean {0}")]
    BadBool(u32),
    /// Bytes were left over after the item that should have ended the input.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Result alias for XDR decoding.
pub type Result<T> = std::result::Result<T, XdrError>;

/// Number of zero bytes that pad `len` bytes of opaque data to a 4-byte
/// boundary (RFC 4506 section 4.10).
pub const fn pad_len(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// A cursor over XDR-encoded bytes. Borrowed slices returned by the opaque and
/// string readers point into the original buffer (no copy).
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Starts decoding at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unconsumed tail of the input.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Fails with [`XdrError::Trailing`] unless the input is used up.
    pub fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(XdrError::Trailing(n)),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(XdrError::Truncated {
                needed: n,
                available,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// An unsigned 32-bit integer.
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A signed 32-bit integer.
    pub fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }

    /// An unsigned 64-bit integer (hyper).
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A signed 64-bit integer.
    pub fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }

    /// A boolean: exactly 0 or 1.
    pub fn bool(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(XdrError::BadBool(v)),
        }
    }

    /// Fixed-length opaque data of `len` bytes plus its padding.
    pub fn opaque_fixed(&mut self, len: usize) -> Result<&'a [u8]> {
        let data = self.take(len)?;
        self.take(pad_len(len))?;
        Ok(data)
    }

    /// Reads only the length word of variable-length opaque data, checked
    /// against `max`. Used where the body is received elsewhere (a WRITE
    /// payload goes straight into an aligned buffer).
    pub fn opaque_len(&mut self, max: u32) -> Result<u32> {
        let len = self.u32()?;
        if len > max {
            return Err(XdrError::TooLong { len, max });
        }
        Ok(len)
    }

    /// Variable-length opaque data of at most `max` bytes.
    pub fn opaque_var(&mut self, max: u32) -> Result<&'a [u8]> {
        let len = self.opaque_len(max)?;
        self.opaque_fixed(len as usize)
    }

    /// A string of at most `max` bytes. XDR strings are bytes; NFS file names
    /// need not be UTF-8, so no conversion is done here.
    pub fn string(&mut self, max: u32) -> Result<&'a [u8]> {
        self.opaque_var(max)
    }

    /// An optional item (`*T` in XDR): a boolean then the item if present.
    pub fn optional<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        if self.bool()? {
            Ok(Some(f(self)?))
        } else {
            Ok(None)
        }
    }
}

/// An append-only XDR encoder.
#[derive(Debug, Default, Clone)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty encoder with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            buf: Vec::with_capacity(cap),
        }
    }

    /// Continues appending to an existing buffer.
    pub fn from_vec(buf: Vec<u8>) -> Self {
        Self { buf }
    }

    /// Bytes encoded so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing has been encoded.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The encoded bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// Gives up the encoded bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Overwrites a previously encoded u32 at byte position `at` (for lengths
    /// and counts only known after the items that follow them).
    ///
    /// Panics if `at + 4` is past the end: that is a bug in the caller, never
    /// a consequence of input.
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn i32(&mut self, v: i32) {
        self.u32(v as u32);
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.u64(v as u64);
    }

    pub fn bool(&mut self, v: bool) {
        self.u32(v as u32);
    }

    /// Fixed-length opaque data plus padding.
    pub fn opaque_fixed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        self.pad(data.len());
    }

    /// Variable-length opaque data: length, bytes, padding.
    ///
    /// The caller guarantees `data.len() <= u32::MAX` (all our items are
    /// bounded far below that by protocol limits).
    pub fn opaque_var(&mut self, data: &[u8]) {
        self.u32(data.len() as u32);
        self.opaque_fixed(data);
    }

    /// A string: same encoding as variable-length opaque data.
    pub fn string(&mut self, s: &[u8]) {
        self.opaque_var(s);
    }

    /// Zero padding after `len` bytes of opaque data.
    pub fn pad(&mut self, len: usize) {
        self.buf.extend_from_slice(&[0u8; 3][..pad_len(len)]);
    }

    /// An optional item: a boolean then the item if present.
    pub fn optional<T>(&mut self, v: Option<&T>, f: impl FnOnce(&mut Self, &T)) {
        match v {
            Some(x) => {
                self.bool(true);
                f(self, x);
            }
            None => self.bool(false),
        }
    }
}

/// A type with an XDR encoding.
pub trait Encode {
    fn encode(&self, enc: &mut Encoder);

    /// Convenience: the encoding as a fresh vector.
    fn to_xdr(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.into_vec()
    }
}

/// A type decodable from XDR. `'a` lets decoded values borrow from the input.
pub trait Decode<'a>: Sized {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self>;

    /// Decodes `buf` completely: trailing bytes are an error.
    fn from_xdr(buf: &'a [u8]) -> Result<Self> {
        let mut d = Decoder::new(buf);
        let v = Self::decode(&mut d)?;
        d.finish()?;
        Ok(v)
    }
}

impl Encode for u32 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(*self)
    }
}

impl Decode<'_> for u32 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        dec.u32()
    }
}

impl Encode for i32 {
    fn encode(&self, enc: &mut Encoder) {
        enc.i32(*self)
    }
}

impl Decode<'_> for i32 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        dec.i32()
    }
}

impl Encode for u64 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(*self)
    }
}

impl Decode<'_> for u64 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        dec.u64()
    }
}

impl Encode for i64 {
    fn encode(&self, enc: &mut Encoder) {
        enc.i64(*self)
    }
}

impl Decode<'_> for i64 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        dec.i64()
    }
}

impl Encode for bool {
    fn encode(&self, enc: &mut Encoder) {
        enc.bool(*self)
    }
}

impl Decode<'_> for bool {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        dec.bool()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn integers_round_trip_big_endian() {
        let mut e = Encoder::new();
        e.u32(0x0102_0304);
        e.i32(-2);
        e.u64(0x0102_0304_0506_0708);
        e.bool(true);
        assert_eq!(&e.as_slice()[..4], &[1, 2, 3, 4]);
        let v = e.into_vec();
        let mut d = Decoder::new(&v);
        assert_eq!(d.u32().unwrap(), 0x0102_0304);
        assert_eq!(d.i32().unwrap(), -2);
        assert_eq!(d.u64().unwrap(), 0x0102_0304_0506_0708);
        assert!(d.bool().unwrap());
        d.finish().unwrap();
    }

    #[test]
    fn i64_encodes_and_decodes_through_the_traits() {
        let bytes = (-2i64).to_xdr();
        assert_eq!(bytes, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(i64::from_xdr(&bytes), Ok(-2));
        assert!(i64::from_xdr(&bytes[..7]).is_err());
    }

    #[test]
    fn opaque_is_padded_and_bounded() {
        let mut e = Encoder::new();
        e.opaque_var(b"abcde");
        let v = e.into_vec();
        assert_eq!(v.len(), 4 + 8);
        assert_eq!(&v[9..], &[0, 0, 0]);
        assert_eq!(Decoder::new(&v).opaque_var(5).unwrap(), b"abcde");
        assert_eq!(
            Decoder::new(&v).opaque_var(4),
            Err(XdrError::TooLong { len: 5, max: 4 })
        );
    }

    #[test]
    fn huge_length_is_rejected_before_slicing() {
        let v = [0xff, 0xff, 0xff, 0xff, 1, 2];
        assert!(matches!(
            Decoder::new(&v).opaque_var(u32::MAX),
            Err(XdrError::Truncated { .. })
        ));
        assert!(matches!(
            Decoder::new(&v).opaque_var(1024),
            Err(XdrError::TooLong { .. })
        ));
    }

    #[test]
    fn truncation_and_bad_bool_are_typed_errors() {
        assert_eq!(
            Decoder::new(&[0, 0]).u32(),
            Err(XdrError::Truncated {
                needed: 4,
                available: 2
            })
        );
        assert_eq!(
            Decoder::new(&[0, 0, 0, 2]).bool(),
            Err(XdrError::BadBool(2))
        );
        assert_eq!(
            Decoder::new(&[0, 0, 0, 0]).finish(),
            Err(XdrError::Trailing(4))
        );
    }

    proptest! {
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut d = Decoder::new(&bytes);
            let _ = d.u32();
            let _ = d.opaque_var(1 << 20);
            let _ = d.string(255);
            let _ = d.optional(|d| d.u64());
            let _ = d.bool();
        }

        #[test]
        fn opaque_round_trips(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut e = Encoder::new();
            e.opaque_var(&data);
            let v = e.into_vec();
            prop_assert_eq!(v.len() % 4, 0);
            let mut d = Decoder::new(&v);
            prop_assert_eq!(d.opaque_var(100).unwrap(), &data[..]);
            prop_assert!(d.finish().is_ok());
        }
    }
}
