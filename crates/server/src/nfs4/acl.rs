//! NFSv4 ACLs (`acl`, `dacl`; RFC 8881 section 6) mapped to and from the
//! POSIX ACLs the file system keeps, as knfsd maps them
//! (`fs/nfsd/nfs4acl.c`, after the University of Michigan's mapping,
//! draft-ietf-nfsv4-acl-mapping), so that a client's `nfs4_getfacl` shows
//! what `getfacl` shows on the server, and back.
//!
//! - POSIX to NFSv4 ([`from_posix`]): each POSIX entry becomes an ALLOW
//!   ACE, preceded (for the owner and named users) or followed (for the
//!   groups, since one user may be in several) by the DENY ACE that keeps
//!   a later, broader ACE from granting what the entry does not; named
//!   entries and the group are limited by the mask. A directory's default
//!   ACL follows, its ACEs inherit-only.
//! - NFSv4 to POSIX ([`to_posix`]): the ACEs are run in order, keeping
//!   for each entity what was allowed and denied so far (EVERYONE@ adds
//!   to all), and each entity's allowed bits become its POSIX
//!   permissions. Errs on the side of denying: a permission maps only if
//!   all the bits it stands for are allowed. What POSIX cannot say is
//!   refused (`ATTRNOTSUPP`, as knfsd): AUDIT and ALARM ACEs, flags other
//!   than inheritance and `IDENTIFIER_GROUP`, inheritance on a
//!   non-directory, and denying what no POSIX ACL can deny (reading
//!   attributes or the ACL; the owner's writing them).

use dionfs_fs::acl::{Entry, PosixAcl, Tag, ACL_EXECUTE, ACL_READ, ACL_WRITE};
use dionfs_proto::nfs4::{
    Nfsace4, Nfsstat4, Owner4, ACE4_ACCESS_ALLOWED_ACE_TYPE, ACE4_ACCESS_DENIED_ACE_TYPE,
    ACE4_APPEND_DATA, ACE4_DELETE_CHILD, ACE4_DIRECTORY_INHERIT_ACE, ACE4_EXECUTE,
    ACE4_FILE_INHERIT_ACE, ACE4_IDENTIFIER_GROUP, ACE4_INHERIT_ONLY_ACE, ACE4_READ_ACL,
    ACE4_READ_ATTRIBUTES, ACE4_READ_DATA, ACE4_SYNCHRONIZE, ACE4_WRITE_ACL, ACE4_WRITE_ATTRIBUTES,
    ACE4_WRITE_DATA,
};

/// Whom an ACE is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// `OWNER@`.
    Owner,
    /// `GROUP@`.
    Group,
    /// `EVERYONE@`.
    Everyone,
    /// A user, by uid.
    User(u32),
    /// A group, by gid (`ACE4_IDENTIFIER_GROUP`).
    NamedGroup(u32),
}

/// An ALLOW or DENY ACE, its `who` resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ace {
    pub allow: bool,
    /// Its flags, `ACE4_IDENTIFIER_GROUP` included for a named group.
    pub flag: u32,
    pub mask: u32,
    pub who: Who,
}

impl Ace {
    /// The `acetype` of the ACE.
    pub fn acetype(&self) -> u32 {
        if self.allow {
            ACE4_ACCESS_ALLOWED_ACE_TYPE
        } else {
            ACE4_ACCESS_DENIED_ACE_TYPE
        }
    }
}

/// The special `who` strings.
pub const OWNER: &str = "OWNER@";
pub const GROUP: &str = "GROUP@";
pub const EVERYONE: &str = "EVERYONE@";

const READ_MODE: u32 = ACE4_READ_DATA;
const WRITE_MODE: u32 = ACE4_WRITE_DATA | ACE4_APPEND_DATA;
const EXECUTE_MODE: u32 = ACE4_EXECUTE;
/// What every entry is granted: POSIX never denies these.
const ANYONE_MODE: u32 = ACE4_READ_ATTRIBUTES | ACE4_READ_ACL | ACE4_SYNCHRONIZE;
/// What the owner is granted besides.
const OWNER_MODE: u32 = ACE4_WRITE_ATTRIBUTES | ACE4_WRITE_ACL;
const INHERITANCE: u32 = ACE4_FILE_INHERIT_ACE | ACE4_DIRECTORY_INHERIT_ACE;
const SUPPORTED_FLAGS: u32 = INHERITANCE | ACE4_INHERIT_ONLY_ACE | ACE4_IDENTIFIER_GROUP;

