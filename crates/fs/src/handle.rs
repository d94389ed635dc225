//! Authenticated file handles: those of export files (NFSv3's, which
//! NFSv4 uses too) and those of NFSv4's pseudo-filesystem directories.
//!
//! An export file's handle (at most 64 bytes, RFC 1813 §2.5
//! `NFS3_FHSIZE`):
//!
//! ```text
//! offset  size  field
//! 0       1     version (FH_VERSION)
//! 1       2     export id, big-endian
//! 3       4     kernel handle type (FILEID_*), big-endian i32
//! 7       1     kernel handle length n (at most 40)
//! 8       n     kernel handle bytes (name_to_handle_at)
//! 8+n     16    MAC: blake3 keyed hash of bytes [0, 8+n), truncated
//! ```
//!
//! A pseudo-filesystem directory's handle (NFSv4's pseudo-root and the
//! directories on the way to the exports, 25 bytes):
//!
//! ```text
//! offset  size  field
//! 0       1     version (FH_VERSION_PSEUDO)
//! 1       8     path id: blake3 hash of the directory's path, truncated
//! 9       16    MAC: blake3 keyed hash of bytes [0, 9), truncated
//! ```
//!
//! The MAC key belongs to the server (32 random bytes in its state
//! directory), so a client cannot forge a handle that names a file outside
//! its export, and handles stay valid across server restarts. A pseudo
//! handle names a path, not a tree: it stays valid across reloads that
//! keep the path (the server looks the id up in its current tree; a path
//! gone from it is stale).

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use dionfs_sys::handle::KernelHandle;

use crate::FsError;

/// Current handle layout version of export files.
pub const FH_VERSION: u8 = 1;
/// Handle layout version of pseudo-filesystem directories.
pub const FH_VERSION_PSEUDO: u8 = 2;
/// NFSv3's maximum file handle size.
pub const NFS3_FHSIZE: usize = 64;
/// Bytes before the kernel handle.
const HEADER_LEN: usize = 8;
/// Bytes of the truncated MAC.
const MAC_LEN: usize = 16;
/// Largest kernel handle that fits beside our header and MAC.
pub const MAX_KERNEL_HANDLE: usize = NFS3_FHSIZE - HEADER_LEN - MAC_LEN;
/// Bytes of a pseudo directory's path id.
const PATH_ID_LEN: usize = 8;
/// Length of a pseudo directory's handle: version, path id, MAC.
pub const PSEUDO_FH_LEN: usize = 1 + PATH_ID_LEN + MAC_LEN;
/// File name of the key inside the state directory.
const KEY_FILE: &str = "fh.key";

/// The server's secret for authenticating file handles.
#[derive(Clone)]
pub struct MacKey([u8; 32]);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

impl MacKey {
    /// A key from given bytes (tests, or a key managed elsewhere).
    pub fn from_bytes(bytes: [u8; 32]) -> MacKey {
        MacKey(bytes)
    }

    /// Loads `state_dir/fh.key`, or creates it (mode 0600, 32 bytes from
    /// the kernel's random source) if it does not exist yet. The new key is
    /// written to a temporary file, synced and then linked into place, so a
    /// crash never leaves a short key behind and two servers starting at
    /// once agree on one key.
    pub fn load_or_create(state_dir: &Path) -> io::Result<MacKey> {
        let path = state_dir.join(KEY_FILE);
        match fs::File::open(&path) {
            Ok(file) => return read_key(file, &path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        dionfs_sys::private::create_dir_all(state_dir)?;
        let mut bytes = [0u8; 32];
        fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        let tmp = state_dir.join(format!("{KEY_FILE}.{}.tmp", std::process::id()));
        let mut file = dionfs_sys::private::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        // Created by an earlier run with a looser mode? Make sure of it.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        // link() fails if the key appeared meanwhile: then theirs wins.
        let linked = fs::hard_link(&tmp, &path);
        fs::remove_file(&tmp)?;
        match linked {
            Ok(()) => {
                fs::File::open(state_dir)?.sync_all()?;
                Ok(MacKey(bytes))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                read_key(fs::File::open(&path)?, &path)
            }
            Err(e) => Err(e),
        }
    }

    /// The truncated keyed hash of `data`.
    fn mac(&self, data: &[u8]) -> [u8; MAC_LEN] {
        let hash = blake3::keyed_hash(&self.0, data);
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(&hash.as_bytes()[..MAC_LEN]);
        mac
    }
}

fn read_key(mut file: fs::File, path: &Path) -> io::Result<MacKey> {
    let mut bytes = Vec::with_capacity(33);
    file.read_to_end(&mut bytes)?;
    let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: file handle key must be 32 bytes, found {}",
                path.display(),
                bytes.len()
            ),
        )
    })?;
    Ok(MacKey(key))
}

