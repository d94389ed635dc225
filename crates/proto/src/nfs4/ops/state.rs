//! Opens, byte-range locks and delegations (RFC 8881 sections 18.2,
//! 18.6, 18.10 to 18.12, 18.16 and 18.18): OPEN, CLOSE, OPEN_DOWNGRADE,
//! LOCK, LOCKT, LOCKU and DELEGRETURN.
//!
//! Every `createhow4`, `open_claim4` and `open_delegation4` arm decodes,
//! so the handler, not the codec, refuses what dionfs does not grant
//! (the DELEG_* claims, delegations themselves).

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{xdr_enum, xdr_struct};
use crate::nfs4::attrs::{Fattr4, Nfsace4};
use crate::nfs4::types::{
    Bitmap4, ChangeInfo4, Component4, Nfsstat4, Opaque4, StateId4, Verifier4,
};

/// `OPEN4_SHARE_ACCESS_*` and `OPEN4_SHARE_DENY_*` (RFC 8881 section
/// 18.16.3).
pub const OPEN4_SHARE_ACCESS_READ: u32 = 0x0000_0001;
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 0x0000_0002;
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 0x0000_0003;
pub const OPEN4_SHARE_DENY_NONE: u32 = 0x0000_0000;
pub const OPEN4_SHARE_DENY_READ: u32 = 0x0000_0001;
pub const OPEN4_SHARE_DENY_WRITE: u32 = 0x0000_0002;
pub const OPEN4_SHARE_DENY_BOTH: u32 = 0x0000_0003;
/// The delegation wanted, in `share_access` (RFC 8881 section 18.16.3).
pub const OPEN4_SHARE_ACCESS_WANT_DELEG_MASK: u32 = 0xff00;
pub const OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE: u32 = 0x0000;
pub const OPEN4_SHARE_ACCESS_WANT_READ_DELEG: u32 = 0x0100;
pub const OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG: u32 = 0x0200;
pub const OPEN4_SHARE_ACCESS_WANT_ANY_DELEG: u32 = 0x0300;
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
pub const OPEN4_SHARE_ACCESS_WANT_CANCEL: u32 = 0x0500;
pub const OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL: u32 = 0x1_0000;
pub const OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED: u32 = 0x2_0000;

/// `OPEN4_RESULT_*`: OPEN's `rflags` (RFC 8881 section 18.16.3).
pub const OPEN4_RESULT_CONFIRM: u32 = 0x0000_0002;
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x0000_0004;
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 0x0000_0008;
pub const OPEN4_RESULT_MAY_NOTIFY_LOCK: u32 = 0x0000_0020;

xdr_struct! {
    /// `state_owner4` (RFC 8881 section 3.3.12), which `open_owner4` and
    /// `lock_owner4` name: the client's id and its opaque owner.
    pub struct StateOwner4 {
        pub clientid: u64,
        pub owner: Opaque4,
    }
}

/// `open_owner4`.
pub type OpenOwner4 = StateOwner4;
/// `lock_owner4`.
pub type LockOwner4 = StateOwner4;

xdr_enum! {
    /// `createmode4`: how OPEN creates a file.
    pub enum CreateMode4 {
        Unchecked = 0,
        Guarded = 1,
        /// Deprecated in 4.1 (sessions make EXCLUSIVE4_1 possible), but
        /// still a valid request.
        Exclusive = 2,
        Exclusive41 = 3,
    }
}

xdr_struct! {
    /// `creatverfattr`: EXCLUSIVE4_1's verifier and attributes.
    pub struct CreatVerfAttr {
        pub verf: Verifier4,
        pub attrs: Fattr4,
    }
}

/// `createhow4` (RFC 8881 section 18.16.1): the attributes or verifier
/// of a creating OPEN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow4 {
    /// `UNCHECKED4`: create, or open what exists.
    Unchecked(Fattr4),
    /// `GUARDED4`: create; `NFS4ERR_EXIST` if it exists.
    Guarded(Fattr4),
    /// `EXCLUSIVE4`: create with this verifier, no attributes.
    Exclusive(Verifier4),
    /// `EXCLUSIVE4_1`: create with this verifier and attributes.
    Exclusive41(CreatVerfAttr),
}

