//! READDIR / READDIRPLUS: directory entries in batches, resumable at a
//! cookie.
//!
//! Cookies are the filesystem's own `d_off` values from `getdents64`: the
//! position *after* an entry, which `lseek` on the directory accepts to
//! resume there. knfsd uses the same values. ext4 (hashed directories),
//! XFS and btrfs keep them valid while entries are added and removed, so a
//! listing never has to restart because the directory changed.
//!
//! The cookie verifier is therefore constant: [`cookie_verifier`]
//! returns zeros and the server need not reject any verifier (knfsd does
//! not check it either). A cookie the directory cannot seek to is
//! `BadCookie`.
//!
//! READDIRPLUS needs a handle and attributes per entry; the server gets
//! them lazily with [`ExportFs::lookup`] for the entries that fit its reply
//! (an entry whose lookup fails is sent without them).

use rustix::fs::{openat, seek, Mode, OFlags, RawDir, SeekFrom};

use crate::export::{ExportFs, Node};
use crate::FsError;

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (any bytes but `/` and NUL).
    pub name: Vec<u8>,
    /// Inode number (`d_ino`); for `..` of the export root, the root's own.
    pub fileid: u64,
    /// Where the listing resumes after this entry.
    pub cookie: u64,
}

/// Entries read from one cookie on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirBatch {
    /// Up to the requested number of entries, `.` and `..` included.
    pub entries: Vec<DirEntry>,
    /// Whether the last entry of the directory is in `entries`.
    pub eof: bool,
}

/// getdents64 buffer size.
const GETDENTS_BUF: usize = 32 * 1024;

/// Reads up to `max_entries` entries of `dir`, starting after `cookie`
/// (0: from the beginning). Needs read permission on the directory, as
/// the kernel checks when we open it under the caller's credentials.
pub fn read_dir(
    fs: &ExportFs,
    dir: &Node,
    cookie: u64,
    max_entries: usize,
) -> Result<DirBatch, FsError> {
    dir.require_dir()?;
    let fd = openat(
        dir.fd(),
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if cookie != 0 {
        let offset = i64::try_from(cookie).map_err(|_| FsError::BadCookie)?;
        seek(&fd, SeekFrom::Start(offset as u64)).map_err(|_| FsError::BadCookie)?;
    }
    let is_root = dir.kernel == fs.root.kernel;
    let mut entries = Vec::new();
    let mut buf = Vec::with_capacity(GETDENTS_BUF);
    let mut iter = RawDir::new(&fd, buf.spare_capacity_mut());
    // Read one entry more than asked for, to know whether we hit the end.
    while entries.len() <= max_entries {
        let Some(entry) = iter.next() else {
            return Ok(DirBatch { entries, eof: true });
        };
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        let fileid = if is_root && name == b".." {
            root_fileid(fs)?
        } else {
            entry.ino()
        };
        entries.push(DirEntry {
            name: name.to_vec(),
            fileid,
            cookie: entry.next_entry_cookie(),
        });
    }
    entries.truncate(max_entries);
    Ok(DirBatch {
        entries,
        eof: false,
    })
}

/// The READDIR cookie verifier for `dir`: constant, see the module
/// documentation.
pub fn cookie_verifier(_dir: &Node) -> [u8; 8] {
    [0; 8]
}

fn root_fileid(fs: &ExportFs) -> Result<u64, FsError> {
    Ok(crate::ops::getattr(fs, &fs.root)?.fileid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::MacKey;
    use crate::ops;
    use crate::testutil::{export, LoopFs};
    use std::collections::BTreeSet;

    fn page_through(exp: &ExportFs, dir: &Node, page: usize) -> Vec<DirEntry> {
        let mut all = Vec::new();
        let mut cookie = 0;
        loop {
            let batch = read_dir(exp, dir, cookie, page).expect("read_dir");
            assert!(batch.entries.len() <= page);
            if let Some(last) = batch.entries.last() {
                cookie = last.cookie;
            }
            all.extend(batch.entries);
            if batch.eof {
                return all;
            }
        }
    }

    fn paging_over_many_entries(fstype: &'static str) {
        let Some(fs) = LoopFs::new(fstype, 64) else {
            return;
        };
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(dir.join("big")).expect("mkdir");
        let count = 2100;
        for i in 0..count {
            std::fs::write(dir.join(format!("big/file-{i:05}")), b"").expect("create");
        }
        let exp = export(&dir, 1, MacKey::from_bytes([1; 32]));
        let root = exp.resolve(exp.root_handle()).expect("root");
        let (big, _) = exp.lookup(&root, b"big").expect("big");

        let all = page_through(&exp, &big, 97);
        let names: BTreeSet<Vec<u8>> = all.iter().map(|e| e.name.clone()).collect();
        assert_eq!(all.len(), count + 2, "every entry exactly once");
        assert_eq!(names.len(), count + 2);
        assert!(names.contains(b".".as_slice()) && names.contains(b"..".as_slice()));
        // Fileids are the inode numbers lookup reports.
        let some = all.iter().find(|e| e.name == b"file-01234").expect("entry");
        let (_, attr) = exp.lookup(&big, &some.name).expect("lookup");
        assert_eq!(attr.fileid, some.fileid);

        // Removing entries while paging does not lose or repeat others.
        let first = read_dir(&exp, &big, 0, 500).expect("first page");
        for e in &first.entries {
            if e.name.starts_with(b"file-") {
                ops::remove(&exp, &big, &e.name).expect("remove");
            }
        }
        let cookie = first.entries.last().expect("entries").cookie;
        let mut rest = Vec::new();
        let mut c = cookie;
        loop {
            let batch = read_dir(&exp, &big, c, 200).expect("rest");
            if let Some(last) = batch.entries.last() {
                c = last.cookie;
            }
            rest.extend(batch.entries);
            if batch.eof {
                break;
            }
        }
        assert_eq!(first.entries.len() + rest.len(), count + 2);

        // The end cookie gives an empty, final batch.
        let end = read_dir(&exp, &big, c, 10).expect("end");
        assert!(end.eof && end.entries.is_empty());
        // Zero entries asked: none given, not eof.
        let none = read_dir(&exp, &big, 0, 0).expect("zero");
        assert!(!none.eof && none.entries.is_empty());
        assert_eq!(
            read_dir(&exp, &big, u64::MAX, 10).err(),
            Some(FsError::BadCookie)
        );
    }

    #[test]
    fn readdir_pages_with_cookies_ext4() {
        paging_over_many_entries("ext4");
    }

    #[test]
    fn readdir_pages_with_cookies_xfs() {
        paging_over_many_entries("xfs");
    }

    #[test]
    fn dotdot_of_root_reports_the_root() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let exp = export(&dir, 1, MacKey::from_bytes([1; 32]));
        let root = exp.resolve(exp.root_handle()).expect("root");
        let root_id = ops::getattr(&exp, &root).expect("attr").fileid;
        let batch = read_dir(&exp, &root, 0, 10).expect("read_dir");
        assert!(batch.eof);
        let dotdot = batch.entries.iter().find(|e| e.name == b"..").expect("..");
        assert_eq!(dotdot.fileid, root_id);
        let file = exp.lookup(&root, b".").expect(".").0;
        assert_eq!(read_dir(&exp, &file, 0, 1).map(|b| b.entries.len()), Ok(1));
    }
}
