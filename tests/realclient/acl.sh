#!/bin/sh
# NFSv4 ACLs from the Linux client's own tools (nfs4-acl-tools, busybox sh
# in the realclient guest, cwd /mnt/nfs): what nfs4_getfacl shows of a
# mode, ACEs nfs4_setfacl adds (a named user on a file; a directory's
# inheritable ACEs, inherited by a file made in it), and a refused AUDIT
# ACE. Leaves $MNT/acl for run.sh, which checks with getfacl on the server
# what the files' POSIX ACLs became, then removes it. Copies what
# nfs4_getfacl printed to $OUT_DIR. "FAIL: <what>" and exit 1 on a miss.
set -u
MNT=${NFS_MNT:-/mnt/nfs}
A="$MNT/acl"

fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok   acl: $*"; }
command -v nfs4_getfacl >/dev/null ||
    fail "no nfs4_getfacl in the guest (scripts/test setup builds it in: RC_EXTRA_BINS)"

rm -rf "$A"
mkdir "$A" || fail "mkdir $A"
cd "$A" || fail "cd $A"

# A mode, read as ACEs: 0604 gives the group a DENY of what others read.
touch f && chmod 604 f || fail "touch/chmod f"
nfs4_getfacl f >"$OUT_DIR/acl-mode.txt" || fail "nfs4_getfacl f"
grep -q '^A::OWNER@:' "$OUT_DIR/acl-mode.txt" || fail "no OWNER@ ALLOW: $(cat "$OUT_DIR/acl-mode.txt")"
grep -q '^D::GROUP@:r' "$OUT_DIR/acl-mode.txt" || fail "no GROUP@ DENY of read: $(cat "$OUT_DIR/acl-mode.txt")"
ok "a 0604 mode reads as ALLOWs and the group's DENY"

# A named user added on a file.
chmod 640 f || fail "chmod 640 f"
nfs4_setfacl -a "A::1001:R" f || fail "nfs4_setfacl -a A::1001:R f"
nfs4_getfacl f >"$OUT_DIR/acl-file.txt" || fail "nfs4_getfacl f after"
grep -q '^A::1001:r' "$OUT_DIR/acl-file.txt" || fail "user 1001 not read back: $(cat "$OUT_DIR/acl-file.txt")"
ok "ACE for user 1001 set and read back"

# Inheritable ACEs on a directory; a file made in it inherits them.
mkdir d || fail "mkdir d"
nfs4_setfacl -a "A:fd:OWNER@:RWX" d || fail "nfs4_setfacl OWNER@ on d"
nfs4_setfacl -a "A:fd:1002:RWX" d || fail "nfs4_setfacl 1002 on d"
touch d/child || fail "touch d/child"
nfs4_getfacl d/child >"$OUT_DIR/acl-child.txt" || fail "nfs4_getfacl d/child"
grep -q '^A::1002:' "$OUT_DIR/acl-child.txt" || fail "d/child did not inherit 1002: $(cat "$OUT_DIR/acl-child.txt")"
ok "a directory's inheritable ACEs are inherited"

# What a POSIX ACL cannot say is refused, and nothing changes.
before=$(nfs4_getfacl f)
if nfs4_setfacl -a "U:S:OWNER@:r" f >"$OUT_DIR/acl-audit.err" 2>&1; then
    fail "an AUDIT ACE was accepted"
fi
[ "$(nfs4_getfacl f)" = "$before" ] || fail "the refused ACE changed the ACL"
ok "an AUDIT ACE is refused: $(head -1 "$OUT_DIR/acl-audit.err")"
