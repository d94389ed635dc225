#!/usr/bin/env python3
"""NLM locking with the real Linux client: the realclient guest mounts
dionfs *without* `nolock` (guest-run.sh --lock: the guest runs rpcbind and
rpc.statd, its kernel lockd talks NLM to dionfs, found through dionfs's port
mapper). One guest boot; the guest script and this host script take turns
through files in the guest's output directory (/job/out, a 9p share):

1. Connectathon-style cases between two processes on the guest
   (tests/tools/locktest.c `cthon`): conflicts, F_GETLK, upgrade and
   downgrade, a lock split by a partial unlock, EOF-to-infinity locks, a
   blocking lock granted by the server's GRANTED callback soon after the
   release.
2. A process on the server holds a range: the guest is denied it, gets the
   rest, and a blocked guest lock is granted once the server process lets
   go (the server's periodic retry, then GRANTED).
3. A guest lock is a real lock on the server: a process here is denied it.
4. flock(2): on the Linux client it is a whole-file POSIX lock, sent as
   NLM, so a guest process holding `flock -x` makes another's
   `flock -n -x` fail (the guest kernel decides that one without asking
   the server), a process here is denied the file, and gets it once the
   guest lets go.
5. The server restarts (SIGTERM, same state directory) while the guest
   holds a lock: dionfs tells the guest's statd (SM_NOTIFY), the guest's
   lockd reclaims in the grace period (a process here is denied the range
   again), and a new lock from the guest waits until the grace period ends.
6. The guest "reboots": `sm-notify -f` (the real one, from nfs-utils) tells
   dionfs, which drops the guest's locks: a process here gets the range.

With --peer ganesha the same guest script runs against NFS-Ganesha with
NLM (the harness's ganesha.sh, GANESHA_NLM=yes), to compare: the guest goes
on after a failed step and the table at the end says which steps Ganesha
passes. Step 5 restarts it with ganesha.sh stop and start, which is not
comparable (see Ganesha below).

With --vers 4.0, 4.1 or 4.2 the server serves NFSv3, 4.0, 4.1 and 4.2 (a config
file: a 10 s lease, so the client notices the restart within the grace
period) and the guest mounts that version: its locks travel inside NFSv4
(LOCK, LOCKT, LOCKU; a blocked F_SETLKW is polled by the client with LOCK),
and the steps are GUEST_SCRIPT_V4's:

1. the Connectathon-style cases between two guest processes;
2. a process on the server holds a range: denied to the guest for write
   and read locks, the rest granted, and a blocked guest lock is granted
   once the server process lets go (the client's next poll, within 60 s);
3. a guest write lock and a guest read lock as a process here sees them;
4. flock(2), a whole-file v4 lock: exclusive and shared flocks between
   guest processes and against a process here;
5. the export is mounted a second time, over NFSv3 with NLM, at /mnt/v3;
   the server is killed (SIGKILL) and started again on the same state
   directory while the guest holds a v4 fcntl lock, a v4 flock, an NLM
   lock and an open file: the guest reclaims all three locks in the one
   grace period (a process here is denied them again before it ends; the
   server's log counts the reclaiming v4 client), and a new LOCK on the
   open file waits until the grace period is over (a process here finds
   the range free until then);
6. one file through both mounts: locks taken through one conflict with
   the other's, both ways, for write and read locks; a blocked lock
   through one is granted soon after the other's holder lets go (an NLM
   waiter by the server's GRANTED call, within 10 s; a v4 waiter by its
   client's polling, within 20 s); bytes written through one are read
   through the other after close and open (close-to-open), both ways, and
   are on the server.

Usage (root): tests/realclient/locks.py [--peer ganesha] [--vers 3|4.0|4.1|4.2]
Env: DIONFS_BIN, RC_DIR. Exit status 0 = every (comparable) step passed.
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
from loopfs import LoopFs  # noqa: E402

RC = os.environ.get("RC_DIR", os.path.join(REPO, "..", "shared", "realclient"))
BIN = os.environ.get("DIONFS_BIN", os.path.join(REPO, "target", "debug", "dionfs"))
SERVER_IP, GUEST_IP = "192.168.77.1", "192.168.77.2"
NLM_PORT = 4045  # fixed, so the restarted server is where the client left it
GRACE = 20
# NFSv4: the Linux client renews its lease every 2/3 of it, and only then
# (or at its next call) finds a restarted server: the shortest lease the
# server accepts, so it reclaims well within GRACE.
LEASE = 10


def log(msg: str) -> None:
    print(f"[locks {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


GUEST_SCRIPT = r"""#!/bin/sh
KEEP_GOING=0  # 1 with --peer: a failure fails its step, and the script goes on
B=/mnt/nfs/bin
step() { echo "== $*"; }
fail() { echo "FAIL: $*"; [ $KEEP_GOING = 1 ] || exit 1; return 1; }
# sync NAME: tell the host, wait for its answer (a file it writes).
sync() { echo go > /job/out/req.$1; i=0
  while [ ! -e /job/out/ack.$1 ]; do sleep 0.2; i=$((i+1)); [ $i -lt 1500 ] || { fail "no host ack for $1"; return; }; done
  cat /job/out/ack.$1; }
