//! Building blocks shared by the NFSv3 and MOUNT v3 codecs: declarative
//! macros for the two shapes most XDR types have (structs of fields in order,
//! enums of u32 values), XDR `void`, and bounded readers for counted arrays
//! and `*T` linked lists.

use dionfs_xdr::{pad_len, Decode, Decoder, Encode, Encoder, Result, XdrError};

/// Upper bound on the number of items accepted in one decoded linked list
/// (`entry3`, `entryplus3`, `mountbody`, `exportnode`, `groupnode`). The
/// input length bounds the list as well (every item costs at least 4 bytes);
/// this cap keeps a single huge reply from building a huge `Vec` anyway.
pub const MAX_LIST_ITEMS: u32 = 1 << 20;

/// Declares a struct whose XDR encoding is its fields in declaration order
/// (RFC 4506 section 4.14), and implements [`Encode`] and [`Decode`] for it.
/// Every field type must itself implement both.
macro_rules! xdr_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl ::dionfs_xdr::Encode for $name {
            fn encode(&self, enc: &mut ::dionfs_xdr::Encoder) {
                $( ::dionfs_xdr::Encode::encode(&self.$field, enc); )*
            }
        }

        impl<'a> ::dionfs_xdr::Decode<'a> for $name {
            fn decode(dec: &mut ::dionfs_xdr::Decoder<'a>) -> ::dionfs_xdr::Result<Self> {
                Ok(Self {
                    $( $field: ::dionfs_xdr::Decode::decode(dec)?, )*
                })
            }
        }
    };
}

/// Declares a C-like enum with explicit u32 wire values (RFC 4506 section
/// 4.3). Decoding a value the enum does not define is
/// [`XdrError::BadDiscriminant`] naming the type.
macro_rules! xdr_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $value:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant = $value, )*
        }

        impl $name {
            /// Every value of the type, in declaration order.
            pub const ALL: &'static [Self] = &[ $( Self::$variant, )* ];

            /// The variant with wire value `value`, if the type defines one.
            pub const fn from_u32(value: u32) -> Option<Self> {
                match value {
                    $( $value => Some(Self::$variant), )*
                    _ => None,
                }
            }

            /// The wire value.
            pub const fn as_u32(self) -> u32 {
                self as u32
            }
        }

        impl ::dionfs_xdr::Encode for $name {
            fn encode(&self, enc: &mut ::dionfs_xdr::Encoder) {
                enc.u32(self.as_u32());
            }
        }

        impl<'a> ::dionfs_xdr::Decode<'a> for $name {
            fn decode(dec: &mut ::dionfs_xdr::Decoder<'a>) -> ::dionfs_xdr::Result<Self> {
                let value = dec.u32()?;
                Self::from_u32(value).ok_or(::dionfs_xdr::XdrError::BadDiscriminant {
                    type_name: stringify!($name),
                    value,
                })
            }
        }
    };
}

pub(crate) use xdr_enum;
pub(crate) use xdr_struct;

/// XDR `void` (RFC 4506 section 4.16): the arguments of NULL, and the
/// failure arm of results that carry nothing but the status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Void;

impl Encode for Void {
    fn encode(&self, _enc: &mut Encoder) {}
}

impl Decode<'_> for Void {
    fn decode(_dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Void)
    }
}

/// Encoded size of variable-length opaque data or a string of `len` bytes:
/// length word, bytes, padding (RFC 4506 sections 4.10, 4.11).
pub const fn opaque_var_len(len: usize) -> usize {
    4 + len + pad_len(len)
}

/// Decodes an XDR linked list (`*T` whose item ends with the next `*T`, as
/// `entry3` or `mountbody`): a `value_follows` boolean before each item and a
/// final FALSE. More than `max_items` items is [`XdrError::TooLong`].
pub(crate) fn decode_list<'a, T>(
    dec: &mut Decoder<'a>,
    max_items: u32,
    mut item: impl FnMut(&mut Decoder<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut items = Vec::new();
    let mut count: u32 = 0;
    while dec.bool()? {
        if count == max_items {
            return Err(XdrError::TooLong {
                len: count.saturating_add(1),
                max: max_items,
            });
        }
        items.push(item(dec)?);
        count += 1;
    }
    Ok(items)
}

/// Encodes an XDR linked list: TRUE before each item, then FALSE.
pub(crate) fn encode_list<T>(
    enc: &mut Encoder,
    items: &[T],
    mut item: impl FnMut(&mut Encoder, &T),
) {
    for x in items {
        enc.bool(true);
        item(enc, x);
    }
    enc.bool(false);
}

/// Decodes a counted array of u32 (`unsigned int x<>`): at most `max`
/// items, and never more than the input can hold, checked before allocating.
pub(crate) fn decode_u32_array(dec: &mut Decoder<'_>, max: u32) -> Result<Vec<u32>> {
    let count = dec.u32()?;
    if count > max {
        return Err(XdrError::TooLong { len: count, max });
    }
    let needed = count as usize * 4;
    if needed > dec.remaining() {
        return Err(XdrError::Truncated {
            needed,
            available: dec.remaining(),
        });
    }
    (0..count).map(|_| dec.u32()).collect()
}

