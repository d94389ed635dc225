//! NFS version 4, minor versions 1 and 2 (RFC 8881, RFC 7862), on the
//! NFS port beside NFSv3: one procedure, COMPOUND, carrying operations.
//! [`receive`] reads a COMPOUND one op at a time and runs its SEQUENCE
//! there; [`compound`] runs the ops through the op table [`PROGRAM`] and
//! builds the reply ([`reply`]); [`state`] keeps clients and sessions;
//! [`status`] maps backend errors to `nfsstat4`. This program never calls
//! `nfs/` or `nlm/` (ARCHITECTURE.md).
//!
//! Served so far (W5 and W6 of docs/nfs4-design.md): the session ops;
//! the filehandle ops ([`fh`]); LOOKUP, LOOKUPP and SECINFO(_NO_NAME)
//! across the pseudo-filesystem ([`lookup`], [`namespace`]); GETATTR,
//! SETATTR, VERIFY, NVERIFY ([`attr_ops`], [`attrs`]); OPEN, CLOSE,
//! OPEN_DOWNGRADE, TEST_STATEID, FREE_STATEID ([`open_ops`]) and LOCK,
//! LOCKT, LOCKU ([`lock_ops`]); ACCESS, READLINK, READDIR, CREATE,
//! REMOVE, RENAME, LINK ([`dirs`]);
//! READ, WRITE and COMMIT through v3's data plane ([`data`]);
//! and of NFSv4.2 (W9), SEEK, READ_PLUS, ALLOCATE, DEALLOCATE, COPY and
//! CLONE ([`data42`]) and the extended-attribute ops ([`xattr`]). A minor
//! version 1 COMPOUND never reaches those: the codec decodes a 4.2 op
//! there as `OP_ILLEGAL`.
//! DELEGRETURN and the recalls are [`delegation`]'s (design section C).
//! Every other op answers `NFS4ERR_NOTSUPP` until its piece lands; pNFS,
//! DELEGPURGE, WANT_DELEGATION and directory delegations keep that answer.

pub mod acl;
pub mod attr_ops;
pub mod attrs;
pub mod callback;
pub mod compound;
pub mod data;
pub mod data42;
pub mod delegation;
pub mod dirs;
pub mod fh;
pub mod idmap;
pub mod lock_ops;
pub mod lookup;
pub mod namespace;
pub mod open_ops;
pub mod receive;
pub mod reply;
pub mod state;
pub mod status;
pub mod v40;
pub mod xattr;

use std::sync::Arc;

use dionfs_proto::nfs4::{ArgOp, Nfsstat4, Opnum4, NFS4_PROGRAM, NFS_V4};
use dionfs_xdr::Encode;

use self::compound::OpCtx;
pub use self::fh::Fh4;
use self::namespace::NamespaceCache;
use self::reply::CompoundReply;
use self::state::{Principal, State, StateConfig};
use crate::program::{Io, Procedure, Program, ReplyCache};
use dionfs_core::export::ServerSettings;

/// NFSv4's program state: the client and session table, and the minor
/// versions served.
pub struct Nfs4 {
    pub state: Arc<State>,
    /// The pseudo-filesystem of the export list served last.
    pub namespace: NamespaceCache,
    /// Owner strings (`nfs4_id_domain`).
    pub idmap: self::idmap::Idmap,
    minor0: bool,
    minor1: bool,
    minor2: bool,
}