expect() { [ "$1" = "$2" ] || { fail "$3: got '$1', expected '$2'"; return; }; echo "ok: $3"; }
# held FILE: wait until the holder writing to FILE says it holds its lock.
held() { i=0; while ! grep -q held $1; do sleep 0.2; i=$((i+1)); [ $i -lt 300 ] || { fail "no lock held ($1)"; return; }; done; }

step "1. two guest processes"
$B/locktest cthon /mnt/nfs/cthon.dat || fail "locktest cthon"

step "2. a process on the server holds [0,100) of shared.dat"
sync server-holds
expect "$($B/locktest try /mnt/nfs/shared.dat 0 10)" denied "a range a server process holds is denied"
expect "$($B/locktest try /mnt/nfs/shared.dat 200 10)" granted "the rest of the file is not"
echo go > /job/out/req.guest-waits
out=$($B/locktest wait /mnt/nfs/shared.dat 0 10) || fail "locktest wait"
echo "blocked guest lock: $out"
ms=${out##* after }; ms=${ms%% ms}
if [ "$ms" -ge 2000 ] 2>/dev/null && [ "$ms" -lt 20000 ]; then echo "ok: a blocked lock is granted once the server process lets go"
else fail "blocked lock granted after $ms ms (server released at 3 s)"; fi

step "3. the guest holds held.dat: the server sees it"
$B/locktest hold /mnt/nfs/held.dat 0 0 /mnt/nfs/release1 > /tmp/hold1.out 2>&1 &
H1=$!
held /tmp/hold1.out
expect "$(sync guest-holds)" denied "a process on the server is denied the guest's lock"

# flock(2) on NFS is a whole-file POSIX lock, sent to the server as NLM.
# util-linux flock (busybox has none); -E 10: its exit status on a conflict.
step "4. a guest process holds flock.dat with flock -x"
command -v flock || fail "no flock in the guest"
flock -x /mnt/nfs/flock.dat sh -c 'echo held; while [ ! -e /tmp/release-flock ]; do sleep 0.2; done' > /tmp/flock.out 2>&1 &
F=$!
held /tmp/flock.out
# (the guest's lockd refuses this one itself, from its own lock table, with
# no NLM call: the server's part is what the host sees, below)
flock -n -E 10 -x /mnt/nfs/flock.dat true
expect "$?" 10 "another guest process's flock -n -x conflicts"
expect "$(sync flock-held)" denied "a process on the server is denied a write lock on the file"
touch /tmp/release-flock; wait $F
expect "$(sync flock-released)" granted "once flock lets go, the server process gets it"

step "5. the server restarts; the guest reclaims"
expect "$(sync restart)" reclaimed "the guest's lock is held again after the restart"
t0=$(date +%s)
expect "$($B/locktest try /mnt/nfs/other.dat 0 10)" granted "a new lock after the grace period"
t1=$(date +%s)
echo "new lock during the grace period took $((t1 - t0)) s"
if [ $((t1 - t0)) -ge 3 ]; then echo "ok: new locks wait for the grace period"
else fail "a new lock was granted at once during the grace period"; fi
touch /mnt/nfs/release1; wait $H1

step "6. the guest reboots (sm-notify)"
$B/locktest hold /mnt/nfs/reboot.dat 0 0 /mnt/nfs/release2 > /tmp/hold2.out 2>&1 &
H2=$!
held /tmp/hold2.out
expect "$(sync before-reboot)" denied "the server sees the guest's lock before the reboot"
ls /var/lib/nfs/sm
$B/sm-notify -f -d || fail "sm-notify"
expect "$(sync rebooted)" granted "the server dropped the rebooted guest's locks"
touch /mnt/nfs/release2; wait $H2
echo "== end"
"""

# NFSv4 (guest-run.sh --vers 4.x --lock: the v4 mount at /mnt/nfs, and
# rpcbind and rpc.statd running for step 5's NFSv3 mount with NLM).
# Signal files are the guest's own (/tmp), so that no NFS call but the
# lease's renewal tells the client of the restart in step 5.
GUEST_SCRIPT_V4 = r"""#!/bin/sh
B=/mnt/nfs/bin
step() { echo "== $*"; }
fail() { echo "FAIL: $*"; exit 1; }
sync() { echo go > /job/out/req.$1; i=0
  while [ ! -e /job/out/ack.$1 ]; do sleep 0.2; i=$((i+1)); [ $i -lt 1500 ] || fail "no host ack for $1"; done
  cat /job/out/ack.$1; }
expect() { [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"; echo "ok: $3"; }
# held FILE [TICKS]: wait (at most TICKS/5 s) until FILE says its lock is held.
held() { i=0; while ! grep -qs held $1; do sleep 0.2; i=$((i+1)); [ $i -lt ${2:-300} ] || fail "no lock held ($1: $(cat $1))"; done; }
. /job/params.env

step "1. two guest processes"
$B/locktest cthon /mnt/nfs/cthon.dat || fail "locktest cthon"

step "2. a process on the server holds [0,100) of shared.dat"
sync server-holds
expect "$($B/locktest try /mnt/nfs/shared.dat 0 10)" denied "a range a server process holds is denied"
expect "$($B/locktest tryr /mnt/nfs/shared.dat 50 10)" denied "and a read lock in it too"
expect "$($B/locktest getlk /mnt/nfs/shared.dat 50 10)" "write 0 100" "F_GETLK (LOCKT) names the server process's lock"
expect "$($B/locktest try /mnt/nfs/shared.dat 200 10)" granted "the rest of the file is not"
echo go > /job/out/req.guest-waits
# The client polls a blocked v4 lock (1 s, 2 s, 4 s ... apart): bounded.
out=$(timeout 60 $B/locktest wait /mnt/nfs/shared.dat 0 10) || fail "locktest wait: not granted within 60 s"
echo "blocked guest lock: $out"
ms=${out##* after }; ms=${ms%% ms}
if [ "$ms" -ge 2000 ] 2>/dev/null && [ "$ms" -lt 20000 ]; then echo "ok: a blocked lock is granted once the server process lets go"
else fail "blocked lock granted after $ms ms (server released at 3 s)"; fi

step "3. the guest holds held.dat and a read lock on rd.dat: the server sees them"
$B/locktest hold /mnt/nfs/held.dat 0 0 /tmp/release1 > /tmp/hold1.out 2>&1 &
H1=$!
held /tmp/hold1.out
$B/locktest holdr /mnt/nfs/rd.dat 0 100 /tmp/release-rd > /tmp/holdrd.out 2>&1 &
HR=$!
held /tmp/holdrd.out
expect "$(sync guest-holds)" denied "a process on the server is denied the guest's write lock"
expect "$(sync guest-reads)" "shared granted, exclusive denied" "a server process shares the guest's read lock"
touch /tmp/release-rd; wait $HR

step "4. flock: whole-file v4 locks"
command -v flock >/dev/null || fail "no flock in the guest"
flock -x /mnt/nfs/flock.dat sh -c 'echo held; while [ ! -e /tmp/release-flock ]; do sleep 0.2; done' > /tmp/flock.out 2>&1 &
F=$!
held /tmp/flock.out
flock -n -E 10 -x /mnt/nfs/flock.dat true
expect "$?" 10 "another guest process's flock -n -x conflicts"
flock -n -E 10 -s /mnt/nfs/flock.dat true
expect "$?" 10 "and so does its flock -n -s"
expect "$(sync flock-held)" denied "a process on the server is denied a write lock on the file"
touch /tmp/release-flock; wait $F
expect "$(sync flock-released)" granted "once flock lets go, the server process gets it"
flock -s /mnt/nfs/flock.dat sh -c 'echo held; while [ ! -e /tmp/release-flocks ]; do sleep 0.2; done' > /tmp/flocks.out 2>&1 &
F=$!
held /tmp/flocks.out
flock -n -E 10 -s /mnt/nfs/flock.dat true
expect "$?" 0 "two guest processes share flock -s"
flock -n -E 10 -x /mnt/nfs/flock.dat true
expect "$?" 10 "flock -n -x conflicts with a shared flock"
expect "$(sync flocks-held)" "shared granted, exclusive denied" "a server process shares a shared flock"
touch /tmp/release-flocks; wait $F

step "5. the server is killed and restarted; the guest reclaims over v4 and NLM"
# The export mounted again over NFSv3 with NLM (step 6 uses it too): an
# NLM lock is reclaimed in the same grace period as the v4 ones.
mkdir -p /mnt/v3
mount -t nfs -o vers=3,proto=tcp,mountproto=tcp,mountvers=3,lock,addr=$RC_SERVER,mountaddr=$RC_SERVER \
  "$RC_SERVER:$RC_EXPORT" /mnt/v3 || fail "NFSv3 mount beside the v4 one"
grep ' /mnt/v3 ' /proc/mounts
$B/locktest hold /mnt/v3/nlm.dat 0 0 /tmp/release-nlm > /tmp/holdnlm.out 2>&1 &
HN=$!
held /tmp/holdnlm.out
flock -x /mnt/nfs/flock2.dat sh -c 'echo held; while [ ! -e /tmp/release-flock2 ]; do sleep 0.2; done' > /tmp/flock2.out 2>&1 &
F2=$!
held /tmp/flock2.out
# Opens other.dat now; asks for its lock once /tmp/go3 exists.
$B/locktest hold /mnt/nfs/other.dat 0 10 /tmp/release3 /tmp/go3 > /tmp/hold3.out 2>&1 &
H3=$!
i=0; while [ ! -e /mnt/nfs/other.dat ]; do sleep 0.2; i=$((i+1)); [ $i -lt 150 ] || fail "other.dat not opened"; done
expect "$(sync restart)" reclaimed "the guest's v4 fcntl lock and flock and its NLM lock are held again after the restart"
touch /tmp/go3
answer=$(sync new-lock)
echo "$answer"
case "$answer" in "after grace"*) echo "ok: a new lock waits for the grace period" ;;
  *) fail "a new lock during the grace period: $answer" ;; esac
held /tmp/hold3.out 300
echo "new lock: $(cat /tmp/hold3.out)"
touch /tmp/release1 /tmp/release-flock2 /tmp/release3 /tmp/release-nlm; wait $H1 $F2 $H3 $HN

step "6. the same file through the NFSv3 (NLM) and the NFSv4 mount"
n=0
# cross A B LOCK: a LOCK (hold: write, holdr: read) through mount A; what mount B gets.
cross() {
  n=$((n+1))
  $B/locktest $3 $1/mixed.dat 0 100 /tmp/release-x$n > /tmp/hold-x$n.out 2>&1 &
  X=$!
  held /tmp/hold-x$n.out
  if [ $3 = hold ]; then
    expect "$($B/locktest try $2/mixed.dat 50 10)" denied "a write lock through $1 excludes a write lock through $2"
    expect "$($B/locktest tryr $2/mixed.dat 0 10)" denied "and a read lock"
    expect "$($B/locktest getlk $2/mixed.dat 50 10)" "write 0 100" "F_GETLK through $2 names it"
  else
    expect "$($B/locktest tryr $2/mixed.dat 50 10)" granted "a read lock through $1 is shared by a read lock through $2"
    expect "$($B/locktest try $2/mixed.dat 0 10)" denied "and excludes a write lock"
    expect "$($B/locktest getlk $2/mixed.dat 50 10)" "read 0 100" "F_GETLK through $2 names it"
  fi
  expect "$($B/locktest getlk $2/mixed.dat 100 10)" unlocked "F_GETLK through $2 past it: unlocked"
  expect "$($B/locktest try $2/mixed.dat 100 10)" granted "the range past it is free through $2"
  touch /tmp/release-x$n; wait $X
  expect "$($B/locktest try $2/mixed.dat 0 10)" granted "released through $1, free through $2"
}
cross /mnt/nfs /mnt/v3 hold
cross /mnt/v3 /mnt/nfs hold
cross /mnt/nfs /mnt/v3 holdr
cross /mnt/v3 /mnt/nfs holdr
# blocked A B MAX_MS: B's F_SETLKW waits for A's holder, released at 2 s.
blocked() {
  n=$((n+1))
  $B/locktest hold $1/wait.dat 0 100 /tmp/release-x$n > /tmp/hold-x$n.out 2>&1 &
  X=$!
  held /tmp/hold-x$n.out
  (sleep 2; touch /tmp/release-x$n) &
  out=$(timeout 60 $B/locktest wait $2/wait.dat 0 10) || fail "a blocked lock through $2: not granted within 60 s"
  wait $X
  ms=${out##* after }; ms=${ms%% ms}
  if [ "$ms" -ge 1500 ] 2>/dev/null && [ "$ms" -lt $3 ]; then echo "ok: a blocked lock through $2 is granted $ms ms after $1's holder took it (released at 2 s)"
  else fail "a blocked lock through $2 granted after $ms ms ($1's holder released at 2 s)"; fi
}
# NLM: the server calls the client back (GRANTED) once the v4 lock goes.
blocked /mnt/nfs /mnt/v3 10000
# v4: the client polls (1 s, 2 s, 4 s ... apart).
blocked /mnt/v3 /mnt/nfs 20000
# Close-to-open: each read opens the file after the writer closed it; the
# reader's cache holds the old bytes (same size) each time.
dd if=/dev/urandom of=/tmp/a bs=4096 count=16 2>/dev/null
dd if=/dev/urandom of=/tmp/b bs=4096 count=16 2>/dev/null
dd if=/dev/urandom of=/tmp/c bs=4096 count=2 2>/dev/null
cp /tmp/a /mnt/nfs/coh.dat && cmp /tmp/a /mnt/v3/coh.dat && echo "ok: written through v4, read through v3" || fail "v4 -> v3"
cp /tmp/b /mnt/v3/coh.dat && cmp /tmp/b /mnt/nfs/coh.dat && echo "ok: overwritten through v3, read through v4" || fail "v3 -> v4"
cp /tmp/b /tmp/exp
dd if=/tmp/c of=/tmp/exp bs=4096 count=1 seek=2 conv=notrunc 2>/dev/null
dd if=/tmp/c of=/mnt/nfs/coh.dat bs=4096 count=1 seek=2 conv=notrunc 2>/dev/null
cmp /tmp/exp /mnt/v3/coh.dat && echo "ok: a block rewritten through v4, read through v3" || fail "v4 block -> v3"
dd if=/tmp/c of=/tmp/exp bs=4096 skip=1 count=1 seek=9 conv=notrunc 2>/dev/null
dd if=/tmp/c of=/mnt/v3/coh.dat bs=4096 skip=1 count=1 seek=9 conv=notrunc 2>/dev/null
cmp /tmp/exp /mnt/nfs/coh.dat && echo "ok: a block rewritten through v3, read through v4" || fail "v3 block -> v4"
cp /tmp/exp /job/out/coh.expected
expect "$(sync coherent)" same "the server's file has the bytes both mounts read"
umount /mnt/v3 || fail "umount /mnt/v3"
echo "== end"
"""


# struct flock (x86-64): l_type, l_whence, l_start, l_len, l_pid (padded).
FLOCK = "@hhqqi4x"


def host_could_lock(path: str, start: int, length: int, shared: bool = False) -> bool:
    """Whether a process here could take a lock (shared: a read lock) on
    the range now, asked with F_GETLK: nothing is taken, so a client's
    reclaim arriving meanwhile is not denied."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        os.fchmod(fd, 0o666)  # the guest's squashed root opens it too
        kind = fcntl.F_RDLCK if shared else fcntl.F_WRLCK
        arg = struct.pack(FLOCK, kind, os.SEEK_SET, start, length, 0)
        return struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, arg))[0] == fcntl.F_UNLCK
    finally:
        os.close(fd)


def host_denied(path: str, start: int, length: int) -> bool:
    """Whether a process here is denied a write lock on the range (POSIX
    locks of this process conflict with dionfs's OFD locks)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    os.fchmod(fd, 0o666)  # the guest's squashed root opens it too
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
        fcntl.lockf(fd, fcntl.LOCK_UN, length, start)
        return False
    except (BlockingIOError, PermissionError):
        return True
    finally:
        os.close(fd)


def wait_for(cond, timeout: float, what: str) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.3)
    log(f"timed out waiting for {what}")
    return False


class Server:
    def __init__(self, export: str, work: str, vers: str = "3"):
        self.export, self.work, self.proc, self.n, self.vers = export, work, None, 0, vers
        self.started = 0.0  # time.monotonic() of the last start

    def args(self) -> list[str]:
        state = os.path.join(self.work, "state")
        if self.vers == "3":
            return [self.export, "--listen", SERVER_IP, "--allow", GUEST_IP, "--state-dir", state]
        # lease_time has no flag: a config file.
        config = os.path.join(self.work, "dionfs.toml")
        with open(config, "w") as f:
            f.write(f'[server]\nlisten = "{SERVER_IP}"\nstate_dir = "{state}"\n'
                    f'versions = ["3", "4.0", "4.1", "4.2"]\nlease_time = {LEASE}\n\n'
                    f'[[export]]\npath = "{self.export}"\nclients = ["{GUEST_IP}"]\n')
        return ["--config", config]

    def log(self, n: int | None = None) -> str:
        with open(os.path.join(self.work, f"server{n or self.n}.log")) as f:
            return f.read()

    def start(self) -> None:
        self.n += 1
        ports = os.path.join(self.work, "ports.json")
        if os.path.exists(ports):
            os.unlink(ports)
        logf = open(os.path.join(self.work, f"server{self.n}.log"), "w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [os.path.join(RC, "netns.sh"), "exec", BIN, "serve", *self.args(),
             "--nlm-port", str(NLM_PORT), "--grace-period", str(GRACE), "--ports-file", ports],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=dict(os.environ, DIONFS_LOG="info,dionfs_server::nlm=debug"))
        if not wait_for(lambda: os.path.exists(ports) or self.proc.poll() is not None, 30, "ports file"):
            raise RuntimeError("server did not start")
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited: {open(logf.name).read()[-2000:]}")
        log(f"server {self.n} up: {json.load(open(ports))}")

    def kill(self) -> None:
        """As a crash: SIGKILL (netns.sh and ip netns exec exec the server)."""
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Ganesha:
    """The peer: NFS-Ganesha with NLM and its own rpcbind and rpc.statd, in
    the namespace, run by the harness's ganesha.sh on its own XFS.

    Not comparable: step 5. ganesha.sh stop and start keep the files and
    statd's list of monitored clients, but Ganesha keeps its locks in memory
    only, clears that list when it starts (SM_UNMON_ALL), and ganesha.sh
    runs its statd with --no-notify and Ganesha `Graceless = true`: no
    client is told to reclaim and there is no grace period.
    Step 6 fails as ganesha.sh sets Ganesha up (Enable_UDP = false, bound to
    192.168.77.1): the guest's SM_NOTIFY reaches statd, but statd calls the
    lock manager back over UDP on localhost and finds no NLM there ("service
    100021 not registered on localhost" with statd -d). With UDP on and
    GANESHA_BIND=0.0.0.0 Ganesha drops the guest's locks and passes."""
    not_comparable = {"5"}
    export = os.path.join(os.environ.get("RC_XFS_MNT", "/srv/realclient"), "export")
    logfile = os.path.join(os.environ.get("RC_CACHE", "/var/cache/realclient"), "ganesha", "ganesha.log")
    # What the guest script makes in the export (kept only for the run).
    files = ["bin/locktest", "bin/sm-notify", "cthon.dat", "shared.dat", "held.dat", "flock.dat",
             "other.dat", "reboot.dat", "release1", "release2"]

    def __init__(self, work: str):
        self.work, self.n = work, 0

    def start(self) -> None:
        self.n += 1
        subprocess.run([os.path.join(RC, "ganesha.sh"), "start"], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, GANESHA_NLM="yes"))
        log(f"ganesha {self.n} up")

    def stop(self) -> None:
        if self.n:  # start empties its log: keep each one
            subprocess.run([os.path.join(RC, "ganesha.sh"), "stop"], stdout=subprocess.DEVNULL)
            shutil.copy(self.logfile, os.path.join(self.work, f"server{self.n}.log"))

    def clear(self) -> None:
        for name in self.files:
            if os.path.exists(os.path.join(self.export, name)):
                os.unlink(os.path.join(self.export, name))
        if os.path.isdir(os.path.join(self.export, "bin")) and not os.listdir(os.path.join(self.export, "bin")):
            os.rmdir(os.path.join(self.export, "bin"))


def host_v3(export: str, server, request, ack) -> None:
    """The host's side of GUEST_SCRIPT: its requests answered in turn
    (`request(NAME)` waits for one, `ack(NAME, ANSWER)` answers it)."""
    shared = os.path.join(export, "shared.dat")
    # 2. hold [0,100) here; release 3 s after the guest starts waiting.
    if request("server-holds"):
        fd = os.open(shared, os.O_RDWR | os.O_CREAT, 0o666)
        os.fchmod(fd, 0o666)  # the guest's squashed root opens it too
        fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)
        ack("server-holds", "held")
        if request("guest-waits", 120):
            time.sleep(3)
            os.close(fd)  # releases the lock
    # 3. the guest's lock, seen from here.
    if request("guest-holds"):
        ack("guest-holds", "denied" if host_denied(os.path.join(export, "held.dat"), 0, 1) else "granted")
    # 4. the guest's flock, seen from here; then its release.
    flocked = os.path.join(export, "flock.dat")
    if request("flock-held"):
        ack("flock-held", "denied" if host_denied(flocked, 0, 0) else "granted")
    if request("flock-released"):
        ack("flock-released", "denied" if host_denied(flocked, 0, 0) else "granted")
    # 5. restart with the guest holding held.dat.
    if request("restart"):
        server.stop()
        log("server stopped; starting it again with the same state")
        server.start()
        reclaimed = wait_for(lambda: host_denied(os.path.join(export, "held.dat"), 0, 1), GRACE + 15,
                             "the guest's reclaim")
        ack("restart", "reclaimed" if reclaimed else "lost")
    # 6. reboot.
    reboot = os.path.join(export, "reboot.dat")
    if request("before-reboot"):
        ack("before-reboot", "denied" if host_denied(reboot, 0, 1) else "granted")
    if request("rebooted"):
        freed = wait_for(lambda: not host_denied(reboot, 0, 1), 30, "the rebooted guest's locks to go")
        ack("rebooted", "granted" if freed else "denied")


