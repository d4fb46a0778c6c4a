"""``spinsa train``, ``spinsa evaluate`` and ``spinsa reproduce``.

::

    spinsa train analysis/configs/experiment.toml --out run.h5
    spinsa train --dataset mnist --per-class 1000 --lam 5 --out run.h5 --set fit.max_iter=40
    spinsa evaluate run.h5 --task masked --steps 100
    spinsa reproduce --quick --out runs/reproduce-quick

The parsers are declared here and registered in :mod:`spinsa.cli`; the handlers import the
pipeline lazily.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["add_train_parser", "add_evaluate_parser", "add_reproduce_parser", "parse_set"]


def parse_set(items: list[str] | None) -> dict:
    """``["fit.lam=5", "name=x"]`` -> ``{"fit.lam": 5, "name": "x"}``; values are TOML
    literals (``5``, ``5.0``, ``true``, ``"text"``, ``[0, 1]``), bare words are strings."""
    from spinsa.experiments.config import read_toml

    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE (e.g. fit.lam=5), got {item!r}")
        try:
            value = read_toml(f"v = {text.strip()}\n")["v"]
        except ValueError:
            value = text.strip()
        out[key] = value
    return out


# ---------------------------------------------------------------------------- train
_TRAIN_FLAGS = [
    # flag, dotted key, type, help
    ("--name", "name", str, "label of the model"),
    ("--dataset", "data.dataset", str, "mnist, fashion-mnist or synthetic"),
    ("--n-train", "data.n_train", int, "a random subset of this many training images"),
    ("--per-class", "data.per_class", int, "this many training images per class"),
    ("--n-test", "data.n_test", int, "test images used by a later evaluate (default 1000)"),
    ("--data-seed", "data.seed", int, "seed of the subsets"),
    ("--patch", "embedding.patch", int, "patch side (default 2)"),
    ("--dim", "embedding.d", int, "spin dimension d (default 2 * patch**2)"),
    ("--lam", "fit.lam", float, "lambda_train (default 5)"),
    ("--backend", "fit.backend", str, "lbfgs or torch (default lbfgs)"),
    ("--epochs", "fit.epochs", int, "epochs of the torch backend"),
    ("--max-iter", "fit.max_iter", int, "iterations of the lbfgs backend"),
    ("--fit-seed", "fit.seed", int, "seed of the initial couplings"),
    ("--lam-eval", "dynamics.lam_eval", float, "lambda_eval of a later evaluate (default 1)"),
]


def add_train_parser(sub) -> None:
    """Declare ``spinsa train``."""
    p = sub.add_parser(
        "train",
        help="fit the couplings of an experiment (TOML config or flags) into a run file",
        description="Fit the couplings J of an experiment by pseudo-likelihood and write a run "
        "file (HDF5: J, the fit history, the mean training image and the whole config), to be "
        "evaluated with `spinsa evaluate`. The experiment comes from CONFIG (TOML with "
        "[data], [embedding], [fit], [dynamics], [tasks]; see analysis/configs/) and/or "
        "flags, flags winning; --set KEY=VALUE changes any key by its dotted name. An "
        "interrupted fit resumes from its checkpoint (OUT.ckpt.h5) when run again.",
    )
    p.add_argument("config", nargs="?", type=Path, help="experiment config (TOML)")
    p.add_argument("-o", "--out", type=Path, required=True, help="run file to write (.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run file")
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
    p.add_argument("--no-checkpoint", action="store_true", help="do not checkpoint the fit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)


def _train_config(args):
    from spinsa.experiments.config import ExperimentConfig

    config = ExperimentConfig.from_toml(args.config) if args.config else ExperimentConfig()
    overrides = {}
    if args.preset == "damico2024":
        overrides.update(
            {
                "fit.preset": "damico2024",
                "embedding.scale": "damico2024",
                "dynamics.preset": "damico2024",
            }
        )
    for _flag, key, _kind, _text in _TRAIN_FLAGS:
        value = getattr(args, key.replace(".", "__"))
        if value is not None:
            overrides[key] = value
    overrides.update(parse_set(args.set))
    return config.with_overrides(overrides) if overrides else config


def _cmd_train(args) -> int:
    import time

    from spinsa.experiments.pipeline import train

    config = _train_config(args)
    out = args.out
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    checkpoint = None if args.no_checkpoint else out.with_name(out.name + ".ckpt.h5")
    if checkpoint is not None and checkpoint.exists():
        print(f"spinsa train: resuming the fit from {checkpoint}")
    t0 = time.perf_counter()
    train(
        config, out, overwrite=args.overwrite, checkpoint=checkpoint, progress=not args.no_progress
    )
    from spinsa import io

    a = io.read(out).attrs
    print(
        f"spinsa train: {config.name}: L = {a['fit_loss']:.6g} (from "
        f"{a['fit_initial_loss']:.6g}), {a['fit_n_steps']} steps on {a['n_train']} images, "
        f"{time.perf_counter() - t0:.1f} s; wrote {out}"
    )
    return 0


# ---------------------------------------------------------------------------- evaluate
def add_evaluate_parser(sub) -> None:
    """Declare ``spinsa evaluate``."""
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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_evaluate)


def _cmd_evaluate(args) -> int:
    import time

    from spinsa.analysis.summary import read_summaries
    from spinsa.experiments.pipeline import TASKS, evaluate, load_images, read_run_config
    from spinsa.references import REFERENCES

    tasks = TASKS if args.task == "both" else (args.task,)
    if args.out is not None and len(tasks) > 1:
        raise ValueError("--out holds one task's evaluation; give --task masked or denoise")
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
        )
        s = read_summaries(path, tasks=(task,))[task]
        print(
            f"spinsa evaluate: {task}: error {s['error_t0']:.4f} at t = 0, "
            f"{s['error_t1']:.4f} at t = 1, best {s['best_error']:.4f} at t = {s['best_t']}, "
            f"{s['error_T']:.4f} at t = {s['T']}; late states vs the mean training image: "
            f"r = {s['corr_T']:.3f} ({time.perf_counter() - t0:.1f} s); wrote {path}"
        )
        best = s["best_reference"]
        print(
            f"  best reference: {REFERENCES[task][best]}, "
            f"{s['references'][best]['error']:.4f}; the model "
            + (
                "beats it (more than 3 standard errors below)"
                if s["transient_memory"]
                else "does not beat it by more than 3 standard errors"
            )
        )
    return 0


# ---------------------------------------------------------------------------- reproduce
def add_reproduce_parser(sub) -> None:
    """Declare ``spinsa reproduce``."""
    p = sub.add_parser(
        "reproduce",
        help="the paper's bare-self-attention experiment end to end (Fig. 1 and a report)",
        description="Fit bare self-attention on MNIST (2x2 patches, d = 8, lambda_train = 5) "
        "with the DESIGN dynamics and with the published notebook's preset, evaluate masked "
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
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--baselines",
        choices=("quick", "paper", "none"),
        help="the backprop baselines (recycled block and ViT; they need torch): 'quick', the "
        "brief CPU recipe (1 epoch on 3,000 images; the default with --quick); 'paper', the "
        "paper's recipe (100 epochs on every training image; the default otherwise, hours "
        "per model and task on a CPU: the plan printed first says how long); 'none'",
    )
    p.set_defaults(func=_cmd_reproduce)


def _cmd_reproduce(args) -> int:
    from spinsa.experiments.reproduce import reproduce

    if args.config is not None and args.quick:
        raise ValueError("give --quick or --config, not both (the config sets the sizes)")
    out = args.out
    if out is None:
        name = (
            args.config.stem
            if args.config
            else ("reproduce-quick" if args.quick else "reproduce-full")
        )
        out = Path("runs") / name
    reproduce(
        out,
        quick=args.quick,
        overwrite=args.overwrite,
        config=args.config,
        progress=not args.no_progress,
        baselines=True if args.baselines is None else args.baselines,
    )
    return 0
