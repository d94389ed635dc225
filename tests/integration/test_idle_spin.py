"""Spinning before sleeping (`crates/server/src/net/spin.rs`), with nfs-rs.

- test_calls_one_at_a_time_are_caught_by_the_spin: a client with one call
  at a time (1 KiB overwrites and reads from nfs-rs, as `overwrite-1k`
  does, every byte right; then 1 KiB READs from libnfs for a second) on
  an otherwise idle server: the reading loop spins for the next call
  instead of sleeping, and at least half of its spins catch one
  (`idle_spins_total`, `idle_spin_catches_total`; 97-100% on a quiet
  host, 64-97% with three busy loops beside). The spin is set to its
  longest (1 ms).
- test_no_spin_with_idle_spin_zero: `--idle-spin-us 0` never spins.
- test_no_spin_while_another_client_has_a_call_in_flight: while eight
  libnfs connections (tests/tools/iorhard, another process) keep calls in
  flight, the first client's calls are not spun for (the CPU may be
  needed for the work in flight), and all get their data right.
"""

from __future__ import annotations

import os
import re
import threading

import pytest

from metrics import counters, free_port

pytestmark = pytest.mark.dionfs_only  # the counters are dionfs's

METRICS = f"127.0.0.1:{free_port()}"


def spins() -> tuple[int, int]:
    c = counters(METRICS, "idle_spins|idle_spin_catches")
    return c.get("idle_spins", 0), c.get("idle_spin_catches", 0)


def overwrite_and_read(client, name: str, calls: int) -> None:
    with client.open(name, "w+b") as f:
        f.write(bytes(64 << 10))
        for i in range(calls):
            data = os.urandom(1024)
            f.write_at(data, (i % 8) * 1024)
            assert f.read_at((i % 8) * 1024, 1024) == data, f"call {i}"


def _mode(m):
    return pytest.param(m, marks=pytest.mark.server_args(
        "--metrics", METRICS, "--idle-spin-us", "1000", "--read-mode", m, "--write-mode", m), id=m)


@pytest.mark.parametrize("mode", [_mode("buffered"), _mode("direct")])
def test_calls_one_at_a_time_are_caught_by_the_spin(server, client, iorhard, mode):
    overwrite_and_read(client, "ow", 50)
    # The counts from a C client (libnfs: `iorhard readloop`, one 1 KiB
    # READ in flight, the next sent as soon as the reply is in): nfs-rs
    # from Python, slower between calls, sent half of them more than the
    # spin's 1 ms after the reply on a loaded CI host (95 and 99 of 200
    # caught, where 150 were asked).
    before = spins()
    out = iorhard.run("readloop", "ow", 0, 1, q=1, x=1024).stdout
    spun, caught = (a - b for a, b in zip(spins(), before))
    reads = int(re.search(r"reads=(\d+)", out).group(1))
    print(f"{mode}: {spun} spins, {caught} calls caught of {reads}")
    # Calls that come in while the server still sends the last reply
    # need no spin (buffered READs: about a third spun for); the others
    # must be caught by one, not slept for.
    assert spun >= min(100, reads // 10), f"{spun} spins in {reads} calls"
    assert caught >= spun // 2, f"{caught} of {spun} spins caught a call ({reads} calls)"
    # A spin started before the first count may catch its call after it.
    assert spun >= caught - 1


@pytest.mark.server_args("--metrics", METRICS, "--idle-spin-us", "0")
def test_no_spin_with_idle_spin_zero(server, client):
    overwrite_and_read(client, "ow", 50)
    assert spins() == (0, 0)


@pytest.mark.server_args("--metrics", METRICS, "--idle-spin-us", "1000",
                         "--read-mode", "direct", "--write-mode", "direct")
def test_no_spin_while_another_client_has_a_call_in_flight(server, client, iorhard):
    # IOR-hard's shape from another process: 8 libnfs connections, 4 calls
    # in flight each, writing a shared file and reading it back, checked.
    done = threading.Event()
    result: list = []

    def ior() -> None:
        try:
            result.append(iorhard.run("ior", "shared", 8, 400, 47008, q=4, S="unstable", s=3))
        except Exception as e:  # noqa: BLE001 - reported below
            result.append(e)
        done.set()

    t = threading.Thread(target=ior)
    t.start()
    try:
        # Once the writers are going, one client's calls one at a time.
        while not os.path.exists(os.path.join(server.export, "shared")) and not done.is_set():
            done.wait(0.01)
        before = spins()
        overwrite_and_read(client, "ow", 100)
        after = spins()
        busy_all_along = not done.is_set()
    finally:
        t.join()
    assert not isinstance(result[0], Exception), result[0]
    caught = after[1] - before[1]
    print(f"{caught} of about 200 calls caught beside IOR-hard (still running: {busy_all_along})")
    assert busy_all_along, "IOR-hard finished before the other client: make it longer"
    # Only when all 32 of IOR's calls are answered at once may a spin
    # start: it happens (11-21 of 200 in runs here, its processes waiting
    # for a CPU), but far from the every call of an idle server.
    assert caught < 60, f"{caught} calls caught beside busy clients"
