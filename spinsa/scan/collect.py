"""Gathering a scan's results into one xarray ``Dataset``, and drawing phase diagrams.

:func:`collect` reads every finished point file of a scan directory and returns a
``Dataset`` whose dimensions are the scan's axes:

- *which arrays*: when a point file has a ``/summary`` group, the arrays in it; otherwise
  what the point kind's ``summarize`` makes of the file (the experiment kind:
  :func:`spinsa.scan.kinds.summarize_experiment`); otherwise every dataset of the file
  with at most one dimension (``include=`` picks by name);
- *scalars* (0-d datasets) become variables over the scan dimensions, named as in the
  summary group (``best_error``) or by their path with dots (``analysis.lifetimes.mean``);
- *curves* (1-d datasets) get one more dimension: ``t`` when the group holds a 1-d ``t``
  (or ``times``) dataset of the same length (its values, merged over the points, are the
  coordinate; a point that stops earlier is NaN beyond its end), else ``<name>_index``;
- a point that is missing or failed is NaN (integers and booleans become floats then);
  the variable ``status`` says ``"done"``, ``"failed"`` or ``"missing"`` for every point
  and ``key`` names its file;
- every axis is a coordinate: a grid axis by its values, a zipped group by its label (or
  0, 1, ...) with each zipped key as a coordinate along it.

The dataset is saved as netCDF-4 (HDF5) through h5netcdf, readable with
``xarray.open_dataset(path, engine="h5netcdf")``, netCDF tools, or h5py.

:func:`phase_diagram` draws one variable over two axes (the others fixed with ``fixed=`` or
averaged), :func:`draw_phase_diagrams` several into files.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spinsa.io.schema import now_utc, spinsa_version, to_json
from spinsa.scan.clusters import MissingDependencyError
from spinsa.scan.spec import ScanSpec
from spinsa.scan.store import ScanDir, ScanIndex

__all__ = [
    "DIAGRAM_VARIABLES",
    "collect",
    "draw_phase_diagrams",
    "open_collected",
    "phase_diagram",
]

SUMMARY = "summary"
TIME_NAMES = ("t", "times")
COLLECTED_FILE = "collected.nc"
FIGURES_DIR = "figures"
# The quantities a phase diagram usually shows, drawn by default when present.
DIAGRAM_VARIABLES = (
    "best_error",
    "best_t",
    "lifetime",
    "n_attractors",
    "mean_overlap",
)
REDUCTIONS = ("mean", "median", "min", "max")


def require_xarray():
    """``xarray`` (with h5netcdf), or :class:`MissingDependencyError` saying what to install."""
    try:
        import h5netcdf  # noqa: F401
        import xarray
    except ImportError as err:
        raise MissingDependencyError(
            f"collecting a scan needs xarray and h5netcdf ({err}). Install them with: "
            'pip install "spinsa[cluster]"'
        ) from None
    return xarray


# --------------------------------------------------------------------------- reading


def _included(var: str, include: Sequence[str] | None) -> bool:
    return include is None or any(fnmatch.fnmatchcase(var, p) for p in include)


def _from_summarizer(values: Mapping[str, Any], include) -> dict[str, tuple]:
    """The output of a point kind's ``summarize`` in the form of :func:`_read_point`."""
    times = values.get("t")
    found: dict[str, tuple] = {}
    for var, value in values.items():
        value = np.asarray(value)
        if var == "t" or value.ndim > 1 or value.dtype.kind not in "biuf":
            continue
        if not _included(var, include):
            continue
        on_t = value.ndim == 1 and times is not None and np.shape(times) == value.shape
        found[var] = (value, np.asarray(times) if on_t else None, "t" if on_t else None)
    return found


