"""bench/run's checksum-cost table: the ratio of `--integrity crc32c` to
dionfs direct is taken within each repetition (the two ran minutes apart,
not a whole run apart), and the table reports the median of those ratios
with their range, skipping repetitions where either side failed."""

from __future__ import annotations

from benchrun import load_bench_run


def run(system, rep, mib_s, cpu, failed=False):
    r = {"job": "seq-read", "system": system, "rep": rep, "mib_s": mib_s, "cpu_s_per_gib": cpu}
    if failed:
        r["failed"] = "server start failed"
    return r


def test_ratios_are_paired_by_repetition():
    b = load_bench_run()
    runs = [
        # rep 1: the host was slow for both; rep 2 fast for both
        run("dionfs-direct", 1, 500.0, 0.40), run("dionfs-direct-crc", 1, 450.0, 0.48),
        run("dionfs-direct", 2, 1000.0, 0.20), run("dionfs-direct-crc", 2, 980.0, 0.21),
        run("dionfs-direct", 3, 800.0, 0.30), run("dionfs-direct-crc", 3, 720.0, 0.33),
        # rep 4: the checksummed run failed, its pair is left out
        run("dionfs-direct", 4, 10.0, 9.0), run("dionfs-direct-crc", 4, 0.0, 0.0, failed=True),
    ]
    assert b.paired_ratios(runs, "seq-read", "dionfs-direct-crc", "dionfs-direct", "mib_s") == \
        [0.9, 0.98, 0.9]
    jobs = [b.Job("seq-read", "tput", "Sequential read", "-"),
            b.Job("meta-create", "meta", "Metadata: create", "-")]
    systems = ["dionfs-direct", "dionfs-direct-crc", "ganesha"]
    labels = {s: s for s in systems}
    md = b.integrity_cost(runs, jobs, systems, labels)
    row = next(line for line in md.splitlines() if line.startswith("| `seq-read`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # throughput: median of 0.9, 0.98, 0.9; CPU: 1.2, 1.05, 1.1
    assert cells == ["`seq-read`", "dionfs-direct-crc", "0.900 (0.900–0.980)",
                     "1.100 (1.050–1.200)", "3"]
    # Medians of each system's own numbers would say 800/720 = 1.11x and
    # 0.30/0.33: not what the pairs say.
    assert "meta-create" not in md


def test_no_table_without_both_sides():
    b = load_bench_run()
    jobs = [b.Job("seq-read", "tput", "Sequential read", "-")]
    runs = [run("dionfs-direct", 1, 500.0, 0.4)]
    assert b.integrity_cost(runs, jobs, ["dionfs-direct", "ganesha"], {}) == ""
    labels = {"dionfs-direct": "d", "dionfs-direct-crc": "c"}
    assert b.integrity_cost(runs, jobs, list(labels), labels) == ""
