"""bench/run's NFSv4.1 comparison: the rows driven by dionfs-loadgen run
the data and per-call jobs only, and results.md's table gives per job the
v4.1/v3 and v4.1/Ganesha speed-ups with the issue's goals marked (latency
inverted; a READ's system calls as a difference), the libnfs cross-check
ratio, and the read-back of the v4.1 writes by libnfs."""

from __future__ import annotations

from benchrun import load_bench_run, table_row


def entry(v):
    return {"reps": 1, "failed": [], "mib_s": {"median": v}, "p50": {"median": v},
            "syscalls_per_call": {"median": v}}


def test_v41_rows_run_the_data_and_per_call_jobs_only():
    b = load_bench_run()
    p = dict(b.SMOKE, seq_size=32 << 20, ior_size=8 << 20, ior_records=10)
    jobs = {j.name: j for j in b.job_list(p)}
    for s in b.V41_SYSTEMS:
        ran = {n for n, j in jobs.items() if j.runs_on(s)}
        assert {"seq-write", "seq-read", "rand-write-qd64", "ior-hard-rewrite", "overwrite-1k",
                "mixed-16", "lm-rand-read-qd64", "calls-read-4k"} <= ran
        assert not any(n.startswith(("fair-", "meta-")) for n in ran), ran
    # and nobody else's selection changed
    assert not jobs["mixed-16"].runs_on("fio-direct")
    assert jobs["meta-create"].runs_on("dionfs-direct")


def test_table_marks_the_goals():
    b = load_bench_run()
    jobs = [b.Job("seq-read", "tput", "Sequential read", "-"),
            b.Job("rand-read-qd16", "tput", "Random read", "-"),
            b.Job("overwrite-1k", "lat", "Overwrite", "-"),
            b.Job("calls-read-4k", "calls", "READ cost", "-", b.NFS_SYSTEMS)]
    summ = {
        # v4.1 0.96x v3 and above Ganesha; libnfs agrees within 2%
        "seq-read": {"dionfs-direct-v3": entry(1000), "dionfs-direct-v41": entry(960),
                     "ganesha-v41": entry(900), "dionfs-direct": entry(980)},
        # v4.1 below 0.95x v3 and below Ganesha
        "rand-read-qd16": {"dionfs-direct-v3": entry(100), "dionfs-direct-v41": entry(90),
                           "ganesha-v41": entry(95)},
        # latency: 50 us against 40 over v3 is 0.8x
        "overwrite-1k": {"dionfs-direct-v3": entry(40), "dionfs-direct-v41": entry(50),
                         "ganesha-v41": entry(60)},
        # 1.5 system calls more per READ over v4.1, 1.25 of them epoll
        # waits, 0.25 looks of the idle spin
        "calls-read-4k": {"dionfs-direct-v3": dict(entry(10), polls_per_call={"median": 2.0},
                                                   spin_looks_per_call={"median": 4.0}),
                          "dionfs-direct-v41": dict(entry(11.5), polls_per_call={"median": 3.25},
                                                    spin_looks_per_call={"median": 4.25}),
                          "ganesha-v41": entry(9)},
    }
    systems = ["dionfs-direct", "dionfs-direct-v3", "dionfs-direct-v41", "ganesha-v41"]
    labels = {s: s for s in systems}
    checks = [{"job": "_crosscheck", "system": "dionfs-direct-v41", "rep": 1,
               "verified_bytes": 32 << 20, "mismatch_bytes": 0},
              {"job": "_crosscheck", "system": "ganesha-v41", "rep": 1,
               "verified_bytes": 32 << 20, "mismatch_bytes": 4096}]
    md = b.v41_table(summ, jobs, systems, labels, checks)

    def row(job):
        return table_row(md, job)
    # without the runs, no ratio by repetition and no chance at parity
    assert row("seq-read")[4:] == ["0.96", "–", "–", "900", "1.07", "v3 ok, Ganesha ok", "980", "1.02"]
    assert row("rand-read-qd16")[4:10] == ["0.90", "–", "–", "95.0", "0.95", "v3 MISSED, Ganesha MISSED"]
    assert row("overwrite-1k")[4:10] == ["0.80", "–", "–", "60.0", "1.20", "v3 MISSED, Ganesha ok"]
    assert row("calls-read-4k")[9] == ("+1.50 (MISSED: ≤ +1); of which epoll waits +1.25, "
                                       "idle spin looks +0.25")
    assert "32 MiB verified, all right" in md
    assert "**4,096 WRONG BYTES**" in md


