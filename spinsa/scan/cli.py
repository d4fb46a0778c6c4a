"""``spinsa scan plan|run|collect``: phase scans from the command line.

::

    spinsa scan plan scan.toml                     # the points and their files; runs nothing
    spinsa scan run scan.toml --out runs/scan      # on a Dask LocalCluster (one worker per core)
    spinsa scan run scan.toml --out runs/scan --cluster slurm      # the same, on SLURM
    spinsa scan run scan.toml --out runs/scan --scheduler tcp://host:8786
    spinsa scan collect runs/scan --x alpha --y dynamics.lam       # dataset + phase diagrams

Re-running ``spinsa scan run`` with the same arguments runs only the points that are missing.
Errors a user can fix are raised as ``ValueError`` (``spinsa`` prints them in one line and
exits with status 2); this module imports nothing from the ``spinsa`` command itself.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

RUN_CLUSTERS = ("local", "serial", "slurm", "pbs", "sge", "lsf")
MAX_ROWS = 40


def _one_line_errors(handler):
    """A missing optional dependency is the user's to fix: a ValueError, no traceback."""

    @functools.wraps(handler)
    def wrapped(args) -> int:
        from spinsa.scan.run import MissingDependencyError

        try:
            return handler(args)
        except MissingDependencyError as exc:
            raise ValueError(str(exc)) from None

    return wrapped


