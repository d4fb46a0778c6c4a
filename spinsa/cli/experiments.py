"""``spinsa train``, ``evaluate``, ``reproduce``, ``analyze``, ``compare`` and ``plot``.

::

    spinsa train analysis/configs/experiment.toml --out run.h5
    spinsa train --dataset mnist --per-class 1000 --lam 5 --out run.h5 --set fit.max_iter=40
    spinsa train --patterns xi.npy --backend lbfgs --set fit.constraint=row --out fit.h5
    spinsa train --random-patterns 200 16 6 --estimate --out fit.h5
    spinsa evaluate run.h5 --task masked --steps 100
    spinsa reproduce --quick --out runs/reproduce-quick
    spinsa analyze run.h5 && spinsa plot run.h5
    spinsa compare design.h5 notebook.h5 -o runs/compare

The handlers import the pipeline lazily, so that ``spinsa --help`` stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from spinsa._config import parse_assignments
from spinsa._files import refuse_existing
from spinsa.cli._common import UsageError, add_progress_flag

__all__ = [
    "add_train",
    "add_evaluate",
    "add_reproduce",
    "add_analyze",
    "add_compare",
    "add_plot",
]

PATTERN_KEYS = ("xi", "patterns", "x")  # array names tried in a patterns file, in order

# ---------------------------------------------------------------------------- train
_TRAIN_FLAGS = [
    # flag, dotted key, type, help
    ("--name", "name", str, "label of the model"),
    ("--dataset", "data.dataset", str, "mnist, fashion-mnist or synthetic"),
    ("--n-train", "data.n_train", int, "a random subset of this many training images"),
    ("--per-class", "data.per_class", int, "this many training images per class"),
    ("--n-test", "data.n_test", int, "test images used by a later evaluate (default 1000)"),
    ("--data-seed", "data.seed", int, "seed of the subsets (and of random patterns)"),
    ("--patch", "embedding.patch", int, "patch side (default 2)"),
    ("--dim", "embedding.d", int, "spin dimension d (default 2 * patch**2)"),
    ("--lam", "fit.lam", float, "lambda_train (default 5)"),
    ("--backend", "fit.backend", str, "lbfgs or torch (default lbfgs)"),
    ("--epochs", "fit.epochs", int, "epochs of the torch backend"),
    ("--batch-size", "fit.batch_size", int, "minibatch size of the torch backend"),
    ("--lr", "fit.lr", float, "learning rate of the torch backend"),
    ("--max-iter", "fit.max_iter", int, "iterations of the lbfgs backend"),
    (
        "--validation-fraction",
        "fit.validation_fraction",
        float,
        "training patterns held out for the validation curve of the torch backend (default 0; "
        "--set fit.early_stopping=true stops on its plateau)",
    ),  # fmt: skip
    ("--fit-seed", "fit.seed", int, "seed of the initial couplings"),
    ("--lam-eval", "dynamics.lam_eval", float, "lambda_eval of a later evaluate (default 1)"),
]


def add_train(sub) -> None:
    """Declare ``spinsa train`` (a pseudo-likelihood fit) on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "train",
        help="fit the couplings by pseudo-likelihood (an experiment's images, or patterns)",
        description="Fit the couplings J by pseudo-likelihood (closed-form gradient, no "
        "backpropagation). By default the patterns are an experiment's training images, from "
        "CONFIG (TOML with [data], [embedding], [fit], [dynamics], [tasks]; see "
        "analysis/configs/) and/or flags, flags winning; the result is a run file (J, the "
        "fit history, the mean training image and the whole config) for `spinsa evaluate`. "
        "With --patterns FILE or --random-patterns P N D the patterns are given spins "
        "instead and only the [fit] section applies; the result is a fit file (J and the "
        "history). --set KEY=VALUE changes any key by its dotted name. An interrupted fit "
        "resumes from its checkpoint (OUT.ckpt.h5) when run again.",
    )
    p.add_argument("config", nargs="?", type=Path, help="experiment config (TOML)")
    p.add_argument("-o", "--out", type=Path, required=True, help="file to write (.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.add_argument(
        "--preset",
        choices=("damico2024",),
        help="the published notebook's recipe throughout: its embedding scale, fit preset "
        "and dynamics",
    )
    for flag, key, kind, text in _TRAIN_FLAGS:
        p.add_argument(
            flag,
            dest=key.replace(".", "__"),
            type=kind,
            metavar=kind.__name__.upper(),
            help=f"{text} [{key}]",
        )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="any config key by dotted name, e.g. --set fit.constraint=row (repeatable)",
    )
    given = p.add_mutually_exclusive_group()
    given.add_argument(
        "--patterns", type=Path, help="fit these spins (P, N, d): a .npy, .npz or .h5 file"
    )
    given.add_argument(
        "--random-patterns",
        type=int,
        nargs=3,
        metavar=("P", "N", "D"),
        help="fit P random unit spin patterns of N tokens in d dimensions (seed: --data-seed)",
    )
    p.add_argument(
        "--key",
        help=f"array of a --patterns file (default: {'/'.join(PATTERN_KEYS)} or the only one)",
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="print the fit's memory estimate (from the sizes alone) and exit",
    )
    p.add_argument("--no-checkpoint", action="store_true", help="do not checkpoint the fit")
    add_progress_flag(p)
    p.set_defaults(func=_cmd_train)


