"""The scan machinery's own cost per point, measured with trivial points."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from spinsa.scan.spec import Axis, ScanSpec
from spinsa.scan.store import ScanDir, ScanIndex

__all__ = ["bench_overhead"]

TARGET_OVERHEAD_S = 0.2


def _warm_worker() -> None:
    """Import what a point needs, so that the first point does not pay for it."""
    import spinsa.io  # noqa: F401
    import spinsa.scan.engine  # noqa: F401
    import spinsa.scan.toy  # noqa: F401


def _trivial_scan(n_points: int, sleep: float) -> ScanSpec:
    seeds = tuple(range(n_points))
    return ScanSpec(
        name="overhead",
        point="trivial",
        base={"sleep": float(sleep), "size": 4},
        axes=(Axis(name="seed", keys=("seed",), values=(seeds,), coord=seeds),),
        retries=0,
    )


def _work_seconds(out: Path) -> float:
    records = ScanIndex.load(ScanDir(out)).points.values()
    return float(sum(r.get("seconds") or 0.0 for r in records))


def bench_overhead(
    n_points: int = 64, workers: int = 2, *, sleep: float = 0.0, client: Any = None
) -> dict[str, Any]:
    """Time a scan of trivial points on a Dask ``LocalCluster`` and in this process.

    Each point writes a small HDF5 file (and sleeps ``sleep`` seconds); its own work is
    what the point function takes, measured inside the task. The overhead per point is
    the rest of the workers' time::

        overhead = (wall × workers − Σ work) / n_points

    which counts scheduling, serialisation, the per-point log, the thread settings, the
    client's index and progress bookkeeping, and idle workers at the end. The cluster's
    start and the first import on each worker are measured apart.

    Parameters
    ----------
    n_points : int
        Trivial points to run (>= 1).
    workers : int
        Worker processes of the local cluster (one thread each).
    sleep : float
        Seconds each point sleeps (0: the overhead dominates).
    client : dask.distributed.Client, optional
        Use this client instead of starting a local cluster (``workers`` is then read from it).

    Returns
    -------
    dict
        ``per_point_overhead_s`` (Dask), ``serial_per_point_overhead_s`` (no Dask),
        ``target_s`` (0.2), ``wall_s``, ``work_s``, ``points_per_s``, ``cluster_start_s``,
        ``warmup_s``, ``n_points``, ``workers``.
    """
    from spinsa.scan.clusters import open_client
    from spinsa.scan.engine import run_scan

    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 1:
        raise ValueError(f"n_points must be an integer >= 1, got {n_points!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    spec = _trivial_scan(n_points, sleep)
    result: dict[str, Any] = {"n_points": n_points, "sleep_s": float(sleep)}
    with tempfile.TemporaryDirectory(prefix="spinsa-bench-scan-") as tmp:
        # in this process, without Dask: the bookkeeping alone
        t0 = time.perf_counter()
        run_scan(spec, Path(tmp) / "serial", cluster="serial", threads_per_point=1, progress=False)
        wall = time.perf_counter() - t0
        work = _work_seconds(Path(tmp) / "serial")
        result["serial_per_point_overhead_s"] = (wall - work) / n_points

        def timed(dask_client) -> None:
            t0 = time.perf_counter()
            dask_client.run(_warm_worker)
            result["warmup_s"] = time.perf_counter() - t0
            n_workers = len(dask_client.scheduler_info()["workers"])
            t0 = time.perf_counter()
            run_scan(spec, Path(tmp) / "dask", client=dask_client, progress=False)
            wall = time.perf_counter() - t0
            work = _work_seconds(Path(tmp) / "dask")
            result.update(
                workers=n_workers,
                wall_s=wall,
                work_s=work,
                points_per_s=n_points / wall,
                per_point_overhead_s=(wall * n_workers - work) / n_points,
            )

        if client is not None:
            result["cluster_start_s"] = 0.0
            timed(client)
        else:
            t0 = time.perf_counter()
            with open_client("local", workers=workers, threads_per_point=1) as (new, _):
                result["cluster_start_s"] = time.perf_counter() - t0
                timed(new)
    result["target_s"] = TARGET_OVERHEAD_S
    return result
