"""Running a scan: one task per point, on Dask or in this process, resumable.

:func:`run_scan` expands the scan, skips the points whose file is already there, and runs
the others, each as one task that calls the point kind's function and writes one HDF5 file
(atomically). The client keeps the index (``index.json``) and a progress bar. A point that
raises is run again up to ``retries`` times (Dask's ``retries=``), then recorded as failed
with its traceback, and the scan goes on. A worker that dies mid-point has its point
rescheduled by the Dask scheduler on another worker (up to Dask's
``distributed.scheduler.allowed-failures`` times, 3 by default). A client that is
interrupted or killed leaves every finished file intact; running the same command again
runs only the missing points.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spinsa.io.schema import now_utc
from spinsa.scan.clusters import (
    CLUSTERS,
    available_cores,
    open_client,
    thread_environment,
)
from spinsa.scan.kinds import PointKind, point_kind
from spinsa.scan.spec import ScanPoint, ScanSpec, load_scan
from spinsa.scan.store import ScanDir, ScanIndex

__all__ = ["ScanReport", "execute_point", "run_scan"]

INDEX_SAVE_EVERY = 1.0  # seconds between two index writes while points finish


@dataclass(frozen=True)
class ScanReport:
    """What a call of :func:`run_scan` did.

    Attributes
    ----------
    out : Path
        The scan directory.
    n_points : int
        Points of the scan.
    n_skipped : int
        Points already finished when the call started (not run again).
    n_run : int
        Points finished by this call.
    n_failed : int
        Points that raised on every attempt in this call.
    seconds : float
        Wall time of the call.
    cluster : str
        Where the points ran.
    failed : tuple of str
        Keys of the failed points (their errors are in the index).
    """

    out: Path
    n_points: int
    n_skipped: int
    n_run: int
    n_failed: int
    seconds: float
    cluster: str
    failed: tuple[str, ...] = ()

    @property
    def n_done(self) -> int:
        """Points with a finished file."""
        return self.n_skipped + self.n_run

    @property
    def complete(self) -> bool:
        """Every point is finished."""
        return self.n_done == self.n_points

    def __str__(self) -> str:
        text = (
            f"{self.n_done}/{self.n_points} points done in {self.out} "
            f"({self.n_run} run now in {self.seconds:.1f} s on {self.cluster}, "
            f"{self.n_skipped} already there"
        )
        if self.n_failed:
            text += f", {self.n_failed} FAILED: see {self.out / 'index.json'}"
        return text + ")"


# --------------------------------------------------------------------------- the task


def _append_log(path: Path, event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "time": now_utc(), **fields}, default=str)
    with open(path, "a") as fh:
        fh.write(line + "\n")


def _worker_identity() -> tuple[str | None, int | None]:
    """Address and Dask thread count of the worker running this task (None outside Dask)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None, None
    state = getattr(worker, "state", worker)
    return str(worker.address), int(getattr(state, "nthreads", 1) or 1)


