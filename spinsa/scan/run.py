"""Running a scan: one task per point, in this process or on Dask, resumable.

Where the points run (``cluster``: ``"serial"``, ``"local"``, a batch system through
dask-jobqueue; or a ``scheduler`` or ``client`` of yours) and with how many threads for
numba, torch and OpenMP/BLAS, so that the points running at once share the cores without
oversubscribing them: docs/scans.md, '2. Run', and docs/scans-slurm.md.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spinsa._checks import MissingDependencyError, check_choice, check_count
from spinsa._progress import count
from spinsa._progress import progress as progress_bar
from spinsa.scan.kinds import PointKind, point_kind
from spinsa.scan.spec import ScanSpec, load_scan
from spinsa.scan.store import PointStore, ScanDir

__all__ = [
    "CLUSTERS",
    "MissingDependencyError",
    "ScanReport",
    "jobqueue_cluster",
    "open_client",
    "run_scan",
]

JOBQUEUE_CLASSES = dict(slurm="SLURMCluster", pbs="PBSCluster", sge="SGECluster", lsf="LSFCluster")
CLUSTERS = ("local", "serial", *JOBQUEUE_CLASSES)
RESOURCE = "spinsa_point"  # one point at a time per batch worker
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# Dask starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which turns glibc's adaptive
# thresholds off: every array a point allocates is then mapped and page-faulted anew
# (measured: 1.5 s of system time in a 7 s evaluation). Freed memory stays in the heap.
MALLOC_ENV = {"MALLOC_TRIM_THRESHOLD_": str(2**28), "MALLOC_MMAP_THRESHOLD_": str(2**26)}
OWN_KEYS = ("jobs", "adapt")  # [cluster] keys read by spinsa; the rest go to dask-jobqueue


def require(module: str, needed_for: str):
    """``import module``, or :class:`MissingDependencyError` saying what to install."""
    sigint = signal.getsignal(signal.SIGINT)
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{needed_for} needs {module}, which is not installed ({err}). Install it with: "
            'pip install "spinsa[cluster]"'
        ) from None
    finally:
        # dask_jobqueue 0.9.0 sets SIGINT to sys.exit() on import (dask/dask-jobqueue#696):
        # Ctrl-C would end a scan with status 0 and no word; keep KeyboardInterrupt
        main = threading.current_thread() is threading.main_thread()
        if main and sigint is not None and signal.getsignal(signal.SIGINT) is not sigint:
            signal.signal(signal.SIGINT, sigint)


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity: a batch job's allocation)."""
    return max(1, len(os.sched_getaffinity(0)))


@contextlib.contextmanager
def _thread_limits(threads: int) -> Iterator[None]:
    """numba, torch and OpenMP/BLAS at ``threads`` threads; restored on exit."""
    import numba

    saved_env = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    saved_numba = numba.get_num_threads()
    torch = sys.modules.get("torch")  # only if a point imported it
    saved_torch = torch.get_num_threads() if torch is not None else 0
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(saved_numba)
        if torch is not None:
            torch.set_num_threads(saved_torch)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_point(run: Callable, config: dict, store, key: str, threads: int, *args, after=None):
    """Run one point (or one fit): ``run(config, store/KEY.h5, *args)`` with ``threads``
    threads for numba, torch and OpenMP/BLAS (the task a Dask worker, or this process,
    executes; ``after``, a Dask future it waits for: the point's fit).

    Returns None, running nothing, when the file is complete already (a worker died after
    writing it, or another client ran it), else the seconds it ran.
    """
    points = PointStore(store)
    if points.done(key):
        return None
    t0 = time.perf_counter()
    try:
        with _thread_limits(threads):
            run(config, points.file(key), *args)
    except FileExistsError:  # another client finished the same file meanwhile: the same one
        if points.done(key):
            return None
        raise
    if not points.file(key).exists():
        name = getattr(run, "__qualname__", run)
        raise RuntimeError(f"the point function {name!r} returned without writing its file")
    return time.perf_counter() - t0


