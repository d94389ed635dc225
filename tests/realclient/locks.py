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

Usage (root): tests/realclient/locks.py [--peer ganesha]
Env: DIONFS_BIN, RC_DIR. Exit status 0 = every (comparable) step passed.
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import signal
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
    def __init__(self, export: str, work: str):
        self.export, self.work, self.proc, self.n = export, work, None, 0

    def start(self) -> None:
        self.n += 1
        ports = os.path.join(self.work, "ports.json")
        if os.path.exists(ports):
            os.unlink(ports)
        logf = open(os.path.join(self.work, f"server{self.n}.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(RC, "netns.sh"), "exec", BIN, "serve", self.export,
             "--listen", SERVER_IP, "--allow", GUEST_IP, "--state-dir", os.path.join(self.work, "state"),
             "--nlm-port", str(NLM_PORT), "--grace-period", str(GRACE), "--ports-file", ports],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=dict(os.environ, DIONFS_LOG="info,dionfs_server::nlm=debug"))
        if not wait_for(lambda: os.path.exists(ports) or self.proc.poll() is not None, 30, "ports file"):
            raise RuntimeError("server did not start")
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited: {open(logf.name).read()[-2000:]}")
        log(f"server {self.n} up: {json.load(open(ports))}")

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


def step_results(stdout: str) -> list[tuple[str, str, str]]:
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
    return [(n, t, result.get(n, "not run")) for n, t in re.findall(r'^step "(\d+)\. (.*)"$', GUEST_SCRIPT, re.M)]


def main() -> int:
    ap = argparse.ArgumentParser(description="NLM locking with the real Linux client")
    ap.add_argument("--peer", choices=["ganesha"], help="run the guest script against this server instead")
    args = ap.parse_args()
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
            subprocess.run([os.path.join(RC, "netns.sh"), "up"], check=True, stdout=subprocess.DEVNULL)
            server = Server(export, work)
            server.start()
        script = os.path.join(work, "guest.sh")
        with open(script, "w") as f:
            f.write(GUEST_SCRIPT.replace("KEEP_GOING=0", "KEEP_GOING=1") if args.peer else GUEST_SCRIPT)
        out = os.path.join(work, "guest")
        jobout = os.path.join(out, "job", "out")
        guest = subprocess.Popen(  # its stdout (the script's) is printed below
            [os.path.join(RC, "guest-run.sh"), "--server", SERVER_IP, "--nfs-port", "0", "--mount-port", "0",
             "--export", export, "--script", script, "--lock", "--timeout", "600", "--out", out, "--quiet"],
            stdout=subprocess.DEVNULL)
        failed: list[str] = []

        def ack(name: str, answer: str) -> None:
            with open(os.path.join(jobout, f"ack.{name}.tmp"), "w") as f:
                f.write(answer + "\n")
            os.rename(os.path.join(jobout, f"ack.{name}.tmp"), os.path.join(jobout, f"ack.{name}"))

        def request(name: str, timeout: float = 400) -> bool:
            return wait_for(lambda: os.path.exists(os.path.join(jobout, f"req.{name}")) or guest.poll() is not None,
                            timeout, f"guest request {name}") and guest.poll() is None

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
        rc = guest.wait()
        stdout = open(os.path.join(out, "out", "stdout")).read() if os.path.exists(os.path.join(out, "out", "stdout")) else ""
        print(stdout, end="")
        name = args.peer or "dionfs"
        print(f"\nstep  {name:<8}  what")
        for n, title, result in step_results(stdout):
            if n in getattr(server, "not_comparable", ()):
                result = f"n/c ({result})"
            print(f"{n:<4}  {result:<8}  {title}")
            if result != "pass" and not result.startswith("n/c"):
                failed.append(f"step {n} {result}")
        if rc != 0:
            failed.append(f"guest exited {rc}")
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
