"""A scan directory on disk: its spec, its index, its point files, its logs and its lock.

::

    DIR/
      scan.json          the scan (base config, axes, point kind) and its hash
      scan.toml          the scan file as given, for the record
      index.json         the client's index: every point, its status, timings, errors
      points/KEY.h5      one spinsa file per finished point (KEY: hash of its parameters)
      logs/KEY.jsonl     every attempt at a point: start, done or error (with traceback)
      scan.lock          present while a client runs the scan (pid and host inside)

A point is finished when its file exists and is a readable spinsa file: files are written to
a temporary name and renamed when complete, so the point files, not the index, are the
truth. The index is rewritten atomically by the client only; a client killed mid-scan loses
at most its last second of bookkeeping, which the next run rebuilds from the files and logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from spinsa.io.schema import json_default, now_utc, spinsa_version
from spinsa.scan.spec import ScanPoint, ScanSpec

__all__ = ["INDEX_SCHEMA", "ScanDir", "ScanIndex", "ScanMismatchError", "ScanLockedError"]

INDEX_SCHEMA = "spinsa-scan-index/1"
SPEC_FILE = "scan.json"
TOML_FILE = "scan.toml"
INDEX_FILE = "index.json"
LOCK_FILE = "scan.lock"
POINTS_DIR = "points"
LOGS_DIR = "logs"
STATUSES = ("pending", "done", "failed")


class ScanMismatchError(ValueError):
    """The scan directory was made by a different scan (another base, axes or point kind)."""


class ScanLockedError(RuntimeError):
    """Another client is running a scan in this directory."""


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 1) -> None:
    """Write JSON to a temporary file next to ``path``, then rename it onto ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    text = json.dumps(data, indent=indent, default=json_default)
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ScanDir:
    """Paths and checks of a scan directory (see the module docstring).

    Parameters
    ----------
    path : str or PathLike
        The directory (created by :meth:`prepare`).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ScanDir({str(self.path)!r})"

    @property
    def spec_file(self) -> Path:
        return self.path / SPEC_FILE

    @property
    def index_file(self) -> Path:
        return self.path / INDEX_FILE

    @property
    def points_dir(self) -> Path:
        return self.path / POINTS_DIR

    @property
    def logs_dir(self) -> Path:
        return self.path / LOGS_DIR

    def point_path(self, key: str) -> Path:
        """The file of the point ``key``."""
        return self.points_dir / f"{key}.h5"

    def log_path(self, key: str) -> Path:
        """The event log of the point ``key``."""
        return self.logs_dir / f"{key}.jsonl"

    # -- the spec ----------------------------------------------------------------------
    def exists(self) -> bool:
        return self.spec_file.is_file()

    def read_spec(self) -> ScanSpec:
        """The scan this directory holds (from ``scan.json``)."""
        if not self.exists():
            hint = " (it has no scan.json)" if self.path.is_dir() else " (no such directory)"
            raise FileNotFoundError(
                f"{self.path} is not a scan directory{hint}; make one with "
                "spinsa scan run SCAN.toml --out DIR"
            )
        with open(self.spec_file) as fh:
            data = json.load(fh)
        return ScanSpec.from_dict(data["spec"])

    def read_hash(self) -> str | None:
        if not self.exists():
            return None
        with open(self.spec_file) as fh:
            return json.load(fh).get("scan_hash")

    def prepare(self, spec: ScanSpec, *, force: bool = False) -> bool:
        """Create the directory for ``spec``, or check that it already holds ``spec``.

        Parameters
        ----------
        spec : ScanSpec
        force : bool
            Accept a directory made by a different scan: its record is replaced by this
            one, and the point files that this scan shares with it (same resolved config)
            are reused.

        Returns
        -------
        bool
            True if the directory held a different scan (and ``force`` was given).

        Raises
        ------
        ScanMismatchError
            The directory holds a different scan and ``force`` is False.
        FileExistsError
            The path exists and is not a scan directory (a file, or a non-empty directory
            without ``scan.json``).
        """
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(f"{self.path} exists and is not a directory")
        old = self.read_hash()
        if old is None and self.path.is_dir() and any(self.path.iterdir()) and not force:
            raise FileExistsError(
                f"{self.path} is a non-empty directory that holds no scan (no {SPEC_FILE}); "
                "choose another --out, or pass --force to use it anyway"
            )
        changed = old is not None and old != spec.scan_hash
        if changed and not force:
            previous = self.read_spec()
            raise ScanMismatchError(
                f"{self.path} holds the scan {previous.name!r} (hash {old[:12]}), made by a "
                f"different scan file ({previous.source or 'unknown file'}) than "
                f"{spec.name!r} (hash {spec.scan_hash[:12]}). Use another --out, or pass "
                "--force to take the directory over (points that both scans share are kept)"
            )
        self.points_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        if old != spec.scan_hash:
            record = {
                "scan_hash": spec.scan_hash,
                "created": now_utc(),
                "spinsa_version": spinsa_version(),
                "replaces": old,
                "spec": spec.to_dict(),
            }
            write_json_atomic(self.spec_file, record)
            if spec.source_text is not None:
                (self.path / TOML_FILE).write_text(spec.source_text)
        return changed

    # -- the points --------------------------------------------------------------------
    def is_done(self, key: str) -> bool:
        """Whether the point ``key`` has a complete, readable file.

        A file that exists but cannot be read (corrupt, truncated by a copy) is renamed to
        ``KEY.h5.corrupt`` so that the point runs again.
        """
        from spinsa import io

        path = self.point_path(key)
        if not path.exists():
            return False
        try:
            io.check_file(path)
        except io.SpinsaFileError:
            path.replace(path.with_name(path.name + ".corrupt"))
            return False
        return True

    def clean_temporaries(self) -> int:
        """Remove the temporary files left by writes that were killed; returns how many."""
        n = 0
        for tmp in self.points_dir.glob(".*.tmp-*"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                n += 1
        return n

    def read_log(self, key: str) -> list[dict[str, Any]]:
        """The events of the point ``key`` (oldest first); [] when it never started."""
        path = self.log_path(key)
        if not path.exists():
            return []
        events = []
        with open(path) as fh:
            for line in fh:
                with contextlib.suppress(json.JSONDecodeError):
                    events.append(json.loads(line))
        return events

    # -- the lock ----------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold ``scan.lock`` while a client runs the scan.

        A lock left by a dead process on this host is taken over; one held by a live
        process, or by another host, raises :class:`ScanLockedError`.
        """
        path = self.path / LOCK_FILE
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now_utc()}
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    holder = json.loads(path.read_text())
                except (OSError, json.JSONDecodeError):
                    holder = {}
                same_host = holder.get("host") == me["host"]
                if same_host and not _pid_alive(int(holder.get("pid", -1))):
                    path.unlink(missing_ok=True)  # stale: its client was killed
                    continue
                raise ScanLockedError(
                    f"another client (pid {holder.get('pid')} on {holder.get('host')}, "
                    f"started {holder.get('started')}) is running the scan in {self.path}. "
                    f"If it is no longer running, remove {path}"
                ) from None
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            break
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


