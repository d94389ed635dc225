#!/bin/sh
# Real Linux NFSv3 client workload (busybox sh in the realclient guest, cwd
# /mnt/nfs). Every check compares what the server returns with what was
# written, after dropping the guest's page cache so reads go to the server.
# Stops at the first mismatch with "FAIL: <what>" and exit 1.
#
# Tunables (environment): BIG_MB=256 (size of the random file), NDIR=2000.
set -u
MNT=${NFS_MNT:-/mnt/nfs}
BIG_MB=${BIG_MB:-256}
NDIR=${NDIR:-2000}
W="$MNT/workload"
T=/tmp/wl
START=$(date +%s)

fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok   $* ($(( $(date +%s) - START ))s)"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
md5() { md5sum <"$1" | cut -d' ' -f1; }

echo "== guest $(uname -r), $(nproc) vCPU; $(grep " $MNT " /proc/mounts)"
rm -rf "$W" "$T"
mkdir "$W" "$T" || fail "mkdir $W"

# ---------------------------------------------------------------- big random file
# One pass: generate, write to the server and checksum at the same time.
sum=$(dd if=/dev/urandom bs=1M count="$BIG_MB" 2>/dev/null | tee "$W/big" | md5sum | cut -d' ' -f1)
[ "$(stat -c %s "$W/big")" = $((BIG_MB * 1048576)) ] || fail "size of big: $(stat -c %s "$W/big")"
drop
[ "$(md5 "$W/big")" = "$sum" ] || fail "md5 of ${BIG_MB} MiB random file after drop_caches"
ok "write + read back ${BIG_MB} MiB random file (md5)"

# ---------------------------------------------------------------- append / overwrite, mirrored locally
dd if=/dev/urandom of="$T/m" bs=4096 count=1000 2>/dev/null   # 4000 KiB reference copy
cp "$T/m" "$W/m" || fail "cp to server"
edit() { # edit SEEK_BYTES COUNT_BYTES: same random patch into both copies, in place
    dd if=/dev/urandom of="$T/patch" bs="$2" count=1 2>/dev/null
    dd if="$T/patch" of="$T/m" bs=1 seek="$1" conv=notrunc 2>/dev/null
    dd if="$T/patch" of="$W/m" bs=1 seek="$1" conv=notrunc 2>/dev/null || fail "dd conv=notrunc at $1"
}
edit 1 10; edit 4095 2; edit 8191 47008; edit 1048575 4097; edit 4095999 1
dd if=/dev/urandom of="$T/tail" bs=1000 count=7 2>/dev/null
cat "$T/tail" >>"$T/m"; cat "$T/tail" >>"$W/m" || fail "append"
printf 'last line\n' >>"$T/m"; printf 'last line\n' >>"$W/m"
drop
[ "$(stat -c %s "$W/m")" = "$(stat -c %s "$T/m")" ] || fail "size after overwrite+append: $(stat -c %s "$W/m") != $(stat -c %s "$T/m")"
[ "$(md5 "$W/m")" = "$(md5 "$T/m")" ] || fail "content after in-place overwrites + appends"
ok "in-place overwrite (dd conv=notrunc, misaligned) + append"

# ---------------------------------------------------------------- truncate
truncate -s 5000 "$W/m" && truncate -s 5000 "$T/m" || fail "truncate shrink"
truncate -s 70000 "$W/m" && truncate -s 70000 "$T/m" || fail "truncate extend"
drop
[ "$(stat -c %s "$W/m")" = 70000 ] || fail "size after truncate: $(stat -c %s "$W/m")"
[ "$(md5 "$W/m")" = "$(md5 "$T/m")" ] || fail "content after truncate (hole must read as zeros)"
ok "truncate shrink + extend"