/// The export a handle claims to belong to, read without verifying it, so
/// the server can pick the export whose [`crate::ExportFs::resolve`] then
/// verifies it in full.
pub fn export_id(fh: &[u8]) -> Option<u16> {
    if fh.len() < HEADER_LEN + MAC_LEN || fh[0] != FH_VERSION {
        return None;
    }
    Some(u16::from_be_bytes([fh[1], fh[2]]))
}

/// Builds the NFS handle for a kernel handle in export `export_id`.
pub(crate) fn encode(
    key: &MacKey,
    export_id: u16,
    kernel: &KernelHandle,
) -> Result<Vec<u8>, FsError> {
    let len = kernel.bytes.len();
    if len > MAX_KERNEL_HANDLE {
        // This filesystem's handles do not fit NFSv3; nothing the client did.
        tracing::error!(len, "kernel file handle too large for NFSv3");
        return Err(FsError::ServerFault);
    }
    let mut fh = Vec::with_capacity(HEADER_LEN + len + MAC_LEN);
    fh.push(FH_VERSION);
    fh.extend_from_slice(&export_id.to_be_bytes());
    fh.extend_from_slice(&kernel.handle_type.to_be_bytes());
    fh.push(len as u8);
    fh.extend_from_slice(&kernel.bytes);
    let mac = key.mac(&fh);
    fh.extend_from_slice(&mac);
    Ok(fh)
}

/// Verifies an NFS handle for export `export_id` and returns the kernel
/// handle inside. Anything we did not issue is `BadHandle`.
pub(crate) fn decode(key: &MacKey, export_id: u16, fh: &[u8]) -> Result<KernelHandle, FsError> {
    let (handle_type, bytes) = verify(key, export_id, fh)?;
    Ok(KernelHandle {
        handle_type,
        bytes: bytes.to_vec(),
    })
}

/// [`decode`] without copying the kernel handle out: its type and bytes,
/// borrowed from `fh`.
pub(crate) fn verify<'a>(
    key: &MacKey,
    export_id: u16,
    fh: &'a [u8],
) -> Result<(i32, &'a [u8]), FsError> {
    if fh.len() < HEADER_LEN + MAC_LEN || fh.len() > NFS3_FHSIZE || fh[0] != FH_VERSION {
        return Err(FsError::BadHandle);
    }
    let len = usize::from(fh[7]);
    if fh.len() != HEADER_LEN + len + MAC_LEN {
        return Err(FsError::BadHandle);
    }
    let (signed, mac) = fh.split_at(HEADER_LEN + len);
    if !constant_time_eq(&key.mac(signed), mac) {
        return Err(FsError::BadHandle);
    }
    // Checked after the MAC so that a forged export id learns nothing.
    if u16::from_be_bytes([fh[1], fh[2]]) != export_id {
        return Err(FsError::BadHandle);
    }
    Ok((
        i32::from_be_bytes([fh[3], fh[4], fh[5], fh[6]]),
        &signed[HEADER_LEN..],
    ))
}

/// A directory of the NFSv4 pseudo-filesystem, named by a hash of its
/// path: the same in every run and in every reload that keeps the path,
/// so its handle and fileid are too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathId(pub [u8; PATH_ID_LEN]);

