"""Logs an operator reads: the level words people use (`warning`,
`verbose`...) in `--log-level`, `DIONFS_LOG` and `[server] log_level`, an
unknown word refused at start, and a client's ordinary connections and
disconnects kept out of the `info` log (one `nfs-ls` wrote six lines).

Each server here exports a directory of its own under tmp_path (no loop
device): nothing here reads file data."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from nfstools import nfs_ls
from servers import DionfsServer, dionfs_bin
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

# "2026-11-29T09:37:06.487855Z DEBUG dionfs_transport::connection: ..."
LINE = re.compile(r"^\S+Z\s+(ERROR|WARN|INFO|DEBUG|TRACE) (\S+): (.*)$")


def levels(text: str) -> list[tuple[str, str]]:
    """(level, rest of the line) of each log line in `text`."""
    return [(m.group(1), m.group(3)) for m in map(LINE.match, text.splitlines()) if m]


@pytest.fixture
def start(tmp_path, monkeypatch):
    """Starts `dionfs serve` on an export under tmp_path with these extra
    flags and DIONFS_LOG (None: unset); stops them all at the end."""
    monkeypatch.delenv("DIONFS_LOG", raising=False)
    started = []

    def start(args: list[str] = (), dionfs_log: str | None = None,
              config: str | None = None) -> DionfsServer:
        export = tmp_path / f"export{len(started)}"
        export.mkdir()
        (export / "a").write_text("a\n")
        if dionfs_log is None:
            monkeypatch.delenv("DIONFS_LOG", raising=False)
        else:
            monkeypatch.setenv("DIONFS_LOG", dionfs_log)
        srv = DionfsServer(str(export), list(args))
        if config is not None:
            srv.config = str(tmp_path / f"dionfs{len(started)}.toml")
            with open(srv.config, "w") as f:
                f.write(config.format(export=export, state=srv.state_dir))
            srv.extra_args = ["--ports-file", srv.ports_file, *args]
        started.append(srv)
        srv.start()
        return srv

    yield start
    for srv in started:
        srv.cleanup()


def log_after(srv: DionfsServer, action) -> str:
    """What the server logs while `action()` runs (and its connections
    close)."""
    before = len(open(srv.log_path).read())
    action()
    return open(srv.log_path).read()[before:]


def ls(srv: DionfsServer, expect_ok: bool = True) -> subprocess.CompletedProcess:
    r = nfs_ls(srv.url())
    assert (r.returncode == 0) == expect_ok, r
    return r


def wait_for_line(srv: DionfsServer, text: str, since: int = 0) -> str:
    return wait_until(lambda: text in open(srv.log_path).read()[since:] and
                      open(srv.log_path).read()[since:],
                      20, lambda: f"{text!r} in the log:\n{srv.log_text()}")


def test_one_nfs_ls_writes_no_info_line(start):
    """At the default level a client's connections opening and closing,
    and its disconnects between calls (nfs-ls resets its connections),
    write nothing; at debug they are there, as debug lines."""
    srv = start()
    assert "dionfs serving NFS over TCP" in srv.log_text()
    new = log_after(srv, lambda: ls(srv))
    assert levels(new) == [], new

    verbose = start(["--log-level", "debug"])
    since = len(open(verbose.log_path).read())
    ls(verbose)
    text = wait_for_line(verbose, "connection closed", since)
    connection_lines = [(lvl, rest) for lvl, rest in levels(text) if "connection " in rest]
    assert connection_lines and all(lvl == "DEBUG" for lvl, _ in connection_lines), text
    # An ordinary disconnect is said as one, not as a read error.
    assert "read error" not in text, text


def test_warning_keeps_the_warnings_and_drops_the_rest(start):
    """`DIONFS_LOG=warning` (before: taken for a module name, and nothing
    at all was logged). A client outside the export's list is a warning."""
    srv = start(["--allow", "192.0.2.1"], dionfs_log="warning")
    assert levels(srv.log_text()) == [] or all(
        lvl in ("WARN", "ERROR") for lvl, _ in levels(srv.log_text())), srv.log_text()
    since = len(open(srv.log_path).read())
    ls(srv, expect_ok=False)
    text = wait_for_line(srv, "WARN", since)
    assert all(lvl in ("WARN", "ERROR") for lvl, _ in levels(text)), text
    assert "dionfs serving NFS over TCP" not in srv.log_text()


