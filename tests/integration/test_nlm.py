"""NLM v4 and NSM procedures, called with raw RPC (issue 10): the cases the
Linux client never sends or cannot show (tests/realclient/locks.py shows it
using them): TEST's holder, CANCEL of a blocked lock, lock splitting, FREE_ALL,
NM_LOCK, SHARE/UNSHARE, GRANTED sent to the server, the `_MSG` calls, bad
handles and offsets, NLM versions other than 4, NSM STAT/MON/NOTIFY, and the
grace period after a restart (reclaims only). Locks taken through NLM are
real locks on the server: a process here conflicts with them.
"""

from __future__ import annotations

import fcntl
import json
import sys
import os
import socket
import struct
import subprocess
import threading
import time

import pytest

from metrics import counters, free_port, scrape
from rawrpc import Conn, mnt, opaque, read_record, record, u32, u64, PROG_MISMATCH, SUCCESS
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

NLM, NLM_V4, NSM, NSM_V1 = 100021, 4, 100024, 1
TEST, LOCK, CANCEL, UNLOCK, GRANTED, TEST_MSG = 1, 2, 3, 4, 5, 6
SHARE, UNSHARE, NM_LOCK, FREE_ALL = 20, 21, 22, 23
(S_GRANTED, S_DENIED, S_NOLOCKS, S_BLOCKED, S_GRACE, S_DEADLCK, S_ROFS, S_STALE,
 S_FBIG, S_FAILED) = range(10)


def lock_obj(fh: bytes, caller: bytes, svid: int, off: int, length: int, oh: bytes = b"") -> bytes:
    return opaque(caller) + opaque(fh) + opaque(oh or caller + b"-" + str(svid).encode()) + \
        struct.pack(">i", svid) + u64(off) + u64(length)


def b(v: bool) -> bytes:
    return u32(1 if v else 0)


class Nlm:
    """An NLM client on one connection, as host `caller`."""

    def __init__(self, server, caller: bytes, source: str | None = None):
        ports = json.load(open(server.ports_file))
        self.conn = Conn(server.host, ports["nlm"], reserved=True, source=source)
        self.caller = caller

    def call(self, proc: int, args: bytes, vers: int = NLM_V4, prog: int = NLM) -> tuple[int, bytes]:
        return self.conn.rpc(prog, vers, proc, args, uid=0, gid=0)

    def stat(self, proc: int, args: bytes) -> int:
        accept, res = self.call(proc, args)
        assert accept == SUCCESS, accept
        (n,) = struct.unpack(">I", res[:4])
        at = 4 + n + (-n % 4)
        return struct.unpack(">I", res[at:at + 4])[0]

    def lock(self, fh, svid, off, length, excl=True, block=False, reclaim=False, proc=LOCK) -> int:
        args = opaque(b"c1") + b(block) + b(excl) + lock_obj(fh, self.caller, svid, off, length) + \
            b(reclaim) + u32(1)
        return self.stat(proc, args)

    def unlock(self, fh, svid, off, length) -> int:
        return self.stat(UNLOCK, opaque(b"c2") + lock_obj(fh, self.caller, svid, off, length))

    def cancel(self, fh, svid, off, length, excl=True) -> int:
        return self.stat(CANCEL, opaque(b"c3") + b(True) + b(excl) + lock_obj(fh, self.caller, svid, off, length))

    def test(self, fh, svid, off, length, excl=True):
        """(stat, holder) where holder = (exclusive, svid, oh, offset, len)."""
        accept, res = self.call(TEST, opaque(b"c4") + b(excl) + lock_obj(fh, self.caller, svid, off, length))
        assert accept == SUCCESS
        (n,) = struct.unpack(">I", res[:4])
        at = 4 + n + (-n % 4)
        (stat,) = struct.unpack(">I", res[at:at + 4])
        if stat != S_DENIED:
            return stat, None
        ex, hsvid, ohlen = struct.unpack(">Iii", res[at + 4:at + 16])
        oh = res[at + 16:at + 16 + ohlen]
        at += 16 + ohlen + (-ohlen % 4)
        off, ln = struct.unpack(">QQ", res[at:at + 16])
        return stat, (bool(ex), hsvid, oh, off, ln)

    def share(self, fh, oh, mode, access, proc=SHARE) -> int:
        args = opaque(b"c5") + opaque(self.caller) + opaque(fh) + opaque(oh) + u32(mode) + u32(access) + b(False)
        accept, res = self.call(proc, args)
        assert accept == SUCCESS
        (n,) = struct.unpack(">I", res[:4])
        at = 4 + n + (-n % 4)
        return struct.unpack(">I", res[at:at + 4])[0]

    def close(self):
        self.conn.close()


def file_fh(server, name: str) -> bytes:
    path = os.path.join(server.export, name)
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
    os.chmod(path, 0o666)
    with Conn(server.host, server.mount_port, reserved=True) as m:
        status, root = mnt(m, server.export)
    assert status == 0
    with Conn(server.host, server.nfs_port, reserved=True) as c:
        accept, res = c.rpc(100003, 3, 3, opaque(root) + opaque(name.encode()), uid=0, gid=0)
    assert accept == SUCCESS and struct.unpack(">I", res[:4])[0] == 0, res[:8].hex()
    (n,) = struct.unpack(">I", res[4:8])
    return res[8:8 + n]


