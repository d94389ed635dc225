//! The ids the server hands out (RFC 8881 sections 2.4, 2.10.3, 8.2) and
//! the server's own identity (section 2.5): how each is made and how one
//! of another boot is told apart.
//!
//! - The boot verifier is a random `u32` per start.
//! - A client id is `boot << 32 | counter`: one whose high half is not
//!   this boot's is `NFS4ERR_STALE_CLIENTID`.
//! - A session id is the client id, a counter and a random `u32`: a
//!   previous boot's, or a guessed one, is unknown (`NFS4ERR_BADSESSION`).
//! - A stateid's `other` is `boot ‖ client counter ‖ state counter`
//!   ([`StateOther`]): another boot's is `NFS4ERR_STALE_STATEID` (W7).
//! - `eir_server_owner` and `eir_server_scope` are 16 random bytes kept in
//!   `STATE_DIR/nfs4/server-id`, the same across restarts and addresses,
//!   so that a client sees every address of this server as one server
//!   (trunking, section 2.10.5).

use std::io;
use std::path::Path;

use dionfs_proto::nfs4::{SessionId4, NFS4_OTHER_SIZE, NFS4_SESSIONID_SIZE};
use dionfs_sys::private::Durability;
use tracing::warn;

/// A map keyed by ids the server makes (client and session ids,
/// stateids' `other`), hashed with foldhash instead of SipHash: no client
/// chooses keys that collide, since the server made every key in it
/// (a client's bytes only look one up), and SipHash was about 560
/// instructions of a v4.1 WRITE (callgrind, a session and a stateid
/// looked up per COMPOUND).
pub type IdMap<K, V> = foldhash::HashMap<K, V>;

/// Bytes of the server's identity.
pub const SERVER_ID_LEN: usize = 16;

/// The file under the state directory that holds the server's identity.
pub const SERVER_ID_FILE: &str = "nfs4/server-id";

/// A client id as the server made it: this boot's verifier in the high
/// half, a counter in the low half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId(pub u64);

impl ClientId {
    /// The `counter`th client id of boot `boot`.
    pub fn new(boot: u32, counter: u32) -> ClientId {
        ClientId((u64::from(boot) << 32) | u64::from(counter))
    }

    /// The boot verifier it was made under.
    pub fn boot(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Its counter within that boot.
    pub fn counter(self) -> u32 {
        self.0 as u32
    }
}

/// A session id: the client id, then a counter, then a value no client
/// can guess from the others.
pub fn session_id(client: ClientId, counter: u32, key: u64) -> SessionId4 {
    let mut id = [0u8; NFS4_SESSIONID_SIZE];
    id[..8].copy_from_slice(&client.0.to_be_bytes());
    id[8..12].copy_from_slice(&counter.to_be_bytes());
    let noise = mix(key ^ client.0.rotate_left(17) ^ u64::from(counter)) as u32;
    id[12..].copy_from_slice(&noise.to_be_bytes());
    SessionId4(id)
}

/// The client id a session id starts with.
pub fn session_client(id: &SessionId4) -> ClientId {
    let mut high = [0u8; 8];
    high.copy_from_slice(&id.0[..8]);
    ClientId(u64::from_be_bytes(high))
}

/// The `other` field of a stateid (RFC 8881 section 8.2.2): which boot
/// made it, for which client, and which of that client's states it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateOther {
    pub boot: u32,
    pub client: u32,
    pub state: u32,
}

impl StateOther {
    /// The twelve bytes on the wire.
    pub fn to_bytes(self) -> [u8; NFS4_OTHER_SIZE] {
        let mut other = [0u8; NFS4_OTHER_SIZE];
        other[..4].copy_from_slice(&self.boot.to_be_bytes());
        other[4..8].copy_from_slice(&self.client.to_be_bytes());
        other[8..].copy_from_slice(&self.state.to_be_bytes());
        other
    }

    /// The fields of twelve bytes a client sent.
    pub fn from_bytes(other: &[u8; NFS4_OTHER_SIZE]) -> StateOther {
        let word = |at: usize| {
            u32::from_be_bytes([other[at], other[at + 1], other[at + 2], other[at + 3]])
        };
        StateOther {
            boot: word(0),
            client: word(4),
            state: word(8),
        }
    }
}

/// SplitMix64's finaliser: spreads every bit of `x` over the result.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `N` bytes from the system's random source.
pub fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(format!("no randomness: {e}")))?;
    Ok(bytes)
}

/// The server's identity: read from `STATE_DIR/nfs4/server-id`, or made
/// (16 random bytes, written atomically and synced) when it is not there
/// yet. Without a state directory it is new each start, so clients see a
/// restarted server as another one. A file of another length (damaged) is
/// replaced: a new identity only costs clients their trunking guess.
pub fn server_identity(state_dir: Option<&Path>) -> io::Result<[u8; SERVER_ID_LEN]> {
    let Some(dir) = state_dir else {
        return random_bytes();
    };
    let path = dir.join(SERVER_ID_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            if let Ok(id) = <[u8; SERVER_ID_LEN]>::try_from(bytes.as_slice()) {
                return Ok(id);
            }
            warn!(
                path = %path.display(),
                len = bytes.len(),
                "the NFSv4 server identity is not {SERVER_ID_LEN} bytes: making a new one"
            );
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = random_bytes()?;
    if let Some(parent) = path.parent() {
        dionfs_sys::private::create_dir_all(parent)?;
    }
    dionfs_sys::private::replace(&path, &id, Durability::Synced)?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_carry_their_boot() {
        let id = ClientId::new(0xdead_beef, 7);
        assert_eq!(id.boot(), 0xdead_beef);
        assert_eq!(id.counter(), 7);
        assert_ne!(ClientId::new(1, 7), ClientId::new(2, 7));
    }

    #[test]
    fn session_ids_start_with_their_client_and_differ() {
        let client = ClientId::new(3, 9);
        let a = session_id(client, 1, 42);
        let b = session_id(client, 2, 42);
        assert_ne!(a, b);
        assert_eq!(session_client(&a), client);
        assert_eq!(session_client(&b), client);
        // Another key (another boot's) gives another id for the same
        // counters.
        assert_ne!(session_id(client, 1, 43), a);
    }

    #[test]
    fn state_other_round_trips() {
        let other = StateOther {
            boot: 0x0102_0304,
            client: 5,
            state: u32::MAX,
        };
        let bytes = other.to_bytes();
        assert_eq!(&bytes[..4], &[1, 2, 3, 4]);
        assert_eq!(StateOther::from_bytes(&bytes), other);
    }

    #[test]
    fn server_identity_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = server_identity(Some(dir.path())).unwrap();
        let again = server_identity(Some(dir.path())).unwrap();
        assert_eq!(first, again);
        assert_eq!(
            std::fs::read(dir.path().join(SERVER_ID_FILE)).unwrap(),
            first
        );
        // A damaged file is replaced by a new identity.
        std::fs::write(dir.path().join(SERVER_ID_FILE), b"short").unwrap();
        let replaced = server_identity(Some(dir.path())).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(SERVER_ID_FILE)).unwrap(),
            replaced
        );
    }

    #[test]
    fn without_a_state_dir_each_start_is_another_server() {
        assert_ne!(
            server_identity(None).unwrap(),
            server_identity(None).unwrap()
        );
    }
}
