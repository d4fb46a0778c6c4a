"""Scan files: a base experiment and the axes to vary, expanded into points.

A scan file is TOML. Every top-level table other than the scan's own (``[scan]``,
``[axes]``, ``[zip.<dim>]``, ``[cluster]``, ``[collect]``) belongs to the base experiment,
exactly as in an experiment file; ``[scan] base = "experiment.toml"`` loads a base file first
(relative to the scan file) and the tables written here override it key by key::

    [scan]
    name = "load-vs-lambda"
    point = "synthetic"            # "experiment" (default), "synthetic", "trivial", "pkg.mod:func"
    retries = 2                    # re-runs of a point that raises

    [patterns]                     # base experiment: the point kind's own sections
    n_tokens = 16

    [axes]                         # a grid: every combination, in this order
    "dynamics.lam" = [1.0, 4.0]                               # a list
    "dynamics.gamma" = { start = 0.5, stop = 2.0, num = 4 }   # linearly spaced, ends included
    "corruption.noise" = { start = 0.1, stop = 1.0, num = 3, log = true }   # log-spaced
    "seed" = { range = 4 }                                    # 0, 1, 2, 3: seeds as an axis

    [zip.alpha]                    # zipped axes: one dimension along which keys vary together
    alpha = [0.05, 0.1, 0.2]       # optional label named like the dimension: its coordinate
    "patterns.n_patterns" = [1, 2, 3]

Axis names are the dotted keys of the point kind's config (``fit.lam``); an unknown one is
refused with the list of valid ones. The grid is the product of the ``[axes]`` entries and
the ``[zip.*]`` groups, dimensions in that order (the ``[axes]`` ones first).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa.io.schema import flatten, to_json

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "SCAN_TABLES",
    "Axis",
    "ScanPoint",
    "ScanSpec",
    "axis_values",
    "load_scan",
    "point_key",
]

# Top-level tables that describe the scan itself; every other table is the base experiment.
SCAN_TABLES = ("scan", "axes", "zip", "cluster", "collect")
# Keys of the [scan] table.
SCAN_KEYS = ("name", "point", "base", "retries", "description")
# Keys that make a table an axis specification rather than a config section.
SPEC_KEYS = frozenset({"values", "start", "stop", "num", "log", "int", "range"})
DEFAULT_RETRIES = 2
# Keys of the [collect] table: defaults of `spinsa scan collect`.
COLLECT_KEYS = ("x", "y", "variables", "fix", "reduce", "include", "format")


# --------------------------------------------------------------------------- axes


def axis_values(spec: Any, name: str, *, unique: bool = True) -> tuple:
    """The values of one axis from its TOML specification.

    Parameters
    ----------
    spec : list or mapping
        ``[v0, v1, ...]`` or ``{values = [...]}``: these values;
        ``{start, stop, num}``: ``num`` values from ``start`` to ``stop`` inclusive, evenly
        spaced (integers when both ends are integers and every value is one);
        ``{..., log = true}``: geometrically spaced (``start, stop > 0``);
        ``{..., int = true}``: rounded to integers (duplicates refused);
        ``{range = n}``, ``{range = [a, b]}`` or ``{range = [a, b, step]}``: the integers of
        Python's ``range`` (seeds as an axis).
    name : str
        The axis, for error messages.
    unique : bool
        Refuse repeated values (a grid axis or a coordinate); a key zipped with others may
        repeat values.

    Returns
    -------
    tuple
        The values, as plain Python objects. Never empty: an empty axis raises ``ValueError``.
    """
    if isinstance(spec, Mapping):
        values = _values_from_table(spec, name)
    elif isinstance(spec, Sequence) and not isinstance(spec, str):
        values = list(spec)
    else:
        raise ValueError(
            f"axis {name!r}: expected a list of values or a table such as "
            f"{{start = 0.1, stop = 10, num = 5, log = true}}, got {spec!r}"
        )
    values = [_plain(v) for v in values]
    if not values:
        raise ValueError(f"axis {name!r} has no values: the grid would be empty")
    if unique:
        _check_unique(values, name)
    return tuple(values)


def _values_from_table(spec: Mapping, name: str) -> list:
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(
            f"axis {name!r}: unknown key(s) {unknown}; an axis table takes values, "
            "start/stop/num (with log, int), or range"
        )
    forms = [k for k in ("values", "range", "start") if k in spec]
    if len(forms) != 1:
        raise ValueError(
            f"axis {name!r}: give exactly one of values = [...], range = ..., or "
            f"start/stop/num; got {sorted(spec)}"
        )
    form = forms[0]
    if form == "values":
        extra = sorted(set(spec) - {"values"})
        if extra:
            raise ValueError(f"axis {name!r}: values = [...] takes no other keys, got {extra}")
        if not isinstance(spec["values"], Sequence) or isinstance(spec["values"], str):
            raise ValueError(f"axis {name!r}: values must be a list, got {spec['values']!r}")
        return list(spec["values"])
    if form == "range":
        extra = sorted(set(spec) - {"range"})
        if extra:
            raise ValueError(f"axis {name!r}: range = ... takes no other keys, got {extra}")
        args = spec["range"]
        args = [args] if isinstance(args, numbers.Integral) else args
        if (
            not isinstance(args, Sequence)
            or not 1 <= len(args) <= 3
            or not all(_is_int(a) for a in args)
        ):
            raise ValueError(
                f"axis {name!r}: range must be n, [start, stop] or [start, stop, step] "
                f"(integers, stop excluded), got {spec['range']!r}"
            )
        if len(args) == 3 and args[2] == 0:
            raise ValueError(f"axis {name!r}: range step must not be 0")
        return list(range(*args))
    missing = sorted({"start", "stop", "num"} - set(spec))
    if missing:
        raise ValueError(f"axis {name!r}: start/stop/num needs {missing} as well")
    start, stop, num = spec["start"], spec["stop"], spec["num"]
    for key, value in (("start", start), ("stop", stop)):
        if not _is_real(value) or not math.isfinite(value):
            raise ValueError(f"axis {name!r}: {key} must be a finite number, got {value!r}")
    if not _is_int(num) or num < 1:
        raise ValueError(f"axis {name!r}: num must be an integer >= 1, got {num!r}")
    log, as_int = spec.get("log", False), spec.get("int", False)
    for key, flag in (("log", log), ("int", as_int)):
        if not isinstance(flag, bool):
            raise ValueError(f"axis {name!r}: {key} must be true or false, got {flag!r}")
    if log:
        if not (start > 0 and stop > 0):
            raise ValueError(
                f"axis {name!r}: log = true needs start > 0 and stop > 0, got {start}, {stop}"
            )
        grid = np.geomspace(start, stop, num)
    else:
        grid = np.linspace(start, stop, num)
    if num == 1:
        grid = np.array([start], dtype=float)
    grid[-1] = stop if num > 1 else grid[-1]  # the end exactly as written
    integral = np.all(grid == np.rint(grid))
    if as_int or (_is_int(start) and _is_int(stop) and not log and integral):
        ints = [int(v) for v in np.rint(grid)]
        if len(set(ints)) != len(ints):
            raise ValueError(
                f"axis {name!r}: rounding to integers gives repeated values {ints}; "
                "use fewer points or a wider range"
            )
        return ints
    return [float(v) for v in grid]


def _check_unique(values: list, name: str) -> None:
    seen: set[str] = set()
    for v in values:
        text = to_json(v)
        if text in seen:
            raise ValueError(f"axis {name!r} repeats the value {v!r}; each value may appear once")
        seen.add(text)


def _plain(value: Any) -> Any:
    """TOML/numpy values as plain JSON-able Python values (datetimes refused)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)) or value is None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"values must be finite, got {value!r}")
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    raise ValueError(
        f"values must be numbers, strings, booleans, lists or tables, got {value!r} "
        f"({type(value).__name__})"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Axis:
    """One dimension of a scan.

    Attributes
    ----------
    name : str
        Name of the dimension: the config key for a grid axis (``"fit.lam"``), the group's
        name for zipped axes (``"alpha"``).
    keys : tuple of str
        The config keys set along this dimension (one for a grid axis).
    values : tuple of tuple
        ``values[k][i]``: the value of ``keys[k]`` at position ``i``.
    coord : tuple
        Coordinate of each position: the key's values for a grid axis, the label for
        zipped axes (``0, 1, ...`` when they have none).
    zipped : bool
        Whether this is a ``[zip.*]`` group.
    """

    name: str
    keys: tuple[str, ...]
    values: tuple[tuple, ...]
    coord: tuple
    zipped: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"axis name must be a non-empty string, got {self.name!r}")
        if not self.keys or len(self.keys) != len(self.values):
            raise ValueError(f"axis {self.name!r}: one list of values per key is needed")
        n = len(self.coord)
        if n == 0:
            raise ValueError(f"axis {self.name!r} has no values: the grid would be empty")
        for key, vals in zip(self.keys, self.values, strict=True):
            if len(vals) != n:
                raise ValueError(
                    f"zipped axes {self.name!r} must have equal lengths; {key!r} has "
                    f"{len(vals)} values, the dimension {n}"
                )

    @property
    def size(self) -> int:
        """Number of positions along the dimension."""
        return len(self.coord)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "keys": list(self.keys),
            "values": [list(v) for v in self.values],
            "coord": list(self.coord),
            "zipped": self.zipped,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Axis:
        return cls(
            name=d["name"],
            keys=tuple(d["keys"]),
            values=tuple(tuple(v) for v in d["values"]),
            coord=tuple(d["coord"]),
            zipped=bool(d.get("zipped", False)),
        )