/// The mask an ALLOW ACE of POSIX permissions `perm` grants.
fn allow_mask(perm: u16, dir: bool, owner: bool) -> u32 {
    let mut mask = ANYONE_MODE | deny_mask(perm, dir);
    if owner {
        mask |= OWNER_MODE;
    }
    mask
}

/// The mask a DENY ACE of POSIX permissions `perm` denies.
fn deny_mask(perm: u16, dir: bool) -> u32 {
    let mut mask = 0;
    if perm & ACL_READ != 0 {
        mask |= READ_MODE;
    }
    if perm & ACL_WRITE != 0 {
        mask |= WRITE_MODE;
        if dir {
            mask |= ACE4_DELETE_CHILD;
        }
    }
    if perm & ACL_EXECUTE != 0 {
        mask |= EXECUTE_MODE;
    }
    mask
}

/// The POSIX permissions a mask grants: each only if all its bits are
/// in it.
fn perm_of(mask: u32, dir: bool) -> u16 {
    let write = if dir {
        WRITE_MODE | ACE4_DELETE_CHILD
    } else {
        WRITE_MODE
    };
    let has = |bits: u32| mask & bits == bits;
    let mut perm = 0;
    if has(READ_MODE) {
        perm |= ACL_READ;
    }
    if has(write) {
        perm |= ACL_WRITE;
    }
    if has(EXECUTE_MODE) {
        perm |= ACL_EXECUTE;
    }
    perm
}

/// The NFSv4 ACL of a file whose access ACL is `access` (the one its
/// mode says if it has none: [`PosixAcl::from_mode`]) and, for a
/// directory, whose default ACL is `default`.
pub fn from_posix(access: &PosixAcl, default: Option<&PosixAcl>, dir: bool) -> Vec<Ace> {
    let mut aces = Vec::with_capacity(2 * access.entries.len());
    one_from_posix(access, dir, 0, &mut aces);
    if let Some(default) = default.filter(|d| !d.entries.is_empty()) {
        one_from_posix(default, dir, INHERITANCE | ACE4_INHERIT_ONLY_ACE, &mut aces);
    }
    aces
}

/// The permissions a POSIX ACL grants each class of entity (the named
/// ones and the group limited by the mask).
struct Summary {
    owner: u16,
    users: u16,
    group: u16,
    groups: u16,
    other: u16,
    mask: u16,
}

fn summarize(acl: &PosixAcl) -> Summary {
    let mut s = Summary {
        owner: 0,
        users: 0,
        group: 0,
        groups: 0,
        other: 0,
        mask: 7,
    };
    for e in &acl.entries {
        match e.tag {
            Tag::UserObj => s.owner = e.perm,
            Tag::User(_) => s.users |= e.perm,
            Tag::GroupObj => s.group = e.perm,
            Tag::Group(_) => s.groups |= e.perm,
            Tag::Mask => s.mask = e.perm,
            Tag::Other => s.other = e.perm,
        }
    }
    s.users &= s.mask;
    s.group &= s.mask;
    s.groups &= s.mask;
    s
}

fn one_from_posix(acl: &PosixAcl, dir: bool, flag: u32, aces: &mut Vec<Ace>) {
    let s = summarize(acl);
    let mut push = |allow: bool, group_flag: bool, mask: u32, who: Who| {
        let flag = if group_flag {
            flag | ACE4_IDENTIFIER_GROUP
        } else {
            flag
        };
        aces.push(Ace {
            allow,
            flag,
            mask,
            who,
        });
    };
    // The owner: denied only what a later ACE would grant it and its
    // entry does not.
    let deny = !s.owner & (s.users | s.group | s.groups | s.other);
    if deny != 0 {
        push(false, false, deny_mask(deny, dir), Who::Owner);
    }
    push(true, false, allow_mask(s.owner, dir, true), Who::Owner);
    for e in &acl.entries {
        if let Tag::User(uid) = e.tag {
            let granted = e.perm & s.mask;
            let deny = !granted & (s.groups | s.group | s.other);
            if deny != 0 {
                push(false, false, deny_mask(deny, dir), Who::User(uid));
            }
            push(true, false, allow_mask(granted, dir, false), Who::User(uid));
        }
    }
    // The groups: every ALLOW first, then the DENYs, since a user may
    // be in more than one.
    push(true, false, allow_mask(s.group, dir, false), Who::Group);
    let named_groups = || {
        acl.entries.iter().filter_map(|e| match e.tag {
            Tag::Group(gid) => Some((gid, e.perm & s.mask)),
            _ => None,
        })
    };
    for (gid, granted) in named_groups() {
        push(
            true,
            true,
            allow_mask(granted, dir, false),
            Who::NamedGroup(gid),
        );
    }
    let deny = !s.group & s.other;
    if deny != 0 {
        push(false, false, deny_mask(deny, dir), Who::Group);
    }
    for (gid, granted) in named_groups() {
        let deny = !granted & s.other;
        if deny != 0 {
            push(false, true, deny_mask(deny, dir), Who::NamedGroup(gid));
        }
    }
    push(true, false, allow_mask(s.other, dir, false), Who::Everyone);
}

