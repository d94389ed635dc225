//! The NFSv4.1 building blocks every operation uses (RFC 8881 section 3,
//! RFC 7862 section 11): status codes, operation numbers, handles,
//! stateids, verifiers, bounded strings, times, and the client, server
//! and session descriptions of EXCHANGE_ID and CREATE_SESSION.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

use crate::codec::{decode_u32_array, encode_u32_array, xdr_bytes, xdr_enum, xdr_struct, xdr_verf};

/// `NFS4_FHSIZE`: the longest file handle (RFC 8881 section 3.2).
pub const NFS4_FHSIZE: usize = 128;
/// `NFS4_OPAQUE_LIMIT`: the longest owner, major id or server scope.
pub const NFS4_OPAQUE_LIMIT: u32 = 1024;
/// `NFS4_SESSIONID_SIZE`.
pub const NFS4_SESSIONID_SIZE: usize = 16;
/// `NFS4_OTHER_SIZE`: the server's part of a stateid.
pub const NFS4_OTHER_SIZE: usize = 12;
/// The longest `component4` decoded. Names over 255 bytes are the
/// handler's `NFS4ERR_NAMETOOLONG`, not `NFS4ERR_BADXDR`: pynfs LOOKUP
/// sends 1,536 bytes and expects the former.
pub const NFS4_MAX_COMPONENT_LEN: u32 = 4096;
/// The longest `linktext4` decoded (Linux's `PATH_MAX`).
pub const NFS4_MAX_LINKTEXT_LEN: u32 = 4096;
/// The longest COMPOUND tag decoded.
pub const NFS4_MAX_TAG_LEN: u32 = 1024;
/// The most items decoded in the longer arrays (stateids of
/// TEST_STATEID, status codes, SECINFO's flavours). Each item costs the
/// input at least 4 bytes as well.
pub const NFS4_MAX_ARRAY_ITEMS: u32 = 1024;
/// The most algorithms or GSS handles of SP4_SSV decoded: a client
/// offers a few, and dionfs refuses SP4_SSV anyway.
pub const NFS4_MAX_SSV_ITEMS: u32 = 8;
/// The most items of `callback_sec_parms4` decoded: a client sends one
/// or two (Linux one, AUTH_SYS or AUTH_NONE).
pub const NFS4_MAX_CB_SEC_PARMS: u32 = 8;
/// The most `gids` of an `authsys_parms` (RFC 5531 appendix A).
pub const AUTH_SYS_MAX_GIDS: u32 = 16;
/// The longest `machinename` of an `authsys_parms`.
pub const AUTH_SYS_MAX_MACHINE_NAME: u32 = 255;

