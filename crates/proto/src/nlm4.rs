//! The Network Lock Manager, version 4 (the X/Open XNFS specification, as
//! NFSv3's companion; the kernel's `fs/lockd/xdr4.c`): program 100021,
//! version 4. A client's kernel lockd sends `fcntl` byte-range locks of an
//! NFSv3 mount to the server through it; the server calls back GRANTED
//! when a blocked lock can be had.
//!
//! Offsets and lengths are 64-bit; a length of 0 means "to the end of the
//! file and beyond". File handles are NFSv3 handles carried as `netobj`.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{opaque_var_len, xdr_bytes, xdr_enum, xdr_struct};

/// RPC program number of NLM.
pub const NLM_PROGRAM: u32 = 100_021;
/// The NLM version that goes with NFSv3 (64-bit offsets).
pub const NLM_V4: u32 = 4;
/// Longest `caller_name` (`LM_MAXSTRLEN`).
pub const LM_MAXSTRLEN: u32 = 1024;
/// Longest name in FREE_ALL's `nlm4_notify` (`LM_MAXNAMELEN`).
pub const LM_MAXNAMELEN: u32 = 1025;
/// Longest `netobj` (cookie, owner handle, file handle): `MAXNETOBJ_SZ`.
pub const MAXNETOBJ_SZ: u32 = 1024;

xdr_enum! {
    /// NLM version 4 procedure numbers.
    pub enum NlmProc4 {
        Null = 0,
        Test = 1,
        Lock = 2,
        Cancel = 3,
        Unlock = 4,
        Granted = 5,
        TestMsg = 6,
        LockMsg = 7,
        CancelMsg = 8,
        UnlockMsg = 9,
        GrantedMsg = 10,
        TestRes = 11,
        LockRes = 12,
        CancelRes = 13,
        UnlockRes = 14,
        GrantedRes = 15,
        Share = 20,
        Unshare = 21,
        NmLock = 22,
        FreeAll = 23,
    }
}

/// The encoded length of an `nlm4_lock` at its longest.
const LOCK_MAX: usize =
    opaque_var_len(LM_MAXSTRLEN as usize) + 2 * opaque_var_len(MAXNETOBJ_SZ as usize) + 4 + 16;
const COOKIE_MAX: usize = opaque_var_len(MAXNETOBJ_SZ as usize);

impl NlmProc4 {
    /// The longest XDR encoding of this procedure's arguments, in bytes.
    pub const fn max_args_len(self) -> usize {
        use NlmProc4::*;
        match self {
            Null => 0,
            Test | TestMsg | Granted | GrantedMsg => COOKIE_MAX + 4 + LOCK_MAX,
            Lock | LockMsg | NmLock => COOKIE_MAX + 8 + LOCK_MAX + 8,
            Cancel | CancelMsg => COOKIE_MAX + 8 + LOCK_MAX,
            Unlock | UnlockMsg => COOKIE_MAX + LOCK_MAX,
            // nlm4_testres with a holder, the largest result.
            TestRes | LockRes | CancelRes | UnlockRes | GrantedRes => {
                COOKIE_MAX + 4 + 4 + 4 + opaque_var_len(MAXNETOBJ_SZ as usize) + 16
            }
            Share | Unshare => {
                COOKIE_MAX
                    + opaque_var_len(LM_MAXSTRLEN as usize)
                    + 2 * opaque_var_len(MAXNETOBJ_SZ as usize)
                    + 8
                    + 4
            }
            FreeAll => opaque_var_len(LM_MAXNAMELEN as usize) + 4,
        }
    }
}

xdr_enum! {
    /// `nlm4_stats`: the outcome of an NLM call.
    pub enum Nlm4Stat {
        Granted = 0,
        Denied = 1,
        DeniedNolocks = 2,
        Blocked = 3,
        DeniedGracePeriod = 4,
        Deadlck = 5,
        Rofs = 6,
        StaleFh = 7,
        Fbig = 8,
        Failed = 9,
    }
}

xdr_bytes! {
    /// `netobj`: opaque bytes (a cookie, a lock owner, a file handle).
    pub struct NetObj(max = MAXNETOBJ_SZ);
}

xdr_bytes! {
    /// The client host's name (`caller_name`, `mon_name`).
    pub struct CallerName(max = LM_MAXSTRLEN);
}

xdr_bytes! {
    /// FREE_ALL's host name.
    pub struct NotifyName(max = LM_MAXNAMELEN);
}