def _train_config(args):
    from spinsa.experiments.config import ExperimentConfig

    config = ExperimentConfig.from_toml(args.config) if args.config else ExperimentConfig()
    presets = ("fit.preset", "embedding.scale", "dynamics.preset")
    overrides = dict.fromkeys(presets, args.preset) if args.preset else {}
    for _flag, key, _kind, _text in _TRAIN_FLAGS:
        value = getattr(args, key.replace(".", "__"))
        if value is not None:
            overrides[key] = value
    overrides.update(parse_assignments(args.set))
    return config.with_overrides(overrides) if overrides else config


def _pattern_source(path: Path, key: str | None):
    """``(shape, load)`` of the patterns array of a .npy, .npz or HDF5 file (shape first:
    an estimate needs no data)."""
    if not path.is_file():
        raise FileNotFoundError(f"patterns file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        shape = np.load(path, mmap_mode="r").shape
        return shape, lambda: np.load(path, allow_pickle=False)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            name = _pick(list(z.files), key, path)
            array = np.asarray(z[name])
        return array.shape, lambda: array
    if suffix in (".h5", ".hdf5"):
        import h5py

        with h5py.File(path, "r") as f:
            names: list[str] = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            name = _pick(names, key, path)
            shape = f[name].shape

        def load():
            with h5py.File(path, "r") as f:
                return np.asarray(f[name][()])

        return shape, load
    raise UsageError(f"patterns file {path}: unknown format {suffix!r}; use .npy, .npz or .h5")


def _pick(names: list[str], key: str | None, path: Path) -> str:
    if key is not None:
        if key not in names:
            raise UsageError(f"{path} has no array {key!r}; its arrays: {names}")
        return key
    for k in PATTERN_KEYS:
        if k in names:
            return k
    if len(names) == 1:
        return names[0]
    raise UsageError(f"{path} holds several arrays {names}; say which with --key")


def _cmd_train(args) -> int:
    from spinsa.fit.memory import estimate_memory

    config = _train_config(args)
    out = args.out
    if not args.overwrite and not args.estimate:
        refuse_existing(out, "--overwrite")
    if args.patterns is not None:
        shape, load = _pattern_source(args.patterns, args.key)
        source = {"data.path": str(args.patterns.resolve()), "data.key": args.key}
    elif args.random_patterns is not None:
        from spinsa.datasets import random_patterns

        shape = tuple(args.random_patterns)
        seed = config.data.seed
        source = {"data.random_patterns": list(shape), "data.seed": seed}

        def load():
            return random_patterns(*shape, seed=seed)
    else:
        emb = config.make_embedding()
        shape = (config.data.n_train_images or 60_000, emb.n_tokens, emb.d)
        source = None
    if len(shape) != 3:
        raise UsageError(f"the patterns must have shape (P, N, d), got {shape}")
    estimate = estimate_memory(*shape, config=config.fit)
    if args.estimate:
        print(
            f"spinsa train: P = {shape[0]}, N = {shape[1]}, d = {shape[2]}, backend "
            f"{config.fit.backend}: {estimate}"
        )
        return 0
    if config.fit.check_memory:
        estimate.check()  # before the data are built or loaded
    checkpoint = None if args.no_checkpoint else out.with_name(out.name + ".ckpt.h5")
    if checkpoint is not None and checkpoint.exists():
        print(f"spinsa train: resuming the fit from {checkpoint}")
    t0 = time.perf_counter()
    progress = not args.no_progress
    from spinsa.fit.convergence import convergence_words

    unit = "epochs" if config.fit.backend == "torch" else "iterations"
    if source is None:  # an experiment: its training images
        from spinsa import io
        from spinsa.experiments.pipeline import train

        train(config, out, overwrite=args.overwrite, checkpoint=checkpoint, progress=progress)
        a = io.read(out).attrs
        loss, first, steps = a["fit_loss"], a["fit_initial_loss"], a["fit_n_steps"]
        what = f"{a['n_train']} images"
        record = {k: a.get(f"fit_{k}") for k in ("converged", "criterion", "iterations")}
        ended = convergence_words({**record, "message": a.get("fit_message")}, unit)
    else:
        from spinsa.fit import fit_pseudolikelihood, save_fit

        xi = load()
        result = fit_pseudolikelihood(
            xi, config=config.fit, checkpoint=checkpoint, progress=progress
        )
        sizes = dict(zip(("n_samples", "n_tokens", "d"), map(int, xi.shape), strict=True))
        save_fit(out, result, overwrite=args.overwrite, attrs={**source, **sizes})
        if checkpoint is not None:
            checkpoint.unlink(missing_ok=True)
        loss, first, steps = result.loss, result.epoch_loss[0], result.n_steps
        what = f"{xi.shape[0]} patterns"
        ended = result.convergence_line()
    print(
        f"spinsa train: {config.name}: L = {loss:.6g} (from {first:.6g}), {steps} steps on "
        f"{what}, {time.perf_counter() - t0:.1f} s; {ended}; wrote {out}"
    )
    return 0


# ---------------------------------------------------------------------------- evaluate
def add_evaluate(sub) -> None:
    """Declare ``spinsa evaluate`` (the dynamics of a run file on a task) on the subcommand
    parsers ``sub``."""
    p = sub.add_parser(
        "evaluate",
        help="run the dynamics of a run file on a task and store the errors at every t",
        description="Run the dynamics of a run file (written by `spinsa train`) on the "
        "masked-prediction or denoising task over the test set; store the per-image "
        "mean squared error over all, masked and visible pixels at every t = 0..T, their "
        "means and standard errors, example images and the correlation of the states with "
        "the mean training image in the group /evaluation/<task> of the run file (or in "
        "--out).",
    )
    p.add_argument("run", type=Path, help="run file (.h5) from spinsa train")
    p.add_argument(
        "--task",
        choices=("masked", "denoise", "both"),
        required=True,
        help="which task ('both' runs the two)",
    )
    p.add_argument("--steps", type=int, help="T (default: the config's dynamics.steps)")
    p.add_argument("--n-test", type=int, help="test images (default: the config's data.n_test)")
    p.add_argument("--out", type=Path, help="write the evaluation to this file instead")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing evaluation of the task"
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        default=1000,
        help="images iterated at once (memory only; default 1000)",
    )
    _add_device_flag(p)
    add_progress_flag(p)
    p.set_defaults(func=_cmd_evaluate)


