//! POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`): a
//! file's, read and written as the caller, in the kernel's extended
//! attribute format (`include/uapi/linux/posix_acl_xattr.h`). What an ACL
//! means to a protocol (NFSv4's ACEs) is the protocol's to map.

use rustix::io::Errno;

use crate::export::proc_fd_path;
use crate::{FileKind, FsError, Node};

/// `ACL_READ`, `ACL_WRITE` and `ACL_EXECUTE`: an entry's permissions.
pub const ACL_READ: u16 = 4;
pub const ACL_WRITE: u16 = 2;
pub const ACL_EXECUTE: u16 = 1;

/// `POSIX_ACL_XATTR_VERSION`.
const XATTR_VERSION: u32 = 2;
/// The header's and each entry's size in the attribute.
const HEADER_LEN: usize = 4;
const ENTRY_LEN: usize = 8;
/// The most entries read: what fits in the largest value Linux keeps.
const MAX_ENTRIES: usize = (64 * 1024 - HEADER_LEN) / ENTRY_LEN;

/// Whose an entry is, in the order the kernel requires them (its tag
/// values increase in that order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tag {
    /// The file's owner (`ACL_USER_OBJ`).
    UserObj,
    /// A named user, by uid (`ACL_USER`).
    User(u32),
    /// The file's group (`ACL_GROUP_OBJ`).
    GroupObj,
    /// A named group, by gid (`ACL_GROUP`).
    Group(u32),
    /// The most the named entries and the group may be granted
    /// (`ACL_MASK`).
    Mask,
    /// Everyone else (`ACL_OTHER`).
    Other,
}

impl Tag {
    fn wire(self) -> (u16, u32) {
        const UNDEFINED_ID: u32 = u32::MAX;
        match self {
            Tag::UserObj => (0x01, UNDEFINED_ID),
            Tag::User(uid) => (0x02, uid),
            Tag::GroupObj => (0x04, UNDEFINED_ID),
            Tag::Group(gid) => (0x08, gid),
            Tag::Mask => (0x10, UNDEFINED_ID),
            Tag::Other => (0x20, UNDEFINED_ID),
        }
    }

    fn from_wire(tag: u16, id: u32) -> Option<Tag> {
        Some(match tag {
            0x01 => Tag::UserObj,
            0x02 => Tag::User(id),
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group(id),
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return None,
        })
    }
}

/// One entry: whose, and its `ACL_READ | ACL_WRITE | ACL_EXECUTE` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: Tag,
    pub perm: u16,
}

/// A POSIX ACL: its entries in the kernel's order (owner, named users by
/// uid, group, named groups by gid, mask, other).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PosixAcl {
    pub entries: Vec<Entry>,
}

/// Which of a file's two ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclKind {
    /// What decides access to the file.
    Access,
    /// What a directory's new files and directories inherit.
    Default,
}

impl AclKind {
    fn xattr(self) -> &'static std::ffi::CStr {
        match self {
            AclKind::Access => c"system.posix_acl_access",
            AclKind::Default => c"system.posix_acl_default",
        }
    }
}

impl PosixAcl {
    /// The three-entry ACL that says what the permission bits of `mode`
    /// say (the kernel's `posix_acl_from_mode`).
    pub fn from_mode(mode: u32) -> PosixAcl {
        let perm = |shift: u32| ((mode >> shift) & 7) as u16;
        PosixAcl {
            entries: vec![
                Entry {
                    tag: Tag::UserObj,
                    perm: perm(6),
                },
                Entry {
                    tag: Tag::GroupObj,
                    perm: perm(3),
                },
                Entry {
                    tag: Tag::Other,
                    perm: perm(0),
                },
            ],
        }
    }

    /// The ACL of these entries, whose order is the caller's.
    pub fn of(entries: &[(Tag, u16)]) -> PosixAcl {
        PosixAcl {
            entries: entries
                .iter()
                .map(|&(tag, perm)| Entry { tag, perm })
                .collect(),
        }
    }

    /// The entry with `tag`, if there is one.
    pub fn get(&self, tag: Tag) -> Option<&Entry> {
        self.entries.iter().find(|e| e.tag == tag)
    }