xdr_struct! {
    /// `nlm4_lock`: who locks which range of which file.
    pub struct Nlm4Lock {
        pub caller_name: CallerName,
        pub fh: NetObj,
        /// The owner handle (opaque to the server).
        pub oh: NetObj,
        /// The owning process on the client ("system-wide id").
        pub svid: i32,
        pub l_offset: u64,
        /// 0: to the end of the file and beyond.
        pub l_len: u64,
    }
}

xdr_struct! {
    /// `nlm4_lockargs`: LOCK, LOCK_MSG, NM_LOCK.
    pub struct Nlm4LockArgs {
        pub cookie: NetObj,
        /// Wait (with a GRANTED callback) rather than fail on a conflict.
        pub block: bool,
        pub exclusive: bool,
        pub alock: Nlm4Lock,
        /// Re-establishing a lock held before the server restarted.
        pub reclaim: bool,
        /// The client's NSM state.
        pub state: i32,
    }
}

xdr_struct! {
    /// `nlm4_cancargs`: CANCEL, CANCEL_MSG.
    pub struct Nlm4CancArgs {
        pub cookie: NetObj,
        pub block: bool,
        pub exclusive: bool,
        pub alock: Nlm4Lock,
    }
}

xdr_struct! {
    /// `nlm4_testargs`: TEST, TEST_MSG, and GRANTED (server to client).
    pub struct Nlm4TestArgs {
        pub cookie: NetObj,
        pub exclusive: bool,
        pub alock: Nlm4Lock,
    }
}

xdr_struct! {
    /// `nlm4_unlockargs`: UNLOCK, UNLOCK_MSG.
    pub struct Nlm4UnlockArgs {
        pub cookie: NetObj,
        pub alock: Nlm4Lock,
    }
}

xdr_struct! {
    /// `nlm4_holder`: the lock a TEST found in the way.
    pub struct Nlm4Holder {
        pub exclusive: bool,
        pub svid: i32,
        pub oh: NetObj,
        pub l_offset: u64,
        pub l_len: u64,
    }
}

xdr_struct! {
    /// `nlm4_res`: the result of LOCK, CANCEL, UNLOCK, GRANTED (and the
    /// argument of their `_RES` callbacks).
    pub struct Nlm4Res {
        pub cookie: NetObj,
        pub stat: Nlm4Stat,
    }
}

/// `nlm4_testres`: TEST's result; the holder comes with `Denied` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4TestRes {
    pub cookie: NetObj,
    pub stat: Nlm4Stat,
    pub holder: Option<Nlm4Holder>,
}

impl Encode for Nlm4TestRes {
    fn encode(&self, enc: &mut Encoder) {
        self.cookie.encode(enc);
        match (&self.holder, self.stat) {
            (Some(h), Nlm4Stat::Denied) => {
                Nlm4Stat::Denied.encode(enc);
                h.encode(enc);
            }
            // A denial must name its holder: an unknown one is svid 0.
            (None, Nlm4Stat::Denied) => {
                Nlm4Stat::Denied.encode(enc);
                Nlm4Holder {
                    exclusive: true,
                    svid: 0,
                    oh: NetObj::default(),
                    l_offset: 0,
                    l_len: 0,
                }
                .encode(enc);
            }
            (_, stat) => stat.encode(enc),
        }
    }
}

impl<'a> Decode<'a> for Nlm4TestRes {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self> {
        let cookie = NetObj::decode(dec)?;
        let stat = Nlm4Stat::decode(dec)?;
        let holder = match stat {
            Nlm4Stat::Denied => Some(Nlm4Holder::decode(dec)?),
            _ => None,
        };
        Ok(Self {
            cookie,
            stat,
            holder,
        })
    }
}

xdr_enum! {
    /// `fsh4_mode`: what a SHARE denies others.
    pub enum Fsh4Mode {
        DenyNone = 0,
        DenyRead = 1,
        DenyWrite = 2,
        DenyReadWrite = 3,
    }
}

xdr_enum! {
    /// `fsh4_access`: what a SHARE wants to do.
    pub enum Fsh4Access {
        None = 0,
        Read = 1,
        Write = 2,
        ReadWrite = 3,
    }
}

xdr_struct! {
    /// `nlm4_share`: a DOS-style share reservation.
    pub struct Nlm4Share {
        pub caller_name: CallerName,
        pub fh: NetObj,
        pub oh: NetObj,
        pub mode: Fsh4Mode,
        pub access: Fsh4Access,
    }
}