# ---------------------------------------------------------------- trees and renames
mkdir -p "$W/a/b/c/d" "$W/x/y" || fail "mkdir -p"
i=0; while [ $i -lt 10 ]; do echo "file $i" >"$W/a/b/c/f$i"; i=$((i + 1)); done
mv "$W/a/b/c" "$W/x/y/c2" || fail "mv dir across dirs"
mv "$W/x/y/c2/f3" "$W/a/f3.moved" || fail "mv file across dirs"
[ -d "$W/x/y/c2/d" ] && [ ! -e "$W/a/b/c" ] || fail "tree after mv"
[ "$(cat "$W/a/f3.moved")" = "file 3" ] || fail "content after mv"
[ "$(ls "$W/x/y/c2" | wc -l)" = 10 ] || fail "entries after mv: $(ls "$W/x/y/c2" | tr '\n' ' ')"
mv "$W/a/f3.moved" "$W/x/y/c2/f4" || fail "mv over existing"
[ "$(cat "$W/x/y/c2/f4")" = "file 3" ] || fail "mv over existing: content"
ok "mkdir -p, mv of dirs and files across dirs, mv over a file"

# ---------------------------------------------------------------- links, modes
echo linked >"$W/orig"
ln "$W/orig" "$W/x/hard" || fail "ln"
[ "$(stat -c %h "$W/orig")" = 2 ] || fail "link count $(stat -c %h "$W/orig") != 2"
[ "$(stat -c %i "$W/orig")" = "$(stat -c %i "$W/x/hard")" ] || fail "hard link inode"
rm "$W/orig"
drop
[ "$(stat -c %h "$W/x/hard")" = 1 ] && [ "$(cat "$W/x/hard")" = linked ] || fail "hard link after rm of the original"
ln -s ../a/nowhere "$W/x/sym" || fail "ln -s"
[ "$(readlink "$W/x/sym")" = ../a/nowhere ] || fail "readlink: $(readlink "$W/x/sym")"
ln -s hard "$W/x/sym2" && [ "$(cat "$W/x/sym2")" = linked ] || fail "follow symlink"
chmod 640 "$W/x/hard" || fail "chmod"
drop
[ "$(stat -c %a "$W/x/hard")" = 640 ] || fail "mode $(stat -c %a "$W/x/hard") != 640"
chmod 755 "$W/x" && [ "$(stat -c %a "$W/x")" = 755 ] || fail "chmod dir"
ok "hard links (count, inode), symlinks (readlink, follow), chmod"

# ---------------------------------------------------------------- a big directory
mkdir "$W/many" || fail "mkdir many"
( cd "$W/many" && i=0 && while [ $i -lt "$NDIR" ]; do : >"e$i.with-a-longer-name"; i=$((i + 1)); done ) ||
    fail "creating $NDIR files"
drop
n=$(ls "$W/many" | wc -l)
[ "$n" = "$NDIR" ] || fail "readdir: $n entries, expected $NDIR"
[ "$(ls "$W/many" | sort -u | wc -l)" = "$NDIR" ] || fail "readdir returned duplicates"
ok "readdir of $NDIR entries"

# ---------------------------------------------------------------- concurrent writers
w() { dd if=/dev/urandom bs=64k count=160 2>/dev/null | tee "$W/par$1" | md5sum | cut -d' ' -f1 >"$T/par$1.md5"; }
w 1 & p1=$!
w 2 & p2=$!
wait $p1 || fail "writer 1"
wait $p2 || fail "writer 2"
drop
for k in 1 2; do
    [ "$(md5 "$W/par$k")" = "$(cat "$T/par$k.md5")" ] || fail "concurrent writer $k: content differs"
done
ok "two processes writing different files at once"

# ---------------------------------------------------------------- rm -rf
rm -rf "$W" || fail "rm -rf"
[ ! -e "$W" ] || fail "$W still exists after rm -rf"
rm -rf "$T"
ok "rm -rf of the whole tree"
echo "WORKLOAD: PASS in $(( $(date +%s) - START ))s"