impl Nfs4 {
    /// The program for `settings` (which serve some NFSv4 minor version),
    /// with records of `max_record` bytes at most: reads or makes the
    /// server's NFSv4 identity under the state directory.
    /// Its opens and locks go in `locks`, the tables NLM uses too, so
    /// that the kernel and the tables decide conflicts between the two;
    /// its clients of the previous run reclaim in `grace`, the period NLM
    /// holds too; its delegations go in the server's index `delegations`.
    pub fn new(
        settings: &ServerSettings,
        max_record: u32,
        locks: Arc<crate::locks::Locks>,
        grace: Arc<dionfs_core::grace::Grace>,
        delegations: Arc<dionfs_core::delegations::Delegations>,
    ) -> Result<Nfs4, String> {
        let state = State::with_delegations(
            StateConfig {
                lease_time: settings.lease_time,
                reply_cache_bytes: usize::try_from(settings.nfs4_reply_cache_mib << 20)
                    .unwrap_or(usize::MAX),
                max_record,
                state_dir: Some(settings.state_dir.clone()),
            },
            locks,
            grace,
            delegations,
        )
        .map_err(|e| {
            format!(
                "cannot set up the NFSv4 state under {}: {e}",
                settings.state_dir.display()
            )
        })?;
        Ok(Nfs4 {
            state,
            namespace: NamespaceCache::default(),
            idmap: self::idmap::Idmap::new(settings.nfs4_id_domain.clone()),
            minor0: settings.versions.v4_0,
            minor1: settings.versions.v4_1,
            minor2: settings.versions.v4_2,
        })
    }

    /// Whether NFSv4 minor version `minor` is served.
    pub fn serves_minor(&self, minor: u32) -> bool {
        match minor {
            0 => self.minor0,
            1 => self.minor1,
            2 => self.minor2,
            _ => false,
        }
    }

    /// Drops the opens and locks of NFSv4 clients on files of the exports
    /// `ids`, which a reload removed (as [`crate::locks::Locks::release_exports`]
    /// does NLM's). How many opens went.
    pub fn release_exports(&self, ids: &[u16]) -> usize {
        self.state.release_exports(ids)
    }

    /// Starts the laundromat: leases expired and unconfirmed clients
    /// forgotten every tenth of a lease (design section 4.6), while the
    /// state lives; and the recaller of delegations. Call it within the
    /// runtime.
    pub fn start_laundromat(&self) {
        state::laundromat::spawn(&self.state);
        let recaller = delegation::recaller(
            Arc::downgrade(&self.state),
            tokio::runtime::Handle::current(),
        );
        if !self.state.delegations.set_recaller(recaller) {
            tracing::warn!("the delegation index already has a recaller");
        }
    }
}

/// How an op runs: it finds its arguments in the [`ArgOp`] (of its own
/// variant: the table is indexed by opnum), writes its result after its
/// status into the reply, and returns its status.
pub type OpFn = fn(&mut OpCtx, ArgOp, &mut CompoundReply) -> Nfsstat4;

/// An op's entry in the table.
pub struct Op4 {
    pub run: OpFn,
    /// Whether it may make file-system calls or sync (and so needs a
    /// blocking thread): design section 8's "blocks" column.
    pub blocks: bool,
}

/// NFSv4 as one table (design section 8): index 0 is NULL and 1 COMPOUND
/// (the RPC procedures), 2 is unused, and 3 to 75 are the ops by number,
/// so call statistics count each op as NFSv3's procedures are counted.
/// Each op's `args` is its longest encoding.
pub static PROGRAM: Program<Op4> = Program {
    label: "nfs4",
    title: "NFS v4",
    number: NFS4_PROGRAM,
    version: NFS_V4,
    procedures: &PROCEDURES,
};

/// An op's table entry.
const fn op(opnum: Opnum4, name: &'static str, run: OpFn, blocks: bool) -> Option<Procedure<Op4>> {
    Some(Procedure {
        name,
        args: opnum.max_args_len(),
        cache: ReplyCache::No,
        io: Io::None,
        handler: Op4 { run, blocks },
    })
}

/// The entry of an RPC procedure (NULL, COMPOUND): never run as an op.
const fn procedure(name: &'static str) -> Option<Procedure<Op4>> {
    Some(Procedure {
        name,
        args: dionfs_proto::ArgsLimit::Whole(0),
        cache: ReplyCache::No,
        io: Io::None,
        handler: Op4 {
            run: illegal,
            blocks: false,
        },
    })
}