def local_denied(path: str, off: int, length: int) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, off)
        return False
    except (BlockingIOError, PermissionError):
        return True
    finally:
        os.close(fd)


def blocked_until_a_process_here_lets_go(server, client: Nlm, fh: bytes, name: str, svid: int) -> None:
    """A process here holds [0,10) of `name`; `client`'s blocking LOCK of it
    is answered BLOCKED; the process lets go (the server then takes the
    lock for the waiter within a second or so)."""
    fd = os.open(os.path.join(server.export, name), os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        assert client.lock(fh, svid, 0, 10, block=True) == S_BLOCKED
    finally:
        os.close(fd)


METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.server_args("--metrics", METRICS)
def test_locks_conflict_split_cancel_and_free_all(server):
    fh = file_fh(server, "f")
    path = os.path.join(server.export, "f")
    a, bb = Nlm(server, b"hostA"), Nlm(server, b"hostB")
    assert a.call(0, b"")[0] == SUCCESS
    assert a.lock(fh, 1, 0, 100) == S_GRANTED
    assert local_denied(path, 50, 1), "a process on the server must conflict with an NLM lock"
    assert not local_denied(path, 100, 1)
    stat, holder = bb.test(fh, 2, 50, 10)
    assert stat == S_DENIED and holder == (True, 1, b"hostA-1", 0, 100), holder
    assert bb.test(fh, 2, 100, 10)[0] == S_GRANTED
    assert bb.lock(fh, 2, 50, 10) == S_DENIED
    # Blocked, then cancelled: the release does not hand it over.
    assert bb.lock(fh, 2, 50, 10, block=True) == S_BLOCKED
    assert bb.cancel(fh, 2, 50, 10) == S_GRANTED
    # A partial unlock splits A's lock.
    assert a.unlock(fh, 1, 40, 20) == S_GRANTED
    assert bb.lock(fh, 2, 45, 10) == S_GRANTED
    assert bb.lock(fh, 2, 30, 1) == S_DENIED
    assert bb.lock(fh, 2, 70, 1) == S_DENIED
    # Shared locks share; A downgrades its left part.
    assert a.lock(fh, 1, 0, 40, excl=False) == S_GRANTED
    assert bb.lock(fh, 2, 0, 10, excl=False) == S_GRANTED
    assert bb.lock(fh, 2, 0, 10, excl=True) == S_DENIED
    # EOF and beyond.
    assert a.lock(fh, 3, 1000, 0) == S_GRANTED
    assert bb.lock(fh, 2, 1 << 40, 1) == S_DENIED
    # A reboots (FREE_ALL from its lock manager): all of A's locks go.
    accept, _ = bb.call(FREE_ALL, opaque(b"hostA") + u32(3))
    assert accept == SUCCESS
    assert bb.lock(fh, 2, 0, 0) == S_GRANTED
    assert local_denied(path, 0, 1)
    assert bb.unlock(fh, 2, 0, 0) == S_GRANTED
    assert not local_denied(path, 0, 1)
    m = counters(METRICS, r"nlm_\w+")
    assert m["nlm_locks"] == 12 and m["nlm_hosts_dropped"] == 1, m
    # Every program's calls are timed, per procedure, NLM's too.
    raw = scrape(METRICS)
    assert 'dionfs_call_seconds_count{program="nlm4",procedure="LOCK"} 12' in raw, raw[-2000:]
    assert 'dionfs_call_seconds_count{program="nlm4",procedure="FREE_ALL"} 1' in raw
    a.close(); bb.close()


def test_blocked_lock_granted_when_a_process_here_releases(server):
    """The waiter is retried each second; GRANTED goes to the caller's
    port mapper, which here is absent: the lock is held for the client's
    next LOCK, which is GRANTED at once."""
    fh = file_fh(server, "g")
    c = Nlm(server, b"hostC")
    blocked_until_a_process_here_lets_go(server, c, fh, "g", 7)
    wait_until(lambda: local_denied(os.path.join(server.export, "g"), 0, 1), 10,
               "the blocked lock to be taken after the release")
    assert c.lock(fh, 7, 0, 10, block=True) == S_GRANTED
    c.close()


def test_other_procedures_and_bad_arguments(server):
    fh = file_fh(server, "h")
    a, bb = Nlm(server, b"hostA"), Nlm(server, b"hostB")
    # NM_LOCK: a lock without monitoring.
    assert a.lock(fh, 1, 0, 10, proc=NM_LOCK) == S_GRANTED
    assert bb.lock(fh, 2, 0, 10) == S_DENIED
    # _MSG: answered with no results (the result goes back as a call).
    accept, res = a.call(TEST_MSG, opaque(b"m") + b(True) + lock_obj(fh, b"hostA", 1, 0, 1))
    assert accept == SUCCESS and res == b""
    # LOCK_MSG takes the lock like LOCK (the result goes back as LOCK_RES,
    # to this host's lock manager, which is absent here).
    args = opaque(b"m2") + b(False) + b(True) + lock_obj(fh, b"hostA", 1, 500, 10) + b(False) + u32(1)
    accept, res = a.call(7, args)
    assert accept == SUCCESS and res == b""
    assert local_denied(os.path.join(server.export, "h"), 505, 1)
    # A `_RES` call (the answer to a `_MSG` this server never sends): void.
    accept, res = a.call(12, opaque(b"r") + u32(S_GRANTED))
    assert accept == SUCCESS and res == b""
    # GRANTED is the server's to send.
    accept, res = a.call(GRANTED, opaque(b"g") + b(True) + lock_obj(fh, b"hostA", 1, 0, 1))
    assert accept == SUCCESS and struct.unpack(">I", res[8:12])[0] == S_DENIED
    # SHARE: deny-write + read vs. write access.
    assert a.share(fh, b"o1", 2, 1) == S_GRANTED
    assert bb.share(fh, b"o2", 0, 2) == S_DENIED
    assert bb.share(fh, b"o2", 0, 1) == S_GRANTED
    assert a.share(fh, b"o1", 2, 1, proc=UNSHARE) == S_GRANTED
    assert bb.share(fh, b"o3", 0, 3) == S_GRANTED
    # Handles that are not ours, offsets the kernel cannot lock.
    assert a.lock(b"\x01" * 32, 1, 0, 1) == S_STALE
    assert a.lock(fh, 1, 1 << 63, 1) == S_FBIG
    # NLM versions 1-3 (NFSv2's): PROG_MISMATCH 4..4.
    accept, _ = a.call(0, b"", vers=3)
    assert accept == PROG_MISMATCH
    a.close(); bb.close()


def test_nsm_stat_mon_and_notify(server):
    fh = file_fh(server, "n")
    a = Nlm(server, b"rebooter")
    accept, res = a.call(1, opaque(b"anyone"), prog=NSM, vers=NSM_V1)
    res_stat, state = struct.unpack(">Ii", res[:8])
    assert accept == SUCCESS and res_stat == 0 and state % 2 == 1, (res_stat, state)
    mon = opaque(b"x") + opaque(b"localhost") + u32(NLM) + u32(4) + u32(16) + b"\0" * 16
    accept, res = a.call(2, mon, prog=NSM, vers=NSM_V1)
    assert accept == SUCCESS and struct.unpack(">I", res[:4])[0] == 1  # STAT_FAIL
    my_id = opaque(b"localhost") + u32(NLM) + u32(4) + u32(16)
    for proc, args in ((3, opaque(b"x") + my_id), (4, my_id)):  # UNMON, UNMON_ALL: sm_stat
        accept, res = a.call(proc, args, prog=NSM, vers=NSM_V1)
        assert accept == SUCCESS and struct.unpack(">i", res[:4])[0] == state
    accept, res = a.call(5, b"", prog=NSM, vers=NSM_V1)  # SIMU_CRASH: void
    assert accept == SUCCESS and res == b""
    assert a.lock(fh, 5, 0, 0) == S_GRANTED
    assert local_denied(os.path.join(server.export, "n"), 0, 1)
    accept, _ = a.call(6, opaque(b"rebooter") + u32(2), prog=NSM, vers=NSM_V1)
    assert accept == SUCCESS
    assert not local_denied(os.path.join(server.export, "n"), 0, 1)
    a.close()


def test_a_client_frees_only_the_locks_it_took(server):
    """FREE_ALL and SM_NOTIFY name the client whose locks go, and the name
    is the caller's word: from another address they free nothing (any host
    that reaches the port could otherwise end another client's mutual
    exclusion); from the address that took them they free them."""
    fh = file_fh(server, "v")
    path = os.path.join(server.export, "v")
    victim = Nlm(server, b"victim")
    assert victim.lock(fh, 1, 0, 10) == S_GRANTED
    assert victim.lock(fh, 2, 20, 10) == S_GRANTED
    other = Nlm(server, b"victim", source="127.0.0.2")
    accept, _ = other.call(FREE_ALL, opaque(b"victim") + u32(7))
    assert accept == SUCCESS
    accept, _ = other.call(6, opaque(b"victim") + u32(8), prog=NSM, vers=NSM_V1)
    assert accept == SUCCESS
    assert local_denied(path, 5, 1) and local_denied(path, 25, 1)
    # The other address's own locks under that name are its own to free.
    assert other.lock(fh, 3, 40, 10) == S_GRANTED
    accept, _ = other.call(FREE_ALL, opaque(b"victim") + u32(9))
    assert accept == SUCCESS
    assert not local_denied(path, 45, 1)
    assert local_denied(path, 5, 1)
    # The victim's reboot, notified from its address, frees its locks.
    accept, _ = victim.call(6, opaque(b"victim") + u32(10), prog=NSM, vers=NSM_V1)
    assert accept == SUCCESS
    assert not local_denied(path, 5, 1) and not local_denied(path, 25, 1)
    victim.close(); other.close()


def test_a_lock_of_two_to_the_63_bytes_from_zero_is_the_whole_file(server):
    """l_offset 0, l_len 2^63 reaches the largest offset `fcntl` can lock:
    the whole file. Its `fcntl` length wrapped to a negative number, so
    such a LOCK failed (NLM4_FAILED), and so did the UNLOCK of a
    whole-file lock sent that way."""
    fh = file_fh(server, "w")
    path = os.path.join(server.export, "w")
    a = Nlm(server, b"wide")
    assert a.lock(fh, 1, 0, 1 << 63) == S_GRANTED
    assert local_denied(path, 0, 1) and local_denied(path, 1 << 50, 1)
    assert a.unlock(fh, 1, 0, 1 << 63) == S_GRANTED
    assert not local_denied(path, 0, 1)
    assert a.lock(fh, 1, 0, 0) == S_GRANTED  # to the end, as l_len 0
    assert a.unlock(fh, 1, 0, 1 << 63) == S_GRANTED
    assert not local_denied(path, 1 << 50, 1)
    a.close()


def test_a_share_of_a_forged_handle_is_stale(server):
    """SHARE checked only the export id inside the handle: a client could
    keep reservations under handles the server never issued (up to its
    4,096). Now the handle's MAC is checked as for every other call."""
    fh = file_fh(server, "s")
    a = Nlm(server, b"sharer")
    forged = fh[:-1] + bytes([fh[-1] ^ 1])
    assert a.share(forged, b"o", 1, 1) == S_STALE
    assert a.share(fh, b"o", 1, 1) == S_GRANTED
    assert a.share(fh, b"o", 1, 1, proc=UNSHARE) == S_GRANTED
    a.close()


def test_a_blocking_lock_that_would_deadlock_is_refused(server):
    """A holds [0,10), B holds [20,30); A waits for B's range, then B asks,
    blocking, for A's: both waited for ever (OFD locks have no deadlock
    detection). knfsd answers NLM4_DEADLCK, which the client's fcntl
    returns as EDEADLK; so does dionfs now. Not blocking, it is DENIED."""
    fh = file_fh(server, "dl")
    a, bb = Nlm(server, b"hostA"), Nlm(server, b"hostB", source="127.0.0.2")
    try:
        assert a.lock(fh, 1, 0, 10) == S_GRANTED
        assert bb.lock(fh, 2, 20, 10) == S_GRANTED
        assert a.lock(fh, 1, 20, 10, block=True) == S_BLOCKED
        assert bb.lock(fh, 2, 0, 10, block=True) == S_DEADLCK
        assert bb.lock(fh, 2, 0, 10) == S_DENIED
        # B lets go: A's wait is over (a GRANTED callback, unanswered here).
        assert bb.unlock(fh, 2, 20, 10) == S_GRANTED
        assert local_denied(os.path.join(server.export, "dl"), 25, 1)
    finally:
        a.close(); bb.close()


def test_a_refused_share_change_keeps_the_reservation_held(server):
    """A SHARE changing an owner's reservation that conflicts with another's
    is refused, and the reservation the owner held stays (it was dropped
    first: a third client was then granted a deny-read share although the
    first still read). modes: 1 deny-read, 2 deny-write; access: 1 read,
    2 write."""
    fh = file_fh(server, "sh")
    a, bb, c = Nlm(server, b"hostA"), Nlm(server, b"hostB"), Nlm(server, b"hostC")
    assert a.share(fh, b"a", 0, 1) == S_GRANTED       # A reads
    assert bb.share(fh, b"b", 2, 0) == S_GRANTED      # B denies writers
    assert a.share(fh, b"a", 0, 3) == S_DENIED        # A wants to write too: no
    assert c.share(fh, b"c", 1, 0) == S_DENIED        # A still reads
    assert bb.share(fh, b"b", 0, 1, proc=UNSHARE) == S_GRANTED
    assert a.share(fh, b"a", 0, 3) == S_GRANTED       # now the change is granted
    assert c.share(fh, b"c", 2, 1) == S_DENIED        # and A writes
    for n in (a, bb, c):
        n.close()


def test_nsm_udp_port_serves_only_reboot_notices(server):
    """NSM's UDP port is for rebooted clients' SM_NOTIFY, and a datagram's
    source address is the sender's to write. The whole lock service was
    served there: a FREE_ALL forged from a client's address freed its
    locks, and `_MSG` calls from forged addresses queued results (and
    connections to those addresses) without bound. Now NLM is refused
    there (PROG_UNAVAIL), and of NSM only NULL, STAT and NOTIFY are
    served (MON and the rest: PROC_UNAVAIL)."""
    from rawrpc import PROC_UNAVAIL, PROG_UNAVAIL, call, parse_reply

    fh = file_fh(server, "u")
    path = os.path.join(server.export, "u")
    victim = Nlm(server, b"victim")
    assert victim.lock(fh, 1, 0, 10) == S_GRANTED
    port = json.load(open(server.ports_file))["nsm"]

    def udp(prog: int, vers: int, proc: int, args: bytes, xid: int) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.settimeout(10)
            u.sendto(call(xid, prog, vers, proc, args, uid=0, gid=0)[4:], (server.host, port))
            got, accept, _ = parse_reply(u.recv(65536))
            assert got == xid
            return accept

    # FREE_ALL from the victim's own address, by datagram: refused, the
    # lock stays.
    assert udp(NLM, NLM_V4, FREE_ALL, opaque(b"victim") + u32(3), 1) == PROG_UNAVAIL
    assert local_denied(path, 5, 1)
    assert udp(NLM, NLM_V4, 0, b"", 2) == PROG_UNAVAIL
    test_msg = opaque(b"c") + b(True) + lock_obj(fh, b"forger", 1, 0, 10)
    assert udp(NLM, NLM_V4, 6, test_msg, 3) == PROG_UNAVAIL
    mon = opaque(b"victim") + opaque(b"me") + u32(NSM) + u32(NSM_V1) + u32(1) + bytes(16)
    assert udp(NSM, NSM_V1, 2, mon, 4) == PROC_UNAVAIL  # SM_MON
    assert udp(NSM, NSM_V1, 0, b"", 5) == SUCCESS
    assert udp(NSM, NSM_V1, 1, opaque(b"me"), 6) == SUCCESS  # SM_STAT
    # The reboot notice itself still works by datagram.
    assert udp(NSM, NSM_V1, 6, opaque(b"victim") + u32(10), 7) == SUCCESS
    assert not local_denied(path, 5, 1)
    victim.close()


def test_a_reboot_behind_a_shared_address_frees_only_its_sender(server):
    """Clients behind one NAT address lock under their own names. A reboot
    notified under a name none of them holds (a client that locked under
    another, or none) freed every lock of the address; now only when one
    name holds locks there, taken for the sender's other name."""
    fh = file_fh(server, "nat")
    path = os.path.join(server.export, "nat")
    a, bb = Nlm(server, b"natA"), Nlm(server, b"natB")
    assert a.lock(fh, 1, 0, 10) == S_GRANTED
    assert bb.lock(fh, 1, 20, 10) == S_GRANTED
    notify = lambda name, st: a.call(6, opaque(name) + u32(st), prog=NSM, vers=NSM_V1)[0]
    assert notify(b"natC", 3) == SUCCESS
    assert local_denied(path, 5, 1) and local_denied(path, 25, 1)
    assert notify(b"natA", 5) == SUCCESS
    assert not local_denied(path, 5, 1) and local_denied(path, 25, 1)
    # One name left at the address: a reboot under another name is its.
    assert notify(b"10.0.0.9", 7) == SUCCESS
    assert not local_denied(path, 25, 1)
    a.close(); bb.close()


def test_a_client_cannot_run_the_server_out_of_descriptors(server):
    """Every lock owner is a description of the file held open, and the
    name a client gives is its own word: a client that locked under ever
    new names took a descriptor per owner until the server had none left
    (then MNT answered SERVERFAULT and no connection was accepted). Now the
    server keeps at most a quarter of its open-file limit for locks, and
    one address at most 4,096 descriptions under at most 256 names."""
    subprocess.run(["prlimit", "--pid", str(server.proc.pid), "--nofile=1024:1024"], check=True)
    fh = file_fh(server, "d")
    n = Nlm(server, b"n0")
    statuses = []
    for i in range(1100):
        n.caller = b"n%d" % (i % 50)
        statuses.append(n.lock(fh, i, i * 10, 5))
        if statuses[-1] != S_GRANTED:
            break
    assert statuses[-1] == S_NOLOCKS, statuses[-3:]
    assert len(statuses) - 1 == 1024 // 4
    assert "as many as it keeps (a quarter of its open-file limit)" in server.log_text()
    # The server still serves everyone else.
    with open(os.path.join(server.export, "other"), "wb") as f:
        f.write(b"z" * 100_000)
    r = subprocess.run(["nfs-cat", server.url("other")], capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == b"z" * 100_000, r.stderr[-300:]
    # A lock given back makes room for another.
    n.caller = b"n0"
    assert n.unlock(fh, 0, 0, 5) == S_GRANTED
    n.caller = b"n-new"
    assert n.lock(fh, 5000, 50_000, 5) == S_GRANTED
    n.close()


def test_a_client_holds_a_bounded_number_of_shares(server):
    """A SHARE of no deny mode conflicts with nothing, so a client could
    add reservations without end (each kept in memory, each scanned by
    the next SHARE of the file): one address holds at most 4,096."""
    fh = file_fh(server, "s")
    n = Nlm(server, b"sharer")
    for i in range(4096):
        assert n.share(fh, b"o%d" % i, 0, 1) == S_GRANTED, i
    assert n.share(fh, b"one-more", 0, 1) == S_NOLOCKS
    assert n.share(fh, b"o7", 0, 1, proc=UNSHARE) == S_GRANTED
    assert n.share(fh, b"one-more", 0, 1) == S_GRANTED
    # Another client is not affected.
    other = Nlm(server, b"other", source="127.0.0.2")
    assert other.share(fh, b"x", 0, 1) == S_GRANTED
    n.close(); other.close()


class FakeClientHost:
    """The lock manager of a client host at 127.0.0.1 as the server calls
    it back: a port mapper on 127.0.0.1:111 (the first `refuse` GETPORTs
    answered "not registered") and an NLM service answering GRANTED with
    `granted_answer` (0 granted, 1 denied: no such blocked lock here)."""

    def __init__(self, granted_answer: int, refuse: int = 0):
        self.granted_answer, self.refuse = granted_answer, refuse
        self.getports, self.granted_calls = 0, 0
        self.calls: list[tuple[int, bytes]] = []  # (procedure, arguments)
        self.socks = []
        self.nlm_port = self._listen(0, self._nlm)
        try:
            self._listen(111, self._portmap)
        except OSError as e:
            self.close()
            pytest.fail(f"this test needs 127.0.0.1:111 free (a host rpcbind holds it?): {e}")

    def _listen(self, port: int, handler) -> int:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(16)
        self.socks.append(sock)
        threading.Thread(target=self._accept, args=(sock, handler), daemon=True).start()
        return sock.getsockname()[1]

    def _accept(self, sock, handler):
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, handler), daemon=True).start()

    def _serve(self, conn, handler):
        with conn:
            try:
                while True:
                    rec = read_record(conn)
                    xid, _, _, _, _, proc = struct.unpack(">IIIIII", rec[:24])
                    at = 24
                    for _ in range(2):  # credentials, verifier
                        _, n = struct.unpack(">II", rec[at:at + 8])
                        at += 8 + n + (-n % 4)
                    body = struct.pack(">IIIIII", xid, 1, 0, 0, 0, 0) + handler(proc, rec[at:])
                    conn.sendall(record(body))
            except (OSError, ConnectionError, struct.error):
                return

    def _portmap(self, proc: int, args: bytes) -> bytes:
        self.getports += 1
        return u32(0 if self.getports <= self.refuse else self.nlm_port)

    def _nlm(self, proc: int, args: bytes) -> bytes:
        self.calls.append((proc, args))
        if proc != GRANTED:
            return b""
        self.granted_calls += 1
        (n,) = struct.unpack(">I", args[:4])
        return opaque(args[4:4 + n]) + u32(self.granted_answer)

    def close(self):
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept, which holds the port
            except OSError:
                pass
            sock.close()


