"""``spinsa sequences run``: data -> fits and training -> test errors -> HDF5, figures, report.

Every model predicts the next value of the normalised series from the ``context`` values
before it, on the same windows:

- the bare self-attention, fitted by pseudo-likelihood on the training windows, reading
  the masked last token at the t of lowest validation error (:mod:`spinsa.sequences.forecast`);
- the RNN, the transformer encoder and S4D, trained by backprop with early stopping on the
  validation windows (:mod:`spinsa.sequences.train`);
- persistence, the training mean and AR(context) (:mod:`spinsa.sequences.references`).

Then the spin model's own analyses: its error against t, how long each test forecast stays
better than persistence (the transient's lifetime), and the attractors of the chain from
random spins. Each stage leaves its file in the output directory (``fit-<key>.h5``,
``<model>-<key>.ckpt``, the key a hash of the stage's settings and data); run the command
again after an interruption and it resumes; change a setting and that stage runs anew.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._checks import check_choice, check_count, check_positive, check_real
from spinsa._files import atomic_write_text
from spinsa.sequences.data import split_series, windows
from spinsa.sequences.forecast import SpinForecaster, best_step, embedding_for, fit_forecaster
from spinsa.sequences.references import fit_ar, is_reference, reference_forecasts
from spinsa.tasks import mean_sem

__all__ = ["SequenceConfig", "run_sequences", "SEQUENCES_KIND", "error_table"]

SEQUENCES_KIND = "sequences"
BASELINES = ("rnn", "transformer", "s4d")
SPIN = "bare SA"
# seconds per epoch of each backprop model on 8,590 ETTh1 windows of 50 values, 2 cores
EPOCH_SECONDS = {"rnn": 1.0, "transformer": 14.2, "s4d": 2.4}


# the command-line flag of each option, for messages
_FLAG = {
    "context": "--context",
    "k": "--patch",
    "steps": "--steps",
    "epochs": "--epochs",
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
    max_iter : int
        L-BFGS iterations of the fit (full-batch pseudo-likelihood, fixed global norm).
    norm : float or None
        |J| kept by the fit (None: the initial couplings' norm).
    baselines : tuple of str
        Backprop models to train.
    epochs, patience, batch_size : int
        Their training (early stopping on the validation MSE).
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
    max_iter: int = 100
    norm: float | None = None
    baselines: tuple[str, ...] = BASELINES
    epochs: int = 30
    patience: int = 5
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
            check_positive(getattr(self, name), _FLAG.get(name, name))
        check_real(self.gamma, "gamma")
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


def paired_z(pred, other, truth) -> float:
    """The gain of ``pred`` over ``other`` in standard errors of the paired difference of
    their squared errors on the same windows (> 0: ``pred`` is better)."""
    mean, sem, _ = mean_sem((other - truth) ** 2 - (pred - truth) ** 2)
    return float(mean / sem) if sem > 0 else 0.0


def _scores(pred: np.ndarray, truth: np.ndarray, persistence: np.ndarray) -> dict[str, float]:
    """MSE and MAE with their standard errors, and the paired gain over persistence."""
    mse, mse_sem, _ = mean_sem((pred - truth) ** 2)
    mae, mae_sem, _ = mean_sem(np.abs(pred - truth))
    return {
        "mse": float(mse),
        "mse_sem": float(mse_sem),
        "mae": float(mae),
        "mae_sem": float(mae_sem),
        "z_vs_persistence": paired_z(pred, persistence, truth),
    }


def _stage_key(config: SequenceConfig, splits, fields: tuple[str, ...]) -> str:
    """8 hex digits of the settings a stage depends on and of its data: a finished stage is
    reused only by a run with the same ones."""
    h = hashlib.sha256(json.dumps({f: getattr(config, f) for f in fields}).encode())
    for part in (splits.train, splits.val):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()[:8]


_FIT_FIELDS = ("context", "k", "d", "lam_train", "max_iter", "norm", "seed")
_TRAIN_FIELDS = ("context", "epochs", "patience", "batch_size", "seed")


def _spin_stage(config, splits, out, progress, say):
    """The fitted couplings (from an earlier run's file when it has the same key) and the
    forecaster that reads them."""
    from spinsa.fit import load_fit, save_fit

    key = _stage_key(config, splits, _FIT_FIELDS)
    fit_path, ckpt = out / f"fit-{key}.h5", out / f"fit-{key}.ckpt.h5"
    emb = embedding_for(splits.train, config.context, config.k, config.d, config.seed)
    if fit_path.exists():  # a finished stage of an earlier run
        fit = load_fit(fit_path)
    else:
        t0 = time.perf_counter()
        fit = fit_forecaster(
            splits.train, config.context, k=config.k, d=config.d, seed=config.seed,
            checkpoint=ckpt, progress=progress, backend="lbfgs", lam=config.lam_train,
            max_iter=config.max_iter, constraint="global", norm=config.norm,
        )[1]  # fmt: skip
        save_fit(fit_path, fit, overwrite=True)
        ckpt.unlink(missing_ok=True)
        say(f"fit of the bare self-attention: L = {fit.loss:.4f}, "
            f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    forecaster = SpinForecaster(
        fit.J, emb, lam=config.lam_eval, gamma=config.gamma, steps=config.steps
    )
    return forecaster, fit


def _baseline_stage(config, name, splits, out, progress, say):
    from spinsa.sequences.train import ForecasterConfig, predict, train_forecaster

    key = _stage_key(config, splits, _TRAIN_FIELDS)
    xtr, ytr = _xy(splits.train, config.context)
    xva, yva = _xy(splits.val, config.context)
    cfg = ForecasterConfig(
        epochs=config.epochs,
        patience=config.patience,
        batch_size=config.batch_size,
        seed=config.seed,
        device="cpu",
    )
    res = train_forecaster(
        name,
        xtr.astype(np.float32),
        ytr.astype(np.float32),
        xva.astype(np.float32),
        yva.astype(np.float32),
        cfg,
        checkpoint=out / f"{name}-{key}.ckpt",
        progress=progress,
    )
    say(
        f"{name}: best epoch {res.best_epoch + 1} of {len(res.val_loss)}, val MSE "
        f"{min(res.val_loss):.4f}, {res.seconds:.1f} s"
    )
    return res, lambda x: predict(res.model, x.astype(np.float32))


def run_sequences(config: SequenceConfig, out_dir, *, progress: bool = False, say=print) -> Path:
    """Run the sequence benchmark; write ``sequences.h5``, ``forecasts.png``,
    ``spin_error.png`` and ``report.md`` in ``out_dir`` and return the HDF5 path."""
    from spinsa.analysis import error_lifetimes, find_attractors, random_spins

    t_start = time.perf_counter()
    series = _load(config)
    splits = split_series(
        series.values, config.context, config.rows, step_seconds=series.step_seconds
    )
    scale = (splits.rows[0] - config.context) / 8590 * config.context / 50
    most = 15 + config.epochs * scale * sum(EPOCH_SECONDS[m] for m in config.baselines)
    say(
        f"at most about {f'{most:.0f} s' if most < 90 else f'{most / 60:.0f} min'} on 2 "
        f"cores ({config.epochs} epochs of each backprop "
        "model; early stopping usually ends sooner)"
    )
    out = Path(out_dir)  # made once the data and the settings are known to be good
    out.mkdir(parents=True, exist_ok=True)
    say(
        f"{series.source} {series.column}: {series.values.size} rows, train / val / test "
        f"{splits.rows[0]} / {splits.rows[1]} / {splits.rows[2]}"
    )
    xte, yte = _xy(splits.test, config.context)
    xva, yva = _xy(splits.val, config.context)
    xtr, ytr = _xy(splits.train, config.context)

    forecaster, fit = _spin_stage(config, splits, out, progress, say)
    val_fc, _ = forecaster.trajectories(xva)
    t_best, val_curve = best_step(val_fc, yva)
    test_fc, _ = forecaster.trajectories(xte)
    test_curve = ((test_fc - yte[None]) ** 2).mean(axis=1)
    predictions = {SPIN: test_fc[t_best]}

    histories = {}
    for name in config.baselines:
        res, predict = _baseline_stage(config, name, splits, out, progress, say)
        predictions[name] = predict(xte)
        histories[name] = {
            "train_loss": np.asarray(res.train_loss),
            "val_loss": np.asarray(res.val_loss),
        }

    ar = fit_ar(xtr, ytr, config.context)
    predictions.update(reference_forecasts(ar, xte))
    scores = {m: _scores(p, yte, predictions["persistence"]) for m, p in predictions.items()}

    # the spin model's own analyses
    persistence_se = (predictions["persistence"] - yte) ** 2
    life = error_lifetimes(
        (test_fc - yte[None]) ** 2, np.arange(test_fc.shape[0]), baseline=persistence_se
    )
    N, d = forecaster.J.shape[0], forecaster.J.shape[2]
    starts = random_spins(config.attractor_starts, N, d, rng=config.seed)
    attractors = find_attractors(
        forecaster.J, config.lam_eval, starts, config.attractor_steps, gamma=config.gamma
    )
    attractor_values = forecaster.embedding.decode(attractors.states)

    arrays: dict[str, Any] = {
        "J": forecaster.J,
        "truth": yte,
        "forecasts": {m: np.asarray(p, dtype=np.float64) for m, p in predictions.items()},
        "spin": {
            "val_mse_t": val_curve,
            "test_mse_t": test_curve,
            "lifetime": np.asarray(life.lifetime, dtype=np.float64),
            "attractor_values": attractor_values,
            "attractor_basin_fraction": attractors.basin_fraction,
        },
        "baselines": histories,
        "ar_coef": ar.coef,
    }
    attrs = {
        "source": str(series.source),
        "column": series.column,
        "rows": list(splits.rows),
        "mean": splits.mean,
        "std": splits.std,
        "best_t": t_best,
        "scores": scores,
        "fit_loss": float(fit.loss),
        "n_attractors": int(attractors.n_attractors),
        "fraction_unconverged": float(attractors.fraction_unconverged),
        "lifetime_mean": float(np.mean(life.lifetime)),
        "train_range": [float(splits.train.min()), float(splits.train.max())],
        "step_seconds": int(series.step_seconds),
        "seconds": time.perf_counter() - t_start,
    }
    h5 = out / "sequences.h5"
    io.write_file(h5, arrays, attrs, kind=SEQUENCES_KIND, config=config, overwrite=True)
    from spinsa.plotting.sequences import plot_sequences

    figures = plot_sequences(h5, out)
    atomic_write_text(out / "report.md", "\n".join(report_lines(h5, figures)) + "\n")
    say(f"wrote {h5}, {out / 'report.md'} and {len(figures)} figures in {attrs['seconds']:.1f} s")
    return h5


def _order(names) -> list[str]:
    """The spin model, the backprop models, then the references."""
    first = [SPIN, *BASELINES]
    return [n for n in first if n in names] + sorted(n for n in names if n not in first)


def error_table(scores: dict[str, dict[str, float]]) -> list[str]:
    """The markdown table of test MSE and MAE (± standard error) of every model."""
    lines = ["| model | MSE | MAE | gain over persistence (z) |", "|---|---|---|---|"]
    for name in _order(scores):
        s = scores[name]
        z = "" if name == "persistence" else f"{s['z_vs_persistence']:+.1f}"
        lines.append(
            f"| {name} | {s['mse']:.4f} ± {s['mse_sem']:.4f} | "
            f"{s['mae']:.4f} ± {s['mae_sem']:.4f} | {z} |"
        )
    return lines


def _attractor_lines(info) -> list[str]:
    """One line per attractor: the window it decodes to, in the series' normalised units."""
    spin = io.read_group(info.path, "spin")[0]
    values, basins = spin["attractor_values"], spin["attractor_basin_fraction"]
    return [
        f"  - attractor {c}: decodes to values from {v.min():+.3f} to {v.max():+.3f} "
        f"(mean {v.mean():+.3f}; the training part spans {info.attrs['train_range'][0]:+.3f} "
        f"to {info.attrs['train_range'][1]:+.3f}), basin {100 * b:.0f}% of the random starts"
        for c, (v, b) in enumerate(zip(values, basins, strict=True))
    ]


def report_lines(h5, figures=()) -> list[str]:
    """``report.md`` of a ``sequences.h5``: the setup, the table, plain statements."""
    info = io.read(h5)
    a, cfg = info.attrs, info.config
    scores = a["scores"]
    best_ref = min(filter(is_reference, scores), key=lambda m: scores[m]["mse"])
    lines = [
        "# Sequences: one-step forecasts of the normalised series",
        "",
        f"Series: {a['source']}, column {a['column']}; train / validation / test rows "
        f"{a['rows'][0]} / {a['rows'][1]} / {a['rows'][2]} (split by time, normalised with the "
        f"training part's mean {a['mean']:.3f} and standard deviation {a['std']:.3f}). Every "
        f"model predicts the next value from the {cfg['context']} before it, on the same "
        f"{len(info.array('truth'))} test windows.",
        "",
        f"The bare self-attention: {cfg['k']} value(s) per token, pseudo-likelihood at "
        f"λ = {cfg['lam_train']} (L = {a['fit_loss']:.4f}), read at t = {a['best_t']} "
        f"(the lowest validation error) of the dynamics at λ = {cfg['lam_eval']}, "
        f"γ = {cfg['gamma']}.",
        "",
        *error_table(scores),
        "",
        "z is the gain in standard errors of the paired difference of squared errors on the "
        "same windows. Standard errors treat the test errors as independent; neighbouring "
        "rows are correlated, so they are too small, and a gain counts only when z > 3.",
        "",
    ]
    ref = scores[best_ref]
    forecasts, truth = io.read_group(h5, "forecasts")[0], info.array("truth")
    for name in _order(scores):
        s = scores[name]
        if is_reference(name):
            continue
        z = paired_z(forecasts[name], forecasts[best_ref], truth)
        verdict = "beats" if z > 3 else "does not beat"
        lines.append(
            f"- {name}: MSE {s['mse']:.4f}; {verdict} the best reference ({best_ref}, "
            f"{ref['mse']:.4f}; z = {z:+.1f})."
        )
    lines += [
        "",
        "## The spin model's own analyses",
        "",
        f"- Error against t: lowest on the validation windows at t = {a['best_t']}.",
        f"- The forecast's transient: on average a test forecast stays better than "
        f"persistence for {a['lifetime_mean']:.2f} steps of the dynamics.",
        f"- Attractors of the chain from {cfg['attractor_starts']} random spin chains "
        f"({cfg['attractor_steps']} steps): {a['n_attractors']} found; "
        f"{100 * a['fraction_unconverged']:.0f}% of the runs had not converged.",
        *_attractor_lines(info),
        "",
        *[f"![{Path(f).stem}]({Path(f).name})" for f in figures],
    ]
    return lines