use Opnum4 as O;

static PROCEDURES: [Option<Procedure<Op4>>; 76] = [
    procedure("NULL"),
    procedure("COMPOUND"),
    None,
    op(O::Access, "ACCESS", dirs::access, true),
    op(O::Close, "CLOSE", open_ops::close, true),
    op(O::Commit, "COMMIT", data::commit, true),
    op(O::Create, "CREATE", dirs::create, true),
    op(O::Delegpurge, "DELEGPURGE", notsupp, false),
    op(O::Delegreturn, "DELEGRETURN", delegation::delegreturn, true),
    op(O::Getattr, "GETATTR", attr_ops::getattr, true),
    op(O::Getfh, "GETFH", fh::getfh, false),
    op(O::Link, "LINK", dirs::link, true),
    op(O::Lock, "LOCK", lock_ops::lock, true),
    op(O::Lockt, "LOCKT", lock_ops::lockt, true),
    op(O::Locku, "LOCKU", lock_ops::locku, true),
    op(O::Lookup, "LOOKUP", lookup::lookup, true),
    op(O::Lookupp, "LOOKUPP", lookup::lookupp, true),
    op(O::Nverify, "NVERIFY", attr_ops::nverify, true),
    op(O::Open, "OPEN", open_ops::open, true),
    op(O::Openattr, "OPENATTR", notsupp, false),
    op(O::OpenConfirm, "OPEN_CONFIRM", v40::open_confirm, false),
    op(
        O::OpenDowngrade,
        "OPEN_DOWNGRADE",
        open_ops::open_downgrade,
        true,
    ),
    op(O::Putfh, "PUTFH", fh::putfh, false),
    op(O::Putpubfh, "PUTPUBFH", fh::putrootfh, false),
    op(O::Putrootfh, "PUTROOTFH", fh::putrootfh, false),
    op(O::Read, "READ", data::read, true),
    op(O::Readdir, "READDIR", dirs::readdir, true),
    op(O::Readlink, "READLINK", dirs::readlink, true),
    op(O::Remove, "REMOVE", dirs::remove, true),
    op(O::Rename, "RENAME", dirs::rename, true),
    op(O::Renew, "RENEW", v40::renew, false),
    op(O::Restorefh, "RESTOREFH", fh::restorefh, false),
    op(O::Savefh, "SAVEFH", fh::savefh, false),
    op(O::Secinfo, "SECINFO", lookup::secinfo, true),
    op(O::Setattr, "SETATTR", attr_ops::setattr, true),
    op(O::Setclientid, "SETCLIENTID", v40::setclientid, false),
    op(
        O::SetclientidConfirm,
        "SETCLIENTID_CONFIRM",
        v40::setclientid_confirm,
        false,
    ),
    op(O::Verify, "VERIFY", attr_ops::verify, true),
    op(O::Write, "WRITE", data::write, true),
    op(
        O::ReleaseLockowner,
        "RELEASE_LOCKOWNER",
        v40::release_lockowner,
        false,
    ),
    op(O::BackchannelCtl, "BACKCHANNEL_CTL", backchannel_ctl, false),
    op(
        O::BindConnToSession,
        "BIND_CONN_TO_SESSION",
        bind_conn_to_session,
        false,
    ),
    op(O::ExchangeId, "EXCHANGE_ID", exchange_id, false),
    op(O::CreateSession, "CREATE_SESSION", create_session, false),
    op(O::DestroySession, "DESTROY_SESSION", destroy_session, false),
    op(O::FreeStateid, "FREE_STATEID", open_ops::free_stateid, true),
    op(O::GetDirDelegation, "GET_DIR_DELEGATION", notsupp, false),
    op(O::Getdeviceinfo, "GETDEVICEINFO", notsupp, false),
    op(O::Getdevicelist, "GETDEVICELIST", notsupp, false),
    op(O::Layoutcommit, "LAYOUTCOMMIT", notsupp, false),
    op(O::Layoutget, "LAYOUTGET", notsupp, false),
    op(O::Layoutreturn, "LAYOUTRETURN", notsupp, false),
    op(
        O::SecinfoNoName,
        "SECINFO_NO_NAME",
        lookup::secinfo_no_name,
        true,
    ),
    // Run at receive (receive.rs); a SEQUENCE after the first op is
    // refused there with SEQUENCE_POS.
    op(O::Sequence, "SEQUENCE", sequence_pos, false),
    op(O::SetSsv, "SET_SSV", notsupp, false),
    op(
        O::TestStateid,
        "TEST_STATEID",
        open_ops::test_stateid,
        false,
    ),
    op(O::WantDelegation, "WANT_DELEGATION", notsupp, false),
    op(
        O::DestroyClientid,
        "DESTROY_CLIENTID",
        destroy_clientid,
        true,
    ),
    op(
        O::ReclaimComplete,
        "RECLAIM_COMPLETE",
        reclaim_complete,
        true,
    ),
    op(O::Allocate, "ALLOCATE", data42::allocate, true),
    op(O::Copy, "COPY", data42::copy, true),
    op(O::CopyNotify, "COPY_NOTIFY", notsupp, false),
    op(O::Deallocate, "DEALLOCATE", data42::deallocate, true),
    op(O::IoAdvise, "IO_ADVISE", notsupp, false),
    op(O::Layouterror, "LAYOUTERROR", notsupp, false),
    op(O::Layoutstats, "LAYOUTSTATS", notsupp, false),
    op(O::OffloadCancel, "OFFLOAD_CANCEL", notsupp, false),
    op(O::OffloadStatus, "OFFLOAD_STATUS", notsupp, false),
    op(O::ReadPlus, "READ_PLUS", data42::read_plus, true),
    op(O::Seek, "SEEK", data42::seek, true),
    op(O::WriteSame, "WRITE_SAME", notsupp, false),
    op(O::Clone, "CLONE", data42::clone, true),
    op(O::Getxattr, "GETXATTR", xattr::getxattr, true),
    op(O::Setxattr, "SETXATTR", xattr::setxattr, true),
    op(O::Listxattrs, "LISTXATTRS", xattr::listxattrs, true),
    op(O::Removexattr, "REMOVEXATTR", xattr::removexattr, true),
];