xdr_enum! {
    /// `nfsstat4`: the status of an operation and of a COMPOUND (RFC 8881
    /// section 15.1, RFC 7862 section 11.1, RFC 8276 section 8.4).
    pub enum Nfsstat4 {
        /// `NFS4_OK`.
        Ok = 0,
        /// `NFS4ERR_PERM`.
        Perm = 1,
        /// `NFS4ERR_NOENT`.
        Noent = 2,
        /// `NFS4ERR_IO`.
        Io = 5,
        /// `NFS4ERR_NXIO`.
        Nxio = 6,
        /// `NFS4ERR_ACCESS`.
        Access = 13,
        /// `NFS4ERR_EXIST`.
        Exist = 17,
        /// `NFS4ERR_XDEV`.
        Xdev = 18,
        /// `NFS4ERR_NOTDIR`.
        Notdir = 20,
        /// `NFS4ERR_ISDIR`.
        Isdir = 21,
        /// `NFS4ERR_INVAL`.
        Inval = 22,
        /// `NFS4ERR_FBIG`.
        Fbig = 27,
        /// `NFS4ERR_NOSPC`.
        Nospc = 28,
        /// `NFS4ERR_ROFS`.
        Rofs = 30,
        /// `NFS4ERR_MLINK`.
        Mlink = 31,
        /// `NFS4ERR_NAMETOOLONG`.
        Nametoolong = 63,
        /// `NFS4ERR_NOTEMPTY`.
        Notempty = 66,
        /// `NFS4ERR_DQUOT`.
        Dquot = 69,
        /// `NFS4ERR_STALE`.
        Stale = 70,
        /// `NFS4ERR_BADHANDLE`.
        Badhandle = 10001,
        /// `NFS4ERR_BAD_COOKIE`.
        BadCookie = 10003,
        /// `NFS4ERR_NOTSUPP`.
        Notsupp = 10004,
        /// `NFS4ERR_TOOSMALL`.
        Toosmall = 10005,
        /// `NFS4ERR_SERVERFAULT`.
        Serverfault = 10006,
        /// `NFS4ERR_BADTYPE`.
        Badtype = 10007,
        /// `NFS4ERR_DELAY`.
        Delay = 10008,
        /// `NFS4ERR_SAME`.
        Same = 10009,
        /// `NFS4ERR_DENIED`.
        Denied = 10010,
        /// `NFS4ERR_EXPIRED`.
        Expired = 10011,
        /// `NFS4ERR_LOCKED`.
        Locked = 10012,
        /// `NFS4ERR_GRACE`.
        Grace = 10013,
        /// `NFS4ERR_FHEXPIRED`.
        Fhexpired = 10014,
        /// `NFS4ERR_SHARE_DENIED`.
        ShareDenied = 10015,
        /// `NFS4ERR_WRONGSEC`.
        Wrongsec = 10016,
        /// `NFS4ERR_CLID_INUSE`.
        ClidInuse = 10017,
        /// `NFS4ERR_RESOURCE`.
        Resource = 10018,
        /// `NFS4ERR_MOVED`.
        Moved = 10019,
        /// `NFS4ERR_NOFILEHANDLE`.
        Nofilehandle = 10020,
        /// `NFS4ERR_MINOR_VERS_MISMATCH`.
        MinorVersMismatch = 10021,
        /// `NFS4ERR_STALE_CLIENTID`.
        StaleClientid = 10022,
        /// `NFS4ERR_STALE_STATEID`.
        StaleStateid = 10023,
        /// `NFS4ERR_OLD_STATEID`.
        OldStateid = 10024,
        /// `NFS4ERR_BAD_STATEID`.
        BadStateid = 10025,
        /// `NFS4ERR_BAD_SEQID`.
        BadSeqid = 10026,
        /// `NFS4ERR_NOT_SAME`.
        NotSame = 10027,
        /// `NFS4ERR_LOCK_RANGE`.
        LockRange = 10028,
        /// `NFS4ERR_SYMLINK`.
        Symlink = 10029,
        /// `NFS4ERR_RESTOREFH`.
        Restorefh = 10030,
        /// `NFS4ERR_LEASE_MOVED`.
        LeaseMoved = 10031,
        /// `NFS4ERR_ATTRNOTSUPP`.
        Attrnotsupp = 10032,
        /// `NFS4ERR_NO_GRACE`.
        NoGrace = 10033,
        /// `NFS4ERR_RECLAIM_BAD`.
        ReclaimBad = 10034,
        /// `NFS4ERR_RECLAIM_CONFLICT`.
        ReclaimConflict = 10035,
        /// `NFS4ERR_BADXDR`.
        Badxdr = 10036,
        /// `NFS4ERR_LOCKS_HELD`.
        LocksHeld = 10037,
        /// `NFS4ERR_OPENMODE`.
        Openmode = 10038,
        /// `NFS4ERR_BADOWNER`.
        Badowner = 10039,
        /// `NFS4ERR_BADCHAR`.
        Badchar = 10040,
        /// `NFS4ERR_BADNAME`.
        Badname = 10041,
        /// `NFS4ERR_BAD_RANGE`.
        BadRange = 10042,
        /// `NFS4ERR_LOCK_NOTSUPP`.
        LockNotsupp = 10043,
        /// `NFS4ERR_OP_ILLEGAL`.
        OpIllegal = 10044,
        /// `NFS4ERR_DEADLOCK`.
        Deadlock = 10045,
        /// `NFS4ERR_FILE_OPEN`.
        FileOpen = 10046,
        /// `NFS4ERR_ADMIN_REVOKED`.
        AdminRevoked = 10047,
        /// `NFS4ERR_CB_PATH_DOWN`.
        CbPathDown = 10048,
        /// `NFS4ERR_BADIOMODE`.
        Badiomode = 10049,
        /// `NFS4ERR_BADLAYOUT`.
        Badlayout = 10050,
        /// `NFS4ERR_BAD_SESSION_DIGEST`.
        BadSessionDigest = 10051,
        /// `NFS4ERR_BADSESSION`.
        Badsession = 10052,
        /// `NFS4ERR_BADSLOT`.
        Badslot = 10053,
        /// `NFS4ERR_COMPLETE_ALREADY`.
        CompleteAlready = 10054,
        /// `NFS4ERR_CONN_NOT_BOUND_TO_SESSION`.
        ConnNotBoundToSession = 10055,
        /// `NFS4ERR_DELEG_ALREADY_WANTED`.
        DelegAlreadyWanted = 10056,
        /// `NFS4ERR_BACK_CHAN_BUSY`.
        BackChanBusy = 10057,
        /// `NFS4ERR_LAYOUTTRYLATER`.
        Layouttrylater = 10058,
        /// `NFS4ERR_LAYOUTUNAVAILABLE`.
        Layoutunavailable = 10059,
        /// `NFS4ERR_NOMATCHING_LAYOUT`.
        NomatchingLayout = 10060,
        /// `NFS4ERR_RECALLCONFLICT`.
        Recallconflict = 10061,
        /// `NFS4ERR_UNKNOWN_LAYOUTTYPE`.
        UnknownLayouttype = 10062,
        /// `NFS4ERR_SEQ_MISORDERED`.
        SeqMisordered = 10063,
        /// `NFS4ERR_SEQUENCE_POS`.
        SequencePos = 10064,
        /// `NFS4ERR_REQ_TOO_BIG`.
        ReqTooBig = 10065,
        /// `NFS4ERR_REP_TOO_BIG`.
        RepTooBig = 10066,
        /// `NFS4ERR_REP_TOO_BIG_TO_CACHE`.
        RepTooBigToCache = 10067,
        /// `NFS4ERR_RETRY_UNCACHED_REP`.
        RetryUncachedRep = 10068,
        /// `NFS4ERR_UNSAFE_COMPOUND`.
        UnsafeCompound = 10069,
        /// `NFS4ERR_TOO_MANY_OPS`.
        TooManyOps = 10070,
        /// `NFS4ERR_OP_NOT_IN_SESSION`.
        OpNotInSession = 10071,
        /// `NFS4ERR_HASH_ALG_UNSUPP`.
        HashAlgUnsupp = 10072,
        /// `NFS4ERR_CLIENTID_BUSY`.
        ClientidBusy = 10074,
        /// `NFS4ERR_PNFS_IO_HOLE`.
        PnfsIoHole = 10075,
        /// `NFS4ERR_SEQ_FALSE_RETRY`.
        SeqFalseRetry = 10076,
        /// `NFS4ERR_BAD_HIGH_SLOT`.
        BadHighSlot = 10077,
        /// `NFS4ERR_DEADSESSION`.
        Deadsession = 10078,
        /// `NFS4ERR_ENCR_ALG_UNSUPP`.
        EncrAlgUnsupp = 10079,
        /// `NFS4ERR_PNFS_NO_LAYOUT`.
        PnfsNoLayout = 10080,
        /// `NFS4ERR_NOT_ONLY_OP`.
        NotOnlyOp = 10081,
        /// `NFS4ERR_WRONG_CRED`.
        WrongCred = 10082,
        /// `NFS4ERR_WRONG_TYPE`.
        WrongType = 10083,
        /// `NFS4ERR_DIRDELEG_UNAVAIL`.
        DirdelegUnavail = 10084,
        /// `NFS4ERR_REJECT_DELEG`.
        RejectDeleg = 10085,
        /// `NFS4ERR_RETURNCONFLICT`.
        Returnconflict = 10086,
        /// `NFS4ERR_DELEG_REVOKED`.
        DelegRevoked = 10087,
        /// `NFS4ERR_PARTNER_NOTSUPP`.
        PartnerNotsupp = 10088,
        /// `NFS4ERR_PARTNER_NO_AUTH`.
        PartnerNoAuth = 10089,
        /// `NFS4ERR_UNION_NOTSUPP`.
        UnionNotsupp = 10090,
        /// `NFS4ERR_OFFLOAD_DENIED`.
        OffloadDenied = 10091,
        /// `NFS4ERR_WRONG_LFS`.
        WrongLfs = 10092,
        /// `NFS4ERR_BADLABEL`.
        Badlabel = 10093,
        /// `NFS4ERR_OFFLOAD_NO_REQS`.
        OffloadNoReqs = 10094,
        /// `NFS4ERR_NOXATTR`.
        Noxattr = 10095,
        /// `NFS4ERR_XATTR2BIG`.
        Xattr2big = 10096,
    }
}

