#!/usr/bin/env python3
"""What sending file data over loopback TCP costs the sender, per GiB.

A server answering 1 MiB READs sends 1 MiB per reply. On loopback the
kernel's whole TCP path runs in the sender's system calls: the copy from
user memory into socket buffers, and the receiving side's protocol work
(the loopback device delivers in the sender's softirq). Whatever a server
does besides, its CPU per GiB read cannot fall below this. This tool sends
--count messages of --size bytes from one process to a reader process over
127.0.0.1 and prints the sender's user and system CPU per GiB, plainly and
with MSG_ZEROCOPY (which the kernel turns into a deferred copy on loopback,
plus the completion notifications).

With --file (a file on the filesystem to measure, larger than --size), it
also times what a READ's data costs from the device to the socket: the file
read with O_DIRECT into an aligned buffer and sent (what dionfs does), and
spliced from the file into a pipe and from the pipe into the socket (the
kernel reads into pages of its own and the socket takes them by reference,
no copy), and read with O_DIRECT into a huge page of our own whose parts
are spliced (`vmsplice`) one by one and which is given up (`MADV_DONTNEED`)
once every part of it has been sent, so that the next read after that gets
a fresh page, zeroed by the kernel, and the socket keeps the old one for as
long as it needs it: no copy, and no page reused under the socket (--size
must divide 2 MiB for this one); --size bytes at a time, caches dropped
first. The copying run reads into one plain mapping, not huge pages.

usage: bench/send_floor.py [--size BYTES] [--count N] [--reps R] [--file PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import mmap
import os
import resource
import socket
import statistics
import time

SO_ZEROCOPY = 60  # linux/socket.h
MSG_ZEROCOPY = 0x4000000
ENOBUFS = 105
BUFFERS = 64  # distinct source buffers: 64 MiB at 1 MiB, past the caches


def reader(port: int, total: int) -> None:
    c = socket.create_connection(("127.0.0.1", port))
    buf = memoryview(bytearray(1 << 20))
    got = 0
    while got < total:
        n = c.recv_into(buf)
        if n == 0:
            break
        got += n
    os._exit(0)


def connect_reader(total: int) -> tuple[socket.socket, int]:
    """A loopback TCP connection to a forked reader of `total` bytes: our
    end, and the reader's pid (wait for it after closing our end)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    port = ls.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        ls.close()
        reader(port, total)
    s, _ = ls.accept()
    ls.close()
    return s, pid


def per_gib(r0, r1, elapsed: float, nbytes: int) -> tuple[float, float, float]:
    """(user, system) CPU seconds per GiB between the rusages `r0` and
    `r1`, and MiB/s over `elapsed` seconds."""
    gib = nbytes / (1 << 30)
    return ((r1.ru_utime - r0.ru_utime) / gib, (r1.ru_stime - r0.ru_stime) / gib,
            nbytes / (1 << 20) / elapsed)


