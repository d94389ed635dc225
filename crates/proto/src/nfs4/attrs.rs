//! Attributes (RFC 8881 section 5): their numbers, and `fattr4`, a
//! bitmap of attributes followed by their values packed in bit order.
//! The values are opaque to this layer until [`decode_settable`] reads
//! the ones SETATTR, CREATE and OPEN may set.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

use crate::codec::{xdr_bytes, xdr_enum, xdr_struct};
use crate::nfs4::types::{
    decode_array, encode_array, Bitmap4, NfsTime4, Utf8Str, NFS4_OPAQUE_LIMIT,
};

/// The longest `attrlist4` decoded: every settable attribute at its
/// longest fits many times over; an ACL longer than this is refused as
/// bad XDR rather than decoded.
pub const FATTR4_MAX_LEN: u32 = 16 * 1024;

xdr_enum! {
    /// `fattr4` attribute numbers (RFC 8881 section 5, RFC 7862 section
    /// 12.2, RFC 8276 section 8.2): the bit of each in a [`Bitmap4`].
    pub enum Attr4 {
        /// `FATTR4_SUPPORTED_ATTRS`.
        SupportedAttrs = 0,
        /// `FATTR4_TYPE`.
        Type = 1,
        /// `FATTR4_FH_EXPIRE_TYPE`.
        FhExpireType = 2,
        /// `FATTR4_CHANGE`.
        Change = 3,
        /// `FATTR4_SIZE`.
        Size = 4,
        /// `FATTR4_LINK_SUPPORT`.
        LinkSupport = 5,
        /// `FATTR4_SYMLINK_SUPPORT`.
        SymlinkSupport = 6,
        /// `FATTR4_NAMED_ATTR`.
        NamedAttr = 7,
        /// `FATTR4_FSID`.
        Fsid = 8,
        /// `FATTR4_UNIQUE_HANDLES`.
        UniqueHandles = 9,
        /// `FATTR4_LEASE_TIME`.
        LeaseTime = 10,
        /// `FATTR4_RDATTR_ERROR`.
        RdattrError = 11,
        /// `FATTR4_ACL`.
        Acl = 12,
        /// `FATTR4_ACLSUPPORT`.
        Aclsupport = 13,
        /// `FATTR4_ARCHIVE`.
        Archive = 14,
        /// `FATTR4_CANSETTIME`.
        Cansettime = 15,
        /// `FATTR4_CASE_INSENSITIVE`.
        CaseInsensitive = 16,
        /// `FATTR4_CASE_PRESERVING`.
        CasePreserving = 17,
        /// `FATTR4_CHOWN_RESTRICTED`.
        ChownRestricted = 18,
        /// `FATTR4_FILEHANDLE`.
        Filehandle = 19,
        /// `FATTR4_FILEID`.
        Fileid = 20,
        /// `FATTR4_FILES_AVAIL`.
        FilesAvail = 21,
        /// `FATTR4_FILES_FREE`.
        FilesFree = 22,
        /// `FATTR4_FILES_TOTAL`.
        FilesTotal = 23,
        /// `FATTR4_FS_LOCATIONS`.
        FsLocations = 24,
        /// `FATTR4_HIDDEN`.
        Hidden = 25,
        /// `FATTR4_HOMOGENEOUS`.
        Homogeneous = 26,
        /// `FATTR4_MAXFILESIZE`.
        Maxfilesize = 27,
        /// `FATTR4_MAXLINK`.
        Maxlink = 28,
        /// `FATTR4_MAXNAME`.
        Maxname = 29,
        /// `FATTR4_MAXREAD`.
        Maxread = 30,
        /// `FATTR4_MAXWRITE`.
        Maxwrite = 31,
        /// `FATTR4_MIMETYPE`.
        Mimetype = 32,
        /// `FATTR4_MODE`.
        Mode = 33,
        /// `FATTR4_NO_TRUNC`.
        NoTrunc = 34,
        /// `FATTR4_NUMLINKS`.
        Numlinks = 35,
        /// `FATTR4_OWNER`.
        Owner = 36,
        /// `FATTR4_OWNER_GROUP`.
        OwnerGroup = 37,
        /// `FATTR4_QUOTA_AVAIL_HARD`.
        QuotaAvailHard = 38,
        /// `FATTR4_QUOTA_AVAIL_SOFT`.
        QuotaAvailSoft = 39,
        /// `FATTR4_QUOTA_USED`.
        QuotaUsed = 40,
        /// `FATTR4_RAWDEV`.
        Rawdev = 41,
        /// `FATTR4_SPACE_AVAIL`.
        SpaceAvail = 42,
        /// `FATTR4_SPACE_FREE`.
        SpaceFree = 43,
        /// `FATTR4_SPACE_TOTAL`.
        SpaceTotal = 44,
        /// `FATTR4_SPACE_USED`.
        SpaceUsed = 45,
        /// `FATTR4_SYSTEM`.
        System = 46,
        /// `FATTR4_TIME_ACCESS`.
        TimeAccess = 47,
        /// `FATTR4_TIME_ACCESS_SET`.
        TimeAccessSet = 48,
        /// `FATTR4_TIME_BACKUP`.
        TimeBackup = 49,
        /// `FATTR4_TIME_CREATE`.
        TimeCreate = 50,
        /// `FATTR4_TIME_DELTA`.
        TimeDelta = 51,
        /// `FATTR4_TIME_METADATA`.
        TimeMetadata = 52,
        /// `FATTR4_TIME_MODIFY`.
        TimeModify = 53,
        /// `FATTR4_TIME_MODIFY_SET`.
        TimeModifySet = 54,
        /// `FATTR4_MOUNTED_ON_FILEID`.
        MountedOnFileid = 55,
        /// `FATTR4_DIR_NOTIF_DELAY`.
        DirNotifDelay = 56,
        /// `FATTR4_DIRENT_NOTIF_DELAY`.
        DirentNotifDelay = 57,
        /// `FATTR4_DACL`.
        Dacl = 58,
        /// `FATTR4_SACL`.
        Sacl = 59,
        /// `FATTR4_CHANGE_POLICY`.
        ChangePolicy = 60,
        /// `FATTR4_FS_STATUS`.
        FsStatus = 61,
        /// `FATTR4_FS_LAYOUT_TYPES`.
        FsLayoutTypes = 62,
        /// `FATTR4_LAYOUT_HINT`.
        LayoutHint = 63,
        /// `FATTR4_LAYOUT_TYPES`.
        LayoutTypes = 64,
        /// `FATTR4_LAYOUT_BLKSIZE`.
        LayoutBlksize = 65,
        /// `FATTR4_LAYOUT_ALIGNMENT`.
        LayoutAlignment = 66,
        /// `FATTR4_FS_LOCATIONS_INFO`.
        FsLocationsInfo = 67,
        /// `FATTR4_MDSTHRESHOLD`.
        Mdsthreshold = 68,
        /// `FATTR4_RETENTION_GET`.
        RetentionGet = 69,
        /// `FATTR4_RETENTION_SET`.
        RetentionSet = 70,
        /// `FATTR4_RETENTEVT_GET`.
        RetentevtGet = 71,
        /// `FATTR4_RETENTEVT_SET`.
        RetentevtSet = 72,
        /// `FATTR4_RETENTION_HOLD`.
        RetentionHold = 73,
        /// `FATTR4_MODE_SET_MASKED`.
        ModeSetMasked = 74,
        /// `FATTR4_SUPPATTR_EXCLCREAT`.
        SuppattrExclcreat = 75,
        /// `FATTR4_FS_CHARSET_CAP`.
        FsCharsetCap = 76,
        /// `FATTR4_CLONE_BLKSIZE`.
        CloneBlksize = 77,
        /// `FATTR4_SPACE_FREED`.
        SpaceFreed = 78,
        /// `FATTR4_CHANGE_ATTR_TYPE`.
        ChangeAttrType = 79,
        /// `FATTR4_SEC_LABEL`.
        SecLabel = 80,
        /// `FATTR4_XATTR_SUPPORT`.
        XattrSupport = 82,
        /// `FATTR4_OFFLINE`.
        Offline = 83,
        /// `FATTR4_TIME_DELEG_ACCESS`.
        TimeDelegAccess = 84,
        /// `FATTR4_TIME_DELEG_MODIFY`.
        TimeDelegModify = 85,
        /// `FATTR4_OPEN_ARGUMENTS`.
        OpenArguments = 86,
    }
}

