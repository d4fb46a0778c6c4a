"""``spinsa scan plan|run|collect``: phase scans from the command line.

::

    spinsa scan plan scan.toml                     # the points and their files; runs nothing
    spinsa scan run scan.toml --out runs/scan      # on a Dask LocalCluster (one worker per core)
    spinsa scan run scan.toml --out runs/scan --cluster slurm      # the same, on SLURM
    spinsa scan run scan.toml --out runs/scan --scheduler tcp://host:8786
    spinsa scan collect runs/scan --x alpha --y dynamics.lam       # dataset + phase diagrams

Re-running ``spinsa scan run`` with the same arguments runs only the points that are missing.
Errors a user can fix are raised as ``ValueError``, a missing optional dependency as
:class:`~spinsa.scan.MissingDependencyError` (``spinsa`` prints either in one line and exits
with status 2).
"""

from __future__ import annotations

from pathlib import Path

from spinsa._config import parse_assignments
from spinsa.cli._common import add_progress_flag
from spinsa.plotting.scan import REDUCTIONS
from spinsa.scan.results import COLLECTED_FILE
from spinsa.scan.run import CLUSTERS

__all__ = ["add_scan", "draw_figures"]


def add_scan(sub) -> None:
    """Declare ``spinsa scan`` and its actions on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "scan",
        help="phase scans: plan, run (locally or on a cluster) and collect",
        description="Scan a base experiment over grids of parameters (a TOML scan file), one "
        "HDF5 file per point, on the local machine, a batch system (SLURM, PBS, SGE, LSF) "
        "through dask-jobqueue, or a running Dask scheduler. Re-running a scan runs only its "
        "missing points.",
    )
    p.set_defaults(func=lambda args: p.print_help() or 0)
    actions = p.add_subparsers(title="actions", metavar="ACTION")

    pl = actions.add_parser(
        "plan",
        help="check the scan and print its points, without running",
        description="Expand the scan file and check every point's config; print each point's "
        "file name (the hash of its parameters) and coordinates, with --out whether it is "
        "done, and with --cluster slurm|pbs|sge|lsf the job script `run` would submit.",
    )
    pl.add_argument("scan", type=Path, help="scan file (TOML)")
    pl.add_argument("--out", type=Path, help="scan directory: show which points are done")
    pl.add_argument("--cluster", choices=CLUSTERS, default="local", help="batch system")
    _add_set(pl)
    pl.set_defaults(func=_cmd_plan)

    r = actions.add_parser(
        "run",
        help="run the points that are not done yet",
        description="Run every point of the scan that has no finished file OUT/points/KEY.h5 "
        "(KEY: the hash of its parameters), one Dask task per point. A point that raises is "
        "retried, then recorded as failed (OUT/points/KEY.error, with its traceback), and the "
        "scan goes on. Interrupt at any time: the same command resumes.",
    )
    r.add_argument("scan", type=Path, help="scan file (TOML)")
    r.add_argument("--out", type=Path, required=True, help="scan directory")
    r.add_argument(
        "--cluster",
        choices=CLUSTERS,
        default="local",
        help="local: a Dask LocalCluster (default); serial: one point after the other in this "
        "process; slurm/pbs/sge/lsf: batch jobs set up by the scan file's [cluster] table",
    )
    r.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler")
    r.add_argument("--workers", type=int, help="local: processes (one per core); batch: in all")
    r.add_argument("--threads-per-point", type=int, help="default: cores per worker")
    r.add_argument("--retries", type=int, help="re-runs of a point that raises")
    r.add_argument("--force", action="store_true", help="take OUT over from another scan")
    add_progress_flag(r)
    _add_set(r)
    r.set_defaults(func=_cmd_run)

    c = actions.add_parser(
        "collect",
        help="gather the results into one dataset and draw phase diagrams",
        description="Read the finished points into one xarray Dataset over the scan's axes "
        "(missing points are NaN), save it as DIR/collected.nc (netCDF-4 via h5netcdf), and "
        "draw heat maps of the chosen variables over two axes, the other axes fixed (--fix) "
        "or reduced (--reduce). The scan file's [collect] table gives the defaults.",
    )
    c.add_argument("dir", type=Path, help="scan directory")
    c.add_argument("--include", action="append", metavar="GLOB", help="keep matching variables")
    c.add_argument("--var", action="append", dest="variables", metavar="NAME", help="draw it")
    c.add_argument("--x", metavar="DIM", help="axis on the horizontal axis")
    c.add_argument("--y", metavar="DIM", help="axis on the vertical axis")
    c.add_argument("--fix", action="append", metavar="DIM=VALUE", help="e.g. --fix t=10")
    c.add_argument("--reduce", choices=REDUCTIONS, help="default: mean")
    c.add_argument("--figures", type=Path, help="figure directory (default: DIR/figures)")
    c.add_argument("--format", help="figure format: png (default), pdf, svg")
    c.add_argument("--no-figures", action="store_true", help="save the dataset only")
    c.set_defaults(func=_cmd_collect)


def _add_set(parser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change a value of the base config, e.g. --set data.n_test=10000 (repeatable; "
        "the value is read as JSON, else as a string); a changed scan needs its own --out",
    )


def _load(args):
    """The scan file's ScanSpec, with the --set changes to its base."""
    from spinsa.scan.spec import load_scan

    spec = load_scan(args.scan)
    changes = parse_assignments(args.set)
    axes = {key for axis in spec.axes for key in axis.keys} & set(changes)
    if axes:
        raise ValueError(f"--set changes {sorted(axes)}, which an axis sets; change the axis")
    return spec.with_base(changes) if changes else spec