def _add_device_flag(p) -> None:
    p.add_argument(
        "--device",
        metavar="DEVICE",
        help="where the dynamics runs: numba (the CPU kernels), cpu or cuda / cuda:<k> (torch "
        "there), auto (CUDA when torch sees a GPU, else numba); default: the config's "
        "dynamics.device (numba unless set)",
    )


def _cmd_evaluate(args) -> int:
    from spinsa.analysis.summary import SIGNIFICANT_Z, read_summaries
    from spinsa.experiments.pipeline import TASKS, evaluate, load_images, read_run_config
    from spinsa.io.results import check_evaluations
    from spinsa.references import REFERENCES

    tasks = TASKS if args.task == "both" else (args.task,)
    if args.out is not None and len(tasks) > 1:
        raise ValueError("--out holds one task's evaluation; give --task masked or denoise")
    # a file whose other evaluations are malformed is refused before any work; those about
    # to be replaced are not read
    replaced = [f"evaluation/{t}" for t in tasks] if args.overwrite and args.out is None else []
    check_evaluations(args.run, skip=tuple(replaced))
    config = read_run_config(args.run)
    if args.n_test is not None:
        config = config.with_overrides({"data.n_test": args.n_test})
    images = load_images(config)
    for task in tasks:
        t0 = time.perf_counter()
        path = evaluate(
            args.run,
            task,
            args.steps,
            n_test=args.n_test,
            out=args.out,
            overwrite=args.overwrite,
            chunk_size=args.chunk_size,
            progress=not args.no_progress,
            images=images,
            device=args.device,
        )
        s = read_summaries(path, tasks=(task,))[task]
        print(
            f"spinsa evaluate: {task}: error {s['error_t0']:.4f} at t = 0, "
            f"{s['error_t1']:.4f} at t = 1, best {s['best_error']:.4f} at t = {s['best_t']}, "
            f"{s['error_T']:.4f} at t = {s['T']}; late states vs the mean training image: "
            f"r = {s['corr_T']:.3f} ({time.perf_counter() - t0:.1f} s); wrote {path}"
        )
        best = s["best_reference"]
        verdict = f"beats it (more than {SIGNIFICANT_Z:g} standard errors below)"
        if not s["transient_memory"]:
            verdict = f"does not beat it by more than {SIGNIFICANT_Z:g} standard errors"
        print(
            f"  best reference: {REFERENCES[task][best]}, {s['references'][best]['error']:.4f}; "
            f"the model {verdict}"
        )
    return 0


