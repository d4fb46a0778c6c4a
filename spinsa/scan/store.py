"""A scan directory: the scan's record (``scan.json``, with the sha256 of its content) and
content-addressed stores of point files (``points/KEY.h5``, ``fits/KEY.h5``, KEY the hash of
the config); the layout: docs/scans.md, 'What lands in the scan directory'.

A point is finished when its file is a readable spinsa file whose checksums hold. Files are
written under a temporary name and renamed when complete, and a point is seeded by its
config alone, so the files, not a record kept beside them, say what is done, and two
processes that run the same point (a rescheduled task, a second client) write the same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from spinsa._files import TEMP_GLOB, atomic_write_text
from spinsa.io.schema import json_default, spinsa_version
from spinsa.scan.spec import ScanSpec

__all__ = ["PointStore", "ScanDir", "ScanMismatchError"]


class ScanMismatchError(ValueError):
    """The scan directory was made by a different scan (another base, axes or point kind)."""


class PointStore:
    """The directory ``path`` (created if needed) of point files named by their config's hash."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.renamed: list[str] = []  # keys whose corrupt files done() set aside

    def file(self, key: str) -> Path:
        """The file of the point ``key``."""
        return self.path / f"{key}.h5"

    def done(self, key: str) -> bool:
        """Whether the point ``key`` is finished, by the one rule of every pipeline
        (:func:`spinsa.experiments.stages.stage_done`; the file is named by the hash of its
        config): a torn or changed file (a killed copy, a full disk, a flipped bit) is
        renamed ``KEY.h5.corrupt``, so that the point runs again."""
        from spinsa.experiments.stages import stage_done

        path = self.file(key)
        damaged = path.exists()
        if stage_done(path):
            return True
        if damaged:
            self.renamed.append(key)
        return False

    def error(self, key: str) -> str | None:
        """The error and traceback of a point that failed, None if it has not."""
        path = self.path / f"{key}.error"
        return path.read_text() if path.exists() else None

    def set_error(self, key: str, text: str | None) -> None:
        """Record that the point ``key`` failed with ``text``, or (None) that it has not."""
        if text is None:
            (self.path / f"{key}.error").unlink(missing_ok=True)
        else:
            atomic_write_text(self.path / f"{key}.error", text)

    def clean(self) -> None:
        """Remove the temporary files left by writers that were killed."""
        for tmp in self.path.glob(TEMP_GLOB):
            with contextlib.suppress(OSError):
                tmp.unlink()


class ScanDir:
    """The scan directory ``path`` (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.record = self.path / "scan.json"

    @property
    def points(self) -> PointStore:
        return PointStore(self.path / "points")

    @property
    def fits(self) -> PointStore:
        """The fits that points share (:attr:`spinsa.scan.PointKind.fit`), named by the hash
        of their fit config: a fit is reused by every scan run in this directory."""
        return PointStore(self.path / "fits")

    def read(self) -> tuple[ScanSpec, list[str]]:
        """The scan this directory holds and the key of every point, in grid order."""
        if not self.record.is_file():
            raise FileNotFoundError(
                f"{self.path} is not a scan directory (no scan.json); make one with "
                "spinsa scan run SCAN.toml --out DIR"
            )
        data = self._load_record()
        if "keys" not in data:
            raise ValueError(
                f"{self.record} was written by an older spinsa; run the scan again to update "
                "it (its finished points are kept)"
            )
        return ScanSpec.from_dict(data["spec"]), data["keys"]

    def _load_record(self) -> dict:
        """scan.json, after its checksum (records of older spinsa versions have none)."""
        from spinsa.io import SpinsaFileError

        try:
            data = json.loads(self.record.read_text())
            digest = _digest(data)
            intact = data.get("sha256", digest) == digest
        except (ValueError, AttributeError):  # not JSON, or not an object
            intact = False
        if not intact:
            raise SpinsaFileError(
                f"{self.record} was changed on disk (its checksum fails). Delete it and run "
                "`spinsa scan run SCAN.toml --out DIR --force` again: the finished points are kept",
                "corrupt",
            )
        return data

    def prepare(self, spec: ScanSpec, keys: list[str], *, force: bool = False) -> bool:
        """Make the directory hold ``spec``, whose points have the ``keys`` (in grid order).

        Returns True when it held a different scan and ``force`` took it over: its record
        is replaced, and the point files that both scans share are kept. Raises
        :class:`ScanMismatchError` for a different scan without ``force``, and
        ``FileExistsError`` for a file or a non-empty directory that holds no scan.
        """
        old = self._load_record()["scan_hash"] if self.record.is_file() else None
        if old is None and self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(  # --force cannot help here
                20,
                "a file is in the way of the scan directory; choose another --out",
                str(self.path),
            )
        if old is None and self.path.exists():
            if any(self.path.iterdir()) and not force:
                raise FileExistsError(
                    f"{self.path} exists and holds no scan (no scan.json); choose another "
                    "--out, or pass --force to use this directory anyway"
                )
        if old not in (None, spec.scan_hash) and not force:
            raise ScanMismatchError(
                f"{self.path} holds a scan made by a different scan file (hash {old[:12]}, "
                f"this one {spec.scan_hash[:12]}). Use another --out, or pass --force to take "
                "the directory over (points that both scans share are kept)"
            )
        self.path.mkdir(parents=True, exist_ok=True)  # the record is rewritten: an old one updated
        record = {"scan_hash": spec.scan_hash, "spinsa_version": spinsa_version()}
        record.update(
            json.loads(json.dumps({"spec": spec.to_dict(), "keys": keys}, default=json_default))
        )
        record["sha256"] = _digest(record)
        atomic_write_text(self.record, json.dumps(record, indent=1))
        return old not in (None, spec.scan_hash)


def _digest(record: dict) -> str:
    """The sha256 of a scan record's content (all of it but the digest itself)."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
