"""Phase scans: a base experiment over grids of parameters, resumable, on Dask or not.

A scan file (TOML, :mod:`spinsa.scan.spec`) holds a base config and the axes to vary. Every
point runs the point kind's function (:mod:`spinsa.scan.kinds`) and writes one HDF5 file
named by the hash of its resolved config (:mod:`spinsa.scan.store`); the points run in this
process, on a Dask ``LocalCluster``, on a batch system through dask-jobqueue or on a running
Dask scheduler, and a re-run runs only the missing ones (:mod:`spinsa.scan.run`).
:func:`collect` gathers the point files into one xarray ``Dataset`` over the axes, and the
figures of :mod:`spinsa.plotting.scan` (re-exported here) draw it::

    from spinsa import scan
    spec = scan.load_scan("analysis/configs/scan_example.toml")
    report = scan.run_scan(spec, "runs/example")       # LocalCluster, one worker per core
    ds = scan.collect("runs/example")                  # xarray.Dataset, also saved as netCDF
    scan.phase_diagram(ds, "best_error", "alpha", "dynamics.lam")

An experiment scan fits each distinct J once, into ``DIR/fits/``, and its points evaluate it
(:class:`PointKind` ``fit_config`` and ``fit``).

Importing this package imports neither dask nor xarray nor matplotlib; the functions that
need them import them, and say ``pip install "spinsa[cluster]"`` when they are missing.
"""

from spinsa.plotting.scan import (
    capacity_figure,
    curves_figure,
    draw_phase_diagrams,
    draw_scan_figures,
    phase_diagram,
    phase_panels,
)
from spinsa.scan.equilibrium import EquilibriumConfig
from spinsa.scan.kinds import (
    PointKind,
    SyntheticConfig,
    SyntheticFitConfig,
    point_kind,
    summarize_experiment,
)
from spinsa.scan.results import collect, open_collected
from spinsa.scan.run import MissingDependencyError, ScanReport, run_scan
from spinsa.scan.spec import Axis, ScanPoint, ScanSpec, axis_values, load_scan, point_key
from spinsa.scan.store import PointStore, ScanDir, ScanMismatchError

# fmt: off
__all__ = [
    "Axis", "ScanPoint", "ScanSpec", "axis_values", "load_scan", "point_key",  # spec
    "PointKind", "SyntheticConfig", "SyntheticFitConfig", "EquilibriumConfig",  # kinds
    "point_kind",
    "summarize_experiment",
    "PointStore", "ScanDir", "ScanMismatchError",  # store
    "MissingDependencyError", "ScanReport", "run_scan",  # run
    "collect", "open_collected",  # results
    "phase_diagram", "phase_panels", "curves_figure", "draw_phase_diagrams",  # figures
    "draw_scan_figures", "capacity_figure",
]
# fmt: on