/// The function that runs `op`: its table entry's, or ILLEGAL's for an
/// opnum outside the table.
pub fn op_fn(op: &ArgOp) -> OpFn {
    match op {
        ArgOp::Illegal(_) => illegal,
        ArgOp::NotSupp(_) => notsupp,
        _ => PROGRAM
            .procedure(op.opnum())
            .filter(|_| op.opnum() >= FIRST_OP)
            .map_or(illegal, |p| p.handler.run),
    }
}

/// Whether op `opnum` may block ([`Op4::blocks`]).
pub fn op_blocks(opnum: u32) -> bool {
    opnum >= FIRST_OP && PROGRAM.procedure(opnum).is_some_and(|p| p.handler.blocks)
}

/// The lowest opnum (ACCESS); below it are the RPC procedures.
pub const FIRST_OP: u32 = Opnum4::Access.as_u32();

/// An op not served yet (or ever: pNFS, delegations, NFSv4.0's).
fn notsupp(_: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    Nfsstat4::Notsupp
}

/// An opnum outside the minor version (its result's opnum is OP_ILLEGAL:
/// RFC 8881 section 15.2).
fn illegal(_: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    Nfsstat4::OpIllegal
}

/// SEQUENCE anywhere but first (receive.rs refuses it before it gets
/// here).
fn sequence_pos(_: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    Nfsstat4::SequencePos
}

