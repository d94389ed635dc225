//! Portmap v2 and rpcbind v3/v4 (RFC 1833): the arguments the server's
//! port mapper decodes, and the results its clients decode (the port a
//! client's port mapper gives for NLM callbacks, the boolean of a SET to
//! the host's rpcbind).

use dionfs_proto::portmap::{DumpResult, Mapping, Procedure, Rpcb, RpcbDump, RpcbProcedure};
use dionfs_proto::Void;
use dionfs_xdr::{Decode, Encode};

use crate::{check_args, check_result, select, Message};

/// Portmap v2 arguments, checked against the procedure's limit (`None`
/// only for CALLIT, which is not served and has no codec).
fn portmap_args<T>(proc_: Procedure, bytes: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug,
{
    let max = proc_
        .max_args_len()
        .expect("served procedures have a limit");
    check_args::<T>(bytes, max, proc_);
}

/// rpcbind v3/v4 arguments, checked against the procedure's limit.
fn rpcbind_args<T>(proc_: RpcbProcedure, bytes: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug,
{
    check_args::<T>(bytes, proc_.max_args_len(), proc_);
}

/// The arguments of every procedure served (portmap v2, then rpcbind),
/// then the results.
pub(crate) const MESSAGES: &[Message] = &[
    Message {
        name: "NULL",
        check: |b| portmap_args::<Void>(Procedure::Null, b),
    },
    Message {
        name: "SET",
        check: |b| portmap_args::<Mapping>(Procedure::Set, b),
    },
    Message {
        name: "UNSET",
        check: |b| portmap_args::<Mapping>(Procedure::Unset, b),
    },
    Message {
        name: "GETPORT",
        check: |b| portmap_args::<Mapping>(Procedure::GetPort, b),
    },
    Message {
        name: "DUMP",
        check: |b| portmap_args::<Void>(Procedure::Dump, b),
    },
    Message {
        name: "RPCBPROC_SET",
        check: |b| rpcbind_args::<Rpcb>(RpcbProcedure::Set, b),
    },
    Message {
        name: "RPCBPROC_UNSET",
        check: |b| rpcbind_args::<Rpcb>(RpcbProcedure::Unset, b),
    },
    Message {
        name: "RPCBPROC_GETADDR",
        check: |b| rpcbind_args::<Rpcb>(RpcbProcedure::GetAddr, b),
    },
    Message {
        name: "RPCBPROC_GETVERSADDR",
        check: |b| rpcbind_args::<Rpcb>(RpcbProcedure::GetVersAddr, b),
    },
    Message {
        name: "RPCBPROC_DUMP",
        check: |b| rpcbind_args::<Void>(RpcbProcedure::Dump, b),
    },
    Message {
        name: "RPCBPROC_GETTIME",
        check: |b| rpcbind_args::<Void>(RpcbProcedure::GetTime, b),
    },
    Message {
        name: "GETPORT result",
        check: check_result::<u32>,
    },
    Message {
        name: "SET result",
        check: check_result::<bool>,
    },
    Message {
        name: "DUMP result",
        check: check_result::<DumpResult>,
    },
    Message {
        name: "RPCBPROC_DUMP result",
        check: check_result::<RpcbDump>,
    },
];

/// Target `portmap`: `data[0]` picks the message, the rest is its encoding.
pub fn portmap(data: &[u8]) {
    select(MESSAGES, data);
}