impl CreateHow4 {
    /// The mode on the wire.
    pub fn mode(&self) -> CreateMode4 {
        match self {
            CreateHow4::Unchecked(_) => CreateMode4::Unchecked,
            CreateHow4::Guarded(_) => CreateMode4::Guarded,
            CreateHow4::Exclusive(_) => CreateMode4::Exclusive,
            CreateHow4::Exclusive41(_) => CreateMode4::Exclusive41,
        }
    }
}

impl Encode for CreateHow4 {
    fn encode(&self, enc: &mut Encoder) {
        self.mode().encode(enc);
        match self {
            CreateHow4::Unchecked(attrs) | CreateHow4::Guarded(attrs) => attrs.encode(enc),
            CreateHow4::Exclusive(verf) => verf.encode(enc),
            CreateHow4::Exclusive41(both) => both.encode(enc),
        }
    }
}

impl Decode<'_> for CreateHow4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match CreateMode4::decode(dec)? {
            CreateMode4::Unchecked => CreateHow4::Unchecked(Decode::decode(dec)?),
            CreateMode4::Guarded => CreateHow4::Guarded(Decode::decode(dec)?),
            CreateMode4::Exclusive => CreateHow4::Exclusive(Decode::decode(dec)?),
            CreateMode4::Exclusive41 => CreateHow4::Exclusive41(Decode::decode(dec)?),
        })
    }
}

xdr_enum! {
    /// `opentype4`.
    pub enum OpenType4 {
        NoCreate = 0,
        Create = 1,
    }
}

/// `openflag4`: whether OPEN creates, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenFlag4 {
    /// `OPEN4_NOCREATE`.
    NoCreate,
    /// `OPEN4_CREATE`.
    Create(CreateHow4),
}

impl Encode for OpenFlag4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            OpenFlag4::NoCreate => OpenType4::NoCreate.encode(enc),
            OpenFlag4::Create(how) => {
                OpenType4::Create.encode(enc);
                how.encode(enc);
            }
        }
    }
}

impl Decode<'_> for OpenFlag4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match OpenType4::decode(dec)? {
            OpenType4::NoCreate => OpenFlag4::NoCreate,
            OpenType4::Create => OpenFlag4::Create(Decode::decode(dec)?),
        })
    }
}

xdr_enum! {
    /// `open_delegation_type4`. The last two are delegated timestamps
    /// (RFC 9754), decoded because pynfs's XDR has them.
    pub enum OpenDelegationType4 {
        None = 0,
        Read = 1,
        Write = 2,
        NoneExt = 3,
        ReadAttrsDeleg = 4,
        WriteAttrsDeleg = 5,
    }
}

xdr_enum! {
    /// `open_claim_type4`.
    pub enum OpenClaimType4 {
        Null = 0,
        Previous = 1,
        DelegateCur = 2,
        DelegatePrev = 3,
        Fh = 4,
        DelegCurFh = 5,
        DelegPrevFh = 6,
    }
}

xdr_struct! {
    /// `open_claim_delegate_cur4`.
    pub struct OpenClaimDelegateCur4 {
        pub delegate_stateid: StateId4,
        pub file: Component4,
    }
}

/// `open_claim4` (RFC 8881 section 18.16.1): what OPEN opens and by what
/// right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4 {
    /// `CLAIM_NULL`: the name in the current directory.
    Null(Component4),
    /// `CLAIM_PREVIOUS`: the current file, reclaimed after a server
    /// restart, with the delegation held before.
    Previous(OpenDelegationType4),
    /// `CLAIM_DELEGATE_CUR`: the name, under a delegation.
    DelegateCur(OpenClaimDelegateCur4),
    /// `CLAIM_DELEGATE_PREV`: the name, under a delegation of the
    /// client's previous instance.
    DelegatePrev(Component4),
    /// `CLAIM_FH`: the current file.
    Fh,
    /// `CLAIM_DELEG_CUR_FH`: the current file, under a delegation.
    DelegCurFh(StateId4),
    /// `CLAIM_DELEG_PREV_FH`: the current file, under a delegation of
    /// the client's previous instance.
    DelegPrevFh,
}