@dataclass(frozen=True)
class _Task:
    """One unit of work: a point, or a fit (``is_fit``) that points share; its file is
    ``store/KEY.h5``, ``fit_key`` names the fit a point needs (None: the kind has none)."""

    key: str
    run: Callable
    config: dict
    store: PointStore
    args: tuple = ()
    fit_key: str | None = None
    is_fit: bool = False


def _tasks(points, kind: PointKind, store: PointStore, fits: PointStore) -> list[_Task]:
    """The fits and the points still to run, each once, the fits first."""
    todo = list({p.key: p for p in points if not store.done(p.key)}.values())
    if kind.fit is None:
        return [_Task(p.key, kind.run, p.config, store) for p in todo]
    fit_tasks: dict[str, _Task | None] = {}  # None: done already
    point_tasks = []
    for p in todo:
        key = kind.fit_key(p.config)
        if key not in fit_tasks and fits.done(key):
            fit_tasks[key] = None
        elif key not in fit_tasks:
            fit_tasks[key] = _Task(key, kind.fit, kind.fit_config(p.config), fits, is_fit=True)
        args = (str(fits.file(key)),)
        point_tasks.append(_Task(p.key, kind.run, p.config, store, args, key))
    # the points of one fit one after the other: they share its data, which workers keep
    order = {key: i for i, key in enumerate(fit_tasks)}
    point_tasks.sort(key=lambda t: order[t.fit_key])
    return [*filter(None, fit_tasks.values()), *point_tasks]


@dataclass(frozen=True)
class ScanReport:
    """What a call of :func:`run_scan` did.

    Attributes
    ----------
    out : Path
        The scan directory.
    n_points, n_skipped, n_run : int
        Grid points of the scan; finished before the call; finished by it. Grid points that
        share a config (an axis value that the point kind ignores there) are one point,
        run once.
    n_failed : int
        Distinct points that failed on every try.
    seconds : float
    cluster : str
        Where the points ran (``"serial"``, ``"local"``, ``"slurm"``, ..., ``"scheduler"``,
        ``"client"``).
    failed : tuple of str
        Keys of the failed points (their errors are in ``points/KEY.error``).
    n_fits : int
        Fits computed by this call (for a kind whose points share them; ``fits/KEY.h5``).
    fit_seconds, point_seconds : float
        Time spent inside the fits and the points, summed over the workers.
    slots : int or None
        Points that could run at once (the workers when the tasks started).
    task_seconds : float
        Wall time from the first task submitted to the last one finished; the part of
        ``slots * task_seconds`` spent outside fits and points is bookkeeping: scheduling,
        waiting for a fit, idle workers at the end.
    """

    out: Path
    n_points: int
    n_skipped: int
    n_run: int
    seconds: float
    cluster: str
    failed: tuple[str, ...] = ()
    n_fits: int = 0
    fit_seconds: float = 0.0
    point_seconds: float = 0.0
    slots: int | None = None
    task_seconds: float = 0.0

    @property
    def n_failed(self) -> int:
        return len(self.failed)

    @property
    def complete(self) -> bool:
        return self.n_skipped + self.n_run == self.n_points

    @property
    def bookkeeping(self) -> float:
        """The share of the workers' time spent outside fits and points (NaN if unknown)."""
        total = self.task_seconds * self.slots if self.slots else 0.0
        return 1 - (self.fit_seconds + self.point_seconds) / total if total > 0 else math.nan

    def __str__(self) -> str:
        text = (
            f"{self.n_skipped + self.n_run}/{self.n_points} points done in {self.out} "
            f"({self.n_run} run now in {self.seconds:.1f} s on {self.cluster}, "
            f"{self.n_skipped} already there"
        )
        if self.n_failed:
            text += f", {self.n_failed} FAILED: see {self.out / 'points'}/*.error"
        text += ")"
        if self.n_run or self.n_fits:
            fits = f"{self.n_fits} fits {self.fit_seconds:.0f} s, " if self.n_fits else ""
            text += f"\ntime: {fits}{self.n_run} points {self.point_seconds:.0f} s"
            if math.isfinite(self.bookkeeping):
                text += (
                    f", bookkeeping {100 * self.bookkeeping:.1f} % of {self.slots} workers × "
                    f"{self.task_seconds:.0f} s"
                )
        return text