xdr_enum! {
    /// `nfs_opnum4`: the operations of a COMPOUND (RFC 8881 section 16.2,
    /// RFC 7862 section 15.2, RFC 8276 section 8.4).
    pub enum Opnum4 {
        /// `OP_ACCESS`.
        Access = 3,
        /// `OP_CLOSE`.
        Close = 4,
        /// `OP_COMMIT`.
        Commit = 5,
        /// `OP_CREATE`.
        Create = 6,
        /// `OP_DELEGPURGE`.
        Delegpurge = 7,
        /// `OP_DELEGRETURN`.
        Delegreturn = 8,
        /// `OP_GETATTR`.
        Getattr = 9,
        /// `OP_GETFH`.
        Getfh = 10,
        /// `OP_LINK`.
        Link = 11,
        /// `OP_LOCK`.
        Lock = 12,
        /// `OP_LOCKT`.
        Lockt = 13,
        /// `OP_LOCKU`.
        Locku = 14,
        /// `OP_LOOKUP`.
        Lookup = 15,
        /// `OP_LOOKUPP`.
        Lookupp = 16,
        /// `OP_NVERIFY`.
        Nverify = 17,
        /// `OP_OPEN`.
        Open = 18,
        /// `OP_OPENATTR`.
        Openattr = 19,
        /// `OP_OPEN_CONFIRM`.
        OpenConfirm = 20,
        /// `OP_OPEN_DOWNGRADE`.
        OpenDowngrade = 21,
        /// `OP_PUTFH`.
        Putfh = 22,
        /// `OP_PUTPUBFH`.
        Putpubfh = 23,
        /// `OP_PUTROOTFH`.
        Putrootfh = 24,
        /// `OP_READ`.
        Read = 25,
        /// `OP_READDIR`.
        Readdir = 26,
        /// `OP_READLINK`.
        Readlink = 27,
        /// `OP_REMOVE`.
        Remove = 28,
        /// `OP_RENAME`.
        Rename = 29,
        /// `OP_RENEW`.
        Renew = 30,
        /// `OP_RESTOREFH`.
        Restorefh = 31,
        /// `OP_SAVEFH`.
        Savefh = 32,
        /// `OP_SECINFO`.
        Secinfo = 33,
        /// `OP_SETATTR`.
        Setattr = 34,
        /// `OP_SETCLIENTID`.
        Setclientid = 35,
        /// `OP_SETCLIENTID_CONFIRM`.
        SetclientidConfirm = 36,
        /// `OP_VERIFY`.
        Verify = 37,
        /// `OP_WRITE`.
        Write = 38,
        /// `OP_RELEASE_LOCKOWNER`.
        ReleaseLockowner = 39,
        /// `OP_BACKCHANNEL_CTL`.
        BackchannelCtl = 40,
        /// `OP_BIND_CONN_TO_SESSION`.
        BindConnToSession = 41,
        /// `OP_EXCHANGE_ID`.
        ExchangeId = 42,
        /// `OP_CREATE_SESSION`.
        CreateSession = 43,
        /// `OP_DESTROY_SESSION`.
        DestroySession = 44,
        /// `OP_FREE_STATEID`.
        FreeStateid = 45,
        /// `OP_GET_DIR_DELEGATION`.
        GetDirDelegation = 46,
        /// `OP_GETDEVICEINFO`.
        Getdeviceinfo = 47,
        /// `OP_GETDEVICELIST`.
        Getdevicelist = 48,
        /// `OP_LAYOUTCOMMIT`.
        Layoutcommit = 49,
        /// `OP_LAYOUTGET`.
        Layoutget = 50,
        /// `OP_LAYOUTRETURN`.
        Layoutreturn = 51,
        /// `OP_SECINFO_NO_NAME`.
        SecinfoNoName = 52,
        /// `OP_SEQUENCE`.
        Sequence = 53,
        /// `OP_SET_SSV`.
        SetSsv = 54,
        /// `OP_TEST_STATEID`.
        TestStateid = 55,
        /// `OP_WANT_DELEGATION`.
        WantDelegation = 56,
        /// `OP_DESTROY_CLIENTID`.
        DestroyClientid = 57,
        /// `OP_RECLAIM_COMPLETE`.
        ReclaimComplete = 58,
        /// `OP_ALLOCATE`.
        Allocate = 59,
        /// `OP_COPY`.
        Copy = 60,
        /// `OP_COPY_NOTIFY`.
        CopyNotify = 61,
        /// `OP_DEALLOCATE`.
        Deallocate = 62,
        /// `OP_IO_ADVISE`.
        IoAdvise = 63,
        /// `OP_LAYOUTERROR`.
        Layouterror = 64,
        /// `OP_LAYOUTSTATS`.
        Layoutstats = 65,
        /// `OP_OFFLOAD_CANCEL`.
        OffloadCancel = 66,
        /// `OP_OFFLOAD_STATUS`.
        OffloadStatus = 67,
        /// `OP_READ_PLUS`.
        ReadPlus = 68,
        /// `OP_SEEK`.
        Seek = 69,
        /// `OP_WRITE_SAME`.
        WriteSame = 70,
        /// `OP_CLONE`.
        Clone = 71,
        /// `OP_GETXATTR`.
        Getxattr = 72,
        /// `OP_SETXATTR`.
        Setxattr = 73,
        /// `OP_LISTXATTRS`.
        Listxattrs = 74,
        /// `OP_REMOVEXATTR`.
        Removexattr = 75,
        /// `OP_ILLEGAL`.
        Illegal = 10044,
    }
}