def _read_point(path: Path, include: Sequence[str] | None, summarize=None) -> dict[str, tuple]:
    """``name -> (array, time values or None, time dim)`` for the arrays of one point file."""
    import h5py

    from spinsa import io

    found: dict[str, tuple] = {}
    with io.open_file(path) as f:
        has_summary = isinstance(f.get(SUMMARY), h5py.Group)
    if summarize is not None and not has_summary:
        return _from_summarizer(summarize(path), include)
    with io.open_file(path) as f:
        root = f[SUMMARY] if has_summary else f
        prefix = root.name.strip("/")
        datasets: dict[str, h5py.Dataset] = {}
        root.visititems(
            lambda n, o: datasets.__setitem__(n, o) if isinstance(o, h5py.Dataset) else None
        )
        for name, ds in datasets.items():
            if ds.ndim > 1 or ds.dtype.kind not in "biuf":
                continue
            group, _, leaf = name.rpartition("/")
            if leaf in TIME_NAMES and ds.ndim == 1:
                continue
            var = name.replace("/", ".")
            if not _included(var, include):
                continue
            data = ds[()]
            times, tdim = None, None
            if ds.ndim == 1:
                times, where = _times_for(datasets, group, ds.shape)
                if times is not None:
                    full = f"{prefix}/{where}".strip("/")
                    tdim = "t" if full in ("", SUMMARY) else f"{full.replace('/', '.')}.t"
            found[var] = (data, times, tdim)
    return found


def _times_for(datasets: Mapping[str, Any], group: str, shape: tuple) -> tuple[Any, str]:
    """The 1-d ``t`` or ``times`` of the same length in ``group`` or its nearest ancestor."""
    parts = group.split("/") if group else []
    for depth in range(len(parts), -1, -1):
        where = "/".join(parts[:depth])
        for tname in TIME_NAMES:
            t = datasets.get(f"{where}/{tname}" if where else tname)
            if t is not None and t.ndim == 1 and t.shape == shape:
                return t[()], where
    return None, ""


def _coord_values(values: Sequence) -> tuple[np.ndarray, bool]:
    """Coordinate array of an axis; False when the values are not scalars (index instead)."""
    if all(isinstance(v, (bool, int, float, str)) for v in values):
        kinds = {type(v) for v in values}
        if kinds <= {int, float} or len(kinds) == 1:
            return np.asarray(values), True
    return np.arange(len(values)), False


def _coords(spec: ScanSpec) -> dict[str, Any]:
    coords: dict[str, Any] = {}
    for axis in spec.axes:
        values, ok = _coord_values(axis.coord)
        coords[axis.name] = (axis.name, values)
        if not ok:
            coords[f"{axis.name}.label"] = (axis.name, np.asarray([to_json(v) for v in axis.coord]))
        if axis.zipped:
            for key, vals in zip(axis.keys, axis.values, strict=True):
                kv, ok = _coord_values(vals)
                coords[key] = (axis.name, kv if ok else np.asarray([to_json(v) for v in vals]))
    return coords


def _assemble(name: str, per_point: dict[tuple, tuple], shape: tuple, dims: tuple, complete):
    """One variable over the scan dimensions (and its time or index dimension)."""
    first = next(iter(per_point.values()))
    ndim = np.ndim(first[0])
    kinds = {np.asarray(v[0]).dtype.kind for v in per_point.values()}
    keep_dtype = complete and (kinds <= {"i", "u"} or kinds == {"b"})
    dtype = np.result_type(*[np.asarray(v[0]).dtype for v in per_point.values()])
    if not keep_dtype:
        dtype = np.float64
    fill = 0 if keep_dtype else np.nan
    if ndim == 0:
        out = np.full(shape, fill, dtype=dtype)
        for index, (value, _, _) in per_point.items():
            out[index] = value
        return {name: (dims, out)}, {}
    tdims = {v[2] for v in per_point.values()}
    if len(tdims) == 1 and None not in tdims:
        tdim = tdims.pop()
        times = np.unique(np.concatenate([np.asarray(v[1]) for v in per_point.values()]))
        out = np.full((*shape, times.size), np.nan if not keep_dtype else fill, dtype=dtype)
        ragged = False
        for index, (value, t, _) in per_point.items():
            pos = np.searchsorted(times, t)
            out[index][pos] = value
            ragged |= pos.size != times.size
        if ragged and keep_dtype:  # a point with fewer times: the rest must be NaN
            return _assemble(name, per_point, shape, dims, complete=False)
        return {name: ((*dims, tdim), out)}, {tdim: times}
    length = max(np.size(v[0]) for v in per_point.values())
    idim = f"{name}_index"
    ragged = any(np.size(v[0]) != length for v in per_point.values())
    if ragged and keep_dtype:
        return _assemble(name, per_point, shape, dims, complete=False)
    out = np.full((*shape, length), fill, dtype=dtype)
    for index, (value, _, _) in per_point.items():
        out[index][: np.size(value)] = value
    return {name: ((*dims, idim), out)}, {}


