"""NFSv4 ACLs (`dacl`, `acl`, `aclsupport`) through nfs-rs's typed ACL
client, mapped to and from the POSIX ACLs the export's file system keeps
as knfsd maps them: what a client sets is what `getfacl` shows on the
server, what `setfacl` sets there is what a client reads, and what POSIX
cannot say is refused.

The export is a temporary directory (ext4 here, which keeps POSIX ACLs);
ids are numeric (the default idmap)."""

from __future__ import annotations

import os
import subprocess

import nfs_rs
import pytest
from nfs_rs import AceFlags, AceMask, AceType, Acl41Flags, NfsAce, NfsAcl41
from test_nfs4_data import server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.dionfs_only

ANYONE = AceMask.READ_ATTRIBUTES | AceMask.READ_ACL | AceMask.SYNCHRONIZE
OWNER_EXTRA = AceMask.WRITE_ATTRIBUTES | AceMask.WRITE_ACL
R = AceMask.READ_DATA
W = AceMask.WRITE_DATA | AceMask.APPEND_DATA
X = AceMask.EXECUTE
INHERIT = AceFlags.FILE_INHERIT | AceFlags.DIRECTORY_INHERIT


def allow(who, mask, flags=AceFlags(0)):
    return NfsAce(AceType.ALLOW, flags, mask, who)


def deny(who, mask, flags=AceFlags(0)):
    return NfsAce(AceType.DENY, flags, mask, who)


def getfacl(path, default=False):
    """The server's view: `getfacl -n` entries, comments left out."""
    args = ["getfacl", "-n", "-p", "-c"] + (["-d"] if default else []) + [path]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and not line.startswith("#")]


def made_by(client, name, mode):
    client.touch(name)
    client.chmod(name, mode)


def test_a_mode_reads_as_the_aces_knfsd_gives_it(server):
    c = server.v4()
    made_by(c, "f", 0o604)
    got = c.getdacl("f")
    assert got.flags == Acl41Flags(0)
    # Others may read what the group may not: the group is denied it
    # after every group's ALLOW.
    assert got.aces == (
        allow("OWNER@", ANYONE | OWNER_EXTRA | R | W),
        allow("GROUP@", ANYONE),
        deny("GROUP@", R),
        allow("EVERYONE@", ANYONE | R),
    )


def test_an_acl_a_client_sets_is_what_getfacl_shows(server):
    c = server.v4(uid=1000, gid=1000)
    path = os.path.join(server.export, "shared")
    made_by(c, "shared", 0o600)
    c.setdacl("shared", NfsAcl41(Acl41Flags(0), (
        allow("OWNER@", R | W),
        allow("1001", R),
        allow("GROUP@", R),
        allow("50", R | W, AceFlags.IDENTIFIER_GROUP),
        allow("EVERYONE@", AceMask(0)),
    )))
    assert getfacl(path) == [
        "user::rw-", "user:1001:r--", "group::r--", "group:50:rw-", "mask::rw-", "other::---",
    ]
    # The mode's group bits are the mask now, as for a local setfacl.
    assert os.stat(path).st_mode & 0o777 == 0o660
    # Read back, the named entries are there, limited by the mask.
    aces = c.getdacl("shared").aces
    assert allow("1001", ANYONE | R) in aces
    assert allow("50", ANYONE | R | W, AceFlags.IDENTIFIER_GROUP) in aces


def test_an_acl_set_on_the_server_is_what_a_client_reads(server):
    path = os.path.join(server.export, "local")
    with open(path, "w"):
        pass
    os.chmod(path, 0o640)
    subprocess.run(["setfacl", "-m", "u:1002:rx", path], check=True)
    aces = server.v4().getdacl("local").aces
    # The owner (rw-) is denied what later entries grant and it lacks
    # (user 1002's x); user 1002 (r-x, and the mask setfacl computed is
    # r-x) needs no DENY: nothing after it grants w.
    assert aces == (
        deny("OWNER@", X),
        allow("OWNER@", ANYONE | OWNER_EXTRA | R | W),
        allow("1002", ANYONE | R | X),
        allow("GROUP@", ANYONE | R),
        allow("EVERYONE@", ANYONE),
    )


def test_a_directory_s_inheritable_aces_are_its_default_acl(server):
    c = server.v4(uid=1000, gid=1000)
    d = os.path.join(server.export, "d")
    c.mkdir("d")
    c.chmod("d", 0o755)
    c.setdacl("d", NfsAcl41(Acl41Flags(0), (
        allow("OWNER@", R | W | X | AceMask.DELETE_CHILD),
        allow("GROUP@", R | X),
        allow("EVERYONE@", R | X),
        allow("OWNER@", R | W | X | AceMask.DELETE_CHILD, INHERIT | AceFlags.INHERIT_ONLY),
        allow("1001", R | W | X | AceMask.DELETE_CHILD, INHERIT | AceFlags.INHERIT_ONLY),
        allow("GROUP@", R | X, INHERIT | AceFlags.INHERIT_ONLY),
        allow("EVERYONE@", AceMask(0), INHERIT | AceFlags.INHERIT_ONLY),
    )))
    assert getfacl(d, default=True) == [
        "user::rwx", "user:1001:rwx", "group::r-x", "mask::rwx", "other::---",
    ]
    # A file made in it inherits (the kernel applies the default ACL).
    f = os.path.join(d, "child")
    c.touch("d/child")
    assert "user:1001:rwx" in " ".join(getfacl(f))
    # Read back, the inherited ACEs are inherit-only and on both kinds.
    back = [a for a in c.getdacl("d").aces if a.flags & AceFlags.INHERIT_ONLY]
    assert back and all(a.flags & INHERIT == INHERIT for a in back)
    # No inheritable ACE: the default ACL is removed.
    c.setdacl("d", NfsAcl41(Acl41Flags(0), (allow("OWNER@", R | W | X),)))
    assert getfacl(d, default=True) == []


def test_what_posix_cannot_say_and_strangers_are_refused(server):
    owner = server.v4(uid=1000, gid=1000)
    path = os.path.join(server.export, "mine")
    made_by(owner, "mine", 0o644)
    before = getfacl(path)
    for bad in (
        (NfsAce(AceType.AUDIT, AceFlags.SUCCESSFUL_ACCESS, R, "OWNER@"),),
        (allow("OWNER@", R, INHERIT),),  # inheritance on a file
        (deny("EVERYONE@", AceMask.READ_ATTRIBUTES),),
    ):
        with pytest.raises(nfs_rs.NfsError, match="NFS4ERR_ATTRNOTSUPP"):
            owner.setdacl("mine", NfsAcl41(Acl41Flags(0), bad))
    with pytest.raises(nfs_rs.NfsError) as err:
        owner.setdacl("mine", NfsAcl41(Acl41Flags(0), (allow("no-such-user@nowhere", R),)))
    assert "bad owner" in str(err.value), err.value
    # Only the owner may change it (the kernel checks, as the caller).
    stranger = server.v4(uid=1001, gid=1001)
    with pytest.raises(PermissionError):
        stranger.setdacl("mine", NfsAcl41(Acl41Flags(0), (allow("EVERYONE@", R | W),)))
    assert getfacl(path) == before