/// What an entity was allowed and denied by the ACEs run so far.
#[derive(Debug, Clone, Copy, Default)]
struct Bits {
    allow: u32,
    deny: u32,
}

impl Bits {
    /// Allows the bits of `mask` not already denied.
    fn allow(&mut self, mask: u32) {
        self.allow |= mask & !self.deny;
    }

    /// Denies the bits of `mask` not already allowed.
    fn deny(&mut self, mask: u32) {
        self.deny |= mask & !self.allow;
    }
}

/// The entities of one POSIX ACL being built.
#[derive(Debug, Default)]
struct State {
    empty: bool,
    owner: Bits,
    group: Bits,
    other: Bits,
    everyone: Bits,
    users: Vec<(u32, Bits)>,
    groups: Vec<(u32, Bits)>,
}

impl State {
    fn new() -> State {
        State {
            empty: true,
            ..State::default()
        }
    }

    /// The index of `id` in `list`, added with what EVERYONE@ was given
    /// so far if it is new.
    fn entity(list: &mut Vec<(u32, Bits)>, everyone: Bits, id: u32) -> usize {
        match list.iter().position(|(i, _)| *i == id) {
            Some(i) => i,
            None => {
                list.push((id, everyone));
                list.len() - 1
            }
        }
    }

    fn deny_all(&mut self, mask: u32, group_too: bool) {
        self.owner.deny(mask);
        if group_too {
            self.group.deny(mask);
        }
        self.everyone.deny(mask);
        for (_, bits) in self.users.iter_mut().chain(self.groups.iter_mut()) {
            bits.deny(mask);
        }
    }

    fn run(&mut self, ace: &Ace) {
        self.empty = false;
        let mask = ace.mask;
        match ace.who {
            Who::Owner if ace.allow => self.owner.allow(mask),
            Who::Owner => self.owner.deny(mask),
            Who::User(uid) => {
                let i = State::entity(&mut self.users, self.everyone, uid);
                let bits = &mut self.users[i].1;
                if ace.allow {
                    bits.allow(mask);
                } else {
                    bits.deny(mask);
                    // The owner, if it is this user, is denied too.
                    let denied = bits.deny;
                    self.owner.deny(denied);
                }
            }
            Who::Group if ace.allow => self.group.allow(mask),
            Who::Group => {
                self.group.deny(mask);
                // Anyone may be in the group.
                let denied = self.group.deny;
                self.deny_all(denied, false);
            }
            Who::NamedGroup(gid) => {
                let i = State::entity(&mut self.groups, self.everyone, gid);
                let bits = &mut self.groups[i].1;
                if ace.allow {
                    bits.allow(mask);
                } else {
                    bits.deny(mask);
                    let denied = bits.deny;
                    self.deny_all(denied, true);
                }
            }
            Who::Everyone if ace.allow => {
                for bits in [
                    &mut self.owner,
                    &mut self.group,
                    &mut self.other,
                    &mut self.everyone,
                ] {
                    bits.allow(mask);
                }
                for (_, bits) in self.users.iter_mut().chain(self.groups.iter_mut()) {
                    bits.allow(mask);
                }
            }
            Who::Everyone => {
                self.other.deny(mask);
                self.deny_all(mask, true);
            }
        }
    }