def host_v4(export: str, server: "Server", request, ack, jobout: str) -> list[str]:
    """The host's side of GUEST_SCRIPT_V4, as host_v3's; what failed here
    (the state directory, the server's log)."""
    failed: list[str] = []

    def path(name: str) -> str:
        return os.path.join(export, name)

    def sharing(name: str, start: int, length: int) -> str:
        shared = "granted" if host_could_lock(path(name), start, length, shared=True) else "denied"
        exclusive = "granted" if host_could_lock(path(name), start, length) else "denied"
        return f"shared {shared}, exclusive {exclusive}"

    def free(name: str, start: int, length: int) -> str:
        return "granted" if host_could_lock(path(name), start, length) else "denied"

    # 2. hold [0,100) here; release 3 s after the guest starts waiting.
    if request("server-holds"):
        fd = os.open(path("shared.dat"), os.O_RDWR | os.O_CREAT, 0o666)
        os.fchmod(fd, 0o666)  # the guest's squashed root opens it too
        fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)
        ack("server-holds", "held")
        if request("guest-waits", 120):
            time.sleep(3)
        os.close(fd)  # releases the lock
    # 3. the guest's write and read locks, seen from here.
    if request("guest-holds"):
        ack("guest-holds", free("held.dat", 0, 1))
    if request("guest-reads"):
        ack("guest-reads", sharing("rd.dat", 0, 100))
    # 4. the guest's flocks, seen from here; then their release.
    if request("flock-held"):
        ack("flock-held", free("flock.dat", 0, 0))
    if request("flock-released"):
        ack("flock-released", free("flock.dat", 0, 0))
    if request("flocks-held"):
        ack("flocks-held", sharing("flock.dat", 0, 0))
    # 5. a crash and a start on the same state directory.
    state = os.path.join(server.work, "state", "nfs4", "clients")
    grace_end = 0.0
    if request("restart"):
        recorded = open(state).read().split("\n") if os.path.exists(state) else []
        recorded = [line for line in recorded if line]
        if len(recorded) != 1:
            failed.append(f"{len(recorded)} NFSv4 clients in {state} before the restart, not 1")
        server.kill()
        log("server killed; starting it again on the same state directory")
        server.start()
        grace_end = server.started + GRACE  # it began after this
        # F_GETLK only: a lock taken here, however briefly, could deny a reclaim.
        reclaimed = wait_for(lambda: all(free(name, 0, 0) == "denied" for name in ("held.dat", "flock2.dat", "nlm.dat")),
                             GRACE, "the guest's reclaims")
        took = time.monotonic() - server.started
        log(f"the guest's locks {'held again' if reclaimed else 'not held'} {took:.1f} s after the start "
            f"(grace period {GRACE} s)")
        ack("restart", "reclaimed" if reclaimed and time.monotonic() < grace_end else "lost")
    if request("new-lock"):
        # The range must stay free until the grace period ends, then be
        # the guest's.
        left = grace_end - time.monotonic()
        early = None
        while early is None and time.monotonic() < grace_end - 0.3:
            if free("other.dat", 0, 10) == "denied":
                early = time.monotonic() - server.started
            time.sleep(0.2)
        if left < 2:
            ack("new-lock", f"asked {left:.1f} s before the grace period ended: too late to tell")
        elif early is not None:
            ack("new-lock", f"granted {early:.1f} s after the start, in the grace period of {GRACE} s")
        elif wait_for(lambda: free("other.dat", 0, 10) == "denied", 60, "the new lock after the grace period"):
            ack("new-lock", f"after grace: asked {GRACE - left:.1f} s after the start, held at "
                f"{time.monotonic() - server.started:.1f} s (grace period {GRACE} s)")
        else:
            ack("new-lock", "not granted within 60 s of the grace period's end")
    # 6. the bytes both mounts read, here.
    if request("coherent"):
        with open(path("coh.dat"), "rb") as f, open(os.path.join(jobout, "coh.expected"), "rb") as g:
            ack("coherent", "same" if f.read() == g.read() else "differs")
    # The server's own account of the restart.
    if server.n == 2:
        text = server.log(2)
        m = re.search(r"held state before the restart.*clients=(\d+)", text)
        if not m or m.group(1) != "1":
            failed.append("server 2's log does not say 1 client held state before the restart")
        over = r"grace period over.*reclaimed=(\d+)"
        if not wait_for(lambda: re.search(over, server.log(2)), 30, "the end of the grace period in the log"):
            failed.append("server 2's log has no end of the grace period")
        else:
            n = re.search(over, server.log(2)).group(1)
            log(f"server 2: grace period over, {n} NFSv4 client(s) came back")
            if n != "1":
                failed.append(f"server 2 counts {n} NFSv4 clients back after the grace period, not 1")
    return failed


