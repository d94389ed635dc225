#!/usr/bin/env python3
"""How fast the filesystem itself makes renames durable, without NFS.

Usage: bench/rename_fsync.py DIR [THREADS] [RENAMES_PER_THREAD]

THREADS threads each rename their own files in DIR and fsync DIR after each
rename, as dionfs's RENAME does in `sync` mode (crates/fs/src/durable.rs);
prints renames per second. With one thread it is the latency of a log
force on DIR's filesystem; with many, how well the journal batches
concurrent forces. Compare with bench/run's meta-rename job.
"""
import os
import sys
import threading
import time


def main() -> None:
    d = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    work = os.path.join(d, f"rename-fsync-{os.getpid()}")
    os.mkdir(work)
    for t in range(threads):
        for i in range(per):
            os.close(os.open(f"{work}/a{t}_{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    os.sync()

    def run(t: int) -> None:
        fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(per):
                os.rename(f"{work}/a{t}_{i}", f"{work}/b{t}_{i}")
                os.fsync(fd)
        finally:
            os.close(fd)

    ths = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    elapsed = time.perf_counter() - start
    print(f"{threads} threads: {threads * per / elapsed:.0f} durable renames/s")
    for t in range(threads):
        for i in range(per):
            os.unlink(f"{work}/b{t}_{i}")
    os.rmdir(work)


if __name__ == "__main__":
    main()