impl OpenClaim4 {
    /// The claim type on the wire.
    pub fn claim_type(&self) -> OpenClaimType4 {
        match self {
            OpenClaim4::Null(_) => OpenClaimType4::Null,
            OpenClaim4::Previous(_) => OpenClaimType4::Previous,
            OpenClaim4::DelegateCur(_) => OpenClaimType4::DelegateCur,
            OpenClaim4::DelegatePrev(_) => OpenClaimType4::DelegatePrev,
            OpenClaim4::Fh => OpenClaimType4::Fh,
            OpenClaim4::DelegCurFh(_) => OpenClaimType4::DelegCurFh,
            OpenClaim4::DelegPrevFh => OpenClaimType4::DelegPrevFh,
        }
    }
}

impl Encode for OpenClaim4 {
    fn encode(&self, enc: &mut Encoder) {
        self.claim_type().encode(enc);
        match self {
            OpenClaim4::Null(file) | OpenClaim4::DelegatePrev(file) => file.encode(enc),
            OpenClaim4::Previous(delegate_type) => delegate_type.encode(enc),
            OpenClaim4::DelegateCur(cur) => cur.encode(enc),
            OpenClaim4::DelegCurFh(stateid) => stateid.encode(enc),
            OpenClaim4::Fh | OpenClaim4::DelegPrevFh => {}
        }
    }
}

impl Decode<'_> for OpenClaim4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match OpenClaimType4::decode(dec)? {
            OpenClaimType4::Null => OpenClaim4::Null(Decode::decode(dec)?),
            OpenClaimType4::Previous => OpenClaim4::Previous(Decode::decode(dec)?),
            OpenClaimType4::DelegateCur => OpenClaim4::DelegateCur(Decode::decode(dec)?),
            OpenClaimType4::DelegatePrev => OpenClaim4::DelegatePrev(Decode::decode(dec)?),
            OpenClaimType4::Fh => OpenClaim4::Fh,
            OpenClaimType4::DelegCurFh => OpenClaim4::DelegCurFh(Decode::decode(dec)?),
            OpenClaimType4::DelegPrevFh => OpenClaim4::DelegPrevFh,
        })
    }
}

xdr_struct! {
    /// `OPEN4args`. The seqid is ignored in 4.1 (the slot gives
    /// exactly-once, RFC 8881 section 8.13).
    pub struct OpenArgs4 {
        pub seqid: u32,
        pub share_access: u32,
        pub share_deny: u32,
        pub owner: OpenOwner4,
        pub openhow: OpenFlag4,
        pub claim: OpenClaim4,
    }
}

xdr_struct! {
    /// `open_read_delegation4`.
    pub struct OpenReadDelegation4 {
        pub stateid: StateId4,
        pub recall: bool,
        pub permissions: Nfsace4,
    }
}

xdr_enum! {
    /// `limit_by4`.
    pub enum LimitBy4 {
        Size = 1,
        Blocks = 2,
    }
}

xdr_struct! {
    /// `nfs_modified_limit4`.
    pub struct NfsModifiedLimit4 {
        pub num_blocks: u32,
        pub bytes_per_block: u32,
    }
}

/// `nfs_space_limit4`: how far a client with a write delegation may
/// write before it must flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsSpaceLimit4 {
    /// `NFS_LIMIT_SIZE`.
    Size(u64),
    /// `NFS_LIMIT_BLOCKS`.
    Blocks(NfsModifiedLimit4),
}

impl Encode for NfsSpaceLimit4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            NfsSpaceLimit4::Size(size) => {
                LimitBy4::Size.encode(enc);
                enc.u64(*size);
            }
            NfsSpaceLimit4::Blocks(blocks) => {
                LimitBy4::Blocks.encode(enc);
                blocks.encode(enc);
            }
        }
    }
}

