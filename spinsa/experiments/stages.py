"""One stage engine for every pipeline: ``reproduce``, ``compare``, ``sequences run``, scans.

A pipeline is a list of :class:`Stage`. A stage writes one spinsa HDF5 file (its
``output``) that stores the stage's ``config``, and perhaps other files beside it
(figures, markdown). The one rule for "done", :func:`stage_done`:

- the output verifies (:func:`spinsa.io.verify`: readable, every checksum holds) and the
  config stored in it equals the stage's config (:func:`spinsa._config.config_differences`),
  but for where the dynamics ran (``dynamics.device``: results agree to rounding, so a run
  started on a CPU resumes on a GPU);
- a missing output is not done; a damaged one is set aside as ``NAME.corrupt`` and the stage
  runs again (nothing is overwritten that could still be read);
- an intact output of another config raises :class:`ConfigChangedError`, which names what
  differs: a finished result is never replaced silently.

A stage without an HDF5 output (a figure, a report) is done when all its files exist; one
with no file at all (a computation kept in memory for a later stage) always runs. A stage
also runs when a stage it depends on ran. :meth:`Pipeline.run` prints the plan with
an estimate of each stage's time before the first one starts, a line per stage as it goes,
and a table of estimated against measured times at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spinsa import io
from spinsa._config import config_differences, describe_differences
from spinsa._progress import peak_rss_mb

__all__ = [
    "ConfigChangedError",
    "Pipeline",
    "Stage",
    "stage_done",
    "stage_state",
    "format_duration",
]


class ConfigChangedError(ValueError):
    """An output holds the result of another configuration (``differences``: dotted key ->
    (stored, current))."""

    def __init__(self, path: Path, differences: dict[str, tuple[Any, Any]], hint: str):
        self.path, self.differences = path, differences
        super().__init__(
            f"{path} holds a result of another configuration ({describe_differences(differences)}"
            f"); {hint}"
        )


# where the dynamics ran: not a difference between two results (stage_state)
DEVICE_KEY = "dynamics.device"
DEFAULT_HINT = (
    "pass overwrite=True (--overwrite) to start afresh, or choose another output directory"
)


def stage_state(path, config: Mapping | None = None, *, hint: str = DEFAULT_HINT) -> str:
    """``"done"``, ``"missing"`` or ``"damaged"``: the one rule of "done", read only.

    Parameters
    ----------
    path : str or PathLike
        The stage's spinsa file.
    config : Mapping or dataclass, optional
        The config the file must store; None for files named by the hash of their config
        (a scan's points and fits), where verification alone decides.
    hint : str
        What the user can do when the file holds another config (for the error).

    Returns
    -------
    str
        ``"done"`` (verifies and stores ``config``), ``"missing"`` or ``"damaged"`` (a
        checksum fails); the file is not touched.

    Raises
    ------
    ConfigChangedError
        The file is intact but stores another config.
    spinsa.io.SpinsaFileError
        ``path`` is not a file of spinsa (foreign, not HDF5, a newer schema).
    """
    path = Path(path)
    try:
        io.verify(path)
    except io.SpinsaFileError as err:
        if err.reason in ("missing", "corrupt"):
            return err.reason.replace("corrupt", "damaged")
        raise  # a file spinsa did not write is never taken for a stage, nor touched
    if config is not None:
        differences = config_differences(io.read(path).config, config)
        differences = {k: v for k, v in differences.items() if not k.endswith(DEVICE_KEY)}
        if differences:
            raise ConfigChangedError(path, differences, hint)
    return "done"


def stage_done(path, config: Mapping | None = None, *, hint: str = DEFAULT_HINT) -> bool:
    """Whether ``path`` holds a finished stage of ``config`` (:func:`stage_state`); a
    damaged file is renamed ``NAME.corrupt`` first, so that the stage runs again and
    nothing that could still be inspected is overwritten."""
    path = Path(path)
    state = stage_state(path, config, hint=hint)
    if state == "damaged":
        path.replace(path.with_name(path.name + ".corrupt"))
    return state == "done"


def format_duration(seconds: float) -> str:
    """``"~12 s"``, ``"~4 min"``, ``"~2.5 h"``; NaN is "not estimated"."""
    if not math.isfinite(seconds):
        return "not estimated"
    if seconds < 90:
        return f"~{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


@dataclass
class Stage:
    """One step of a pipeline.

    Attributes
    ----------
    name : str
    run : callable
        Writes the outputs; takes no argument.
    output : Path or None
        The spinsa file that stores ``config`` (None: the stage is judged by ``files``).
    config : Mapping or None
        What the output must store to count as done.
    files : tuple of Path
        Other outputs; a stage without ``output`` is done when all of them exist.
    deps : tuple of str
        Stages whose running makes this one run again.
    estimate : float
        Seconds expected (NaN: not estimated).
    """

    name: str
    run: Callable[[], Any]
    output: Path | None = None
    config: Mapping | None = None
    files: tuple[Path, ...] = ()
    deps: tuple[str, ...] = ()
    estimate: float = math.nan

    def done(self, hint: str = DEFAULT_HINT) -> bool:
        if self.output is None and not self.files:  # computes in memory: always runs
            return False
        if self.output is not None and not stage_done(self.output, self.config, hint=hint):
            return False
        return all(Path(f).is_file() for f in self.files)


class Pipeline:
    """Stages run in order, each skipped when :meth:`Stage.done` and none of its deps ran.

    Parameters
    ----------
    title : str
        The command (``"spinsa reproduce"``), which opens every line of the plan.
    say : callable or None
        Where the plan and the stage lines go; None is silent.
    hint : str
        What to do when an output holds another configuration.
    """

    def __init__(self, title: str, *, say: Callable[[str], None] | None = print, hint=None):
        self.title = title
        self.say = say or (lambda message: None)
        self.hint = hint or DEFAULT_HINT
        self.stages: list[Stage] = []
        self.measured: dict[str, float] = {}

    def add(self, name: str, run: Callable[[], Any], **fields) -> Stage:
        """Append the stage ``name`` (keyword arguments: the :class:`Stage` fields)."""
        if any(s.name == name for s in self.stages):
            raise ValueError(f"two stages named {name!r}")
        stage = Stage(name, run, **fields)
        self.stages.append(stage)
        return stage

    def todo(self) -> list[str]:
        """The stages a run would execute now (for a dry run), judged as :meth:`run` does."""
        ran: set[str] = set()
        for stage in self.stages:
            if any(d in ran for d in stage.deps) or not stage.done(self.hint):
                ran.add(stage.name)
        return [s.name for s in self.stages if s.name in ran]

    def say_plan(self, heading: str) -> None:
        """The stages with their estimated times, before any of them starts."""
        self.say(f"{self.title}: {heading}; estimated times (from a 2-core machine):")
        for stage in self.stages:
            self.say(f"  {stage.name:<28} {format_duration(stage.estimate)}")
        total = sum(s.estimate for s in self.stages if math.isfinite(s.estimate))
        self.say(f"  {'total':<28} {format_duration(total)} (stages finished earlier are skipped)")

    def run(self) -> dict[str, float]:
        """Run the stages not done; returns ``stage -> seconds`` of those that ran."""
        ran: set[str] = set()
        t_all = time.perf_counter()
        n = len(self.stages)
        for i, stage in enumerate(self.stages, 1):
            label = f"[{i}/{n}] {stage.name}"
            if not any(d in ran for d in stage.deps) and stage.done(self.hint):
                self.say(f"{label}: done earlier, skipped")
                continue
            self.say(f"{label} ...")
            t0 = time.perf_counter()
            stage.run()
            self.measured[stage.name] = time.perf_counter() - t0
            ran.add(stage.name)
            self.say(f"{label}: {self.measured[stage.name]:.1f} s")
        self.total = time.perf_counter() - t_all
        return dict(self.measured)

    def say_times(self) -> None:
        """Every stage's estimated and measured wall time, and the peak memory, after a run."""
        self.say(f"  {'stage':<28} {'estimated':>13} {'measured':>10}")
        for stage in self.stages:
            took = self.measured.get(stage.name)
            took = f"{took:.1f} s" if took is not None else "earlier"
            self.say(f"  {stage.name:<28} {format_duration(stage.estimate):>13} {took:>10}")
        self.say(f"  {'total':<28} {'':>13} {self.total:.1f} s")
        self.say(
            f"{self.title}: finished in {self.total:.1f} s ({self.total / 60:.1f} min), peak "
            f"memory {peak_rss_mb() / 1024:.2f} GB"
        )