    /// Decodes the value of an ACL attribute. One the kernel would not
    /// have written (another version, a torn entry, an unknown tag, out
    /// of order) is `Inval`.
    pub fn from_xattr(bytes: &[u8]) -> Result<PosixAcl, FsError> {
        let (header, body) = bytes.split_at_checked(HEADER_LEN).ok_or(FsError::Inval)?;
        let version = u32::from_le_bytes(header.try_into().map_err(|_| FsError::Inval)?);
        if version != XATTR_VERSION || body.len() % ENTRY_LEN != 0 {
            return Err(FsError::Inval);
        }
        if body.len() / ENTRY_LEN > MAX_ENTRIES {
            return Err(FsError::Inval);
        }
        let entries = body
            .chunks_exact(ENTRY_LEN)
            .map(|e| {
                let tag = u16::from_le_bytes([e[0], e[1]]);
                let perm = u16::from_le_bytes([e[2], e[3]]);
                let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
                Tag::from_wire(tag, id)
                    .filter(|_| perm & !7 == 0)
                    .map(|tag| Entry { tag, perm })
                    .ok_or(FsError::Inval)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let acl = PosixAcl { entries };
        if !acl.is_valid() {
            return Err(FsError::Inval);
        }
        Ok(acl)
    }

    /// The attribute value of this ACL.
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + ENTRY_LEN * self.entries.len());
        out.extend_from_slice(&XATTR_VERSION.to_le_bytes());
        for e in &self.entries {
            let (tag, id) = e.tag.wire();
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// Whether the kernel would take this ACL (`posix_acl_valid`): one
    /// owner, group and other entry, named entries in increasing id
    /// order and each id once, and a mask exactly when there are named
    /// entries.
    pub fn is_valid(&self) -> bool {
        let sorted = self.entries.windows(2).all(|w| w[0].tag < w[1].tag);
        let has = |tag| self.get(tag).is_some();
        let named = self
            .entries
            .iter()
            .any(|e| matches!(e.tag, Tag::User(_) | Tag::Group(_)));
        sorted
            && has(Tag::UserObj)
            && has(Tag::GroupObj)
            && has(Tag::Other)
            && named == has(Tag::Mask)
    }
}

/// The ACL `kind` of `node`, read as the caller (the kernel checks the
/// caller may read the file's attributes): `None` when the file has
/// none, or its file system or kind of file keeps none (a symbolic
/// link; a mount with ACLs off, `EOPNOTSUPP`). A default ACL exists
/// only on a directory.
pub fn get(node: &Node, which: AclKind) -> Result<Option<PosixAcl>, FsError> {
    let kind = node.kind();
    if kind == FileKind::Symlink || (which == AclKind::Default && kind != FileKind::Directory) {
        return Ok(None);
    }
    let mut value = vec![0; HEADER_LEN + ENTRY_LEN * MAX_ENTRIES];
    match rustix::fs::getxattr(
        proc_fd_path(node.fd()).as_c_str(),
        which.xattr(),
        &mut value[..],
    ) {
        Ok(len) => PosixAcl::from_xattr(&value[..len]).map(Some),
        Err(Errno::NODATA | Errno::OPNOTSUPP | Errno::NOSYS) => Ok(None),
        Err(e) => Err(FsError::from_errno(e)),
    }
}

/// Sets the ACL `kind` of `node` to `acl`, or removes it (`None`), as
/// the caller (the kernel lets only the owner, or a caller with
/// `CAP_FOWNER`, change it; setting the access ACL sets the mode's
/// permission bits to match). A file system that keeps no ACLs is
/// `NotSupp`, as is a symbolic link.
pub fn set(node: &Node, which: AclKind, acl: Option<&PosixAcl>) -> Result<(), FsError> {
    let kind = node.kind();
    if kind == FileKind::Symlink || (which == AclKind::Default && kind != FileKind::Directory) {
        return Err(FsError::NotSupp);
    }
    let path = proc_fd_path(node.fd());
    let done = match acl {
        Some(acl) => rustix::fs::setxattr(
            path.as_c_str(),
            which.xattr(),
            &acl.to_xattr(),
            rustix::fs::XattrFlags::empty(),
        ),
        None => match rustix::fs::removexattr(path.as_c_str(), which.xattr()) {
            Err(Errno::NODATA) => Ok(()),
            other => other,
        },
    };
    done.map_err(FsError::from_errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(Tag, u16)]) -> PosixAcl {
        PosixAcl::of(entries)
    }

    #[test]
    fn from_mode_is_the_three_entries_of_the_permission_bits() {
        assert_eq!(
            PosixAcl::from_mode(0o100_754),
            acl(&[(Tag::UserObj, 7), (Tag::GroupObj, 5), (Tag::Other, 4)])
        );
    }

    #[test]
    fn the_xattr_format_round_trips_as_the_kernel_lays_it_out() {
        let a = acl(&[
            (Tag::UserObj, 6),
            (Tag::User(1000), 4),
            (Tag::GroupObj, 4),
            (Tag::Group(50), 6),
            (Tag::Mask, 6),
            (Tag::Other, 0),
        ]);
        let bytes = a.to_xattr();
        assert_eq!(bytes.len(), 4 + 6 * 8);
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        // The second entry: ACL_USER, r--, uid 1000, little-endian.
        assert_eq!(&bytes[12..20], &[2, 0, 4, 0, 0xe8, 3, 0, 0]);
        assert_eq!(PosixAcl::from_xattr(&bytes), Ok(a));
    }

    #[test]
    fn values_the_kernel_would_not_write_are_refused() {
        let good = PosixAcl::from_mode(0o644).to_xattr();
        let mut version = good.clone();
        version[0] = 1;
        let mut tag = good.clone();
        tag[4] = 0x40;
        let mut perm = good.clone();
        perm[6] = 8;
        for bad in [
            &version[..],
            &tag[..],
            &perm[..],
            &good[..good.len() - 1],
            &[][..],
        ] {
            assert_eq!(PosixAcl::from_xattr(bad), Err(FsError::Inval));
        }
        // Out of order, a named entry without a mask, a duplicate id.
        for entries in [
            &[(Tag::GroupObj, 4), (Tag::UserObj, 6), (Tag::Other, 4)][..],
            &[
                (Tag::UserObj, 6),
                (Tag::User(1), 4),
                (Tag::GroupObj, 4),
                (Tag::Other, 4),
            ][..],
            &[
                (Tag::UserObj, 6),
                (Tag::User(1), 4),
                (Tag::User(1), 4),
                (Tag::GroupObj, 4),
                (Tag::Mask, 4),
                (Tag::Other, 4),
            ][..],
        ] {
            assert!(!acl(entries).is_valid(), "{entries:?}");
            assert_eq!(
                PosixAcl::from_xattr(&acl(entries).to_xattr()),
                Err(FsError::Inval)
            );
        }
    }
}