impl Decode<'_> for NfsSpaceLimit4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match LimitBy4::decode(dec)? {
            LimitBy4::Size => NfsSpaceLimit4::Size(dec.u64()?),
            LimitBy4::Blocks => NfsSpaceLimit4::Blocks(Decode::decode(dec)?),
        })
    }
}

xdr_struct! {
    /// `open_write_delegation4`.
    pub struct OpenWriteDelegation4 {
        pub stateid: StateId4,
        pub recall: bool,
        pub space_limit: NfsSpaceLimit4,
        pub permissions: Nfsace4,
    }
}

xdr_enum! {
    /// `why_no_delegation4` (RFC 8881 section 18.16.3).
    pub enum WhyNoDelegation4 {
        NotWanted = 0,
        Contention = 1,
        Resource = 2,
        NotSuppFtype = 3,
        WriteDelegNotSuppFtype = 4,
        NotSuppUpgrade = 5,
        NotSuppDowngrade = 6,
        Cancelled = 7,
        IsDir = 8,
    }
}

/// `open_none_delegation4`: why OPEN granted no delegation that was
/// wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenNoneDelegation4 {
    /// `WND4_CONTENTION`, and whether the server will push one later.
    Contention { server_will_push_deleg: bool },
    /// `WND4_RESOURCE`, and whether the server will signal when one is
    /// available.
    Resource { server_will_signal_avail: bool },
    /// Any other reason (never `Contention` or `Resource`, which carry a
    /// flag).
    Why(WhyNoDelegation4),
}

impl Encode for OpenNoneDelegation4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            OpenNoneDelegation4::Contention {
                server_will_push_deleg,
            } => {
                WhyNoDelegation4::Contention.encode(enc);
                enc.bool(*server_will_push_deleg);
            }
            OpenNoneDelegation4::Resource {
                server_will_signal_avail,
            } => {
                WhyNoDelegation4::Resource.encode(enc);
                enc.bool(*server_will_signal_avail);
            }
            OpenNoneDelegation4::Why(why) => {
                debug_assert!(
                    !matches!(
                        why,
                        WhyNoDelegation4::Contention | WhyNoDelegation4::Resource
                    ),
                    "why_no_delegation4 {why:?} without its flag"
                );
                why.encode(enc);
            }
        }
    }
}

impl Decode<'_> for OpenNoneDelegation4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match WhyNoDelegation4::decode(dec)? {
            WhyNoDelegation4::Contention => OpenNoneDelegation4::Contention {
                server_will_push_deleg: dec.bool()?,
            },
            WhyNoDelegation4::Resource => OpenNoneDelegation4::Resource {
                server_will_signal_avail: dec.bool()?,
            },
            why => OpenNoneDelegation4::Why(why),
        })
    }
}

/// `open_delegation4`: the delegation OPEN grants, if any. dionfs grants
/// none (`None`, or `NoneExt` when one was wanted); a client decodes
/// every arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation4 {
    /// `OPEN_DELEGATE_NONE`.
    None,
    /// `OPEN_DELEGATE_READ`.
    Read(OpenReadDelegation4),
    /// `OPEN_DELEGATE_WRITE`.
    Write(OpenWriteDelegation4),
    /// `OPEN_DELEGATE_NONE_EXT` (4.1): none, and why.
    NoneExt(OpenNoneDelegation4),
    /// `OPEN_DELEGATE_READ_ATTRS_DELEG` (RFC 9754).
    ReadAttrsDeleg(OpenReadDelegation4),
    /// `OPEN_DELEGATE_WRITE_ATTRS_DELEG` (RFC 9754).
    WriteAttrsDeleg(OpenWriteDelegation4),
}

