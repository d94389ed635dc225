//! NFSv3 basic data types and constants (RFC 1813 sections 2.2 to 2.6).

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

use crate::codec::{xdr_bytes, xdr_enum, xdr_struct, xdr_verf};

/// RPC program number of NFS (RFC 1813 section 1.3).
pub const NFS_PROGRAM: u32 = 100003;
/// The NFS version these codecs speak (RFC 1813 section 1.3).
pub const NFS_V3: u32 = 3;

/// Maximum size of a file handle in bytes (RFC 1813 section 2.4).
pub const NFS3_FHSIZE: usize = 64;
/// Size of a READDIR cookie verifier (RFC 1813 section 2.4).
pub const NFS3_COOKIEVERFSIZE: usize = 8;
/// Size of an exclusive CREATE verifier (RFC 1813 section 2.4).
pub const NFS3_CREATEVERFSIZE: usize = 8;
/// Size of a WRITE/COMMIT verifier (RFC 1813 section 2.4).
pub const NFS3_WRITEVERFSIZE: usize = 8;

/// Longest `filename3` accepted by the codec. RFC 1813 leaves `filename3`
/// unbounded; the server enforces its own (smaller) name limit and answers
/// NFS3ERR_NAMETOOLONG, which needs the name decoded first, so the codec
/// only refuses lengths no real name has.
pub const NFS3_MAX_NAME_LEN: u32 = 1024;
/// Longest `nfspath3` (symlink target) accepted by the codec. RFC 1813
/// leaves it unbounded; Linux symlink targets go up to PATH_MAX (4096) and
/// the Linux client and knfsd use `NFS3_MAXPATHLEN = PATH_MAX`, so a smaller
/// limit here would turn valid SYMLINK/READLINK traffic into garbage.
pub const NFS3_MAX_PATH_LEN: u32 = 4096;

/// ACCESS3 bit: read data or list a directory (RFC 1813 section 3.3.4).
pub const ACCESS3_READ: u32 = 0x0001;
/// ACCESS3 bit: look up a name in a directory.
pub const ACCESS3_LOOKUP: u32 = 0x0002;
/// ACCESS3 bit: rewrite existing data or directory entries.
pub const ACCESS3_MODIFY: u32 = 0x0004;
/// ACCESS3 bit: write new data or add directory entries.
pub const ACCESS3_EXTEND: u32 = 0x0008;
/// ACCESS3 bit: delete a directory entry.
pub const ACCESS3_DELETE: u32 = 0x0010;
/// ACCESS3 bit: execute a file or search a directory.
pub const ACCESS3_EXECUTE: u32 = 0x0020;

/// FSINFO property: the file system supports hard links (RFC 1813 section 3.3.19).
pub const FSF3_LINK: u32 = 0x0001;
/// FSINFO property: the file system supports symbolic links.
pub const FSF3_SYMLINK: u32 = 0x0002;
/// FSINFO property: PATHCONF answers are the same for every file.
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
/// FSINFO property: SETATTR can set times to client-supplied values.
pub const FSF3_CANSETTIME: u32 = 0x0010;

xdr_enum! {
    /// NFSv3 procedure numbers (RFC 1813 section 3.3).
    pub enum NfsProc3 {
        Null = 0,
        Getattr = 1,
        Setattr = 2,
        Lookup = 3,
        Access = 4,
        Readlink = 5,
        Read = 6,
        Write = 7,
        Create = 8,
        Mkdir = 9,
        Symlink = 10,
        Mknod = 11,
        Remove = 12,
        Rmdir = 13,
        Rename = 14,
        Link = 15,
        Readdir = 16,
        Readdirplus = 17,
        Fsstat = 18,
        Fsinfo = 19,
        Pathconf = 20,
        Commit = 21,
    }
}

xdr_enum! {
    /// `nfsstat3`: the status of every NFSv3 result (RFC 1813 section 2.6).
    pub enum NfsStat3 {
        Ok = 0,
        Perm = 1,
        NoEnt = 2,
        Io = 5,
        NxIo = 6,
        Acces = 13,
        Exist = 17,
        XDev = 18,
        NoDev = 19,
        NotDir = 20,
        IsDir = 21,
        Inval = 22,
        FBig = 27,
        NoSpc = 28,
        Rofs = 30,
        MLink = 31,
        NameTooLong = 63,
        NotEmpty = 66,
        DQuot = 69,
        Stale = 70,
        Remote = 71,
        BadHandle = 10001,
        NotSync = 10002,
        BadCookie = 10003,
        NotSupp = 10004,
        TooSmall = 10005,
        ServerFault = 10006,
        BadType = 10007,
        Jukebox = 10008,
    }
}