# ---------------------------------------------------------------------------- reproduce
def add_reproduce(sub) -> None:
    """Declare ``spinsa reproduce`` (the paper's experiment end to end) on the subcommand
    parsers ``sub``."""
    p = sub.add_parser(
        "reproduce",
        help="the paper's bare-self-attention experiment end to end (Fig. 1 and a report)",
        description="Fit bare self-attention on MNIST (2x2 patches, d = 8, lambda_train = 5) "
        "with the eq. 1 dynamics of docs/model.md and with the published notebook's preset, "
        "evaluate masked "
        "prediction (30% of tokens) and denoising (noise variance 0.7) over t = 0..100 "
        "(lambda_eval = 1) on the test set, and write reproduce.h5, the figures and "
        "report.md. --quick: 10,000 training and 1,000 test images (minutes); otherwise "
        "50,000 and 10,000. MNIST is fetched into the cache on first use. Each stage is "
        "written as it finishes; run the same command again after an interruption and it "
        "resumes from the finished stages.",
    )
    p.add_argument(
        "--quick", action="store_true", help="the quick configuration (10,000 / 1,000 images)"
    )
    p.add_argument(
        "-o",
        "--out",
        type=Path,
        help="output directory (default runs/reproduce-quick or runs/reproduce-full)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a directory that holds a finished run (or another "
        "configuration's partial run): its stage files are deleted",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="a reproduce config (TOML: shared sections and [models.<name>] "
        "tables; see analysis/configs/reproduce_quick.toml) instead of the paper's",
    )
    add_progress_flag(p)
    _add_device_flag(p)
    p.add_argument(
        "--baselines",
        choices=("quick", "cpu", "paper", "none"),
        help="the backprop baselines (recycled block and ViT; they need torch), each trained "
        "until the stopping rule holds (docs/convergence.md): 'quick', width 32 on 3,000 "
        "images (minutes); 'cpu', the CPU recipe (width 64 on 20,000 images and the block on "
        "2x2 patches; about 2 hours on 2 cores; the default of a paper-size run); 'paper', "
        "the paper's 100-epoch recipe (for a GPU); 'none'. A --quick run leaves them out "
        "unless asked",
    )
    p.set_defaults(func=_cmd_reproduce)


