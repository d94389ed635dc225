//! MOUNT v3 (RFC 1813 Appendix I): the arguments the server decodes and the
//! results a client decodes.

use dionfs_proto::mount3::{DirPath, Exports, MountList, MountProc3, MountRes3};
use dionfs_proto::Void;

use crate::{check_args, check_result, select, Message};

/// Each procedure's arguments in procedure order, then the results that
/// carry more than a status.
pub(crate) const MESSAGES: &[Message] = &[
    Message {
        name: "NULL",
        check: |b| check_args::<Void>(b, MountProc3::Null.max_args_len(), MountProc3::Null),
    },
    Message {
        name: "MNT",
        check: |b| check_args::<DirPath>(b, MountProc3::Mnt.max_args_len(), MountProc3::Mnt),
    },
    Message {
        name: "DUMP",
        check: |b| check_args::<Void>(b, MountProc3::Dump.max_args_len(), MountProc3::Dump),
    },
    Message {
        name: "UMNT",
        check: |b| check_args::<DirPath>(b, MountProc3::Umnt.max_args_len(), MountProc3::Umnt),
    },
    Message {
        name: "UMNTALL",
        check: |b| check_args::<Void>(b, MountProc3::Umntall.max_args_len(), MountProc3::Umntall),
    },
    Message {
        name: "EXPORT",
        check: |b| check_args::<Void>(b, MountProc3::Export.max_args_len(), MountProc3::Export),
    },
    Message {
        name: "MNT result",
        check: check_result::<MountRes3>,
    },
    Message {
        name: "DUMP result",
        check: check_result::<MountList>,
    },
    Message {
        name: "EXPORT result",
        check: check_result::<Exports>,
    },
];

/// Target `mount3`: `data[0]` picks the message, the rest is its encoding.
pub fn mount3(data: &[u8]) {
    select(MESSAGES, data);
}
