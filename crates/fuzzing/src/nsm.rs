//! NSM version 1: the arguments the lock service's status monitor decodes,
//! and its results.

use dionfs_proto::nsm::{Mon, MonId, MyId, NsmProc, SmName, SmStatRes, StatChge};
use dionfs_proto::Void;

use crate::{check_args, check_result, select, Message};

/// Each procedure's arguments in procedure order, then the results.
pub(crate) const MESSAGES: &[Message] = &[
    Message {
        name: "NULL",
        check: |b| check_args::<Void>(b, NsmProc::Null.max_args_len(), NsmProc::Null),
    },
    Message {
        name: "STAT",
        check: |b| check_args::<SmName>(b, NsmProc::Stat.max_args_len(), NsmProc::Stat),
    },
    Message {
        name: "MON",
        check: |b| check_args::<Mon>(b, NsmProc::Mon.max_args_len(), NsmProc::Mon),
    },
    Message {
        name: "UNMON",
        check: |b| check_args::<MonId>(b, NsmProc::Unmon.max_args_len(), NsmProc::Unmon),
    },
    Message {
        name: "UNMON_ALL",
        check: |b| check_args::<MyId>(b, NsmProc::UnmonAll.max_args_len(), NsmProc::UnmonAll),
    },
    Message {
        name: "SIMU_CRASH",
        check: |b| check_args::<Void>(b, NsmProc::SimuCrash.max_args_len(), NsmProc::SimuCrash),
    },
    Message {
        name: "NOTIFY",
        check: |b| check_args::<StatChge>(b, NsmProc::Notify.max_args_len(), NsmProc::Notify),
    },
    Message {
        name: "STAT result",
        check: check_result::<SmStatRes>,
    },
    Message {
        name: "UNMON result",
        check: check_result::<i32>,
    },
];

/// Target `nsm`: `data[0]` picks the message, the rest is its encoding.
pub fn nsm(data: &[u8]) {
    select(MESSAGES, data);
}