xdr_struct! {
    /// `nlm4_shareargs`: SHARE, UNSHARE.
    pub struct Nlm4ShareArgs {
        pub cookie: NetObj,
        pub share: Nlm4Share,
        pub reclaim: bool,
    }
}

xdr_struct! {
    /// `nlm4_shareres`.
    pub struct Nlm4ShareRes {
        pub cookie: NetObj,
        pub stat: Nlm4Stat,
        pub sequence: i32,
    }
}

xdr_struct! {
    /// `nlm4_notify`: FREE_ALL's argument (a host that rebooted).
    pub struct Nlm4Notify {
        pub name: NotifyName,
        pub state: i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Nlm4Lock {
        Nlm4Lock {
            caller_name: "client".into(),
            fh: NetObj(vec![7; 40]),
            oh: NetObj(b"1234@client".to_vec()),
            svid: -3,
            l_offset: 1 << 40,
            l_len: 0,
        }
    }

    fn round_trip<T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug>(v: &T) {
        let mut enc = Encoder::new();
        v.encode(&mut enc);
        let bytes = enc.into_vec();
        assert_eq!(&T::from_xdr(&bytes).unwrap(), v);
        // Every proper prefix is an error, never a panic.
        for n in 0..bytes.len() {
            assert!(T::from_xdr(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn arguments_round_trip() {
        round_trip(&Nlm4LockArgs {
            cookie: NetObj(vec![1, 2, 3]),
            block: true,
            exclusive: true,
            alock: lock(),
            reclaim: false,
            state: 5,
        });
        round_trip(&Nlm4CancArgs {
            cookie: NetObj(vec![9]),
            block: true,
            exclusive: false,
            alock: lock(),
        });
        round_trip(&Nlm4TestArgs {
            cookie: NetObj::default(),
            exclusive: false,
            alock: lock(),
        });
        round_trip(&Nlm4UnlockArgs {
            cookie: NetObj(vec![0; 8]),
            alock: lock(),
        });
        round_trip(&Nlm4ShareArgs {
            cookie: NetObj(vec![1]),
            share: Nlm4Share {
                caller_name: "c".into(),
                fh: NetObj(vec![1; 12]),
                oh: NetObj(vec![2]),
                mode: Fsh4Mode::DenyWrite,
                access: Fsh4Access::Read,
            },
            reclaim: true,
        });
        round_trip(&Nlm4Notify {
            name: "client".into(),
            state: 3,
        });
    }

    #[test]
    fn results_round_trip() {
        round_trip(&Nlm4Res {
            cookie: NetObj(vec![4]),
            stat: Nlm4Stat::Blocked,
        });
        round_trip(&Nlm4TestRes {
            cookie: NetObj(vec![4]),
            stat: Nlm4Stat::Denied,
            holder: Some(Nlm4Holder {
                exclusive: true,
                svid: 42,
                oh: NetObj(b"x".to_vec()),
                l_offset: 10,
                l_len: 20,
            }),
        });
        round_trip(&Nlm4TestRes {
            cookie: NetObj(vec![]),
            stat: Nlm4Stat::Granted,
            holder: None,
        });
        round_trip(&Nlm4ShareRes {
            cookie: NetObj(vec![]),
            stat: Nlm4Stat::Granted,
            sequence: 0,
        });
    }

    #[test]
    fn longest_arguments_fit_their_bound() {
        let long = Nlm4Lock {
            caller_name: CallerName(vec![b'a'; LM_MAXSTRLEN as usize]),
            fh: NetObj(vec![1; MAXNETOBJ_SZ as usize]),
            oh: NetObj(vec![2; MAXNETOBJ_SZ as usize]),
            svid: 1,
            l_offset: u64::MAX,
            l_len: u64::MAX,
        };
        let mut enc = Encoder::new();
        Nlm4LockArgs {
            cookie: NetObj(vec![3; MAXNETOBJ_SZ as usize]),
            block: true,
            exclusive: true,
            alock: long,
            reclaim: true,
            state: 1,
        }
        .encode(&mut enc);
        assert_eq!(enc.len(), NlmProc4::Lock.max_args_len());
    }

    #[test]
    fn oversized_and_bad_values_are_errors() {
        let mut enc = Encoder::new();
        enc.u32(MAXNETOBJ_SZ + 1);
        assert!(NetObj::from_xdr(enc.as_slice()).is_err());
        let mut enc = Encoder::new();
        NetObj(vec![]).encode(&mut enc);
        enc.u32(99);
        assert!(Nlm4Res::from_xdr(enc.as_slice()).is_err());
    }
}