def test_table_gives_the_ratio_within_each_repetition():
    """Beside the medians' ratio (the goal's), v4.1/v3 within each
    repetition both ran: median and range, latency inverted, a failed run
    and its partner left out; none for the per-call jobs."""
    b = load_bench_run()
    jobs = [b.Job("seq-read", "tput", "Sequential read", "-"),
            b.Job("overwrite-1k", "lat", "Overwrite", "-"),
            b.Job("calls-read-4k", "calls", "READ cost", "-", b.NFS_SYSTEMS)]
    summ = {"seq-read": {"dionfs-direct-v3": entry(100), "dionfs-direct-v41": entry(100)},
            "overwrite-1k": {"dionfs-direct-v3": entry(40), "dionfs-direct-v41": entry(50)},
            "calls-read-4k": {"dionfs-direct-v3": entry(10), "dionfs-direct-v41": entry(10)}}

    def run(job, s, rep, **kw):
        return {"job": job, "system": s, "rep": rep, **kw}
    runs = [run("seq-read", "dionfs-direct-v3", 1, mib_s=100), run("seq-read", "dionfs-direct-v41", 1, mib_s=90),
            run("seq-read", "dionfs-direct-v3", 2, mib_s=100), run("seq-read", "dionfs-direct-v41", 2, mib_s=110),
            run("seq-read", "dionfs-direct-v3", 3, mib_s=50), run("seq-read", "dionfs-direct-v41", 3, mib_s=100),
            # a failed v4.1 run: repetition 4 has no pair
            run("seq-read", "dionfs-direct-v3", 4, mib_s=100),
            run("seq-read", "dionfs-direct-v41", 4, mib_s=1, failed="timeout"),
            run("seq-read", "ganesha-v41", 1, mib_s=1),
            run("overwrite-1k", "dionfs-direct-v3", 1, lat_us={"p50": 40}),
            run("overwrite-1k", "dionfs-direct-v41", 1, lat_us={"p50": 50}),
            run("calls-read-4k", "dionfs-direct-v3", 1, syscalls_per_call=10),
            run("calls-read-4k", "dionfs-direct-v41", 1, syscalls_per_call=12)]
    systems = ["dionfs-direct-v3", "dionfs-direct-v41"]
    md = b.v41_table(summ, jobs, systems, {s: s for s in systems}, [], runs)

    def cell(job):
        return table_row(md, job)[5]
    assert cell("seq-read") == "1.10 (0.90–2.00)"
    assert cell("overwrite-1k") == "0.80 (0.80–0.80)"
    assert cell("calls-read-4k") == "–"


def test_no_table_without_the_v41_row():
    b = load_bench_run()
    jobs = [b.Job("seq-read", "tput", "Sequential read", "-")]
    assert b.v41_table({"seq-read": {}}, jobs, ["dionfs-direct", "ganesha"], {}, []) == ""


