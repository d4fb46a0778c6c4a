"""``spinsa sequences``: the sequence benchmark (a time series as a chain of vector spins)."""

from __future__ import annotations

from pathlib import Path

from spinsa.cli._common import add_progress_flag

# flag: (field of SequenceConfig, type, help)
_FLAGS = {
    "--column": ("column", str, "the column to forecast (default OT, the oil temperature)"),
    "--context": ("context", int, "values every model sees before the one it predicts (50)"),
    "--patch": ("k", int, "consecutive values per token of the bare self-attention (1)"),
    "--dim": ("d", int, "spin dimension (default 2 x patch)"),
    "--steps": ("steps", int, "steps T of the forecasting dynamics (30; --quick 20)"),
    "--lam-eval": ("lam_eval", float, "lambda of the forecasting dynamics (1)"),
    "--epochs": ("epochs", int, "most epochs of each backprop model (a cap: 60; --quick 4)"),
    "--patience": ("patience", int, "epochs over which the stopping rule looks (5; --quick 2)"),
    "--rel-tol": (
        "rel_tol",
        float,
        "stop when the best validation MSE improved by less than this, relative, over "
        "--patience epochs (0.005)",
    ),
    "--seed": ("seed", int, "seed of the embedding, the fit and the training (0)"),
}


def add_sequences(sub) -> None:
    """Declare ``spinsa sequences`` and its actions on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "sequences",
        help="forecast a time series: bare self-attention against RNN, transformer, S4D",
        description="A time series as a chain of vector spins "
        "(docs/model.md, 'Series as spin chains').",
    )
    p.set_defaults(func=lambda args: p.print_help() or 0)
    actions = p.add_subparsers(title="actions", metavar="ACTION")
    r = actions.add_parser(
        "run",
        help="the one-step forecasting benchmark on ETTh1 (or a CSV of yours)",
        description="Split the series by time (12 / 4 / 4 months for train / validation / "
        "test), normalise it with the training part, fit the bare self-attention by "
        "pseudo-likelihood on the training windows (forecast = the last token, started as "
        "the zero spin and as the last observed value, read at the t of lowest validation "
        "error; the report says whether the dynamics improves on persistence), train an "
        "RNN, a transformer encoder and S4D with early stopping, set persistence, the "
        "training mean and AR(context) beside them, and write sequences.h5, the figures "
        "and report.md (test MSE and MAE of every model on the normalised series), then "
        "the spin model's transients and attractors. ETTh1 is fetched into the data cache "
        "on first use. Run it again after an interruption and it resumes from the finished "
        "fit and training checkpoints.",
    )
    r.add_argument("-o", "--out", type=Path, help="output directory (runs/sequences[-quick])")
    r.add_argument(
        "--quick", action="store_true", help="short fit and training: minutes on a laptop"
    )
    r.add_argument(
        "--csv",
        metavar="PATH",
        help="any CSV with a time column (an ETT file: ETTh1, ETTh2, ETTm1, ETTm2) "
        "instead of the cached ETTh1",
    )
    for flag, (_, kind, text) in _FLAGS.items():
        r.add_argument(flag, type=kind, help=text)
    r.add_argument(
        "--rows",
        type=int,
        nargs=3,
        metavar=("TRAIN", "VAL", "TEST"),
        help="rows of the three parts (default 12 / 4 / 4 months of 30 days at the series' step)",
    )
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a directory that holds a run of other settings (its files "
        "are deleted)",
    )
    r.add_argument(
        "--starts",
        nargs="+",
        choices=("zero", "persistence"),
        help="starts of the token to predict: the zero spin (masked) and/or the last "
        "observed value (persistence); default both",
    )
    r.add_argument(
        "--no-baselines",
        action="store_true",
        help="the bare self-attention and the references only (no torch training)",
    )
    add_progress_flag(r)
    r.set_defaults(func=_cmd_run)


def _cmd_run(args) -> int:
    from spinsa.experiments.sequences import SequenceConfig, run_sequences

    options = {
        field: getattr(args, flag.lstrip("-").replace("-", "_"))
        for flag, (field, _, _) in _FLAGS.items()
    }
    options = {k: v for k, v in options.items() if v is not None}
    options["csv"] = args.csv
    options["rows"] = None if args.rows is None else tuple(args.rows)
    if args.no_baselines:
        options["baselines"] = ()
    if args.starts:
        options["starts"] = tuple(args.starts)
    config = SequenceConfig.quick(**options) if args.quick else SequenceConfig(**options)
    out = args.out or Path("runs") / ("sequences-quick" if args.quick else "sequences")
    if Path(out).exists() and not Path(out).is_dir():
        raise NotADirectoryError(20, "a file is in the way of the output directory", str(out))
    foreign = [Path(out) / f for f in ("reproduce.h5", "compare.h5") if (Path(out) / f).exists()]
    if foreign:  # its report.md is another command's: even --overwrite leaves it alone
        raise FileExistsError(
            f"{out} holds another command's run ({foreign[0].name}); spinsa sequences run "
            "replaces only its own files there: choose another --out"
        )
    run_sequences(config, out, progress=not args.no_progress, overwrite=args.overwrite)
    return 0
