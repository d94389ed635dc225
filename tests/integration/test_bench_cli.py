"""bench/run refuses a job selection it cannot run, before it sets anything
up: a job name it does not know, or jobs that read (or rewrite) a file
another job makes without that job: seq.dat from seq-write, the IOR-hard
file from ior-hard-write (they used to fail in every repetition with NOENT
from the server, after the whole setup)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "bench" / "run"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bench/run runs as root")


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUN), "--no-build", "--no-install", "--no-plots", *args],
                          capture_output=True, text=True, timeout=60)


def test_unknown_job_is_refused_with_the_list():
    r = bench("--jobs", "seq-write,seq-wrte")
    assert r.returncode == 2
    assert "no such job: seq-wrte" in r.stdout + r.stderr
    assert "ior-hard-write" in r.stdout + r.stderr


@pytest.mark.parametrize("jobs", ["fair-read", "rand-read-qd16,fair-write", "seq-read"])
def test_jobs_that_read_seq_dat_need_seq_write(jobs):
    r = bench("--jobs", jobs)
    assert r.returncode == 2
    out = r.stdout + r.stderr
    assert "add seq-write to --jobs" in out
    for j in jobs.split(","):
        assert j in out


@pytest.mark.parametrize("jobs", ["ior-hard-read", "seq-write,ior-hard-rewrite"])
def test_ior_jobs_that_read_or_rewrite_the_ior_file_need_its_write(jobs):
    r = bench("--jobs", jobs)
    assert r.returncode == 2
    out = r.stdout + r.stderr
    assert "add ior-hard-write to --jobs" in out
    assert jobs.split(",")[-1] in out


@pytest.mark.parametrize("jobs,maker", [("meta-rename", "meta-create"),
                                        ("meta-create,meta-remove", "meta-rename")])
def test_metadata_jobs_need_the_files_the_one_before_makes(jobs, maker):
    # meta-rename renames the .tmp files meta-create made, meta-remove the
    # names meta-rename gave them: alone, every RENAME failed with NOENT
    # and the run reported bad data for dionfs and Ganesha alike.
    r = bench("--jobs", jobs)
    assert r.returncode == 2
    assert f"add {maker} to --jobs" in r.stdout + r.stderr
