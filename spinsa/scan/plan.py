"""``spinsa scan plan``: the points of a scan, their estimated cost and the total, unrun."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from spinsa.scan.clusters import available_cores
from spinsa.scan.kinds import PointCost, PointKind, point_kind
from spinsa.scan.spec import ScanPoint, ScanSpec, load_scan
from spinsa.scan.store import ScanDir, ScanIndex

__all__ = ["ScanPlan", "plan_scan"]


def _bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 1:
        return f"{s * 1000:.0f} ms" if s < 0.1 else f"{s:.2f} s"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class ScanPlan:
    """The points of a scan with their estimated (and, if run, measured) cost.

    Attributes
    ----------
    spec : ScanSpec
    points : tuple of ScanPoint
    costs : tuple of PointCost
        The point kind's estimate for every point (memory in bytes, seconds of one core).
    status : tuple of str or None
        ``"done"``, ``"failed"`` or ``"pending"`` per point, when a scan directory was given.
    measured : tuple of (float or None) or None
        Seconds the finished points took (from the index).
    """

    spec: ScanSpec
    points: tuple[ScanPoint, ...]
    costs: tuple[PointCost, ...]
    status: tuple[str, ...] | None = None
    measured: tuple[float | None, ...] | None = None

    @property
    def peak_memory(self) -> float | None:
        """Largest estimated memory of a point (None if unknown)."""
        mem = [c.memory for c in self.costs if c.memory is not None]
        return max(mem) if mem and len(mem) == len(self.costs) else None

    def total_seconds(self, pending_only: bool = False) -> float | None:
        """Estimated seconds of one core for all points (or for the pending ones)."""
        total = 0.0
        for i, cost in enumerate(self.costs):
            if pending_only and self.status is not None and self.status[i] == "done":
                continue
            if cost.seconds is None:
                return None
            total += cost.seconds
        return total

    def median_measured(self) -> tuple[float, int] | None:
        """Median measured seconds per finished point, and how many points it covers.

        The median rather than the mean: the first point on every worker also loads the
        compiled kernels (a few seconds).
        """
        if self.measured is None:
            return None
        values = sorted(s for s in self.measured if s is not None)
        return (values[len(values) // 2], len(values)) if values else None

    def format(self, *, max_rows: int | None = 40, cores: int | None = None) -> str:
        """The plan as text: one row per point (the first and last if there are many)."""
        spec = self.spec
        cores = cores or available_cores()
        dims = " × ".join(f"{a.name} ({a.size})" for a in spec.axes)
        lines = [
            f"scan {spec.name!r}: {spec.n_points} points = {dims}; point kind {spec.point!r}",
            f"scan hash {spec.scan_hash[:12]}",
        ]
        for a in spec.axes:
            if a.zipped:
                keys = ", ".join(a.keys)
                lines.append(f"  {a.name}: zipped {keys}")
        headers = ["#", *spec.dims, "key", "memory", "time"]
        if self.status is not None:
            headers.append("status")
        rows = []
        for i, (p, c) in enumerate(zip(self.points, self.costs, strict=True)):
            row = [str(i), *(_value(p.coords[d]) for d in spec.dims), p.key]
            row += [_bytes(c.memory), _seconds(c.seconds)]
            if self.status is not None:
                row.append(self.status[i])
            rows.append(row)
        shown = rows
        if max_rows is not None and len(rows) > max_rows:
            head = max_rows - 5
            shown = [*rows[:head], ["..."] + [""] * (len(headers) - 1), *rows[-5:]]
        widths = [max(len(r[j]) for r in [headers, *shown]) for j in range(len(headers))]
        for r in [headers, *shown]:
            lines.append(
                "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
            )
        if max_rows is not None and len(rows) > max_rows:
            lines.append(f"  ({len(rows) - len(shown) + 1} rows not shown; --all shows them)")
        total = self.total_seconds()
        per = [c.seconds for c in self.costs if c.seconds is not None]
        lines.append(
            f"per point: memory up to {_bytes(self.peak_memory)}, time "
            + (f"{_seconds(min(per))} to {_seconds(max(per))}" if per else "?")
            + " (estimates, one core)"
        )
        if self.status is not None:
            n_done = sum(s == "done" for s in self.status)
            n_failed = sum(s == "failed" for s in self.status)
            lines.append(
                f"status: {n_done} done, {n_failed} failed, "
                f"{len(self.status) - n_done - n_failed} pending"
            )
        measured = self.median_measured()
        if measured is not None:
            lines.append(
                f"measured: {_seconds(measured[0])} per point (median of the "
                f"{measured[1]} finished points)"
            )
        if total is None:
            lines.append("total: unknown (the point kind gives no estimate)")
        else:
            pending = self.total_seconds(pending_only=True)
            text = f"total: {_seconds(total)} of one core"
            if self.status is not None and pending is not None:
                text += f", {_seconds(pending)} left"
            lines.append(
                text + f"; about {_seconds((pending if pending is not None else total) / cores)}"
                f" on {cores} cores (plus a few seconds to start the cluster)"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def plan_scan(
    scan: ScanSpec | str | os.PathLike,
    out: str | os.PathLike | None = None,
    *,
    kind: PointKind | None = None,
) -> ScanPlan:
    """Expand a scan and estimate every point, without running anything.

    Parameters
    ----------
    scan : ScanSpec or path
        The scan or its TOML file.
    out : path, optional
        A scan directory: the plan then says which points are done (and what they took).
        A directory made by a different scan file is refused (``ScanMismatchError``).
    kind : PointKind, optional
        Instead of the scan's point kind.

    Returns
    -------
    ScanPlan
    """
    from spinsa.scan.store import ScanMismatchError

    spec = scan if isinstance(scan, ScanSpec) else load_scan(scan)
    kind = point_kind(spec.point) if kind is None else kind
    points = spec.points(kind)
    costs = tuple(kind.cost(p.config) for p in points)
    status = measured = None
    if out is not None and Path(out).exists():
        sd = ScanDir(out)
        old = sd.read_hash()
        if old is not None and old != spec.scan_hash:
            raise ScanMismatchError(
                f"{sd.path} holds a different scan (hash {old[:12]}, this one "
                f"{spec.scan_hash[:12]})"
            )
        records = {}
        if sd.index_file.exists():
            records = ScanIndex.load(sd).points
        status = tuple(
            "done"
            if sd.point_path(p.key).exists()
            else records.get(p.key, {}).get("status", "pending").replace("done", "pending")
            for p in points
        )
        measured = tuple(
            records.get(p.key, {}).get("seconds") if s == "done" else None
            for p, s in zip(points, status, strict=True)
        )
    return ScanPlan(spec, tuple(points), costs, status, measured)