def test_log_level_wins_over_dionfs_log_which_wins_over_the_config(start):
    config = ('[server]\nlisten = "127.0.0.1"\nnfs_port = 0\nmount_port = 0\n'
              'portmap_port = false\nstate_dir = "{state}"\nlog_level = "{level}"\n\n'
              '[[export]]\npath = "{export}"\nclients = ["127.0.0.1"]\nsecure = false\n')
    # The flag over DIONFS_LOG.
    srv = start(["--log-level", "verbose"], dionfs_log="quiet")
    since = len(open(srv.log_path).read())
    ls(srv)
    wait_for_line(srv, "connection opened", since)

    # The config's log_level, where neither says.
    srv = start(config=config.replace("{level}", "debug"))
    since = len(open(srv.log_path).read())
    ls(srv)
    wait_for_line(srv, "connection opened", since)

    # DIONFS_LOG over the config.
    srv = start(dionfs_log="error", config=config.replace("{level}", "debug"))
    new = log_after(srv, lambda: ls(srv))
    assert levels(srv.log_text()) == [], srv.log_text()
    assert levels(new) == [], new


@pytest.mark.parametrize("how", ["flag", "env", "config"])
def test_an_unknown_word_stops_the_start_with_exit_status_2(tmp_path, how, monkeypatch):
    export = tmp_path / "export"
    export.mkdir()
    args = [dionfs_bin(), "serve", str(export), "--state-dir", str(tmp_path / "state"),
            "--nfs-port", "0", "--mount-port", "0", "--no-portmap", "--no-nlm"]
    env = dict(os.environ)
    env.pop("DIONFS_LOG", None)
    if how == "flag":
        args += ["--log-level", "loud"]
    elif how == "env":
        env["DIONFS_LOG"] = "loud"
    else:
        conf = tmp_path / "dionfs.toml"
        conf.write_text(f'[server]\nstate_dir = "{tmp_path / "state"}"\nlog_level = "loud"\n\n'
                        f'[[export]]\npath = "{export}"\n')
        args = [dionfs_bin(), "serve", "--config", str(conf)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=30, env=env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "`loud` is not a log level; use off, error, warn, info, debug or trace" in r.stderr, \
        r.stderr
    if how == "config":
        assert f"{conf}:3: log_level:" in r.stderr, r.stderr
    # Other commands refuse it too, before doing anything.
    if how == "env":
        r = subprocess.run([dionfs_bin(), "stats"], capture_output=True, text=True, timeout=30,
                           env=env)
        assert r.returncode == 2 and "DIONFS_LOG=loud" in r.stderr, r.stderr


def test_settings_are_logged_in_the_configs_words(start):
    """No Rust debug formatting in the start lines: `squash=root_squash`,
    `read_mode=direct`, a port mapper that is off said as off (before:
    `squash=RootSquash`, `portmap_port=Some(111)`)."""
    srv = start(["--no-portmap", "--read-mode", "dontcache"])
    log = srv.log_text()
    exporting = next(line for line in log.splitlines() if "exporting" in line)
    assert "squash=root_squash" in exporting and "read_mode=dontcache" in exporting, exporting
    assert "access=rw" in exporting and "write_mode=direct" in exporting, exporting
    serving = next(line for line in log.splitlines() if "dionfs serving NFS over TCP" in line)
    assert "portmap_port=off" in serving, serving
    assert not re.search(r"Some\(|None\b|[A-Z][a-z]+[A-Z]\w*\b|\{ ", log), log