impl Attr4 {
    /// The attribute's bit in a [`Bitmap4`].
    pub const fn bit(self) -> u32 {
        self.as_u32()
    }
}

xdr_bytes! {
    /// `attrlist4`: attribute values in the order of their bits, at most
    /// [`FATTR4_MAX_LEN`] bytes decoded.
    pub struct AttrList4(max = FATTR4_MAX_LEN);
}

xdr_struct! {
    /// `fattr4`: which attributes, then their values.
    #[derive(Default)]
    pub struct Fattr4 {
        pub attrmask: Bitmap4,
        pub attr_vals: AttrList4,
    }
}

/// An owner or group name (`utf8str_mixed`: `user@domain` or a number).
pub type Owner4 = Utf8Str<NFS4_OPAQUE_LIMIT>;

/// `ACE4_ACCESS_ALLOWED_ACE_TYPE`, `ACE4_ACCESS_DENIED_ACE_TYPE`,
/// `ACE4_SYSTEM_AUDIT_ACE_TYPE` and `ACE4_SYSTEM_ALARM_ACE_TYPE` (RFC
/// 8881 section 6.2.1.1).
pub const ACE4_ACCESS_ALLOWED_ACE_TYPE: u32 = 0;
pub const ACE4_ACCESS_DENIED_ACE_TYPE: u32 = 1;
pub const ACE4_SYSTEM_AUDIT_ACE_TYPE: u32 = 2;
pub const ACE4_SYSTEM_ALARM_ACE_TYPE: u32 = 3;

