#!/bin/bash
# Real Linux NFS client test: boots the realclient guest (Debian 6.1 kernel
# NFSv3 client), mounts dionfs through its portmapper, runs workload.sh,
# concurrency.sh and, over NFSv4, acl.sh in it (one boot).
#
#   tests/realclient/run.sh [--timeout SECS] [--keep-out] [--only "workload concurrency acl"]
#                           [--vers 3|4.0|4.1|4.2|auto]   (root)
#
# The server serves what it serves by default (NFSv3, 4.0, 4.1 and 4.2).
# With --vers 4.0, 4.1 or 4.2 the guest mounts that version (one TCP port, no MOUNT,
# no NLM); with --vers auto it mounts with no version option at all, as a
# plain `mount server:/export` does, and must get 4.2. out/mount.line must
# show the version.
#
# 1. XFS on a 4096-byte-sector loop device; export = <mnt>/export (mode 1777:
#    the guest's root is squashed to nobody by default).
# 2. DIONFS_BIN serve <export> --listen 192.168.77.1 --allow 192.168.77.2
#    inside the harness netns, default ports 2049/20048/111.
# 3. guest-run.sh --nfs-port 0 --mount-port 0 (ports from the portmapper)
#    --script <both scripts, each run by sh in the guest>; then
#    conc_verify.py compares the shared files concurrency.sh wrote (server
#    side, and as the guest read them back) with their model, byte for byte.
# 4. stop the server, netns down, remove the loop fs — also on failure or
#    interruption. Exit status 0 = pass.
# Env: DIONFS_BIN (default <repo>/target/debug/dionfs), RC_DIR (default
# <repo>/../shared/realclient), WORKLOAD_ENV (e.g. "BIG_MB=64 NDIR=500"),
# and for concurrency.sh CONC_PROCS, CONC_RECORDS, CONC_FIO_JOBS, CONC_FIO_RECORDS,
# CONC_1536_RECORDS (defaults there).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RC=${RC_DIR:-$(cd "$REPO/../shared/realclient" 2>/dev/null && pwd)}
BIN=${DIONFS_BIN:-$REPO/target/debug/dionfs}
TIMEOUT=900
KEEP_OUT=0
PARTS=""
VERS=3
SERVER_IP=192.168.77.1
GUEST_IP=192.168.77.2
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) TIMEOUT=$2; shift 2 ;;
        --keep-out) KEEP_OUT=1; shift ;;
        --only) PARTS=$2; shift 2 ;;
        --vers) VERS=$2; shift 2 ;;
        *) echo "usage: $0 [--timeout SECS] [--keep-out] [--only \"workload concurrency acl\"] [--vers 3|4.0|4.1|4.2|auto]" >&2; exit 2 ;;
    esac
done

# NFSv4 adds the ACL checks (nfs4-acl-tools in the guest).
if [ -z "$PARTS" ]; then
    PARTS="workload concurrency"
    [ "$VERS" = 3 ] || PARTS="$PARTS acl"
fi

case "$VERS" in
    3|4.0|4.1|4.2) EXPECT=$VERS ;;
    auto) EXPECT=4.2 ;;
    *) echo "--vers must be 3, 4.0, 4.1, 4.2 or auto" >&2; exit 2 ;;
esac

