#!/bin/bash
# Idempotent setup of the RPC-with-TLS guest: ../shared/realclient's guest,
# booting Debian 13 (trixie)'s kernel instead of Debian 12's, with Debian
# 13's tlshd (ktls-utils: the TLS handshakes the kernel hands to user space)
# and mount.nfs. Debian 12's 6.1 kernel has no RPC-with-TLS client; 6.12
# has (`xprtsec=tls|mtls`, RFC 9289).
#
#   tests/realclient/setup-tls.sh [--force]      (root; --force rebuilds the initramfs)
#
# The host stays Debian 12: trixie packages are fetched with a private apt
# configuration ($TLS_CACHE/apt: trixie's index, not in /etc/apt) and
# unpacked with dpkg-deb -x, never installed.
#
#   $TLS_CACHE/base    RC_CACHE of the shared setup.sh: the trixie kernel
#                      (kernel/, extracted here first, so setup.sh takes it
#                      as its cached kernel) and the shared guest's initramfs
#                      built for it (busybox, modules, fio, ..., guest-init.sh)
#   $TLS_CACHE/guest   RC_CACHE for guest-run.sh: kernel -> ../base/kernel
#                      and initramfs.cpio.zst = the base one plus the tls
#                      and kTLS cipher modules (all modules decompressed:
#                      busybox modprobe reads no .ko.xz), tlshd and trixie's
#                      mount.nfs with trixie's libraries (libc included: every
#                      library of the base image trixie has is replaced by
#                      trixie's), and tls-guest-init.sh as /init in front of
#                      the shared /init (renamed /init.realclient)
#
# tls-guest-init.sh starts tlshd when the image has an /etc/tlshd.conf;
# tests/realclient/tls.sh appends a layer with one (and the certificates)
# per run. Both images are rebuilt only when an input changes.
# Env: RC_TLS_CACHE (default /var/cache/realclient-tls), RC_DIR (the shared
# harness, default ../shared/realclient beside the repository).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RC=${RC_DIR:-$REPO/../shared/realclient}
[ -x "$RC/setup.sh" ] || { echo "ERROR: realclient harness not found at $RC" >&2; exit 1; }
RC=$(cd "$RC" && pwd)
TLS_CACHE=${RC_TLS_CACHE:-/var/cache/realclient-tls}
BASE=$TLS_CACHE/base
GUEST=$TLS_CACHE/guest
APTDIR=$TLS_CACHE/apt
DEBS=$TLS_CACHE/debs
TROOT=$TLS_CACHE/trixie-root