/// `aclsupport` bits (RFC 8881 section 6.2.1.2).
pub const ACL4_SUPPORT_ALLOW_ACL: u32 = 0x1;
pub const ACL4_SUPPORT_DENY_ACL: u32 = 0x2;

/// ACE flags (RFC 8881 section 6.2.1.4).
pub const ACE4_FILE_INHERIT_ACE: u32 = 0x01;
pub const ACE4_DIRECTORY_INHERIT_ACE: u32 = 0x02;
pub const ACE4_NO_PROPAGATE_INHERIT_ACE: u32 = 0x04;
pub const ACE4_INHERIT_ONLY_ACE: u32 = 0x08;
pub const ACE4_IDENTIFIER_GROUP: u32 = 0x40;
pub const ACE4_INHERITED_ACE: u32 = 0x80;

/// ACE access mask bits (RFC 8881 section 6.2.1.3.1).
pub const ACE4_READ_DATA: u32 = 0x0000_0001;
pub const ACE4_WRITE_DATA: u32 = 0x0000_0002;
pub const ACE4_APPEND_DATA: u32 = 0x0000_0004;
pub const ACE4_READ_NAMED_ATTRS: u32 = 0x0000_0008;
pub const ACE4_WRITE_NAMED_ATTRS: u32 = 0x0000_0010;
pub const ACE4_EXECUTE: u32 = 0x0000_0020;
pub const ACE4_DELETE_CHILD: u32 = 0x0000_0040;
pub const ACE4_READ_ATTRIBUTES: u32 = 0x0000_0080;
pub const ACE4_WRITE_ATTRIBUTES: u32 = 0x0000_0100;
pub const ACE4_DELETE: u32 = 0x0001_0000;
pub const ACE4_READ_ACL: u32 = 0x0002_0000;
pub const ACE4_WRITE_ACL: u32 = 0x0004_0000;
pub const ACE4_WRITE_OWNER: u32 = 0x0008_0000;
pub const ACE4_SYNCHRONIZE: u32 = 0x0010_0000;

/// The most ACEs an `acl` or `dacl` decodes: every ACE takes at least 16
/// bytes, so no more fit in an `attrlist4` ([`FATTR4_MAX_LEN`]).
pub const NFS4_MAX_ACES: u32 = FATTR4_MAX_LEN / 16;

xdr_struct! {
    /// `nfsace4`: one entry of an ACL, for the user or group `who`
    /// (`OWNER@`, `GROUP@`, `EVERYONE@` or a name).
    pub struct Nfsace4 {
        pub acetype: u32,
        pub flag: u32,
        pub access_mask: u32,
        pub who: Owner4,
    }
}

/// The value of `acl`: `nfsace4 acl<>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nfsacl4(pub Vec<Nfsace4>);

impl Encode for Nfsacl4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_array(enc, &self.0);
    }
}