xdr_enum! {
    /// `ftype3`: the type of a file (RFC 1813 section 2.6).
    pub enum Ftype3 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
    }
}

xdr_enum! {
    /// `stable_how`: how durable a WRITE must be before the reply
    /// (RFC 1813 section 3.3.7).
    pub enum StableHow {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
}

xdr_enum! {
    /// `createmode3`: the discriminant of [`CreateHow3`] (RFC 1813 section 3.3.8).
    pub enum CreateMode3 {
        Unchecked = 0,
        Guarded = 1,
        Exclusive = 2,
    }
}

xdr_enum! {
    /// `time_how`: the discriminant of [`SetTime`] (RFC 1813 section 2.6).
    pub enum TimeHow {
        DontChange = 0,
        SetToServerTime = 1,
        SetToClientTime = 2,
    }
}

/// `nfs_fh3`: an opaque file handle of at most [`NFS3_FHSIZE`] bytes
/// (RFC 1813 section 2.6). The field is private so that no handle longer
/// than the protocol allows can exist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NfsFh3(Vec<u8>);

impl NfsFh3 {
    /// A handle with these bytes, or [`XdrError::TooLong`] above 64 bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.len() > NFS3_FHSIZE {
            return Err(XdrError::TooLong {
                len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                max: NFS3_FHSIZE as u32,
            });
        }
        Ok(Self(bytes))
    }

    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Gives up the handle's bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }

    /// Size of the handle's XDR encoding (length word, bytes, padding).
    pub fn encoded_len(&self) -> usize {
        crate::codec::opaque_var_len(self.0.len())
    }
}

impl Encode for NfsFh3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque_var(&self.0);
    }
}

impl Decode<'_> for NfsFh3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.opaque_var(NFS3_FHSIZE as u32)?.to_vec()))
    }
}

xdr_bytes! {
    /// `filename3`: one path component, as bytes (not necessarily UTF-8),
    /// at most [`NFS3_MAX_NAME_LEN`] bytes at the codec level
    /// (RFC 1813 section 2.6).
    pub struct Filename3(max = NFS3_MAX_NAME_LEN);
}

xdr_bytes! {
    /// `nfspath3`: the target of a symbolic link, as bytes, at most
    /// [`NFS3_MAX_PATH_LEN`] bytes (RFC 1813 section 2.6).
    pub struct NfsPath3(max = NFS3_MAX_PATH_LEN);
}

xdr_verf! {
    /// `cookieverf3`: the READDIR cookie verifier (RFC 1813 section 2.6).
    pub struct CookieVerf3;
}

xdr_verf! {
    /// `createverf3`: the exclusive-CREATE verifier (RFC 1813 section 2.6).
    pub struct CreateVerf3;
}

xdr_verf! {
    /// `writeverf3`: the WRITE/COMMIT verifier, random per server start
    /// (RFC 1813 section 2.6).
    pub struct WriteVerf3;
}

xdr_struct! {
    /// `specdata3`: major and minor device numbers (RFC 1813 section 2.6).
    #[derive(Copy, Default, Hash)]
    pub struct SpecData3 {
        pub specdata1: u32,
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// `nfstime3`: seconds and nanoseconds since the epoch (RFC 1813 section 2.6).
    #[derive(Copy, Default, Hash, PartialOrd, Ord)]
    pub struct NfsTime3 {
        pub seconds: u32,
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// `fattr3`: the attributes of a file (RFC 1813 section 2.6). Its encoding
    /// is always [`Fattr3::ENCODED_LEN`] bytes.
    pub struct Fattr3 {
        /// RFC 1813 `type`.
        pub ftype: Ftype3,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub size: u64,
        pub used: u64,
        pub rdev: SpecData3,
        pub fsid: u64,
        pub fileid: u64,
        pub atime: NfsTime3,
        pub mtime: NfsTime3,
        pub ctime: NfsTime3,
    }
}

impl Fattr3 {
    /// Size of the XDR encoding: 5 words, 2 hypers, specdata3, 2 hypers,
    /// 3 nfstime3.
    pub const ENCODED_LEN: usize = 5 * 4 + 2 * 8 + 8 + 2 * 8 + 3 * 8;
}

xdr_struct! {
    /// `wcc_attr`: the attributes weak cache consistency compares
    /// (RFC 1813 section 2.6).
    #[derive(Copy, Default)]
    pub struct WccAttr {
        pub size: u64,
        pub mtime: NfsTime3,
        pub ctime: NfsTime3,
    }
}

/// `pre_op_attr`: attributes before an operation, if the server has them
/// (RFC 1813 section 2.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreOpAttr(pub Option<WccAttr>);

impl Encode for PreOpAttr {
    fn encode(&self, enc: &mut Encoder) {
        enc.optional(self.0.as_ref(), |e, a| a.encode(e));
    }
}

impl Decode<'_> for PreOpAttr {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.optional(WccAttr::decode)?))
    }
}