def _error_text(err: BaseException, tb) -> str:
    """The error on the first line, then its traceback: what ``points/KEY.error`` holds."""
    return f"{type(err).__name__}: {err}\n\n" + "".join(
        traceback.format_exception(type(err), err, tb)
    )


def _run_serial(tasks: list[_Task], retries: int, threads: int, finish) -> None:
    failed_fits: dict[str, str] = {}
    for task in tasks:
        if task.fit_key in failed_fits:
            finish(task, f"its fit failed:\n\n{failed_fits[task.fit_key]}", None)
            continue
        for attempt in range(retries + 1):
            try:
                args = (task.run, task.config, task.store.path, task.key, threads, *task.args)
                seconds = run_point(*args)
            except Exception as err:
                if attempt == retries:
                    text = _error_text(err, err.__traceback__)
                    finish(task, text, None)
                    if task.is_fit:
                        failed_fits[task.key] = text
            else:
                finish(task, None, seconds)
                break


def _run_dask(client, tasks: list[_Task], retries, threads, resources, finish) -> None:
    from distributed import as_completed

    token = os.urandom(4).hex()  # a re-run on the same scheduler gets fresh task keys
    futures, fit_futures = {}, {}
    for task in tasks:  # the fits first: Dask runs tasks in the order they were submitted
        args = (task.run, task.config, str(task.store.path), task.key, threads, *task.args)
        key = f"spinsa-{'fit' if task.is_fit else 'point'}-{task.key}-{token}"
        fut = client.submit(
            run_point, *args, after=fit_futures.get(task.fit_key), key=key, retries=retries,
            resources=resources,
        )  # fmt: skip
        futures[fut] = task
        if task.is_fit:
            fit_futures[task.key] = fut
    try:
        for fut in as_completed(futures):
            if fut.status == "finished":
                finish(futures[fut], None, fut.result())
            else:  # raised on every try (or its fit did), killed its workers, was cancelled
                try:
                    err, tb = fut.exception(), fut.traceback()
                except Exception as exc:  # a cancelled future raises here
                    err, tb = exc, None
                task = futures[fut]
                fit = None if task.is_fit else fit_futures.get(task.fit_key)
                text = _error_text(err, tb)
                if fit is not None and fit.exception() is not None:  # the fit is over
                    text = f"its fit failed:\n\n{text}"  # as in a serial run
                finish(task, text, None)
            if not futures[fut].is_fit:  # a fit's outcome is read by its points
                fut.release()
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(list(futures))
        raise


def _where(cluster, scheduler, workers, threads_per_point, client) -> str:
    """Where the scan runs (client, scheduler or the cluster's name), after checking the
    options and that what it needs is installed, before anything is written."""
    check_choice(cluster, "cluster", CLUSTERS)
    for name, value in (("workers", workers), ("threads_per_point", threads_per_point)):
        if value is not None:
            check_count(value, name, 1)
    where = "client" if client is not None else "scheduler" if scheduler is not None else cluster
    if where not in ("serial", "client"):
        require("dask.distributed", "running a scan on Dask (else: --cluster serial)")
    if where in JOBQUEUE_CLASSES:
        require("dask_jobqueue", f"--cluster {cluster}")
    return where