def test_a_lock_asked_again_while_its_granted_callback_is_made_stays_held(server):
    """A blocked LOCK is granted when a process here lets go; the GRANTED
    callback's first try fails (the client's port mapper does not answer
    it), and the client, polling as the Linux client does, asks again and
    is answered GRANTED: it holds the lock and no longer waits. The
    callback's next try is answered "no such blocked lock", and the server
    released the lock: another client was then granted it too. Now that
    answer changes nothing once the LOCK asked again was answered (knfsd
    unlinks the blocked lock then)."""
    fh = file_fh(server, "cb")
    path = os.path.join(server.export, "cb")
    host = FakeClientHost(granted_answer=1, refuse=1)
    a, other = Nlm(server, b"clientA"), Nlm(server, b"clientB", source="127.0.0.2")
    try:
        blocked_until_a_process_here_lets_go(server, a, fh, "cb", 1)
        # The lock taken, the callback's first try refused.
        wait_until(lambda: host.getports > 0, 15, "a GRANTED callback tried")
        assert local_denied(path, 0, 1)
        assert a.lock(fh, 1, 0, 10, block=True) == S_GRANTED
        # Past the callback's second try, 2 s after the first. A fixed wait:
        # with the LOCK answered, that try ends without a call to this host,
        # so nothing here shows that it has been made.
        time.sleep(3.5)
        assert local_denied(path, 0, 1), "the server released a lock the client holds"
        assert other.lock(fh, 2, 0, 10) == S_DENIED
    finally:
        a.close(); other.close(); host.close()


