//! What the lock tables' tests share: owners of two protocols, files to
//! lock, and a process on the server locking them.

use std::fs::OpenOptions;
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::path::Path;

use dionfs_sys::lock::{ofd_setlk, LockRange, LockType};

use super::table::Retried;
use super::{LockOwner, Span};

/// Owners of two protocols, as the server will keep both in one table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TestOwner {
    /// As NLM names one: a process (`svid`) of a client host.
    Process {
        name: Vec<u8>,
        ip: IpAddr,
        svid: i32,
    },
    /// As NFSv4 names one: the client's opaque owner under its client id
    /// (a client at `ip`).
    State {
        clientid: u64,
        ip: IpAddr,
        owner: Vec<u8>,
    },
}

/// The client of a [`TestOwner`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TestClient {
    Host(Vec<u8>, IpAddr),
    Id(u64),
}

impl LockOwner for TestOwner {
    type Client = TestClient;

    fn client(&self) -> TestClient {
        match self {
            TestOwner::Process { name, ip, .. } => TestClient::Host(name.clone(), *ip),
            TestOwner::State { clientid, .. } => TestClient::Id(*clientid),
        }
    }

    fn address(&self) -> IpAddr {
        match self {
            TestOwner::Process { ip, .. } | TestOwner::State { ip, .. } => *ip,
        }
    }
}

/// The address of [`owner`]'s client.
pub fn client_ip() -> IpAddr {
    "192.0.2.1".parse().unwrap()
}

/// Process `svid` of host `name` at `ip`.
pub fn process(name: &str, ip: IpAddr, svid: i32) -> TestOwner {
    TestOwner::Process {
        name: name.as_bytes().to_vec(),
        ip,
        svid,
    }
}

/// Process `svid` of host "client" at [`client_ip`].
pub fn owner(svid: i32) -> TestOwner {
    process("client", client_ip(), svid)
}

/// An owner at another client address than [`owner`]'s.
pub fn other_client() -> TestOwner {
    process("other", "192.0.2.2".parse().unwrap(), 1)
}

pub fn opener(path: &Path) -> impl FnMut() -> std::io::Result<(OwnedFd, bool)> + '_ {
    move || {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok((f.into(), true))
    }
}

pub fn span(offset: u64, len: u64) -> Span {
    Span::from_nlm(offset, len).unwrap()
}

/// A file in a fresh directory (kept while the guard lives).
pub fn data_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"data").unwrap();
    (dir, path)
}

/// A process's own description of `path`, holding a write lock of
/// `len` bytes (0: to the end) at 0, as a process on the server would.
pub fn locked_locally(path: &Path, len: i64) -> std::fs::File {
    let local = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    assert!(ofd_setlk(&local, LockType::Write, LockRange { start: 0, len }).unwrap());
    local
}

/// The callbacks of the waiters `grant_all` granted, over all files.
pub fn granted<T>(all: Vec<(Vec<u8>, Retried<TestOwner, T>)>) -> Vec<T> {
    all.into_iter()
        .flat_map(|(_, r)| r.granted)
        .map(|w| w.callback)
        .collect()
}