impl Nfsstat4 {
    /// Whether this is `NFS4_OK`.
    pub const fn is_ok(self) -> bool {
        matches!(self, Nfsstat4::Ok)
    }
}

/// `nfs_fh4`: a file handle of at most [`NFS4_FHSIZE`] bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NfsFh4(Vec<u8>);

impl NfsFh4 {
    /// A handle of `bytes`, or `None` if longer than [`NFS4_FHSIZE`].
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() <= NFS4_FHSIZE).then_some(Self(bytes))
    }

    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The handle's bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl Encode for NfsFh4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque_var(&self.0);
    }
}

impl Decode<'_> for NfsFh4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.opaque_var(NFS4_FHSIZE as u32)?.to_vec()))
    }
}

/// `stateid4` (RFC 8881 section 8.2): a sequence number and the server's
/// 12 opaque bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StateId4 {
    /// `seqid`.
    pub seqid: u32,
    /// `other`.
    pub other: [u8; NFS4_OTHER_SIZE],
}

impl Encode for StateId4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.seqid);
        enc.opaque_fixed(&self.other);
    }
}

impl Decode<'_> for StateId4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        let seqid = dec.u32()?;
        let mut other = [0u8; NFS4_OTHER_SIZE];
        other.copy_from_slice(dec.opaque_fixed(NFS4_OTHER_SIZE)?);
        Ok(Self { seqid, other })
    }
}

/// `sessionid4`: 16 opaque bytes the server chooses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SessionId4(pub [u8; NFS4_SESSIONID_SIZE]);

impl Encode for SessionId4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque_fixed(&self.0);
    }
}

impl Decode<'_> for SessionId4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        let mut id = [0u8; NFS4_SESSIONID_SIZE];
        id.copy_from_slice(dec.opaque_fixed(NFS4_SESSIONID_SIZE)?);
        Ok(Self(id))
    }
}

xdr_verf! {
    /// `verifier4`: 8 opaque bytes (client boot verifier, READDIR cookie
    /// verifier, WRITE verifier).
    pub struct Verifier4;
}

/// A UTF-8 string of the protocol (`utf8str_cs`, `utf8str_cis`,
/// `utf8str_mixed`) of at most `MAX` bytes decoded. The bytes are kept as
/// sent: checking them is the handler's (`NFS4ERR_INVAL` or `BADCHAR`),
/// not the codec's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Utf8Str<const MAX: u32>(pub Vec<u8>);