def test_msg_calls_are_answered_with_res_calls_to_the_client(server):
    """The asynchronous procedures: TEST_MSG, LOCK_MSG, CANCEL_MSG,
    UNLOCK_MSG and GRANTED_MSG are answered at once with no results, which
    go back as TEST_RES ... GRANTED_RES calls to the client's lock manager
    (found through its port mapper), each with its call's cookie."""
    fh = file_fh(server, "msg")
    host = FakeClientHost(granted_answer=0)
    a, other = Nlm(server, b"clientA"), Nlm(server, b"clientB", source="127.0.0.2")
    try:
        assert other.lock(fh, 2, 0, 10) == S_GRANTED
        lock_args = lambda cookie, off: (opaque(cookie) + b(False) + b(True)  # noqa: E731
                                         + lock_obj(fh, b"clientA", 1, off, 10) + b(False) + u32(1))
        calls = [
            (6, opaque(b"t1") + b(True) + lock_obj(fh, b"clientA", 1, 0, 10)),   # TEST_MSG
            (7, lock_args(b"l1", 20)),                                          # LOCK_MSG
            (9, opaque(b"u1") + lock_obj(fh, b"clientA", 1, 20, 10)),           # UNLOCK_MSG
            (8, opaque(b"c1") + b(False) + b(True) + lock_obj(fh, b"clientA", 1, 0, 10)),  # CANCEL_MSG
            (10, opaque(b"g1") + b(True) + lock_obj(fh, b"clientA", 1, 0, 10)),  # GRANTED_MSG
        ]
        for proc, args in calls:
            accept, res = a.call(proc, args)
            assert accept == SUCCESS and res == b"", (proc, res)
            wait_until(lambda: any(p == proc + 5 for p, _ in host.calls), 10,
                       f"the result call for procedure {proc}")
            if proc == 7:  # the lock is taken
                assert local_denied(os.path.join(server.export, "msg"), 25, 1)
            if proc == 9:
                assert not local_denied(os.path.join(server.export, "msg"), 25, 1)
        results = {p: args for p, args in host.calls if p >= 11}

        def cookie_and_stat(args: bytes) -> tuple[bytes, int]:
            (n,) = struct.unpack(">I", args[:4])
            at = 4 + n + (-n % 4)
            return args[4:4 + n], struct.unpack(">I", args[at:at + 4])[0]

        assert cookie_and_stat(results[11]) == (b"t1", S_DENIED)  # TEST_RES: B holds it
        holder = results[11][4 + 4 + 4:]
        excl, svid = struct.unpack(">Ii", holder[:8])
        assert (excl, svid) == (1, 2), holder.hex()
        assert cookie_and_stat(results[12]) == (b"l1", S_GRANTED)   # LOCK_RES
        assert cookie_and_stat(results[14]) == (b"u1", S_GRANTED)   # UNLOCK_RES
        assert cookie_and_stat(results[13]) == (b"c1", S_GRANTED)   # CANCEL_RES
        assert cookie_and_stat(results[15]) == (b"g1", S_DENIED)    # GRANTED_RES: the server waits for none
    finally:
        a.close(); other.close(); host.close()


