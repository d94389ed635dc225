//! NFS version 4.1 and 4.2 (RFC 8881, RFC 7862, RFC 8276): program
//! 100003, version 4, one procedure (COMPOUND) carrying operations.
//!
//! Every operation has an args type and a result type, each with both
//! [`Encode`](dionfs_xdr::Encode) and [`Decode`](dionfs_xdr::Decode).
//! The server decodes a COMPOUND one operation at a time with
//! [`decode_op`], after its [`CompoundHead`], and writes each result
//! after [`encode_result_head`]. Results that carry nothing but their
//! status are an [`Nfsstat4`]; the others are [`Res4`] of the op's `resok`.
//! A client decodes the results of a reply as [`CompoundResHead`] and
//! [`ResOp`]s.
//!
//! | op | args | result |
//! |----|------|--------|
//! | ACCESS | [`AccessArgs4`] | [`Res4`]<[`AccessResOk4`]> |
//! | ALLOCATE, DEALLOCATE | [`AllocateArgs4`] | [`Nfsstat4`] |
//! | BACKCHANNEL_CTL | [`BackchannelCtlArgs4`] | [`Nfsstat4`] |
//! | BIND_CONN_TO_SESSION | [`BindConnToSessionArgs4`] | [`Res4`]<[`BindConnToSessionResOk4`]> |
//! | CLONE | [`CloneArgs4`] | [`Nfsstat4`] |
//! | CLOSE | [`CloseArgs4`] | [`Res4`]<[`StateId4`]> |
//! | COMMIT | [`CommitArgs4`] | [`Res4`]<[`CommitResOk4`]> |
//! | COPY | [`CopyArgs4`] | [`CopyRes4`] |
//! | CREATE | [`CreateArgs4`] | [`Res4`]<[`CreateResOk4`]> |
//! | CREATE_SESSION | [`CreateSessionArgs4`] | [`Res4`]<[`CreateSessionResOk4`]> |
//! | DELEGRETURN | [`DelegreturnArgs4`] | [`Nfsstat4`] |
//! | DESTROY_CLIENTID | [`DestroyClientidArgs4`] | [`Nfsstat4`] |
//! | DESTROY_SESSION | [`DestroySessionArgs4`] | [`Nfsstat4`] |
//! | EXCHANGE_ID | [`ExchangeIdArgs4`] | [`Res4`]<[`ExchangeIdResOk4`]> |
//! | FREE_STATEID | [`FreeStateidArgs4`] | [`Nfsstat4`] |
//! | GETATTR | [`GetattrArgs4`] | [`Res4`]<[`GetattrResOk4`]> |
//! | GETFH | none | [`Res4`]<[`GetfhResOk4`]> |
//! | GETXATTR | [`GetxattrArgs4`] | [`Res4`]<[`XattrValue4`]> |
//! | LINK | [`LinkArgs4`] | [`Res4`]<[`ChangeInfo4`]> |
//! | LISTXATTRS | [`ListxattrsArgs4`] | [`Res4`]<[`ListxattrsResOk4`]> |
//! | LOCK | [`LockArgs4`] | [`LockRes4`]<[`StateId4`]> |
//! | LOCKT | [`LocktArgs4`] | [`LockRes4`]<[`Void`](crate::Void)> |
//! | LOCKU | [`LockuArgs4`] | [`Res4`]<[`StateId4`]> |
//! | LOOKUP | [`LookupArgs4`] | [`Nfsstat4`] |
//! | LOOKUPP | none | [`Nfsstat4`] |
//! | NVERIFY | [`VerifyArgs4`] | [`Nfsstat4`] |
//! | OPEN | [`OpenArgs4`] | [`Res4`]<[`OpenResOk4`]> |
//! | OPEN_DOWNGRADE | [`OpenDowngradeArgs4`] | [`Res4`]<[`StateId4`]> |
//! | PUTFH | [`PutfhArgs4`] | [`Nfsstat4`] |
//! | PUTPUBFH, PUTROOTFH | none | [`Nfsstat4`] |
//! | READ | [`ReadArgs4`] | [`Res4`]<[`ReadResOk4`]>; server: [`encode_read_ok_head`], then the payload |
//! | READ_PLUS | [`ReadArgs4`] | [`Res4`]<[`ReadPlusResOk4`]>; server: [`encode_read_plus_head`] and the segments |
//! | READDIR | [`ReaddirArgs4`] | [`Res4`]<[`ReaddirResOk4`]> |
//! | READLINK | none | [`Res4`]<[`Linktext4`]> |
//! | RECLAIM_COMPLETE | [`ReclaimCompleteArgs4`] | [`Nfsstat4`] |
//! | REMOVE | [`RemoveArgs4`] | [`Res4`]<[`ChangeInfo4`]> |
//! | REMOVEXATTR | [`RemovexattrArgs4`] | [`Res4`]<[`ChangeInfo4`]> |
//! | RENAME | [`RenameArgs4`] | [`Res4`]<[`RenameResOk4`]> |
//! | RESTOREFH, SAVEFH | none | [`Nfsstat4`] |
//! | SECINFO | [`SecinfoArgs4`] | [`Res4`]<[`SecinfoResOk4`]> |
//! | SECINFO_NO_NAME | [`SecinfoStyle4`] | [`Res4`]<[`SecinfoResOk4`]> |
//! | SEEK | [`SeekArgs4`] | [`Res4`]<[`SeekResOk4`]> |
//! | SEQUENCE | [`SequenceArgs4`] | [`Res4`]<[`SequenceResOk4`]> |
//! | SETATTR | [`SetattrArgs4`] | [`SetattrRes4`] |
//! | SETXATTR | [`SetxattrArgs4`] | [`Res4`]<[`ChangeInfo4`]> |
//! | TEST_STATEID | [`TestStateidArgs4`] | [`Res4`]<[`TestStateidResOk4`]> |
//! | VERIFY | [`VerifyArgs4`] | [`Nfsstat4`] |
//! | WRITE | server: [`WriteHead4`], then the payload | [`Res4`]<[`WriteResOk4`]> |
//!
//! The rest decode as [`ArgOp::NotSupp`] (only their opnum is read, and
//! the server answers `NFS4ERR_NOTSUPP`): the 4.0-only operations, and
//! those of delegations, pNFS, SSV and asynchronous copies (design
//! section 8).
//!
//! The callback program's CB_COMPOUND is [`CbCompoundArgs4`] and
//! [`CbCompoundRes4`] ([`decode_cb_compound_reply`]).
//!
//! [`Opnum4::max_args_len`] gives the longest arguments of each operation,
//! so a server can refuse a longer one before reading it.

mod attrs;
mod callback;
mod compound;
mod limits;
mod ops;
#[cfg(test)]
mod samples;
mod types;

pub use attrs::*;
pub use callback::*;
pub use compound::*;
pub use ops::*;
pub use types::*;

/// RPC program number of NFS.
pub const NFS4_PROGRAM: u32 = 100003;
/// The NFS version of this codec.
pub const NFS_V4: u32 = 4;
/// The version of the callback program the server calls (what knfsd
/// sends).
pub const NFS4_CALLBACK_VERSION: u32 = 1;
