//! The Network Status Monitor (`rpc.statd`'s protocol, the X/Open XNFS
//! specification): program 100024, version 1. NLM rides on it: a client
//! that reboots sends SM_NOTIFY to every server it held locks on, so they
//! drop its locks; a server that restarts sends SM_NOTIFY to its clients, so
//! they reclaim theirs.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{opaque_var_len, xdr_bytes, xdr_enum, xdr_struct};

/// RPC program number of NSM.
pub const NSM_PROGRAM: u32 = 100_024;
/// The NSM version.
pub const NSM_V1: u32 = 1;
/// Longest host name (`SM_MAXSTRLEN`).
pub const SM_MAXSTRLEN: u32 = 1024;

xdr_enum! {
    /// NSM version 1 procedure numbers.
    pub enum NsmProc {
        Null = 0,
        Stat = 1,
        Mon = 2,
        Unmon = 3,
        UnmonAll = 4,
        SimuCrash = 5,
        Notify = 6,
    }
}

impl NsmProc {
    /// The longest XDR encoding of this procedure's arguments, in bytes.
    pub const fn max_args_len(self) -> usize {
        let name = opaque_var_len(SM_MAXSTRLEN as usize);
        let my_id = name + 12;
        match self {
            NsmProc::Null | NsmProc::SimuCrash => 0,
            NsmProc::Stat => name,
            NsmProc::Mon => name + my_id + 16,
            NsmProc::Unmon => name + my_id,
            NsmProc::UnmonAll => my_id,
            NsmProc::Notify => name + 4,
        }
    }
}

xdr_enum! {
    /// `res`: whether the monitor could do what was asked.
    pub enum SmRes {
        Succ = 0,
        Fail = 1,
    }
}

xdr_bytes! {
    /// A host name as NSM carries it (`string<SM_MAXSTRLEN>`).
    pub struct SmName(max = SM_MAXSTRLEN);
}

xdr_struct! {
    /// `my_id`: whom the monitor calls back when a monitored host changes.
    pub struct MyId {
        pub my_name: SmName,
        pub my_prog: u32,
        pub my_vers: u32,
        pub my_proc: u32,
    }
}

xdr_struct! {
    /// `mon_id`: a monitored host and whom to tell.
    pub struct MonId {
        pub mon_name: SmName,
        pub my_id: MyId,
    }
}

xdr_struct! {
    /// `mon`: SM_MON's argument.
    pub struct Mon {
        pub mon_id: MonId,
        pub priv_: Priv,
    }
}

/// `priv`: 16 bytes the monitor hands back unread in its callback.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Priv(pub [u8; 16]);

impl Encode for Priv {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque_fixed(&self.0);
    }
}

impl Decode<'_> for Priv {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        let mut out = [0; 16];
        out.copy_from_slice(dec.opaque_fixed(16)?);
        Ok(Priv(out))
    }
}

xdr_struct! {
    /// `sm_stat_res`: SM_STAT's and SM_MON's result.
    pub struct SmStatRes {
        pub res_stat: SmRes,
        pub state: i32,
    }
}

xdr_struct! {
    /// `stat_chge`: SM_NOTIFY's argument, a host's new state.
    pub struct StatChge {
        pub mon_name: SmName,
        pub state: i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_round_trips_and_fits_its_bound() {
        let v = StatChge {
            mon_name: SmName(vec![b'h'; SM_MAXSTRLEN as usize]),
            state: 7,
        };
        let bytes = v.to_xdr();
        assert_eq!(bytes.len(), NsmProc::Notify.max_args_len());
        assert_eq!(StatChge::from_xdr(&bytes).unwrap(), v);
        for n in 0..bytes.len() {
            assert!(StatChge::from_xdr(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn mon_round_trips() {
        let v = Mon {
            mon_id: MonId {
                mon_name: "server".into(),
                my_id: MyId {
                    my_name: "localhost".into(),
                    my_prog: 100_021,
                    my_vers: 4,
                    my_proc: 16,
                },
            },
            priv_: Priv([9; 16]),
        };
        let bytes = v.to_xdr();
        assert_eq!(bytes.len(), 4 + 6 + 2 + 4 + 9 + 3 + 12 + 16);
        assert_eq!(Mon::from_xdr(&bytes).unwrap(), v);
    }
}