/// `post_op_attr`: attributes after an operation, if the server has them
/// (RFC 1813 section 2.6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostOpAttr(pub Option<Fattr3>);

impl PostOpAttr {
    /// Size of the XDR encoding: 4 bytes, plus [`Fattr3::ENCODED_LEN`] if present.
    pub fn encoded_len(&self) -> usize {
        4 + self.0.as_ref().map_or(0, |_| Fattr3::ENCODED_LEN)
    }
}

impl Encode for PostOpAttr {
    fn encode(&self, enc: &mut Encoder) {
        enc.optional(self.0.as_ref(), |e, a| a.encode(e));
    }
}

impl Decode<'_> for PostOpAttr {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.optional(Fattr3::decode)?))
    }
}

xdr_struct! {
    /// `wcc_data`: attributes before and after a modifying operation
    /// (RFC 1813 section 2.6).
    #[derive(Default)]
    pub struct WccData {
        pub before: PreOpAttr,
        pub after: PostOpAttr,
    }
}

/// `post_op_fh3`: the handle of a created or looked-up object, if the server
/// returns one (RFC 1813 section 2.6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostOpFh3(pub Option<NfsFh3>);

impl PostOpFh3 {
    /// Size of the XDR encoding: 4 bytes, plus the handle if present.
    pub fn encoded_len(&self) -> usize {
        4 + self.0.as_ref().map_or(0, NfsFh3::encoded_len)
    }
}

impl Encode for PostOpFh3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.optional(self.0.as_ref(), |e, fh| fh.encode(e));
    }
}

impl Decode<'_> for PostOpFh3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.optional(NfsFh3::decode)?))
    }
}

/// `set_atime` / `set_mtime`: whether and how SETATTR changes a time
/// (RFC 1813 section 2.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SetTime {
    /// DONT_CHANGE.
    #[default]
    DontChange,
    /// SET_TO_SERVER_TIME: the server's current time.
    ServerTime,
    /// SET_TO_CLIENT_TIME: this time.
    ClientTime(NfsTime3),
}

impl Encode for SetTime {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetTime::DontChange => TimeHow::DontChange.encode(enc),
            SetTime::ServerTime => TimeHow::SetToServerTime.encode(enc),
            SetTime::ClientTime(t) => {
                TimeHow::SetToClientTime.encode(enc);
                t.encode(enc);
            }
        }
    }
}

impl Decode<'_> for SetTime {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match TimeHow::decode(dec)? {
            TimeHow::DontChange => SetTime::DontChange,
            TimeHow::SetToServerTime => SetTime::ServerTime,
            TimeHow::SetToClientTime => SetTime::ClientTime(NfsTime3::decode(dec)?),
        })
    }
}

/// `sattr3`: the attributes SETATTR, CREATE, MKDIR, SYMLINK and MKNOD set
/// (RFC 1813 section 2.6). `None` is the FALSE arm of `set_mode3`,
/// `set_uid3`, `set_gid3` and `set_size3` (do not change).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sattr3 {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

impl Encode for Sattr3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.optional(self.mode.as_ref(), |e, &v| e.u32(v));
        enc.optional(self.uid.as_ref(), |e, &v| e.u32(v));
        enc.optional(self.gid.as_ref(), |e, &v| e.u32(v));
        enc.optional(self.size.as_ref(), |e, &v| e.u64(v));
        self.atime.encode(enc);
        self.mtime.encode(enc);
    }
}

