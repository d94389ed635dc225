//! Clients and sessions (RFC 8881 sections 18.35 to 18.51): EXCHANGE_ID,
//! CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID, SEQUENCE,
//! BIND_CONN_TO_SESSION, BACKCHANNEL_CTL, RECLAIM_COMPLETE, TEST_STATEID
//! and FREE_STATEID.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{xdr_enum, xdr_struct};
use crate::nfs4::types::{
    decode_array, decode_at_most_one, encode_array, encode_at_most_one, CallbackSecParms4,
    ChannelAttrs4, ClientOwner4, NfsImplId4, Nfsstat4, Opaque4, ServerOwner4, SessionId4, StateId4,
    StateProtect4A, StateProtect4R, NFS4_MAX_ARRAY_ITEMS, NFS4_MAX_CB_SEC_PARMS,
};

/// `EXCHGID4_FLAG_*` (RFC 8881 section 18.35.3).
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
pub const EXCHGID4_FLAG_MASK_PNFS: u32 = 0x0007_0000;
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// `CREATE_SESSION4_FLAG_*` (RFC 8881 section 18.36.3).
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x0000_0001;
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x0000_0002;
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x0000_0004;

/// `SEQ4_STATUS_*` (RFC 8881 section 18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING: u32 = 0x0000_0002;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED: u32 = 0x0000_0004;
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
pub const SEQ4_STATUS_LEASE_MOVED: u32 = 0x0000_0080;
pub const SEQ4_STATUS_RESTART_RECLAIM_NEEDED: u32 = 0x0000_0100;
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x0000_0400;
pub const SEQ4_STATUS_DEVID_CHANGED: u32 = 0x0000_0800;
pub const SEQ4_STATUS_DEVID_DELETED: u32 = 0x0000_1000;

/// `EXCHANGE_ID4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdArgs4 {
    pub clientowner: ClientOwner4,
    pub flags: u32,
    pub state_protect: StateProtect4A,
    /// `eia_client_impl_id<1>`.
    pub client_impl_id: Option<NfsImplId4>,
}

impl Encode for ExchangeIdArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        self.clientowner.encode(enc);
        enc.u32(self.flags);
        self.state_protect.encode(enc);
        encode_at_most_one(enc, self.client_impl_id.as_ref());
    }
}

impl Decode<'_> for ExchangeIdArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            clientowner: Decode::decode(dec)?,
            flags: dec.u32()?,
            state_protect: Decode::decode(dec)?,
            client_impl_id: decode_at_most_one(dec)?,
        })
    }
}

/// `EXCHANGE_ID4resok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdResOk4 {
    pub clientid: u64,
    pub sequenceid: u32,
    pub flags: u32,
    pub state_protect: StateProtect4R,
    pub server_owner: ServerOwner4,
    pub server_scope: Opaque4,
    /// `eir_server_impl_id<1>`.
    pub server_impl_id: Option<NfsImplId4>,
}

impl Encode for ExchangeIdResOk4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.clientid);
        enc.u32(self.sequenceid);
        enc.u32(self.flags);
        self.state_protect.encode(enc);
        self.server_owner.encode(enc);
        self.server_scope.encode(enc);
        encode_at_most_one(enc, self.server_impl_id.as_ref());
    }
}

impl Decode<'_> for ExchangeIdResOk4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            clientid: dec.u64()?,
            sequenceid: dec.u32()?,
            flags: dec.u32()?,
            state_protect: Decode::decode(dec)?,
            server_owner: Decode::decode(dec)?,
            server_scope: Decode::decode(dec)?,
            server_impl_id: decode_at_most_one(dec)?,
        })
    }
}

/// `CREATE_SESSION4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionArgs4 {
    pub clientid: u64,
    pub sequence: u32,
    pub flags: u32,
    pub fore_chan_attrs: ChannelAttrs4,
    pub back_chan_attrs: ChannelAttrs4,
    pub cb_program: u32,
    /// `csa_sec_parms<>`: at most [`NFS4_MAX_CB_SEC_PARMS`] decoded.
    pub sec_parms: Vec<CallbackSecParms4>,
}

