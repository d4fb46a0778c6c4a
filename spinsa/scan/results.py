"""Gathering a scan's point files into one xarray ``Dataset`` (its figures:
:mod:`spinsa.plotting.scan`).

The dataset depends on the point files only, so a scan that was interrupted and resumed
collects to a dataset identical to that of a scan run in one go. It is saved as netCDF-4
(HDF5) through h5netcdf: ``xarray.open_dataset(path, engine="h5netcdf")`` reads it.
"""

from __future__ import annotations

import fnmatch
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spinsa._files import atomic_path
from spinsa.io.schema import spinsa_version, to_json
from spinsa.scan.kinds import point_kind
from spinsa.scan.run import require
from spinsa.scan.store import ScanDir

__all__ = ["collect", "open_collected"]

COLLECTED_FILE = "collected.nc"


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
    """Gather the results of a scan into one ``xarray.Dataset``: the numeric 0-d and 1-d
    arrays of every point file's ``/summary`` group (without one, of the point kind's
    ``summarize``), laid out as docs/scans.md, '3. Collect', says; axis values that are not
    scalars are coordinates by their JSON.

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