impl Decode<'_> for Sattr3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            mode: dec.optional(Decoder::u32)?,
            uid: dec.optional(Decoder::u32)?,
            gid: dec.optional(Decoder::u32)?,
            size: dec.optional(Decoder::u64)?,
            atime: SetTime::decode(dec)?,
            mtime: SetTime::decode(dec)?,
        })
    }
}

xdr_struct! {
    /// `diropargs3`: a name in a directory (RFC 1813 section 2.6).
    pub struct DirOpArgs3 {
        pub dir: NfsFh3,
        pub name: Filename3,
    }
}

/// `createhow3`: how CREATE treats an existing file (RFC 1813 section 3.3.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow3 {
    /// UNCHECKED: create or truncate, then set these attributes.
    Unchecked(Sattr3),
    /// GUARDED: fail with NFS3ERR_EXIST if the name exists.
    Guarded(Sattr3),
    /// EXCLUSIVE: create once, identified by this verifier.
    Exclusive(CreateVerf3),
}

impl CreateHow3 {
    /// The discriminant.
    pub fn mode(&self) -> CreateMode3 {
        match self {
            CreateHow3::Unchecked(_) => CreateMode3::Unchecked,
            CreateHow3::Guarded(_) => CreateMode3::Guarded,
            CreateHow3::Exclusive(_) => CreateMode3::Exclusive,
        }
    }
}

impl Encode for CreateHow3 {
    fn encode(&self, enc: &mut Encoder) {
        self.mode().encode(enc);
        match self {
            CreateHow3::Unchecked(a) | CreateHow3::Guarded(a) => a.encode(enc),
            CreateHow3::Exclusive(v) => v.encode(enc),
        }
    }
}

impl Decode<'_> for CreateHow3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match CreateMode3::decode(dec)? {
            CreateMode3::Unchecked => CreateHow3::Unchecked(Sattr3::decode(dec)?),
            CreateMode3::Guarded => CreateHow3::Guarded(Sattr3::decode(dec)?),
            CreateMode3::Exclusive => CreateHow3::Exclusive(CreateVerf3::decode(dec)?),
        })
    }
}

xdr_struct! {
    /// `devicedata3`: attributes and device numbers of a new device node
    /// (RFC 1813 section 3.3.11).
    pub struct DeviceData3 {
        pub dev_attributes: Sattr3,
        pub spec: SpecData3,
    }
}

/// `mknoddata3`: what MKNOD creates, a union on [`Ftype3`]
/// (RFC 1813 section 3.3.11). Regular files, directories and symbolic links
/// are valid discriminants with no body (the server answers
/// NFS3ERR_BADTYPE for them); values outside `ftype3` are decode errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MknodData3 {
    /// NF3CHR.
    Chr(DeviceData3),
    /// NF3BLK.
    Blk(DeviceData3),
    /// NF3SOCK, with `pipe_attributes`.
    Sock(Sattr3),
    /// NF3FIFO, with `pipe_attributes`.
    Fifo(Sattr3),
    /// NF3REG, NF3DIR or NF3LNK: the `default: void` arm.
    Other(Ftype3),
}

impl MknodData3 {
    /// The discriminant.
    pub fn ftype(&self) -> Ftype3 {
        match self {
            MknodData3::Chr(_) => Ftype3::Chr,
            MknodData3::Blk(_) => Ftype3::Blk,
            MknodData3::Sock(_) => Ftype3::Sock,
            MknodData3::Fifo(_) => Ftype3::Fifo,
            MknodData3::Other(t) => *t,
        }
    }
}

impl Encode for MknodData3 {
    fn encode(&self, enc: &mut Encoder) {
        self.ftype().encode(enc);
        match self {
            MknodData3::Chr(d) | MknodData3::Blk(d) => d.encode(enc),
            MknodData3::Sock(a) | MknodData3::Fifo(a) => a.encode(enc),
            MknodData3::Other(t) => debug_assert!(
                matches!(t, Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk),
                "MknodData3::Other with a type that has a body"
            ),
        }
    }
}

impl Decode<'_> for MknodData3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match Ftype3::decode(dec)? {
            Ftype3::Chr => MknodData3::Chr(DeviceData3::decode(dec)?),
            Ftype3::Blk => MknodData3::Blk(DeviceData3::decode(dec)?),
            Ftype3::Sock => MknodData3::Sock(Sattr3::decode(dec)?),
            Ftype3::Fifo => MknodData3::Fifo(Sattr3::decode(dec)?),
            other @ (Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk) => MknodData3::Other(other),
        })
    }
}

