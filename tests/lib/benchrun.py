"""bench/run loaded as a module, for tests of its pieces (it is a script
without a .py name, so `import` cannot find it)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import types
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "bench" / "run"


def load_bench_run() -> types.ModuleType:
    """A fresh module object each call, so a test's monkeypatching stays
    its own."""
    loader = importlib.machinery.SourceFileLoader("bench_run", str(RUN))
    spec = importlib.util.spec_from_loader("bench_run", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def table_row(md: str, job: str) -> list[str]:
    """The cells of `job`'s row in a results.md table `md`."""
    line = next(x for x in md.splitlines() if x.startswith(f"| `{job}`"))
    return [c.strip() for c in line.strip("|").split("|")]
