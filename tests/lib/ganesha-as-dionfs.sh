#!/bin/bash
# A stand-in for `dionfs serve` built on NFS-Ganesha, to validate test scripts
# (tests/realclient/run.sh) before dionfs works:
#
#   DIONFS_BIN=tests/lib/ganesha-as-dionfs.sh tests/realclient/run.sh
#
# Understands: serve DIR [--listen IP] [--allow ADDR]... [--state-dir DIR]
# [--ro] [--all-squash] [--no-root-squash]; default ports 2049/20048/111.
# Must run in its own mount namespace (as under `ip netns exec`): it mounts a
# tmpfs on /run for a private rpcbind. SIGTERM stops ganesha and rpcbind.
set -euo pipefail
[ "${1:-}" = serve ] || { echo "usage: $0 serve DIR [options]" >&2; exit 2; }
shift
EXPORT=$1; shift
LISTEN=0.0.0.0; CLIENTS=(); STATE=$(mktemp -d); ACCESS=RW; SQUASH=Root_Squash
while [ $# -gt 0 ]; do
    case "$1" in
        --listen) LISTEN=$2; shift 2 ;;
        --allow) CLIENTS+=("$2"); shift 2 ;;
        --state-dir) STATE=$2; shift 2 ;;
        --ro) ACCESS=RO; shift ;;
        --all-squash) SQUASH=All_Squash; shift ;;
        --no-root-squash) SQUASH=No_Root_Squash; shift ;;
        *) echo "ganesha-as-dionfs: ignoring $1" >&2; shift ;;
    esac
done
[ ${#CLIENTS[@]} -gt 0 ] || CLIENTS=(127.0.0.1)
mkdir -p "$STATE/recovery"
CONF="$STATE/ganesha.conf"
cat >"$CONF" <<EOF
NFS_CORE_PARAM {
    Protocols = 3; NFS_Port = 2049; MNT_Port = 20048; Bind_addr = $LISTEN;
    Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false;
    mount_path_pseudo = false; Plugins_Dir = "/usr/lib/x86_64-linux-gnu/ganesha";
}
NFS_KRB5 { Active_krb5 = false; }
NFSv4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = "$STATE/recovery"; }
EXPORT {
    Export_Id = 1; Path = "$EXPORT"; Pseudo = "$EXPORT"; Protocols = 3; Transports = TCP;
    SecType = sys; Access_Type = None; Squash = $SQUASH;
    MaxRead = 1048576; MaxWrite = 1048576;
    FSAL { Name = VFS; }
    CLIENT { Clients = $(IFS=,; echo "${CLIENTS[*]}"); Access_Type = $ACCESS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
mount -t tmpfs -o mode=0755 ganesha-run /run
mkdir -p /run/rpcbind
chown _rpc /run/rpcbind 2>/dev/null || true
rpcbind -f &
RPCBIND=$!
for _ in $(seq 1 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done
ganesha.nfsd -F -f "$CONF" -L "$STATE/ganesha.log" -p "$STATE/ganesha.pid" -N NIV_EVENT &
GANESHA=$!
stop() {
    kill -TERM "$GANESHA" 2>/dev/null || true
    wait "$GANESHA" 2>/dev/null || true
    kill -TERM "$RPCBIND" 2>/dev/null || true
    wait "$RPCBIND" 2>/dev/null || true
    exit 0
}
trap stop TERM INT
wait "$GANESHA"
rc=$?
kill -TERM "$RPCBIND" 2>/dev/null || true
exit $rc