def add_parser(sub) -> None:
    """Declare ``spinsa scan`` and its actions on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "scan",
        help="phase scans: plan, run (locally or on a cluster) and collect",
        description="Scan a base experiment over grids of parameters (a TOML scan file), one "
        "HDF5 file per point, on a Dask cluster: the local machine by default, a batch system "
        "(SLURM, PBS, SGE, LSF) through dask-jobqueue, or a running Dask scheduler. Re-running "
        "a scan runs only its missing points.",
    )
    p.set_defaults(func=lambda args: p.print_help() or 0)
    actions = p.add_subparsers(title="actions", metavar="ACTION")

    pl = actions.add_parser(
        "plan",
        help="print the points and their files, without running",
        description="Expand the scan file into its points and check them (axis names, values) "
        "without running anything: print each point's coordinates and file name (the hash of "
        "its parameters); with --out, also which points are done. With --cluster "
        "slurm|pbs|sge|lsf, also the job script that `spinsa scan run` would submit.",
    )
    pl.add_argument("scan", type=Path, help="scan file (TOML)")
    pl.add_argument("--out", type=Path, help="scan directory: show which points are done")
    pl.add_argument("--all", action="store_true", help=f"print every point, not {MAX_ROWS}")
    pl.add_argument(
        "--cluster",
        choices=RUN_CLUSTERS,
        default="local",
        help="with a batch system: print its job script too",
    )
    pl.add_argument("--json", action="store_true", help="print the points as JSON instead")
    pl.set_defaults(func=_one_line_errors(_cmd_plan))

    r = actions.add_parser(
        "run",
        help="run the points that are not done yet",
        description="Run every point of the scan that has no finished file in OUT, one Dask "
        "task per point (for an experiment: the fit, then the masked and denoising tasks), "
        "each writing one HDF5 file OUT/points/KEY.h5 named by the hash of its parameters. A "
        "point that raises is retried, then recorded as failed (OUT/points/KEY.error, with "
        "its traceback), and the scan goes on. Interrupt at any time: finished points are "
        "kept and the same command resumes.",
    )
    r.add_argument("scan", type=Path, help="scan file (TOML)")
    r.add_argument("--out", type=Path, required=True, help="scan directory")
    r.add_argument(
        "--cluster",
        choices=RUN_CLUSTERS,
        default="local",
        help="local: a Dask LocalCluster on this machine (default); serial: one point after "
        "the other in this process, no Dask; slurm/pbs/sge/lsf: batch jobs through "
        "dask-jobqueue, configured by the scan file's [cluster] table",
    )
    r.add_argument(
        "--scheduler", metavar="ADDRESS", help="an existing Dask scheduler (overrides --cluster)"
    )
    r.add_argument(
        "--workers",
        type=int,
        help="local: worker processes (default: one per core); batch: workers in all",
    )
    r.add_argument(
        "--threads-per-point",
        type=int,
        help="numba/torch threads of each point (default: cores per worker)",
    )
    r.add_argument("--retries", type=int, help="re-runs of a point that raises (default: scan's)")
    r.add_argument(
        "--force",
        action="store_true",
        help="use OUT even if it was made by a different scan file (shared points are kept)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=_one_line_errors(_cmd_run))

    c = actions.add_parser(
        "collect",
        help="gather the results into one dataset and draw phase diagrams",
        description="Read every finished point of the scan directory into one xarray Dataset "
        "with the scan's axes as dimensions (scalars and curves; missing points are NaN), "
        "save it as netCDF-4/HDF5 (h5netcdf), and draw phase diagrams: heat maps of the "
        "chosen variables over two axes, the other axes fixed (--fix) or reduced (--reduce). "
        "Defaults come from the scan file's [collect] table (x, y, variables, fix, reduce, "
        "include, format); flags override them.",
    )
    c.add_argument("dir", type=Path, help="scan directory")
    c.add_argument("--out", type=Path, help="dataset file (default: DIR/collected.nc)")
    c.add_argument(
        "--include",
        action="append",
        metavar="PATTERN",
        help="keep only the variables matching this glob pattern (repeatable)",
    )
    c.add_argument(
        "--var",
        action="append",
        metavar="NAME",
        help="draw this variable (repeatable; default: best_error, best_t, lifetime, "
        "n_attractors, mean_overlap where present)",
    )
    c.add_argument("--x", metavar="DIM", help="axis on the horizontal axis")
    c.add_argument("--y", metavar="DIM", help="axis on the vertical axis")
    c.add_argument(
        "--fix",
        action="append",
        metavar="DIM=VALUE",
        help="hold an axis at a value (repeatable; e.g. --fix t=10)",
    )
    c.add_argument(
        "--reduce",
        choices=("mean", "median", "min", "max"),
        help="how the other axes are reduced (default: mean)",
    )
    c.add_argument("--figures", type=Path, help="figure directory (default: DIR/figures)")
    c.add_argument("--format", help="figure format: png, pdf, svg (default png)")
    c.add_argument("--no-figures", action="store_true", help="save the dataset only")
    c.set_defaults(func=_one_line_errors(_cmd_collect))


def _cmd_plan(args) -> int:
    from spinsa.scan.spec import load_scan
    from spinsa.scan.store import ScanDir, ScanMismatchError

    spec = load_scan(args.scan)
    points = spec.points()
    status = None
    if args.out is not None and ScanDir(args.out).record.is_file():
        sd = ScanDir(args.out)
        if sd.read()[0].scan_hash != spec.scan_hash:
            raise ScanMismatchError(f"{args.out} holds a scan made by a different scan file")
        store = sd.points
        status = [
            "done" if store.file(p.key).exists() else "failed" if store.error(p.key) else "pending"
            for p in points
        ]
    if args.json:
        rows = [{"index": p.index, "coords": p.coords, "key": p.key} for p in points]
        for row, s in zip(rows, status or [], strict=False):
            row["status"] = s
        print(json.dumps({"scan_hash": spec.scan_hash, "points": rows}, indent=1))
        return 0
    dims = " × ".join(f"{a.name} ({a.size})" for a in spec.axes)
    print(f"scan {spec.name!r}: {len(points)} points = {dims}; point kind {spec.point!r}")
    print(f"scan hash {spec.scan_hash[:12]}")
    for a in spec.axes:
        if a.zipped:
            print(f"  {a.name}: zipped {', '.join(a.keys)}")
    table = [["#", *spec.dims, "key", *(["status"] if status else [])]]
    for i, p in enumerate(points):
        coords = [f"{v:g}" if isinstance(v, float) else str(v) for v in p.coords.values()]
        table.append([str(i), *coords, p.key, *([status[i]] if status else [])])
    if not args.all and len(table) > MAX_ROWS + 1:
        table = [*table[: MAX_ROWS - 4], ["..."], *table[-5:]]
    widths = [max(len(row[j]) for row in table if j < len(row)) for j in range(len(table[0]))]
    for row in table:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)).rstrip())
    if status:
        counts = {s: status.count(s) for s in ("done", "failed", "pending")}
        print("status: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if args.cluster not in ("local", "serial"):
        print(f"\n{_job_script(args.cluster, spec.cluster, args.out)}")
    return 0


def _job_script(cluster: str, options: dict, out: Path | None) -> str:
    """The job script ``spinsa scan run --cluster CLUSTER`` would submit (nothing is)."""
    import tempfile

    from spinsa.scan.run import jobqueue_cluster

    logs = (out if out is not None else Path("SCAN_DIR")) / "dask-logs"
    with tempfile.TemporaryDirectory() as tmp:  # dask-jobqueue creates its log directory
        jq, threads = jobqueue_cluster(cluster, options, log_directory=tmp)
        try:
            script = jq.job_script().replace(tmp, str(logs))
        finally:
            jq.close()
    return f"job script ({cluster}, {threads} threads per point):\n\n{script}"


def _cmd_run(args) -> int:
    from spinsa.scan.run import run_scan

    report = run_scan(
        args.scan,
        args.out,
        cluster=args.cluster,
        scheduler=args.scheduler,
        workers=args.workers,
        threads_per_point=args.threads_per_point,
        retries=args.retries,
        force=args.force,
        progress=not args.no_progress,
        log=print,
    )
    print(report)
    if report.n_failed:
        print("re-run the same command to retry the failed points after fixing their cause")
        return 1
    return 0


def _cmd_collect(args) -> int:
    from spinsa.scan.collect import COLLECTED_FILE, collect, draw_phase_diagrams
    from spinsa.scan.store import ScanDir

    defaults = ScanDir(args.dir).read()[0].collect  # the scan file's [collect] table
    fixed = dict(defaults.get("fix", {}))
    for item in args.fix or []:
        dim, sep, value = item.partition("=")
        if not sep or not dim:
            raise ValueError(f"--fix takes DIM=VALUE, got {item!r}")
        try:
            fixed[dim] = json.loads(value)
        except json.JSONDecodeError:  # a string coordinate, written bare
            fixed[dim] = value
    out = args.out if args.out is not None else args.dir / COLLECTED_FILE
    include = args.include if args.include is not None else defaults.get("include")
    ds = collect(args.dir, out.resolve(), include=include)
    print(
        f"{ds.attrs['n_done']}/{ds.attrs['n_points']} points collected into {out} "
        f"({len(ds.data_vars) - 2} variables over {', '.join(map(str, ds.dims))})"
    )
    if args.no_figures:
        return 0

    def option(name: str, default=None):
        value = getattr(args, name)
        return value if value is not None else defaults.get(name, default)

    paths = draw_phase_diagrams(
        ds,
        args.figures if args.figures is not None else args.dir / "figures",
        args.var if args.var is not None else defaults.get("variables"),
        x=option("x"),
        y=option("y"),
        fixed=fixed,
        reduce=option("reduce", "mean"),
        fmt=option("format", "png"),
    )
    for path in paths:
        print(f"  {path}")
    return 0
