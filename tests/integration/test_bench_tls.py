"""bench/run's RPC-with-TLS comparison (issue 44): dionfs-direct-tls runs
only the sequential and 4 KiB random READ jobs, beside dionfs-direct-v3
on one server (each job's plain and TLS runs back to back, which goes
first alternating); results.md's table gives the TLS/plain server CPU per
GiB as the median of per-repetition ratios with its range and marks the
issue's goal (at most 1.5x on the sequential jobs); and a run that did not
go over TLS, by the server's own log, fails instead of reporting 1.0x."""

from __future__ import annotations

import os
import ssl
import tempfile

import pytest

from benchrun import load_bench_run, table_row
from rawrpc import NFS_PROGRAM, NFS_V3, SUCCESS, Conn, call_header, read_record, record, u32

TLS, V3, V41 = "dionfs-direct-tls", "dionfs-direct-v3", "dionfs-direct-v41"
AUTH_TLS = 7

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


# The server's debug lines (TLS_LOG_LEVEL) as dionfs writes them.
LOG_TLS = """\
2026-11-30T04:34:42.831702Z DEBUG dionfs_transport::connection: connection closed conn=3 peer=127.0.0.1:32790 reason=peer closed calls=10
2026-11-30T04:34:44.334812Z DEBUG dionfs_transport::connection: connection opened conn=4 peer=127.0.0.1:32794 local=127.0.0.1:2049
2026-11-30T04:34:44.335744Z DEBUG dionfs_transport::connection: switched to TLS conn=4 peer=127.0.0.1:32794 client_certificate=false
2026-11-30T04:34:44.335794Z DEBUG dionfs_transport::connection: connection opened conn=5 peer=127.0.0.1:54966 local=127.0.0.1:20048
2026-11-30T04:34:44.338983Z DEBUG dionfs_transport::connection: connection closed conn=5 peer=127.0.0.1:54966 reason=peer closed calls=1
"""
LOG_PLAIN = """\
2026-11-30T04:34:44.366456Z DEBUG dionfs_transport::connection: connection opened conn=6 peer=127.0.0.1:32796 local=127.0.0.1:2049
2026-11-30T04:34:44.366608Z DEBUG dionfs_transport::connection: connection opened conn=7 peer=127.0.0.1:54974 local=127.0.0.1:20048
"""


def test_a_tls_run_is_checked_in_the_servers_log():
    b = load_bench_run()
    # NFS over TLS; the MOUNT connection (plain, port 20048) and the
    # earlier run's closing line do not count
    m = {}
    b.check_transport(m, TLS, LOG_TLS)
    assert m == {"nfs_connections": 1, "tls_connections": 1}
    # the plain run beside it
    m = {}
    b.check_transport(m, V3, LOG_PLAIN)
    assert "failed" not in m and m["tls_connections"] == 0


@pytest.mark.parametrize("text,why", [
    (LOG_PLAIN, "not over TLS: 1 of 1 NFS connection(s) did not switch"),
    (LOG_PLAIN + LOG_TLS, "not over TLS: 1 of 2 NFS connection(s) did not switch"),
    ("", "no NFS connection"),
])
def test_a_tls_run_that_was_not_over_tls_fails(text, why):
    b = load_bench_run()
    m = {"mib_s": 500.0, "cpu_s_per_gib": 0.3}
    b.check_transport(m, TLS, text)
    assert why in m["failed"]


def test_a_plain_run_that_went_over_tls_fails():
    b = load_bench_run()
    m = {}
    b.check_transport(m, V3, LOG_TLS)
    assert m["failed"].startswith("not plaintext: 1 of 1")


def starttls(conn: Conn, ctx: ssl.SSLContext) -> None:
    """The RFC 9289 probe (a NULL call with AUTH_TLS), then TLS 1.3 with
    the certificate checked for 127.0.0.1, the name dionfs-loadgen checks
    (the host of its URL)."""
    conn.xid += 1
    conn.send(record(call_header(conn.xid, NFS_PROGRAM, NFS_V3, 0, u32(AUTH_TLS) + u32(0))))
    reply = read_record(conn.sock)
    assert reply[20:28] == b"STARTTLS", reply.hex()
    conn.sock = ctx.wrap_socket(conn.sock, server_hostname="127.0.0.1")


def log_since(server, at: int) -> str:
    with open(server.log_path, errors="replace") as f:
        f.seek(at)
        return f.read()