/// The shape of every NFSv3 result except NULL's: a union on [`NfsStat3`]
/// whose NFS3_OK arm is the procedure's `resok` and whose other arms share
/// its `resfail` (RFC 1813 section 3.3). Each procedure names its own
/// instance, e.g. `LookupRes = NfsRes<LookupResOk, LookupResFail>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsRes<T, F> {
    /// NFS3_OK.
    Ok(T),
    /// Any other status. `status` is never [`NfsStat3::Ok`].
    Fail { status: NfsStat3, resfail: F },
}

impl<T, F> NfsRes<T, F> {
    /// The status word.
    pub fn status(&self) -> NfsStat3 {
        match self {
            NfsRes::Ok(_) => NfsStat3::Ok,
            NfsRes::Fail { status, .. } => *status,
        }
    }

    /// A failure. `status` must not be [`NfsStat3::Ok`].
    pub fn fail(status: NfsStat3, resfail: F) -> Self {
        debug_assert_ne!(status, NfsStat3::Ok, "NfsRes::Fail with NFS3_OK");
        NfsRes::Fail { status, resfail }
    }
}

impl<T: Encode, F: Encode> Encode for NfsRes<T, F> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            NfsRes::Ok(ok) => {
                NfsStat3::Ok.encode(enc);
                ok.encode(enc);
            }
            NfsRes::Fail { status, resfail } => {
                debug_assert_ne!(*status, NfsStat3::Ok, "NfsRes::Fail with NFS3_OK");
                status.encode(enc);
                resfail.encode(enc);
            }
        }
    }
}

