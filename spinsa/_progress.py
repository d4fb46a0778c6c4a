"""One progress helper for every long loop: a bar on a terminal, one line per stage elsewhere.

``progress(total, desc, unit)`` returns a tqdm bar when standard error is a terminal. In a
log file or a pipe, where carriage-return updates would pile up, it returns a quiet
stand-in with the same methods that writes one line when it closes (``desc: 400 steps in
12.3 s``), or nothing at all for a transient bar (``leave=False``). ``enabled=False`` is
silent everywhere. ``count(n, noun)`` is the one place a count meets its noun (``1 task``,
``12 tasks``, ``2 analyses``), for the line and for anything else printed.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

__all__ = ["count", "progress", "peak_rss_mb"]


def count(n: float, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 task``, ``12 tasks``, ``2.5 steps``,
    ``3 analyses``, ``2 worker processes``; tqdm's ``it`` (iterations) stays as it is."""
    if n == 1 or noun == "it":
        return f"{n} {noun}"
    if noun.endswith("sis"):  # analysis -> analyses
        return f"{n} {noun[:-2]}es"
    if noun.endswith(("s", "x", "ch", "sh")):
        return f"{n} {noun}es"
    return f"{n} {noun}s"


class _Lines:
    """The stand-in off a terminal: counts, then one line on close (none if transient)."""

    def __init__(self, desc: str, unit: str, initial: int, leave: bool, enabled: bool):
        self.desc, self.unit, self.n = desc, unit, initial
        self.leave, self.enabled = leave, enabled
        self.postfix = ""
        self._t0 = time.perf_counter()
        self._closed = False

    def update(self, n: float = 1) -> None:
        self.n += n

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs: Any) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.enabled and self.leave:
            n = int(self.n) if float(self.n).is_integer() else round(self.n, 1)
            tail = f" ({self.postfix})" if self.postfix else ""
            elapsed = time.perf_counter() - self._t0
            print(f"{self.desc}: {count(n, self.unit)} in {elapsed:.1f} s{tail}", file=sys.stderr)

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    *,
    enabled: bool = True,
    initial: int = 0,
    leave: bool = True,
    unit_scale: bool = False,
):
    """A progress bar for a loop of ``total`` units (see the module docstring).

    Returns
    -------
    tqdm.tqdm or a quiet stand-in
        Both have ``update``, ``set_postfix``, ``set_postfix_str``, ``close`` and work as
        context managers.
    """
    if enabled and sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(
            total=total,
            desc=desc,
            unit=unit,
            initial=initial,
            leave=leave,
            unit_scale=unit_scale,
            dynamic_ncols=True,
        )
    return _Lines(desc, unit, initial, leave, enabled)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20
