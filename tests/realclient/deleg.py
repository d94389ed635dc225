#!/usr/bin/env python3
"""NFSv4 delegations with the real Linux client (issue 43): the
realclient guest mounts dionfs (`delegations = true`) over NFSv4.1 (or
4.0 with --vers 4.0, where the server calls the client back at the
address its SETCLIENTID gave) at /mnt/nfs. One guest boot; the guest script and this host script take
turns through files in the guest's output directory (/job/out), as
locks.py's do, and the host reads the server's per-operation call counts
(its metrics, inside the namespace) between the guest's steps:

1. The guest makes 20 small files, then reads and stats each (its first
   read opens get read delegations), then does it again: the second pass
   must send no OPEN, READ or GETATTR at all (the client opens, reads
   and stats from its cache under the delegation), and the server must
   count 20 delegations held.
2. The export is also mounted over NFSv3 at /mnt/v3: a write through it
   to a delegated file is answered JUKEBOX until the v4 client, called
   back (CB_RECALL), returns the delegation (DELEGRETURN); the v4 mount
   then reads the new bytes, not its cached ones.
3. A second NFSv4.1 client (nfs-rs, run in the namespace) writes another
   delegated file: its OPEN waits (NFS4ERR_DELAY) for the return, and the
   guest then reads what it wrote.
4. A process on the server (this script) writes a delegated file: its
   open waits (fanotify) while the guest is called back and returns the
   delegation, and the guest then reads what it wrote.
5. A process on the server chmods a delegated file: the delegation is
   recalled (after the fact), and the guest then sees the new mode.
6. The guest writes 12 bytes to a file it holds open for reading and
   writing (a write delegation) and keeps them in its cache; another
   client's stat (nfs-rs) is answered with the guest's size, which the
   server asks the guest for (CB_GETATTR), recalling nothing.

With --delegations off the server grants none, and step 1's second pass
is only counted (steps 2 and 3 pass without recalls); --compare runs both
and prints the calls of the second pass side by side (the metadata job
of docs/benchmarks.md: open, read and stat of 20 small files).

Usage (root): tests/realclient/deleg.py [--delegations on|off] [--compare]
                                       [--vers 4.0|4.1]
Env: DIONFS_BIN, RC_DIR; DELEG_KEEP=1 keeps the run's files (the server's
log among them), DELEG_LOG sets the server's log filter. Exit status 0 = every step passed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
from loopfs import LoopFs  # noqa: E402

RC = os.environ.get("RC_DIR", os.path.join(REPO, "..", "shared", "realclient"))
BIN = os.environ.get("DIONFS_BIN", os.path.join(REPO, "target", "debug", "dionfs"))
NETNS = os.environ.get("RC_NETNS", "nfsh")
SERVER_IP, GUEST_IP = "192.168.77.1", "192.168.77.2"
METRICS = "127.0.0.1:9049"
FILES = 20


def log(msg: str) -> None:
    print(f"[deleg {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


GUEST_SCRIPT = r"""#!/bin/sh
step() { echo "== $*"; }
fail() { echo "FAIL: $*"; exit 1; }
# sync NAME: tell the host, wait for its answer (a file it writes).
sync() { echo go > /job/out/req.$1; i=0
  while [ ! -e /job/out/ack.$1 ]; do sleep 0.2; i=$((i+1)); [ $i -lt 1500 ] || fail "no host ack for $1"; done
  cat /job/out/ack.$1; }
