//! The operations only minor version 0 has (RFC 7530 sections 16.20,
//! 16.24, 16.33, 16.34 and 16.37): OPEN_CONFIRM, RENEW, SETCLIENTID,
//! SETCLIENTID_CONFIRM and RELEASE_LOCKOWNER. Minor versions 1 and 2 do
//! not decode them: they answer `NFS4ERR_NOTSUPP` (RFC 8881 section 18,
//! "MUST NOT implement"), consuming only the opnum.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use super::data::Netaddr4;
use super::state::LockOwner4;
use crate::codec::xdr_struct;
use crate::nfs4::types::{Nfsstat4, Opaque4, StateId4, Verifier4};

xdr_struct! {
    /// `nfs_client_id4`: the client's verifier (a new one after each of
    /// its reboots) and its id, the same across them.
    pub struct NfsClientId4 {
        pub verifier: Verifier4,
        pub id: Opaque4,
    }
}

xdr_struct! {
    /// `cb_client4`: where the server calls the client back (a TCP
    /// connection the server opens).
    pub struct CbClient4 {
        pub cb_program: u32,
        pub cb_location: Netaddr4,
    }
}

xdr_struct! {
    /// SETCLIENTID's arguments.
    pub struct SetclientidArgs4 {
        pub client: NfsClientId4,
        pub callback: CbClient4,
        pub callback_ident: u32,
    }
}

xdr_struct! {
    /// SETCLIENTID's result when it succeeds: the clientid and the
    /// verifier SETCLIENTID_CONFIRM must repeat.
    pub struct SetclientidResOk4 {
        pub clientid: u64,
        pub setclientid_confirm: Verifier4,
    }
}

/// `SETCLIENTID4res`: besides success, `NFS4ERR_CLID_INUSE` carries the
/// callback address of the client that holds the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetclientidRes4 {
    Ok(SetclientidResOk4),
    ClidInuse(Netaddr4),
    /// Any other status; never `NFS4_OK` or `NFS4ERR_CLID_INUSE`.
    Fail(Nfsstat4),
}

impl Encode for SetclientidRes4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetclientidRes4::Ok(ok) => {
                Nfsstat4::Ok.encode(enc);
                ok.encode(enc);
            }
            SetclientidRes4::ClidInuse(addr) => {
                Nfsstat4::ClidInuse.encode(enc);
                addr.encode(enc);
            }
            SetclientidRes4::Fail(status) => status.encode(enc),
        }
    }
}

impl Decode<'_> for SetclientidRes4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match Nfsstat4::decode(dec)? {
            Nfsstat4::Ok => SetclientidRes4::Ok(Decode::decode(dec)?),
            Nfsstat4::ClidInuse => SetclientidRes4::ClidInuse(Decode::decode(dec)?),
            status => SetclientidRes4::Fail(status),
        })
    }
}

xdr_struct! {
    /// SETCLIENTID_CONFIRM's arguments.
    pub struct SetclientidConfirmArgs4 {
        pub clientid: u64,
        pub setclientid_confirm: Verifier4,
    }
}

xdr_struct! {
    /// RENEW's arguments.
    pub struct RenewArgs4 {
        pub clientid: u64,
    }
}

xdr_struct! {
    /// OPEN_CONFIRM's arguments: the stateid of the open-owner's first
    /// OPEN and the owner's next seqid. Its result is the confirmed
    /// stateid.
    pub struct OpenConfirmArgs4 {
        pub open_stateid: StateId4,
        pub seqid: u32,
    }
}

xdr_struct! {
    /// RELEASE_LOCKOWNER's arguments.
    pub struct ReleaseLockownerArgs4 {
        pub lock_owner: LockOwner4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::types::Utf8Str;
    use crate::test_util::assert_codec;

    #[test]
    fn setclientid_results_round_trip_with_their_bodies() {
        let addr = Netaddr4 {
            netid: Utf8Str::from("tcp"),
            addr: Utf8Str::from("192.168.77.2.3.232"),
        };
        assert_codec(&SetclientidRes4::Ok(SetclientidResOk4 {
            clientid: 0x1234_5678_9abc_def0,
            setclientid_confirm: Verifier4([7; 8]),
        }));
        assert_codec(&SetclientidRes4::ClidInuse(addr));
        assert_codec(&SetclientidRes4::Fail(Nfsstat4::Resource));
        // CLID_INUSE without its address is short.
        assert!(SetclientidRes4::from_xdr(&Nfsstat4::ClidInuse.to_xdr()).is_err());
    }
}