    /// The POSIX ACL of this state; `None` for a default ACL no ACE was
    /// for (the directory's default ACL is removed).
    fn into_posix(mut self, dir: bool, default: bool) -> Result<Option<PosixAcl>, Nfsstat4> {
        if self.empty && default {
            return Ok(None);
        }
        let perm = |bits: &Bits| perm_of(bits.allow, dir);
        let mut entries = Vec::with_capacity(4 + self.users.len() + self.groups.len());
        // The union of what the named entries and the group are allowed.
        let mut mask = 0;
        check_deny(self.owner.deny, true)?;
        entries.push(Entry {
            tag: Tag::UserObj,
            perm: perm(&self.owner),
        });
        self.users.sort_by_key(|(uid, _)| *uid);
        for (uid, bits) in &self.users {
            check_deny(bits.deny, false)?;
            entries.push(Entry {
                tag: Tag::User(*uid),
                perm: perm(bits),
            });
            mask |= bits.allow;
        }
        check_deny(self.group.deny, false)?;
        entries.push(Entry {
            tag: Tag::GroupObj,
            perm: perm(&self.group),
        });
        mask |= self.group.allow;
        self.groups.sort_by_key(|(gid, _)| *gid);
        for (gid, bits) in &self.groups {
            check_deny(bits.deny, false)?;
            entries.push(Entry {
                tag: Tag::Group(*gid),
                perm: perm(bits),
            });
            mask |= bits.allow;
        }
        if !self.users.is_empty() || !self.groups.is_empty() {
            entries.push(Entry {
                tag: Tag::Mask,
                perm: perm_of(mask, dir),
            });
        }
        check_deny(self.other.deny, false)?;
        entries.push(Entry {
            tag: Tag::Other,
            perm: perm(&self.other),
        });
        Ok(Some(PosixAcl { entries }))
    }
}

/// Refuses a DENY of what POSIX always grants: reading attributes and
/// the ACL, and the owner's writing them.
fn check_deny(denied: u32, owner: bool) -> Result<(), Nfsstat4> {
    let never = if owner {
        ACE4_READ_ATTRIBUTES | ACE4_READ_ACL | ACE4_WRITE_ATTRIBUTES | ACE4_WRITE_ACL
    } else {
        ACE4_READ_ATTRIBUTES | ACE4_READ_ACL
    };
    if denied & never != 0 {
        return Err(Nfsstat4::Attrnotsupp);
    }
    Ok(())
}

/// The access ACL and the default ACL (a directory's; `None`: remove it)
/// an NFSv4 ACL maps to, for a directory if `dir`.
pub fn to_posix(aces: &[Ace], dir: bool) -> Result<(PosixAcl, Option<PosixAcl>), Nfsstat4> {
    let mut effective = State::new();
    let mut default = State::new();
    for ace in aces {
        if ace.flag & !SUPPORTED_FLAGS != 0 {
            return Err(Nfsstat4::Attrnotsupp);
        }
        if ace.flag & INHERITANCE == 0 {
            effective.run(ace);
            continue;
        }
        if !dir {
            return Err(Nfsstat4::Attrnotsupp);
        }
        // FILE_INHERIT alone, or DIRECTORY_INHERIT alone, turns into
        // both: a POSIX default ACL is inherited by either.
        default.run(ace);
        if ace.flag & ACE4_INHERIT_ONLY_ACE == 0 {
            effective.run(ace);
        }
    }
    let access = effective.into_posix(dir, false)?.unwrap_or_default();
    let default = default.into_posix(dir, true)?;
    Ok((access, default))
}

/// The ACEs on the wire: the special `who`s by name, users and groups
/// named by `user` and `group` (the idmap's `owner` and `owner_group`).
pub fn to_wire(
    aces: &[Ace],
    user: impl Fn(u32) -> String,
    group: impl Fn(u32) -> String,
) -> Vec<Nfsace4> {
    aces.iter()
        .map(|ace| Nfsace4 {
            acetype: ace.acetype(),
            flag: ace.flag,
            access_mask: ace.mask,
            who: match ace.who {
                Who::Owner => Owner4::from(OWNER),
                Who::Group => Owner4::from(GROUP),
                Who::Everyone => Owner4::from(EVERYONE),
                Who::User(uid) => Owner4::from(user(uid).into_bytes()),
                Who::NamedGroup(gid) => Owner4::from(group(gid).into_bytes()),
            },
        })
        .collect()
}

