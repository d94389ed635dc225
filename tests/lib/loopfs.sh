# Bash helpers: a real filesystem on a loop device with 4096-byte sectors.
# Source this file, then:
#
#   loopfs_create xfs 4G        # sets LOOPFS_IMG, LOOPFS_DEV, LOOPFS_MNT
#   trap loopfs_destroy EXIT    # (or call it from your own cleanup)
#   ...
#   loopfs_destroy              # umount, losetup -d, rm image; idempotent
#
# The image is sparse under ${LOOPFS_BASE:-/var/tmp}; the loop device uses
# direct I/O on it, so the host page cache holds only the filesystem's pages.

LOOPFS_IMG=""
LOOPFS_DEV=""
LOOPFS_MNT=""

loopfs_create() {
    local fstype=${1:-xfs} size=${2:-4G}
    local base=${LOOPFS_BASE:-/var/tmp}
    LOOPFS_IMG=$(mktemp "$base/dionfs-$fstype-XXXXXX.img") || return 1
    truncate -s "$size" "$LOOPFS_IMG" || return 1
    LOOPFS_DEV=$(losetup --find --show --sector-size 4096 --direct-io=on "$LOOPFS_IMG") || return 1
    local lbs
    lbs=$(cat "/sys/block/$(basename "$LOOPFS_DEV")/queue/logical_block_size")
    if [ "$lbs" != 4096 ]; then
        echo "loopfs: $LOOPFS_DEV has logical block size $lbs, expected 4096" >&2
        return 1
    fi
    case "$fstype" in
        xfs) mkfs.xfs -q -f "$LOOPFS_DEV" ;;
        ext4) mkfs.ext4 -q -F -b 4096 "$LOOPFS_DEV" ;;
        btrfs) mkfs.btrfs -q -f "$LOOPFS_DEV" >/dev/null ;;
        *) echo "loopfs: unsupported filesystem $fstype" >&2; return 1 ;;
    esac || return 1
    LOOPFS_MNT=$(mktemp -d "/tmp/dionfs-$fstype-mnt-XXXXXX") || return 1
    mount -t "$fstype" "$LOOPFS_DEV" "$LOOPFS_MNT" || return 1
}

loopfs_destroy() {
    local i
    if [ -n "$LOOPFS_MNT" ]; then
        if mountpoint -q "$LOOPFS_MNT"; then
            for i in $(seq 1 20); do
                umount "$LOOPFS_MNT" 2>/dev/null && break
                sleep 0.5
            done
            mountpoint -q "$LOOPFS_MNT" && umount -l "$LOOPFS_MNT"
        fi
        rmdir "$LOOPFS_MNT" 2>/dev/null
        LOOPFS_MNT=""
    fi
    if [ -n "$LOOPFS_DEV" ]; then
        for i in $(seq 1 20); do
            losetup -d "$LOOPFS_DEV" 2>/dev/null && break
            sleep 0.5
        done
        LOOPFS_DEV=""
    fi
    if [ -n "$LOOPFS_IMG" ]; then
        rm -f "$LOOPFS_IMG"
        LOOPFS_IMG=""
    fi
    return 0
}