def _cmd_plan(args) -> int:
    from spinsa.scan.kinds import point_kind
    from spinsa.scan.store import ScanDir, ScanMismatchError

    spec = _load(args)
    points = spec.points()  # checks every point's config
    status = [""] * len(points)
    sd = ScanDir(args.out) if args.out is not None else None
    if sd is not None and sd.record.is_file():
        if sd.read()[0].scan_hash != spec.scan_hash:
            raise ScanMismatchError(f"{args.out} holds a scan made by a different scan file")
        store = sd.points
        status = [_point_status(store, p.key) for p in points]
    dims = " × ".join(f"{a.name} ({a.size})" for a in spec.axes)
    print(f"scan {spec.name!r}: {len(points)} points = {dims}; point kind {spec.point!r}")
    kind = point_kind(spec.point)  # points() checked that it resolves
    n_distinct = len({p.key for p in points})
    n_fits = len({kind.fit_key(p.config) for p in points}) if kind.fit else 0
    if n_distinct < len(points) or n_fits:
        fits = (
            f" and {n_fits} fits, each shared by the points with its fit config" if n_fits else ""
        )
        print(f"  {n_distinct} distinct points to run{fits}")
    for a in (a for a in spec.axes if a.zipped):
        print(f"  {a.name}: zipped {', '.join(a.keys)}")
    for i, (p, s) in enumerate(zip(points, status, strict=True)):
        coords = ", ".join(
            f"{d}={v:g}" if isinstance(v, float) else f"{d}={v}" for d, v in p.coords.items()
        )
        print(f"{i:>5}  {p.key}  {coords}  {s}".rstrip())
    if any(status):
        print(
            "status: "
            + ", ".join(f"{status.count(s)} {s}" for s in ("done", "failed", "pending", "damaged"))
        )
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
    plural = "" if threads == 1 else "s"
    return f"job script ({cluster}, {threads} thread{plural} per point):\n\n{script}"


def _cmd_run(args) -> int:
    from spinsa.scan.run import run_scan

    report = run_scan(
        _load(args),
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
    from spinsa.scan.results import collect
    from spinsa.scan.store import ScanDir

    defaults = ScanDir(args.dir).read()[0].collect  # the scan file's [collect] table
    ds = collect(args.dir, include=args.include or defaults.get("include"))
    print(
        f"{ds.attrs['n_done']}/{ds.attrs['n_points']} points collected into "
        f"{args.dir / COLLECTED_FILE} ({len(ds.data_vars) - 2} variables over "
        f"{', '.join(map(str, ds.dims))})"
    )
    if not args.no_figures:
        draw_figures(ds, args.figures or args.dir / "figures", defaults, args)
    return 0


def draw_figures(ds, out_dir: Path, table: dict, args) -> None:
    """The figures of ``spinsa scan collect`` and of ``spinsa plot SCAN_DIR``, into
    ``out_dir``: the scan's [collect] ``table``, with the options given in ``args`` on top."""
    from spinsa.plotting.scan import draw_scan_figures

    names = ("variables", "x", "y", "reduce", "format")
    options = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    fixed = {**table.get("fix", {}), **parse_assignments(getattr(args, "fix", None), "--fix")}
    for path in draw_scan_figures(ds, out_dir, {**table, **options, "fix": fixed}):
        print(f"  {path}")


def _point_status(store, key: str) -> str:
    """done, failed, pending or damaged (a torn file the next run redoes); reads only."""
    from spinsa.experiments.stages import stage_state

    state = stage_state(store.file(key))
    if state == "missing":
        return "failed" if store.error(key) else "pending"
    return state