expect() { [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"; echo "ok: $3"; }
pass() { for i in $(seq 1 __FILES__); do cat /mnt/nfs/m/f$i > /dev/null || fail "read f$i"; stat /mnt/nfs/m/f$i > /dev/null || fail "stat f$i"; done; }

step "1. a second open, read and stat of delegated files sends nothing"
mkdir /mnt/nfs/m || fail mkdir
for i in $(seq 1 __FILES__); do echo "small file $i" > /mnt/nfs/m/f$i || fail "write f$i"; done
pass
expect "$(sync first-pass)" counted "the host counted the calls so far"
pass
expect "$(sync second-pass)" ok "the second pass: calls on the wire as expected"

step "2. a write through NFSv3 recalls the v4 client's delegation"
mkdir -p /mnt/v3
mount -t nfs -o vers=3,proto=tcp,mountproto=tcp,nolock,addr=__SERVER__,mountaddr=__SERVER__ \
  "__SERVER__:__EXPORT__" /mnt/v3 || fail "NFSv3 mount beside the v4 one"
echo "old bytes" > /mnt/nfs/r || fail "write r"
expect "$(cat /mnt/nfs/r)" "old bytes" "read through v4 (a delegation)"
expect "$(sync v3-before)" ok "the host saw the delegation"
start=$(date +%s)
echo "new bytes" > /mnt/v3/r || fail "v3 write"
echo "v3 write took $(( $(date +%s) - start )) s"
expect "$(cat /mnt/nfs/r)" "new bytes" "the v4 mount reads what v3 wrote, not its cache"
expect "$(sync v3-after)" ok "the server recalled and the client returned"

step "3. a second NFSv4.1 client's write recalls it"
echo "guest bytes" > /mnt/nfs/s || fail "write s"
expect "$(cat /mnt/nfs/s)" "guest bytes" "read through v4 (a delegation)"
expect "$(sync v4-write)" ok "the other client wrote s"
expect "$(cat /mnt/nfs/s)" "other client" "the guest reads what the other client wrote"

step "4. a process on the server writing a delegated file recalls it"
echo "guest bytes" > /mnt/nfs/p || fail "write p"
expect "$(cat /mnt/nfs/p)" "guest bytes" "read through v4 (a delegation)"
expect "$(sync local-write)" ok "a process on the server wrote p"
expect "$(cat /mnt/nfs/p)" "server process" "the guest reads what the server process wrote"

step "5. a chmod on the server recalls it"
echo "guest bytes" > /mnt/nfs/q && chmod 644 /mnt/nfs/q || fail "write q"
expect "$(cat /mnt/nfs/q)" "guest bytes" "read through v4 (a delegation)"
expect "$(stat -c %a /mnt/nfs/q)" 644 "its mode, from the cache"
expect "$(sync local-chmod)" ok "a process on the server chmod'ed q"
# (An open revalidates, as after any change on the server: a stat alone
# may answer from the attribute cache for acregmin, delegation or not.)
cat /mnt/nfs/q > /dev/null || fail "open q"
expect "$(stat -c %a /mnt/nfs/q)" 600 "the guest sees the new mode once it opens the file"

step "6. another client's stat asks the holder of a write delegation (CB_GETATTR)"
# Opened for reading and writing: a write delegation. The bytes written
# stay in the guest's cache while the file is open.
exec 3<>/mnt/nfs/w || fail "open w"
printf 'twelve bytes' >&3 || fail "write w"
expect "$(sync cb-getattr)" 12 "the other client's stat saw the size in the guest's cache"
exec 3>&-
rm -rf /mnt/nfs/m /mnt/nfs/r /mnt/nfs/s /mnt/nfs/p /mnt/nfs/q /mnt/nfs/w
umount /mnt/v3
echo "== end"
"""

# The second client: nfs-rs's NFSv4.1, in the namespace, writing a file
# ("write", step 3) or stat'ing one ("stat", step 6: its size printed). It
# gives NFS4ERR_DELAY back as an error: tried again, as a kernel client
# does.
OTHER_CLIENT = r"""
import sys, time, nfs_rs
url, path, action = sys.argv[1], sys.argv[2], sys.argv[3]
c = nfs_rs.Client.connect(url, uid=0, gid=0, connect_timeout=10, operation_timeout=60)
errors = []
for _ in range(120):
    try:
        if action == "stat":
            print(c.stat(path).size)
        else:
            with c.open(path, "r+b") as f:
                f.truncate(0)
                f.write_at(b"other client\n", 0)
            print(f"written after {len(errors)} refusals: {errors[:1]}")
        sys.exit(0)
    except nfs_rs.NfsError as e:
        errors.append(str(e))
        time.sleep(0.5)
print(f"no {action}: {errors[-3:]}")
sys.exit(1)
"""


def in_netns(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", NETNS, *cmd], capture_output=True, text=True, **kw)


def ops() -> dict[str, int]:
    """NFSv4 operations (and COMPOUND) the server has served, by name."""
    text = in_netns("python3", "-c", "import urllib.request,sys; sys.stdout.write(urllib.request."
                    f"urlopen('http://{METRICS}/metrics').read().decode())", timeout=30).stdout
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^dionfs_call_seconds_count\{program="nfs4",procedure="(\w+)"\} (\d+)$', text, re.M)}
    m = re.search(r"^dionfs_nfs4_delegations (\d+)$", text, re.M)
    counts["delegations held"] = int(m.group(1)) if m else -1
    return counts


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()
            if k != "delegations held" and v != before.get(k, 0)}


def wait_for(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.3)
    return False


def run(delegations: bool, work: str, vers: str) -> tuple[list[str], dict[str, int]]:
    """One guest boot (mounting NFSv`vers`) against a server with
    delegations on or off: the failures, and the calls of step 1's second
    pass."""
    fs = LoopFs("xfs", "1G")
    proc = None
    failed: list[str] = []
    second: dict[str, int] = {}
    try:
        export = fs.path("export")
        os.makedirs(export, exist_ok=True)
        os.chmod(export, 0o1777)
        subprocess.run(["bash", "-c", '. "$1"; netns_clear_stale "$2"', "netns",
                        os.path.join(REPO, "tests", "lib", "netns.sh"), NETNS], check=True)
        subprocess.run([os.path.join(RC, "netns.sh"), "up"], check=True, stdout=subprocess.DEVNULL)
        state = os.path.join(work, "state")
        config = os.path.join(work, "dionfs.toml")
        with open(config, "w") as f:
            f.write(f'[server]\nlisten = "{SERVER_IP}"\nstate_dir = "{state}"\n'
                    f'metrics_listen = "{METRICS}"\ndelegations = {str(delegations).lower()}\n\n'
                    f'[[export]]\npath = "{export}"\nclients = ["{GUEST_IP}", "{SERVER_IP}"]\n'
                    f'squash = "no_root_squash"\nsecure = false\n')
        ports = os.path.join(work, "ports.json")
        logf = open(os.path.join(work, "server.log"), "w")
        proc = subprocess.Popen([os.path.join(RC, "netns.sh"), "exec", BIN, "serve", "--config", config,
                                 "--ports-file", ports], stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT,
                                env=dict(os.environ, DIONFS_LOG=os.environ.get(
                                    "DELEG_LOG", "info,dionfs_server::nfs4::delegation=debug")))
        if not wait_for(lambda: os.path.exists(ports) or proc.poll() is not None, 30) or proc.poll() is not None:
            return [f"server did not start: {open(logf.name).read()[-2000:]}"], second
        log(f"server up (delegations {'on' if delegations else 'off'}, the guest on NFSv{vers}): "
            f"{json.load(open(ports))}")
        script = os.path.join(work, "guest.sh")
        with open(script, "w") as f:
            f.write(GUEST_SCRIPT.replace("__FILES__", str(FILES)).replace("__SERVER__", SERVER_IP)
                    .replace("__EXPORT__", export))
        out = os.path.join(work, "guest")
        jobout = os.path.join(out, "job", "out")
        guest = subprocess.Popen(
            [os.path.join(RC, "guest-run.sh"), "--server", SERVER_IP, "--nfs-port", "2049",
             "--export", export, "--script", script, "--vers", vers, "--timeout", "600",
             "--out", out, "--quiet"], stdout=subprocess.DEVNULL)

        def request(name: str) -> bool:
            path = os.path.join(jobout, f"req.{name}")
            return wait_for(lambda: os.path.exists(path) or guest.poll() is not None, 400) and guest.poll() is None

        def ack(name: str, answer: str) -> None:
            with open(os.path.join(jobout, f"ack.{name}.tmp"), "w") as f:
                f.write(answer + "\n")
            os.rename(os.path.join(jobout, f"ack.{name}.tmp"), os.path.join(jobout, f"ack.{name}"))

        def check(what: str, ok: bool, detail: str) -> None:
            log(f"{'ok' if ok else 'FAIL'}: {what} ({detail})")
            if not ok:
                failed.append(f"{what}: {detail}")

        def other_client(path: str, action: str) -> subprocess.CompletedProcess:
            """OTHER_CLIENT doing `action` to `path`, from the namespace."""
            url = f"nfs://{SERVER_IP}{export}?version=4.1&nfsport=2049"
            return in_netns("python3", "-c", OTHER_CLIENT, url, path, action, timeout=120)

        def returned(before: dict[str, int]) -> int:
            return diff(ops(), before).get("DELEGRETURN", 0)

        def check_returned(what: str, before: dict[str, int], detail: str = "") -> None:
            """With delegations on, a DELEGRETURN since `before`."""
            if delegations:
                n = returned(before)
                check(what, n >= 1, f"{n} DELEGRETURN{detail}")

        if request("first-pass"):
            before = ops()
            # The mount is the version asked for: a 4.0 client sets up with
            # SETCLIENTID, a 4.1 one with EXCHANGE_ID.
            setup = "SETCLIENTID" if vers == "4.0" else "EXCHANGE_ID"
            check(f"the guest mounted NFSv{vers}", before.get(setup, 0) >= 1,
                  f"{before.get(setup, 0)} {setup}")
            ack("first-pass", "counted")
            if request("second-pass"):
                after = ops()
                second = diff(after, before)
                log(f"second pass: {second or 'no calls'}; delegations held: {after['delegations held']}")
                if delegations:
                    cached = {k: second.get(k, 0) for k in ("OPEN", "READ", "GETATTR")}
                    check("the second pass sends no OPEN, READ or GETATTR", not any(cached.values()), str(cached))
                    check("the server holds a delegation of each file", after["delegations held"] >= FILES,
                          str(after["delegations held"]))
                else:
                    check("no delegation is held with delegations off", after["delegations held"] == 0,
                          str(after["delegations held"]))
                ack("second-pass", "ok")
        if request("v3-before"):
            before = ops()
            ack("v3-before", "ok")
            if request("v3-after"):
                check_returned("the v3 write recalled the delegation, which came back", before)
                ack("v3-after", "ok")
        if request("v4-write"):
            before = ops()
            other = other_client("/s", "write")
            log(f"the other client: {other.stdout.strip()} {other.stderr.strip()[-500:]}")
            check("the other NFSv4.1 client wrote", other.returncode == 0, other.stdout.strip())
            check_returned("its open recalled the guest's delegation", before)
            ack("v4-write", "ok")
        if request("local-write"):
            before = ops()
            start = time.monotonic()
            # This process is not the server: its open waits while the
            # guest is called back and returns the delegation.
            with open(os.path.join(export, "p"), "w") as f:
                f.write("server process\n")
            took = time.monotonic() - start
            log(f"the server process's open and write took {took:.2f} s")
            check_returned("a server process's open recalled the guest's delegation", before,
                           f", open after {took:.2f} s")
            ack("local-write", "ok")
        if request("local-chmod"):
            before = ops()
            os.chmod(os.path.join(export, "q"), 0o600)
            # After the fact: the chmod is done; the recall follows.
            if delegations:
                wait_for(lambda: returned(before) >= 1, 15)
            check_returned("a chmod on the server recalled the guest's delegation", before)
            ack("local-chmod", "ok")
        if request("cb-getattr"):
            before = ops()
            other = other_client("/w", "stat")
            size = other.stdout.strip()
            on_disk = os.stat(os.path.join(export, "w")).st_size
            log(f"the other client's stat: size {size} ({other.stderr.strip()[-300:]}); "
                f"on the server's disk: {on_disk} bytes")
            if delegations:
                asked = re.findall(r"CB_GETATTR .*answer=(\S+)", open(os.path.join(work, "server.log")).read())
                check("the server asked the guest (CB_GETATTR) and it answered",
                      any(a.startswith("Some") for a in asked), str(asked))
                check("and recalled nothing", returned(before) == 0, f"{returned(before)} DELEGRETURN")
            ack("cb-getattr", size)
        rc = guest.wait()
        stdout_path = os.path.join(out, "out", "stdout")
        print(open(stdout_path).read() if os.path.exists(stdout_path) else "(no guest output)", end="")
        if rc != 0:
            failed.append(f"guest exited {rc} (console: {out}/console.log)")
        if proc.poll() is not None:
            failed.append("the server died")
        server_log = open(logf.name).read()
        if "panicked" in server_log:
            failed.append("the server panicked")
        # Every recall ended in a return, none in a revocation a lease
        # later (the guest stuck returning one: its own calls refused).
        revoked = server_log.count("NFSv4 delegation revoked")
        check("every recalled delegation came back (none revoked)", revoked == 0, f"{revoked} revoked")
        return failed, second
    finally:
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run([os.path.join(RC, "netns.sh"), "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fs.destroy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delegations", choices=("on", "off"), default="on")
    ap.add_argument("--compare", action="store_true", help="run with delegations off, then on")
    ap.add_argument("--vers", choices=("4.0", "4.1"), default="4.1", help="the guest's NFS version")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("must run as root")
        return 2
    modes = [False, True] if args.compare else [args.delegations == "on"]
    results = {}
    failed: list[str] = []
    for on in modes:
        work = tempfile.mkdtemp(prefix="dionfs-deleg-")
        fails, second = run(on, work, args.vers)
        results[on] = second
        failed += [f"delegations {'on' if on else 'off'}: {f}" for f in fails]
        if fails or os.environ.get("DELEG_KEEP"):
            log(f"run files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.compare:
        calls = {on: results[on].get("COMPOUND", 0) for on in modes}
        print(f"\nopen, read and stat of {FILES} small files again (NFSv{args.vers}, the Linux client):")
        for on in modes:
            print(f"  delegations {'on ' if on else 'off'}: {calls[on]:>4} COMPOUNDs  {results[on]}")
        if calls[True]:
            print(f"  {calls[False] / calls[True]:.1f}x fewer calls with delegations")
        else:
            print(f"  {calls[False]} calls without delegations, none with them")
    if failed:
        log("FAIL: " + "; ".join(failed))
        return 1
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
