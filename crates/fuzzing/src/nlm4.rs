//! NLM version 4: every procedure's arguments as the lock service decodes
//! them, and the results (a GRANTED callback's reply comes from a client).

use dionfs_proto::nlm4::{
    Nlm4CancArgs, Nlm4LockArgs, Nlm4Notify, Nlm4Res, Nlm4ShareArgs, Nlm4ShareRes, Nlm4TestArgs,
    Nlm4TestRes, Nlm4UnlockArgs, NlmProc4,
};
use dionfs_proto::Void;
use dionfs_xdr::{Decode, Encode};

use crate::{check_args, check_result, select, Message};

/// The arguments of `proc_`, checked against its `max_args_len`.
fn args<T>(proc_: NlmProc4, bytes: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug,
{
    check_args::<T>(bytes, proc_.max_args_len(), proc_);
}

/// Each procedure's arguments in procedure order (the server's dispatch:
/// the `_RES` procedures carry results), then SHARE's result.
pub(crate) const MESSAGES: &[Message] = &[
    Message {
        name: "NULL",
        check: |b| args::<Void>(NlmProc4::Null, b),
    },
    Message {
        name: "TEST",
        check: |b| args::<Nlm4TestArgs>(NlmProc4::Test, b),
    },
    Message {
        name: "LOCK",
        check: |b| args::<Nlm4LockArgs>(NlmProc4::Lock, b),
    },
    Message {
        name: "CANCEL",
        check: |b| args::<Nlm4CancArgs>(NlmProc4::Cancel, b),
    },
    Message {
        name: "UNLOCK",
        check: |b| args::<Nlm4UnlockArgs>(NlmProc4::Unlock, b),
    },
    Message {
        name: "GRANTED",
        check: |b| args::<Nlm4TestArgs>(NlmProc4::Granted, b),
    },
    Message {
        name: "TEST_MSG",
        check: |b| args::<Nlm4TestArgs>(NlmProc4::TestMsg, b),
    },
    Message {
        name: "LOCK_MSG",
        check: |b| args::<Nlm4LockArgs>(NlmProc4::LockMsg, b),
    },
    Message {
        name: "CANCEL_MSG",
        check: |b| args::<Nlm4CancArgs>(NlmProc4::CancelMsg, b),
    },
    Message {
        name: "UNLOCK_MSG",
        check: |b| args::<Nlm4UnlockArgs>(NlmProc4::UnlockMsg, b),
    },
    Message {
        name: "GRANTED_MSG",
        check: |b| args::<Nlm4TestArgs>(NlmProc4::GrantedMsg, b),
    },
    Message {
        name: "TEST_RES",
        check: |b| args::<Nlm4TestRes>(NlmProc4::TestRes, b),
    },
    Message {
        name: "LOCK_RES",
        check: |b| args::<Nlm4Res>(NlmProc4::LockRes, b),
    },
    Message {
        name: "CANCEL_RES",
        check: |b| args::<Nlm4Res>(NlmProc4::CancelRes, b),
    },
    Message {
        name: "UNLOCK_RES",
        check: |b| args::<Nlm4Res>(NlmProc4::UnlockRes, b),
    },
    Message {
        name: "GRANTED_RES",
        check: |b| args::<Nlm4Res>(NlmProc4::GrantedRes, b),
    },
    Message {
        name: "SHARE",
        check: |b| args::<Nlm4ShareArgs>(NlmProc4::Share, b),
    },
    Message {
        name: "UNSHARE",
        check: |b| args::<Nlm4ShareArgs>(NlmProc4::Unshare, b),
    },
    Message {
        name: "NM_LOCK",
        check: |b| args::<Nlm4LockArgs>(NlmProc4::NmLock, b),
    },
    Message {
        name: "FREE_ALL",
        check: |b| args::<Nlm4Notify>(NlmProc4::FreeAll, b),
    },
    Message {
        name: "SHARE result",
        check: check_result::<Nlm4ShareRes>,
    },
];

/// Target `nlm4`: `data[0]` picks the message, the rest is its encoding.
pub fn nlm4(data: &[u8]) {
    select(MESSAGES, data);
}