impl OpenDelegation4 {
    /// The delegation type on the wire.
    pub fn delegation_type(&self) -> OpenDelegationType4 {
        match self {
            OpenDelegation4::None => OpenDelegationType4::None,
            OpenDelegation4::Read(_) => OpenDelegationType4::Read,
            OpenDelegation4::Write(_) => OpenDelegationType4::Write,
            OpenDelegation4::NoneExt(_) => OpenDelegationType4::NoneExt,
            OpenDelegation4::ReadAttrsDeleg(_) => OpenDelegationType4::ReadAttrsDeleg,
            OpenDelegation4::WriteAttrsDeleg(_) => OpenDelegationType4::WriteAttrsDeleg,
        }
    }
}

impl Encode for OpenDelegation4 {
    fn encode(&self, enc: &mut Encoder) {
        self.delegation_type().encode(enc);
        match self {
            OpenDelegation4::None => {}
            OpenDelegation4::Read(read) | OpenDelegation4::ReadAttrsDeleg(read) => read.encode(enc),
            OpenDelegation4::Write(write) | OpenDelegation4::WriteAttrsDeleg(write) => {
                write.encode(enc)
            }
            OpenDelegation4::NoneExt(why) => why.encode(enc),
        }
    }
}

impl Decode<'_> for OpenDelegation4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match OpenDelegationType4::decode(dec)? {
            OpenDelegationType4::None => OpenDelegation4::None,
            OpenDelegationType4::Read => OpenDelegation4::Read(Decode::decode(dec)?),
            OpenDelegationType4::Write => OpenDelegation4::Write(Decode::decode(dec)?),
            OpenDelegationType4::NoneExt => OpenDelegation4::NoneExt(Decode::decode(dec)?),
            OpenDelegationType4::ReadAttrsDeleg => {
                OpenDelegation4::ReadAttrsDeleg(Decode::decode(dec)?)
            }
            OpenDelegationType4::WriteAttrsDeleg => {
                OpenDelegation4::WriteAttrsDeleg(Decode::decode(dec)?)
            }
        })
    }
}

xdr_struct! {
    /// `OPEN4resok`.
    pub struct OpenResOk4 {
        pub stateid: StateId4,
        pub cinfo: ChangeInfo4,
        pub rflags: u32,
        pub attrset: Bitmap4,
        pub delegation: OpenDelegation4,
    }
}

xdr_struct! {
    /// `CLOSE4args`; `CLOSE4resok` is the (now invalid) open stateid.
    pub struct CloseArgs4 {
        pub seqid: u32,
        pub open_stateid: StateId4,
    }
}

xdr_struct! {
    /// `OPEN_DOWNGRADE4args`; `OPEN_DOWNGRADE4resok` is the open stateid.
    pub struct OpenDowngradeArgs4 {
        pub open_stateid: StateId4,
        pub seqid: u32,
        pub share_access: u32,
        pub share_deny: u32,
    }
}

xdr_enum! {
    /// `nfs_lock_type4`: a byte-range lock's kind; the `W` ones are
    /// blocking requests (Linux polls them).
    pub enum NfsLockType4 {
        Read = 1,
        Write = 2,
        ReadW = 3,
        WriteW = 4,
    }
}

xdr_struct! {
    /// `open_to_lock_owner4`: a lock-owner's first LOCK on a file, from
    /// its open stateid.
    pub struct OpenToLockOwner4 {
        pub open_seqid: u32,
        pub open_stateid: StateId4,
        pub lock_seqid: u32,
        pub lock_owner: LockOwner4,
    }
}

xdr_struct! {
    /// `exist_lock_owner4`: a later LOCK of a lock-owner, from its lock
    /// stateid.
    pub struct ExistLockOwner4 {
        pub lock_stateid: StateId4,
        pub lock_seqid: u32,
    }
}

/// `locker4`: who LOCK locks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker4 {
    /// `new_lock_owner` TRUE.
    OpenOwner(OpenToLockOwner4),
    /// `new_lock_owner` FALSE.
    LockOwner(ExistLockOwner4),
}

impl Encode for Locker4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Locker4::OpenOwner(open) => {
                enc.bool(true);
                open.encode(enc);
            }
            Locker4::LockOwner(lock) => {
                enc.bool(false);
                lock.encode(enc);
            }
        }
    }
}