@pytest.mark.server_args("--grace-period", "5")
def test_a_lock_granted_after_waiting_is_recorded_for_a_restart(server):
    """Only a LOCK granted at once recorded its client (STATE_DIR/nlm/hosts):
    a client whose locks all came through blocked LOCKs was not told of a
    restart, and with no other client recorded there was no grace period
    for it to reclaim in, so another client took its range at once."""
    fh = file_fh(server, "w")
    host = FakeClientHost(granted_answer=0)
    a = Nlm(server, b"waiter")
    try:
        blocked_until_a_process_here_lets_go(server, a, fh, "w", 1)
        wait_until(lambda: host.granted_calls > 0, 10, "a GRANTED callback")
        assert b"waiter".hex() in open(os.path.join(server.state_dir, "nlm", "hosts")).read()
        a.close()
        server.restart()
        other = Nlm(server, b"newcomer", source="127.0.0.2")
        assert other.lock(fh, 2, 0, 10) == S_GRACE
        other.close()
    finally:
        host.close()


CB_METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.server_args("--metrics", CB_METRICS)
def test_a_client_that_does_not_answer_callbacks_holds_no_threads(server):
    """The results of `_MSG` calls go back as calls to the client, which
    may not answer: here its port mapper (127.0.0.1:111, the client's
    address) accepts connections and never replies, so each call waits 5 s.
    A blocking thread per call was taken from the pool NFS calls run on:
    a client sending TEST_MSGs as fast as it could held all 512, and a
    4 KiB READ of anyone else waited seconds for one. Now the calls to one
    client are made one at a time, the rest queued up to 64 and dropped
    past that (counted)."""
    black_hole = socket.socket()
    black_hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        black_hole.bind(("127.0.0.1", 111))
    except OSError as e:
        pytest.fail(f"this test needs 127.0.0.1:111 free (a host rpcbind holds it?): {e}")
    black_hole.listen(4096)
    held: list[socket.socket] = []

    def accept():
        while True:
            try:
                held.append(black_hole.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    fh = file_fh(server, "m")
    with open(os.path.join(server.export, "g"), "wb") as f:
        f.write(b"g" * 100_000)

    def flood():
        c = Nlm(server, b"caller")
        for _ in range(500):
            accept_stat, _ = c.call(TEST_MSG, opaque(b"m") + b(True) + lock_obj(fh, b"caller", 1, 0, 1))
            assert accept_stat == SUCCESS
        c.close()
    floods = [threading.Thread(target=flood) for _ in range(4)]
    try:
        for t in floods:
            t.start()
        for t in floods:
            t.join(timeout=120)
        threads = len(os.listdir(f"/proc/{server.proc.pid}/task"))
        r = subprocess.run(["nfs-cat", server.url("g")], capture_output=True, timeout=30)
        assert r.returncode == 0 and r.stdout == b"g" * 100_000, r.stderr[-300:]
        # One call in progress to this client (and a connection or two
        # just closed), not one per TEST_MSG.
        assert len(held) <= 3, len(held)
        assert threads < 100, threads
        dropped = counters(CB_METRICS, r"nlm_callbacks_dropped")["nlm_callbacks_dropped"]
        assert dropped >= 2000 - 64 - 3, dropped
        assert server.log_text().count("NLM: dropping a call to the client") == 1
    finally:
        black_hole.close()
        for c in held:
            c.close()


# NSM NULL datagrams to 127.0.0.1:PORT for SECONDS; prints how many.
_NSM_NULLS = f"""
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
null = struct.pack(">IIIIIIIIII", 1, 0, 2, {NSM}, {NSM_V1}, 0, 0, 0, 0, 0)
port, end, sent = int(sys.argv[1]), time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < end:
    for _ in range(100):
        s.sendto(null, ("127.0.0.1", port))
    sent += 100
print(sent)
"""


def test_a_flood_of_nsm_datagrams_holds_no_threads(server):
    """NSM listens on UDP, where anyone can send from any address. A task
    per datagram, each on a blocking thread, let a flood of NULLs take all
    512 of the threads NFS calls run on (and 420 MB, kept after): another
    client's 100 KB `nfs-cat` took 2.5-4.5 s during it. Now a UDP socket
    runs 16 calls at once and leaves the rest to the kernel to drop."""
    port = json.load(open(server.ports_file))["nsm"]
    with open(os.path.join(server.export, "g"), "wb") as f:
        f.write(b"g" * 100_000)
    status = f"/proc/{server.proc.pid}/status"

    def rss_kib() -> int:
        line = next(ln for ln in open(status) if ln.startswith("VmRSS:"))
        return int(line.split()[1])
    before = rss_kib()
    floods = [subprocess.Popen([sys.executable, "-c", _NSM_NULLS, str(port), "5"],
                               stdout=subprocess.PIPE, text=True) for _ in range(3)]
    # The flood under way for 2 of its 5 s: what follows is measured
    # during it, not waited for.
    time.sleep(2)
    r = subprocess.run(["nfs-cat", server.url("g")], capture_output=True, timeout=60)
    threads = len(os.listdir(f"/proc/{server.proc.pid}/task"))
    grown = rss_kib() - before
    sent = sum(int(p.communicate(timeout=60)[0]) for p in floods)
    assert r.returncode == 0 and r.stdout == b"g" * 100_000, r.stderr[-300:]
    print(f"{sent} datagrams; {threads} threads, RSS +{grown} KiB during the flood")
    assert sent > 100_000
    assert threads < 200, threads
    assert grown < 100 * 1024, grown
    # NSM still answers.
    c = Nlm(server, b"after")
    accept, res = c.call(1, opaque(b"x"), prog=NSM, vers=NSM_V1)
    assert accept == SUCCESS and struct.unpack(">I", res[:4])[0] == 0
    c.close()


@pytest.mark.server_args("--grace-period", "4")
def test_grace_period_after_a_restart(server):
    fh = file_fh(server, "r")
    a = Nlm(server, b"reclaimer")
    state0 = struct.unpack(">Ii", a.call(1, opaque(b"x"), prog=NSM, vers=NSM_V1)[1][:8])[1]
    assert a.lock(fh, 1, 0, 10) == S_GRANTED
    hosts = os.path.join(server.state_dir, "nlm", "hosts")
    assert "127.0.0.1" in open(hosts).read()
    a.close()
    server.restart()
    a, bb = Nlm(server, b"reclaimer"), Nlm(server, b"newcomer")
    state1 = struct.unpack(">Ii", a.call(1, opaque(b"x"), prog=NSM, vers=NSM_V1)[1][:8])[1]
    assert state1 > state0 and state1 % 2 == 1
    assert bb.lock(fh, 2, 100, 10) == S_GRACE
    assert bb.test(fh, 2, 100, 10)[0] == S_GRACE
    assert a.lock(fh, 1, 0, 10, reclaim=True) == S_GRANTED
    assert bb.lock(fh, 2, 0, 10, reclaim=True) == S_DENIED  # a reclaim conflicts too
    # Once the 4 s grace period is over (TEST, which takes nothing, is
    # answered GRACE until then), the newcomer's lock is granted.
    wait_until(lambda: bb.test(fh, 2, 100, 10)[0] != S_GRACE, 30, "the grace period to end")
    assert bb.lock(fh, 2, 100, 10) == S_GRANTED
    assert bb.lock(fh, 2, 0, 10) == S_DENIED
    assert a.lock(fh, 1, 200, 1, reclaim=True) == S_GRACE  # no reclaims after it
    a.close(); bb.close()


def test_malformed_lock_calls_are_refused_and_the_server_goes_on(server):
    """Arguments that do not decode (truncated, lengths past their limit,
    bad enum values) are answered GARBAGE_ARGS over TCP; datagrams of
    garbage to NSM's UDP port are dropped; the server answers afterwards."""
    import random
    import socket

    a = Nlm(server, b"fuzzer")
    rng = random.Random(5)
    good = opaque(b"c") + b(True) + b(True) + lock_obj(b"\x01" * 32, b"fuzzer", 1, 0, 10) + b(False) + u32(1)
    cases = [good[:n] for n in (0, 3, 8, 20, len(good) - 1)]
    cases.append(u32(0xFFFFFFFF) + good)  # a cookie longer than any netobj
    cases.append(opaque(b"c") + u32(7) + good[8:])  # a bool that is 7
    for proc in (1, 2, 3, 4, 20, 23):
        for args in cases:
            accept, _ = a.call(proc, args)
            assert accept == 4, (proc, args[:16].hex(), accept)  # GARBAGE_ARGS
    # SHARE's mode out of range.
    bad_share = opaque(b"c") + opaque(b"fuzzer") + opaque(b"\x01" * 8) + opaque(b"o") + u32(9) + u32(1) + b(False)
    assert a.call(20, bad_share)[0] == 4
    ports = json.load(open(server.ports_file))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        for _ in range(200):
            u.sendto(rng.randbytes(rng.randrange(0, 600)), (server.host, ports["nsm"]))
    assert a.call(0, b"")[0] == SUCCESS
    a.close()
    assert server.alive()
