//! Authentication fields of RPC messages (RFC 5531 section 8 and appendix
//! A): the opaque form every call and reply carries, and the credentials a
//! call header holds (AUTH_NONE, AUTH_SYS), with their limits.

use dionfs_xdr::{Decoder, Encode, Encoder, XdrError};

/// Largest credential or verifier body (RFC 5531 section 8.2, MAX_AUTH_BYTES).
pub const MAX_AUTH_BYTES: u32 = 400;
/// Authentication flavor numbers (RFC 5531 section 8.1 and appendix A).
pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
/// The RPC-with-TLS probe's flavor (RFC 9289 section 4.1): a NULL call
/// with it asks the server to start TLS; its credential body is empty.
pub const AUTH_TLS: u32 = 7;
/// Longest AUTH_SYS machine name (RFC 5531 appendix A).
pub const MAX_MACHINE_NAME: u32 = 255;
/// Most supplementary groups in an AUTH_SYS credential (RFC 5531 appendix A).
pub const MAX_AUTH_SYS_GIDS: u32 = 16;

/// An authentication field as sent: flavor and opaque body (used for
/// verifiers, which we never interpret).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpaqueAuth {
    pub flavor: u32,
    pub body: Vec<u8>,
}

impl OpaqueAuth {
    /// The empty AUTH_NONE verifier.
    pub fn none() -> Self {
        Self::default()
    }
}

impl Encode for OpaqueAuth {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.flavor);
        enc.opaque_var(&self.body);
    }
}

/// The AUTH_SYS credential (RFC 5531 appendix A): who the client says the
/// caller is. Not authenticated; the server squashes it per export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    /// At most 255 bytes.
    pub machine_name: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    /// At most 16 supplementary groups.
    pub gids: Vec<u32>,
}

impl AuthSys {
    /// Decodes the body of an AUTH_SYS credential; it must be used up exactly.
    pub fn decode_body(body: &[u8]) -> Result<Self, XdrError> {
        let mut d = Decoder::new(body);
        let stamp = d.u32()?;
        let machine_name = d.string(MAX_MACHINE_NAME)?.to_vec();
        let uid = d.u32()?;
        let gid = d.u32()?;
        let count = d.opaque_len(MAX_AUTH_SYS_GIDS)?;
        let gids = (0..count).map(|_| d.u32()).collect::<Result<Vec<_>, _>>()?;
        d.finish()?;
        Ok(Self {
            stamp,
            machine_name,
            uid,
            gid,
            gids,
        })
    }
}

impl Encode for AuthSys {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.stamp);
        enc.string(&self.machine_name);
        enc.u32(self.uid);
        enc.u32(self.gid);
        // Bounded by MAX_AUTH_SYS_GIDS for anything we decoded.
        enc.u32(self.gids.len() as u32);
        for g in &self.gids {
            enc.u32(*g);
        }
    }
}

/// The caller's credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// AUTH_NONE: anonymous.
    None,
    /// AUTH_SYS: uid, gid and groups as claimed by the client.
    Sys(AuthSys),
    /// Any other flavor (RPCSEC_GSS, AUTH_DH, ...), body discarded. What to
    /// answer (usually AUTH_ERROR) is the program's decision.
    Unsupported(u32),
}

impl Credential {
    /// The flavor number on the wire.
    pub fn flavor(&self) -> u32 {
        match self {
            Credential::None => AUTH_NONE,
            Credential::Sys(_) => AUTH_SYS,
            Credential::Unsupported(f) => *f,
        }
    }
}

impl Encode for Credential {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.flavor());
        match self {
            Credential::Sys(sys) => {
                let body = sys.to_xdr();
                enc.opaque_var(&body);
            }
            Credential::None | Credential::Unsupported(_) => enc.u32(0),
        }
    }
}