impl<const MAX: u32> Utf8Str<MAX> {
    /// The longest value accepted when decoding.
    pub const MAX_LEN: u32 = MAX;

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl<const MAX: u32> From<&str> for Utf8Str<MAX> {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl<const MAX: u32> From<Vec<u8>> for Utf8Str<MAX> {
    fn from(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
}

impl<const MAX: u32> Encode for Utf8Str<MAX> {
    fn encode(&self, enc: &mut Encoder) {
        debug_assert!(self.0.len() <= MAX as usize, "Utf8Str longer than MAX");
        enc.string(&self.0);
    }
}

impl<const MAX: u32> Decode<'_> for Utf8Str<MAX> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.string(MAX)?.to_vec()))
    }
}

xdr_bytes! {
    /// `component4`: one path component, at most
    /// [`NFS4_MAX_COMPONENT_LEN`] bytes decoded.
    pub struct Component4(max = NFS4_MAX_COMPONENT_LEN);
}

xdr_bytes! {
    /// `linktext4`: a symbolic link's target, at most
    /// [`NFS4_MAX_LINKTEXT_LEN`] bytes decoded.
    pub struct Linktext4(max = NFS4_MAX_LINKTEXT_LEN);
}

xdr_bytes! {
    /// An `opaque<NFS4_OPAQUE_LIMIT>`: a client's owner id, a server's
    /// major id or scope.
    pub struct Opaque4(max = NFS4_OPAQUE_LIMIT);
}

xdr_bytes! {
    /// `sec_oid4` or `gsshandle4_t`: opaque bytes of RPCSEC_GSS, bounded
    /// by [`NFS4_OPAQUE_LIMIT`] here.
    pub struct GssOpaque4(max = NFS4_OPAQUE_LIMIT);
}

xdr_struct! {
    /// `nfstime4` (RFC 8881 section 3.3.1).
    #[derive(Default, Copy, Hash)]
    pub struct NfsTime4 {
        pub seconds: i64,
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// `change_info4` (RFC 8881 section 3.3.10): a directory's change
    /// attribute before and after an operation that changed it.
    #[derive(Default, Copy)]
    pub struct ChangeInfo4 {
        pub atomic: bool,
        pub before: u64,
        pub after: u64,
    }
}

xdr_struct! {
    /// `fsid4` (RFC 8881 section 3.3.6).
    #[derive(Default, Copy, Hash)]
    pub struct Fsid4 {
        pub major: u64,
        pub minor: u64,
    }
}

xdr_struct! {
    /// `specdata4`: a device's major and minor numbers.
    #[derive(Default, Copy)]
    pub struct SpecData4 {
        pub specdata1: u32,
        pub specdata2: u32,
    }
}

/// `bitmap4` (RFC 8881 section 3.3.7): attribute or operation numbers as
/// bits, word 0 first. At most [`Bitmap4::MAX_WORDS`] words are decoded;
/// a longer one is an error (`NFS4ERR_BADXDR`). No attribute or operation
/// we know sits past bit 95, but a client may ask for ones we do not
/// know, which GETATTR leaves out (pynfs GATT4 asks for attribute 1000).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// The most words decoded: bits 0 to 1023.
    pub const MAX_WORDS: u32 = 32;

    /// A bitmap with the given bits set, as few words as they need.
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut map = Self::default();
        for &bit in bits {
            map.set(bit);
        }
        map
    }

    /// Whether `bit` is set.
    pub fn contains(&self, bit: u32) -> bool {
        let word = (bit / 32) as usize;
        self.0.get(word).is_some_and(|w| w & (1 << (bit % 32)) != 0)
    }

    /// Sets `bit`, growing the bitmap if it must.
    pub fn set(&mut self, bit: u32) {
        let word = (bit / 32) as usize;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (bit % 32);
    }

    /// Clears `bit` (the words stay as many as they were).
    pub fn clear(&mut self, bit: u32) {
        if let Some(word) = self.0.get_mut((bit / 32) as usize) {
            *word &= !(1 << (bit % 32));
        }
    }

    /// The bits set, in increasing order.
    pub fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &word)| {
            (0..32)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| i as u32 * 32 + b)
        })
    }

    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

impl Encode for Bitmap4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_u32_array(enc, &self.0);
    }
}

impl Decode<'_> for Bitmap4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(decode_u32_array(dec, Self::MAX_WORDS)?))
    }
}

/// Decodes a counted array (`T x<>`) of at most `max` items, each at least
/// `min_item_len` bytes on the wire: the count is checked against both
/// before anything is allocated.
pub(crate) fn decode_array<'a, T: Decode<'a>>(
    dec: &mut Decoder<'a>,
    max: u32,
    min_item_len: usize,
) -> Result<Vec<T>> {
    let count = dec.u32()?;
    if count > max {
        return Err(XdrError::TooLong { len: count, max });
    }
    let needed = count as usize * min_item_len;
    if needed > dec.remaining() {
        return Err(XdrError::Truncated {
            needed,
            available: dec.remaining(),
        });
    }
    (0..count).map(|_| T::decode(dec)).collect()
}

/// Encodes a counted array.
pub(crate) fn encode_array<T: Encode>(enc: &mut Encoder, items: &[T]) {
    enc.u32(items.len() as u32);
    for item in items {
        item.encode(enc);
    }
}

/// An optional item sent as an array of at most one (`T x<1>`, as
/// `eia_client_impl_id` and `ca_rdma_ird`).
pub(crate) fn decode_at_most_one<'a, T: Decode<'a>>(dec: &mut Decoder<'a>) -> Result<Option<T>> {
    match dec.u32()? {
        0 => Ok(None),
        1 => Ok(Some(T::decode(dec)?)),
        len => Err(XdrError::TooLong { len, max: 1 }),
    }
}

/// Encodes an optional item as an array of at most one.
pub(crate) fn encode_at_most_one<T: Encode>(enc: &mut Encoder, item: Option<&T>) {
    match item {
        None => enc.u32(0),
        Some(x) => {
            enc.u32(1);
            x.encode(enc);
        }
    }
}

xdr_struct! {
    /// `client_owner4` (RFC 8881 section 2.4): the client's boot verifier
    /// and its long-lived owner id.
    pub struct ClientOwner4 {
        pub verifier: Verifier4,
        pub ownerid: Opaque4,
    }
}

