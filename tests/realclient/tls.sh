#!/bin/bash
# RPC-with-TLS (RFC 9289) with the real Linux client: Debian 13's kernel
# (6.12) in the realclient guest, with tlshd (ktls-utils) doing its TLS
# handshakes (tests/realclient/setup-tls.sh builds that guest), mounting
# dionfs with xprtsec=tls and xprtsec=mtls. One guest boot.
#
#   tests/realclient/tls.sh [--timeout SECS] [--keep-out]     (root)
#
# 1. openssl makes a CA, a server certificate for the address the guest
#    mounts (IP SAN 192.168.77.1) and a client certificate; the guest's
#    tlshd trusts the CA and presents the client certificate when a mount
#    asks for mtls (/etc/tlshd.conf [authenticate.client]; it and the
#    files it names are a layer appended to the guest's initramfs, so
#    tlshd runs before the first mount).
# 2. dionfs serves, with the server certificate and the CA as client_ca,
#    two directories of an XFS loop filesystem: tls/ with xprtsec =
#    ["tls"] and mtls/ with xprtsec = ["mtls"] (log level
#    dionfs_transport=debug: a line per connection switched to TLS).
# 3. In the guest (GUEST_SCRIPT below; "FAIL: ..." and exit 1 at the
#    first failed check):
#    a. tls/ mounted by the harness with vers=4.2,xprtsec=tls: 4 MiB of
#       random bytes written and read back byte for byte, buffered and
#       O_DIRECT, after dropping the guest's page cache;
#    c. tls/ mounted with no xprtsec (plaintext), over NFSv4.1 and NFSv3,
#       is refused;
#    b. mtls/ mounted with vers=4.1,xprtsec=mtls (mount.nfs): the same
#       byte-for-byte checks; mtls/ with xprtsec=tls (TLS, no client
#       certificate) is refused;
#    d. tls/ mounted over NFSv3 with xprtsec=tls (its MNT goes plain, its
#       NFS calls inside TLS): the same checks.
#    Each mount that works must show its xprtsec in /proc/mounts.
# 4. Here: every file's bytes on the server are what the guest wrote (its
#    sha256). Once the server has stopped, its log must show that every
#    NFS connection that carried more than a refused mount's calls had
#    switched to TLS, three of them at least (a, b, d), one with a client
#    certificate (b); and the refusals of (b) and (c) by xprtsec
#    (connection "none" on tls/, "tls" on mtls/). The guest's console must
#    show tlshd's handshakes done (4 at least), none failed. So a run that
#    went over plaintext by mistake cannot pass.
# 5. Server stopped, netns down, loop filesystem removed, also on failure.
#
# The guest runs in its own network namespace (RC_NETNS, default nfsh-tls)
# with the shared harness's addresses. Env: DIONFS_BIN, RC_DIR, RC_TLS_CACHE.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RC=${RC_DIR:-$(cd "$REPO/../shared/realclient" 2>/dev/null && pwd)}
BIN=${DIONFS_BIN:-$REPO/target/debug/dionfs}
TLS_CACHE=${RC_TLS_CACHE:-/var/cache/realclient-tls}
export RC_NETNS=${RC_NETNS:-nfsh-tls}
TIMEOUT=600
KEEP_OUT=0
SERVER_IP=192.168.77.1
GUEST_IP=192.168.77.2
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) TIMEOUT=$2; shift 2 ;;
        --keep-out) KEEP_OUT=1; shift ;;
        *) echo "usage: $0 [--timeout SECS] [--keep-out]" >&2; exit 2 ;;
    esac
done

