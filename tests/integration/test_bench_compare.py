"""bench/compare: two results of dionfs builds, job by job, with the new
build's losses beyond the threshold marked and in the exit status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

COMPARE = Path(__file__).resolve().parents[2] / "bench" / "compare"


def results(d: Path, values: dict) -> Path:
    """A results.json with the jobs and systems of `values`:
    {(job, kind): {system: headline median}}."""
    key = {"tput": "mib_s", "lat": "p50", "meta": "iops", "calls": "syscalls_per_call",
           "fair": "fair_ratio"}
    summary, jobs, systems = {}, [], {}
    for (job, kind), per in values.items():
        jobs.append({"name": job, "kind": kind})
        summary[job] = {s: {"reps": 3, key[kind]: {"median": v, "min": v, "max": v}}
                        for s, v in per.items()}
        systems.update({s: s for s in per})
    d.mkdir()
    (d / "results.json").write_text(json.dumps(
        {"meta": {"versions": {"dionfs_bin": str(d)}}, "jobs": jobs, "systems": systems,
         "summary": summary}))
    return d


def compare(old: Path, new: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(COMPARE), str(old), str(new)], capture_output=True, text=True,
                          timeout=60)


def test_losses_beyond_ten_percent_are_marked_whatever_the_unit(tmp_path):
    old = results(tmp_path / "old", {
        ("seq-read", "tput"): {"dionfs-direct": 1000.0, "ganesha": 500.0},
        ("overwrite-1k", "lat"): {"dionfs-direct": 20.0},
        ("calls-getattr", "calls"): {"dionfs-direct": 4.0},
    })
    new = results(tmp_path / "new", {
        ("seq-read", "tput"): {"dionfs-direct": 950.0, "ganesha": 400.0},
        # Latency up from 20 to 25 µs: a speed-up of 0.80.
        ("overwrite-1k", "lat"): {"dionfs-direct": 25.0},
        ("calls-getattr", "calls"): {"dionfs-direct": 3.0},
    })
    r = compare(old, new)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line
            for line in r.stdout.splitlines() if line.startswith("| ") and "job" not in line}
    assert "0.95" in rows[("seq-read", "dionfs-direct")]
    assert "SLOWER" not in rows[("seq-read", "dionfs-direct")]
    assert "0.80 SLOWER" in rows[("overwrite-1k", "dionfs-direct")]
    assert "1.33" in rows[("calls-getattr", "dionfs-direct")]
    # Ganesha is the same software in both runs: drift, not a row.
    assert ("seq-read", "ganesha") not in rows
    assert "seq-read ganesha: 0.80" in r.stdout


def test_no_loss_exits_zero(tmp_path):
    old = results(tmp_path / "old", {("meta-create", "meta"): {"dionfs-direct": 100.0}})
    new = results(tmp_path / "new", {("meta-create", "meta"): {"dionfs-direct": 95.0}})
    r = compare(old, new)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no dionfs row more than 10% slower" in r.stdout