xdr_struct! {
    /// `server_owner4` (RFC 8881 section 2.5): what tells a client two
    /// addresses are one server (trunking).
    pub struct ServerOwner4 {
        pub minor_id: u64,
        pub major_id: Opaque4,
    }
}

xdr_struct! {
    /// `nfs_impl_id4`: an implementation's name and date, sent for
    /// information only.
    pub struct NfsImplId4 {
        pub domain: Utf8Str<NFS4_OPAQUE_LIMIT>,
        pub name: Utf8Str<NFS4_OPAQUE_LIMIT>,
        pub date: NfsTime4,
    }
}

/// `channel_attrs4` (RFC 8881 section 18.36): a channel's sizes and
/// counts, asked for by the client and granted by the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelAttrs4 {
    pub headerpadsize: u32,
    pub maxrequestsize: u32,
    pub maxresponsesize: u32,
    pub maxresponsesize_cached: u32,
    pub maxoperations: u32,
    pub maxrequests: u32,
    /// `ca_rdma_ird<1>`: only over RDMA.
    pub rdma_ird: Option<u32>,
}

impl Encode for ChannelAttrs4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.headerpadsize);
        enc.u32(self.maxrequestsize);
        enc.u32(self.maxresponsesize);
        enc.u32(self.maxresponsesize_cached);
        enc.u32(self.maxoperations);
        enc.u32(self.maxrequests);
        encode_at_most_one(enc, self.rdma_ird.as_ref());
    }
}

impl Decode<'_> for ChannelAttrs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            headerpadsize: dec.u32()?,
            maxrequestsize: dec.u32()?,
            maxresponsesize: dec.u32()?,
            maxresponsesize_cached: dec.u32()?,
            maxoperations: dec.u32()?,
            maxrequests: dec.u32()?,
            rdma_ird: decode_at_most_one(dec)?,
        })
    }
}

xdr_struct! {
    /// `state_protect_ops4`: the operations SP4_MACH_CRED or SP4_SSV
    /// protects.
    pub struct StateProtectOps4 {
        pub must_enforce: Bitmap4,
        pub must_allow: Bitmap4,
    }
}

/// `ssv_sp_parms4`: the client's SP4_SSV parameters. Decoded so the
/// server can refuse them by name; dionfs offers only SP4_NONE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsvSpParms4 {
    pub ops: StateProtectOps4,
    pub hash_algs: Vec<GssOpaque4>,
    pub encr_algs: Vec<GssOpaque4>,
    pub window: u32,
    pub num_gss_handles: u32,
}

impl Encode for SsvSpParms4 {
    fn encode(&self, enc: &mut Encoder) {
        self.ops.encode(enc);
        encode_array(enc, &self.hash_algs);
        encode_array(enc, &self.encr_algs);
        enc.u32(self.window);
        enc.u32(self.num_gss_handles);
    }
}

impl Decode<'_> for SsvSpParms4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            ops: StateProtectOps4::decode(dec)?,
            hash_algs: decode_array(dec, NFS4_MAX_SSV_ITEMS, 4)?,
            encr_algs: decode_array(dec, NFS4_MAX_SSV_ITEMS, 4)?,
            window: dec.u32()?,
            num_gss_handles: dec.u32()?,
        })
    }
}

xdr_enum! {
    /// `state_protect_how4`.
    pub enum StateProtectHow4 {
        None = 0,
        MachCred = 1,
        Ssv = 2,
    }
}

/// `state_protect4_a`: the state protection EXCHANGE_ID asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4A {
    None,
    MachCred(StateProtectOps4),
    Ssv(SsvSpParms4),
}

impl Encode for StateProtect4A {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            StateProtect4A::None => StateProtectHow4::None.encode(enc),
            StateProtect4A::MachCred(ops) => {
                StateProtectHow4::MachCred.encode(enc);
                ops.encode(enc);
            }
            StateProtect4A::Ssv(parms) => {
                StateProtectHow4::Ssv.encode(enc);
                parms.encode(enc);
            }
        }
    }
}

impl Decode<'_> for StateProtect4A {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match StateProtectHow4::decode(dec)? {
            StateProtectHow4::None => StateProtect4A::None,
            StateProtectHow4::MachCred => StateProtect4A::MachCred(Decode::decode(dec)?),
            StateProtectHow4::Ssv => StateProtect4A::Ssv(Decode::decode(dec)?),
        })
    }
}

/// `ssv_prot_info4`: the server's SP4_SSV answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsvProtInfo4 {
    pub ops: StateProtectOps4,
    pub hash_alg: u32,
    pub encr_alg: u32,
    pub ssv_len: u32,
    pub window: u32,
    pub handles: Vec<GssOpaque4>,
}

impl Encode for SsvProtInfo4 {
    fn encode(&self, enc: &mut Encoder) {
        self.ops.encode(enc);
        enc.u32(self.hash_alg);
        enc.u32(self.encr_alg);
        enc.u32(self.ssv_len);
        enc.u32(self.window);
        encode_array(enc, &self.handles);
    }
}

impl Decode<'_> for SsvProtInfo4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            ops: StateProtectOps4::decode(dec)?,
            hash_alg: dec.u32()?,
            encr_alg: dec.u32()?,
            ssv_len: dec.u32()?,
            window: dec.u32()?,
            handles: decode_array(dec, NFS4_MAX_SSV_ITEMS, 4)?,
        })
    }
}