@contextlib.contextmanager
def _thread_limits(threads: int) -> Iterator[None]:
    """numba, torch and OpenMP/BLAS at ``threads`` threads; restored on exit."""
    import sys

    import numba

    saved_env = {k: os.environ.get(k) for k in thread_environment(threads)}
    os.environ.update(thread_environment(threads))
    saved_numba = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    torch = sys.modules.get("torch")
    saved_torch = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(saved_numba)
        if torch is not None and saved_torch is not None:
            torch.set_num_threads(saved_torch)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute_point(
    run: Callable[[dict, Path], None],
    config: dict,
    out_path: str | os.PathLike,
    log_path: str | os.PathLike,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run one point: the task that a worker (or this process) executes.

    Parameters
    ----------
    run : callable
        The point kind's function ``run(config, out_path)``.
    config : dict
        The point's resolved config.
    out_path : path
        The point's file; if it is already complete (the point ran on a worker that died
        after writing it), nothing is run.
    log_path : path
        The point's event log (JSON lines: start, done, error with its traceback).
    threads : int, optional
        Threads for numba, torch and OpenMP/BLAS; default: this machine's cores divided by
        the Dask worker's threads.

    Returns
    -------
    dict
        ``seconds`` (the point function's wall time), ``host``, ``pid``, ``worker``,
        ``threads``, ``starts`` (starts in the log, this one included), ``skipped``.

    Raises
    ------
    Exception
        Whatever the point function raised (after logging it), or ``RuntimeError`` if it
        returned without writing ``out_path``.
    """
    from spinsa import io

    out_path, log_path = Path(out_path), Path(log_path)
    worker, nthreads = _worker_identity()
    if threads is None:
        threads = max(1, available_cores() // (nthreads or 1))
    info = {"host": socket.gethostname(), "pid": os.getpid(), "worker": worker, "threads": threads}
    if out_path.exists():
        try:
            io.check_file(out_path)
        except io.SpinsaFileError:  # not a complete file: set it aside and run the point
            out_path.replace(out_path.with_name(out_path.name + ".corrupt"))
        else:
            return {**info, "seconds": None, "skipped": True, "starts": _count_starts(log_path)}
    _append_log(log_path, "start", **info)
    t0 = time.perf_counter()
    try:
        with _thread_limits(threads):
            run(config, out_path)
        if not out_path.exists():
            raise RuntimeError(
                f"the point function {getattr(run, '__qualname__', run)!r} returned without "
                f"writing {out_path}"
            )
    except BaseException as err:
        _append_log(
            log_path,
            "error",
            **info,
            seconds=time.perf_counter() - t0,
            error=f"{type(err).__name__}: {err}",
            traceback=traceback.format_exc(),
        )
        raise
    seconds = time.perf_counter() - t0
    _append_log(log_path, "done", **info, seconds=seconds)
    return {**info, "seconds": seconds, "skipped": False, "starts": _count_starts(log_path)}


def _count_starts(log_path: Path) -> int:
    try:
        with open(log_path) as fh:
            return sum('"event": "start"' in line for line in fh)
    except OSError:
        return 0


# --------------------------------------------------------------------------- the client


class _Progress:
    """A tqdm bar over the points of this run (or nothing)."""

    def __init__(self, total: int, enabled: bool, desc: str):
        self.bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="point", desc=desc, dynamic_ncols=True)

    def step(self, n_failed: int) -> None:
        if self.bar is not None:
            if n_failed:
                self.bar.set_postfix(failed=n_failed, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Bookkeeper:
    """Records results in the index as they arrive (the index is saved at most once a second)."""

    def __init__(self, index: ScanIndex, progress: _Progress, retries: int):
        self.index = index
        self.progress = progress
        self.retries = retries
        self.n_run = 0
        self.failed: list[str] = []

    def done(self, key: str, result: Mapping[str, Any]) -> None:
        record = self.index.points[key]
        record.update(
            status="done",
            starts=result.get("starts"),
            host=result.get("host"),
            worker=result.get("worker"),
            threads=result.get("threads"),
            finished=now_utc(),
        )
        if result.get("seconds") is not None:
            record["seconds"] = result["seconds"]
        else:
            self.index.sync_from_log(key)
        record.pop("error", None)
        record.pop("traceback", None)
        self.n_run += 1
        self.progress.step(len(self.failed))
        self.index.save(every=INDEX_SAVE_EVERY)

    def fail(self, key: str, error: BaseException, tb: str | None) -> None:
        record = self.index.points[key]
        events = self.index.dir.read_log(key)
        errors = [e for e in events if e.get("event") == "error"]
        record.update(
            status="failed",
            starts=sum(e.get("event") == "start" for e in events),
            error=f"{type(error).__name__}: {error}",
            traceback=errors[-1]["traceback"] if errors else tb,
            finished=now_utc(),
        )
        self.failed.append(key)
        self.progress.step(len(self.failed))
        self.index.save(every=INDEX_SAVE_EVERY)


def _run_serial(todo, kind: PointKind, sd: ScanDir, book: _Bookkeeper, threads: int) -> None:
    for p in todo:
        for attempt in range(1, book.retries + 2):
            try:
                result = execute_point(
                    kind.run, p.config, sd.point_path(p.key), sd.log_path(p.key), threads
                )
            except Exception as err:
                if attempt > book.retries:
                    book.fail(p.key, err, traceback.format_exc())
            else:
                book.done(p.key, result)
                break


def _run_dask(todo, kind: PointKind, sd: ScanDir, book: _Bookkeeper, client, info) -> None:
    from distributed import as_completed

    from spinsa.scan.clusters import threads_from_workers

    threads = info.threads if info.threads is not None else threads_from_workers(client)
    token = os.urandom(4).hex()
    futures = {}
    for p in todo:
        fut = client.submit(
            execute_point,
            kind.run,
            p.config,
            str(sd.point_path(p.key)),
            str(sd.log_path(p.key)),
            threads,
            key=f"spinsa-point-{p.key}-{token}",
            pure=False,
            retries=book.retries,
            resources=info.resources,
        )
        futures[fut] = p.key
    try:
        for fut in as_completed(futures):
            key = futures[fut]
            if fut.status == "finished":
                book.done(key, fut.result())
            else:  # "error" (the point raised on every try, or killed its workers) or "cancelled"
                try:
                    err = fut.exception()
                    tb = fut.traceback()
                    tb = "".join(traceback.format_tb(tb)) if tb is not None else None
                except Exception as exc:  # a cancelled future raises here
                    err, tb = exc, None
                book.fail(key, err, tb)
            fut.release()
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(list(futures))
        raise


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
    """Run every point of a scan that has no finished file yet.

    Parameters
    ----------
    scan : ScanSpec or path
        The scan, or its TOML file.
    out : path
        The scan directory (created if needed; see :mod:`spinsa.scan.store`).
    cluster : {"local", "serial", "slurm", "pbs", "sge", "lsf"}
        ``"local"``: a Dask ``LocalCluster`` on this machine; ``"serial"``: one point after
        the other in this process (no Dask; for debugging); the others: a batch system via
        dask-jobqueue, with the scan file's ``[cluster]`` options.
    scheduler : str, optional
        Address of a running Dask scheduler; overrides ``cluster``.
    workers : int, optional
        Worker processes (see :func:`spinsa.scan.clusters.open_client`).
    threads_per_point : int, optional
        numba/torch threads of every point (default: cores per worker).
    retries : int, optional
        Re-runs of a point that raises (default: the scan's ``retries``).
    force : bool
        Use a directory made by a different scan file (see :meth:`ScanDir.prepare`).
    progress : bool
        Show a progress bar.
    client : dask.distributed.Client, optional
        Run on this client (its cluster is left running); ``cluster``, ``scheduler`` and
        ``workers`` are then ignored.
    kind : PointKind, optional
        Run the points with this kind instead of the scan's ``point``.
    log : callable, optional
        Receives one-line messages (where the scan runs, how many points are left).

    Returns
    -------
    ScanReport
    """
    t0 = time.perf_counter()
    spec = scan if isinstance(scan, ScanSpec) else load_scan(scan)
    if cluster not in CLUSTERS:
        raise ValueError(f"unknown cluster {cluster!r}; known: {', '.join(CLUSTERS)}")
    retries = spec.retries if retries is None else retries
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
    kind = point_kind(spec.point) if kind is None else kind
    points = spec.points(kind)
    if client is None and (scheduler is not None or cluster != "serial"):
        from spinsa.scan.clusters import require_distributed, require_jobqueue

        require_distributed()  # before anything is written
        if scheduler is None and cluster != "local":
            require_jobqueue(cluster)
    say = log or (lambda message: None)
    sd = ScanDir(out)
    if sd.prepare(spec, force=force):
        say(f"{sd.path} held another scan: taken over (--force); shared points are kept")
    with sd.lock():
        sd.clean_temporaries()
        index = ScanIndex.open(sd, spec, points)
        todo: list[ScanPoint] = []
        for p in points:
            if sd.is_done(p.key):
                index.points[p.key]["status"] = "done"
                index.sync_from_log(p.key)
            else:
                index.points[p.key]["status"] = "pending"
                todo.append(p)
        n_skipped = len(points) - len(todo)
        say(f"{spec.name}: {len(points)} points, {n_skipped} already done, {len(todo)} to run")
        progress_bar = _Progress(len(todo), progress, spec.name)
        book = _Bookkeeper(index, progress_bar, retries)
        where = "serial" if cluster == "serial" and client is None else cluster
        if client is not None:
            where = "client"
        elif scheduler is not None:
            where = "scheduler"
        index.start_run({"cluster": where, "n_todo": len(todo), "host": socket.gethostname()})
        index.save()
        interrupted = False
        try:
            if todo:
                if client is not None:
                    from spinsa.scan.clusters import ClusterInfo

                    _run_dask(
                        todo, kind, sd, book, client, ClusterInfo("client", threads_per_point)
                    )
                elif cluster == "serial" and scheduler is None:
                    threads = threads_per_point or available_cores()
                    _run_serial(todo, kind, sd, book, threads)
                else:
                    with open_client(
                        cluster,
                        scheduler=scheduler,
                        workers=workers,
                        threads_per_point=threads_per_point,
                        options=spec.cluster,
                        log_directory=sd.path.resolve() / "dask-logs",
                    ) as (dask_client, info):
                        say(info.description)
                        _run_dask(todo, kind, sd, book, dask_client, info)
        except BaseException:
            interrupted = True
            raise
        finally:
            progress_bar.close()
            index.finish_run(n_run=book.n_run, n_failed=len(book.failed), interrupted=interrupted)
            index.save()
    return ScanReport(
        out=sd.path,
        n_points=len(points),
        n_skipped=n_skipped,
        n_run=book.n_run,
        n_failed=len(book.failed),
        seconds=time.perf_counter() - t0,
        cluster=where,
        failed=tuple(book.failed),
    )