@pytest.mark.dionfs_only
def test_the_servers_log_shows_what_the_check_looks_for(server, tmp_path):
    """The real server, started as bench/run starts dionfs-direct-tls (the
    certificate Env.make_tls makes, TLS_LOG_LEVEL): a connection that
    switches to TLS and one that does not are told apart by
    check_transport, so a change to the transport's log lines fails here
    rather than every TLS run of a benchmark."""
    b = load_bench_run()

    class Env:
        work = str(tmp_path)
    tls = b.Env.make_tls(Env())
    server.close_clients()
    server.stop()
    server.extra_args += ["--tls-certificate", tls["cert"], "--tls-key", tls["key"],
                          "--log-level", b.TLS_LOG_LEVEL]
    server.start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(tls["ca"])
    ctx.set_alpn_protocols(["sunrpc"])

    at = os.path.getsize(server.log_path)
    with Conn(server.host, server.nfs_port) as t:
        starttls(t, ctx)
        assert t.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
    text = log_since(server, at)
    m = {}
    b.check_transport(m, TLS, text, port=server.nfs_port)
    assert "failed" not in m and m["tls_connections"] == m["nfs_connections"] == 1, text

    at = os.path.getsize(server.log_path)
    with Conn(server.host, server.nfs_port) as p:
        assert p.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
    text = log_since(server, at)
    m = {}
    b.check_transport(m, TLS, text, port=server.nfs_port)
    assert m["nfs_connections"] == 1 and m["failed"].startswith("not over TLS"), text


def run(system, rep, cpu, mib_s=100.0, job="seq-write", failed=None, tls=None):
    r = {"job": job, "system": system, "rep": rep, "mib_s": mib_s, "cpu_s_per_gib": cpu,
         "nfs_connections": 1, "tls_connections": int(system == TLS) if tls is None else tls}
    if failed:
        r["failed"] = failed
    return r


def summary(runs, jobs, systems):
    b = load_bench_run()
    return b.summarize(runs, jobs, systems)


def test_table_gives_paired_ratios_and_marks_the_goal():
    b = load_bench_run()
    jobs = [j for j in b.job_list(dict(b.SMOKE, seq_size=32 << 20, ior_records=10))
            if j.name in ("seq-write", "seq-read", "rand-read-qd16", "rand-read-qd64")]
    runs = [
        # seq-write: the host slow in rep 1 for both, fast in rep 2:
        # ratios 1.2, 1.4, 1.3 (median 1.3: met); the medians of each
        # side alone would say 0.5 / 0.3 = 1.67
        run(V3, 1, 0.50), run(TLS, 1, 0.60), run(V3, 2, 0.20), run(TLS, 2, 0.28),
        run(V3, 3, 0.30), run(TLS, 3, 0.39),
        # seq-read: 2.0, 2.5 and a TLS run that failed its check, left out
        run(V3, 1, 0.25, job="seq-read"), run(TLS, 1, 0.5, job="seq-read"),
        run(V3, 2, 0.5, job="seq-read"), run(TLS, 2, 1.25, job="seq-read"),
        run(V3, 3, 0.30, job="seq-read"),
        run(TLS, 3, 0.30, job="seq-read", tls=0, failed="not over TLS: 1 of 1 NFS connection(s) "
                                                         "did not switch to TLS (the server's log)"),
        # random reads: no goal
        run(V3, 1, 7.0, job="rand-read-qd16"), run(TLS, 1, 8.4, job="rand-read-qd16"),
        run(V3, 1, 7.0, job="rand-read-qd64"),
    ]
    systems = ["dionfs-direct", V3, V41, TLS]
    md = b.tls_table(runs, summary(runs, jobs, systems), jobs, systems)
    assert "## RPC-with-TLS against plaintext" in md
    assert table_row(md, "seq-write")[5:] == ["1.30 (1.20–1.40)", "3", "met", "3 of 3"]
    assert table_row(md, "seq-write")[3:5] == ["0.300 (0.200–0.500)", "0.390 (0.280–0.600)"]
    assert table_row(md, "seq-read")[5:] == ["2.25 (2.00–2.50)", "2",
                                             "**MISSED**; 1 TLS run(s) FAILED", "2 of 3"]
    assert table_row(md, "rand-read-qd16")[5:8] == ["1.20", "1", "no goal"]
    # only the jobs the TLS row runs
    assert "rand-read-qd64" not in md


def test_goal_not_measured_when_every_tls_run_failed():
    b = load_bench_run()
    jobs = [b.Job("seq-write", "tput", "Sequential write", "-")]
    runs = [run(V3, 1, 0.3), run(TLS, 1, 0.3, tls=0, failed="not over TLS")]
    systems = [V3, TLS]
    md = b.tls_table(runs, summary(runs, jobs, systems), jobs, systems)
    assert table_row(md, "seq-write")[2] == "FAILED"
    assert table_row(md, "seq-write")[5:8] == ["–", "0", "not measured; 1 TLS run(s) FAILED"]


def test_no_table_without_both_sides():
    b = load_bench_run()
    jobs = [b.Job("seq-write", "tput", "Sequential write", "-")]
    assert b.tls_table([], {"seq-write": {}}, jobs, [V3, V41]) == ""
    assert b.tls_table([], {"seq-write": {}}, jobs, ["dionfs-direct", TLS]) == ""