/// `state_protect4_r`: the state protection EXCHANGE_ID grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4R {
    None,
    MachCred(StateProtectOps4),
    Ssv(SsvProtInfo4),
}

impl Encode for StateProtect4R {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            StateProtect4R::None => StateProtectHow4::None.encode(enc),
            StateProtect4R::MachCred(ops) => {
                StateProtectHow4::MachCred.encode(enc);
                ops.encode(enc);
            }
            StateProtect4R::Ssv(info) => {
                StateProtectHow4::Ssv.encode(enc);
                info.encode(enc);
            }
        }
    }
}

impl Decode<'_> for StateProtect4R {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match StateProtectHow4::decode(dec)? {
            StateProtectHow4::None => StateProtect4R::None,
            StateProtectHow4::MachCred => StateProtect4R::MachCred(Decode::decode(dec)?),
            StateProtectHow4::Ssv => StateProtect4R::Ssv(Decode::decode(dec)?),
        })
    }
}

/// `authsys_parms` (RFC 5531 appendix A), as CREATE_SESSION and
/// BACKCHANNEL_CTL carry it for the back channel's calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSysParms {
    pub stamp: u32,
    pub machinename: Utf8Str<AUTH_SYS_MAX_MACHINE_NAME>,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl Encode for AuthSysParms {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.stamp);
        self.machinename.encode(enc);
        enc.u32(self.uid);
        enc.u32(self.gid);
        encode_u32_array(enc, &self.gids);
    }
}

impl Decode<'_> for AuthSysParms {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            stamp: dec.u32()?,
            machinename: Decode::decode(dec)?,
            uid: dec.u32()?,
            gid: dec.u32()?,
            gids: decode_u32_array(dec, AUTH_SYS_MAX_GIDS)?,
        })
    }
}

xdr_struct! {
    /// `gss_cb_handles4`: RPCSEC_GSS handles for the back channel.
    pub struct GssCbHandles4 {
        pub service: u32,
        pub handle_from_server: GssOpaque4,
        pub handle_from_client: GssOpaque4,
    }
}

/// The security flavours of `callback_sec_parms4`.
const AUTH_NONE: u32 = 0;
const AUTH_SYS: u32 = 1;
const RPCSEC_GSS: u32 = 6;

/// `callback_sec_parms4`: how the server is to authenticate its calls on
/// the back channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSecParms4 {
    AuthNone,
    AuthSys(AuthSysParms),
    RpcsecGss(GssCbHandles4),
}

impl Encode for CallbackSecParms4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            CallbackSecParms4::AuthNone => enc.u32(AUTH_NONE),
            CallbackSecParms4::AuthSys(parms) => {
                enc.u32(AUTH_SYS);
                parms.encode(enc);
            }
            CallbackSecParms4::RpcsecGss(handles) => {
                enc.u32(RPCSEC_GSS);
                handles.encode(enc);
            }
        }
    }
}

impl Decode<'_> for CallbackSecParms4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match dec.u32()? {
            AUTH_NONE => CallbackSecParms4::AuthNone,
            AUTH_SYS => CallbackSecParms4::AuthSys(Decode::decode(dec)?),
            RPCSEC_GSS => CallbackSecParms4::RpcsecGss(Decode::decode(dec)?),
            value => {
                return Err(XdrError::BadDiscriminant {
                    type_name: "callback_sec_parms4",
                    value,
                })
            }
        })
    }
}

xdr_enum! {
    /// `nfs_ftype4`: the type of a file (RFC 8881 section 5.8.1.2).
    pub enum NfsFtype4 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
        AttrDir = 8,
        NamedAttr = 9,
    }
}

/// The result of an operation whose failure carries nothing but its
/// status: `NFS4_OK` and the `resok`, or another status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res4<T> {
    /// `NFS4_OK`.
    Ok(T),
    /// Any other status; never [`Nfsstat4::Ok`].
    Fail(Nfsstat4),
}

impl<T> Res4<T> {
    /// The status on the wire.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Res4::Ok(_) => Nfsstat4::Ok,
            Res4::Fail(status) => *status,
        }
    }
}

impl<T: Encode> Encode for Res4<T> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Res4::Ok(ok) => {
                Nfsstat4::Ok.encode(enc);
                ok.encode(enc);
            }
            Res4::Fail(status) => {
                debug_assert_ne!(*status, Nfsstat4::Ok, "Res4::Fail with NFS4_OK");
                status.encode(enc);
            }
        }
    }
}

impl<'a, T: Decode<'a>> Decode<'a> for Res4<T> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self> {
        Ok(match Nfsstat4::decode(dec)? {
            Nfsstat4::Ok => Res4::Ok(T::decode(dec)?),
            status => Res4::Fail(status),
        })
    }
}

#[cfg(test)]
mod tests {
    use dionfs_xdr::{Decode, Encode, XdrError};

    use crate::nfs4::samples::*;
    use crate::nfs4::*;
    use crate::test_util::assert_codec;

    #[test]
    fn enums_round_trip_every_value() {
        for s in Nfsstat4::ALL {
            assert_codec(s);
        }
        for op in Opnum4::ALL {
            assert_codec(op);
        }
        assert_eq!(Opnum4::from_u32(3), Some(Opnum4::Access));
        assert_eq!(Opnum4::from_u32(75), Some(Opnum4::Removexattr));
        assert_eq!(Opnum4::from_u32(10044), Some(Opnum4::Illegal));
        assert_eq!(Opnum4::from_u32(2), None);
        assert_eq!(Opnum4::from_u32(76), None);
        assert_eq!(Nfsstat4::from_u32(10036), Some(Nfsstat4::Badxdr));
        assert!(Nfsstat4::Ok.is_ok() && !Nfsstat4::Badxdr.is_ok());
        for t in NfsFtype4::ALL {
            assert_codec(t);
        }
    }

