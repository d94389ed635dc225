"""Waiting for a condition with a deadline, instead of a fixed sleep.

A test that sleeps a fixed time and then asserts races the machine: too
short on a loaded one, wasted time on an idle one. Polling the condition
until a generous deadline says the same without the race. Something that
must *not* happen cannot be shown by polling: such a test waits until the
state it is about can be seen (a waiter queued, a counter moved), then
asserts.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, what: str | Callable[[], str],
               interval: float = 0.05) -> T:
    """Returns the first true value of `cond()`, looked at every `interval`
    seconds; fails the test (AssertionError) if there is none within
    `timeout` seconds, naming `what` it waited for. `what` may be a function,
    called only then, to describe the state (a log's tail, a counter)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {described}")
        time.sleep(min(interval, left))