impl Decode<'_> for Locker4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(if dec.bool()? {
            Locker4::OpenOwner(Decode::decode(dec)?)
        } else {
            Locker4::LockOwner(Decode::decode(dec)?)
        })
    }
}

xdr_struct! {
    /// `LOCK4args`; `LOCK4resok` is the lock stateid.
    pub struct LockArgs4 {
        pub locktype: NfsLockType4,
        pub reclaim: bool,
        pub offset: u64,
        pub length: u64,
        pub locker: Locker4,
    }
}

xdr_struct! {
    /// `LOCK4denied`: a conflicting lock, in LOCK's and LOCKT's
    /// `NFS4ERR_DENIED`.
    pub struct Lock4Denied {
        pub offset: u64,
        pub length: u64,
        pub locktype: NfsLockType4,
        pub owner: LockOwner4,
    }
}

/// `LOCK4res` (`T` = [`StateId4`]) and `LOCKT4res` (`T` =
/// [`Void`](crate::Void)): `NFS4ERR_DENIED` carries the conflicting lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRes4<T> {
    /// `NFS4_OK`.
    Ok(T),
    /// `NFS4ERR_DENIED`.
    Denied(Lock4Denied),
    /// Any other status; never `NFS4_OK` or `NFS4ERR_DENIED`.
    Fail(Nfsstat4),
}

impl<T> LockRes4<T> {
    /// The status on the wire.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            LockRes4::Ok(_) => Nfsstat4::Ok,
            LockRes4::Denied(_) => Nfsstat4::Denied,
            LockRes4::Fail(status) => *status,
        }
    }
}

impl<T: Encode> Encode for LockRes4<T> {
    fn encode(&self, enc: &mut Encoder) {
        self.status().encode(enc);
        match self {
            LockRes4::Ok(ok) => ok.encode(enc),
            LockRes4::Denied(denied) => denied.encode(enc),
            LockRes4::Fail(status) => debug_assert!(
                !matches!(status, Nfsstat4::Ok | Nfsstat4::Denied),
                "LockRes4::Fail with {status:?}"
            ),
        }
    }
}

impl<'a, T: Decode<'a>> Decode<'a> for LockRes4<T> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self> {
        Ok(match Nfsstat4::decode(dec)? {
            Nfsstat4::Ok => LockRes4::Ok(T::decode(dec)?),
            Nfsstat4::Denied => LockRes4::Denied(Decode::decode(dec)?),
            status => LockRes4::Fail(status),
        })
    }
}

xdr_struct! {
    /// `LOCKT4args`.
    pub struct LocktArgs4 {
        pub locktype: NfsLockType4,
        pub offset: u64,
        pub length: u64,
        pub owner: LockOwner4,
    }
}

xdr_struct! {
    /// `LOCKU4args`; `LOCKU4resok` is the lock stateid.
    pub struct LockuArgs4 {
        pub locktype: NfsLockType4,
        pub seqid: u32,
        pub lock_stateid: StateId4,
        pub offset: u64,
        pub length: u64,
    }
}

xdr_struct! {
    /// `DELEGRETURN4args`; the result is its status.
    pub struct DelegreturnArgs4 {
        pub deleg_stateid: StateId4,
    }
}

#[cfg(test)]
mod tests {
    use dionfs_xdr::XdrError;

    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{ArgOp, Res4};
    use crate::test_util::assert_codec;
    use crate::Void;

    #[test]
    fn state_args_round_trip() {
        let mut seen = 0;
        for op in typical_ops() {
            seen += 1;
            match op {
                ArgOp::Open(a) => assert_codec(&*a),
                ArgOp::Close(a) => assert_codec(&a),
                ArgOp::OpenDowngrade(a) => assert_codec(&a),
                ArgOp::Lock(a) => assert_codec(&*a),
                ArgOp::Lockt(a) => assert_codec(&a),
                ArgOp::Locku(a) => assert_codec(&a),
                ArgOp::Delegreturn(a) => assert_codec(&a),
                _ => seen -= 1,
            }
        }
        assert_eq!(seen, typical_state_ops().len());
    }