fn exchange_id(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::ExchangeId(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let who = Principal::of(&ctx.call.cred);
    match ctx.nfs4.state.exchange_id(&args, &who, ctx.conn.peer.ip()) {
        Ok(res) => {
            ctx.nfs4.state.exchanged_in_minor(res.clientid, ctx.minor);
            res.encode(reply.encoder());
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

fn create_session(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::CreateSession(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let who = Principal::of(&ctx.call.cred);
    match ctx.nfs4.state.create_session(&args, &who, ctx.conn) {
        Ok(res) => {
            // Whether the client's back channel answers (SEQUENCE reports
            // it as CB_PATH_DOWN).
            callback::probe(&ctx.nfs4.state, &res.sessionid);
            res.encode(reply.encoder());
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

fn destroy_session(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::DestroySession(args) = op else {
        return Nfsstat4::Serverfault;
    };
    ctx.nfs4
        .state
        .destroy_session(&args.sessionid, ctx.conn, ctx.slot, ctx.last_op)
}

fn destroy_clientid(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::DestroyClientid(args) = op else {
        return Nfsstat4::Serverfault;
    };
    ctx.nfs4.state.destroy_clientid(args.clientid, ctx.slot)
}

fn bind_conn_to_session(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::BindConnToSession(args) = op else {
        return Nfsstat4::Serverfault;
    };
    // It must be the only op (RFC 8881 section 18.34.3): after a
    // SEQUENCE it is not.
    if ctx.slot.is_some() {
        return Nfsstat4::NotOnlyOp;
    }
    match ctx.nfs4.state.bind_conn(&args, ctx.conn) {
        Ok(res) => {
            callback::probe(&ctx.nfs4.state, &res.sessid);
            res.encode(reply.encoder());
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

fn backchannel_ctl(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::BackchannelCtl(args) = op else {
        return Nfsstat4::Serverfault;
    };
    // Only a session's COMPOUND gets here (receive.rs).
    match ctx.slot {
        Some(slot) => {
            let status = ctx.nfs4.state.backchannel_ctl(slot, &args);
            // A new program or credential: probe with them (as knfsd).
            if status.is_ok() {
                callback::probe(&ctx.nfs4.state, slot.sessionid());
            }
            status
        }
        None => Nfsstat4::OpNotInSession,
    }
}

fn reclaim_complete(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::ReclaimComplete(args) = op else {
        return Nfsstat4::Serverfault;
    };
    // RFC 8881 section 18.51.3: one file system's reclaims are those of
    // the current filehandle's.
    if args.one_fs && ctx.current.is_none() {
        return Nfsstat4::Nofilehandle;
    }
    match ctx.slot {
        Some(slot) => ctx.nfs4.state.reclaim_complete(slot, &args),
        None => Nfsstat4::OpNotInSession,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_indexed_by_opnum() {
        for &op in Opnum4::ALL {
            if op == Opnum4::Illegal {
                assert!(PROGRAM.procedure(op.as_u32()).is_none());
                continue;
            }
            let entry = PROGRAM
                .procedure(op.as_u32())
                .expect("every op has an entry");
            assert_eq!(entry.args, op.max_args_len(), "{op:?} is at {}", entry.name);
            let words: String = format!("{op:?}")
                .chars()
                .filter(|c| c.is_alphanumeric())
                .collect();
            assert_eq!(
                entry.name.replace('_', "").to_lowercase(),
                words.to_lowercase(),
                "{op:?}"
            );
        }
        assert_eq!(PROGRAM.procedure(0).map(|p| p.name), Some("NULL"));
        assert_eq!(PROGRAM.procedure(1).map(|p| p.name), Some("COMPOUND"));
        assert!(PROGRAM.procedure(2).is_none());
        assert!(op_blocks(Opnum4::DestroyClientid.as_u32()));
        assert!(!op_blocks(Opnum4::Putrootfh.as_u32()));
        assert!(!op_blocks(1) && !op_blocks(10044));
    }
}