impl Decode<'_> for Nfsacl4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(decode_array(dec, NFS4_MAX_ACES, 16)?))
    }
}

xdr_struct! {
    /// `nfsacl41`: the value of `dacl` (and `sacl`), an ACL with its
    /// `ACL4_AUTO_INHERIT`, `ACL4_PROTECTED` and `ACL4_DEFAULTED` flags.
    #[derive(Default)]
    pub struct Nfsacl41 {
        pub na41_flag: u32,
        pub na41_aces: Nfsacl4,
    }
}

xdr_enum! {
    /// `time_how4`: set a time to the server's clock or to the client's.
    pub enum TimeHow4 {
        SetToServerTime = 0,
        SetToClientTime = 1,
    }
}

/// `settime4`: the value of `time_access_set` and `time_modify_set`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime4 {
    /// `SET_TO_SERVER_TIME4`.
    ServerTime,
    /// `SET_TO_CLIENT_TIME4`.
    ClientTime(NfsTime4),
}

impl Encode for SetTime4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetTime4::ServerTime => TimeHow4::SetToServerTime.encode(enc),
            SetTime4::ClientTime(t) => {
                TimeHow4::SetToClientTime.encode(enc);
                t.encode(enc);
            }
        }
    }
}

impl Decode<'_> for SetTime4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match TimeHow4::decode(dec)? {
            TimeHow4::SetToServerTime => SetTime4::ServerTime,
            TimeHow4::SetToClientTime => SetTime4::ClientTime(NfsTime4::decode(dec)?),
        })
    }
}

/// The attributes a client may set (SETATTR, CREATE, OPEN's createattrs)
/// that dionfs supports, decoded from an `fattr4`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttrs4 {
    pub size: Option<u64>,
    pub acl: Option<Nfsacl4>,
    pub mode: Option<u32>,
    pub owner: Option<Owner4>,
    pub owner_group: Option<Owner4>,
    pub time_access_set: Option<SetTime4>,
    pub time_modify_set: Option<SetTime4>,
    pub dacl: Option<Nfsacl41>,
}

/// Why the values of an `fattr4` to set cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettableError {
    /// The values are not valid XDR for the bitmap (`NFS4ERR_BADXDR`).
    Xdr(XdrError),
    /// The bitmap names an attribute that is read-only or unknown
    /// (`NFS4ERR_INVAL` for read-only ones, `NFS4ERR_ATTRNOTSUPP` for the
    /// rest: the handler tells them apart by the number).
    NotSettable(u32),
}

impl From<XdrError> for SettableError {
    fn from(e: XdrError) -> Self {
        SettableError::Xdr(e)
    }
}

impl SetAttrs4 {
    /// The bitmap of the attributes set, in bit order.
    pub fn bitmap(&self) -> Bitmap4 {
        let mut map = Bitmap4::default();
        let set = [
            (self.size.is_some(), Attr4::Size),
            (self.acl.is_some(), Attr4::Acl),
            (self.mode.is_some(), Attr4::Mode),
            (self.owner.is_some(), Attr4::Owner),
            (self.owner_group.is_some(), Attr4::OwnerGroup),
            (self.time_access_set.is_some(), Attr4::TimeAccessSet),
            (self.time_modify_set.is_some(), Attr4::TimeModifySet),
            (self.dacl.is_some(), Attr4::Dacl),
        ];
        for (present, attr) in set {
            if present {
                map.set(attr.bit());
            }
        }
        map
    }

    /// The `fattr4` of these attributes, values in bit order.
    pub fn to_fattr(&self) -> Fattr4 {
        let mut enc = Encoder::new();
        // Bit order: size 4, acl 12, mode 33, owner 36, owner_group 37,
        // time_access_set 48, time_modify_set 54, dacl 58.
        if let Some(size) = self.size {
            enc.u64(size);
        }
        if let Some(acl) = &self.acl {
            acl.encode(&mut enc);
        }
        if let Some(mode) = self.mode {
            enc.u32(mode);
        }
        if let Some(owner) = &self.owner {
            owner.encode(&mut enc);
        }
        if let Some(group) = &self.owner_group {
            group.encode(&mut enc);
        }
        if let Some(t) = &self.time_access_set {
            t.encode(&mut enc);
        }
        if let Some(t) = &self.time_modify_set {
            t.encode(&mut enc);
        }
        if let Some(dacl) = &self.dacl {
            dacl.encode(&mut enc);
        }
        Fattr4 {
            attrmask: self.bitmap(),
            attr_vals: AttrList4(enc.into_vec()),
        }
    }
}

