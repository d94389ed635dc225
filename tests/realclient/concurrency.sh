#!/bin/sh
# Shared-file concurrency through the real Linux NFSv3 client (busybox sh in
# the realclient guest; run by run.sh after workload.sh in the same boot).
# The IOR-hard pattern: several processes write 47008-byte records
# interleaved into one file, some with O_DIRECT and some through the page
# cache; record i of writer c lands at offset (i*N + c) * 47008.
#
#   1. dd: CONC_PROCS processes (even c: dd oflag=direct, odd c: buffered dd),
#      CONC_RECORDS records each, into an empty file (every write extends it
#      or fills in below EOF). Record (c, i) holds `yes "dionfs c=<c> i=<i>"`.
#   2. fio: CONC_FIO_JOBS jobs (processes, all O_DIRECT; even: libaio
#      iodepth=4, odd: psync) with rw=write:<skip>, CONC_FIO_RECORDS records
#      each, into a file sized up front. Job c's records repeat
#      "dionfs fio job <c>|".
#   3. the same with 1536-byte records (CONC_1536_RECORDS each), so that
#      adjacent writes of different processes race on the same 4 KiB blocks. (No buffered fio jobs: fio opens files O_RDWR,
#      so the client reads a partially written page first and may then write
#      the whole page back, stale neighbour bytes included - the client's own
#      close-to-open semantics, not a server property.)
# The buffered writers of phase 1 need a lock held on the file: a page the
# client creates beyond its EOF is zero-filled and marked up to date, and
# with no lock on the file the client then "extends" the write to the whole
# page (fs/nfs/write.c, nfs_can_extend_write), sending zeros over the tail of
# the O_DIRECT neighbour record before it. Any lock other than a whole-file
# write lock turns that off (newer kernels also have `noalignwrite`; the
# guest's 6.1 has not), so phase 1 runs under a shared flock(2) of its own.
# After each phase: sync, drop the guest's caches, check the size, and read
# the whole file back with O_DIRECT into $OUT_DIR/<phase>.readback; the host
# (tests/realclient/conc_verify.py, reading $OUT_DIR/conc.manifest) compares
# that and the server's file with the model byte for byte. The guest checks what it can itself: exit codes,
# sizes, and from /proc/self/mountstats that the O_DIRECT writers' bytes
# really went out as direct writes. Files stay in $NFS_MNT/conc for the host.
set -u
MNT=${NFS_MNT:-/mnt/nfs}
OUT=${OUT_DIR:-/tmp}
D="$MNT/conc"
R=47008
NP=${CONC_PROCS:-8}
NR=${CONC_RECORDS:-48}
FJ=${CONC_FIO_JOBS:-6}
FR=${CONC_FIO_RECORDS:-128}
F1536=${CONC_1536_RECORDS:-1024}
START=$(date +%s)

fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok   $* ($(( $(date +%s) - START ))s)"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# bytes: normalread normalwrite directread directwrite serverread serverwrite ...
direct_written() {
    awk -v m="$MNT" '$1 == "device" && $5 == m { on = 1; next }
                     $1 == "device" { on = 0 }
                     on && $1 == "bytes:" { print $5; exit }' /proc/self/mountstats
}
readback() { # readback FILE NAME: the whole file, O_DIRECT, to $OUT/NAME.readback
    dd if="$1" of="$OUT/$2.readback" bs=1048576 iflag=direct 2>/dev/null || fail "O_DIRECT read of $1"
}

echo "== concurrency: $NP dd writers x $NR records, $FJ fio jobs x $FR records (${R} bytes), x $F1536 records (1536 bytes)"
rm -rf "$D"
mkdir "$D" || fail "mkdir $D"
: >"$OUT/conc.manifest"   # one line per phase for the host: NAME KIND RECSIZE WRITERS RECORDS

