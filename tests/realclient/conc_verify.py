#!/usr/bin/env python3
"""Host side of tests/realclient/concurrency.sh: build the model of each shared
file and compare it byte for byte with (a) the server's file in the export and
(b) what the guest read back over NFS (<guest out>/<phase>.readback).

  conc_verify.py EXPORT_CONC_DIR GUEST_OUT_DIR

The phases come from GUEST_OUT_DIR/conc.manifest, one line each:
NAME KIND(dd|fio) RECSIZE WRITERS RECORDS.

Prints one line per check; on a mismatch names the records (writer, record
number, offset, O_DIRECT or not) and the first differing bytes. Exit 0 = all
equal, 1 = mismatch or missing file.
"""

from __future__ import annotations

import os
import sys

def dd_model(R: int, procs: int, records: int) -> tuple[bytes, list[str]]:
    out, who = [], []
    for i in range(records):
        for c in range(procs):
            line = f"dionfs c={c} i={i}\n".encode()
            out.append((line * (R // len(line) + 1))[:R])
            who.append(f"dd writer {c} ({'O_DIRECT' if c % 2 == 0 else 'buffered'}) record {i}")
    return b"".join(out), who


def fio_model(R: int, jobs: int, records: int) -> tuple[bytes, list[str]]:
    out, who = [], []
    for i in range(records):
        for c in range(jobs):
            pat = f"dionfs fio job {c}|".encode()
            out.append((pat * (R // len(pat) + 1))[:R])
            who.append(f"fio job {c} ({'libaio iodepth 4' if c % 2 == 0 else 'psync'}, "
                       f"O_DIRECT) record {i}")
    return b"".join(out), who


def compare(what: str, got: bytes, want: bytes, who: list[str], R: int) -> bool:
    if got == want:
        print(f"ok   {what}: {len(got)} bytes equal to the model")
        return True
    print(f"FAIL {what}: size {len(got)}, expected {len(want)}")
    bad = 0
    for k, name in enumerate(who):
        g, w = got[k * R:(k + 1) * R], want[k * R:(k + 1) * R]
        if g == w:
            continue
        bad += 1
        if bad <= 10:
            first = next((j for j in range(min(len(g), len(w))) if g[j] != w[j]), min(len(g), len(w)))
            nbad = sum(1 for x, y in zip(g, w) if x != y) + abs(len(g) - len(w))
            print(f"     record {k} at offset {k * R} ({name}): {nbad} bytes differ, first at "
                  f"offset {k * R + first}: got {g[first:first + 16]!r}, expected "
                  f"{w[first:first + 16]!r}")
    print(f"     {bad} of {len(who)} records differ")
    return False


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    conc, out = sys.argv[1], sys.argv[2]
    try:
        with open(os.path.join(out, "conc.manifest")) as f:
            phases = [line.split() for line in f if line.strip()]
    except OSError as e:
        print(f"FAIL no manifest from the guest: {e}")
        return 1
    if not phases:
        print("FAIL the guest's manifest lists no phase")
        return 1
    good = True
    for name, kind, rs, writers, records in phases:
        R = int(rs)
        model = dd_model if kind == "dd" else fio_model
        want, who = model(R, int(writers), int(records))
        for what, path in ((f"{name}: server file", os.path.join(conc, f"{name}.shared")),
                           (f"{name}: guest read-back", os.path.join(out, f"{name}.readback"))):
            try:
                with open(path, "rb") as f:
                    got = f.read()
            except OSError as e:
                print(f"FAIL {what}: {e}")
                good = False
                continue
            good &= compare(what, got, want, who, R)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
