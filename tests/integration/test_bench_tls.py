"""bench/run's RPC-with-TLS comparison (issue 44): dionfs-direct-tls runs
only the sequential and 4 KiB random READ jobs, beside dionfs-direct-v3
on one server (each job's plain and TLS runs back to back, which goes
first alternating)."""

from __future__ import annotations

import tempfile

from benchrun import load_bench_run

TLS, V3, V41 = "dionfs-direct-tls", "dionfs-direct-v3", "dionfs-direct-v41"

def test_tls_row_runs_the_issues_jobs_only():
    b = load_bench_run()
    p = dict(b.SMOKE, seq_size=32 << 20, ior_size=8 << 20, ior_records=10)
    jobs = b.job_list(p)
    assert [j.name for j in jobs if j.runs_on(TLS)] == ["seq-write", "seq-read", "rand-read-qd16"]
    # and the v3 row it is compared with still runs every data job
    assert {"seq-write", "rand-read-qd64", "ior-hard-write"} <= {j.name for j in jobs if j.runs_on(V3)}
    assert TLS in b.SYSTEMS and TLS in b.PAIRED and TLS not in b.V41_SYSTEMS


def test_tls_pair_shares_one_tls_server_and_alternates():
    b = load_bench_run()
    p = dict(b.SMOKE, seq_size=32 << 20, ior_size=8 << 20, ior_records=10)
    jobs = [j for j in b.job_list(p)
            if j.name in ("seq-write", "seq-read", "rand-read-qd16", "rand-read-qd64")]
    order, started = [], []

    class Server:
        cmdline = ["dionfs"]

        def pid(self):
            return 1

        def url(self, env):
            return "nfs://x"

        def stop(self, env):
            order.append("stopped")

    class Args:
        job_timeout = 1

    class Env:
        def clean_export(self):
            order.append("cleaned")

    b.start_server = lambda env, s, binary, logf: started.append(s) or Server()
    b.run_job = lambda env, s, rep, job, server, lg, p, seeds, args, tag=None: (
        order.append((rep, job.name, s, tag)) or {"job": job.name, "system": s, "rep": rep})
    b.crosscheck = lambda *a, tag=None: {"job": "_crosscheck"}
    b.alive = lambda pid: True
    b.server_metrics = lambda *a: None
    b.Dionfs = Server
    logs = tempfile.mkdtemp()
    for rep in (1, 2):
        b.run_pair(Env(), [V3, V41, TLS], rep, jobs, p, "dionfs", {"c": "loadgen"}, logs, Args())
    # one server per repetition, the TLS one, serving all three
    assert started == [TLS, TLS] and order.count("stopped") == 2
    runs = [o for o in order if isinstance(o, tuple)]
    assert all(r[3] == b.PAIRED_TAGS[r[2]] for r in runs)
    by_job = {}
    for rep, job, s, _ in runs:
        by_job.setdefault((rep, job), []).append(s)
    # TLS only on its jobs; v3 in the middle, next to both others; the
    # order alternating by job and by repetition
    assert by_job == {
        (1, "seq-write"): [TLS, V3, V41], (1, "seq-read"): [V41, V3, TLS],
        (1, "rand-read-qd16"): [TLS, V3, V41], (1, "rand-read-qd64"): [V41, V3],
        (2, "seq-write"): [V41, V3, TLS], (2, "seq-read"): [TLS, V3, V41],
        (2, "rand-read-qd16"): [V41, V3, TLS], (2, "rand-read-qd64"): [V3, V41],
    }
    # TLS first as often as plain first, per job over the repetitions
    for job in ("seq-write", "seq-read", "rand-read-qd16"):
        firsts = [min(by_job[(rep, job)].index(s) for s in (V3, TLS)) == by_job[(rep, job)].index(TLS)
                  for rep in (1, 2)]
        assert sorted(firsts) == [False, True], job


def test_pair_order_keeps_v3_and_v41_as_before():
    b = load_bench_run()
    job = b.Job("seq-write", "tput", "Sequential write", "-")
    assert b.pair_order([V3, V41], job, 1, 0) == [V3, V41]
    assert b.pair_order([V3, V41], job, 1, 1) == [V41, V3]
    assert b.pair_order([V3, TLS], job, 1, 0) == [TLS, V3]
    assert b.pair_order([V3, TLS], job, 2, 0) == [V3, TLS]