impl<'a, T: Decode<'a>, F: Decode<'a>> Decode<'a> for NfsRes<T, F> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self> {
        Ok(match NfsStat3::decode(dec)? {
            NfsStat3::Ok => NfsRes::Ok(T::decode(dec)?),
            status => NfsRes::Fail {
                status,
                resfail: F::decode(dec)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use proptest::prelude::*;

    #[test]
    fn every_nfsstat3_value_round_trips_and_unknown_is_rejected() {
        assert_eq!(NfsStat3::ALL.len(), 29);
        for &s in NfsStat3::ALL {
            assert_codec(&s);
        }
        assert_eq!(NfsStat3::Jukebox.as_u32(), 10008);
        assert_eq!(
            NfsStat3::from_xdr(&[0, 0, 0, 3]),
            Err(XdrError::BadDiscriminant {
                type_name: "NfsStat3",
                value: 3
            })
        );
        assert!(matches!(
            NfsStat3::from_xdr(&10009u32.to_be_bytes()),
            Err(XdrError::BadDiscriminant { .. })
        ));
    }

    #[test]
    fn bad_ftype_is_rejected() {
        for v in [0u32, 8, u32::MAX] {
            assert!(matches!(
                Ftype3::from_xdr(&v.to_be_bytes()),
                Err(XdrError::BadDiscriminant {
                    type_name: "Ftype3",
                    ..
                })
            ));
        }
        let mut bytes = sample_fattr3().to_xdr();
        bytes[..4].copy_from_slice(&9u32.to_be_bytes());
        assert!(matches!(
            Fattr3::from_xdr(&bytes),
            Err(XdrError::BadDiscriminant { value: 9, .. })
        ));
    }

    #[test]
    fn file_handle_is_bounded_at_64_bytes() {
        assert_codec(&NfsFh3::new(vec![7u8; 64]).unwrap());
        assert!(NfsFh3::new(vec![7u8; 65]).is_err());
        let mut enc = Encoder::new();
        enc.opaque_var(&[7u8; 65]);
        assert_eq!(
            NfsFh3::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong { len: 65, max: 64 })
        );
    }

    #[test]
    fn names_are_bounded_at_1024_bytes_but_not_255() {
        assert_codec(&Filename3(vec![b'a'; 256]));
        assert_codec(&Filename3(vec![b'a'; 1024]));
        let mut enc = Encoder::new();
        enc.string(&[b'a'; 1025]);
        assert_eq!(
            Filename3::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong {
                len: 1025,
                max: 1024
            })
        );
        let huge = [0xff, 0xff, 0xff, 0xff, b'a', 0, 0, 0];
        assert!(matches!(
            Filename3::from_xdr(&huge),
            Err(XdrError::TooLong {
                len: 0xffff_ffff,
                ..
            })
        ));
        assert!(matches!(
            NfsPath3::from_xdr(&huge),
            Err(XdrError::TooLong { .. })
        ));
    }

    #[test]
    fn set_time_how_7_is_rejected() {
        assert_eq!(
            SetTime::from_xdr(&[0, 0, 0, 7]),
            Err(XdrError::BadDiscriminant {
                type_name: "TimeHow",
                value: 7
            })
        );
        // The same inside a sattr3: four FALSE booleans, then atime how=7.
        let mut bytes = vec![0u8; 16];
        bytes.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 0]);
        assert!(matches!(
            Sattr3::from_xdr(&bytes),
            Err(XdrError::BadDiscriminant { value: 7, .. })
        ));
    }

    #[test]
    fn bad_createmode_and_stable_how_are_rejected() {
        assert!(matches!(
            CreateHow3::from_xdr(&[0, 0, 0, 3]),
            Err(XdrError::BadDiscriminant {
                type_name: "CreateMode3",
                ..
            })
        ));
        assert!(matches!(
            StableHow::from_xdr(&[0, 0, 0, 3]),
            Err(XdrError::BadDiscriminant {
                type_name: "StableHow",
                ..
            })
        ));
    }

    #[test]
    fn bad_boolean_in_optional_is_rejected() {
        assert_eq!(
            PostOpAttr::from_xdr(&[0, 0, 0, 2]),
            Err(XdrError::BadBool(2))
        );
    }

    #[test]
    fn fattr3_encoding_has_the_rfc_layout() {
        let a = sample_fattr3();
        let bytes = a.to_xdr();
        assert_eq!(bytes.len(), Fattr3::ENCODED_LEN);
        assert_eq!(bytes.len(), 84);
        assert_eq!(&bytes[0..4], &[0, 0, 0, 1]); // NF3REG
        assert_eq!(&bytes[4..8], &0o644u32.to_be_bytes());
        assert_eq!(&bytes[20..28], &a.size.to_be_bytes());
        assert_eq!(&bytes[52..60], &a.fileid.to_be_bytes());
        assert_eq!(&bytes[76..80], &a.ctime.seconds.to_be_bytes());
    }

    #[test]
    fn mknod_default_arm_is_void() {
        assert_eq!(
            MknodData3::from_xdr(&[0, 0, 0, 1]),
            Ok(MknodData3::Other(Ftype3::Reg))
        );
        assert_codec(&MknodData3::Other(Ftype3::Lnk));
        assert!(matches!(
            MknodData3::from_xdr(&[0, 0, 0, 0]),
            Err(XdrError::BadDiscriminant { .. })
        ));
    }

    #[test]
    fn procedure_numbers_match_rfc_1813() {
        assert_eq!(NfsProc3::ALL.len(), 22);
        for (i, p) in NfsProc3::ALL.iter().enumerate() {
            assert_eq!(p.as_u32(), i as u32);
        }
        assert_eq!(NfsProc3::from_u32(17), Some(NfsProc3::Readdirplus));
        assert_eq!(NfsProc3::from_u32(22), None);
    }

    proptest! {
        #[test]
        fn fattr3_round_trips(a in fattr3()) {
            assert_codec(&a);
        }

        #[test]
        fn sattr3_round_trips(a in sattr3()) {
            assert_codec(&a);
        }

        #[test]
        fn wcc_and_post_op_round_trip(w in wcc_data(), fh in post_op_fh3()) {
            assert_codec(&w);
            prop_assert_eq!(fh.to_xdr().len(), fh.encoded_len());
            assert_codec(&fh);
        }

        #[test]
        fn unions_round_trip(how in create_how3(), node in mknod_data3(), d in dir_op_args3()) {
            assert_codec(&how);
            assert_codec(&node);
            assert_codec(&d);
        }

        #[test]
        fn any_bytes_never_panic_the_type_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Fattr3::from_xdr(&bytes);
            let _ = Sattr3::from_xdr(&bytes);
            let _ = WccData::from_xdr(&bytes);
            let _ = CreateHow3::from_xdr(&bytes);
            let _ = MknodData3::from_xdr(&bytes);
            let _ = DirOpArgs3::from_xdr(&bytes);
            let _ = PostOpFh3::from_xdr(&bytes);
        }
    }
}