/// The ACEs a client sent, `who`s resolved by `uid_of` and `gid_of`
/// (`BADOWNER` for a name they do not know; a group if the ACE has
/// `ACE4_IDENTIFIER_GROUP`). AUDIT and ALARM ACEs are `ATTRNOTSUPP`
/// (`aclsupport` does not offer them).
pub fn from_wire(
    aces: &[Nfsace4],
    uid_of: impl Fn(&[u8]) -> Result<u32, Nfsstat4>,
    gid_of: impl Fn(&[u8]) -> Result<u32, Nfsstat4>,
) -> Result<Vec<Ace>, Nfsstat4> {
    aces.iter()
        .map(|ace| {
            let allow = match ace.acetype {
                ACE4_ACCESS_ALLOWED_ACE_TYPE => true,
                ACE4_ACCESS_DENIED_ACE_TYPE => false,
                _ => return Err(Nfsstat4::Attrnotsupp),
            };
            let name = ace.who.as_bytes();
            let who = match name {
                b"OWNER@" => Who::Owner,
                b"GROUP@" => Who::Group,
                b"EVERYONE@" => Who::Everyone,
                _ if ace.flag & ACE4_IDENTIFIER_GROUP != 0 => Who::NamedGroup(gid_of(name)?),
                _ => Who::User(uid_of(name)?),
            };
            Ok(Ace {
                allow,
                flag: ace.flag,
                mask: ace.access_mask,
                who,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(Tag, u16)]) -> PosixAcl {
        PosixAcl::of(entries)
    }

    fn ace(allow: bool, flag: u32, mask: u32, who: Who) -> Ace {
        Ace {
            allow,
            flag,
            mask,
            who,
        }
    }

    #[test]
    fn a_mode_maps_to_allows_and_the_denies_that_keep_it_exact() {
        // 0640: the owner may read and write, the group read, others
        // nothing; nothing to deny the owner (no later ACE grants what it
        // lacks), nothing for the group (others have nothing).
        let aces = from_posix(&PosixAcl::from_mode(0o640), None, false);
        let base = ANYONE_MODE;
        assert_eq!(
            aces,
            vec![
                ace(
                    true,
                    0,
                    base | OWNER_MODE | READ_MODE | WRITE_MODE,
                    Who::Owner
                ),
                ace(true, 0, base | READ_MODE, Who::Group),
                ace(true, 0, base, Who::Everyone),
            ]
        );
        // 0604: others may read what the group may not: the group is
        // denied it after the ALLOWs.
        let aces = from_posix(&PosixAcl::from_mode(0o604), None, false);
        assert_eq!(aces[2], ace(false, 0, READ_MODE, Who::Group));
        // 0070 on a directory: the owner is denied what the group has,
        // writing with DELETE_CHILD.
        let aces = from_posix(&PosixAcl::from_mode(0o070), None, true);
        assert_eq!(
            aces[0],
            ace(
                false,
                0,
                READ_MODE | WRITE_MODE | ACE4_DELETE_CHILD | EXECUTE_MODE,
                Who::Owner
            )
        );
    }

    #[test]
    fn named_entries_and_a_default_acl_round_trip() {
        let access = acl(&[
            (Tag::UserObj, 7),
            (Tag::User(1001), 6),
            (Tag::User(1000), 4),
            (Tag::GroupObj, 5),
            (Tag::Group(50), 7),
            (Tag::Mask, 6),
            (Tag::Other, 0),
        ]);
        let default = acl(&[
            (Tag::UserObj, 7),
            (Tag::GroupObj, 5),
            (Tag::Group(60), 5),
            (Tag::Mask, 5),
            (Tag::Other, 5),
        ]);
        let aces = from_posix(&access, Some(&default), true);
        assert!(aces
            .iter()
            .filter(|a| a.flag & ACE4_INHERIT_ONLY_ACE != 0)
            .all(|a| a.flag & INHERITANCE == INHERITANCE));
        let (a, d) = to_posix(&aces, true).expect("maps back");
        // Named entries come back limited by the mask and sorted; the
        // mask is what they and the group may have.
        let sorted = acl(&[
            (Tag::UserObj, 7),
            (Tag::User(1000), 4),
            (Tag::User(1001), 6),
            (Tag::GroupObj, 4),
            (Tag::Group(50), 6),
            (Tag::Mask, 6),
            (Tag::Other, 0),
        ]);
        assert_eq!(a, sorted);
        assert!(a.is_valid());
        assert_eq!(d, Some(default));
        // Without a default ACL, none comes back: it is removed.
        let (_, d) = to_posix(&from_posix(&access, None, true), true).expect("maps back");
        assert_eq!(d, None);
    }

    #[test]
    fn on_the_wire_who_is_named() {
        let aces = [
            ace(true, 0, READ_MODE, Who::Owner),
            ace(
                false,
                ACE4_IDENTIFIER_GROUP,
                WRITE_MODE,
                Who::NamedGroup(50),
            ),
            ace(true, 0, EXECUTE_MODE, Who::User(1000)),
            ace(true, 0, 0, Who::Everyone),
        ];
        let wire = to_wire(&aces, |uid| format!("u{uid}"), |gid| format!("g{gid}"));
        let names: Vec<_> = wire.iter().map(|a| a.who.as_bytes().to_vec()).collect();
        assert_eq!(
            names,
            [&b"OWNER@"[..], b"g50", b"u1000", b"EVERYONE@"].map(<[u8]>::to_vec)
        );
        assert_eq!(wire[1].acetype, ACE4_ACCESS_DENIED_ACE_TYPE);
        let number = |prefix: u8| {
            move |name: &[u8]| match name.split_first() {
                Some((&p, rest)) if p == prefix => std::str::from_utf8(rest)
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .ok_or(Nfsstat4::Badowner),
                _ => Err(Nfsstat4::Badowner),
            }
        };
        assert_eq!(
            from_wire(&wire, number(b'u'), number(b'g')),
            Ok(aces.to_vec())
        );
        let mut audit = wire.clone();
        audit[0].acetype = 2;
        assert_eq!(
            from_wire(&audit, number(b'u'), number(b'g')),
            Err(Nfsstat4::Attrnotsupp)
        );
        let mut stranger = wire;
        stranger[2].who = Owner4::from("nobody-here");
        assert_eq!(
            from_wire(&stranger, number(b'u'), number(b'g')),
            Err(Nfsstat4::Badowner)
        );
    }

    #[test]
    fn every_mode_round_trips() {
        for mode in 0..0o1000 {
            for dir in [false, true] {
                let posix = PosixAcl::from_mode(mode);
                let (back, _) = to_posix(&from_posix(&posix, None, dir), dir).expect("maps");
                assert_eq!(back, posix, "mode {mode:o} dir {dir}");
            }
        }
    }

    #[test]
    fn what_posix_cannot_say_is_refused() {
        let audit_flag = 0x10;
        for (aces, dir) in [
            // An AUDIT-only flag.
            (vec![ace(true, audit_flag, READ_MODE, Who::Owner)], false),
            // Inheritance on a file.
            (
                vec![ace(true, ACE4_FILE_INHERIT_ACE, READ_MODE, Who::Owner)],
                false,
            ),
            // Denying anyone reading the attributes.
            (
                vec![ace(false, 0, ACE4_READ_ATTRIBUTES, Who::Everyone)],
                false,
            ),
            // Denying the owner writing the ACL.
            (vec![ace(false, 0, ACE4_WRITE_ACL, Who::Owner)], true),
        ] {
            assert_eq!(to_posix(&aces, dir), Err(Nfsstat4::Attrnotsupp), "{aces:?}");
        }
    }

    #[test]
    fn a_permission_needs_all_its_bits_and_everyone_grants_all() {
        // WRITE_DATA without APPEND_DATA is not POSIX write; EVERYONE@
        // gives the group and the others what it allows.
        let aces = [
            ace(true, 0, READ_MODE | ACE4_WRITE_DATA, Who::Owner),
            ace(true, 0, EXECUTE_MODE, Who::Everyone),
        ];
        let (a, d) = to_posix(&aces, false).expect("maps");
        assert_eq!(
            a,
            acl(&[(Tag::UserObj, 5), (Tag::GroupObj, 1), (Tag::Other, 1)])
        );
        assert_eq!(d, None);
        // A DENY first wins over a later ALLOW.
        let aces = [
            ace(false, 0, READ_MODE, Who::Group),
            ace(true, 0, READ_MODE, Who::Everyone),
        ];
        let (a, _) = to_posix(&aces, false).expect("maps");
        assert_eq!(
            a,
            acl(&[(Tag::UserObj, 0), (Tag::GroupObj, 0), (Tag::Other, 4)])
        );
    }
}
