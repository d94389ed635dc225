"""Client-side helpers: libnfs's command-line tools, the nfsproc C tool, error checks."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NFSPROC_SRC = REPO / "tests" / "tools" / "nfsproc.c"
IORHARD_SRC = REPO / "tests" / "tools" / "iorhard.c"


def rss_kib(pid: int) -> int:
    """Resident memory of process `pid` in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def make_random_file(path: str, size: int, seed: int = 0) -> str:
    """Write `size` pseudo-random bytes (cheap: a repeated random block with a counter)."""
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    h = hashlib.sha256()
    with open(path, "wb") as f:
        done, i = 0, 0
        while done < size:
            chunk = (i.to_bytes(8, "little") + block)[: min(len(block) + 8, size - done)]
            f.write(chunk)
            h.update(chunk)
            done += len(chunk)
            i += 1
    return h.hexdigest()


def _run(cmd: list[str], timeout: float = 300, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, timeout=timeout, input=input)


def nfs_cp(src: str, dst: str, timeout: float = 600) -> None:
    r = _run(["nfs-cp", src, dst], timeout)
    if r.returncode != 0:
        raise AssertionError(f"nfs-cp {src} {dst} failed ({r.returncode}): "
                             f"{r.stderr.decode(errors='replace')}{r.stdout.decode(errors='replace')}")


def nfs_cat(url: str, timeout: float = 120) -> bytes:
    r = _run(["nfs-cat", url], timeout)
    if r.returncode != 0:
        raise AssertionError(f"nfs-cat {url} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return r.stdout


def nfs_ls(url: str, recursive: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = ["nfs-ls"] + (["-R"] if recursive else []) + [url]
    return _run(cmd, timeout)


def ls_names(output: bytes) -> list[str]:
    """Names from nfs-ls's `ls -l`-like lines (the last field)."""
    names = []
    for line in output.decode(errors="replace").splitlines():
        parts = line.split()
        if parts:
            names.append(parts[-1])
    return names


def build_nfsproc(outdir: str) -> str:
    out = os.path.join(outdir, "nfsproc")
    r = subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", out, str(NFSPROC_SRC), "-lnfs"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building nfsproc failed:\n{r.stderr}")
    return out


def build_iorhard(outdir: str) -> str:
    out = os.path.join(outdir, "iorhard")
    r = subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", out, str(IORHARD_SRC), "-lnfs"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building iorhard failed:\n{r.stderr}")
    return out


class IorHard:
    """Runs tests/tools/iorhard (concurrent libnfs clients) against a server."""

    def __init__(self, binary: str, server):
        self.binary = binary
        self.server = server

    def argv(self, opts: dict, uid: int = 1000, gid: int = 1000) -> list[str]:
        s = self.server
        argv = [self.binary, "-u", str(uid), "-g", str(gid), "-p", str(s.nfs_port),
                "-m", str(s.mount_port)]
        for k, v in opts.items():
            argv += [f"-{k}", str(v)]
        return argv + [s.host, s.export]

    def run(self, cmd: str, *args, timeout: float = 300, check: bool = True,
            **opts) -> "Result":
        """`iorhard [-OPT VAL for opts] SERVER EXPORT CMD ARGS`; asserts result=ok."""
        argv = self.argv(opts) + [cmd] + [str(a) for a in args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        res = Result(argv, r.returncode, r.stdout, r.stderr)
        if check and (r.returncode != 0 or "result=ok" not in r.stdout.splitlines()):
            raise AssertionError(f"iorhard failed: {res}")
        return res

    def pattern(self, clients: int, records: int, recsize: int, seed: int = 1) -> bytes:
        r = subprocess.run([self.binary, "-s", str(seed), "pattern", str(clients), str(records),
                            str(recsize)], capture_output=True, timeout=120, check=True)
        return r.stdout

    def readraw(self, path: str, ranges: list[tuple[int, int]]) -> list[dict]:
        """One READ per (offset, count): [{status, count, eof, data}] in order."""
        argv = self.argv({}) + ["readraw", path]
        for off, n in ranges:
            argv += [str(off), str(n)]
        r = subprocess.run(argv, capture_output=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"iorhard readraw failed ({r.returncode}): "
                                 f"{r.stderr.decode(errors='replace')}")
        out, pos = [], 0
        for line in r.stderr.decode().splitlines():
            kv = dict(f.split("=", 1) for f in line.split())
            n = int(kv["data_len"])
            out.append({"status": kv["status"], "count": int(kv["count"]),
                        "eof": int(kv["eof"]), "data": r.stdout[pos:pos + n]})
            pos += n
        assert len(out) == len(ranges) and pos == len(r.stdout), r.stderr
        return out


class NfsProc:
    """Runs tests/tools/nfsproc against a server; returns its key=value output."""

    def __init__(self, binary: str, server):
        self.binary = binary
        self.server = server

    def __call__(self, cmd: str, *args, uid: int | None = 1000, gid: int | None = 1000,
                 export: str | None = None, check: bool = True) -> "Result":
        s = self.server
        argv = [self.binary]
        if uid is not None:
            argv += ["-u", str(uid)]
        if gid is not None:
            argv += ["-g", str(gid)]
        argv += ["-p", str(s.nfs_port), "-m", str(s.mount_port), s.host,
                 export or s.export, cmd] + [str(a) for a in args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        res = Result(argv, r.returncode, r.stdout, r.stderr)
        if check and r.returncode != 0:
            raise AssertionError(f"nfsproc failed: {res}")
        return res


class Result(dict):
    def __init__(self, argv, rc, stdout, stderr):
        super().__init__()
        self.argv, self.rc, self.stdout, self.stderr = argv, rc, stdout, stderr
        self.entries: list[str] = []
        for line in stdout.splitlines():
            k, _, v = line.partition("=")
            if k == "entry":
                self.entries.append(v)
            else:
                self[k] = v

    def __str__(self):
        return (f"`{' '.join(self.argv[1:])}` rc={self.rc}\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")

    def int(self, key: str) -> int:
        return int(self[key], 0)


def nfs_error(fn, *args, **kw):
    """Call fn and return the nfs_rs.NfsError it raises (fail if it does not)."""
    import nfs_rs

    try:
        fn(*args, **kw)
    except nfs_rs.NfsError as e:
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} succeeded; expected an NFS error")


def assert_nfs_error(expected: str | tuple[str, ...], fn, *args, **kw):
    """Assert fn raises an NfsError whose code_name is `expected` (or one of them)."""
    e = nfs_error(fn, *args, **kw)
    want = (expected,) if isinstance(expected, str) else expected
    assert e.code_name in want, (
        f"{getattr(fn, '__name__', fn)}{args}: expected {' or '.join(want)}, got "
        f"{e.code_name} ({type(e).__name__}: {e}; operation={e.operation})")
    return e