impl PathId {
    /// The id of the pseudo directory at `path` (absolute, components
    /// joined by single `/`, as an export's canonical path; `/` for the
    /// root): the first 8 bytes of its blake3 hash.
    pub fn of(path: &[u8]) -> PathId {
        let hash = blake3::hash(path);
        let mut id = [0u8; PATH_ID_LEN];
        id.copy_from_slice(&hash.as_bytes()[..PATH_ID_LEN]);
        PathId(id)
    }

    /// The directory's fileid: the id read as a big-endian number.
    pub fn fileid(self) -> u64 {
        u64::from_be_bytes(self.0)
    }
}

/// Whether `fh` claims to be a pseudo directory's handle (read without
/// verifying it: [`decode_pseudo`] does).
pub fn is_pseudo(fh: &[u8]) -> bool {
    fh.first() == Some(&FH_VERSION_PSEUDO)
}

/// Builds the handle of the pseudo directory `path`.
pub fn encode_pseudo(key: &MacKey, path: PathId) -> Vec<u8> {
    let mut fh = Vec::with_capacity(PSEUDO_FH_LEN);
    fh.push(FH_VERSION_PSEUDO);
    fh.extend_from_slice(&path.0);
    let mac = key.mac(&fh);
    fh.extend_from_slice(&mac);
    fh
}

/// Verifies a pseudo directory's handle and returns its path id. Anything
/// we did not issue is `BadHandle`; whether the path is still in the tree
/// is the namespace's question (stale if not).
pub fn decode_pseudo(key: &MacKey, fh: &[u8]) -> Result<PathId, FsError> {
    if fh.len() != PSEUDO_FH_LEN || fh[0] != FH_VERSION_PSEUDO {
        return Err(FsError::BadHandle);
    }
    let (signed, mac) = fh.split_at(1 + PATH_ID_LEN);
    if !constant_time_eq(&key.mac(signed), mac) {
        return Err(FsError::BadHandle);
    }
    let mut id = [0u8; PATH_ID_LEN];
    id.copy_from_slice(&signed[1..]);
    Ok(PathId(id))
}