def step_results(stdout: str, script: str) -> list[tuple[str, str, str]]:
    """(number, title, pass/FAIL/...) for each step of the guest script: a
    step fails if it printed a FAIL line."""
    result, cur = {}, None
    for line in stdout.splitlines():
        m = re.match(r"== (\d+)\. ", line)
        if m:
            cur = m.group(1)
            result[cur] = "pass"
        elif line.startswith("FAIL") and cur:
            result[cur] = "FAIL"
    if cur and result[cur] == "pass" and "\n== end\n" not in stdout:
        result[cur] = "unfinished"
    return [(n, t, result.get(n, "not run")) for n, t in re.findall(r'^step "(\d+)\. (.*)"$', script, re.M)]


def main() -> int:
    ap = argparse.ArgumentParser(description="Locking with the real Linux client (NLM, or NFSv4 with --vers)")
    ap.add_argument("--peer", choices=["ganesha"], help="run the guest script against this server instead")
    ap.add_argument("--vers", choices=["3", "4.0", "4.1", "4.2"], default="3",
                    help="the NFS version the guest mounts (3: locks through NLM)")
    args = ap.parse_args()
    if args.peer and args.vers != "3":
        ap.error("--peer runs the NLM script only (--vers 3)")
    if os.geteuid() != 0:
        log("must run as root")
        return 2
    work = tempfile.mkdtemp(prefix="dionfs-locks-")
    fs = None if args.peer else LoopFs("xfs", "1G")
    server = None
    ok = False
    try:
        if args.peer:
            server = Ganesha(work)
            server.start()
            export = server.export
            server.clear()
        else:
            export = fs.path("export")
        os.makedirs(os.path.join(export, "bin"), exist_ok=True)
        os.chmod(export, 0o1777)
        subprocess.run(["gcc", "-O2", "-Wall", "-static", "-o", os.path.join(export, "bin", "locktest"),
                        os.path.join(REPO, "tests", "tools", "locktest.c")], check=True)
        shutil.copy("/usr/sbin/sm-notify", os.path.join(export, "bin", "sm-notify"))
        if not args.peer:
            subprocess.run(["bash", "-c", '. "$1"; netns_clear_stale "${RC_NETNS:-nfsh}"', "netns",
                            os.path.join(REPO, "tests", "lib", "netns.sh")], check=True)
            subprocess.run([os.path.join(RC, "netns.sh"), "up"], check=True, stdout=subprocess.DEVNULL)
            server = Server(export, work, args.vers)
            server.start()
        script = os.path.join(work, "guest.sh")
        script_text = GUEST_SCRIPT if args.vers == "3" else GUEST_SCRIPT_V4
        with open(script, "w") as f:
            f.write(script_text.replace("KEEP_GOING=0", "KEEP_GOING=1") if args.peer else script_text)
        t0 = time.monotonic()
        out = os.path.join(work, "guest")
        jobout = os.path.join(out, "job", "out")
        guest = subprocess.Popen(  # its stdout (the script's) is printed below
            [os.path.join(RC, "guest-run.sh"), "--server", SERVER_IP, "--nfs-port", "0", "--mount-port", "0",
             "--export", export, "--script", script, "--lock", "--vers", args.vers,
             "--timeout", "600", "--out", out, "--quiet"],
            stdout=subprocess.DEVNULL)
        failed: list[str] = []

        def ack(name: str, answer: str) -> None:
            with open(os.path.join(jobout, f"ack.{name}.tmp"), "w") as f:
                f.write(answer + "\n")
            os.rename(os.path.join(jobout, f"ack.{name}.tmp"), os.path.join(jobout, f"ack.{name}"))

        def request(name: str, timeout: float = 400) -> bool:
            return wait_for(lambda: os.path.exists(os.path.join(jobout, f"req.{name}")) or guest.poll() is not None,
                            timeout, f"guest request {name}") and guest.poll() is None

        if args.vers == "3":
            host_v3(export, server, request, ack)
        else:
            failed += host_v4(export, server, request, ack, jobout)
        rc = guest.wait()
        stdout = open(os.path.join(out, "out", "stdout")).read() if os.path.exists(os.path.join(out, "out", "stdout")) else ""
        print(stdout, end="")
        name = args.peer or "dionfs"
        print(f"\nstep  {name:<8}  what (NFSv{args.vers}, {time.monotonic() - t0:.0f} s)")
        for n, title, result in step_results(stdout, script_text):
            if n in getattr(server, "not_comparable", ()):
                result = f"n/c ({result})"
            print(f"{n:<4}  {result:<8}  {title}")
            if result != "pass" and not result.startswith("n/c"):
                failed.append(f"step {n} {result}")
        if rc != 0:
            failed.append(f"guest exited {rc}")
        mount_line = os.path.join(out, "out", "mount.line")
        if args.vers != "3" and f"vers={args.vers}," not in (open(mount_line).read() if os.path.exists(mount_line) else ""):
            failed.append(f"the guest did not mount with vers={args.vers}")
        if args.peer:
            log(f"{name}: " + ("; ".join(failed) or "all steps passed") + f" (its logs: {work}/server*.log)")
            return 0 if not failed else 1
        if server.proc.poll() is not None:
            failed.append("the server died")
        for n in range(1, server.n + 1):
            text = open(os.path.join(work, f"server{n}.log")).read()
            if "panicked" in text:
                failed.append(f"server {n} panicked")
        if failed:
            log("FAIL: " + "; ".join(failed) + f" (logs in {work})")
            for n in range(1, server.n + 1):
                sys.stderr.write(open(os.path.join(work, f"server{n}.log")).read()[-3000:])
            return 1
        ok = True
        log("PASS")
        return 0
    finally:
        if args.peer and server:
            server.clear()
        if server:
            server.stop()
        subprocess.run([os.path.join(RC, "netns.sh"), "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if fs:
            fs.destroy()
        if ok:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
