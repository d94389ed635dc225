#!/bin/sh
# /init of the RPC-with-TLS guest (tests/realclient/setup-tls.sh), in front
# of the shared guest's /init (../shared/realclient/guest-init.sh, here
# /init.realclient): loads kTLS and its ciphers, starts tlshd, then hands
# over, and the shared init mounts, runs the job and powers off as it does
# for the Debian 12 guest.
#
# The kernel asks tlshd (over netlink) for each TLS handshake of an
# xprtsec=tls or xprtsec=mtls mount, so it must run before the mount. It
# runs only when the image has an /etc/tlshd.conf (tests/realclient/tls.sh
# appends one, with the certificates it names, per run), and logs to the
# console (-s), which guest-run.sh keeps as <out>/console.log.
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
/bin/busybox mkdir -p /proc /sys /dev
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev 2>/dev/null

say() { echo "REALCLIENT-TLS: $*" >/dev/console; }

for m in tls gcm ghash_generic chacha20poly1305; do
    /bin/busybox modprobe "$m" 2>/dev/console || say "modprobe $m failed"
done
# AES-NI only where the CPU has it (not qemu64 under TCG).
grep -qw aes /proc/cpuinfo && /bin/busybox modprobe aesni_intel 2>/dev/null

if [ -f /etc/tlshd.conf ]; then
    /usr/sbin/tlshd -s -c /etc/tlshd.conf </dev/null >/dev/console 2>&1 &
    pid=$!
    sleep 0.5
    if kill -0 "$pid" 2>/dev/null; then
        say "tlshd started (pid $pid)"
    else
        say "tlshd exited at start"
    fi
else
    say "no /etc/tlshd.conf: tlshd not started"
fi

exec /init.realclient