    #[test]
    fn every_claim_and_createhow_arm_is_sampled() {
        let mut claims = Vec::new();
        let mut modes = Vec::new();
        for op in typical_ops() {
            if let ArgOp::Open(open) = op {
                claims.push(open.claim.claim_type());
                if let OpenFlag4::Create(how) = open.openhow {
                    modes.push(how.mode());
                }
            }
        }
        for claim in OpenClaimType4::ALL {
            assert!(claims.contains(claim), "{claim:?} not sampled");
        }
        for mode in CreateMode4::ALL {
            assert!(modes.contains(mode), "{mode:?} not sampled");
        }
    }

    #[test]
    fn state_results_round_trip() {
        let read = OpenReadDelegation4 {
            stateid: stateid(),
            recall: false,
            permissions: Nfsace4 {
                acetype: 0,
                flag: 0,
                access_mask: 0x1,
                who: crate::nfs4::Owner4::from("EVERYONE@"),
            },
        };
        let write = OpenWriteDelegation4 {
            stateid: stateid(),
            recall: true,
            space_limit: NfsSpaceLimit4::Blocks(NfsModifiedLimit4 {
                num_blocks: 8,
                bytes_per_block: 4096,
            }),
            permissions: read.permissions.clone(),
        };
        let delegations = [
            OpenDelegation4::None,
            OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(WhyNoDelegation4::NotSuppFtype)),
            OpenDelegation4::NoneExt(OpenNoneDelegation4::Contention {
                server_will_push_deleg: true,
            }),
            OpenDelegation4::NoneExt(OpenNoneDelegation4::Resource {
                server_will_signal_avail: false,
            }),
            OpenDelegation4::Read(read.clone()),
            OpenDelegation4::ReadAttrsDeleg(read),
            OpenDelegation4::Write(write.clone()),
            OpenDelegation4::WriteAttrsDeleg(OpenWriteDelegation4 {
                space_limit: NfsSpaceLimit4::Size(1 << 30),
                ..write
            }),
        ];
        for delegation in delegations {
            assert_codec(&Res4::Ok(OpenResOk4 {
                stateid: stateid(),
                cinfo: cinfo(),
                rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
                attrset: Bitmap4::from_bits(&[4, 33]),
                delegation,
            }));
        }
        assert_codec(&Res4::<OpenResOk4>::Fail(Nfsstat4::ShareDenied));
        assert_codec(&Res4::Ok(stateid()));
        let denied = Lock4Denied {
            offset: 10,
            length: u64::MAX,
            locktype: NfsLockType4::Write,
            owner: StateOwner4 {
                clientid: 0,
                owner: Opaque4::from("nlm:client 1234"),
            },
        };
        assert_codec(&LockRes4::Ok(stateid()));
        assert_codec(&LockRes4::<StateId4>::Denied(denied.clone()));
        assert_codec(&LockRes4::<StateId4>::Fail(Nfsstat4::Grace));
        assert_codec(&LockRes4::Ok(Void));
        assert_codec(&LockRes4::<Void>::Denied(denied));
        assert_codec(&LockRes4::<Void>::Fail(Nfsstat4::Openmode));
    }

    #[test]
    fn unknown_arms_are_errors() {
        let word = |w: u32| w.to_be_bytes();
        assert!(matches!(
            CreateHow4::from_xdr(&word(4)),
            Err(XdrError::BadDiscriminant { .. })
        ));
        assert!(matches!(
            OpenClaim4::from_xdr(&word(7)),
            Err(XdrError::BadDiscriminant { .. })
        ));
        assert!(OpenDelegation4::from_xdr(&word(6)).is_err());
        assert!(Locker4::from_xdr(&word(2)).is_err());
        assert!(OpenFlag4::from_xdr(&word(2)).is_err());
        assert!(NfsSpaceLimit4::from_xdr(&word(3)).is_err());
    }
}