/// Decodes the values of attributes to set: `vals` must hold exactly the
/// attributes of `mask`, in bit order. The first attribute dionfs does
/// not set (`sacl`, a read-only or unknown attribute) is refused by
/// number; the values after it are not read, since their offset depends
/// on it.
pub fn decode_settable(
    mask: &Bitmap4,
    vals: &[u8],
) -> std::result::Result<SetAttrs4, SettableError> {
    let mut dec = Decoder::new(vals);
    let mut attrs = SetAttrs4::default();
    for bit in mask.bits() {
        match Attr4::from_u32(bit) {
            Some(Attr4::Size) => attrs.size = Some(dec.u64()?),
            Some(Attr4::Acl) => attrs.acl = Some(Nfsacl4::decode(&mut dec)?),
            Some(Attr4::Dacl) => attrs.dacl = Some(Nfsacl41::decode(&mut dec)?),
            Some(Attr4::Mode) => attrs.mode = Some(dec.u32()?),
            Some(Attr4::Owner) => attrs.owner = Some(Owner4::decode(&mut dec)?),
            Some(Attr4::OwnerGroup) => attrs.owner_group = Some(Owner4::decode(&mut dec)?),
            Some(Attr4::TimeAccessSet) => attrs.time_access_set = Some(SetTime4::decode(&mut dec)?),
            Some(Attr4::TimeModifySet) => attrs.time_modify_set = Some(SetTime4::decode(&mut dec)?),
            _ => return Err(SettableError::NotSettable(bit)),
        }
    }
    dec.finish()?;
    Ok(attrs)
}

/// Builds the `fattr4` of a GETATTR, READDIR entry or VERIFY: the values
/// of the attributes asked for, appended in bit order, skipping those the
/// server does not support (RFC 8881 section 5: the reply's bitmap names
/// only what it returns).
///
/// The caller knows the values; this knows the order. For each bit of
/// the request, in increasing order, [`FattrEncoder::encode`] calls
/// `value(bit, enc)`, which appends the attribute's value and returns
/// `true`, or appends nothing and returns `false` for an attribute it
/// does not support.
#[derive(Debug, Clone, Default)]
pub struct FattrEncoder {
    attrmask: Bitmap4,
    vals: Encoder,
}

