#!/usr/bin/env python3
"""What IOR-shaped records cost the kernel's page cache, without NFS.

Writes --total bytes of records of each --sizes length into a new file in
--dir, back to back from offset 0, --per-call records per pwrite (1: one
record per system call, as the server makes them), from one thread, and
prints the time per record and, if `perf` is there, how many folios the
page cache allocated for them (tracepoint filemap:mm_filemap_add_to_page_cache).
Caches are dropped before each run; the file is removed after it.

    bench/pagecache_records.py --dir /mnt/xfs --sizes 49152,45056,47008

On this project's development machine (XFS on a loop device with
4096-byte sectors, kernel 6.18) 1 GiB of 47008-byte records took 103,973
folios, of 45056-byte ones 86,249, of 49152-byte ones 46,530 (8 records
per call: 23,896 and 8,315): a write gets folios no larger than itself
and aligned in the file to their size, so records off a 16 KiB boundary
get mostly single pages. The times per record are noisy (12.0-16.7 us
against 8.4-15.1 in four runs). Run as root (it writes
/proc/sys/vm/drop_caches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def one_run(path: str, size: int, per_call: int, total: int) -> float:
    """Seconds per record."""
    records = max(per_call, total // size // per_call * per_call)
    buf = os.urandom(size * per_call)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for i in range(records // per_call):
            os.pwrite(fd, buf, i * per_call * size)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.remove(path)
    return elapsed / records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="directory on the filesystem to measure")
    ap.add_argument("--sizes", default="49152,45056,47008", help="record sizes, comma-separated")
    ap.add_argument("--per-call", type=int, default=1, help="records per pwrite")
    ap.add_argument("--total", type=int, default=1 << 30, help="bytes per run")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child", nargs=3, metavar=("SIZE", "PER_CALL", "TOTAL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    path = os.path.join(a.dir, f".pagecache-records-{os.getpid()}")
    if a.child:
        size, per_call, total = map(int, a.child)
        print(json.dumps({"us_per_record": one_run(path, size, per_call, total) * 1e6}))
        return 0
    if os.geteuid() != 0:
        print("run as root (drop_caches)", file=sys.stderr)
        return 2
    perf = shutil.which("perf")
    for _ in range(a.reps):
        for size in (int(s) for s in a.sizes.split(",")):
            with open("/proc/sys/vm/drop_caches", "w") as f:
                os.sync()
                f.write("3\n")
            cmd = [sys.executable, __file__, "--dir", a.dir, "--child", str(size), str(a.per_call),
                   str(a.total)]
            folios = None
            if perf:
                out = os.path.join(a.dir, f".perf-{os.getpid()}")
                cmd = [perf, "stat", "-x", ",", "-e", "filemap:mm_filemap_add_to_page_cache", "-o", out] + cmd
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            if perf:
                with open(out) as f:
                    for line in f:
                        fields = line.strip().split(",")
                        if len(fields) > 2 and fields[0].isdigit():
                            folios = int(fields[0])
                os.remove(out)
            us = json.loads(r.stdout.strip().splitlines()[-1])["us_per_record"]
            print(f"{size:6d} B x {a.per_call} per call: {us:6.2f} us per record"
                  + (f", {folios:,} folios" if folios is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
