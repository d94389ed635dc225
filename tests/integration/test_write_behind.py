"""Write-behind of direct mode's page-cache WRITEs
(`crates/dataplane/src/writebehind.rs`), through libnfs
(tests/tools/iorhard), on an XFS 4096-byte-sector loop device.

- test_ior_hard_is_written_behind: IOR-hard's shape, 8 clients (one
  connection each, 4 WRITEs in flight) writing 47008-byte UNSTABLE records
  into one shared 57 MiB file, then COMMIT, then every client reads the
  whole file back and checks every byte: the server's
  `write_behind_bytes` counter shows it started the writeback of all but
  the last lag (4 MiB) and step (4 MiB) of the file before the COMMITs,
  and nothing past the lag. The timing (written back before any COMMIT,
  the last lag left dirty) is checked against the page cache itself in
  `crates/dataplane/tests/write_behind.rs`.
"""

from __future__ import annotations

import pytest

from metrics import counters, free_port

pytestmark = pytest.mark.dionfs_only  # --metrics and the counter are dionfs's

METRICS = f"127.0.0.1:{free_port()}"
DIRECT = pytest.mark.server_args("--read-mode", "direct", "--write-mode", "direct",
                                 "--metrics", METRICS)
REC = 47008
# writebehind.rs LAG and STEP
LAG = STEP = 4 << 20


def behind() -> int:
    return counters(METRICS, "write_behind_bytes").get("write_behind_bytes", 0)


@DIRECT
@pytest.mark.parametrize("loopfs", ["xfs"], indirect=True)
def test_ior_hard_is_written_behind(server, iorhard, loopfs):
    clients, records = 8, 160
    size = clients * records * REC
    before = behind()
    res = iorhard.run("ior", "shared", clients, records, REC, q=4, S="unstable", s=11)
    got = behind() - before
    print(f"{got} of {size} bytes written behind\n{res.stdout}")
    assert got >= size - LAG - STEP, got
    assert got <= size - LAG, got