log() { echo "[setup-tls $(date +%H:%M:%S)] $*" >&2; }
die() { echo "ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"

FORCE=0
[ "${1:-}" = --force ] && FORCE=1

# Trixie packages whose files go into the guest (their libraries follow).
TRIXIE_PKGS=(ktls-utils nfs-common)
TRIXIE_BINS=(/usr/sbin/tlshd /usr/sbin/mount.nfs)
# kTLS itself, and the AEADs TLS 1.3 sessions use (kTLS allocates them when
# tlshd hands the keys over; gcm and chacha20poly1305 are modules in 6.12).
TLS_MODULES=(tls gcm ghash_generic chacha20poly1305 aesni_intel)

mkdir -p "$BASE" "$GUEST" "$APTDIR" "$DEBS"

# ---------------------------------------------------------------- host packages
need=()
for p in openssl xz-utils zstd cpio; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    log "installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---------------------------------------------------------------- trixie apt
# A private apt: its own sources, lists and archives, no dpkg status (so
# it resolves as for an empty system and installs nothing).
cat >"$APTDIR/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
EOF
mkdir -p "$APTDIR/lists/partial" "$APTDIR/archives/partial" "$APTDIR/sources.list.d" "$APTDIR/preferences.d"
cat >"$APTDIR/apt.conf" <<EOF
Dir::State "$APTDIR";
Dir::State::lists "$APTDIR/lists";
Dir::State::status "/dev/null";
Dir::Cache "$APTDIR";
Dir::Cache::archives "$APTDIR/archives";
Dir::Etc::SourceList "$APTDIR/sources.list";
Dir::Etc::SourceParts "$APTDIR/sources.list.d";
Dir::Etc::Preferences "$APTDIR/preferences";
Dir::Etc::PreferencesParts "$APTDIR/preferences.d";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
EOF
tapt() { APT_CONFIG="$APTDIR/apt.conf" "$@"; }
UPDATED=0
trixie_update() {
    [ $UPDATED = 1 ] && return 0
    log "apt-get update (trixie index, private to $APTDIR)"
    tapt apt-get update -qq >/dev/null || die "trixie apt-get update failed"
    UPDATED=1
}
# trixie_download DIR PKG...: the .debs into DIR (a fresh index first if
# the old one names versions the mirror no longer has).
trixie_download() {
    local dir=$1; shift
    download_into "$dir" "$@" && return 0
    trixie_update
    download_into "$dir" "$@" || die "cannot download from trixie: $*"
}
# (apt warns that root downloads unsandboxed: true, and said once here.)
download_into() {
    local dir=$1 rc; shift
    (cd "$dir" && tapt apt-get download -qq "$@") 2>"$dir/.download.err"
    rc=$?
    grep -v 'unsandboxed' "$dir/.download.err" >&2
    rm -f "$dir/.download.err"
    return $rc
}
ls "$APTDIR"/lists/*_Packages* >/dev/null 2>&1 || trixie_update

# ---------------------------------------------------------------- kernel
KDIR=$BASE/kernel
kver=$(ls -1 "$KDIR/lib/modules" 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$kver" ] || [ ! -f "$KDIR/boot/vmlinuz-$kver" ]; then
    kpkg=$(tapt apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6/{print $2; exit}')
    if [ -z "$kpkg" ]; then
        trixie_update
        kpkg=$(tapt apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-6/{print $2; exit}')
    fi
    [ -n "$kpkg" ] || die "cannot resolve trixie's linux-image-amd64"
    mkdir -p "$DEBS/kernel"
    deb=$(ls -1 "$DEBS/kernel/${kpkg}"_*.deb 2>/dev/null | tail -1 || true)
    if [ -z "$deb" ]; then
        log "downloading $kpkg (trixie)"
        trixie_download "$DEBS/kernel" "$kpkg"
        deb=$(ls -1 "$DEBS/kernel/${kpkg}"_*.deb | tail -1)
    fi
    rm -rf "$KDIR"
    mkdir -p "$KDIR"
    dpkg-deb -x "$deb" "$KDIR"
    # Trixie ships modules in /usr/lib/modules; the harness (rc_kver,
    # modprobe -d) looks in /lib/modules.
    if [ -d "$KDIR/usr/lib/modules" ]; then
        mkdir -p "$KDIR/lib"
        mv "$KDIR/usr/lib/modules" "$KDIR/lib/modules"
    fi
    kver=$(ls -1 "$KDIR/lib/modules" | sort -V | tail -1)
    depmod -b "$KDIR" "$kver"
    log "extracted guest kernel $kver from $(basename "$deb")"
else
    log "guest kernel: $kver (cached)"
fi
KCONFIG=$KDIR/boot/config-$kver
# RPC-with-TLS in the client: the handshake upcall (net/handshake), kTLS,
# and the NFS client's xprtsec= option.
grep -Eq '^CONFIG_NET_HANDSHAKE=y' "$KCONFIG" || die "guest kernel $kver: no CONFIG_NET_HANDSHAKE"
grep -Eq '^CONFIG_TLS=[ym]' "$KCONFIG" || die "guest kernel $kver: no CONFIG_TLS"
grep -Eq '^CONFIG_NFS_V4=m' "$KCONFIG" || die "guest kernel $kver: no NFSv4 client module"
nfsko=$(modprobe -d "$KDIR" -S "$kver" --show-depends nfs | awk '$1=="insmod" && $2 ~ /\/nfs\.ko/{print $2}')
[ -n "$nfsko" ] || die "guest kernel $kver: nfs module not found"
case "$nfsko" in *.xz) xz -dc "$nfsko" ;; *) cat "$nfsko" ;; esac | grep -ac 'xprtsec=tls' >/dev/null ||
    die "guest kernel $kver: its NFS client has no xprtsec option"

# ---------------------------------------------------------------- trixie userspace
# The packages' library closure, as apt resolves it for an empty system;
# which of those files the guest needs is decided below by the loader.
want_debs() {
    tapt apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${TRIXIE_PKGS[@]}" 2>/dev/null |
        grep -v '^[ <]' | grep -E "^(lib.*|$(IFS='|'; echo "${TRIXIE_PKGS[*]}"))$" |
        grep -v -- '-perl$' | sort -u
}
mkdir -p "$DEBS/user"
pkgs=$(want_debs)
[ -n "$pkgs" ] || { trixie_update; pkgs=$(want_debs); }
echo "$pkgs" | grep -qx libc6 || die "cannot resolve the trixie packages: ${TRIXIE_PKGS[*]}"
missing=()
# shellcheck disable=SC2086
while read -r p v; do
    v=${v/:/%3a}    # as apt-get download writes an epoch in a file name
    ls "$DEBS/user/${p}_${v}_"*.deb >/dev/null 2>&1 || missing+=("$p")
done < <(tapt apt-cache policy $pkgs 2>/dev/null | awk '/^[^ ]/{p=$1; sub(/:$/,"",p)} /Candidate:/{print p, $2}')
if [ ${#missing[@]} -gt 0 ]; then
    log "downloading ${#missing[@]} trixie packages: ${missing[*]}"
    trixie_download "$DEBS/user" "${missing[@]}"
fi
# The newest .deb of each wanted package; their names and versions are the
# image's input (the fingerprint below).
USER_DEBS=()
for p in $pkgs; do
    d=$(ls -1 "$DEBS/user/${p}_"*.deb 2>/dev/null | sort -V | tail -1)
    [ -n "$d" ] || die "no .deb for $p"
    USER_DEBS+=("$d")
done

# ---------------------------------------------------------------- base image
# The shared setup.sh, with the trixie kernel as its cached kernel: its
# packages, the module closure of its guest modules, busybox, fio, ... and
# guest-init.sh, exactly as for the Debian 12 guest.
force=()
[ $FORCE = 1 ] && force=(--force)
RC_CACHE="$BASE" "$RC/setup.sh" "${force[@]}" >/dev/null ||
    die "the shared setup.sh failed for the trixie kernel"
[ -f "$BASE/initramfs.cpio.zst" ] || die "the shared setup.sh built no initramfs"

# ---------------------------------------------------------------- guest image
ln -sfn ../base/kernel "$GUEST/kernel"
fp_inputs() {
    echo "$kver"
    cat "$BASE/initramfs.cpio.zst.fp"
    sha256sum "$HERE/setup-tls.sh" "$HERE/tls-guest-init.sh"
    for d in "${USER_DEBS[@]}"; do basename "$d"; done
    echo "${TRIXIE_BINS[*]} ${TLS_MODULES[*]}"
}
FP=$(fp_inputs | sha256sum | cut -d' ' -f1)
IMG=$GUEST/initramfs.cpio.zst
if [ $FORCE = 0 ] && [ -f "$IMG" ] && [ "$(cat "$IMG.fp" 2>/dev/null)" = "$FP" ]; then
    log "initramfs: up to date ($IMG)"
else
    rm -rf "$TROOT"
    mkdir -p "$TROOT"
    for d in "${USER_DEBS[@]}"; do dpkg-deb -x "$d" "$TROOT"; done
    TLIB=$TROOT/usr/lib/x86_64-linux-gnu
    TLD=$TLIB/ld-linux-x86-64.so.2
    [ -x "$TLD" ] || die "no trixie loader in $TLD"

    ST=$GUEST/initramfs.staging
    rm -rf "$ST"
    mkdir -p "$ST"
    zstd -dc "$BASE/initramfs.cpio.zst" | (cd "$ST" && cpio -idm --quiet)

    # kTLS modules (closure by the host's kmod), then every module
    # decompressed: busybox modprobe loads plain .ko files only.
    mdir=lib/modules/$kver
    for m in "${TLS_MODULES[@]}"; do
        modprobe -d "$KDIR" -S "$kver" --show-depends "$m" || die "module $m not in $kver"
    done | awk '$1=="insmod"{print $2}' | sort -u | while read -r ko; do
        rel=${ko#"$KDIR/"}
        mkdir -p "$ST/$(dirname "$rel")"
        cp "$ko" "$ST/$rel"
    done
    find "$ST/$mdir" -name '*.ko.xz' -exec xz -d {} +
    depmod -b "$ST" "$kver"
    # The kernel loads modules it needs on its own (a cipher kTLS asks for)
    # through /sbin/modprobe.
    ln -sfn /bin/busybox "$ST/sbin/modprobe"

    # Trixie binaries, and their libraries as trixie's loader resolves them
    # among trixie's files (none may come from this host).
    for b in "${TRIXIE_BINS[@]}"; do
        [ -x "$TROOT$b" ] || die "$b not in ${TRIXIE_PKGS[*]}"
        mkdir -p "$ST$(dirname "$b")"
        cp "$TROOT$b" "$ST$b"
        "$TLD" --inhibit-cache --library-path "$TLIB" --list "$TROOT$b" |
            awk '/=> \//{print $3}' | while read -r lib; do
                case "$lib" in "$TROOT"/*) ;; *) die "$b needs $lib, not found among the trixie packages" ;; esac
                echo "$lib"
            done >"$ST.libs" || exit 1
        while read -r lib; do
            cp -L "$lib" "$ST/lib/x86_64-linux-gnu/$(basename "$lib")"
        done <"$ST.libs"
    done
    rm -f "$ST.libs"
    # mount.nfs is also /sbin/mount.nfs, where the shared init runs it.
    [ -e "$ST/sbin/mount.nfs" ] && cp "$TROOT/usr/sbin/mount.nfs" "$ST/sbin/mount.nfs"
    # One C library and one version of each library in the guest: trixie's
    # wherever trixie has it (libc, libm, ld.so must match; Debian 12's
    # binaries of the base image run on trixie's newer libraries).
    find "$ST/lib" "$ST/usr/lib" "$ST/lib64" \( -type f -o -type l \) -name '*.so*' 2>/dev/null |
        while read -r f; do
            n=$(basename "$f")
            [ -e "$TLIB/$n" ] && cp -L --remove-destination "$TLIB/$n" "$f"
        done
    cp -L --remove-destination "$TLD" "$ST/lib64/ld-linux-x86-64.so.2"
    cp -L --remove-destination "$TLD" "$ST/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    ldconfig -r "$ST" 2>/dev/null || true

    mkdir -p "$ST/etc/tlshd"
    mv "$ST/init" "$ST/init.realclient"
    install -m 0755 "$HERE/tls-guest-init.sh" "$ST/init"

    (cd "$ST" && find . -print0 | cpio --null -o -H newc --quiet) | zstd -q -T0 -10 -f -o "$IMG.tmp"
    mv "$IMG.tmp" "$IMG"
    echo "$FP" >"$IMG.fp"
    log "built initramfs $IMG ($(du -h "$IMG" | cut -f1) compressed)"
    rm -rf "$ST" "$TROOT"
fi

echo "kernel:    $KDIR/boot/vmlinuz-$kver"
echo "initramfs: $IMG"
echo "RC_CACHE=$GUEST for guest-run.sh"
