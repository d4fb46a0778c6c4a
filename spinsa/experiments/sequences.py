"""``spinsa sequences run``: data -> fit and training -> test errors -> HDF5, figures, report.

Every model predicts the next value of the normalised series from the ``context`` values
before it, on the same windows:

- the bare self-attention, fitted by pseudo-likelihood on the training windows, reading
  the last token at the t of lowest validation error, from each start of that token: the
  zero spin (masked) and the last observed value (persistence)
  (:mod:`spinsa.sequences.forecast`); the report says whether the dynamics improves on
  persistence;
- the RNN, the transformer encoder and S4D, trained by backprop with early stopping on the
  validation windows (:mod:`spinsa.sequences.train`, the rule of :mod:`spinsa._convergence`);
  each records whether it converged, and the report gives a verdict only for those that did;
- persistence, the training mean and AR(context) (:mod:`spinsa.sequences.references`).

Then the spin model's own analyses: its error against t, how long each test forecast stays
better than persistence (the transient's lifetime), and the attractors of the chain from
random spins. The stages (:mod:`spinsa.experiments.stages`) leave their files in the output
directory: ``fit.h5`` (the couplings), ``<model>.h5`` (each backprop model's history and
forecasts, with ``<model>.ckpt`` while it trains), ``sequences.h5``, the figures and
``report.md``. Each stores the settings and a hash of the data it was made from: run the
command again after an interruption and it resumes; run it with other settings and it says
what differs and refuses, unless ``overwrite=True`` (``--overwrite``) starts afresh.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._checks import SCORE_LIMIT, check_choice, check_count, check_positive, check_real
from spinsa._config import config_to_dict
from spinsa._convergence import DEFAULT_REL_TOL, Convergence, check_rule
from spinsa.analysis.summary import combined_z, paired_gain_z, significant
from spinsa.experiments.stages import Pipeline
from spinsa.report import write_sequences_report
from spinsa.sequences.data import split_series, windows
from spinsa.sequences.forecast import (
    STARTS,
    SpinForecaster,
    best_step,
    embedding_for,
    fit_forecaster,
)
from spinsa.sequences.references import SPIN_MODELS, fit_ar, reference_forecasts
from spinsa.tasks import mean_sem

__all__ = ["SequenceConfig", "run_sequences", "vs_persistence", "SEQUENCES_KIND"]

SEQUENCES_KIND = "sequences"
BASELINES = ("rnn", "transformer", "s4d")  # spinsa.sequences.models, which needs torch
OVERWRITE_HINT = "pass --overwrite (overwrite=True) to start afresh there, or choose another --out"
FIT_KIND = "sequences-fit"
MODEL_KIND = "sequences-model"
# seconds of one epoch of each backprop model per training window of 50 values (8,590
# ETTh1 windows took 1.0, 14.2 and 2.4 s on 2 cores); the spin fit per L-BFGS iteration
_EPOCH_SECONDS = {"rnn": 1.0 / 8590, "transformer": 14.2 / 8590, "s4d": 2.4 / 8590}


# the command-line flag of each option, for messages
_FLAG = {
    "context": "--context",
    "k": "--patch",
    "steps": "--steps",
    "epochs": "--epochs",
    "patience": "--patience",
    "rel_tol": "--rel-tol",
    "lam_eval": "--lam-eval",
}


@dataclass(frozen=True)
class SequenceConfig:
    """What ``spinsa sequences run`` does.

    Parameters
    ----------
    dataset : str
        A cached series (``"etth1"``), unless ``csv`` is given.
    csv : str or None
        Any CSV with a time column (an ETT file from the user's disk).
    column : str
        The series (ETT: ``"OT"``, the oil temperature).
    context : int
        Values every model sees before the one it predicts.
    rows : (int, int, int) or None
        Rows of training, validation and test; None: 12 / 4 / 4 months of 30 days.
    k, d : int
        Values per token and spin dimension of the bare self-attention (d = None: 2k).
    lam_train, lam_eval, gamma, steps
        λ of the fit, λ, γ and T of the forecasting dynamics.
    starts : tuple of str
        Starts of the token to predict that are evaluated, each with its own t chosen on
        the validation windows: ``"zero"`` (the masked start) and ``"persistence"`` (the
        last observed value; :class:`spinsa.sequences.forecast.SpinForecaster`).
    max_iter : int
        L-BFGS iterations of the fit (full-batch pseudo-likelihood, fixed global norm).
    norm : float or None
        |J| kept by the fit (None: the initial couplings' norm).
    baselines : tuple of str
        Backprop models to train.
    epochs, patience, batch_size : int
        Their training: at most ``epochs``, stopped when the best validation MSE improved
        by less than ``rel_tol`` (relative) over ``patience`` epochs.
    rel_tol : float
        The stopping rule's relative improvement (0.005: 0.5 %; :mod:`spinsa._convergence`).
    attractor_starts, attractor_steps : int
        Random initial conditions and steps used to find the chain's attractors.
    seed : int
    """

    dataset: str = "etth1"
    csv: str | None = None
    column: str = "OT"
    context: int = 50
    rows: tuple[int, int, int] | None = None
    k: int = 1
    d: int | None = None
    lam_train: float = 5.0
    lam_eval: float = 1.0
    gamma: float = 1.0
    steps: int = 30
    starts: tuple[str, ...] = STARTS
    max_iter: int = 100
    norm: float | None = None
    baselines: tuple[str, ...] = BASELINES
    epochs: int = 60
    patience: int = 5
    rel_tol: float = DEFAULT_REL_TOL
    batch_size: int = 256
    attractor_starts: int = 200
    attractor_steps: int = 2000
    seed: int = 0

    def __post_init__(self):
        # named as the command line names them: this is where its flags are checked
        counts = (
            "context",
            "k",
            "steps",
            "max_iter",
            "epochs",
            "patience",
            "batch_size",
            "attractor_starts",
            "attractor_steps",
        )
        for name in counts:
            check_count(getattr(self, name), _FLAG.get(name, name), 1)
        check_count(self.seed, "--seed", 0)
        for name in ("lam_train", "lam_eval"):
            if check_positive(getattr(self, name), _FLAG.get(name, name)) >= SCORE_LIMIT:
                raise ValueError(  # refused before the fit, not after it
                    f"{_FLAG.get(name, name)} = {getattr(self, name):g} is beyond {SCORE_LIMIT:g}, "
                    "where the softmax of any couplings of norm 1 overflows; use a smaller one"
                )
        check_real(self.gamma, "gamma")
        if not 0 <= check_real(self.rel_tol, "--rel-tol") < 1:
            raise ValueError(f"--rel-tol must be in [0, 1) (0.005: 0.5 %), got {self.rel_tol!r}")
        object.__setattr__(self, "rel_tol", check_rule(self.rel_tol, self.patience)[0])
        if self.norm is not None:
            check_positive(self.norm, "norm")
        if self.context % self.k:
            raise ValueError(
                f"--context ({self.context}) must be a multiple of --patch ({self.k}): the "
                "tokens before the predicted one hold --patch values each"
            )
        if self.d is not None and check_count(self.d, "--dim", 1) < 2 * self.k:
            raise ValueError(f"--dim ({self.d}) must be at least 2 x --patch ({2 * self.k})")
        if self.rows is not None:
            if len(self.rows) != 3:
                raise ValueError(f"--rows takes three numbers TRAIN VAL TEST, got {self.rows}")
            rows = tuple(check_count(r, "--rows", 1) for r in self.rows)
            object.__setattr__(self, "rows", rows)
        for name in self.baselines:
            check_choice(name, "baselines[...]", BASELINES)
        if not self.starts:
            raise ValueError(f"starts must name at least one of {', '.join(STARTS)}")
        for name in self.starts:
            check_choice(name, "starts[...]", STARTS)
        object.__setattr__(self, "starts", tuple(self.starts))
        object.__setattr__(self, "baselines", tuple(self.baselines))

    @classmethod
    def quick(cls, **options) -> SequenceConfig:
        """Minutes on a laptop: short fit and training, fewer attractor runs."""
        return cls(
            **{
                "max_iter": 40,
                "epochs": 4,
                "patience": 2,
                "steps": 20,
                "attractor_starts": 64,
                "attractor_steps": 100,
                **options,
            }
        )


def _load(config: SequenceConfig):
    from spinsa.datasets import load_series, read_series_csv

    if config.csv is not None:
        return read_series_csv(config.csv, config.column)
    return load_series(config.dataset, config.column)


def _xy(part: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    w = windows(part, context + 1)
    return w[:, :-1], w[:, -1]


def _scores(pred: np.ndarray, truth: np.ndarray, persistence: np.ndarray) -> dict[str, float]:
    """MSE and MAE with their standard errors, and the paired gain over persistence."""
    mse, mse_sem, _ = mean_sem((pred - truth) ** 2)
    mae, mae_sem, _ = mean_sem(np.abs(pred - truth))
    return {
        "mse": float(mse),
        "mse_sem": float(mse_sem),
        "mae": float(mae),
        "mae_sem": float(mae_sem),
        "z_vs_persistence": paired_gain_z((pred - truth) ** 2, (persistence - truth) ** 2),
    }


def _data_sha256(splits) -> str:
    """The hash of the training and validation parts that every stage stores with its
    settings: a stage of other data is never taken for a finished one."""
    h = hashlib.sha256()
    for part in (splits.train, splits.val):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()


_FIT_FIELDS = ("context", "k", "d", "lam_train", "max_iter", "norm", "seed")
_TRAIN_FIELDS = ("context", "epochs", "patience", "rel_tol", "batch_size", "seed")


class _Run:
    """The stages of one run, and what they hand each other in memory."""

    def __init__(self, config: SequenceConfig, out: Path, progress: bool, say):
        self.config, self.out, self.progress, self.say = config, out, progress, say
        self.series = _load(config)
        self.splits = split_series(
            self.series.values, config.context, config.rows, step_seconds=self.series.step_seconds
        )
        self.sha256 = _data_sha256(self.splits)
        self.xy = {
            part: _xy(getattr(self.splits, part), config.context)
            for part in ("train", "val", "test")
        }

    def stage_config(self, fields) -> dict:
        return {**{f: getattr(self.config, f) for f in fields}, "data_sha256": self.sha256}

    def fit(self) -> None:
        """Fit the couplings; ``fit.h5`` holds J and the fit's numbers."""
        c = self.config
        t0 = time.perf_counter()
        fit = fit_forecaster(
            self.splits.train, c.context, k=c.k, d=c.d, seed=c.seed, progress=self.progress,
            checkpoint=self.out / "fit.ckpt.h5", backend="lbfgs", lam=c.lam_train,
            max_iter=c.max_iter, constraint="global", norm=c.norm,
        )[1]  # fmt: skip
        attrs = {"loss": float(fit.loss), **fit.convergence()}
        io.write_file(
            self.out / "fit.h5", {"J": fit.J}, attrs, kind=FIT_KIND,
            config=self.stage_config(_FIT_FIELDS), overwrite=True,
        )  # fmt: skip
        (self.out / "fit.ckpt.h5").unlink(missing_ok=True)
        self.say(f"fit of the bare self-attention: L = {fit.loss:.4f}, "
                 f"{time.perf_counter() - t0:.1f} s; {fit.convergence_line()}")  # fmt: skip

    def train(self, name: str) -> None:
        """Train one backprop model; ``<name>.h5`` holds its history and test forecasts."""
        from spinsa.sequences.train import ForecasterConfig, predict, train_forecaster

        c = self.config
        (xtr, ytr), (xva, yva) = self.xy["train"], self.xy["val"]
        cfg = ForecasterConfig(
            epochs=c.epochs, patience=c.patience, rel_tol=c.rel_tol, batch_size=c.batch_size,
            seed=c.seed, device="cpu",
        )  # fmt: skip
        f32 = [a.astype(np.float32) for a in (xtr, ytr, xva, yva)]
        ckpt = self.out / f"{name}.ckpt"
        res = train_forecaster(name, *f32, cfg, checkpoint=ckpt, progress=self.progress)
        self.say(
            f"{name}: best epoch {res.best_epoch + 1} of {len(res.val_loss)}, val MSE "
            f"{min(res.val_loss):.4f}, {res.seconds:.1f} s; {res.convergence.describe()}"
        )
        arrays = {
            "train_loss": np.asarray(res.train_loss),
            "val_loss": np.asarray(res.val_loss),
            "forecast": predict(res.model, self.xy["test"][0].astype(np.float32)),
        }
        attrs = {"seconds": float(res.seconds), **res.convergence.to_attrs()}
        io.write_file(
            self.out / f"{name}.h5", arrays, attrs, kind=MODEL_KIND,
            config={**self.stage_config(_TRAIN_FIELDS), "model": name}, overwrite=True,
        )  # fmt: skip
        ckpt.unlink(missing_ok=True)


def vs_persistence(scores: dict, name: str) -> dict:
    """Whether ``name`` beats persistence: its MSE below persistence's by more than
    :data:`~spinsa.analysis.summary.SIGNIFICANT_Z` combined standard errors.

    Returns ``{"z": combined z (> 0: lower error), "paired_z": the paired gain,
    "beats": bool}``."""
    s, p = scores[name], scores["persistence"]
    z = combined_z(p["mse"], p["mse_sem"], s["mse"], s["mse_sem"])
    return {"z": float(z), "paired_z": float(s["z_vs_persistence"]), "beats": significant(z)}


def _spin_start(run: _Run, J: np.ndarray, start: str) -> dict[str, Any]:
    """One start of the forecaster: t chosen on validation, the test forecasts and curves,
    and the lifetime of the transient below persistence."""
    from spinsa.analysis import error_lifetimes

    config, (xva, yva), (xte, yte) = run.config, run.xy["val"], run.xy["test"]
    emb = embedding_for(run.splits.train, config.context, config.k, config.d, config.seed)
    forecaster = SpinForecaster(
        J, emb, lam=config.lam_eval, gamma=config.gamma, steps=config.steps, start=start
    )
    t_best, val_curve = best_step(forecaster.trajectories(xva)[0], yva)
    test_fc, _ = forecaster.trajectories(xte)
    persistence_se = (xte[:, -1] - yte) ** 2
    life = error_lifetimes(
        (test_fc - yte[None]) ** 2, np.arange(test_fc.shape[0]), baseline=persistence_se
    )
    return {
        "forecaster": forecaster,
        "best_t": t_best,
        "forecast": test_fc[t_best],
        "curves": {
            "val_mse_t": val_curve,
            "test_mse_t": ((test_fc - yte[None]) ** 2).mean(axis=1),
            "lifetime": np.asarray(life.lifetime, dtype=np.float64),
        },
    }


def write_results(run: _Run) -> Path:
    """Evaluate every model on the test windows and write ``sequences.h5``."""
    from spinsa.analysis import find_attractors, random_spins

    config, splits, out = run.config, run.splits, run.out
    t_start = time.perf_counter()
    (xtr, ytr), (xte, yte) = run.xy["train"], run.xy["test"]
    J, fit_attrs = io.read_array(out / "fit.h5", "J"), io.read(out / "fit.h5").attrs
    spins = {start: _spin_start(run, J, start) for start in config.starts}
    predictions = {SPIN_MODELS[start]: r["forecast"] for start, r in spins.items()}

    histories, convergence = {}, {}
    for name in config.baselines:
        arrays, model_attrs = io.read_group(out / f"{name}.h5", "/")
        predictions[name] = arrays["forecast"]
        histories[name] = {"train_loss": arrays["train_loss"], "val_loss": arrays["val_loss"]}
        record = Convergence.from_attrs(model_attrs)
        convergence[name] = {} if record is None else record.to_attrs()

    ar = fit_ar(xtr, ytr, config.context)
    predictions.update(reference_forecasts(ar, xte))
    scores = {m: _scores(p, yte, predictions["persistence"]) for m, p in predictions.items()}

    # the chain's attractors (they do not depend on the start)
    forecaster = next(iter(spins.values()))["forecaster"]
    N, d = J.shape[0], J.shape[2]
    starts = random_spins(config.attractor_starts, N, d, rng=config.seed)
    attractors = find_attractors(
        J, config.lam_eval, starts, config.attractor_steps, gamma=config.gamma
    )
    arrays: dict[str, Any] = {
        "J": J,
        "truth": yte,
        "forecasts": {m: np.asarray(p, dtype=np.float64) for m, p in predictions.items()},
        "spin": {
            **{start: r["curves"] for start, r in spins.items()},
            "attractor_values": forecaster.embedding.decode(attractors.states),
            "attractor_basin_fraction": attractors.basin_fraction,
        },
        "baselines": histories,
        "ar_coef": ar.coef,
    }
    attrs = {
        "source": str(run.series.source),
        "column": run.series.column,
        "rows": list(splits.rows),
        "mean": splits.mean,
        "std": splits.std,
        "best_t": {start: r["best_t"] for start, r in spins.items()},
        "vs_persistence": {s: vs_persistence(scores, SPIN_MODELS[s]) for s in spins},
        "scores": scores,
        "fit_loss": float(fit_attrs["loss"]),
        **{f"fit_{k}": fit_attrs.get(k) for k in ("converged", "criterion", "iterations")},
        "fit_message": str(fit_attrs.get("message", "")),
        "convergence": convergence,
        "n_attractors": int(attractors.n_attractors),
        "fraction_unconverged": float(attractors.fraction_unconverged),
        "lifetime_mean": {s: float(np.mean(r["curves"]["lifetime"])) for s, r in spins.items()},
        "train_range": [float(splits.train.min()), float(splits.train.max())],
        "step_seconds": run.series.step_seconds,  # a float for sub-second times
        "seconds": time.perf_counter() - t_start,
    }
    h5 = out / "sequences.h5"
    return io.write_file(h5, arrays, attrs, kind=SEQUENCES_KIND, config=config, overwrite=True)


def _command(config: SequenceConfig, out: Path) -> str:
    """A ``spinsa sequences run`` command line for ``config`` (the flags that differ from the
    defaults), as the report names it."""
    default = SequenceConfig()
    flags = [
        f"{flag} {getattr(config, field)}"
        for field, flag in _FLAG.items()
        if getattr(config, field) != getattr(default, field)
    ]
    if config.baselines != default.baselines:
        flags.append("--no-baselines" if not config.baselines else "<baselines from Python>")
    return " ".join(["spinsa sequences run", *flags, f"--out {out}"])


def run_sequences(
    config: SequenceConfig, out_dir, *, progress: bool = False, overwrite: bool = False, say=print
) -> Path:
    """Run the sequence benchmark; write ``sequences.h5``, ``forecasts.png``,
    ``spin_error.png`` and ``report.md`` in ``out_dir`` and return the HDF5 path.

    Parameters
    ----------
    config : SequenceConfig
    out_dir : str or PathLike
        Created once the data and the settings are known to be good.
    progress : bool
        Progress bars of the fit and the training.
    overwrite : bool
        Start afresh in a directory that holds a run of other settings (its files are
        deleted); without it such a directory is refused, naming what differs.
    say : callable
        Where the plan and the stage lines go.

    Returns
    -------
    Path
        ``out_dir / "sequences.h5"``, the run's results.

    Raises
    ------
    spinsa.experiments.stages.ConfigChangedError
        ``out_dir`` holds a stage of other settings or data, and ``overwrite`` is False.
    """
    from spinsa.plotting.sequences import plot_sequences

    run = _Run(config, Path(out_dir), progress, say)
    out = run.out
    out.mkdir(parents=True, exist_ok=True)
    h5 = out / "sequences.h5"
    figure_files = tuple(out / f for f in ("forecasts.png", "spin_error.png"))
    if overwrite:  # this command's own files only
        own = [out / "fit.h5", h5, out / "report.md", *figure_files]
        own += [out / f"{name}.h5" for name in BASELINES]
        for path in [*own, *out.glob("*.ckpt*"), *out.glob("*.corrupt")]:
            path.unlink(missing_ok=True)
    rows = run.splits.rows
    say(
        f"{run.series.source} {run.series.column}: {run.series.values.size} rows, train / val / "
        f"test {rows[0]} / {rows[1]} / {rows[2]}"
    )
    windows_per_epoch = (rows[0] - config.context) * config.context / 50
    plan = Pipeline("spinsa sequences run", say=say, hint=OVERWRITE_HINT)
    plan.add(
        "fit", run.fit, output=out / "fit.h5", config=run.stage_config(_FIT_FIELDS),
        estimate=15.0,
    )  # fmt: skip
    for name in config.baselines:
        plan.add(
            f"train:{name}", lambda name=name: run.train(name), output=out / f"{name}.h5",
            config={**run.stage_config(_TRAIN_FIELDS), "model": name},
            estimate=config.epochs * windows_per_epoch * _EPOCH_SECONDS[name],
        )  # fmt: skip
    deps = ("fit", *(f"train:{n}" for n in config.baselines))
    plan.add(
        "evaluate", lambda: write_results(run), output=h5, config=config_to_dict(config), deps=deps
    )
    plan.add("figures", lambda: plot_sequences(h5, out), files=figure_files, deps=("evaluate",))
    plan.add(
        "report",
        lambda: write_sequences_report(h5, out / "report.md", figure_files, _command(config, out)),
        files=(out / "report.md",), deps=("evaluate", "figures"),
    )  # fmt: skip
    plan.say_plan(f"{out} (early stopping usually ends the training sooner)")
    plan.run()
    plan.say_times()
    return h5