class ScanIndex:
    """The client's record of a scan: every point, its status, timings and errors.

    Stored as ``index.json`` (``{"points": {KEY: record}, "runs": [...], ...}``); a record
    holds ``index``, ``coords``, ``status`` (``"pending"``, ``"done"``, ``"failed"``),
    ``starts`` (times the point function was started, over all runs: retries after an
    error and reschedules after a lost worker included), ``seconds`` (the point
    function's wall time), ``host``, ``worker``, ``threads``, ``finished``, and for a point
    that raised, ``error`` and ``traceback``.
    """

    def __init__(self, scan_dir: ScanDir, data: dict[str, Any]):
        self.dir = scan_dir
        self.data = data
        self._saved = 0.0

    @classmethod
    def open(cls, scan_dir: ScanDir, spec: ScanSpec, points: Iterable[ScanPoint]) -> ScanIndex:
        """The index of ``spec``'s points, keeping what an earlier run recorded of them."""
        old: dict[str, Any] = {}
        runs: list = []
        if scan_dir.index_file.exists():
            try:
                with open(scan_dir.index_file) as fh:
                    previous = json.load(fh)
                old = previous.get("points", {})
                runs = (
                    previous.get("runs", []) if previous.get("scan_hash") == spec.scan_hash else []
                )
            except (OSError, json.JSONDecodeError):
                old = {}
        records = {}
        for p in points:
            record = dict(old.get(p.key, {}))
            record.update(index=list(p.index), coords=p.coords)
            record.setdefault("status", "pending")
            records[p.key] = record
        data = {
            "schema": INDEX_SCHEMA,
            "scan_hash": spec.scan_hash,
            "name": spec.name,
            "dims": list(spec.dims),
            "shape": list(spec.shape),
            "updated": now_utc(),
            "runs": runs,
            "points": records,
        }
        return cls(scan_dir, data)

    @classmethod
    def load(cls, scan_dir: ScanDir) -> ScanIndex:
        """The index as last written."""
        if not scan_dir.index_file.exists():
            raise FileNotFoundError(f"{scan_dir.path} has no {INDEX_FILE}; has the scan run?")
        with open(scan_dir.index_file) as fh:
            return cls(scan_dir, json.load(fh))

    @property
    def points(self) -> dict[str, dict[str, Any]]:
        return self.data["points"]

    def counts(self) -> dict[str, int]:
        """Number of points in each status."""
        out = dict.fromkeys(STATUSES, 0)
        for record in self.points.values():
            out[record["status"]] = out.get(record["status"], 0) + 1
        return out

    def update(self, key: str, **fields: Any) -> None:
        self.points[key].update(fields)

    def sync_from_log(self, key: str) -> None:
        """Fill a finished point's timings from its log (after a client was killed)."""
        record = self.points[key]
        if record.get("seconds") is not None:
            return
        events = self.dir.read_log(key)
        done = [e for e in events if e.get("event") == "done"]
        if done:
            last = done[-1]
            record.update(
                {k: last.get(k) for k in ("seconds", "host", "worker", "threads", "time")}
            )
            record["finished"] = record.pop("time", None)
        record["starts"] = sum(e.get("event") == "start" for e in events)

    def start_run(self, info: Mapping[str, Any]) -> None:
        self.data["runs"].append({"started": now_utc(), **info})

    def finish_run(self, **info: Any) -> None:
        if self.data["runs"]:
            self.data["runs"][-1].update(finished=now_utc(), **info)

    def save(self, *, every: float = 0.0) -> bool:
        """Write ``index.json`` atomically; with ``every``, at most once per ``every`` s."""
        now = time.monotonic()
        if every and now - self._saved < every:
            return False
        self.data["updated"] = now_utc()
        write_json_atomic(self.dir.index_file, self.data)
        self._saved = now
        return True