def collect(
    scan_dir: str | os.PathLike,
    out: str | os.PathLike | None = COLLECTED_FILE,
    *,
    include: Sequence[str] | None = None,
    overwrite: bool = True,
):
    """Gather the results of a scan into one ``xarray.Dataset`` (see the module docstring).

    Parameters
    ----------
    scan_dir : path
        A scan directory (made by :func:`spinsa.scan.run_scan`).
    out : path or None
        Where to save the dataset (netCDF-4 via h5netcdf), relative to ``scan_dir`` unless
        absolute; ``None`` saves nothing.
    include : sequence of str, optional
        Glob patterns of the variable names to keep (``["best_*", "error"]``).
    overwrite : bool
        Replace an existing ``out`` (default True: collecting again after more points
        finished is the normal use).

    Returns
    -------
    xarray.Dataset
        Dimensions: the scan's axes (plus ``t`` or ``<name>_index`` for curves).
    """
    xr = require_xarray()
    sd = ScanDir(scan_dir)
    spec = sd.read_spec()
    keys = _point_keys(sd, spec)
    summarize = _summarizer(spec.point)
    failed = set()
    if sd.index_file.exists():
        failed = {k for k, r in ScanIndex.load(sd).points.items() if r.get("status") == "failed"}
    include = None if include is None else list(include)
    values: dict[str, dict[tuple, tuple]] = {}
    status = np.full(spec.shape, "missing", dtype=object)
    key_names = np.empty(spec.shape, dtype=object)
    for index, key in keys.items():
        key_names[index] = key
        path = sd.point_path(key)
        if not path.exists():
            if key in failed:
                status[index] = "failed"
            continue
        for var, item in _read_point(path, include, summarize).items():
            values.setdefault(var, {})[index] = item
        status[index] = "done"
    n_done = int(np.count_nonzero(status == "done"))
    dims = spec.dims
    data_vars: dict[str, Any] = {}
    coords = _coords(spec)
    for var in sorted(values):
        complete = len(values[var]) == spec.n_points
        new_vars, new_coords = _assemble(var, values[var], spec.shape, dims, complete)
        for cname, cvals in new_coords.items():
            if cname in coords and not np.array_equal(coords[cname][1], cvals):
                raise ValueError(
                    f"the curves of different groups disagree on the times of {cname!r}"
                )
            coords[cname] = (cname, cvals)
        data_vars.update(new_vars)
    data_vars["status"] = (dims, status.astype(str))
    data_vars["key"] = (dims, key_names.astype(str))
    ds = xr.Dataset(data_vars, coords=coords)
    ds.attrs.update(
        scan_name=spec.name,
        scan_hash=spec.scan_hash,
        point_kind=spec.point,
        n_points=spec.n_points,
        n_done=n_done,
        base_config=to_json(spec.base),
        axes=json.dumps([a.to_dict() for a in spec.axes]),
        scan_dir=str(sd.path.resolve()),
        collected=now_utc(),
        spinsa_version=spinsa_version(),
    )
    if out is not None:
        path = Path(out)
        if not path.is_absolute():
            path = sd.path / path
        _save(ds, path, overwrite)
    return ds


def _summarizer(point: str):
    """The point kind's ``summarize`` (None when the kind has none or cannot be loaded)."""
    from spinsa.scan.kinds import point_kind

    try:
        return point_kind(point).summarize
    except (ValueError, ImportError):
        return None