def _say_todo(say, spec, sd, points, tasks, renamed) -> None:
    """What is done and what is left, and which files were set aside as damaged."""
    n_todo = sum(not t.is_fit for t in tasks)  # distinct points
    n_fits = len(tasks) - n_todo
    n_unique = len({p.key for p in points})
    if renamed:
        say(
            f"{len(renamed)} file(s) torn or failing a checksum, set aside as KEY.h5.corrupt "
            f"in {sd.path}: run again"
        )
    shared = f" ({n_unique} distinct: the point kind ignores some axes there)"
    say(
        f"{spec.name}: {len(points)} points{shared if n_unique < len(points) else ''}, "
        f"{n_unique - n_todo} done, {n_todo} to run"
        + (f" after {n_fits} fits (one per distinct fit config)" if n_fits else "")
    )


def run_scan(
    scan: ScanSpec | str | os.PathLike,
    out: str | os.PathLike,
    *,
    cluster: str = "local",
    scheduler: str | None = None,
    workers: int | None = None,
    threads_per_point: int | None = None,
    retries: int | None = None,
    force: bool = False,
    progress: bool = True,
    client: Any = None,
    kind: PointKind | None = None,
    log: Callable[[str], None] | None = None,
) -> ScanReport:
    """Run every point of a scan that has no finished file yet; what happens to a point
    that raises, a worker that dies or a client killed mid-scan: docs/scans.md, 'Nothing
    lost'.

    Parameters
    ----------
    scan : ScanSpec or path
        The scan, or its TOML file.
    out : path
        The scan directory (:mod:`spinsa.scan.store`), created if needed.
    cluster : {"local", "serial", "slurm", "pbs", "sge", "lsf"}
    scheduler, workers, threads_per_point
        See :func:`open_client`.
    retries : int, optional
        Default: the scan's ``retries``.
    force : bool
        Take over a directory made by a different scan (:meth:`ScanDir.prepare`).
    progress : bool
    client : dask.distributed.Client, optional
        Run on this client (left running); ``cluster``, ``scheduler``, ``workers`` ignored.
    kind : PointKind, optional
        Instead of the scan's ``point``.
    log : callable, optional
        Receives one-line messages (where the scan runs, how many points are left).

    Returns
    -------
    ScanReport
    """
    t0 = time.perf_counter()
    spec = scan if isinstance(scan, ScanSpec) else load_scan(scan)
    retries = check_count(spec.retries if retries is None else retries, "retries")
    where = _where(cluster, scheduler, workers, threads_per_point, client)
    kind = point_kind(spec.point) if kind is None else kind
    points = spec.points(kind)
    say = log or (lambda message: None)
    sd = ScanDir(out)
    if sd.prepare(spec, [p.key for p in points], force=force):
        say(f"{sd.path} held another scan: taken over (--force); shared points are kept")
    store, fits = sd.points, sd.fits
    store.clean()
    fits.clean()
    tasks = _tasks(points, kind, store, fits)
    _say_todo(say, spec, sd, points, tasks, store.renamed + fits.renamed)
    n_fits = sum(t.is_fit for t in tasks)
    failed: list[str] = []
    spent = {True: 0.0, False: 0.0}  # seconds in fits, in points
    slots, window = 1, 0.0
    with progress_bar(len(tasks), spec.name, "task", enabled=progress and bool(tasks)) as bar:

        def finish(task: _Task, error: str | None, seconds: float | None) -> None:
            task.store.set_error(task.key, error)
            spent[task.is_fit] += seconds or 0.0
            if error is not None and not task.is_fit:
                failed.append(task.key)
                bar.set_postfix(failed=len(failed))
            bar.update(1)

        if tasks and where == "serial":
            started = time.perf_counter()
            _run_serial(tasks, retries, threads_per_point or available_cores(), finish)
            window = time.perf_counter() - started
        elif tasks:
            with open_client(
                cluster,
                scheduler=scheduler,
                workers=workers,
                threads_per_point=threads_per_point,
                options=spec.cluster,
                log_directory=sd.path.resolve() / "dask-logs",
                client=client,
            ) as (dask_client, threads, resources, description):
                say(description)
                slots = len(dask_client.nthreads())
                started = time.perf_counter()
                _run_dask(dask_client, tasks, retries, threads, resources, finish)
                window = time.perf_counter() - started
    ran = {t.key for t in tasks if not t.is_fit}
    return ScanReport(
        out=sd.path,
        n_points=len(points),
        n_skipped=sum(p.key not in ran for p in points),
        n_run=sum(p.key in ran and p.key not in failed for p in points),
        seconds=time.perf_counter() - t0,
        cluster=where,
        failed=tuple(failed),
        n_fits=n_fits,
        fit_seconds=spent[True],
        point_seconds=spent[False],
        slots=slots if tasks else None,
        task_seconds=window,
    )