impl Encode for CreateSessionArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.clientid);
        enc.u32(self.sequence);
        enc.u32(self.flags);
        self.fore_chan_attrs.encode(enc);
        self.back_chan_attrs.encode(enc);
        enc.u32(self.cb_program);
        encode_array(enc, &self.sec_parms);
    }
}

impl Decode<'_> for CreateSessionArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            clientid: dec.u64()?,
            sequence: dec.u32()?,
            flags: dec.u32()?,
            fore_chan_attrs: Decode::decode(dec)?,
            back_chan_attrs: Decode::decode(dec)?,
            cb_program: dec.u32()?,
            sec_parms: decode_array(dec, NFS4_MAX_CB_SEC_PARMS, 4)?,
        })
    }
}

xdr_struct! {
    /// `CREATE_SESSION4resok`.
    pub struct CreateSessionResOk4 {
        pub sessionid: SessionId4,
        pub sequence: u32,
        pub flags: u32,
        pub fore_chan_attrs: ChannelAttrs4,
        pub back_chan_attrs: ChannelAttrs4,
    }
}

xdr_struct! {
    /// `DESTROY_SESSION4args`; the result is its status.
    pub struct DestroySessionArgs4 {
        pub sessionid: SessionId4,
    }
}

xdr_struct! {
    /// `DESTROY_CLIENTID4args`; the result is its status.
    pub struct DestroyClientidArgs4 {
        pub clientid: u64,
    }
}

xdr_struct! {
    /// `SEQUENCE4args`.
    pub struct SequenceArgs4 {
        pub sessionid: SessionId4,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub cachethis: bool,
    }
}

xdr_struct! {
    /// `SEQUENCE4resok`.
    pub struct SequenceResOk4 {
        pub sessionid: SessionId4,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub target_highest_slotid: u32,
        pub status_flags: u32,
    }
}

xdr_enum! {
    /// `channel_dir_from_client4`: the channels a client asks to bind a
    /// connection to.
    pub enum ChannelDirFromClient4 {
        Fore = 1,
        Back = 2,
        ForeOrBoth = 3,
        BackOrBoth = 7,
    }
}

xdr_enum! {
    /// `channel_dir_from_server4`: the channels the server bound.
    pub enum ChannelDirFromServer4 {
        Fore = 1,
        Back = 2,
        Both = 3,
    }
}

xdr_struct! {
    /// `BIND_CONN_TO_SESSION4args`.
    pub struct BindConnToSessionArgs4 {
        pub sessid: SessionId4,
        pub dir: ChannelDirFromClient4,
        pub use_conn_in_rdma_mode: bool,
    }
}

xdr_struct! {
    /// `BIND_CONN_TO_SESSION4resok`.
    pub struct BindConnToSessionResOk4 {
        pub sessid: SessionId4,
        pub dir: ChannelDirFromServer4,
        pub use_conn_in_rdma_mode: bool,
    }
}

/// `BACKCHANNEL_CTL4args`; the result is its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackchannelCtlArgs4 {
    pub cb_program: u32,
    /// `bca_sec_parms<>`: at most [`NFS4_MAX_CB_SEC_PARMS`] decoded.
    pub sec_parms: Vec<CallbackSecParms4>,
}

impl Encode for BackchannelCtlArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.cb_program);
        encode_array(enc, &self.sec_parms);
    }
}

impl Decode<'_> for BackchannelCtlArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            cb_program: dec.u32()?,
            sec_parms: decode_array(dec, NFS4_MAX_CB_SEC_PARMS, 4)?,
        })
    }
}

xdr_struct! {
    /// `RECLAIM_COMPLETE4args`; the result is its status.
    pub struct ReclaimCompleteArgs4 {
        pub one_fs: bool,
    }
}

/// `TEST_STATEID4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestStateidArgs4 {
    /// `ts_stateids<>`: at most [`NFS4_MAX_ARRAY_ITEMS`] decoded.
    pub stateids: Vec<StateId4>,
}