def _cmd_reproduce(args) -> int:
    from spinsa.experiments.reproduce import reproduce

    if args.config is not None and args.quick:
        raise ValueError("give --quick or --config, not both (the config sets the sizes)")
    default = args.config.stem if args.config else f"reproduce-{'quick' if args.quick else 'full'}"
    reproduce(
        args.out or Path("runs") / default,
        quick=args.quick,
        overwrite=args.overwrite,
        config=args.config,
        progress=not args.no_progress,
        baselines=True if args.baselines is None else args.baselines,
        device=args.device,
    )
    return 0


# --------------------------------------------------------------------------- analyze
_ANALYZE_FLAGS = {  # flag: (field of AnalysisSettings, help)
    "--n-test": ("n_test", "test images started from"),
    "--steps": ("steps", "steps T of the trajectories"),
    "--attractor-steps": (
        "attractor_steps",
        "the most steps of the attractor search, whose starts run until converged",
    ),
    "--attractor-starts": (
        "n_attractor_starts",
        "starts per group (test, masked, noisy, random) of the attractor search",
    ),
    "--seed": ("seed", "seed of the corruptions and random starts"),
}


def add_analyze(sub) -> None:
    """Declare ``spinsa analyze`` (the analyses of a run file) on the subcommand parsers
    ``sub``."""
    from spinsa.experiments.analyze import ANALYSES, AnalysisSettings

    d = AnalysisSettings()
    listing = "; ".join(f"{name}: {a.help}" for name, a in ANALYSES.items())
    p = sub.add_parser(
        "analyze",
        help="run the analyses of a run file and store them in it (/analysis/<name>)",
        description="Rebuild the data of a run file (written by `spinsa train`) from its "
        "config, run the analyses with its couplings and dynamics, and write each result "
        "under /analysis/<name> of the same file, with its parameters as attributes. "
        f"The analyses: {listing}. Plot them with `spinsa plot`.",
    )
    p.add_argument("run", help="run file (.h5) from spinsa train")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help=f"run only these analyses (of: {', '.join(ANALYSES)})",
    )
    for flag, (field, text) in _ANALYZE_FLAGS.items():
        default = getattr(d, field)
        metavar = flag[2:].upper().replace("-", "_")
        p.add_argument(
            flag,
            dest=field,
            type=int,
            default=default,
            metavar=metavar,
            help=f"{text} (default {default})",
        )
    p.add_argument(
        "--overwrite", action="store_true", help="replace analyses the file already holds"
    )
    add_progress_flag(p)
    p.set_defaults(func=_cmd_analyze)


def _cmd_analyze(args) -> int:
    from spinsa.experiments.analyze import analyze_run

    t0 = time.perf_counter()
    names = analyze_run(
        args.run,
        args.only,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        **{field: getattr(args, field) for field, _ in _ANALYZE_FLAGS.values()},
    )
    groups = sorted({n.split("/")[0] for n in names})
    print(
        f"spinsa analyze: wrote {len(names)} results ({', '.join(groups)}) under /analysis "
        f"of {args.run} in {time.perf_counter() - t0:.1f} s"
    )
    return 0