log() { echo "[realclient-tls $(date +%H:%M:%S)] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
[ -n "$RC" ] && [ -x "$RC/guest-run.sh" ] || die "realclient harness not found (expected $REPO/../shared/realclient)"
[ -x "$BIN" ] || die "dionfs binary $BIN missing (cargo build, or set DIONFS_BIN)"
GUEST_IMG=$TLS_CACHE/guest/initramfs.cpio.zst
[ -f "$GUEST_IMG" ] && [ -e "$TLS_CACHE/guest/kernel" ] ||
    die "no TLS guest in $TLS_CACHE: run tests/realclient/setup-tls.sh"
. "$REPO/tests/lib/loopfs.sh"
. "$REPO/tests/lib/netns.sh"
netns_clear_stale "$RC_NETNS"

if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$RC_NETNS" &&
    ip netns exec "$RC_NETNS" ss -ltnH 2>/dev/null | grep -qE ':(2049|20048|111)\b'; then
    die "something already listens on 2049/20048/111 in netns $RC_NETNS"
fi

WORK=$(mktemp -d /tmp/dionfs-realclient-tls-XXXXXX)
SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            log "server ignored SIGTERM for 10 s; SIGKILL"
            kill -KILL "$SERVER_PID" 2>/dev/null
        fi
        wait "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_server
    "$RC/netns.sh" down >/dev/null 2>&1 || log "warning: netns $RC_NETNS not removed: $(ip netns pids "$RC_NETNS" 2>/dev/null | tr '\n' ' ')"
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

# ---------------------------------------------------------------- certificates
CERTS=$WORK/certs
mkdir -p "$CERTS"
ossl() { openssl "$@" >>"$CERTS/openssl.log" 2>&1 || die "openssl $1 failed (see $CERTS/openssl.log)"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=dionfs-realclient-ca -keyout "$CERTS/ca.key" -out "$CERTS/ca.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
# cert NAME SUBJECT EXTENSIONS: a certificate the CA signs.
cert() {
    printf '%s\n' "$3" >"$CERTS/$1.ext"
    ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" \
        -keyout "$CERTS/$1.key" -out "$CERTS/$1.csr"
    ossl x509 -req -in "$CERTS/$1.csr" -CA "$CERTS/ca.pem" -CAkey "$CERTS/ca.key" \
        -CAcreateserial -days 2 -extfile "$CERTS/$1.ext" -out "$CERTS/$1.pem"
}
# tlshd checks the server's certificate against the name the mount gives,
# here the address.
cert server /CN=$SERVER_IP "subjectAltName=IP:$SERVER_IP
basicConstraints=CA:FALSE
extendedKeyUsage=serverAuth"
cert client /CN=realclient "subjectAltName=DNS:realclient
basicConstraints=CA:FALSE
extendedKeyUsage=clientAuth"

# ---------------------------------------------------------------- server
loopfs_create xfs 1G || die "cannot create the XFS loop filesystem"
TLS_EXPORT=$LOOPFS_MNT/tls
MTLS_EXPORT=$LOOPFS_MNT/mtls
mkdir "$TLS_EXPORT" "$MTLS_EXPORT" && chmod 1777 "$TLS_EXPORT" "$MTLS_EXPORT" || die "mkdir exports"
mkdir -m 700 "$WORK/state"
cat >"$WORK/dionfs.toml" <<EOF
[server]
listen = "$SERVER_IP"
state_dir = "$WORK/state"
metrics_listen = "off"
log_level = "info,dionfs_transport=debug"

[tls]
certificate = "$CERTS/server.pem"
key = "$CERTS/server.key"
client_ca = "$CERTS/ca.pem"

[[export]]
path = "$TLS_EXPORT"
clients = ["$GUEST_IP"]
xprtsec = ["tls"]

[[export]]
path = "$MTLS_EXPORT"
clients = ["$GUEST_IP"]
xprtsec = ["mtls"]
EOF

"$RC/netns.sh" up >/dev/null || die "netns up failed"
"$RC/netns.sh" exec "$BIN" serve --config "$WORK/dionfs.toml" </dev/null >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
log "started $BIN (pid $SERVER_PID) in netns $RC_NETNS: $TLS_EXPORT xprtsec=tls, $MTLS_EXPORT xprtsec=mtls"
listening() { ip netns exec "$RC_NETNS" ss -ltnH "sport = :$1" 2>/dev/null | grep -q LISTEN; }
for _ in $(seq 1 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; die "server exited during start-up"; }
    listening 2049 && listening 20048 && listening 111 && break
    sleep 0.2
done
for p in 2049 20048 111; do
    listening $p || { tail -30 "$WORK/server.log" >&2; die "server not listening on $SERVER_IP:$p after 30 s"; }
done

# ---------------------------------------------------------------- guest image for this run
# The cached image, then a layer with /etc/tlshd.conf and what it names
# (the kernel unpacks concatenated archives in turn).
LAYER=$WORK/layer
mkdir -p "$LAYER/etc/tlshd"
cp "$CERTS/ca.pem" "$CERTS/client.pem" "$CERTS/client.key" "$LAYER/etc/tlshd/"
cat >"$LAYER/etc/tlshd.conf" <<'EOF'
[debug]
loglevel=1
tls=0
nl=0

[authenticate.client]
x509.truststore=/etc/tlshd/ca.pem
x509.certificate=/etc/tlshd/client.pem
x509.private_key=/etc/tlshd/client.key
EOF
RUN_CACHE=$WORK/rc
mkdir -p "$RUN_CACHE"
ln -s "$(readlink -f "$TLS_CACHE/guest/kernel")" "$RUN_CACHE/kernel"
{
    cat "$GUEST_IMG"
    (cd "$LAYER" && find . -print0 | cpio --null -o -H newc --quiet -R 0:0) | zstd -q
} >"$RUN_CACHE/initramfs.cpio.zst" || die "cannot build the run's initramfs"

# ---------------------------------------------------------------- guest script
GUEST_SCRIPT=$WORK/guest-script.sh
{
    echo '#!/bin/sh'
    echo "SERVER=$SERVER_IP TLS_EXPORT=$TLS_EXPORT MTLS_EXPORT=$MTLS_EXPORT"
    cat <<'EOF'
set -u
START=$(date +%s)
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok   $* ($(( $(date +%s) - START ))s)"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
sum() { sha256sum <"$1" | cut -d' ' -f1; }
SUMS=$OUT_DIR/sums
: >"$SUMS"

# data DIR TAG: 4 MiB of random bytes written buffered and with O_DIRECT
# (unaligned tail included: 4 MiB + 4097), each read back both ways after
# dropping the page cache; the sums go to the host, which compares the
# server's files.
dd if=/dev/urandom of=/tmp/ref bs=4097 count=1024 2>/dev/null
REF=$(sum /tmp/ref)
data() {
    d=$1; tag=$2
    cp /tmp/ref "$d/$tag-buffered" || fail "$tag: buffered write"
    dd if=/tmp/ref of="$d/$tag-direct" bs=1M oflag=direct 2>/dev/null || fail "$tag: O_DIRECT write"
    drop
    for f in buffered direct; do
        [ "$(sum "$d/$tag-$f")" = "$REF" ] || fail "$tag: $f file read back (buffered) differs"
        got=$(dd if="$d/$tag-$f" bs=1M iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
        [ "$got" = "$REF" ] || fail "$tag: $f file read back with O_DIRECT differs"
        echo "$REF $tag-$f" >>"$SUMS"
    done
    ok "$tag: 4 MiB + 4 KiB written and read back byte for byte, buffered and O_DIRECT"
}
# mounted DIR OPT: DIR is an NFS mount whose options include OPT.
mounted() {
    line=$(grep " $1 nfs" /proc/mounts) || fail "$1 is not mounted"
    case ",$(echo "$line" | cut -d' ' -f4)," in
        *",$2,"*) ;;
        *) fail "$1 mounted without $2: $line" ;;
    esac
    echo "$line" >>"$OUT_DIR/mounts"
}
# try_mount NAME EXPORT DIR OPTS: mount.nfs (Debian 13's), its output in
# OUT_DIR/NAME.mount; its exit status.
try_mount() {
    mkdir -p "$3"
    timeout 90 mount.nfs "$SERVER:$2" "$3" -v -o "$4" >"$OUT_DIR/$1.mount" 2>&1
    r=$?
    echo "exit $r" >>"$OUT_DIR/$1.mount"
    return $r
}
refused() { # NAME EXPORT OPTS: the mount must fail
    if try_mount "$1" "$2" /mnt/refused "$3"; then
        umount /mnt/refused
        fail "$1: $SERVER:$2 mounted with $3"
    fi
    ok "$1: $SERVER:$2 with $3 refused ($(tail -2 "$OUT_DIR/$1.mount" | head -1))"
}

echo "== guest $(uname -r); $(grep " $NFS_MNT " /proc/mounts)"
ps | grep -q '[t]lshd' || fail "tlshd is not running"

# a. the harness's mount: NFSv4.2, xprtsec=tls
mounted "$NFS_MNT" xprtsec=tls
mounted "$NFS_MNT" vers=4.2
data "$NFS_MNT" v42-tls

# c. plaintext mounts of the TLS-only export: NFSv4.1 (a client of its own:
# the 4.2 one is of another minor version), then NFSv3
refused plain-v41 "$TLS_EXPORT" vers=4.1,retry=0
refused plain-v3 "$TLS_EXPORT" vers=3,proto=tcp,mountproto=tcp,port=2049,mountport=20048,nolock,retry=0

# b. xprtsec=mtls: tlshd presents the client certificate
try_mount mtls-v41 "$MTLS_EXPORT" /mnt/mtls vers=4.1,xprtsec=mtls ||
    fail "mtls-v41: mount failed: $(cat "$OUT_DIR/mtls-v41.mount")"
mounted /mnt/mtls xprtsec=mtls
mounted /mnt/mtls vers=4.1
data /mnt/mtls v41-mtls
umount /mnt/mtls || fail "umount /mnt/mtls"
# TLS without a client certificate does not do for the mtls export (v3:
# its clients never share a connection of another xprtsec)
refused tls-on-mtls-v3 "$MTLS_EXPORT" vers=3,proto=tcp,mountproto=tcp,port=2049,mountport=20048,nolock,retry=0,xprtsec=tls

# d. NFSv3 with xprtsec=tls
try_mount tls-v3 "$TLS_EXPORT" /mnt/v3 vers=3,proto=tcp,mountproto=tcp,port=2049,mountport=20048,nolock,xprtsec=tls ||
    fail "tls-v3: mount failed: $(cat "$OUT_DIR/tls-v3.mount")"
mounted /mnt/v3 xprtsec=tls
mounted /mnt/v3 vers=3
data /mnt/v3 v3-tls
# the same files through the 4.2 mount
for f in v3-tls-buffered v42-tls-direct; do
    [ "$(sum "$NFS_MNT/$f")" = "$REF" ] || fail "$f through NFSv4.2 differs"
done
umount /mnt/v3 || fail "umount /mnt/v3"
ok "all checks"
EOF
} >"$GUEST_SCRIPT"

log "guest: mount $SERVER_IP:$TLS_EXPORT (NFSv4.2, xprtsec=tls), then the other mounts"
RC_CACHE=$RUN_CACHE "$RC/guest-run.sh" --server "$SERVER_IP" --vers 4.2 --nfs-port 2049 \
    --export "$TLS_EXPORT" --mount-opts xprtsec=tls --script "$GUEST_SCRIPT" \
    --timeout "$TIMEOUT" --out "$WORK/guest" --quiet
GRC=$?
OUT=$WORK/guest/out
tlshd_lines() { grep -a 'tlshd' "$WORK/guest/console.log" | tail -"$1" >&2; }

alive=1
kill -0 "$SERVER_PID" 2>/dev/null || alive=0
if [ $GRC != 0 ] || [ $alive = 0 ]; then
    log "server log (tail):"
    tail -40 "$WORK/server.log" >&2
    log "tlshd (guest console, tail):"
    tlshd_lines 20
fi
[ $alive = 1 ] || die "the server died during the guest run"
case $GRC in
    0) ;;
    1) die "a check failed in the guest (see FAIL: above; console: $WORK/guest/console.log)" ;;
    3) die "the guest could not mount $SERVER_IP:$TLS_EXPORT with vers=4.2,xprtsec=tls" ;;
    4) die "the guest failed to boot or crashed ($WORK/guest/console.log)" ;;
    124) die "timeout after ${TIMEOUT}s" ;;
    *) die "guest-run.sh exited with $GRC" ;;