/// Encodes a counted array of u32.
pub(crate) fn encode_u32_array(enc: &mut Encoder, items: &[u32]) {
    enc.u32(items.len() as u32);
    for &x in items {
        enc.u32(x);
    }
}

/// Declares a newtype over owned bytes encoded as an XDR string or opaque
/// with a maximum length enforced when decoding (and asserted in debug
/// builds when encoding: a longer value is a bug in our own code).
macro_rules! xdr_bytes {
    (
        $(#[$meta:meta])*
        pub struct $name:ident(max = $max:expr);
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub Vec<u8>);

        impl $name {
            /// The longest value accepted when decoding.
            pub const MAX_LEN: u32 = $max;

            /// The bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }
        }

        impl From<Vec<u8>> for $name {
            fn from(bytes: Vec<u8>) -> Self {
                Self(bytes)
            }
        }

        impl From<&[u8]> for $name {
            fn from(bytes: &[u8]) -> Self {
                Self(bytes.to_vec())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.as_bytes().to_vec())
            }
        }

        impl AsRef<[u8]> for $name {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }

        impl ::dionfs_xdr::Encode for $name {
            fn encode(&self, enc: &mut ::dionfs_xdr::Encoder) {
                debug_assert!(
                    self.0.len() <= Self::MAX_LEN as usize,
                    concat!(stringify!($name), " longer than its maximum")
                );
                enc.string(&self.0);
            }
        }

        impl<'a> ::dionfs_xdr::Decode<'a> for $name {
            fn decode(dec: &mut ::dionfs_xdr::Decoder<'a>) -> ::dionfs_xdr::Result<Self> {
                Ok(Self(dec.string(Self::MAX_LEN)?.to_vec()))
            }
        }
    };
}

pub(crate) use xdr_bytes;

/// Declares a newtype over a fixed 8-byte verifier (`opaque x[8]`).
macro_rules! xdr_verf {
    (
        $(#[$meta:meta])*
        pub struct $name:ident;
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub [u8; 8]);

        impl ::dionfs_xdr::Encode for $name {
            fn encode(&self, enc: &mut ::dionfs_xdr::Encoder) {
                enc.opaque_fixed(&self.0);
            }
        }

        impl<'a> ::dionfs_xdr::Decode<'a> for $name {
            fn decode(dec: &mut ::dionfs_xdr::Decoder<'a>) -> ::dionfs_xdr::Result<Self> {
                let mut v = [0u8; 8];
                v.copy_from_slice(dec.opaque_fixed(8)?);
                Ok(Self(v))
            }
        }
    };
}

pub(crate) use xdr_verf;

/// How long a procedure's arguments can be, so that a server can refuse a
/// longer call before reading it into memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsLimit {
    /// The whole arguments are at most this many bytes.
    Whole(usize),
    /// A head of at most this many bytes, then a payload whose length
    /// the head gives (WRITE): bounded by the server's transfer size, not
    /// by the protocol, and received into a buffer of its own.
    HeadThenPayload(usize),
}

impl ArgsLimit {
    /// The bound of the whole arguments, if they are read whole.
    pub const fn whole(self) -> Option<usize> {
        match self {
            ArgsLimit::Whole(n) => Some(n),
            ArgsLimit::HeadThenPayload(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_cap_is_enforced_before_reading_the_extra_item() {
        let mut enc = Encoder::new();
        encode_list(&mut enc, &[1u32, 2, 3], |e, &x| e.u32(x));
        let bytes = enc.into_vec();
        assert_eq!(bytes.len(), 3 * 8 + 4);
        let read = |max| decode_list(&mut Decoder::new(&bytes), max, Decoder::u32);
        assert_eq!(read(3), Ok(vec![1, 2, 3]));
        assert_eq!(read(2), Err(XdrError::TooLong { len: 3, max: 2 }));
        assert_eq!(read(0), Err(XdrError::TooLong { len: 1, max: 0 }));
    }

    #[test]
    fn array_count_is_checked_against_the_input_before_allocating() {
        let bytes = [0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2];
        assert!(matches!(
            decode_u32_array(&mut Decoder::new(&bytes), 10),
            Err(XdrError::Truncated {
                needed: 12,
                available: 8
            })
        ));
        let bytes = [0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_u32_array(&mut Decoder::new(&bytes), u32::MAX),
            Err(XdrError::Truncated { .. })
        ));
    }

    #[test]
    fn opaque_var_len_includes_length_and_padding() {
        assert_eq!(opaque_var_len(0), 4);
        assert_eq!(opaque_var_len(1), 8);
        assert_eq!(opaque_var_len(4), 8);
        assert_eq!(opaque_var_len(5), 12);
    }
}