# --------------------------------------------------------------------------- compare
def add_compare(sub) -> None:
    """Declare ``spinsa compare`` (several couplings side by side) on the subcommand parsers
    ``sub``."""
    from spinsa.experiments.compare import N_DATA

    p = sub.add_parser(
        "compare",
        help="compare the couplings and evaluations of two or more run files",
        description="Compare K >= 2 run files fitted on the same data and embedding "
        "(written by `spinsa train`, `spinsa reproduce`'s fit-<model>.h5 or run_experiment): "
        "the cosine similarity of their couplings, globally and per pair of tokens; the "
        "spectra of each J and of its symmetrised part; the coupling strength against the "
        "distance on the image grid; the attention entropy and the pseudo-likelihood each "
        "reaches on the data; and, from the evaluations stored in the files, the best error "
        "of each task against the simple references (a model beats one only when it is "
        "below it by more than 3 combined standard errors), the lifetime of the transient "
        "and the attractors. Writes OUT_DIR/compare.h5 (read it back with "
        "spinsa.analysis.load_analysis), one PNG figure per quantity and OUT_DIR/report.md. "
        "Models are labelled by their run's name.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run files (.h5), two or more")
    p.add_argument(
        "-o", "--out", type=Path, required=True, metavar="OUT_DIR", help="output directory"
    )
    p.add_argument(
        "--n-data",
        type=int,
        default=N_DATA,
        metavar="INT",
        help="training and test images for the entropy and the pseudo-likelihood "
        f"(default {N_DATA})",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace a comparison already in OUT_DIR"
    )
    add_progress_flag(p)
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args) -> int:
    from spinsa.experiments.compare import compare_runs

    t0 = time.perf_counter()
    result = compare_runs(
        args.runs,
        args.out,
        n_data=args.n_data,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(
        f"spinsa compare: {', '.join(result.names)} in {time.perf_counter() - t0:.1f} s; "
        f"wrote {result.h5}, {result.report} and {len(result.figures)} figures"
    )
    return 0


# --------------------------------------------------------------------------- plot
DPI_MAX = 1200  # print quality is 300-600; beyond this a figure needs gigabytes


def add_plot(sub) -> None:
    """Declare ``spinsa plot`` (the figures of a run file or a scan) on the subcommand parsers
    ``sub``."""
    p = sub.add_parser(
        "plot",
        help="draw the figures of a run file or of a collected scan",
        description="Draw every figure a run file has data for: the error curves and "
        "example images of its evaluations (spinsa evaluate) and one figure per analysis "
        "(spinsa analyze); or, for a scan directory, its phase diagrams from the dataset of "
        "spinsa scan collect, as its [collect] table says. Figures read files only; nothing "
        "is recomputed.",
    )
    p.add_argument("run", help="run file (.h5), or a collected scan directory")
    p.add_argument(
        "-o",
        "--out",
        help="directory of the figures (default: <run>-figures next to a run file, DIR/figures "
        "in a scan directory)",
    )
    p.add_argument("--format", help="png (default, or a scan's [collect] format), pdf or svg")
    p.add_argument(
        "--dpi", type=int, default=150, help=f"resolution, 10 to {DPI_MAX} (default 150)"
    )
    add_progress_flag(p)
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args) -> int:
    from spinsa.plotting import plot_run

    if not 10 <= args.dpi <= DPI_MAX:  # checked before a figure of billions of pixels
        raise UsageError(f"--dpi must be between 10 and {DPI_MAX}, got {args.dpi}")
    run = Path(args.run)
    if (run / "scan.json").is_file():  # a scan directory: its phase diagrams
        from spinsa.cli.scan import draw_figures
        from spinsa.scan.results import COLLECTED_FILE, open_collected
        from spinsa.scan.store import ScanDir

        if not (run / COLLECTED_FILE).is_file():
            raise UsageError(f"{run} holds no {COLLECTED_FILE}: run spinsa scan collect first")
        out = Path(args.out) if args.out else run / "figures"
        draw_figures(open_collected(run), out, ScanDir(run).read()[0].collect, args)
        return 0
    paths = plot_run(
        args.run, args.out, fmt=args.format or "png", dpi=args.dpi, progress=not args.no_progress
    )
    print(
        f"spinsa plot: {len(paths)} figures in {paths[0].parent}: "
        + ", ".join(p.name for p in paths)
    )
    return 0
