"""Scan files: a base config and the axes to vary, expanded into points.

A scan file is TOML (its format: docs/scans.md). ``[scan]`` describes the scan, ``[axes]``
and ``[zip.NAME]`` the axes, ``[collect]`` and ``[cluster]`` the defaults of ``collect`` and
of batch systems; every other table is the base config. The grid is the product of the
``[axes]`` entries and the ``[zip.*]`` groups, in that order; the last one varies fastest.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_count
from spinsa._config import check_keys, flatten, read_toml
from spinsa.io.schema import to_json
from spinsa.scan.kinds import PointKind, point_key, point_kind, set_dotted

__all__ = ["Axis", "ScanPoint", "ScanSpec", "axis_values", "load_scan", "point_key"]

SCAN_TABLES = ("scan", "axes", "zip", "cluster", "collect")  # the rest is the base config
SCAN_KEYS = ("name", "point", "base", "retries", "description")
AXIS_KEYS = ("values", "start", "stop", "num", "log", "int", "range")
COLLECT_KEYS = ("x", "y", "variables", "fix", "reduce", "include", "format")
COLLECT_KEYS += ("panels", "mark", "curves", "best")  # the figures of a study
COLLECT_KEYS += ("lines",)  # curves with error bars (an equilibrium study)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def axis_values(spec: Any, name: str, *, unique: bool = True) -> tuple:
    """The values of the axis ``name`` from its TOML specification ``spec`` (the forms:
    docs/scans.md, 'Scan files'), a non-empty tuple; ``unique`` refuses repeats (a zipped
    key may repeat values)."""
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(AXIS_KEYS))
        if unknown:
            raise ValueError(f"axis {name!r}: unknown key(s) {unknown}; known: {AXIS_KEYS}")
        values = spec.get("values", spec)
        if "range" in spec:
            values = _range(spec["range"], name)
        elif "start" in spec or "stop" in spec or "num" in spec:
            values = _spaced(spec, name)
    else:
        values = spec
    if not isinstance(values, (list, tuple)):
        raise ValueError(
            f"axis {name!r}: expected a list of values or a table such as "
            f"{{start = 0.1, stop = 10, num = 5, log = true}}, got {spec!r}"
        )
    if not values:
        raise ValueError(f"axis {name!r} has no values: the grid would be empty")
    texts = [to_json(v) for v in values]
    for v, text in zip(values, texts, strict=True):
        if unique and texts.count(text) > 1:
            raise ValueError(f"axis {name!r} repeats the value {v!r}; each may appear once")
    return tuple(values)


def _range(args: Any, name: str) -> list[int]:
    args = [args] if _is_int(args) else args
    if not isinstance(args, list) or not 1 <= len(args) <= 3 or not all(map(_is_int, args)):
        raise ValueError(f"axis {name!r}: range must be n, [start, stop] or [start, stop, step]")
    if len(args) == 3 and args[2] == 0:
        raise ValueError(f"axis {name!r}: range step must not be 0")
    return list(range(*args))


def _spaced(spec: Mapping, name: str) -> list:
    missing = sorted({"start", "stop", "num"} - set(spec))
    if missing:
        raise ValueError(f"axis {name!r}: start/stop/num needs {missing} as well")
    start, stop, num, log = spec["start"], spec["stop"], spec["num"], spec.get("log", False)
    ends_ok = all(isinstance(v, numbers.Real) and math.isfinite(v) for v in (start, stop))
    if not ends_ok or not _is_int(num) or num < 1:
        raise ValueError(f"axis {name!r}: start, stop must be numbers and num an integer >= 1")
    if log and not (start > 0 and stop > 0):
        raise ValueError(f"axis {name!r}: log = true needs start > 0 and stop > 0")
    grid = (np.geomspace if log else np.linspace)(start, stop, num)
    grid[-1] = stop if num > 1 else start  # the ends exactly as written
    integral = _is_int(start) and _is_int(stop) and not log and np.all(grid == np.rint(grid))
    if not (spec.get("int", False) or integral):
        return [float(v) for v in grid]
    ints = [int(v) for v in np.rint(grid)]
    if len(set(ints)) != len(ints):
        raise ValueError(f"axis {name!r}: rounding to integers gives repeated values {ints}")
    return ints


@dataclass(frozen=True)
class Axis:
    """One dimension of a scan, called ``name``: the config key of a grid axis
    (``"fit.lam"``) or the name of a zipped group, along which the config ``keys`` take the
    ``values`` (``values[k][i]``: the value of ``keys[k]`` at position ``i``). ``coord`` is
    the coordinate of every position: the values of a grid axis, the label of a zipped
    group (``0, 1, ...`` when it has none)."""

    name: str
    keys: tuple[str, ...]
    values: tuple[tuple, ...]
    coord: tuple
    zipped: bool = False

    def __post_init__(self):
        if not self.keys or len(self.keys) != len(self.values):
            raise ValueError(f"axis {self.name!r}: one list of values per key is needed")
        lengths = {k: len(v) for k, v in zip(self.keys, self.values, strict=True)}
        if set(lengths.values()) != {len(self.coord)}:
            raise ValueError(f"[zip.{self.name}]: zipped axes must have equal lengths: {lengths}")

    @property
    def size(self) -> int:
        return len(self.coord)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Axis:
        """Inverse of ``dataclasses.asdict`` (after a trip through JSON)."""
        values = tuple(tuple(v) for v in d["values"])
        return cls(d["name"], tuple(d["keys"]), values, tuple(d["coord"]), d["zipped"])


@dataclass(frozen=True)
class ScanPoint:
    """One point of a scan: its ``index`` along every dimension (in the order of
    :attr:`ScanSpec.dims`), its ``coords`` (``dimension -> coordinate``), its whole resolved
    ``config`` (nested) and its ``key`` (:func:`point_key`: its file is ``points/KEY.h5``)."""

    index: tuple[int, ...]
    coords: dict[str, Any]
    config: dict[str, Any]
    key: str


@dataclass(frozen=True)
class ScanSpec:
    """A scan: a base config, the axes to vary, and how to run and collect the points.

    Attributes
    ----------
    point : str
        The point kind: ``"experiment"``, ``"synthetic"`` or ``"package.module:function"``.
    base : dict
        The base config as written (nested); the point kind fills in the defaults.
    retries : int
        Re-runs of a point that raises before it is recorded as failed.
    cluster, collect : dict
        The ``[cluster]`` table (dask-jobqueue's arguments) and the ``[collect]`` table
        (defaults of ``spinsa scan collect``).
    """

    name: str
    point: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    retries: int = 2
    cluster: dict[str, Any] = dataclasses.field(default_factory=dict)
    collect: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""

    def __post_init__(self):
        if not self.axes:
            raise ValueError(
                "the scan has no axes, so the grid is empty; add an [axes] table such as "
                '[axes] "fit.lam" = [1.0, 5.0] (or a [zip.NAME] group)'
            )
        object.__setattr__(self, "axes", tuple(self.axes))
        names = [*self.dims, *(k for a in self.axes if a.zipped for k in a.keys)]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(
                    f"{name!r} is set by two axes; zip them with [zip.NAME] to vary them "
                    "together, or keep one"
                )
        check_count(self.retries, "[scan] retries", 0)
        check_keys(self.collect, COLLECT_KEYS, "[collect]")

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def scan_hash(self) -> str:
        """sha256 of what decides the results: the point kind, the base and the axes."""
        identity = {"point": self.point, "base": self.base, "axes": self.to_dict()["axes"]}
        return hashlib.sha256(to_json(identity).encode()).hexdigest()

    def points(self, kind: PointKind | None = None) -> list[ScanPoint]:
        """Every point of the grid, in C order (the last dimension varies fastest).

        ``kind`` resolves the configs (default: the kind named :attr:`point`). Grid points
        whose resolved configs are the same (an axis value that the kind ignores there,
        such as γ for the notebook's dynamics) share a key, a file and a run. Raises
        ``ValueError`` for an axis name that is not a key of the config (listing the valid
        ones), a value the config refuses (naming the point), or an axis along which every
        point is the same (a key the config ignores everywhere).
        """
        kind = point_kind(self.point) if kind is None else kind
        try:
            valid = flatten(kind.configure(self.base, {}))
            if kind.keys is not None:
                valid = {**valid, **dict.fromkeys(kind.keys(self.base))}
        except (ValueError, TypeError) as err:
            raise ValueError(f"the base config is not valid: {err}") from None
        for key in (k for a in self.axes for k in a.keys):
            if key not in valid:
                close = difflib.get_close_matches(key, list(valid), n=3)
                hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
                if any(k.startswith(key + ".") for k in valid):
                    hint += f" ({key!r} is a section; scan one of its keys)"
                raise ValueError(
                    f"unknown axis name {key!r} for point kind {self.point!r}.{hint} "
                    f"Valid names: {', '.join(sorted(valid))}"
                )
        out = []
        for index in np.ndindex(*self.shape):
            at = list(zip(self.axes, index, strict=True))
            coords = {a.name: a.coord[i] for a, i in at}
            overrides = {k: v[i] for a, i in at for k, v in zip(a.keys, a.values, strict=True)}
            try:
                config = kind.configure(self.base, overrides)
            except (ValueError, TypeError) as err:
                raise ValueError(f"scan point {coords} is not a valid config: {err}") from None
            out.append(ScanPoint(index, coords, config, point_key(kind.name, config)))
        keys = np.array([p.key for p in out], dtype=object).reshape(self.shape)
        for dim, axis in enumerate(self.axes):
            if axis.size > 1 and np.all(keys == keys.take([0], axis=dim)):
                raise ValueError(
                    f"the axis {axis.name!r} changes no point's config (the point kind ignores "
                    "or normalises its key); remove it or check its name"
                )
        return out

    def with_base(self, overrides: Mapping[str, Any]) -> ScanSpec:
        """The scan with some base values changed by dotted key (``{"data.n_test": 10000}``):
        another scan, with its own hash and point files."""
        return dataclasses.replace(self, base=set_dotted(self.base, overrides))

    def to_dict(self) -> dict[str, Any]:
        """The scan as plain data (JSON-able); :meth:`from_dict` reads it back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScanSpec:
        return cls(**{**d, "axes": tuple(Axis.from_dict(a) for a in d["axes"])})


def _flatten_axes(table: Mapping[str, Any]) -> dict[str, Any]:
    """TOML's nested tables (``fit.lam = ...`` unquoted) as dotted keys; axis tables stay."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping) and value and not set(value) <= set(AXIS_KEYS):
            out.update({f"{key}.{k}": v for k, v in _flatten_axes(value).items()})
        else:
            out[key] = value
    return out


def _zip_axis(dim: str, group: Any) -> Axis:
    if not isinstance(group, Mapping):
        raise ValueError(f"[zip.{dim}] must be a table of keys that vary together")
    entries = {k: axis_values(v, k, unique=k == dim) for k, v in _flatten_axes(group).items()}
    label = entries.pop(dim, None)
    if not entries:
        raise ValueError(f"[zip.{dim}] sets no config key; add at least one")
    coord = label or tuple(range(len(next(iter(entries.values())))))
    return Axis(dim, tuple(entries), tuple(entries.values()), coord, zipped=True)


def _table(doc: dict, name: str) -> dict[str, Any]:
    value = doc.pop(name, {})
    if not isinstance(value, Mapping):
        raise ValueError(f"[{name}] must be a table, got {value!r}")
    return dict(value)


def _merge(base: dict, over: Mapping) -> dict:
    """``base`` with ``over`` written on top, nested tables merged key by key."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out


def load_scan(path: str | os.PathLike) -> ScanSpec:
    """The :class:`ScanSpec` of a scan file (TOML; its format: docs/scans.md).

    The axes are expanded and checked (no empty axis, equal lengths in zipped groups, no
    key set twice); ``[scan] base = "file.toml"`` (relative to the scan file) is read under
    the scan file's own tables. Axis names and values are checked against the point kind's
    config when the points are made (:meth:`ScanSpec.points`).
    """
    path = Path(path)
    doc = read_toml(path)
    scan, axes_table, zips = (_table(doc, name) for name in ("scan", "axes", "zip"))
    try:
        check_keys(scan, SCAN_KEYS, "[scan]")
    except ValueError as exc:  # most often a key of the base written below [scan]
        raise ValueError(
            f"{exc}. TOML puts every key after a [table] header into that table: a key of the "
            "point's config goes before the first table, or in its own section ([patterns], "
            "[fit], ...)"
        ) from None
    axes = []
    for key, spec in _flatten_axes(axes_table).items():
        values = axis_values(spec, key)
        axes.append(Axis(key, (key,), (values,), values))
    cluster, collect = _table(doc, "cluster"), _table(doc, "collect")
    base = read_toml(path.parent / scan["base"]) if "base" in scan else {}
    return ScanSpec(
        name=str(scan.get("name", path.stem)),
        point=str(scan.get("point", "experiment")),
        base=_merge({k: v for k, v in base.items() if k not in SCAN_TABLES}, doc),
        axes=(*axes, *(_zip_axis(dim, group) for dim, group in zips.items())),
        retries=scan.get("retries", 2),
        cluster=cluster,
        collect=collect,
        description=str(scan.get("description", "")),
    )