# ---------------------------------------------------------------- 1. dd writers, extending
F="$D/dd.shared"
: >"$F" || fail "create $F"
exec 9<"$F" || fail "open $F"
flock -s 9 || fail "shared flock of $F"
writer() {
    c=$1
    fl=""
    [ $((c % 2)) = 0 ] && fl="oflag=direct"
    i=0
    while [ $i -lt "$NR" ]; do
        # shellcheck disable=SC2086
        yes "dionfs c=$c i=$i" | head -c $R |
            dd of="$F" bs=$R seek=$((i * NP + c)) count=1 conv=notrunc iflag=fullblock $fl 2>"/tmp/dd.err.$c" ||
            { echo "writer $c record $i: dd failed: $(cat "/tmp/dd.err.$c")"; return 1; }
        i=$((i + 1))
    done
}
d0=$(direct_written)
pids=""
c=0
while [ $c -lt "$NP" ]; do
    writer $c &
    pids="$pids $!"
    c=$((c + 1))
done
for p in $pids; do wait "$p" || fail "a dd writer failed"; done
exec 9<&-   # the last descriptor of the flock: it is released
drop
d1=$(direct_written)
ndirect=$(( (NP + 1) / 2 ))
[ $((d1 - d0)) = $((ndirect * NR * R)) ] ||
    fail "mountstats: $((d1 - d0)) bytes written with O_DIRECT, expected $((ndirect * NR * R))"
size=$(stat -c %s "$F")
[ "$size" = $((NP * NR * R)) ] || fail "dd.shared: size $size, expected $((NP * NR * R))"
readback "$F" dd
echo "dd dd $R $NP $NR" >>"$OUT/conc.manifest"
ok "$NP processes ($ndirect O_DIRECT) x $NR interleaved ${R}-byte records, extending; size $size"

# ---------------------------------------------------------------- 2./3. fio jobs, pre-sized file
fio_phase() { # fio_phase NAME RECSIZE JOBS RECORDS
    name=$1 rs=$2 nj=$3 nr=$4
    F="$D/$name.shared"
    total=$((nj * nr * rs))
    : >"$F" && truncate -s $total "$F" || fail "create $F"
    JOB=/tmp/$name.fio
    {
        echo "[global]"
        echo "filename=$F"
        echo "bs=$rs"
        echo "rw=write:$((rs * (nj - 1)))"
        echo "io_size=$((nr * rs))"
        echo "fallocate=none"
        echo "direct=1"
        c=0
        while [ $c -lt "$nj" ]; do
            echo "[c$c]"
            echo "offset=$((c * rs))"
            echo "size=$((total - c * rs))"
            echo "buffer_pattern=\"dionfs fio job $c|\""
            if [ $((c % 2)) = 0 ]; then
                echo "ioengine=libaio"
                echo "iodepth=4"
            else
                echo "ioengine=psync"
            fi
            c=$((c + 1))
        done
    } >"$JOB"
    d0=$(direct_written)
    fio --output="/tmp/$name.out" "$JOB" || { cat "/tmp/$name.out"; fail "fio ($name)"; }
    drop
    d1=$(direct_written)
    [ $((d1 - d0)) = $total ] ||
        fail "$name: mountstats: $((d1 - d0)) bytes written with O_DIRECT by fio, expected $total"
    size=$(stat -c %s "$F")
    [ "$size" = $total ] || fail "$name.shared: size $size, expected $total"
    readback "$F" "$name"
    echo "$name fio $rs $nj $nr" >>"$OUT/conc.manifest"
    ok "$name: $nj O_DIRECT fio jobs (libaio iodepth 4 / psync) x $nr interleaved ${rs}-byte records"
}
fio_phase fio "$R" "$FJ" "$FR"
# 1536-byte records: 2-3 writers' records share every 4 KiB block
fio_phase fio1536 1536 "$FJ" "$F1536"
echo "CONCURRENCY: DONE in $(( $(date +%s) - START ))s (host verifies the bytes)"