def test_pair_runs_each_job_back_to_back_on_its_own_files():
    b = load_bench_run()
    p = dict(b.SMOKE, seq_size=32 << 20, ior_size=8 << 20, ior_records=10)
    jobs = [j for j in b.job_list(p) if j.name in ("seq-write", "seq-read", "rand-read-qd16")]
    order = []

    class Server:
        cmdline = ["dionfs"]

        def pid(self):
            return 1

        def stop(self, env):
            order.append("stopped")

    class Server2(Server):
        def url(self, env):
            return "nfs://x"

    class Args:
        job_timeout = 1

    class Env:
        def clean_export(self):
            order.append("cleaned")

    b.start_server = lambda env, s, binary, logf: Server2()
    b.run_job = lambda env, s, rep, job, server, lg, p, seeds, args, tag=None: (
        order.append((rep, job.name, s, tag)) or {"job": job.name, "system": s, "rep": rep})
    b.crosscheck = lambda *a, tag=None: order.append(("crosscheck", a[5], tag)) or {"job": "_crosscheck"}
    b.alive = lambda pid: True
    b.server_metrics = lambda *a: None
    b.Dionfs = Server
    import tempfile
    logs = tempfile.mkdtemp()
    v3, v41 = "dionfs-direct-v3", "dionfs-direct-v41"
    for rep in (1, 2):
        b.run_pair(Env(), [v3, v41], rep, jobs, p, "dionfs", {"c": "loadgen"}, logs, Args())
    runs = [o for o in order if isinstance(o, tuple) and o[0] != "crosscheck"]
    # one server per repetition, the two systems' runs of a job adjacent,
    # the first alternating by job and by repetition
    assert order.count("cleaned") == 2 and order.count("stopped") == 2
    assert [r[2] for r in runs] == [v3, v41, v41, v3, v3, v41,   # rep 1
                                    v41, v3, v3, v41, v41, v3]   # rep 2
    assert all(r[3] == b.PAIRED_TAGS[r[2]] for r in runs)
    assert ("crosscheck", v41, "v41") in order and not any(o[1] == v3 for o in order
                                                            if isinstance(o, tuple) and o[0] == "crosscheck")
    # each system's files are its own
    assert b.with_files(["--file", "/seq.dat", "--bs", "1M"], "v41") == ["--file", "/v41-seq.dat", "--bs", "1M"]
    assert b.with_files(["--file", "/seq.dat"], None) == ["--file", "/seq.dat"]


def test_ganesha_runs_beside_dionfs_each_job_side_by_side():
    """The v4.0 and v4.1 comparisons' five rows as one group: a dionfs
    server (with 4.0 on) for dionfs's rows and one Ganesha (minor version
    0 allowed) on its own ports beside it, each row's runs against its own
    server, each job's five runs back to back with each comparison's two
    rows adjacent, every v4 row's writes cross-checked against its own
    server."""
    b = load_bench_run()
    p = dict(b.SMOKE, seq_size=32 << 20, ior_size=8 << 20, ior_records=10)
    jobs = [j for j in b.job_list(p) if j.name in ("seq-write", "seq-read")]
    gv40, v40, v3, v41, gv41 = ("ganesha-v40", "dionfs-direct-v40", "dionfs-direct-v3",
                                "dionfs-direct-v41", "ganesha-v41")
    started, order = [], []

    class Server:
        cmdline = ["dionfs"]

        def __init__(self, s):
            self.s = s

        def pid(self):
            return 1

        def url(self, env):
            return "nfs://" + self.s

        def stop(self, env):
            order.append(("stopped", self.s))

    class Args:
        job_timeout = 1

    class Env:
        def clean_export(self):
            order.append("cleaned")

    b.start_server = lambda env, s, binary, logf: started.append(s) or Server(s)
    b.run_job = lambda env, s, rep, job, server, lg, p, seeds, args, tag=None: (
        order.append((rep, job.name, s, server.s, tag)) or {"job": job.name, "system": s, "rep": rep})
    b.crosscheck = lambda *a, tag=None: order.append(("crosscheck", a[5], a[2], tag)) or {
        "job": "_crosscheck"}
    b.alive = lambda pid: True
    b.server_metrics = lambda *a: None
    b.Dionfs = Server
    import tempfile
    logs = tempfile.mkdtemp()
    pair = [s for s in b.PAIRED if s in (gv40, v40, v3, v41, gv41)]
    runs = b.run_pair(Env(), pair, 1, jobs, p, "dionfs", {"c": "loadgen"}, logs, Args())
    # one dionfs server (v4.0's: 3, 4.0, 4.1, 4.2) and one Ganesha (v4.0's:
    # minor versions 0, 1, 2), both stopped
    assert started == [v40, gv40]
    assert sorted(o[1] for o in order if o[0] == "stopped") == [v40, gv40]
    calls = [o for o in order if isinstance(o, tuple) and isinstance(o[0], int)]
    assert all(server == (gv40 if s.startswith("ganesha") else v40) for _, _, s, server, _ in calls)
    assert all(tag == b.PAIRED_TAGS[s] for *_, s, _, tag in calls)
    assert len({b.PAIRED_TAGS[s] for s in pair}) == 5
    assert [c[2] for c in calls] == [gv40, v40, v3, v41, gv41, gv41, v41, v3, v40, gv40]
    # every v4 row's seq-write read back over v3, from its own server
    checks = sorted((o[1], o[2], o[3]) for o in order if o[0] == "crosscheck")
    assert checks == sorted([(gv40, "nfs://" + gv40, "gv40"), (v40, "nfs://" + v40, "v40"),
                             (v41, "nfs://" + v40, "v41"), (gv41, "nfs://" + gv40, "gv41")])
    info = {r["system"]: r for r in runs if r["job"] == "_server_metrics"}
    assert info[gv41]["shared_with"] == [gv40] and info[v3]["shared_with"] == [v40, v41]