/// Compares two MACs without an early exit, so the time taken does not
/// tell an attacker how many leading bytes of a guess were right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel() -> KernelHandle {
        KernelHandle {
            handle_type: 0x81,
            bytes: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let key = MacKey::from_bytes([7; 32]);
        let fh = encode(&key, 0x1234, &kernel()).expect("encode");
        assert_eq!(fh.len(), 8 + 12 + 16);
        assert_eq!(fh[0], FH_VERSION);
        assert_eq!(export_id(&fh), Some(0x1234));
        assert_eq!(decode(&key, 0x1234, &fh), Ok(kernel()));
    }

    #[test]
    fn every_flipped_bit_is_a_bad_handle() {
        let key = MacKey::from_bytes([7; 32]);
        let fh = encode(&key, 3, &kernel()).expect("encode");
        for i in 0..fh.len() {
            for bit in 0..8 {
                let mut bad = fh.clone();
                bad[i] ^= 1 << bit;
                assert_eq!(decode(&key, 3, &bad), Err(FsError::BadHandle), "byte {i}");
            }
        }
    }

    #[test]
    fn wrong_key_length_or_export_is_a_bad_handle() {
        let key = MacKey::from_bytes([7; 32]);
        let fh = encode(&key, 3, &kernel()).expect("encode");
        assert_eq!(
            decode(&MacKey::from_bytes([8; 32]), 3, &fh),
            Err(FsError::BadHandle)
        );
        assert_eq!(decode(&key, 4, &fh), Err(FsError::BadHandle));
        assert_eq!(
            decode(&key, 3, &fh[..fh.len() - 1]),
            Err(FsError::BadHandle)
        );
        let mut long = fh.clone();
        long.push(0);
        assert_eq!(decode(&key, 3, &long), Err(FsError::BadHandle));
        assert_eq!(decode(&key, 3, &[]), Err(FsError::BadHandle));
        assert_eq!(decode(&key, 3, &[0u8; 64]), Err(FsError::BadHandle));
        assert_eq!(export_id(&[]), None);
    }

    #[test]
    fn oversized_kernel_handle_is_refused() {
        let key = MacKey::from_bytes([7; 32]);
        let big = KernelHandle {
            handle_type: 1,
            bytes: vec![0; MAX_KERNEL_HANDLE + 1],
        };
        assert_eq!(encode(&key, 1, &big), Err(FsError::ServerFault));
        let max = KernelHandle {
            handle_type: 1,
            bytes: vec![0; MAX_KERNEL_HANDLE],
        };
        assert_eq!(encode(&key, 1, &max).map(|fh| fh.len()), Ok(NFS3_FHSIZE));
    }

    #[test]
    fn pseudo_round_trip_and_layout() {
        let key = MacKey::from_bytes([7; 32]);
        let srv = PathId::of(b"/srv");
        let fh = encode_pseudo(&key, srv);
        assert_eq!(fh.len(), PSEUDO_FH_LEN);
        assert_eq!(fh.len(), 25);
        assert_eq!(fh[0], FH_VERSION_PSEUDO);
        assert_eq!(&fh[1..9], &blake3::hash(b"/srv").as_bytes()[..8]);
        assert!(is_pseudo(&fh));
        assert_eq!(decode_pseudo(&key, &fh), Ok(srv));
        // Stable: the same key and path give the same bytes (a restart
        // loads the same key; a reload keeps the path).
        assert_eq!(encode_pseudo(&key.clone(), PathId::of(b"/srv")), fh);
        assert_ne!(PathId::of(b"/srv"), PathId::of(b"/srv/a"));
        assert_eq!(srv.fileid(), u64::from_be_bytes(srv.0));
    }

    #[test]
    fn pseudo_handles_belong_to_no_export() {
        let key = MacKey::from_bytes([7; 32]);
        let fh = encode_pseudo(&key, PathId::of(b"/"));
        assert_eq!(export_id(&fh), None);
        for id in [0, 1, 0x0200, u16::MAX] {
            assert_eq!(decode(&key, id, &fh), Err(FsError::BadHandle));
        }
        // Nor is an export file's handle a pseudo one.
        let file = encode(&key, 3, &kernel()).expect("encode");
        assert!(!is_pseudo(&file));
        assert_eq!(decode_pseudo(&key, &file), Err(FsError::BadHandle));
    }

    #[test]
    fn forged_or_truncated_pseudo_handles_are_refused() {
        let key = MacKey::from_bytes([7; 32]);
        let fh = encode_pseudo(&key, PathId::of(b"/srv/b"));
        for i in 0..fh.len() {
            for bit in 0..8 {
                let mut bad = fh.clone();
                bad[i] ^= 1 << bit;
                assert_eq!(
                    decode_pseudo(&key, &bad),
                    Err(FsError::BadHandle),
                    "byte {i}"
                );
            }
        }
        for len in 0..fh.len() {
            assert_eq!(decode_pseudo(&key, &fh[..len]), Err(FsError::BadHandle));
        }
        let mut long = fh.clone();
        long.push(0);
        assert_eq!(decode_pseudo(&key, &long), Err(FsError::BadHandle));
        assert_eq!(
            decode_pseudo(&MacKey::from_bytes([8; 32]), &fh),
            Err(FsError::BadHandle)
        );
        // A client that knows the layout but not the key cannot make one.
        let mut guess = vec![FH_VERSION_PSEUDO];
        guess.extend_from_slice(&PathId::of(b"/etc").0);
        guess.extend_from_slice(&[0; MAC_LEN]);
        assert_eq!(decode_pseudo(&key, &guess), Err(FsError::BadHandle));
        assert!(!is_pseudo(&[]));
    }

    #[test]
    fn key_is_created_once_with_private_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let first = MacKey::load_or_create(&state).expect("create");
        let again = MacKey::load_or_create(&state).expect("load");
        assert_eq!(first.0, again.0);
        let meta = fs::metadata(state.join(KEY_FILE)).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 32);
        fs::write(state.join(KEY_FILE), b"short").expect("write");
        assert!(MacKey::load_or_create(&state).is_err());
    }
}