def _grid_axes(table: Mapping[str, Any]) -> list[Axis]:
    """``[axes]``: flatten TOML's nested tables (``fit.lam = ...`` unquoted) to dotted keys."""
    axes = []
    for key, spec in _flatten_axes(table).items():
        values = axis_values(spec, key)
        axes.append(Axis(name=key, keys=(key,), values=(values,), coord=values))
    return axes


def _flatten_axes(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and not (set(value) <= SPEC_KEYS):
            out.update(_flatten_axes(value, name + "."))
        else:
            out[name] = value
    return out


def _zip_axes(table: Any) -> list[Axis]:
    if not isinstance(table, Mapping):
        raise ValueError(
            f"[zip] must hold named groups: [zip.NAME] with keys that vary together, got {table!r}"
        )
    axes = []
    for dim, group in table.items():
        if not isinstance(group, Mapping) or not group:
            raise ValueError(
                f"[zip.{dim}] must be a table of keys that vary together, e.g. "
                f'"fit.lam" = [1, 2] and "fit.seed" = [0, 1]; got {group!r}'
            )
        entries = _flatten_axes(group)
        label = None
        keys, values = [], []
        for key, spec in entries.items():
            vals = axis_values(spec, dim if key == dim else key, unique=key == dim)
            if key == dim:
                label = vals
            else:
                keys.append(key)
                values.append(vals)
        if not keys:
            raise ValueError(f"[zip.{dim}] sets no config key; add at least one")
        lengths = {k: len(v) for k, v in zip(keys, values, strict=True)}
        if label is not None:
            lengths = {dim: len(label), **lengths}
        if len(set(lengths.values())) != 1:
            raise ValueError(
                f"[zip.{dim}]: zipped axes must have equal lengths, got "
                + ", ".join(f"{k}: {n}" for k, n in lengths.items())
            )
        coord = label if label is not None else tuple(range(len(values[0])))
        axes.append(
            Axis(name=dim, keys=tuple(keys), values=tuple(values), coord=coord, zipped=True)
        )
    return axes


# --------------------------------------------------------------------------- points


def point_key(kind: str, config: Mapping[str, Any]) -> str:
    """The name of a point's file: 16 hex digits of the sha256 of its resolved parameters.

    The hash covers the point kind and the whole resolved config (canonical JSON, keys
    sorted), so two scans that share a point share its file, and any change of a parameter
    (or of a default) gives a new file.
    """
    text = to_json({"kind": kind, "config": config})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ScanPoint:
    """One point of a scan.

    Attributes
    ----------
    index : tuple of int
        Position along every dimension (in the order of :attr:`ScanSpec.dims`).
    coords : dict
        ``dimension -> coordinate`` of the point.
    overrides : dict
        ``dotted config key -> value`` set by the axes.
    config : dict
        The point's whole resolved config (nested).
    key : str
        :func:`point_key` of the config: names the file ``points/<key>.h5``.
    """

    index: tuple[int, ...]
    coords: dict[str, Any]
    overrides: dict[str, Any]
    config: dict[str, Any]
    key: str

    @property
    def filename(self) -> str:
        return f"{self.key}.h5"


def _merge(base: dict, over: Mapping) -> dict:
    """``base`` with ``over`` written on top, nested tables merged key by key."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --------------------------------------------------------------------------- the scan


@dataclass(frozen=True)
class ScanSpec:
    """A scan: a base config, the axes to vary, and how to run and collect the points.

    Build one with :func:`load_scan` (from a TOML file) or :meth:`from_dict`.

    Attributes
    ----------
    name : str
        A name for the scan (default: the file's stem).
    point : str
        The point kind (see :mod:`spinsa.scan.kinds`): ``"experiment"``, ``"synthetic"``,
        ``"trivial"`` or ``"package.module:function"``.
    base : dict
        The base config as written (nested); the point kind fills in the defaults.
    axes : tuple of Axis
        The dimensions, in order.
    retries : int
        How many times a point that raises is run again before it is recorded as failed.
    cluster : dict
        Options of the batch-system cluster (``[cluster]``: dask-jobqueue's arguments).
    collect : dict
        Defaults of ``spinsa scan collect`` (``[collect]``: ``x``, ``y``, ``diagrams``...).
    description : str
    source : str or None
        The scan file it came from.
    source_text : str or None
        That file's text, kept in the scan directory for the record.
    """

    name: str
    point: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    retries: int = DEFAULT_RETRIES
    cluster: dict[str, Any] = dataclasses.field(default_factory=dict)
    collect: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""
    source: str | None = None
    source_text: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"scan name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.point, str) or not self.point:
            raise ValueError(f"[scan] point must be a non-empty string, got {self.point!r}")
        if not isinstance(self.base, dict):
            raise ValueError(f"the base config must be a table, got {type(self.base).__name__}")
        if not self.axes:
            raise ValueError(
                "the scan has no axes, so the grid is empty; add an [axes] table such as "
                '[axes] "fit.lam" = [1.0, 5.0] (or a [zip.NAME] group)'
            )
        object.__setattr__(self, "axes", tuple(self.axes))
        dims, keys = set(), set()
        for axis in self.axes:
            if not isinstance(axis, Axis):
                raise ValueError(f"axes must be Axis objects, got {type(axis).__name__}")
            if axis.name in dims:
                raise ValueError(f"two dimensions are named {axis.name!r}")
            dims.add(axis.name)
            for key in axis.keys:
                if key in keys:
                    raise ValueError(
                        f"the key {key!r} is set by two axes; zip them with [zip.NAME] to "
                        "vary them together, or keep one"
                    )
                keys.add(key)
        if not _is_int(self.retries) or self.retries < 0:
            raise ValueError(f"[scan] retries must be an integer >= 0, got {self.retries!r}")
        for name in ("cluster", "collect"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"[{name}] must be a table, got {getattr(self, name)!r}")
        unknown = sorted(set(self.collect) - set(COLLECT_KEYS))
        if unknown:
            raise ValueError(
                f"[collect] has unknown key(s) {unknown}; known: {', '.join(COLLECT_KEYS)}"
            )

    # -- shape -------------------------------------------------------------------------
    @property
    def dims(self) -> tuple[str, ...]:
        """Names of the dimensions, in order."""
        return tuple(a.name for a in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """Size of every dimension."""
        return tuple(a.size for a in self.axes)

    @property
    def n_points(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def keys(self) -> tuple[str, ...]:
        """Every config key that an axis sets."""
        return tuple(k for a in self.axes for k in a.keys)

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise ValueError(f"the scan has no dimension {name!r}; its dimensions: {list(self.dims)}")

    # -- identity ----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What decides the results: the point kind, the base config and the axes."""
        return {
            "point": self.point,
            "base": self.base,
            "axes": [a.to_dict() for a in self.axes],
        }

    @property
    def scan_hash(self) -> str:
        """sha256 of :meth:`identity` (canonical JSON): a scan directory records it."""
        return hashlib.sha256(to_json(self.identity()).encode()).hexdigest()

    # -- points ------------------------------------------------------------------------
    def overrides_at(self, index: Sequence[int]) -> dict[str, Any]:
        """``dotted key -> value`` at a grid position."""
        out = {}
        for axis, i in zip(self.axes, index, strict=True):
            for key, vals in zip(axis.keys, axis.values, strict=True):
                out[key] = vals[i]
        return out

    def points(self, kind=None) -> list[ScanPoint]:
        """Every point of the grid, in C order (the last dimension varies fastest).

        Parameters
        ----------
        kind : PointKind, optional
            The point kind that resolves and validates configs (default: :attr:`point`,
            looked up with :func:`spinsa.scan.kinds.point_kind`).

        Raises
        ------
        ValueError
            An axis name that is not a key of the config (the message lists the valid
            ones), or a value the config refuses (the message names the point).
        """
        from spinsa.scan.kinds import point_kind

        kind = point_kind(self.point) if kind is None else kind
        try:
            resolved = kind.resolve(self.base)
        except (ValueError, TypeError) as err:
            raise ValueError(f"the base config is not valid: {err}") from None
        check_axis_names(self, flatten(resolved))
        out = []
        for index in np.ndindex(*self.shape):
            overrides = self.overrides_at(index)
            coords = {a.name: a.coord[i] for a, i in zip(self.axes, index, strict=True)}
            try:
                config = kind.point_config(self.base, overrides)
            except (ValueError, TypeError) as err:
                raise ValueError(f"scan point {coords} is not a valid config: {err}") from None
            index = tuple(int(i) for i in index)
            out.append(ScanPoint(index, coords, overrides, config, point_key(kind.name, config)))
        keys = [p.key for p in out]
        if len(set(keys)) != len(keys):
            raise ValueError(
                "two points of the scan have the same config (an axis sets a key that the "
                "config ignores or normalises); check the axes"
            )
        return out

    # -- (de)serialisation -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "point": self.point,
            "base": self.base,
            "axes": [a.to_dict() for a in self.axes],
            "retries": self.retries,
            "cluster": self.cluster,
            "collect": self.collect,
            "description": self.description,
            "source": self.source,
            "source_text": self.source_text,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScanSpec:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["axes"] = tuple(Axis.from_dict(a) for a in d["axes"])
        return cls(**d)

    @classmethod
    def from_toml_dict(
        cls, doc: Mapping[str, Any], *, name: str = "scan", base_dir: str | os.PathLike = "."
    ) -> ScanSpec:
        """A scan from the parsed TOML document of a scan file (see the module docstring)."""
        doc = dict(doc)
        scan = doc.pop("scan", {})
        if not isinstance(scan, Mapping):
            raise ValueError(f"[scan] must be a table, got {scan!r}")
        unknown = sorted(set(scan) - set(SCAN_KEYS))
        if unknown:
            raise ValueError(
                f"[scan] has unknown key(s) {unknown}; known: {', '.join(SCAN_KEYS)} "
                "(the experiment's own sections go in tables of their own)"
            )
        axes_table = doc.pop("axes", {})
        if not isinstance(axes_table, Mapping):
            raise ValueError(f"[axes] must be a table of axis = values, got {axes_table!r}")
        axes = _grid_axes(axes_table) + _zip_axes(doc.pop("zip", {}))
        cluster = doc.pop("cluster", {})
        collect = doc.pop("collect", {})
        base: dict[str, Any] = {}
        if "base" in scan:
            base_path = Path(base_dir) / str(scan["base"])
            base = _read_toml(base_path, "base experiment")
            for table in SCAN_TABLES:
                base.pop(table, None)
        base = _merge(base, doc)
        return cls(
            name=str(scan.get("name", name)),
            point=str(scan.get("point", "experiment")),
            base=_plain(base),
            axes=tuple(axes),
            retries=scan.get("retries", DEFAULT_RETRIES),
            cluster=dict(cluster),
            collect=dict(collect),
            description=str(scan.get("description", "")),
        )


def check_axis_names(spec: ScanSpec, valid: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` listing the valid names if an axis sets an unknown key."""
    for key in spec.keys:
        if key in valid:
            continue
        parents = [k for k in valid if k.startswith(key + ".")]
        close = difflib.get_close_matches(key, list(valid), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        if parents:
            hint += f" ({key!r} is a section; scan one of its keys)"
        raise ValueError(
            f"unknown axis name {key!r} for point kind {spec.point!r}.{hint} "
            f"Valid names: {', '.join(sorted(valid))}"
        )


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path} is not valid TOML: {err}") from None


def load_scan(path: str | os.PathLike) -> ScanSpec:
    """Read a scan file (TOML; see :mod:`spinsa.scan.spec` for its format).

    Parameters
    ----------
    path : str or PathLike
        The scan file.

    Returns
    -------
    ScanSpec
        Axes expanded and checked (no empty axis, equal lengths in zipped groups, no key
        set twice). Axis names are checked against the point kind's config when the points
        are made (:meth:`ScanSpec.points`).
    """
    path = Path(path)
    doc = _read_toml(path, "scan file")
    spec = ScanSpec.from_toml_dict(doc, name=path.stem, base_dir=path.parent)
    return dataclasses.replace(spec, source=str(path.resolve()), source_text=path.read_text())