def test_v3_and_v41_each_follow_ganeshas_run_as_often():
    # A run right after Ganesha's pays for it (its writes' aftermath): in
    # PAIRED's order and its reverse alone v4.1 was the one after it
    # every second time, and v3 never.
    b = load_bench_run()
    v3, v41, gv41 = b.V41_SYSTEMS
    job = b.Job("seq-write", "tput", "Sequential write", "-")
    for pair in ([v3, v41, gv41], [s for s in b.PAIRED if s != b.TLS_SYSTEM]):
        for i in range(3):
            orders = [[s for s in b.pair_order(pair, job, rep, i) if s in b.V41_SYSTEMS]
                      for rep in range(1, 9)]
            assert all(sorted(o) == sorted(b.V41_SYSTEMS) for o in orders)
            after = [o[o.index(gv41) + 1] for o in orders if o.index(gv41) < 2]
            assert sorted(after) == [v3] * 2 + [v41] * 2, (pair, i, orders)
            firsts = [o[0] for o in orders if o[0] != gv41]
            assert sorted(firsts) == [v3] * 2 + [v41] * 2, (pair, i, orders)
            v3_first = [o.index(v3) < o.index(v41) for o in orders]
            assert v3_first.count(True) == 4, (pair, i, orders)
            # each comparison's two rows still next to each other every time
            assert all(abs(o.index(v3) - o.index(v41)) == 1 for o in orders)
    # v3 stays next to the TLS row, and a pair without Ganesha as before
    tls = b.TLS_SYSTEM
    for rep in range(1, 9):
        o = b.pair_order([tls, v3, v41, gv41], job, rep, 0)
        assert abs(o.index(tls) - o.index(v3)) == 1
        assert b.pair_order([v3, v41], job, rep, 0) == ([v3, v41] if rep % 2 else [v41, v3])


def test_ganesha_has_ports_of_its_own():
    b = load_bench_run()

    class Env:
        export = "/x"

    assert (b.GANESHA_NFS_PORT, b.GANESHA_MOUNT_PORT) != (b.NFS_PORT, b.MOUNT_PORT)
    assert f"nfsport={b.GANESHA_NFS_PORT}&mountport={b.GANESHA_MOUNT_PORT}" in b.Ganesha().url(Env())
    assert f"nfsport={b.NFS_PORT}&mountport={b.MOUNT_PORT}" in b.Dionfs("dionfs", "direct").url(Env())
    # servers for a group: TLS's when it is there, else v4.0's
    tls = b.TLS_SYSTEM
    assert b.pair_servers(["dionfs-direct-v3", "dionfs-direct-v41"]) == [
        ("dionfs-direct-v3", ["dionfs-direct-v3", "dionfs-direct-v41"])]
    assert b.pair_servers(["dionfs-direct-v40", tls, "dionfs-direct-v3", "ganesha-v41"]) == [
        (tls, ["dionfs-direct-v40", tls, "dionfs-direct-v3"]), ("ganesha-v41", ["ganesha-v41"])]