esac

# ---------------------------------------------------------------- server side
# The bytes on the server are the guest's.
n=0
while read -r want name; do
    case "$name" in v41-mtls-*) dir=$MTLS_EXPORT ;; *) dir=$TLS_EXPORT ;; esac
    got=$(sha256sum <"$dir/$name" | cut -d' ' -f1)
    [ "$got" = "$want" ] || die "$dir/$name on the server differs from what the guest wrote"
    n=$((n + 1))
done <"$OUT/sums"
[ $n = 6 ] || die "expected 6 files written by the guest, its sums list $n"
log "ok   the server holds the $n files byte for byte as the guest wrote them"

# The server's log, complete once it has stopped: the connections that
# carried the data were TLS, with and without a client certificate
# (dionfs_transport's "connection opened", "switched to TLS" and
# "connection closed ... calls=N" lines, by connection), and the refusals
# were the exports' xprtsec.
stop_server
SLOG=$WORK/server.log
BUSY=60   # calls: each workload makes 100 or more, a refused mount 30 or fewer
awk -v busy=$BUSY '
    function field(name,   i) { for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2); return "" }
    /connection opened/ && field("local") ~ /:2049$/ { nfs[field("conn")] = 1 }
    # "switched to TLS conn=N ... client_certificate=B" (or "switched to
    # TLS, with a client certificate conn=N ...", "..., without ...")
    /switched to TLS/ {
        tls[field("conn")] = (field("client_certificate") == "true" || /switched to TLS, with a client certificate/) ? "true" : "false"
    }
    /connection closed/ { closed[field("conn")] = 1; calls[field("conn")] = field("calls") }
    END {
        for (c in nfs) {
            if (!(c in closed)) { print "FAIL: NFS connection " c " has no closing line"; bad = 1; continue }
            if (calls[c] + 0 <= busy) continue
            if (!(c in tls)) { print "FAIL: NFS connection " c " carried " calls[c] " calls in plaintext"; bad = 1; continue }
            n++; if (tls[c] == "true") m++
            print "NFS connection " c ": " calls[c] " calls, TLS, client certificate " tls[c]
        }
        print "busy=" n + 0 " mtls=" m + 0
        exit bad
    }' "$SLOG" >"$WORK/connections" || { cat "$WORK/connections" >&2; die "plaintext NFS connections in the server log (above)"; }