log() { echo "[realclient $(date +%H:%M:%S)] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
[ -n "$RC" ] && [ -x "$RC/guest-run.sh" ] || die "realclient harness not found (expected $REPO/../shared/realclient)"
[ -x "$BIN" ] || die "dionfs binary $BIN missing (cargo build, or set DIONFS_BIN)"
. "$REPO/tests/lib/loopfs.sh"
. "$REPO/tests/lib/netns.sh"
NETNS=${RC_NETNS:-nfsh}
netns_clear_stale "$NETNS"

if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS" &&
    ip netns exec "$NETNS" ss -ltnH 2>/dev/null | grep -qE ':(2049|20048|111)\b'; then
    die "something already listens on 2049/20048/111 in netns $NETNS (Ganesha? run $RC/ganesha.sh stop)"
fi

WORK=$(mktemp -d /tmp/dionfs-realclient-XXXXXX)
SERVER_PID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            log "server ignored SIGTERM for 10 s; SIGKILL"
            kill -KILL "$SERVER_PID" 2>/dev/null
        fi
        wait "$SERVER_PID" 2>/dev/null
    fi
    "$RC/netns.sh" down >/dev/null 2>&1 || log "warning: netns $NETNS not removed: $(ip netns pids "$NETNS" 2>/dev/null | tr '\n' ' ')"
    loopfs_destroy
    if [ "$rc" != 0 ] || [ "$KEEP_OUT" = 1 ]; then
        log "run files kept in $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

T0=$(date +%s)
loopfs_create xfs 4G || die "cannot create the XFS loop filesystem"
EXPORT="$LOOPFS_MNT/export"
mkdir "$EXPORT" && chmod 1777 "$EXPORT" || die "mkdir $EXPORT"
log "XFS on $LOOPFS_DEV (4096-byte sectors) at $LOOPFS_MNT"

"$RC/netns.sh" up >/dev/null || die "netns up failed"
mkdir -p "$WORK/state"
"$RC/netns.sh" exec "$BIN" serve "$EXPORT" --listen "$SERVER_IP" --allow "$GUEST_IP" \
    --state-dir "$WORK/state" </dev/null >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
log "started $BIN (pid $SERVER_PID) in netns $NETNS"

listening() { ip netns exec "$NETNS" ss -ltnH "sport = :$1" 2>/dev/null | grep -q LISTEN; }
for _ in $(seq 1 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; die "server exited during start-up"; }
    listening 2049 && listening 20048 && listening 111 && break
    sleep 0.2
done
for p in 2049 20048 111; do
    listening $p || { tail -30 "$WORK/server.log" >&2; die "server not listening on $SERVER_IP:$p after 30 s"; }
done

# guest-run.sh takes one script: embed each part and run them in turn.
SCRIPT="$WORK/guest-script.sh"
{
    echo '#!/bin/sh'
    [ -n "${WORKLOAD_ENV:-}" ] && echo "export $WORKLOAD_ENV"
    for v in CONC_PROCS CONC_RECORDS CONC_FIO_JOBS CONC_FIO_RECORDS CONC_1536_RECORDS; do
        eval "val=\${$v:-}"
        [ -n "$val" ] && echo "export $v=$val"
    done
    for part in $PARTS; do
        [ -f "$REPO/tests/realclient/$part.sh" ] || die "no tests/realclient/$part.sh"
        echo "cat >/tmp/$part.sh <<'__DIONFS_PART_EOF__'"
        cat "$REPO/tests/realclient/$part.sh"
        echo "__DIONFS_PART_EOF__"
    done
    for part in $PARTS; do
        echo "sh /tmp/$part.sh || exit 1"
    done
} >"$SCRIPT"
log "guest: mount $SERVER_IP:$EXPORT (NFSv$VERS) via portmapper, run: $PARTS (timeout ${TIMEOUT}s)"
"$RC/guest-run.sh" --server "$SERVER_IP" --nfs-port 0 --mount-port 0 --export "$EXPORT" \
    --vers "$VERS" --script "$SCRIPT" --timeout "$TIMEOUT" --out "$WORK/guest" --quiet
GRC=$?
if [ $GRC = 0 ]; then
    grep -q "vers=$EXPECT" "$WORK/guest/out/mount.line" 2>/dev/null ||
        die "the guest mounted $(cat "$WORK/guest/out/mount.line" 2>/dev/null), not vers=$EXPECT"
fi

alive=1
kill -0 "$SERVER_PID" 2>/dev/null || alive=0
if [ $GRC != 0 ] || [ $alive = 0 ]; then
    log "server log (tail):"
    tail -40 "$WORK/server.log" >&2
fi
[ $alive = 1 ] || die "the server died during the guest run"
case $GRC in
    0) ;;
    1) die "workload failed in the guest (see FAIL: line above; console: $WORK/guest/console.log)" ;;
    3) die "the guest could not mount $SERVER_IP:$EXPORT via the portmapper" ;;
    4) die "the guest failed to boot or crashed ($WORK/guest/console.log)" ;;
    124) die "timeout after ${TIMEOUT}s" ;;
    *) die "guest-run.sh exited with $GRC" ;;
esac
case " $PARTS " in *" acl "*)
    log "checking with getfacl what the guest's nfs4_setfacl made of the files' POSIX ACLs"
    facl() { getfacl -n -p -c "$@" 2>&1 | grep -v '^#'; }
    facl "$EXPORT/acl/f" | grep -qx 'user:1001:r--' ||
        die "acl/f: no user:1001:r-- on the server: $(facl "$EXPORT/acl/f" | tr '\n' ' ')"
    facl -d "$EXPORT/acl/d" | grep -qx 'user:1002:rwx' ||
        die "acl/d: no default user:1002:rwx on the server: $(facl -d "$EXPORT/acl/d" | tr '\n' ' ')"
    facl "$EXPORT/acl/d/child" | grep -q '^user:1002:rwx' ||
        die "acl/d/child did not inherit user 1002: $(facl "$EXPORT/acl/d/child" | tr '\n' ' ')"
    # The default ACL gives others nothing, whatever the mode of the
    # create said (the create's mode is not applied again after it).
    facl "$EXPORT/acl/d/child" | grep -qx 'other::---' ||
        die "acl/d/child: others got what the default ACL denies: $(facl "$EXPORT/acl/d/child" | tr '\n' ' ')"
    rm -rf "$EXPORT/acl" ;;
esac
case " $PARTS " in *" concurrency "*)
    log "verifying the shared files of concurrency.sh against their model"
    python3 "$REPO/tests/realclient/conc_verify.py" "$EXPORT/conc" "$WORK/guest/out" >&2 || {
        cp -r "$EXPORT/conc" "$WORK/conc-server" 2>/dev/null
        die "shared-file concurrency: the data differs from the model (above; server files copied to $WORK/conc-server)"
    }
    rm -rf "$EXPORT/conc" ;;
esac
left=$(ls -A "$EXPORT")
[ -z "$left" ] || die "export not empty after the workload's rm -rf: $left"
if grep -qiE 'panicked|RUST_BACKTRACE' "$WORK/server.log"; then
    grep -iE -A5 'panicked' "$WORK/server.log" >&2
    die "the server log shows a panic"
fi
log "PASS in $(( $(date +%s) - T0 ))s"
exit 0