/// A `stateid4` on the wire.
const STATEID_LEN: usize = 16;

impl Encode for TestStateidArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_array(enc, &self.stateids);
    }
}

impl Decode<'_> for TestStateidArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            stateids: decode_array(dec, NFS4_MAX_ARRAY_ITEMS, STATEID_LEN)?,
        })
    }
}

/// `TEST_STATEID4resok`: one status per stateid asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestStateidResOk4 {
    pub status_codes: Vec<Nfsstat4>,
}

impl Encode for TestStateidResOk4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_array(enc, &self.status_codes);
    }
}

impl Decode<'_> for TestStateidResOk4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            status_codes: decode_array(dec, NFS4_MAX_ARRAY_ITEMS, 4)?,
        })
    }
}

xdr_struct! {
    /// `FREE_STATEID4args`; the result is its status.
    pub struct FreeStateidArgs4 {
        pub stateid: StateId4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{ArgOp, Res4};
    use crate::test_util::assert_codec;

    #[test]
    fn session_results_round_trip() {
        assert_codec(&Res4::Ok(ExchangeIdResOk4 {
            clientid: 1,
            sequenceid: 2,
            flags: EXCHGID4_FLAG_CONFIRMED_R | EXCHGID4_FLAG_USE_NON_PNFS,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Opaque4::from("host"),
            },
            server_scope: Opaque4::from("scope"),
            server_impl_id: Some(impl_id(3)),
        }));
        assert_codec(&Res4::Ok(CreateSessionResOk4 {
            sessionid: SessionId4([1; 16]),
            sequence: 1,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: channel(None),
            back_chan_attrs: channel(None),
        }));
        assert_codec(&Res4::<CreateSessionResOk4>::Fail(Nfsstat4::StaleClientid));
        assert_codec(&Res4::Ok(SequenceResOk4 {
            sessionid: SessionId4([2; 16]),
            sequenceid: 9,
            slotid: 1,
            highest_slotid: 63,
            target_highest_slotid: 63,
            status_flags: SEQ4_STATUS_CB_PATH_DOWN,
        }));
        assert_codec(&Res4::Ok(BindConnToSessionResOk4 {
            sessid: SessionId4([3; 16]),
            dir: ChannelDirFromServer4::Both,
            use_conn_in_rdma_mode: false,
        }));
        assert_codec(&Res4::Ok(TestStateidResOk4 {
            status_codes: vec![Nfsstat4::Ok, Nfsstat4::BadStateid],
        }));
        assert_codec(&Nfsstat4::Badsession);
    }

    #[test]
    fn session_args_round_trip() {
        for op in typical_ops() {
            match op {
                ArgOp::ExchangeId(a) => assert_codec(&*a),
                ArgOp::CreateSession(a) => assert_codec(&*a),
                ArgOp::DestroySession(a) => assert_codec(&a),
                ArgOp::DestroyClientid(a) => assert_codec(&a),
                ArgOp::Sequence(a) => assert_codec(&a),
                ArgOp::BindConnToSession(a) => assert_codec(&a),
                ArgOp::BackchannelCtl(a) => assert_codec(&a),
                ArgOp::ReclaimComplete(a) => assert_codec(&a),
                ArgOp::TestStateid(a) => assert_codec(&a),
                ArgOp::FreeStateid(a) => assert_codec(&a),
                _ => {}
            }
        }
    }

    #[test]
    fn session_arrays_are_bounded_before_allocating() {
        let mut bytes = vec![0, 0, 0, 9];
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(BackchannelCtlArgs4::from_xdr(&bytes).is_err());
        assert!(TestStateidArgs4::from_xdr(&u32::MAX.to_be_bytes()).is_err());
        // 1024 stateids claimed, one sent: truncated, not allocated.
        let mut one = vec![0, 0, 4, 0];
        one.extend_from_slice(&[0; 16]);
        assert!(matches!(
            TestStateidArgs4::from_xdr(&one),
            Err(dionfs_xdr::XdrError::Truncated { .. })
        ));
    }
}