def _point_keys(sd: ScanDir, spec: ScanSpec) -> dict[tuple, str]:
    """Grid position -> point key, from the index (or from the spec when it has none)."""
    if sd.index_file.exists():
        index = ScanIndex.load(sd)
        if index.data.get("scan_hash") == spec.scan_hash:
            return {tuple(r["index"]): k for k, r in index.points.items()}
    return {p.index: p.key for p in spec.points()}


def _save(ds, path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        ds.to_netcdf(tmp, engine="h5netcdf")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def open_collected(path: str | os.PathLike):
    """The dataset saved by :func:`collect` (a scan directory or the file itself), loaded."""
    xr = require_xarray()
    path = Path(path)
    if path.is_dir():
        path = path / COLLECTED_FILE
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


# --------------------------------------------------------------------------- phase diagrams


def _select(da, fixed: Mapping[str, Any] | None):
    for dim, value in (fixed or {}).items():
        if dim not in da.dims:
            raise ValueError(f"cannot fix {dim!r}: {da.name!r} has dimensions {list(da.dims)}")
        try:
            da = da.sel({dim: value})
        except (KeyError, TypeError, ValueError):
            try:
                da = da.sel({dim: value}, method="nearest")
            except (KeyError, TypeError, ValueError):
                coords = da[dim].values.tolist()
                raise ValueError(
                    f"{dim} = {value!r} is not on the axis; values: {coords}"
                ) from None
    return da


def _reduce(da, dims: Sequence[str], reduce: str):
    if not dims:
        return da
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    return getattr(da.astype(float), reduce)(dim=list(dims), skipna=True)


def _is_log(values: np.ndarray) -> bool:
    """Coordinates that are geometrically rather than linearly spaced."""
    v = np.asarray(values, dtype=float)
    if v.size < 3 or np.any(v <= 0) or v.max() / v.min() < 10:
        return False
    lin = np.diff(v)
    geo = np.diff(np.log(v))
    return np.std(geo) / abs(np.mean(geo)) < np.std(lin) / abs(np.mean(lin))


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    v = np.log(values) if log else np.asarray(values, dtype=float)
    if v.size == 1:
        e = np.array([v[0] - 0.5, v[0] + 0.5])
    else:
        mid = 0.5 * (v[1:] + v[:-1])
        e = np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])
    return np.exp(e) if log else e


def _axis_values(da, dim):
    values = da[dim].values
    if values.dtype.kind in "biuf":
        return values.astype(float), None
    return np.arange(values.size, dtype=float), [str(v) for v in values]


