#!/bin/bash
# Run the integration tests against NFS-Ganesha instead of dionfs, to check
# the tests themselves against a mature server:
#
#   tests/lib/ganesha-pytest.sh [pytest args...]     (root)
#
# Ganesha needs an rpcbind and fixed ports, so everything runs in a private
# network namespace (own loopback, ports 2049/20048/111 free) with a private
# rpcbind whose socket lives on a tmpfs over /run in that namespace's mount
# namespace. The namespace is deleted afterwards.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
NS="dionfs-ganesha-$$"

if [ "${1:-}" = _inside ]; then
    shift
    mount -t tmpfs -o mode=0755 dionfs-run /run
    mkdir -p /run/rpcbind
    chown _rpc /run/rpcbind 2>/dev/null || true
    rpcbind -f &
    RPCBIND=$!
    trap 'kill $RPCBIND 2>/dev/null; wait $RPCBIND 2>/dev/null || true' EXIT
    for _ in $(seq 1 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done
    cd "$REPO"
    DIONFS_TEST_BACKEND=ganesha python3 -m pytest "$@"
    exit $?
fi

[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
command -v ganesha.nfsd >/dev/null || { echo "ganesha.nfsd missing" >&2; exit 1; }
ip netns add "$NS"
trap 'ip netns del "$NS" 2>/dev/null || true' EXIT
ip -n "$NS" link set lo up
rc=0
ip netns exec "$NS" "$0" _inside "${@:-tests/integration}" || rc=$?
exit $rc
