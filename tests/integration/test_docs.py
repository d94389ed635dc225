"""The documentation cannot drift from the code.

- Every configuration key the built binary accepts, and every long flag of
  every command, appears in docs/configuration.md. The keys come from the
  binary itself: each config table refuses unknown keys
  (`#[serde(deny_unknown_fields)]`), and serde's refusal lists every key
  the table accepts ("unknown field `x`, expected one of `a`, `b`, ...").
  So `dionfs exportfs --config FILE` (which parses a config and serves
  nothing) is given a probe key in each table, and each key found is probed
  again as a table of its own, so a nested table is found too. The flags
  come from `dionfs --help` and each subcommand's `--help`.
- README.md is at most 300 lines and shows the test command `.ci/run` runs.
- Every relative link in README.md, CHANGELOG.md and docs/*.md names a file
  in the repository (and, with `#anchor`, a heading in it).
- Every document under docs/ but the benchmark archive and the NFSv4 design
  is reachable from README.md by links.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from servers import dionfs_bin  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CONFIG_DOC = REPO / "docs" / "configuration.md"
CONFIG_MAN = REPO / "dist" / "man" / "dionfs.toml.5"
PROBE = "zz_undocumented_probe"
NOT_REQUIRED = ("docs/bench/archive/", "docs/nfs4-design.md")


# --- what the binary accepts ------------------------------------------------


def _probe(tmp: Path, text: str) -> list[str] | None:
    """The keys of the table `text` puts PROBE into, as the binary's refusal
    lists them; None if the binary did not refuse PROBE as an unknown key
    (the value is not a table there)."""
    f = tmp / "probe.toml"
    f.write_text(text)
    r = subprocess.run([dionfs_bin(), "exportfs", "--config", str(f)],
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    # "unknown field `P`, expected one of `a`, `b` (in `P = 1`)": the
    # list, without the line quoted after it.
    m = re.search(rf"unknown field `{PROBE}`, "
                  r"(expected (?:one of )?((?:`[^`]+`(?:, | or )?)+)|there are no fields)", out)
    if m is None:
        return None
    assert r.returncode != 0, out
    return re.findall(r"`([^`]+)`", m.group(2) or "")


def _nested(path: tuple[str, ...], arrays: tuple[bool, ...]) -> str:
    """TOML giving PROBE to the table at `path`, each level an inline table
    or (where `arrays` says) an array of one."""
    value = f"{{ {PROBE} = 1 }}"
    for key, array in reversed(list(zip(path, arrays))):
        value = f"[{value}]" if array else value
        value = f"{{ {key} = {value} }}"
    return value[2:-2] + "\n"


def config_keys(tmp: Path) -> dict[str, list[str]]:
    """Every table of the config file and the keys it accepts, found by
    asking the binary: {"": top-level keys, "server": ..., "export": ...}."""
    top = _probe(tmp, f"{PROBE} = 1\n")
    assert top, "the binary did not list its top-level keys"
    tables: dict[str, list[str]] = {"": top}
    todo = deque((k,) for k in top)
    while todo:
        path = todo.popleft()
        for arrays in itertools.product((False, True), repeat=len(path)):
            keys = _probe(tmp, _nested(path, arrays))
            if keys is not None:
                tables[".".join(path)] = keys
                todo.extend(path + (k,) for k in keys)
                break
    return tables


def _help_flags(args: list[str]) -> tuple[set[str], list[str]]:
    """The long flags `dionfs ARGS --help` defines, and its subcommands."""
    r = subprocess.run([dionfs_bin(), *args, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    flags: set[str] = set()
    subcommands: list[str] = []
    section = ""
    for line in r.stdout.splitlines():
        if line and not line[0].isspace():
            section = line.rstrip(":").strip().lower()
            continue
        # An option's own line is indented at most 6 spaces ("  -v,
        # --verbose", "      --convert <FILE>"); its wrapped help, further.
        m = re.match(r"^ {2,6}(?:-\w, )?--([a-z0-9][a-z0-9-]*)", line)
        if m:
            flags.add(m.group(1))
        elif section == "commands":
            m = re.match(r"^ {2}([a-z][a-z0-9-]*)\b", line)
            if m and m.group(1) != "help":
                subcommands.append(m.group(1))
    return flags, subcommands


def cli_flags() -> dict[str, set[str]]:
    """Every command ("" for `dionfs` itself) and its long flags."""
    found: dict[str, set[str]] = {}
    todo = deque([[]])
    while todo:
        args = todo.popleft()
        flags, subs = _help_flags(args)
        found[" ".join(args)] = flags
        todo.extend(args + [s] for s in subs)
    return found


# --- what the documentation says --------------------------------------------


def undocumented_keys(tables: dict[str, list[str]], doc: str) -> list[str]:
    """Keys not named in `doc` as `key` or `key = ...`, and tables not shown
    as [table] or [[table]]."""
    missing = []
    for table, keys in tables.items():
        if table and f"[{table}]" not in doc:
            missing.append(f"[{table}]")
        for key in keys:
            if f"{table}.{key}".lstrip(".") in tables:
                continue  # a table: its header is checked above
            if not re.search(rf"`{re.escape(key)}(`| =)", doc):
                missing.append(f"{table}.{key}".lstrip("."))
    return missing


def undocumented_flags(commands: dict[str, set[str]], doc: str) -> list[str]:
    return sorted(f"dionfs {cmd} --{flag}".replace("  ", " ")
                  for cmd, flags in commands.items() for flag in flags
                  if not re.search(rf"--{re.escape(flag)}(?![a-z0-9-])", doc))


@pytest.mark.dionfs_only
def test_every_config_key_is_documented(tmp_path):
    tables = config_keys(tmp_path)
    # The probe found the tables it must: were serde's message to change,
    # this fails instead of finding nothing to check.
    assert {"server", "export"} <= set(tables), tables
    assert "nfs_port" in tables["server"] and "path" in tables["export"], tables
    missing = undocumented_keys(tables, CONFIG_DOC.read_text())
    assert not missing, f"config keys missing from docs/configuration.md: {missing}"


def keys_not_in_man_page(tables: dict[str, list[str]], page: str) -> list[str]:
    """Keys not shown in bold in the roff `page` (`.B key`, `.BR key ...`,
    `" key "` inside a .BR line, or `\\fBkey`)."""
    return [f"{table}.{key}".lstrip(".")
            for table, keys in tables.items() for key in keys
            if f"{table}.{key}".lstrip(".") not in tables
            and not re.search(rf'(^\.BR? |\\fB|" ){re.escape(key)}\b', page, re.M)]


@pytest.mark.dionfs_only
def test_every_config_key_is_in_the_man_page(tmp_path):
    """dionfs.toml(5) is written by hand: it names every key all the same."""
    tables = config_keys(tmp_path)
    assert "nfs_port" in tables["server"], tables
    missing = keys_not_in_man_page(tables, CONFIG_MAN.read_text())
    assert not missing, f"config keys missing from dist/man/dionfs.toml.5: {missing}"
    # and the check can fail
    assert keys_not_in_man_page({"server": ["zz_not_there"]}, CONFIG_MAN.read_text())


@pytest.mark.dionfs_only
def test_every_cli_flag_is_documented():
    commands = cli_flags()
    assert {"serve", "reload", "stats", "exportfs", "scrub"} <= set(commands), commands
    assert "nfs-port" in commands["serve"], commands["serve"]
    missing = undocumented_flags(commands, CONFIG_DOC.read_text())
    assert not missing, f"flags missing from docs/configuration.md: {missing}"


def test_an_undocumented_key_or_flag_is_caught():
    doc = "[server]\n| `nfs_port` | 2049 |\n`grace_period = 90`\n`--nfs-port N`, `--grace-period`\n"
    tables = {"": ["server"], "server": ["nfs_port", "grace_period"]}
    assert undocumented_keys(tables, doc) == []
    assert undocumented_keys(tables, doc.replace("grace_period", "gp")) == ["server.grace_period"]
    assert undocumented_keys({"": ["nfs4"], "nfs4": []}, doc) == ["[nfs4]"]
    commands = {"serve": {"nfs-port", "grace-period"}}
    assert undocumented_flags(commands, doc) == []
    assert undocumented_flags(commands, doc.replace("--grace-period", "--grace")) == [
        "dionfs serve --grace-period"]
    # A longer flag does not document a shorter one it begins with.
    assert undocumented_flags({"serve": {"nfs"}}, doc) == ["dionfs serve --nfs"]


# --- the README and the links -------------------------------------------------


def test_readme_fits_on_a_few_screens():
    lines = README.read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move detail to docs/"


def test_readme_shows_the_test_command_ci_runs():
    assert "```sh\nsudo scripts/test\n```" in README.read_text()
    assert re.search(r'^exec "\$\(dirname "\$0"\)/\.\./scripts/test" "\$@"$',
                     (REPO / ".ci" / "run").read_text(), re.M)


def _prose(text: str) -> str:
    """`text` without code blocks and inline code, where a `[x](y)` is
    not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _links(md: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", _prose(md.read_text()))


def _anchors(md: Path) -> set[str]:
    """GitHub's anchors of the headings of `md`."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _strip_code(md.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _strip_code(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _target(md: Path, link: str) -> tuple[Path | None, str]:
    """The file a relative link names (None for an external one) and its
    anchor."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link):
        return None, ""
    path, _, anchor = link.partition("#")
    return (md if not path else (md.parent / path).resolve()), anchor


def _checked_docs() -> list[Path]:
    return [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_relative_link_resolves():
    broken = []
    for md in _checked_docs():
        for link in _links(md):
            target, anchor = _target(md, link)
            if target is None:
                continue
            where = f"{md.relative_to(REPO)}: ({link})"
            if not target.is_relative_to(REPO):
                broken.append(f"{where} leaves the repository")
            elif not target.is_file():
                broken.append(f"{where} names no file")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{where} names no heading of {target.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


def test_every_doc_is_reachable_from_the_readme():
    reached = {README}
    todo = deque([README])
    while todo:
        md = todo.popleft()
        for link in _links(md):
            target, _ = _target(md, link)
            if (target is not None and target.suffix == ".md" and target.is_file()
                    and target.is_relative_to(REPO) and target not in reached):
                reached.add(target)
                todo.append(target)
    docs = [p for p in (REPO / "docs").rglob("*.md")
            if not str(p.relative_to(REPO)).startswith(NOT_REQUIRED)]
    unreached = sorted(str(p.relative_to(REPO)) for p in docs if p.resolve() not in reached)
    assert not unreached, f"not linked from README.md (or a page it links): {unreached}"