    #[test]
    fn basic_types_round_trip() {
        assert_codec(&fh(0));
        assert_codec(&fh(NFS4_FHSIZE));
        assert_codec(&stateid());
        assert_codec(&SessionId4([0xa5; 16]));
        assert_codec(&Verifier4([1, 2, 3, 4, 5, 6, 7, 8]));
        assert_codec(&time());
        assert_codec(&cinfo());
        assert_codec(&Fsid4 { major: 1, minor: 2 });
        assert_codec(&SpecData4 {
            specdata1: 8,
            specdata2: 1,
        });
        assert_codec(&Utf8Str::<NFS4_MAX_TAG_LEN>::from("tag"));
        assert_codec(&component(NFS4_MAX_COMPONENT_LEN));
        assert_codec(&Linktext4(filled(NFS4_MAX_LINKTEXT_LEN, b'/')));
        assert_codec(&Bitmap4::default());
        assert_codec(&bitmap());
    }

    #[test]
    fn client_and_session_types_round_trip() {
        assert_codec(&ClientOwner4 {
            verifier: Verifier4([7; 8]),
            ownerid: Opaque4(filled(NFS4_OPAQUE_LIMIT, b'o')),
        });
        assert_codec(&ServerOwner4 {
            minor_id: 3,
            major_id: Opaque4::from("dionfs"),
        });
        assert_codec(&impl_id(10));
        assert_codec(&channel(None));
        assert_codec(&channel(Some(4)));
        assert_codec(&StateProtect4A::None);
        assert_codec(&StateProtect4A::MachCred(ops4()));
        assert_codec(&StateProtect4A::Ssv(SsvSpParms4 {
            ops: ops4(),
            hash_algs: gss(2, 9),
            encr_algs: gss(1, 11),
            window: 4,
            num_gss_handles: 2,
        }));
        assert_codec(&StateProtect4R::None);
        assert_codec(&StateProtect4R::MachCred(ops4()));
        assert_codec(&StateProtect4R::Ssv(SsvProtInfo4 {
            ops: ops4(),
            hash_alg: 1,
            encr_alg: 2,
            ssv_len: 32,
            window: 4,
            handles: gss(3, 5),
        }));
        assert_codec(&CallbackSecParms4::AuthNone);
        assert_codec(&CallbackSecParms4::AuthSys(authsys(true)));
        assert_codec(&largest_sec_parms());
        assert_codec(&Res4::Ok(cinfo()));
        assert_codec(&Res4::<ChangeInfo4>::Fail(Nfsstat4::Noent));
    }

    #[test]
    fn bounds_are_errors_before_allocation() {
        let huge = u32::MAX.to_be_bytes();
        assert!(NfsFh4::from_xdr(&huge).is_err());
        assert!(Component4::from_xdr(&huge).is_err());
        assert!(Utf8Str::<1024>::from_xdr(&huge).is_err());
        assert!(Bitmap4::from_xdr(&huge).is_err());
        assert_eq!(
            NfsFh4::from_xdr(&[0, 0, 0, 129]),
            Err(XdrError::TooLong { len: 129, max: 128 })
        );
        assert!(NfsFh4::new(vec![0; 129]).is_none());
        // 33 words of bitmap are bad XDR, even all zero; 32 (pynfs GATT4's
        // attribute 1000) decode.
        let long = Bitmap4(vec![0; 33]).to_xdr();
        assert_eq!(
            Bitmap4::from_xdr(&long),
            Err(XdrError::TooLong { len: 33, max: 32 })
        );
        let mut far = Bitmap4::default();
        far.set(1000);
        assert_eq!(Bitmap4::from_xdr(&far.to_xdr()), Ok(far));
        // `ca_rdma_ird<1>` holds at most one.
        let mut attrs = vec![0; 24];
        attrs.extend_from_slice(&[0, 0, 0, 2]);
        assert_eq!(
            ChannelAttrs4::from_xdr(&attrs),
            Err(XdrError::TooLong { len: 2, max: 1 })
        );
        assert!(CallbackSecParms4::from_xdr(&[0, 0, 0, 2]).is_err());
    }

    #[test]
    fn bitmap_bits_are_set_and_listed_in_order() {
        let map = Bitmap4::from_bits(&[55, 1, 33, 0]);
        assert_eq!(map.0, vec![0b11, (1 << 1) | (1 << 23)]);
        assert!(map.contains(55) && map.contains(33) && !map.contains(2));
        assert!(!map.contains(200));
        assert_eq!(map.bits().collect::<Vec<_>>(), vec![0, 1, 33, 55]);
        assert!(Bitmap4(vec![0, 0]).is_empty());
        let mut cleared = map.clone();
        cleared.clear(33);
        cleared.clear(200);
        assert_eq!(cleared.bits().collect::<Vec<_>>(), vec![0, 1, 55]);
        let mut dec = dionfs_xdr::Decoder::new(&[0, 0, 0, 1, 0, 0, 0, 9]);
        assert_eq!(Bitmap4::decode(&mut dec), Ok(Bitmap4(vec![9])));
    }
}
