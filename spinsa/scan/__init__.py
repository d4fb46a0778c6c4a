"""Phase scans: a base experiment over grids of parameters, on Dask, resumable.

A scan file (TOML) holds a base experiment and the axes to vary (grids, lists, zipped axes,
seeds, log-spaced ranges; :mod:`spinsa.scan.spec`). Every point is one task that runs the
experiment and writes one self-describing HDF5 file named by the hash of its parameters;
the points run on a Dask ``LocalCluster`` by default, on a batch system through
dask-jobqueue, or on an existing Dask scheduler (:mod:`spinsa.scan.clusters`), and a
re-run runs only the missing ones (:mod:`spinsa.scan.engine`). :func:`collect` gathers the
results into one xarray ``Dataset`` with the axes as dimensions and draws phase diagrams.

::

    from spinsa import scan
    spec = scan.load_scan("analysis/configs/scan_example.toml")
    print(scan.plan_scan(spec))                        # points, memory, time; runs nothing
    report = scan.run_scan(spec, "runs/example")       # LocalCluster, one worker per core
    ds = scan.collect("runs/example")                  # xarray.Dataset, also saved as netCDF
    scan.phase_diagram(ds, "best_error", "dynamics.lam", "patterns.n_patterns")

Importing this package imports neither dask nor xarray nor matplotlib; the functions that
need them import them, and say ``pip install "spinsa[cluster]"`` when they are missing.
"""

from spinsa.scan.bench import bench_overhead
from spinsa.scan.clusters import CLUSTERS, MissingDependencyError, open_client
from spinsa.scan.collect import (
    DIAGRAM_VARIABLES,
    collect,
    draw_phase_diagrams,
    open_collected,
    phase_diagram,
)
from spinsa.scan.engine import ScanReport, execute_point, run_scan
from spinsa.scan.kinds import POINT_KINDS, PointCost, PointKind, point_kind
from spinsa.scan.plan import ScanPlan, plan_scan
from spinsa.scan.spec import Axis, ScanPoint, ScanSpec, axis_values, load_scan, point_key
from spinsa.scan.store import ScanDir, ScanIndex, ScanLockedError, ScanMismatchError
from spinsa.scan.toy import SyntheticConfig, TrivialConfig

__all__ = [
    "CLUSTERS",
    "DIAGRAM_VARIABLES",
    "POINT_KINDS",
    "Axis",
    "MissingDependencyError",
    "PointCost",
    "PointKind",
    "ScanDir",
    "ScanIndex",
    "ScanLockedError",
    "ScanMismatchError",
    "ScanPlan",
    "ScanPoint",
    "ScanReport",
    "ScanSpec",
    "SyntheticConfig",
    "TrivialConfig",
    "axis_values",
    "bench_overhead",
    "collect",
    "draw_phase_diagrams",
    "execute_point",
    "load_scan",
    "open_client",
    "open_collected",
    "phase_diagram",
    "plan_scan",
    "point_key",
    "point_kind",
    "run_scan",
]
