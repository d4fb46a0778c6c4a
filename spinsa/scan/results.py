"""Gathering a scan's point files into one xarray ``Dataset``, and drawing phase diagrams.

The dataset depends on the point files only, so a scan that was interrupted and resumed
collects to a dataset identical to that of a scan run in one go. It is saved as netCDF-4
(HDF5) through h5netcdf: ``xarray.open_dataset(path, engine="h5netcdf")`` reads it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice
from spinsa._files import atomic_path
from spinsa.io.schema import spinsa_version, to_json
from spinsa.scan.kinds import point_kind
from spinsa.scan.run import require
from spinsa.scan.store import ScanDir

__all__ = ["DIAGRAM_VARIABLES", "collect", "draw_phase_diagrams", "open_collected", "phase_diagram"]

COLLECTED_FILE = "collected.nc"
# The quantities a phase diagram usually shows, drawn by default when present.
DIAGRAM_VARIABLES = ("best_error", "best_t", "lifetime", "n_attractors", "mean_overlap")
REDUCTIONS = ("mean", "median", "min", "max")


def _xarray():
    require("h5netcdf", "saving a collected scan")
    return require("xarray", "collecting a scan")


def _summary(path: Path, summarize, include) -> dict[str, np.ndarray]:
    """The 0-d and 1-d numeric arrays of one point file (and its times ``t``)."""
    from spinsa import io

    try:
        arrays = io.read_group(path, "summary")[0]
    except KeyError:  # no /summary group
        arrays = summarize(path) if summarize is not None else {}
    out = {}
    for name, value in arrays.items():
        value = np.asarray(value)
        keep = include is None or any(fnmatch.fnmatchcase(name, p) for p in include)
        if value.ndim <= 1 and value.dtype.kind in "biuf" and (keep or name == "t"):
            out[name] = value
    return out


def _variable(name: str, found: dict[int, dict], n_points: int, times: np.ndarray | None):
    """One variable over the flattened scan (and its time or index dimension)."""
    values = {i: s[name] for i, s in found.items() if name in s}
    on_t = times is not None and all(
        v.ndim == 1 and found[i].get("t", np.empty(0)).shape == v.shape for i, v in values.items()
    )
    if all(v.ndim == 0 for v in values.values()):
        extra, out = (), np.full(n_points, np.nan)
    elif on_t:
        extra, out = ("t",), np.full((n_points, times.size), np.nan)
    else:
        length = max(v.size for v in values.values())
        extra, out = (f"{name}_index",), np.full((n_points, length), np.nan)
    for i, v in values.items():
        if not extra:
            out[i] = v
        elif on_t:
            out[i, np.searchsorted(times, found[i]["t"])] = v
        else:
            out[i, : v.size] = v
    dtype = np.result_type(*values.values())
    if dtype.kind in "biu" and not np.isnan(out).any():  # complete: integers stay integers
        out = out.astype(dtype)
    return extra, out


def _coord(values: Sequence) -> np.ndarray:
    kinds = {type(v) for v in values}
    if kinds <= {int, float} or kinds in ({str}, {bool}):
        return np.asarray(values)
    return np.asarray([to_json(v) for v in values])


def collect(
    scan_dir: str | os.PathLike,
    out: str | os.PathLike | None = COLLECTED_FILE,
    *,
    include: Sequence[str] | None = None,
):
    """Gather the results of a scan into one ``xarray.Dataset``.

    - Which arrays: the numeric 0-d and 1-d arrays of the point file's ``/summary`` group,
      or, without one, of the point kind's ``summarize`` (:func:`summarize_experiment`).
    - Scalars (0-d) become variables over the scan's dimensions (those named like an axis
      are left out: the axis holds their values); curves (1-d) get one more:
      ``t`` when a 1-d ``t`` of the same length sits beside them (the union of the points'
      times; NaN beyond a shorter point's end), else ``<name>_index``.
    - A missing, failed or corrupt point is NaN (integers become floats then); ``status``
      says ``"done"``, ``"failed"``, ``"missing"`` or ``"corrupt"`` (its file is torn or a
      checksum fails, with a warning; ``spinsa scan run`` runs it again) for every point,
      ``key`` names its file.
    - Every axis is a coordinate: a grid axis by its values, a zipped group by its label
      (or 0, 1, ...), each zipped key along it; values that are not scalars by their JSON.

    Parameters
    ----------
    scan_dir : path
        A scan directory (made by :func:`spinsa.scan.run_scan`).
    out : path or None
        Where to save the dataset (netCDF-4 via h5netcdf, atomically, replacing an older
        one), relative to ``scan_dir`` unless absolute; None saves nothing.
    include : sequence of str, optional
        Glob patterns of the variable names to keep (``["best_*", "error"]``).

    Returns
    -------
    xarray.Dataset
        Dimensions: the scan's axes, of shape :attr:`ScanSpec.shape` (plus ``t`` or
        ``<name>_index`` for curves).
    """
    from spinsa.io import SpinsaFileError

    xr = _xarray()
    sd = ScanDir(scan_dir)
    spec, keys = sd.read()
    try:
        summarize = point_kind(spec.point).summarize
    except ValueError:  # a function of the user's that cannot be imported here
        summarize = None
    store = sd.points
    status = np.full(len(keys), "missing", dtype=object)
    found: dict[int, dict[str, np.ndarray]] = {}
    for i, key in enumerate(keys):
        if store.file(key).exists():
            try:
                found[i] = _summary(store.file(key), summarize, include)
                status[i] = "done"
            except SpinsaFileError as err:  # torn or changed: `spinsa scan run` reruns it
                status[i] = "corrupt"
                warnings.warn(str(err), stacklevel=2)
        elif store.error(key) is not None:
            status[i] = "failed"
    all_t = [s["t"] for s in found.values() if "t" in s and s["t"].ndim == 1]
    times = np.unique(np.concatenate(all_t)) if all_t else None
    coords: dict[str, tuple] = {}
    for axis in spec.axes:
        coords[axis.name] = (axis.name, _coord(axis.coord))
        if axis.zipped:
            for key, values in zip(axis.keys, axis.values, strict=True):
                coords[key] = (axis.name, _coord(values))
    if times is not None:
        coords["t"] = ("t", times)
    data_vars = {}
    for name in sorted({k for s in found.values() for k in s} - set(coords)):
        extra, values = _variable(name, found, len(keys), times)
        data_vars[name] = ((*spec.dims, *extra), values.reshape(*spec.shape, *values.shape[1:]))
    data_vars["status"] = (spec.dims, status.astype(str).reshape(spec.shape))
    data_vars["key"] = (spec.dims, np.asarray(keys).reshape(spec.shape))
    ds = xr.Dataset(data_vars, coords=coords)
    ds.attrs.update(
        scan_name=spec.name,
        scan_hash=spec.scan_hash,
        point_kind=spec.point,
        n_points=len(keys),
        n_done=len(found),
        base_config=to_json(spec.base),
        spinsa_version=spinsa_version(),
    )
    if out is not None:
        # every variable under Fletcher-32; strings as fixed-width characters, which HDF5
        # can checksum (its variable-length strings live outside any checksum)
        encoding = {
            name: {"fletcher32": True, **({} if var.dtype.kind in "biuf" else {"dtype": "S1"})}
            for name, var in ds.variables.items()
        }
        with atomic_path(sd.path / out) as tmp:
            ds.to_netcdf(tmp, engine="h5netcdf", encoding=encoding)
    return ds


def open_collected(path: str | os.PathLike):
    """The dataset saved by :func:`collect` (from a scan directory or the file), loaded."""
    from spinsa.io import SpinsaFileError

    xr = _xarray()
    path = Path(path)
    file = path / COLLECTED_FILE if path.is_dir() else path
    try:
        with xr.open_dataset(file, engine="h5netcdf") as ds:
            return ds.load()
    except FileNotFoundError:
        raise
    except OSError as err:  # torn, or a checksum fails
        raise SpinsaFileError(
            f"{file} cannot be read ({err}): it was torn or changed on disk; "
            "`spinsa scan collect` writes it again from the point files",
            "corrupt",
        ) from err


# --------------------------------------------------------------------------- phase diagrams


def _is_log(values: np.ndarray) -> bool:
    """Numbers that are geometrically rather than linearly spaced (a log axis suits them)."""
    if values.dtype.kind not in "iuf" or values.size < 3 or np.any(values <= 0):
        return False
    geo, lin = np.diff(np.log(values)), np.diff(values)
    geometric = np.std(geo) / abs(geo.mean()) < np.std(lin) / abs(lin.mean())
    return bool(values.max() / values.min() >= 10 and geometric)


def phase_diagram(
    ds,
    var: str,
    x: str | None = None,
    y: str | None = None,
    *,
    fixed: Mapping[str, Any] | None = None,
    reduce: str = "mean",
    ax=None,
    log: bool | None = None,
):
    """Draw the variable ``var`` of ``ds`` (from :func:`collect`) as a heat map over ``x``, ``y``.

    Parameters
    ----------
    x, y : str, optional
        Dimensions on the horizontal and vertical axes; default: the first two with more
        than one value (after ``fixed``). With only one, a line is drawn instead.
    fixed : mapping, optional
        ``dimension -> value`` to hold fixed (the nearest value on a numeric axis;
        ``{"t": 10}`` picks a time of a curve).
    reduce : {"mean", "median", "min", "max"}
        How the other dimensions (seeds, say) are reduced; NaN (missing points) skipped.
    ax : matplotlib Axes, optional
        Where to draw; default: a new figure (``ax.figure`` to save it).
    log : bool, optional
        Logarithmic axes; default: where a dimension's values are geometrically spaced.

    Returns
    -------
    matplotlib.axes.Axes
    """
    from spinsa.plotting import new_figure

    if var not in ds.data_vars or ds[var].dtype.kind not in "biuf":
        names = [v for v in ds.data_vars if ds[v].dtype.kind in "biuf"]
        raise ValueError(f"{var!r} is not a numeric variable of the dataset; those: {names}")
    check_choice(reduce, "reduce", REDUCTIONS)
    da = ds[var].astype(float)
    for dim, value in (fixed or {}).items():
        if dim not in da.dims:
            raise ValueError(f"cannot fix {dim!r}: {var!r} has dimensions {list(da.dims)}")
        try:
            da = da.sel({dim: value}, method="nearest" if da[dim].dtype.kind in "iuf" else None)
        except (KeyError, TypeError, ValueError):
            values = da[dim].values.tolist()
            raise ValueError(f"{dim} = {value!r} is not on the axis; values: {values}") from None
    for dim in (x, y):
        if dim is not None and dim not in da.dims:
            raise ValueError(f"{dim!r} is not a dimension of {var!r}: {list(da.dims)}")
    free = [d for d in da.dims if da.sizes[d] > 1 and d not in (x, y)]
    x = x or (free.pop(0) if free else None)
    y = y or (free.pop(0) if free else None)
    if x is None:
        raise ValueError(f"{var!r} has no dimension with more than one value to draw over")
    reduced = [d for d in da.dims if d not in (x, y)]
    da = getattr(da, reduce)(dim=reduced, skipna=True) if reduced else da
    ax = ax if ax is not None else new_figure((5.2, 4.2)).subplots()
    scale = {}
    for axis, dim in (("x", x), ("y", y)):
        if dim is not None and (log if log is not None else _is_log(da[dim].values)):
            scale[f"{axis}scale"] = "log"
    if y is None:
        da.plot(x=x, ax=ax, marker="o", **scale)
    else:
        da.plot(x=x, y=y, ax=ax, **scale)
    notes = [f"{d} = {v}" for d, v in (fixed or {}).items()]
    notes += [f"{reduce} over {', '.join(reduced)}"] if reduced else []
    ax.set_title(var + (f"\n({'; '.join(notes)})" if notes else ""), fontsize="medium")
    return ax


def draw_phase_diagrams(
    ds,
    out_dir: str | os.PathLike,
    variables: Sequence[str] | None = None,
    *,
    x: str | None = None,
    y: str | None = None,
    fixed: Mapping[str, Any] | None = None,
    reduce: str = "mean",
    fmt: str = "png",
    dpi: int = 120,
) -> list[Path]:
    """Draw :func:`phase_diagram` of every variable into ``out_dir/<variable>.<fmt>``.

    ``variables`` defaults to those of :data:`DIAGRAM_VARIABLES` that ``ds`` has (also as
    ``<task>.<name>``), else to its scalar variables (at most 12); ``x``, ``y``, ``fixed``
    and ``reduce`` are as in :func:`phase_diagram`. Returns the paths of the files written.
    """
    from spinsa.plotting import new_figure, save_figure

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if variables is None:
        dims = set(ds["status"].dims)  # the scan's own, without t or *_index
        scalars = [
            v
            for v in ds.data_vars
            if v not in ("status", "key") and set(ds[v].dims) <= dims and ds[v].dtype.kind in "biuf"
        ]
        wanted = [v for q in DIAGRAM_VARIABLES for v in scalars if v == q or v.endswith("." + q)]
        variables = wanted or scalars[:12]
    paths = []
    for var in variables:
        fig = new_figure((5.2, 4.2))
        phase_diagram(ds, var, x, y, fixed=fixed, reduce=reduce, ax=fig.subplots())
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", var)
        paths.append(save_figure(fig, out_dir / f"{name}.{fmt}", dpi=dpi))
    return paths