def run(size: int, count: int, zerocopy: bool) -> tuple[float, float, float]:
    """Sender (user, system) CPU seconds per GiB and MiB/s."""
    s, pid = connect_reader(size * count)
    if zerocopy:
        s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    bufs = [mmap.mmap(-1, size) for _ in range(BUFFERS)]
    for b in bufs:
        b.write(os.urandom(4096) * (size // 4096) + os.urandom(size % 4096))
    pending = 0
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    for i in range(count):
        data = memoryview(bufs[i % BUFFERS])
        sent = 0
        while sent < size:
            try:
                sent += s.send(data[sent:], MSG_ZEROCOPY if zerocopy else 0)
                pending += zerocopy
            except OSError as e:
                if e.errno != ENOBUFS:
                    raise
            # Reap completion notifications (one may cover several sends;
            # reaping one per send bounds the optmem they hold).
            while zerocopy and pending > 32:
                try:
                    s.recvmsg(0, 256, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
                    pending -= 1
                except BlockingIOError:
                    time.sleep(0.0001)
    r1, el = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    s.close()
    os.waitpid(pid, 0)
    return per_gib(r0, r1, el, size * count)


F_SETPIPE_SZ = 1031  # linux/fcntl.h
HUGE_PAGE = 2 << 20


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def vmsplice_all(libc, wr: int, sock: int, rd: int, addr: int, size: int) -> None:
    """Moves `size` bytes at `addr` into the pipe `wr` by reference and on
    from `rd` into the socket `sock`."""
    done = 0
    while done < size:
        iov = IoVec(addr + done, size - done)
        n = libc.vmsplice(wr, ctypes.byref(iov), 1, 0)
        if n < 0:
            raise OSError(ctypes.get_errno(), "vmsplice")
        left = n
        while left:
            left -= os.splice(rd, sock, left)
        done += n


def run_file(path: str, size: int, how: str) -> tuple[float, float, float]:
    """Sender (user, system) CPU seconds per GiB and MiB/s, sending the
    whole file (a multiple of `size` of it) read direct and copied
    ("copy"), spliced from the file ("splice"), or read direct into huge
    pages given to the socket ("vmsplice")."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    count = os.fstat(fd).st_size // size
    s, pid = connect_reader(size * count)
    buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
    if how != "copy":
        rd, wr = os.pipe()
        fcntl.fcntl(wr, F_SETPIPE_SZ, size)
    if how == "vmsplice":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.vmsplice.argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_size_t,
                                  ctypes.c_uint]
        libc.vmsplice.restype = ctypes.c_ssize_t
        area = mmap.mmap(-1, 2 * HUGE_PAGE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(area))
        slab = -addr % HUGE_PAGE
        area.madvise(mmap.MADV_HUGEPAGE, slab, HUGE_PAGE)
        parts = HUGE_PAGE // size
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    for i in range(count):
        if how == "vmsplice":
            part = slab + (i % parts) * size
            os.preadv(fd, [memoryview(area)[part:part + size]], i * size)
            vmsplice_all(libc, wr, s.fileno(), rd, addr + part, size)
            if i % parts == parts - 1:
                area.madvise(mmap.MADV_DONTNEED, slab, HUGE_PAGE)
        elif how == "splice":
            filled = 0
            while filled < size:
                filled += os.splice(fd, wr, size - filled, offset_src=i * size + filled)
            sent = 0
            while sent < size:
                sent += os.splice(rd, s.fileno(), size - sent)
        else:
            os.preadv(fd, [buf], i * size)
            s.sendall(buf)
    r1, el = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    s.close()
    os.close(fd)
    if how != "copy":
        os.close(rd)
        os.close(wr)
    os.waitpid(pid, 0)
    return per_gib(r0, r1, el, size * count)


def report(name: str, size: int, count: int, runs: list[tuple[float, float, float]]) -> None:
    user = statistics.median(r[0] for r in runs)
    sys_ = statistics.median(r[1] for r in runs)
    mib_s = statistics.median(r[2] for r in runs)
    print(f"{name:12} {size} B x {count}, median of {len(runs)}: sender CPU "
          f"{user + sys_:.3f} s/GiB (user {user:.3f}, system {sys_:.3f}), {mib_s:,.0f} MiB/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--count", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--file", help="also send this file: read direct and sent, spliced, and vmspliced")
    a = ap.parse_args()
    if a.file and (a.size > HUGE_PAGE or HUGE_PAGE % a.size):
        ap.error("--size must divide 2 MiB with --file (the vmsplice run)")
    for zerocopy in (False, True):
        runs = [run(a.size, a.count, zerocopy) for _ in range(a.reps)]
        report("MSG_ZEROCOPY" if zerocopy else "send", a.size, a.count, runs)
    if a.file:
        count = os.stat(a.file).st_size // a.size
        for how, name in (("copy", "file O_DIRECT"), ("splice", "file splice"),
                          ("vmsplice", "file vmsplice")):
            runs = [run_file(a.file, a.size, how) for _ in range(a.reps)]
            report(name, a.size, count, runs)


if __name__ == "__main__":
    main()