def test_a_fair_jobs_attacker_calls_the_servers_own_ports(monkeypatch):
    """bench/stall.py attacks the server the row runs against: Ganesha on
    its own ports (before: always dionfs's, and Ganesha's fair-* rows
    failed with stall.py finding nobody on 2049)."""
    b = load_bench_run()
    p = dict(b.SMOKE, seq_size=32 << 20, ior_size=8 << 20, ior_records=10)
    job = next(j for j in b.job_list(p) if j.name == "fair-write")
    attacks = []

    class Attacker:
        class stdout:
            readline = staticmethod(lambda: "")

        class stderr:
            read = staticmethod(lambda: "no server")

        def __init__(self, argv, **kw):
            attacks.append(argv)

        def terminate(self):
            pass

        def wait(self, t):
            pass

    class Env:
        export = "/nonexistent-export"

        def nsexec(self):
            return []

    class Args:
        job_timeout = 1

    monkeypatch.setattr(b.subprocess, "Popen", Attacker)
    b.run_loadgen = lambda env, lg, url, argv, timeout: {"mib_s": 1.0, "url": url}
    b.alive = lambda pid: True
    b.measure_run = lambda job, s, rep, fn, export, pid=None, warm=None: fn()[0]

    class Ganesha(b.Ganesha):
        def pid(self):
            return 1

    m = b.run_job(Env(), "ganesha", 1, job, Ganesha(), {"c": "loadgen"}, p, b.rep_seeds(1), Args())
    assert m["failed"].startswith("stall.py did not set up")
    argv = attacks[0]
    port = argv[argv.index("--nfs-port") + 1], argv[argv.index("--mount-port") + 1]
    assert port == (str(b.GANESHA_NFS_PORT), str(b.GANESHA_MOUNT_PORT))


def test_chance_at_parity_follows_the_spread_of_the_repetitions():
    """How often a v4.1 exactly as fast as v3 would reach 0.95 of it in a
    run like this one: always when the repetitions did not move, seldom
    when they moved by half, not at all said with fewer than two, and
    the same answer every time for the same runs."""
    b = load_bench_run()

    def run(job, s, rep, v, key="mib_s"):
        return {"job": job, "system": s, "rep": rep, **({"lat_us": {"p50": v}} if key == "p50" else {key: v})}
    runs = []
    for rep in range(1, 9):
        for s in ("dionfs-direct-v3", "dionfs-direct-v41"):
            runs.append(run("steady", s, rep, 100))
            runs.append(run("noisy", s, rep, 100 if rep % 2 else 50))
            runs.append(run("lat", s, rep, 40 if rep % 2 else 44, key="p50"))
    runs.append(run("once", "dionfs-direct-v3", 1, 100))
    runs.append(run("once", "dionfs-direct-v41", 1, 100))
    # a failed run is left out, not read as a figure
    runs.append({"job": "steady", "system": "dionfs-direct-v41", "rep": 9, "mib_s": 1, "failed": "x"})
    jobs = [("steady", "mib_s"), ("noisy", "mib_s"), ("lat", "p50"), ("once", "mib_s")]
    chances, every = b.parity_chances(runs, jobs)
    assert set(chances) == {"steady", "noisy", "lat"}
    assert chances["steady"] == 1.0
    assert 0.3 < chances["noisy"] < 0.8, chances
    assert 0.8 < chances["lat"] < 1.0, chances
    assert every <= min(chances.values())
    assert b.parity_chances(runs, jobs) == (chances, every)
    assert b.parity_chances(runs, [("once", "mib_s")]) == ({}, None)

    tables = [b.Job("steady", "tput", "Steady", "-"), b.Job("noisy", "tput", "Noisy", "-")]
    summ = {j.name: {"dionfs-direct-v3": entry(100), "dionfs-direct-v41": entry(100)} for j in tables}
    systems = ["dionfs-direct-v3", "dionfs-direct-v41"]
    md = b.v41_table(summ, tables, systems, {s: s for s in systems}, [], runs)

    def cell(job):
        return table_row(md, job)[6]
    assert cell("steady") == "100%"
    assert cell("noisy") == f"{chances['noisy']:.0%}"
    assert "At parity, every one of these 2 jobs at 0.95 or more in one run like this: " in md
