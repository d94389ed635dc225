"""bench/run's per-call jobs (`calls-*`) count the server's system calls
with `perf stat -p`: a run where perf wrote no counts is made once more
(one of five came back empty in a default run), and a second empty one
fails with what perf printed, instead of failing the repetition at once."""

from __future__ import annotations

import types

from benchrun import load_bench_run


def fake_perf(writes_counts):
    """A Popen stand-in for `perf stat ... -o OUT`: when the next entry of
    `writes_counts` says so it writes counts to OUT on SIGINT, or else it
    prints an error to its stderr at once, as perf does when it cannot
    attach."""
    class Perf:
        started = 0

        def __init__(self, argv, stdout=None, stderr=None):
            self.out = argv[argv.index("-o") + 1]
            self.ok = writes_counts[Perf.started]
            Perf.started += 1
            if not self.ok:
                stderr.write("Error: No such process\n")

        def send_signal(self, sig):
            if self.ok:
                with open(self.out, "w") as f:
                    f.write("# started on ...\n\n2500,,raw_syscalls:sys_enter,1,100.00,,\n"
                            "120,,context-switches,1,100.00,,\n"
                            "300,,syscalls:sys_enter_epoll_wait,1,100.00,,\n")

        def wait(self, timeout=None):
            return 0

        def kill(self):
            pass
    return Perf


def run_counted(tmp_path, monkeypatch, writes_counts):
    b = load_bench_run()
    perf = fake_perf(writes_counts)
    monkeypatch.setattr(b.subprocess, "Popen", perf)
    monkeypatch.setattr(b, "poll_events", lambda: ("syscalls:sys_enter_epoll_wait",))
    monkeypatch.setattr(b.time, "sleep", lambda s: None)
    loadgen_runs = []
    monkeypatch.setattr(b, "run_loadgen",
                        lambda *a: loadgen_runs.append(a) or {"ops": 100, "command": "loadgen"})
    env = types.SimpleNamespace(work=str(tmp_path))
    # dionfs's idle_spin_looks_total, read before and after each run
    looks = iter([1000.0, 1400.0, 1400.0, 1800.0])
    res = b.run_counted(env, "loadgen", "nfs://x", [], 60, 1234, lambda: next(looks))
    return res, perf.started, len(loadgen_runs)


def test_counts_per_call(tmp_path, monkeypatch):
    res, perfs, runs = run_counted(tmp_path, monkeypatch, [True])
    assert (perfs, runs) == (1, 1)
    assert res["syscalls_per_call"] == 25.0 and res["ctxsw_per_call"] == 1.2
    # the epoll waits apart, and perf asked for them
    assert res["polls_per_call"] == 3.0
    assert "-e syscalls:sys_enter_epoll_wait" in res["command"]
    # and the idle spin's looks, from the server's counter
    assert res["spin_looks_per_call"] == 4.0
    assert "failed" not in res


def test_a_run_without_counts_is_made_again(tmp_path, monkeypatch):
    res, perfs, runs = run_counted(tmp_path, monkeypatch, [False, True])
    assert (perfs, runs) == (2, 2)
    assert res["syscalls_per_call"] == 25.0
    assert "failed" not in res


def test_two_runs_without_counts_fail_with_what_perf_said(tmp_path, monkeypatch):
    res, perfs, runs = run_counted(tmp_path, monkeypatch, [False, False])
    assert (perfs, runs) == (2, 2)
    assert "syscalls_per_call" not in res
    assert "twice" in res["failed"] and "No such process" in res["failed"]