busy=$(sed -n 's/^busy=\([0-9]*\) .*/\1/p' "$WORK/connections")
mtls=$(sed -n 's/.* mtls=\([0-9]*\)$/\1/p' "$WORK/connections")
[ "$busy" -ge 3 ] && [ "$mtls" -ge 1 ] || {
    cat "$WORK/connections" >&2
    die "the server log shows $busy NFS connections in TLS that carried more than $BUSY calls, $mtls with a client certificate (expected 3 and 1: the 4.2, mtls and v3 mounts)"
}
count() { grep -cE "$1" "$SLOG"; }
[ "$(count "xprtsec does not allow this connection.*export=$TLS_EXPORT .*connection=\"?none\"?")" -ge 1 ] ||
    die "the server log shows no plaintext call refused on $TLS_EXPORT"
[ "$(count "xprtsec does not allow this connection.*export=$MTLS_EXPORT .*connection=\"?tls\"?")" -ge 1 ] ||
    die "the server log shows no TLS call (without a client certificate) refused on $MTLS_EXPORT"
log "ok   server log: the $busy NFS connections that carried the data were TLS ($mtls with a client certificate); plaintext refused on tls/, TLS without a certificate on mtls/"
# And tlshd's side, in the guest's console: a handshake per TLS mount
# (the 4.2, mtls, refused tls-on-mtls and v3 ones), none failed.
ok_hs=$(grep -ac 'tlshd.*Handshake with .* was successful' "$WORK/guest/console.log")
failed_hs=$(grep -ac 'tlshd.*Handshake with .* failed' "$WORK/guest/console.log")
[ "$ok_hs" -ge 4 ] && [ "$failed_hs" = 0 ] || {
    tlshd_lines 30
    die "tlshd in the guest: $ok_hs handshakes done, $failed_hs failed (expected 4 or more, none failed)"
}
log "ok   tlshd in the guest: $ok_hs handshakes done, none failed"
if grep -qiE 'panicked|RUST_BACKTRACE' "$SLOG"; then
    grep -iE -A5 'panicked' "$SLOG" >&2
    die "the server log shows a panic"
fi
log "PASS in $(( $(date +%s) - T0 ))s"
exit 0