impl FattrEncoder {
    /// The `fattr4` of the attributes of `request` that `value` supplies.
    pub fn encode(request: &Bitmap4, mut value: impl FnMut(u32, &mut Encoder) -> bool) -> Fattr4 {
        let mut this = Self::default();
        for bit in request.bits() {
            let before = this.vals.len();
            if value(bit, &mut this.vals) {
                this.attrmask.set(bit);
            } else {
                debug_assert_eq!(this.vals.len(), before, "unsupported attribute {bit} wrote");
            }
        }
        Fattr4 {
            attrmask: this.attrmask,
            attr_vals: AttrList4(this.vals.into_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::assert_codec;

    fn all_settable() -> SetAttrs4 {
        let ace = |acetype, flag, access_mask, who: &str| Nfsace4 {
            acetype,
            flag,
            access_mask,
            who: Owner4::from(who),
        };
        SetAttrs4 {
            size: Some(1 << 40),
            acl: Some(Nfsacl4(vec![
                ace(ACE4_ACCESS_DENIED_ACE_TYPE, 0, ACE4_WRITE_DATA, "OWNER@"),
                ace(
                    ACE4_ACCESS_ALLOWED_ACE_TYPE,
                    ACE4_IDENTIFIER_GROUP,
                    ACE4_READ_DATA,
                    "100",
                ),
            ])),
            mode: Some(0o4755),
            owner: Some(Owner4::from("alice@example.org")),
            owner_group: Some(Owner4::from("100")),
            time_access_set: Some(SetTime4::ServerTime),
            time_modify_set: Some(SetTime4::ClientTime(NfsTime4 {
                seconds: 5,
                nseconds: 6,
            })),
            dacl: Some(Nfsacl41 {
                na41_flag: 0,
                na41_aces: Nfsacl4(vec![ace(
                    ACE4_ACCESS_ALLOWED_ACE_TYPE,
                    0,
                    ACE4_EXECUTE,
                    "EVERYONE@",
                )]),
            }),
        }
    }

    #[test]
    fn fattr_and_settime_round_trip() {
        assert_codec(&Fattr4::default());
        assert_codec(&all_settable().to_fattr());
        assert_codec(&SetTime4::ServerTime);
        assert_codec(&SetTime4::ClientTime(NfsTime4 {
            seconds: -1,
            nseconds: 0,
        }));
        for a in Attr4::ALL {
            assert_codec(a);
        }
        assert!(AttrList4::from_xdr(&u32::MAX.to_be_bytes()).is_err());
    }

    #[test]
    fn fattr_encoder_appends_supported_values_in_bit_order() {
        // Asked for type (1), size (4), an unsupported archive (14) and
        // mode (33); the values come out in bit order, archive left out.
        let request = Bitmap4::from_bits(&[33, 14, 4, 1]);
        let mut asked = Vec::new();
        let fattr = FattrEncoder::encode(&request, |bit, enc| {
            asked.push(bit);
            match Attr4::from_u32(bit) {
                Some(Attr4::Type) => enc.u32(2),
                Some(Attr4::Size) => enc.u64(4096),
                Some(Attr4::Mode) => enc.u32(0o755),
                _ => return false,
            }
            true
        });
        assert_eq!(asked, vec![1, 4, 14, 33]);
        assert_eq!(fattr.attrmask.bits().collect::<Vec<_>>(), vec![1, 4, 33]);
        assert_eq!(
            fattr.attr_vals.as_bytes(),
            [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x01, 0xed]
        );
        let none = FattrEncoder::encode(&request, |_, _| false);
        assert_eq!(none, Fattr4::default());
    }

    #[test]
    fn settable_attributes_decode_from_their_fattr() {
        let want = all_settable();
        let f = want.to_fattr();
        assert_eq!(
            f.attrmask.bits().collect::<Vec<_>>(),
            vec![4, 12, 33, 36, 37, 48, 54, 58]
        );
        assert_eq!(
            decode_settable(&f.attrmask, f.attr_vals.as_bytes()),
            Ok(want)
        );
        let none = SetAttrs4::default().to_fattr();
        assert_eq!(
            decode_settable(&none.attrmask, none.attr_vals.as_bytes()),
            Ok(SetAttrs4::default())
        );
    }

    #[test]
    fn settable_refuses_others_short_and_trailing_values() {
        let sacl = Bitmap4::from_bits(&[Attr4::Sacl.bit()]);
        assert_eq!(
            decode_settable(&sacl, &[0, 0, 0, 0, 0, 0, 0, 0]),
            Err(SettableError::NotSettable(59))
        );
        // An ACE count past what the values hold is refused before
        // anything is allocated.
        let acl = Bitmap4::from_bits(&[Attr4::Acl.bit()]);
        assert!(matches!(
            decode_settable(&acl, &[0, 0, 0x03, 0xff]),
            Err(SettableError::Xdr(XdrError::Truncated { .. }))
        ));
        assert!(matches!(
            decode_settable(&acl, &u32::MAX.to_be_bytes()),
            Err(SettableError::Xdr(XdrError::TooLong { .. }))
        ));
        let mode = Bitmap4::from_bits(&[Attr4::Mode.bit()]);
        assert!(matches!(
            decode_settable(&mode, &[0, 0]),
            Err(SettableError::Xdr(XdrError::Truncated { .. }))
        ));
        assert_eq!(
            decode_settable(&mode, &[0, 0, 1, 0xed, 0, 0, 0, 0]),
            Err(SettableError::Xdr(XdrError::Trailing(4)))
        );
        let owner = Bitmap4::from_bits(&[Attr4::Owner.bit()]);
        assert!(decode_settable(&owner, &u32::MAX.to_be_bytes()).is_err());
        let read_only = Bitmap4::from_bits(&[Attr4::Mode.bit(), Attr4::Fileid.bit()]);
        assert_eq!(
            decode_settable(&read_only, &[0, 0, 1, 0xa4, 0, 0, 0, 0, 0, 0, 0, 1]),
            Err(SettableError::NotSettable(20))
        );
    }
}