def _ticks(axis, values: np.ndarray, labels: list[str] | None, most: int = 12) -> None:
    """Ticks on the scanned values (when there are few), labelled as written."""
    if labels is None and values.size > most:
        return
    axis.set_ticks(values, labels if labels is not None else [f"{v:g}" for v in values])
    axis.set_minor_locator(_null_locator())


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


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
    cmap: str = "viridis",
):
    """Draw ``var`` as a heat map over the dimensions ``x`` and ``y``.

    Parameters
    ----------
    ds : xarray.Dataset
        What :func:`collect` returned (or :func:`open_collected` read).
    var : str
        A variable of ``ds`` (``"best_error"``...).
    x, y : str, optional
        Dimensions on the horizontal and vertical axes; default: the first two of the
        variable's dimensions with more than one value (after ``fixed``). With one such
        dimension, a line is drawn instead.
    fixed : mapping, optional
        ``dimension -> value`` to hold fixed (the nearest value on the axis is taken when
        there is no exact match; ``{"t": 10}`` picks a time of a curve).
    reduce : {"mean", "median", "min", "max"}
        How the remaining dimensions (seeds, say) are reduced; NaN (missing points) are
        skipped.
    ax : matplotlib Axes, optional
        Where to draw; default: a new figure (``ax.figure`` to save it).
    log : bool, optional
        Logarithmic axes; default: when a dimension's values are geometrically spaced.
    cmap : str
        Colour map of the heat map.

    Returns
    -------
    matplotlib.axes.Axes
    """
    if var not in ds.data_vars:
        names = [v for v in ds.data_vars if v not in ("status", "key")]
        raise ValueError(f"{var!r} is not a variable of the dataset; variables: {names}")
    da = _select(ds[var], fixed)
    if da.dtype.kind not in "biuf":
        raise ValueError(f"{var!r} is not numeric (dtype {da.dtype})")
    free = [d for d in da.dims if da.sizes[d] > 1]
    for name, dim in (("x", x), ("y", y)):
        if dim is not None and dim not in da.dims:
            raise ValueError(f"{name} = {dim!r} is not a dimension of {var!r}: {list(da.dims)}")
    if x is None:
        x = next((d for d in free if d != y), None)
    if y is None:
        y = next((d for d in free if d != x), None)
    if x is None:
        raise ValueError(f"{var!r} has no dimension with more than one value to draw over")
    keep = [d for d in (x, y) if d is not None]
    averaged = [d for d in da.dims if d not in keep]
    da = _reduce(da, averaged, reduce).squeeze(drop=True) if averaged else da
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(5.2, 4.2), layout="constrained").subplots()
    xv, xlabels = _axis_values(da, x)
    xlog = _is_log(xv) if log is None and xlabels is None else bool(log and xlabels is None)
    if y is None or y not in da.dims:
        ax.plot(xv, da.transpose(x).values, "o-")
        ax.set_ylabel(var)
    else:
        yv, ylabels = _axis_values(da, y)
        ylog = _is_log(yv) if log is None and ylabels is None else bool(log and ylabels is None)
        z = np.ma.masked_invalid(da.transpose(y, x).values.astype(float))
        mesh = ax.pcolormesh(_edges(xv, xlog), _edges(yv, ylog), z, cmap=cmap, shading="flat")
        ax.figure.colorbar(mesh, ax=ax, label=var)
        ax.set_ylabel(y)
        if ylog:
            ax.set_yscale("log")
    ax.set_xlabel(x)
    if xlog:
        ax.set_xscale("log")
    _ticks(ax.xaxis, xv, xlabels)
    if y is not None and y in da.dims:
        _ticks(ax.yaxis, yv, ylabels)
    notes = [f"{d} = {v}" for d, v in (fixed or {}).items()]
    if averaged:
        notes.append(f"{reduce} over {', '.join(averaged)}")
    ax.set_title(var + (f"\n({'; '.join(notes)})" if notes else ""), fontsize="medium")
    return ax


def default_variables(ds) -> list[str]:
    """The variables :func:`draw_phase_diagrams` draws when none are named."""
    scan_dims = {a["name"] for a in json.loads(ds.attrs["axes"])}
    scalar = [
        v
        for v in ds.data_vars
        if v not in ("status", "key")
        and set(ds[v].dims) <= scan_dims
        and ds[v].dtype.kind in "biuf"
    ]
    preferred = [v for q in DIAGRAM_VARIABLES for v in scalar if v == q or v.endswith("." + q)]
    return list(dict.fromkeys(preferred)) or scalar[:12]


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
    """Draw one phase diagram per variable into ``out_dir/<variable>.<fmt>``.

    Parameters
    ----------
    ds : xarray.Dataset
    out_dir : path
        Created if needed.
    variables : sequence of str, optional
        Default: those of :data:`DIAGRAM_VARIABLES` that ``ds`` has, else its scalar
        variables (at most 12).
    x, y, fixed, reduce
        As in :func:`phase_diagram`.
    fmt : str
        File format (``"png"``, ``"pdf"``, ``"svg"``).
    dpi : int

    Returns
    -------
    list of Path
        The files written.
    """
    from matplotlib.figure import Figure

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(variables) if variables is not None else default_variables(ds)
    paths = []
    for var in names:
        fig = Figure(figsize=(5.2, 4.2), layout="constrained")
        phase_diagram(ds, var, x, y, fixed=fixed, reduce=reduce, ax=fig.subplots())
        path = out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', var)}.{fmt}"
        fig.savefig(path, dpi=dpi)
        paths.append(path)
    return paths