# --------------------------------------------------------------------------- clusters


def _no_kill_notice(record: logging.LogRecord) -> bool:
    """Leaves out ``distributed.nanny``'s "Worker process still alive after 4.0 seconds,
    killing", and only that message: a local cluster closing at the end of a scan kills the
    workers slow to exit after every point is written, so it says nothing about the scan.
    Other messages of the nanny (a worker restarted, out of memory) still show."""
    return not record.getMessage().startswith("Worker process still alive after")


def threads_from_workers(client) -> int:
    """Threads per point that keep every host of ``client``'s workers from oversubscribing:
    each host's cores over the Dask threads of its workers, the least over the hosts."""
    client.wait_for_workers(1)
    cores = client.run(available_cores)
    threads: dict[str, int] = {}
    host_cores: dict[str, int] = {}
    for address, w in client.scheduler_info()["workers"].items():
        threads[w["host"]] = threads.get(w["host"], 0) + w["nthreads"]
        host_cores[w["host"]] = max(host_cores.get(w["host"], 1), cores.get(address, 1))
    return min(max(1, host_cores[h] // n) for h, n in threads.items())


def _dashboard_address() -> str | None:
    return ":8787" if importlib.util.find_spec("bokeh") else None  # the dashboard needs bokeh


def jobqueue_cluster(
    cluster: str,
    options: Mapping[str, Any] | None = None,
    *,
    threads_per_point: int | None = None,
    log_directory: str | os.PathLike | None = None,
):
    """A dask-jobqueue cluster object and the threads of every point (no job submitted).

    ``options`` is the ``[cluster]`` table: dask-jobqueue's arguments (``cores``,
    ``processes``, ``memory``, ``walltime``, ``queue``...) and spinsa's own ``jobs`` and
    ``adapt``, left out here. Every point runs with ``threads_per_point`` threads (default:
    ``cores // processes``); the jobs write their output to ``log_directory``.
    """
    check_choice(cluster, "cluster", tuple(JOBQUEUE_CLASSES))
    cls = getattr(require("dask_jobqueue", f"--cluster {cluster}"), JOBQUEUE_CLASSES[cluster])
    opts = {k: v for k, v in dict(options or {}).items() if k not in OWN_KEYS}
    if "cores" not in opts:
        raise ValueError(
            f"--cluster {cluster} needs the cores of one job: add cores = ... (and memory, "
            "walltime, queue...) to the scan file's [cluster] table"
        )
    threads = threads_per_point or max(1, int(opts["cores"]) // int(opts.get("processes", 1)))
    opts["worker_extra_args"] = [*opts.get("worker_extra_args", []), "--resources", f"{RESOURCE}=1"]
    variables = {**dict.fromkeys(THREAD_VARIABLES, threads), **MALLOC_ENV}
    exports = [f"export {k}={v}" for k, v in variables.items()]
    opts["job_script_prologue"] = [*opts.get("job_script_prologue", []), *exports]
    if log_directory is not None:
        opts.setdefault("log_directory", str(log_directory))
    opts.setdefault("scheduler_options", {"dashboard_address": _dashboard_address() or ":0"})
    try:
        return cls(**opts), threads
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"dask_jobqueue.{cls.__name__} refused the scan file's [cluster] options: {err}"
        ) from None


@contextlib.contextmanager
def open_client(
    cluster: str = "local",
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    threads_per_point: int | None = None,
    options: Mapping[str, Any] | None = None,
    log_directory: str | os.PathLike | None = None,
    client: Any = None,
) -> Iterator[tuple[Any, int, dict | None, str]]:
    """A Dask client on the cluster asked for, closed (with its cluster) on exit.

    Parameters
    ----------
    cluster : str
        ``"local"`` or a batch system: ``"slurm"``, ``"pbs"``, ``"sge"``, ``"lsf"``.
    scheduler : str, optional
        The address of a running Dask scheduler (``tcp://host:8786``) or a scheduler file;
        overrides ``cluster``.
    workers : int, optional
        Local worker processes (default: one per core), or batch workers in all (default:
        ``jobs`` jobs, or ``adapt``).
    threads_per_point : int, optional
        Threads of every point (default: see docs/scans.md).
    options : mapping, optional
        The ``[cluster]`` table of a batch system.
    log_directory : str or PathLike, optional
        Where a batch system's jobs write their output.
    client : distributed.Client, optional
        A client of yours, used as it is and left open; overrides the others.

    Yields
    ------
    client, threads, resources, description
        The client; the threads of every point (``threads_per_point``, default: see
        docs/scans.md); the Dask resources every point asks for (or None); one line for the
        user (workers, threads, dashboard).
    """
    if client is not None:
        threads = threads_per_point or threads_from_workers(client)
        yield client, threads, None, f"client {client}: {threads} threads per point"
        return
    distributed = require("dask.distributed", "running a scan on Dask")
    with contextlib.ExitStack() as stack:
        resources = None
        if scheduler is not None:
            is_file = str(scheduler).endswith(".json") and Path(scheduler).is_file()
            kwargs = {"scheduler_file": str(scheduler)} if is_file else {"address": scheduler}
            client = stack.enter_context(distributed.Client(**kwargs))
            threads = threads_per_point or threads_from_workers(client)
            n = len(client.scheduler_info()["workers"])
            description = f"scheduler {scheduler}: {n} workers now, {threads} threads per point"
        elif cluster == "local":
            n = workers or available_cores()
            threads = threads_per_point or max(1, available_cores() // n)
            nanny = logging.getLogger("distributed.nanny")  # filtered until after the close
            nanny.addFilter(_no_kill_notice)
            stack.callback(nanny.removeFilter, _no_kill_notice)
            local = distributed.LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                dashboard_address=_dashboard_address(),
                env={**dict.fromkeys(THREAD_VARIABLES, str(threads)), **MALLOC_ENV},
            )
            client = stack.enter_context(distributed.Client(stack.enter_context(local)))
            description = (
                f"local cluster: {count(n, 'worker process')} × {count(threads, 'thread')} "
                "per point"
            )
            if _dashboard_address():
                description += f", dashboard {client.dashboard_link}"
        else:
            opts = dict(options or {})
            jq, threads = jobqueue_cluster(
                cluster, opts, threads_per_point=threads_per_point, log_directory=log_directory
            )
            stack.callback(jq.close)
            processes = int(opts.get("processes", 1))
            if "adapt" in opts and workers is None:
                jq.adapt(**opts["adapt"])
                scale = f"adaptive ({opts['adapt']})"
            elif workers is not None:
                jq.scale(n=workers)
                n_jobs = math.ceil(workers / processes)
                scale = f"{count(workers, 'worker')} in {count(n_jobs, 'job')}"
            else:
                jq.scale(jobs=int(opts.get("jobs", 1)))
                scale = f"{count(int(opts.get('jobs', 1)), 'job')} × {count(processes, 'worker')}"
            client = stack.enter_context(distributed.Client(jq))
            resources = {RESOURCE: 1}
            description = f"{cluster} cluster: {scale}, {count(threads, 'thread')} per point"
            if _dashboard_address():  # without bokeh the link would serve nothing
                description += f", dashboard {client.dashboard_link}"
        yield client, threads, resources, description
