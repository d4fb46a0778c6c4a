"""Where the points run: in this process, on a Dask ``LocalCluster``, on a batch system
through dask-jobqueue, or on the workers of an existing Dask scheduler.

Threads. Every point runs with a fixed number of threads for numba and torch (and
OpenMP/BLAS), chosen so that the points running at the same time share the cores without
oversubscribing them:

- ``"serial"``: one point at a time in this process, with every core;
- ``"local"``: ``workers`` processes (default: one per core), one point each at a time, each
  with ``cores // workers`` threads;
- ``"slurm"``, ``"pbs"``, ``"sge"``, ``"lsf"``: jobs of ``cores`` cores running ``processes``
  workers each (from the scan file's ``[cluster]`` table), one point at a time per worker
  (a Dask resource), ``cores // processes`` threads each;
- ``scheduler="tcp://host:8786"``: the workers are yours; a point gets
  ``threads_per_point`` threads, or the worker's cores divided by its Dask threads.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CLUSTERS",
    "JOBQUEUE_CLASSES",
    "ClusterInfo",
    "MissingDependencyError",
    "available_cores",
    "jobqueue_cluster",
    "open_client",
    "require_distributed",
    "require_jobqueue",
    "threads_from_workers",
]

JOBQUEUE_CLASSES = {
    "slurm": "SLURMCluster",
    "pbs": "PBSCluster",
    "sge": "SGECluster",
    "lsf": "LSFCluster",
}
CLUSTERS = ("local", "serial", *JOBQUEUE_CLASSES)
RESOURCE = "spinsa_point"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# [cluster] keys that spinsa reads itself; every other key goes to dask-jobqueue.
OWN_KEYS = ("jobs", "adapt")


class MissingDependencyError(ImportError):
    """An optional dependency is missing; the message says what to install."""


def require_distributed():
    """``dask.distributed``, or :class:`MissingDependencyError` saying what to install."""
    try:
        import dask.distributed as distributed
    except ImportError as err:
        raise MissingDependencyError(
            f"running a scan on Dask needs dask.distributed, which is not installed ({err}). "
            'Install it with: pip install "spinsa[cluster]" (or run the points one by one '
            "in this process with --cluster serial)"
        ) from None
    return distributed


def require_jobqueue(cluster: str):
    """``dask_jobqueue``, or :class:`MissingDependencyError` saying what to install."""
    require_distributed()
    try:
        import dask_jobqueue
    except ImportError as err:
        raise MissingDependencyError(
            f"--cluster {cluster} needs dask-jobqueue, which is not installed ({err}). "
            'Install it with: pip install "spinsa[cluster]" (or pip install dask-jobqueue)'
        ) from None
    return dask_jobqueue


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity: a batch job's allocation)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def thread_environment(threads: int) -> dict[str, str]:
    """Environment variables that cap OpenMP/BLAS (and so torch) at ``threads``."""
    return {name: str(threads) for name in THREAD_VARIABLES}


@dataclass(frozen=True)
class ClusterInfo:
    """What :func:`open_client` started.

    Attributes
    ----------
    kind : str
        ``"local"``, ``"slurm"``..., or ``"scheduler"``.
    threads : int or None
        Threads of every point (None: each worker decides, see the module docstring).
    resources : dict or None
        Dask resources every point asks for (one point at a time per worker).
    description : str
        One line for the user: workers, threads, dashboard.
    dashboard : str or None
        The Dask dashboard's address.
    """

    kind: str
    threads: int | None
    resources: dict[str, float] | None = None
    description: str = ""
    dashboard: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def threads_from_workers(client) -> int | None:
    """Threads per point that keep every host of ``client``'s workers from oversubscribing.

    Each host's cores (as a worker sees them) are divided by the Dask threads of all the
    workers on that host; the smallest answer over the hosts is returned (None when no
    worker is connected yet).
    """
    workers = client.scheduler_info().get("workers", {})
    if not workers:
        return None
    cores = client.run(available_cores)
    per_host: dict[str, list] = {}
    for address, w in workers.items():
        per_host.setdefault(w.get("host", address), []).append((address, w.get("nthreads", 1)))
    best = None
    for members in per_host.values():
        n_threads = sum(n for _, n in members)
        host_cores = max(cores.get(a, 1) for a, _ in members)
        value = max(1, host_cores // max(n_threads, 1))
        best = value if best is None else min(best, value)
    return best


def _check_workers(workers: Any) -> int | None:
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    return workers


def _check_threads(threads: Any) -> int | None:
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads_per_point must be an integer >= 1, got {threads!r}")
    return threads


def _dashboard_address() -> str | None:
    try:
        import bokeh  # noqa: F401  - the dashboard needs it
    except ImportError:
        return None
    return ":8787"


def jobqueue_cluster(
    cluster: str,
    options: Mapping[str, Any] | None = None,
    *,
    threads_per_point: int | None = None,
    log_directory: str | os.PathLike | None = None,
):
    """A dask-jobqueue cluster object for ``cluster`` (not scaled: no job is submitted).

    Parameters
    ----------
    cluster : {"slurm", "pbs", "sge", "lsf"}
    options : mapping
        The scan file's ``[cluster]`` table: dask-jobqueue's arguments (``cores``,
        ``processes``, ``memory``, ``walltime``, ``queue``, ``account``,
        ``job_extra_directives``, ``job_script_prologue``, ``interface``...) plus spinsa's
        own ``jobs`` and ``adapt``, which are left out here.
    threads_per_point : int, optional
        Default: ``cores // processes``.
    log_directory : path, optional
        Where the jobs' output goes, unless ``options`` says.

    Returns
    -------
    cluster : dask_jobqueue.JobQueueCluster
    threads : int
        Threads of every point.
    """
    if cluster not in JOBQUEUE_CLASSES:
        raise ValueError(f"cluster must be one of {', '.join(JOBQUEUE_CLASSES)}, got {cluster!r}")
    jq = require_jobqueue(cluster)
    cls = getattr(jq, JOBQUEUE_CLASSES[cluster])
    opts = {k: v for k, v in dict(options or {}).items() if k not in OWN_KEYS}
    cores = opts.get("cores")
    if cores is None:
        raise ValueError(
            f"--cluster {cluster} needs the cores of one job: add cores = ... (and memory, "
            "walltime, queue...) to the scan file's [cluster] table"
        )
    processes = int(opts.get("processes", 1))
    threads = _check_threads(threads_per_point) or max(1, int(cores) // max(processes, 1))
    extra_args = list(opts.pop("worker_extra_args", []))
    opts["worker_extra_args"] = [*extra_args, "--resources", f"{RESOURCE}=1"]
    prologue = list(opts.pop("job_script_prologue", []))
    exports = [f"export {k}={v}" for k, v in thread_environment(threads).items()]
    opts["job_script_prologue"] = [*prologue, *exports]
    if log_directory is not None:
        opts.setdefault("log_directory", str(log_directory))
    opts.setdefault("scheduler_options", {"dashboard_address": _dashboard_address() or ":0"})
    try:
        obj = cls(**opts)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"dask_jobqueue.{cls.__name__} refused the scan file's [cluster] options: {err}"
        ) from None
    return obj, threads


@contextlib.contextmanager
def open_client(
    cluster: str = "local",
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    threads_per_point: int | None = None,
    options: Mapping[str, Any] | None = None,
    log_directory: str | os.PathLike | None = None,
) -> Iterator[tuple[Any, ClusterInfo]]:
    """A Dask client on the cluster asked for, closed (with its cluster) on exit.

    Parameters
    ----------
    cluster : {"local", "slurm", "pbs", "sge", "lsf"}
        Ignored when ``scheduler`` is given.
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:8786``) or a scheduler file.
    workers : int, optional
        local: worker processes (default: one per core); batch systems: workers in all
        (default: ``[cluster] jobs`` jobs, 1 if unset).
    threads_per_point : int, optional
        Threads of every point (default: see the module docstring).
    options : mapping, optional
        The scan file's ``[cluster]`` table.
    log_directory : path, optional
        Where batch jobs write their output.

    Yields
    ------
    client : dask.distributed.Client
    info : ClusterInfo
    """
    distributed = require_distributed()
    workers = _check_workers(workers)
    threads_per_point = _check_threads(threads_per_point)
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            if str(scheduler).endswith(".json") and Path(scheduler).is_file():
                client = distributed.Client(scheduler_file=str(scheduler))
            else:
                client = distributed.Client(scheduler)
            stack.callback(client.close)
            info = ClusterInfo(
                kind="scheduler",
                threads=threads_per_point,
                description=f"scheduler {scheduler} "
                f"({len(client.scheduler_info().get('workers', {}))} workers now)",
                dashboard=client.dashboard_link,
            )
        elif cluster == "local":
            cores = available_cores()
            n = workers or cores
            threads = threads_per_point or max(1, cores // n)
            local = distributed.LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=_dashboard_address(),
                env=thread_environment(threads),
            )
            stack.callback(local.close)
            client = distributed.Client(local)
            stack.callback(client.close)
            dash = client.dashboard_link if _dashboard_address() else None
            info = ClusterInfo(
                kind="local",
                threads=threads,
                description=f"local cluster: {n} worker processes × {threads} "
                f"thread{'s' if threads > 1 else ''} per point"
                + (f", dashboard {dash}" if dash else ""),
                dashboard=dash,
            )
        elif cluster in JOBQUEUE_CLASSES:
            opts = dict(options or {})
            jq, threads = jobqueue_cluster(
                cluster, opts, threads_per_point=threads_per_point, log_directory=log_directory
            )
            stack.callback(jq.close)
            processes = int(opts.get("processes", 1))
            if "adapt" in opts and workers is None:
                adapt = dict(opts["adapt"])
                jq.adapt(**adapt)
                scale = f"adaptive ({adapt})"
            elif workers is not None:
                jq.scale(n=workers)
                scale = f"{workers} workers in {math.ceil(workers / processes)} jobs"
            else:
                jobs = int(opts.get("jobs", 1))
                jq.scale(jobs=jobs)
                scale = f"{jobs} jobs × {processes} workers"
            client = distributed.Client(jq)
            stack.callback(client.close)
            info = ClusterInfo(
                kind=cluster,
                threads=threads,
                resources={RESOURCE: 1},
                description=f"{cluster} cluster: {scale}, {threads} threads per point, "
                f"dashboard {client.dashboard_link}",
                dashboard=client.dashboard_link,
            )
        else:
            raise ValueError(
                f"unknown cluster {cluster!r}; known: {', '.join(CLUSTERS)} "
                "(or give --scheduler ADDRESS)"
            )
        yield client, info
