//! Extended attributes (RFC 8276 section 8.4, NFSv4.2): GETXATTR,
//! SETXATTR, LISTXATTRS and REMOVEXATTR. Names travel without the
//! `user.` prefix Linux gives them; the handler adds and strips it.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{xdr_bytes, xdr_enum, xdr_struct};
use crate::nfs4::types::{decode_array, encode_array, Component4};

/// The largest extended attribute value decoded: Linux's
/// `XATTR_SIZE_MAX` (64 KiB), beyond which no local file system stores
/// one. A longer value is bad XDR.
pub const XATTR_SIZE_MAX: u32 = 64 * 1024;

/// The most names of a LISTXATTRS result decoded: Linux lists at most
/// `XATTR_LIST_MAX` (64 KiB) of names, each at least two bytes with its
/// NUL.
pub const LISTXATTRS_MAX_NAMES: u32 = 32 * 1024;

/// `xattrkey4`: an attribute's name (a `component4`; over 255 bytes is
/// the handler's `NFS4ERR_NAMETOOLONG`).
pub type XattrKey4 = Component4;

xdr_bytes! {
    /// `xattrvalue4`: an attribute's value, at most [`XATTR_SIZE_MAX`]
    /// bytes decoded.
    pub struct XattrValue4(max = XATTR_SIZE_MAX);
}

xdr_struct! {
    /// `GETXATTR4args`; the result is a [`XattrValue4`].
    pub struct GetxattrArgs4 {
        pub name: XattrKey4,
    }
}

xdr_enum! {
    /// `setxattr_option4`: whether SETXATTR may create, replace or both
    /// (`XATTR_CREATE`, `XATTR_REPLACE`, neither).
    pub enum SetxattrOption4 {
        Either = 0,
        Create = 1,
        Replace = 2,
    }
}

xdr_struct! {
    /// `SETXATTR4args`; the result is a [`ChangeInfo4`](crate::nfs4::ChangeInfo4).
    pub struct SetxattrArgs4 {
        pub option: SetxattrOption4,
        pub key: XattrKey4,
        pub value: XattrValue4,
    }
}

xdr_struct! {
    /// `LISTXATTRS4args`: from `cookie` (0 at first), at most `maxcount`
    /// bytes of result.
    pub struct ListxattrsArgs4 {
        pub cookie: u64,
        pub maxcount: u32,
    }
}

/// `LISTXATTRS4resok`: the next cookie, names, and whether they were the
/// last. At most [`LISTXATTRS_MAX_NAMES`] names decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListxattrsResOk4 {
    pub cookie: u64,
    pub names: Vec<XattrKey4>,
    pub eof: bool,
}

impl Encode for ListxattrsResOk4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.cookie);
        encode_array(enc, &self.names);
        enc.bool(self.eof);
    }
}

impl Decode<'_> for ListxattrsResOk4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            cookie: dec.u64()?,
            names: decode_array(dec, LISTXATTRS_MAX_NAMES, 4)?,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// `REMOVEXATTR4args`; the result is a
    /// [`ChangeInfo4`](crate::nfs4::ChangeInfo4).
    pub struct RemovexattrArgs4 {
        pub name: XattrKey4,
    }
}

#[cfg(test)]
mod tests {
    use dionfs_xdr::XdrError;

    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{ArgOp, ChangeInfo4, Nfsstat4, Res4};
    use crate::test_util::assert_codec;

    #[test]
    fn xattr_args_round_trip() {
        let mut seen = 0;
        for op in typical_ops() {
            seen += 1;
            match op {
                ArgOp::Getxattr(a) => assert_codec(&a),
                ArgOp::Setxattr(a) => assert_codec(&a),
                ArgOp::Listxattrs(a) => assert_codec(&a),
                ArgOp::Removexattr(a) => assert_codec(&a),
                _ => seen -= 1,
            }
        }
        assert!(seen >= 4, "only {seen} xattr ops sampled");
        // The largest value decodes (not through assert_codec, whose
        // mutations would copy 64 KiB a hundred thousand times).
        let largest = SetxattrArgs4 {
            option: SetxattrOption4::Replace,
            key: Component4::from("big"),
            value: XattrValue4(filled(XATTR_SIZE_MAX, 0x5a)),
        };
        assert_eq!(SetxattrArgs4::from_xdr(&largest.to_xdr()), Ok(largest));
    }

    #[test]
    fn xattr_results_round_trip() {
        assert_codec(&Res4::Ok(XattrValue4::from("value")));
        assert_codec(&Res4::<XattrValue4>::Fail(Nfsstat4::Noxattr));
        assert_codec(&Res4::Ok(cinfo()));
        assert_codec(&Res4::<ChangeInfo4>::Fail(Nfsstat4::Exist));
        assert_codec(&Res4::Ok(ListxattrsResOk4 {
            cookie: 3,
            names: vec![Component4::from("a"), Component4::from("mime_type")],
            eof: true,
        }));
        assert_codec(&Res4::Ok(ListxattrsResOk4::default()));
    }

    #[test]
    fn xattr_bounds_are_errors_before_allocation() {
        // A value one byte over XATTR_SIZE_MAX, whole in the input.
        let mut enc = Encoder::new();
        SetxattrOption4::Either.encode(&mut enc);
        Component4::from("k").encode(&mut enc);
        enc.opaque_var(&[0; XATTR_SIZE_MAX as usize + 1]);
        assert_eq!(
            SetxattrArgs4::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong {
                len: XATTR_SIZE_MAX + 1,
                max: XATTR_SIZE_MAX
            })
        );
        assert!(matches!(
            XattrValue4::from_xdr(&u32::MAX.to_be_bytes()),
            Err(XdrError::TooLong { .. })
        ));
        // Too many names, and as many as allowed in too short an input.
        let mut many = vec![0; 8];
        many.extend_from_slice(&(LISTXATTRS_MAX_NAMES + 1).to_be_bytes());
        assert!(matches!(
            ListxattrsResOk4::from_xdr(&many),
            Err(XdrError::TooLong { .. })
        ));
        let mut claimed = vec![0; 8];
        claimed.extend_from_slice(&LISTXATTRS_MAX_NAMES.to_be_bytes());
        assert!(matches!(
            ListxattrsResOk4::from_xdr(&claimed),
            Err(XdrError::Truncated { .. })
        ));
        assert!(SetxattrOption4::from_xdr(&3u32.to_be_bytes()).is_err());
    }
}
