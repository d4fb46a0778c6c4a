"""Every report of spinsa in one place: markdown helpers, verdict rules, the writers.

Reports, like figures, are views of files: the writers read ``reproduce.h5``,
``baselines.h5``, ``compare.h5`` or ``sequences.h5`` and nothing else, and write
``report.md`` atomically. The statistics they state (means and standard errors, the
combined-SE z, which reference a model beats) come from :mod:`spinsa.analysis.summary`; the
rules that turn them into verdicts ("holds", "does not hold") are the ``assess_*``
functions here, which return rows, not markdown. A trained model gives a verdict only when
its file records that it converged (:mod:`spinsa._convergence`); otherwise the verdict reads
"not converged after N epochs — no verdict" (:func:`no_verdict`).

- :func:`write_reproduce_report`: ``spinsa reproduce`` (with :func:`baseline_report_lines`);
- :func:`write_compare_report`: ``spinsa compare``;
- :func:`write_sequences_report`: ``spinsa sequences run``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spinsa import analysis, io
from spinsa._convergence import Convergence, criterion_text, not_converged_text
from spinsa._files import atomic_write_text
from spinsa.analysis.summary import (
    SIGNIFICANT_Z,
    combined_z,
    paired_gain_z,
    read_summaries,
    significant,
)
from spinsa.fit.convergence import convergence_words
from spinsa.io.results import COMPARE_KIND, model_names, read_tree
from spinsa.references import REFERENCES
from spinsa.sequences.references import SPIN_MODELS, is_reference
from spinsa.tasks import TASK_TITLES, TASKS, mean_sem

__all__ = [
    "BEATS_REFERENCES",
    "REPORT_FORMAT",
    "assess_baseline_claims",
    "assess_patch_claims",
    "assess_claims",
    "assess_references",
    "baseline_report_lines",
    "error_table",
    "fmt",
    "no_verdict",
    "pm",
    "provenance_lines",
    "table",
    "write_compare_report",
    "write_reproduce_report",
    "write_sequences_report",
]


# ---------------------------------------------------------------------------- markdown
#: The format of the reports' content and verdict rules; raised whenever either changes, so
#: that a committed report older than the code is found (tests/test_results_docs.py).
REPORT_FORMAT = 2


def provenance_lines(kind: str, info, command: str | None) -> list[str]:
    """The first lines of a report: a machine-readable marker of its kind and format
    (:data:`REPORT_FORMAT`), then who wrote it, from which file, and the command that
    regenerates it."""
    a = info.attrs
    return [
        f"<!-- spinsa report: {kind}, format {REPORT_FORMAT}, spinsa {a.get('spinsa_version')} -->",
        "",
        f"Written by spinsa {a.get('spinsa_version')} on {a.get('host')} at {a.get('created')} "
        f"from `{Path(info.path).name}`" + (f", by `{command}`." if command else "."),
    ]


def fmt(value: float | None, digits: int = 4) -> str:
    """``value`` with ``digits`` decimals; "n/a" when it is None or not finite."""
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def pm(value: float, sem: float, digits: int = 4) -> str:
    """``value ± sem`` with ``digits`` decimals, more when the standard error would print as
    0; just the value when the sem is not finite; "n/a" when the value is not."""
    if value is None or not np.isfinite(value):
        return "n/a"
    if sem is None or not np.isfinite(sem):
        return fmt(value, digits)
    if 0 < sem < 0.5 * 10**-digits:
        digits = 1 - math.floor(math.log10(sem))
    return f"{value:.{digits}f} ± {sem:.{digits}f}"


def row(cells) -> str:
    """One markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header, rows) -> list[str]:
    """A markdown table (header, separator, rows) and a blank line."""
    return [row(header), "|" + "---|" * len(header), *(row(r) for r in rows), ""]


def figure_lines(figures) -> list[str]:
    """Embedded images, one per figure file (names relative to the report)."""
    return [f"![{Path(f).stem}]({Path(f).name})" for f in figures]


# ---------------------------------------------------------------------------- reproduce
# ---------------------------------------------------------------------------- report
def _best(s: dict) -> str:
    return f"t = {s['best_t']}: " + pm(s["best_error"], s["best_sem"])


# The rows of the report's table of numbers, for each task: label, cell from a summary.
_NUMBER_ROWS = [
    ("error at t = 0 (input)", lambda s: pm(s["error_t0"], s["sem_t0"])),
    ("error at t = 1", lambda s: pm(s["error_t1"], s["sem_t1"])),
    ("best t and its error", _best),
    ("error at t = T", lambda s: pm(s["error_T"], s["sem_T"])),
    (
        "masked pixels only: t = 0 / best t / T",
        lambda s: " / ".join(
            fmt(s[k]) for k in ("masked_error_t0", "masked_error_best", "masked_error_T")
        ),
    ),
    (
        "correlation of the state at t = T with the mean training digit",
        lambda s: pm(s["corr_T"], s["corr_T_sem"], 3),
    ),
    (
        "correlation of the final images with their own mean",
        lambda s: pm(s["coherence_T"], s["coherence_T_sem"], 3),
    ),
    ("mean token change in the last step", lambda s: f"{s['step_change_T']:.2e}"),
]
_HOLE_REFS = ("mean_fill", "harmonic")  # the references of the masked pixels' own column
ONE_ATTRACTOR_COHERENCE = 0.9  # final images correlate at least this much with their mean
RESEMBLES_MEAN_DIGIT = 0.5  # correlation with the mean training image that we call "resembles"
MASKED_CLAIM = "masked: lowest after about one iteration, then grows"
DENOISE_CLAIM = "denoising: falls for several iterations (paper: about ten), then rises"
LATE_CLAIM = "late states: one global attractor that resembles the mean digit"


def _verdict(conditions: list[bool]) -> str:
    if all(conditions):
        return "holds"
    return "partly" if any(conditions) else "does not hold"


def _relation(gain_z: float) -> str:
    """How the best error compares with the input's, from (input - best) / se."""
    if significant(gain_z):
        return "below"
    return "above" if significant(-gain_z) else "not significantly different from"


def _then(s: dict) -> str:
    """How the error goes on after the best t: "then rises to ... at t = T (z ...)"."""
    rise = "rises" if significant(s["rise_z"]) else "does not rise significantly"
    return (
        f"then {rise} to {fmt(s['error_T'])} at t = {s['T']} "
        f"({fmt(s['rise_z'], 1)} standard errors)"
    )


def assess_references(summaries: dict[str, dict[str, dict]]) -> list[tuple[str, str, str, str]]:
    """Does each model hold a transient memory that simple predictors do not?

    A model holds one on a task when its best error (t >= 1 for the masked task) is below the
    best reference's by more than 3 combined standard errors (:data:`SIGNIFICANT_Z`).

    Parameters
    ----------
    summaries : dict
        ``model -> task -> summarize_arrays(...)``.

    Returns
    -------
    list of (model, task, verdict, evidence)
        Verdict "holds" or "does not hold"; tasks without references are left out.
    """
    out = []
    for model, tasks in summaries.items():
        for task, s in tasks.items():
            refs = s.get("references") or {}
            if not refs:
                continue
            labels = REFERENCES[task]  # in the documented order
            r = refs[s["best_reference"]]
            beaten = [labels[n] for n in labels if n in refs and n in s["beats"]]
            not_beaten = [labels[n] for n in labels if n in refs and n not in s["beats"]]
            why = (
                f"best error {pm(s['best_error'], s['best_sem'])} at t = {s['best_t']}; "
                f"best reference: {labels[s['best_reference']]}, {pm(r['error'], r['sem'])} "
                f"(z = {fmt(r['z'], 1)}); beats: {', '.join(beaten) or 'none'}; "
                f"does not beat: {', '.join(not_beaten) or 'none'}"
            )
            out.append((model, task, "holds" if s["transient_memory"] else "does not hold", why))
    return out


def assess_claims(summaries: dict[str, dict[str, dict]]) -> list[tuple[str, str, str, str]]:
    """Plain verdicts on the paper's three claims as literally stated, model by model.

    These compare a model with itself (its input, its later states); whether it beats simple
    predictors is :func:`assess_references`. Each claim is split into conditions; the
    verdict is ``"holds"`` when all are met, ``"does not hold"`` when none is, ``"partly"``
    otherwise. A rise or a fall counts when it exceeds 3 combined standard errors
    (:data:`SIGNIFICANT_Z`).

    * masked prediction, "lowest after about one iteration, then grows": the best t over
      t >= 1 is 1 or 2; the best error is below the masked input's (t = 0); the error at T
      is above the best;
    * denoising, "falls for several iterations (the paper: about ten) before rising": the
      best error is below the noisy input's; the error at T is above the best; the best t is
      within a factor of three of ten (3 <= t <= 30);
    * late states, "one global attractor that resembles the mean digit": on both tasks the
      final images correlate >= 0.9 on average with their own mean (one attractor) and >= 0.5
      with the mean training image.

    Parameters
    ----------
    summaries : dict
        ``model -> task -> summarize_arrays(...)``.

    Returns
    -------
    list of (claim, model, verdict, evidence)
    """
    out = []
    for model, tasks in summaries.items():
        m = tasks.get("masked")
        if m is not None:
            early = m["best_t"] <= 2
            gain = significant(m["gain_z"])
            rises = significant(m["rise_z"])
            why = (
                f"best t = {m['best_t']}, error {fmt(m['best_error'])}, "
                f"{_relation(m['gain_z'])} the masked input's "
                f"{fmt(m['error_t0'])} ({fmt(m['gain_z'], 1)} standard errors); {_then(m)}"
            )
            out.append((MASKED_CLAIM, model, _verdict([early, gain, rises]), why))
        d = tasks.get("denoise")
        if d is not None:
            falls = significant(d["gain_z"])
            rises = significant(d["rise_z"])
            about_ten = 3 <= d["best_t"] <= 30
            why = (
                f"{'falls' if falls else 'does not fall significantly'} from "
                f"{fmt(d['error_t0'])} to {fmt(d['best_error'])} at best t = "
                f"{d['best_t']} ({fmt(d['gain_z'], 1)} standard errors; paper: about 10"
                f"{'' if about_ten else ', so not within a factor of three'}); {_then(d)}"
            )
            out.append((DENOISE_CLAIM, model, _verdict([falls, rises, about_ten]), why))
        if tasks:
            one = all(tasks[t]["coherence_T"] >= ONE_ATTRACTOR_COHERENCE for t in tasks)
            like = all(tasks[t]["corr_T"] >= RESEMBLES_MEAN_DIGIT for t in tasks)
            why = (
                "final images vs their own mean: "
                + ", ".join(f"{t} {fmt(tasks[t]['coherence_T'], 3)}" for t in tasks)
                + "; vs the mean training digit: "
                + ", ".join(f"{t} {fmt(tasks[t]['corr_T'], 3)}" for t in tasks)
            )
            out.append((LATE_CLAIM, model, _verdict([one, like]), why))
    return out


def unconverged_fits(model_attrs: dict[str, dict]) -> dict[str, str]:
    """``model -> "not converged after N iterations — no verdict"`` for every model whose
    fit did not converge (from the ``fit_*`` attributes of its group); the reports print
    that instead of a verdict drawn from such a model."""
    out = {}
    for m, a in model_attrs.items():
        if a.get("fit_converged") is False:
            unit = "epochs" if a.get("experiment_config", {}).get("fit", {}).get(
                "backend") == "torch" else "iterations"  # fmt: skip
            out[m] = not_converged_text(a.get("fit_iterations"), unit)
    return out


def _reference_lines(models, summaries, unconverged=None) -> list[str]:
    """One table per task: each model's best error and every reference's, with z; the
    verdicts of ``unconverged`` models (:func:`unconverged_fits`) are withheld."""
    unconverged = unconverged or {}
    lines = [
        "## Against simple references",
        "",
        "Every model's best error next to simple predictors computed on the same corrupted "
        "test images, in the model's own pixel space (`spinsa.references`): the masked "
        "input; the mean training image in the hole; harmonic inpainting (each masked pixel "
        "the mean of its 3x3 neighbours, solved exactly); the nearest training image on the "
        "visible pixels; the noisy input; the mean training image; a Gaussian blur and the "
        "mean of the k nearest training images, sigma and k chosen on (up to 1,000) "
        "corrupted training images, never on the test set. z = (reference - best) / "
        f"combined standard error; a model beats a reference when z > {SIGNIFICANT_Z:g}. "
        "The best t is "
        "chosen on the test images themselves, which favours the model slightly.",
        "",
    ]
    for task, title in TASK_TITLES.items():
        cols = {m: summaries[m][task] for m in models if task in summaries[m]}
        if not any(s.get("references") for s in cols.values()):
            continue
        lines += [f"**{title}** (mean squared error over all pixels)", ""]
        lines += ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        lines.append(row(["model, best t", *[_best(s) for s in cols.values()]]))
        for name, label in REFERENCES[task].items():
            cells = []
            for s in cols.values():
                r = s["references"].get(name)
                if r is None:
                    cells.append("n/a")
                    continue
                mark = "beaten" if significant(r["z"]) else "**not beaten**"
                cells.append(f"{pm(r['error'], r['sem'])} (z = {fmt(r['z'], 1)}, {mark})")
            lines.append(row([label, *cells]))
        if task == "masked":
            cells = [
                " / ".join(
                    [fmt(s["masked_error_best"])]
                    + [fmt(s["references"].get(n, {}).get("masked_error")) for n in _HOLE_REFS]
                )
                for s in cols.values()
            ]
            label = "masked pixels only: model at best t / mean image in the hole / harmonic"
            lines.append(row([label, *cells]))
        lines.append("")
    lines += [
        "**Transient memory**: the model's best error below the best reference's by more "
        f"than {SIGNIFICANT_Z:g} combined standard errors.",
        "",
        "| model | task | verdict | evidence |",
        "|---|---|---|---|",
    ]
    for model, task, verdict, why in assess_references(summaries):
        lines.append(f"| {model} | {task} | **{unconverged.get(model, verdict)}** | {why} |")
    return lines


def _notebook_lines(model: str, nb: dict, attrs: dict, data: dict) -> list[str]:
    """The published notebook's printed numbers next to the same measurements here."""
    published_loss = {int(k): float(v) for k, v in attrs["published_train_loss"].items()}
    published_val = {int(k): float(v) for k, v in attrs["published_validation"].items()}
    tol, vtol = attrs["loss_tolerance"], attrs["validation_tolerance"]
    target = attrs["validation_target"]
    comparable = data.get("dataset") == "mnist" and data.get("per_class") == 1000
    loss = np.asarray(nb["train_loss"], dtype=np.float64)
    n_epochs = int(attrs["n_epochs"])
    lines = [
        f"## The published notebook, side by side ({model})",
        "",
        "The notebook (`bare_self_attention.ipynb`, Francill99/self_attention_attractor_network) "
        "prints after every epoch the mean of the epoch's minibatch training losses and a "
        "validation score: 1 - MSE over the masked pixels, in its pixel space min(2p, 1), after "
        f"{attrs['steps']} steps of its dynamics (lambda = 1, g = 0.5) on a test batch of 256 "
        "images with 30 % of the tokens masked. The same two measurements on this fit "
        f"(scores on the first {attrs['n_images']} test images; masks from spinsa's seeded "
        "streams, the notebook's are unseeded):",
        "",
    ]
    if not comparable:
        lines += [
            "(The published numbers are for MNIST with 1,000 training images per class; this "
            f"run fits {data.get('dataset')} with {data.get('per_class')} per class, so the "
            "comparison below is not a test: `spinsa reproduce --quick` makes the notebook's.)",
            "",
        ]
    lines += ["| epoch | notebook | spinsa | difference | within ±" + f"{tol:g} |"]
    lines.append("|---|---|---|---|---|")
    within_all = []
    for epoch in range(1, n_epochs + 1):
        ours = float(loss[epoch - 1])
        pub = published_loss.get(epoch)
        if pub is None:
            lines.append(f"| {epoch} | - | {ours:.4f} | - | - |")
            continue
        ok = abs(ours - pub) <= tol
        within_all.append(ok)
        lines.append(
            f"| {epoch} | {pub:.4f} | {ours:.4f} | {ours - pub:+.4f} | {'yes' if ok else 'no'} |"
        )
    score, sem, _ = mean_sem(nb["masked_score"])
    last = max(published_val)
    ok_val = abs(float(score) - target) <= vtol
    lines += [
        "",
        f"| validation score (masked pixels, 1 - MSE after {attrs['steps']} steps) | value |",
        "|---|---|",
        f"| notebook, epoch {last} (epoch {last - 1}: {published_val[last - 1]:.3f}) | "
        f"{published_val[last]:.3f} |",
        f"| spinsa, after epoch {n_epochs} | {pm(float(score), float(sem), 3)} |",
    ]
    labels = attrs.get("reference_labels", {})
    refs = {n: nb["references"][n] for n in REFERENCES["masked"] if n in nb.get("references", {})}
    for name, values in refs.items():
        m, e, _ = mean_sem(values)
        lines.append(f"| reference: {labels.get(name, name)} | {pm(float(m), float(e), 3)} |")
    best_name = max(refs, key=lambda n: np.nanmean(refs[n]))
    bm, be, _ = mean_sem(nb["references"][best_name])
    z = combined_z(float(score), float(sem), float(bm), float(be))
    lines += [
        "",
        f"Training losses within ±{tol:g} of the printed ones at "
        f"{sum(within_all)} of {len(within_all)} printed epochs; validation score "
        f"{fmt(float(score), 3)} against the target {target} ± {vtol} "
        f"({'within' if ok_val else 'outside'}). On the same images and metric the best "
        f"reference, {labels.get(best_name, best_name)}, scores {fmt(float(bm), 3)}: the "
        f"fitted model is {'above' if significant(z) else 'not significantly above'} it "
        f"(z = {fmt(z, 1)}).",
    ]
    return lines


def _stage_time_lines(stage_times: dict, models) -> list[str]:
    """The table of the stages' wall times, in the order they run."""
    order = ["data"] + [f"fit:{m}" for m in models]
    order += [f"eval:{m}:{t}" for m in models for t in TASKS]
    order += [f"notebook:{m}" for m in models] + ["assemble", "baselines", "figures"]
    rank = {k: i for i, k in enumerate(order)}
    times = sorted(stage_times.items(), key=lambda kv: rank.get(kv[0], len(rank)))
    if not times:
        return []
    lines = ["", "## Wall time of the stages", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {fmt(float(v), 1)} |" for k, v in times if isinstance(v, (int, float))]
    total = sum(float(v) for _, v in times if np.isfinite(float(v)))
    return lines + [
        f"| total | {fmt(total, 1)} ({total / 60:.1f} min) |",
        "",
        "(stages of an earlier, interrupted run report the time they took then; "
        "fits and evaluations report their own compute time)",
    ]


def _model_lines(models, exp: dict, model_attrs: dict, norms: dict) -> list[str]:
    """One line per model: its embedding, fit recipe and result (with |J| and ``norms``, its
    root mean square over the pairs and its cosine with the Hebbian couplings: the norm
    decides the regime), and dynamics."""
    lines = []
    for m in models:
        e, a = exp[m], model_attrs[m]
        fit = e["fit"]
        recipe = (
            f"{fit['backend']}"
            + (f", preset {fit['preset']}" if fit.get("preset") else "")
            + (
                f", {fit['optimizer']} lr {fit['lr']:g}, batch {fit['batch_size']}, "
                f"{fit['epochs']} epochs"
                if fit["backend"] == "torch"
                else f", {fit['max_iter']} iterations at most"
            )
            + f", constraint {fit['constraint']}"
            + (", standardised features" if fit.get("standardize") else "")
            + (f", scores clamped at {fit['score_clamp']:g}" if fit.get("score_clamp") else "")
        )
        dyn_m = e["dynamics"]
        dyn_text = (
            f"eq. 1 (norm {dyn_m['norm']}, gamma = {dyn_m['gamma']:g}, {dyn_m['update']})"
            if dyn_m["preset"] == "design"
            else "the published notebook's (features standardised across tokens, scores clamped "
            "at 20, x <- x + h/2, tokens divided by the mean token norm)"
        )
        record = {k: a.get(f"fit_{k}") for k in ("converged", "criterion", "iterations")}
        record["message"] = a.get("fit_message")
        unit = "epochs" if fit["backend"] == "torch" else "iterations"
        lines.append(
            f"- **{m}**: embedding scale {e['embedding']['scale']}; fit {recipe}: "
            f"L = {fmt(a.get('fit_loss', math.nan))} (from "
            f"{fmt(a.get('fit_initial_loss', math.nan))}), {a.get('fit_n_steps')} steps in "
            f"{fmt(a.get('fit_wall_time', math.nan), 1)} s on {a.get('fit_device')}; "
            f"**{convergence_words(record, unit)}**; |J| = {fmt(a.get('fit_norm'), 2)} "
            f"(Frobenius; root mean square over the ordered pairs {fmt(norms[m][0], 4)}), "
            f"cosine with the Hebbian couplings of its training spins {fmt(norms[m][1], 3)}; "
            f"dynamics {dyn_text}, T = {dyn_m['steps']}"
        )
    return lines


TRANSIENT_MEMORY = (
    "a transient state reconstructs better than simple predictors (spinsa's test, not a claim "
    "of the paper)"
)


def _summary_lines(rows: list[tuple[str, str, str, str]]) -> list[str]:
    """The summary at the top of the reproduce report: every statement once, with its verdict
    in each place it was tested, from the rows ``(statement, where, verdict, evidence)`` of
    the ``assess_*`` functions (whose sections below give the evidence)."""
    verdicts: dict[str, list[str]] = {}
    for statement, where, verdict, evidence in rows:
        cell = f"{where}: **{verdict}**"
        if statement == TRANSIENT_MEMORY:  # name the reference that wins
            cell += f" ({evidence.split('; ')[1]})"
        verdicts.setdefault(statement, []).append(cell)
    count = {v: sum(r[2] == v for r in rows) for v in ("holds", "partly", "does not hold")}
    withheld = len(rows) - sum(count.values())
    return [
        "## Summary",
        "",
        f"Of {len(rows)} verdicts below, {count['holds']} hold, {count['partly']} hold partly, "
        f"{count['does not hold']} do not hold, and {withheld} are withheld (they rest on a "
        "model that did not converge). Each statement with its verdict wherever it was "
        "tested; the evidence is in the sections below.",
        "",
        "| statement | verdicts |",
        "|---|---|",
        *(f"| {statement} | {'; '.join(cells)} |" for statement, cells in verdicts.items()),
    ]


def write_reproduce_report(
    h5_path,
    out_path,
    figures: list[str] | None = None,
    timings: dict[str, float] | None = None,
    baselines=None,
    command: str | None = None,
) -> Path:
    """Write ``report.md`` from a ``reproduce.h5`` (reads the file only).

    Parameters
    ----------
    h5_path : str or PathLike
    out_path : str or PathLike
    figures : list of str, optional
        File names of the figures to embed (relative to the report).
    timings : dict, optional
        Wall times of stages not recorded in the file (assembling, baselines, figures).
    baselines : str or PathLike, optional
        A ``baselines.h5``: adds the section on the backprop baselines.
    command : str, optional
        The command that wrote the files, printed at the top so that anyone can regenerate
        the report.

    Returns
    -------
    Path
    """
    h5_path, out_path = Path(h5_path), Path(out_path)
    info = io.read(h5_path)
    models = model_names(h5_path)
    summaries = {m: read_summaries(h5_path, m) for m in models}
    # the attributes only: not the couplings J, nor the evaluations and fit history
    model_attrs = {m: io.read_attrs(h5_path, f"models/{m}") for m in models}
    exp = {m: model_attrs[m]["experiment_config"] for m in models}
    first = exp[models[0]]
    data, dyn, tasks = first["data"], first["dynamics"], first["tasks"]
    shapes = {m: info.datasets[f"models/{m}/J"][0] for m in models}  # J: (N, N, d, d)
    norms = {  # root mean square |J_ij| over the ordered pairs, and the Hebbian cosine
        m: (a.get("fit_norm", math.nan) / math.sqrt(shapes[m][0] * (shapes[m][0] - 1)),
            a.get("hebbian_cosine", math.nan))
        for m, a in model_attrs.items()
    }  # fmt: skip
    grids = sorted(
        {(exp[m]["embedding"]["patch"], shape[0], shape[2]) for m, shape in shapes.items()}
    )
    n_train = model_attrs[models[0]].get("n_train")
    n_test = data["n_test"]
    stage_times = {**(info.attrs.get("stage_times", {}) or {}), **(timings or {})}
    if baselines is not None and "baselines" not in stage_times:  # a report written anew
        stage_times["baselines"] = io.read(baselines).attrs.get("wall_time", math.nan)

    header = [
        "# Reproduction: bare self-attention as an attractor network on MNIST",
        "",
        *provenance_lines("reproduce", info, command),
        "",
        "F. D'Amico and M. Negri, *Self-attention as an attractor network: transient memories "
        "without backpropagation* (2024), Fig. 1: masked prediction and denoising by the "
        "dynamics of a fitted bare self-attention layer"
        + (
            ", beside backprop baselines; Fig. 2: the texture of predicted patches."
            if baselines is not None
            else "."
        ),
        "",
    ]
    lines = [
        "## Setup",
        "",
        f"- data: {data['dataset']}, {n_train} training images"
        + (f" ({data['per_class']} per class)" if data.get("per_class") else "")
        + f", {n_test} test images, seed {data['seed']}",
        "- embedding: "
        + " or ".join(f"{p}x{p} patches, N = {n} tokens, d = {d}" for p, n, d in grids)
        + (" (per model, below)" if len(grids) > 1 else ""),
        f"- lambda_train = {first['fit']['lam']:g}, lambda_eval = {dyn['lam_eval']:g}",
        f"- masked prediction: {tasks['mask_fraction']:.0%} of the tokens set to zero "
        f"(int({tasks['mask_fraction']:g} N) = "
        + " or ".join(f"{int(tasks['mask_fraction'] * n * (1 + 1e-9))} of {n}" for _, n, _ in grids)
        + ")"
        f"{', visible tokens clamped' if tasks['clamp_visible'] else ''}; denoising: "
        f"Gaussian noise of variance {tasks['noise_variance']:g}, image statistics restored; "
        "test image k is corrupted from its own random stream (the same in every model)",
        "- errors: mean squared pixel error per image, in the embedding's pixel space, "
        "averaged over test images (± standard error of the mean)",
        "",
        "Models:",
        "",
    ]
    lines += _model_lines(models, exp, model_attrs, norms)
    lines += ["", "## The numbers", "", "| | " + " | ".join(models) + " |"]
    lines.append("|---|" + "---|" * len(models))
    for task, title in TASK_TITLES.items():
        for k, (label, cell) in enumerate(_NUMBER_ROWS):
            if label.startswith("masked pixels") and task != "masked":
                continue
            if label.startswith("best t") and task == "masked":  # the paper counts from t = 1
                label = "best t (t >= 1) and its error"
            cells = [cell(summaries[m][task]) if task in summaries[m] else "n/a" for m in models]
            lines.append(row([f"**{title}**: {label}" if k == 0 else label, *cells]))
    unconverged = unconverged_fits(model_attrs)
    lines += ["", *_reference_lines(models, summaries, unconverged)]
    lines += ["", "## The paper's claims, as stated", ""]
    lines += [
        "Verdicts follow fixed rules (`spinsa.report.assess_claims`) that "
        "compare each model with itself, not with the references above; a claim holds when "
        "all its conditions are met, partly when some are. A rise or fall counts when it "
        f"exceeds {SIGNIFICANT_Z:g} combined standard errors. Masked: best t (t >= 1) is 1 "
        "or 2, below the "
        "masked input, and the error rises after it. Denoising: the error falls below the "
        "noisy input's, rises after its minimum, and the minimum is within a factor of three "
        "of the paper's ten iterations (3 <= t <= 30). Late states: the final images "
        "correlate >= 0.9 on average with their own mean (one attractor) and >= 0.5 with the "
        "mean training image.",
        "",
        "| claim | model | verdict | evidence |",
        "|---|---|---|---|",
    ]
    if unconverged:
        lines[-2:-2] = [
            "A model whose fit did not converge gets no verdict here nor above: its numbers "
            "are those of couplings that were still moving.",
            "",
        ]
    claims = [(c, m, unconverged.get(m, v), why) for c, m, v, why in assess_claims(summaries)]
    for claim, model, verdict, why in claims:
        lines.append(f"| {claim} | {model} | **{verdict}** | {why} |")
    for m in models:
        if f"models/{m}/notebook" in info.groups:
            nb, attrs = read_tree(h5_path, f"models/{m}/notebook")
            lines += ["", *_notebook_lines(m, nb, attrs, exp[m]["data"])]
    summary = claims + [
        (TRANSIENT_MEMORY, f"{m}, {task}", unconverged.get(m, v), why)
        for m, task, v, why in assess_references(summaries)
    ]
    study = {}
    if baselines is not None:
        section, fidelity = _baseline_section(baselines, summaries, exp, unconverged)
        lines += ["", *section]
        summary += fidelity
        study = read_patch_study(baselines)
    patches = patch_claims(exp, summaries, study, unconverged)
    if patches:
        lines += ["", *patch_size_lines(patches, study, norms)]
        summary += patches
    if figures:
        lines += ["", "## Figures", "", *figure_lines(figures)]
    lines += _stage_time_lines(stage_times, models)
    lines.append("")
    atomic_write_text(out_path, "\n".join([*header, *_summary_lines(summary), "", *lines]))
    return out_path


# ---------------------------------------------------------------------------- baselines
ABOUT_TRAINING_RANGE = (2, 8)  # "lowest for t in about 3-7": the training range, +-1
BLOCK_BEST_T = "the block's error is lowest for t in about 3-7"
VIT_BEST = "the ViT is best"
BLOCK_BEATS_SA = "the block beats the bare SA given enough iterations"
SA_MORE_UNIFORM = (
    "predicted patches are more uniform for the bare SA than for the block and the ViT"
)


def no_verdict(attrs) -> str | None:
    """None when ``attrs`` (a trained model's attributes in its file) record that it
    converged; else what the report prints in place of a verdict, ``"not converged after N
    epochs — no verdict"`` (a file of a spinsa before the record: N is its ``epochs``)."""
    record = Convergence.from_attrs(attrs)
    if record is None:
        return not_converged_text(attrs.get("epochs"))
    return record.no_verdict


def _convergence_cell(attrs) -> str:
    """The table cell of a trained model: how far it converged, in bold when it did not."""
    record = Convergence.from_attrs(attrs)
    if record is None or not record.converged:
        return f"**{no_verdict(attrs)}**"
    return f"after {record.epochs_used} of at most {record.max_epochs} epochs"


def assess_baseline_claims(
    baselines: dict[str, dict[str, dict]],
    sa: dict[str, dict[str, dict]],
    medians: dict[str, float],
    elsewhere: Sequence[str] = (),
    unconverged: dict[str, str] | None = None,
) -> list[tuple[str, str, str, str]]:
    """Plain verdicts on the baselines' fidelity statements: the block's best t in
    :data:`ABOUT_TRAINING_RANGE`; the ViT's error below every other model's best; the block's
    best error below the bare SA's best; the bare SA's median masked-patch variance below
    both baselines'. "Below" means by more than :data:`SIGNIFICANT_Z` combined standard
    errors (a missing ``best_sem`` counts as 0).

    A statement gets a verdict only when every baseline it rests on converged (its
    ``converged`` attribute); otherwise its verdict is :func:`no_verdict` of the first one
    that did not ("not converged after N epochs — no verdict"), and the evidence names it.

    Parameters
    ----------
    baselines : dict
        ``model -> task -> {"best_t", "best_error", "best_sem", "converged",
        "epochs_used", ...}`` for "recycled" and "vit" (:func:`read_baseline_summaries`).
    sa : dict
        ``sa model -> task -> summarize_arrays(...)``.
    medians : dict
        ``model -> median masked-patch variance``.
    elsewhere : sequence of str
        Bare-SA models whose errors are measured in another pixel space than the baselines'
        (the damico2024 embedding's min(2p, 1)): their errors are compared with no one.
    unconverged : dict, optional
        ``sa model -> no-verdict text`` of the bare-SA models whose fit did not converge
        (:func:`unconverged_fits`): the statements about them get that text, and the ViT is
        not compared with them.

    Returns
    -------
    list of (statement, task or model, verdict, evidence)
    """
    lo, hi = ABOUT_TRAINING_RANGE
    rb, vit = baselines["recycled"], baselines["vit"]
    unconverged = unconverged or {}
    same_space = {m: x for m, x in sa.items() if m not in elsewhere}
    out = []

    labels = {"recycled": "block", "vit": "ViT"}

    def claim(statement, where, ok, evidence, rests_on, sa_model=None):
        if sa_model in unconverged:  # nor from a bare SA whose fit was still moving
            out.append((statement, where, unconverged[sa_model], evidence))
            return
        for model, task in rests_on:  # a verdict only from converged baselines
            why = no_verdict(baselines[model][task])
            if why is not None:
                evidence = f"{labels[model]} ({task}) {why.split(' — ')[0]}; {evidence}"
                out.append((statement, where, why, evidence))
                return
        out.append((statement, where, "holds" if ok else "does not hold", evidence))

    for task in (t for t in TASKS if t in rb):
        bt, error = rb[task]["best_t"], fmt(rb[task]["best_error"])
        why = f"best t = {bt} (error {error})"
        claim(BLOCK_BEST_T, task, lo <= bt <= hi, why, [("recycled", task)])
    for task in (t for t in TASKS if t in vit):
        others = {"block": rb[task]}
        others |= {m: x[task] for m, x in same_space.items() if task in x and m not in unconverged}
        z = {m: _z_below(vit[task], o) for m, o in others.items()}
        listed = ", ".join(
            f"{m} best {fmt(o['best_error'])} (z = {fmt(z[m], 1)})" for m, o in others.items()
        )
        ok = all(significant(v) for v in z.values())
        evidence = f"ViT {fmt(vit[task]['best_error'])}; {listed}"
        claim(VIT_BEST, task, ok, evidence, [("vit", task), ("recycled", task)])
    for task in (t for t in TASKS if t in rb):
        for m, x in ((m, x) for m, x in same_space.items() if task in x):
            z = _z_below(rb[task], x[task])
            block = f"block {fmt(rb[task]['best_error'])} at t = {rb[task]['best_t']}"
            bare = f"bare SA ({m}) {fmt(x[task]['best_error'])} at t = {x[task]['best_t']}"
            evidence = f"{block}; {bare}; z = {fmt(z, 1)}"
            where, on = f"{task}, {m}", [("recycled", task)]
            claim(BLOCK_BEATS_SA, where, significant(z), evidence, on, sa_model=m)
    for m in (m for m in sa if m in medians):
        ok = all(medians[m] < medians[b] for b in baselines if b in medians)
        shown = ", ".join(f"{k} {fmt(medians[k], 5)}" for k in (m, *baselines) if k in medians)
        on = [(b, "masked") for b in baselines if b in medians and "masked" in baselines[b]]
        claim(SA_MORE_UNIFORM, m, ok, f"median masked-patch variance: {shown}", on, sa_model=m)
    return out


def _z_below(a: dict, b: dict) -> float:
    """How many combined standard errors a's best error lies below b's (a missing
    ``best_sem`` counts as 0)."""
    return combined_z(
        b["best_error"], b.get("best_sem", 0.0), a["best_error"], a.get("best_sem", 0.0)
    )


SA_PATCH = "the bare SA works best with 2x2 patches"
BLOCK_PATCH = "the recycled block works best with 4x4 patches"


def assess_patch_claims(
    sa_pairs: dict[str, tuple[dict, dict]],
    block: tuple[dict, dict] | None = None,
    withheld: dict[str, str] | None = None,
) -> list[tuple[str, str, str, str]]:
    """Verdicts on the paper's patch-size claim: the bare SA is better on 2x2 patches than on
    4x4, the recycled block on 4x4 than on 2x2, each by more than :data:`SIGNIFICANT_Z`
    combined standard errors of the best errors.

    Parameters
    ----------
    sa_pairs : dict
        ``"model, task" -> (summary at 2x2, summary at 4x4)`` of one bare-SA recipe
        (``best_error``, ``best_sem``, ``best_t``).
    block : (dict, dict), optional
        The block's masked-task attributes at 2x2 and at 4x4 (one training budget), from
        ``baselines.h5``; a verdict only when both converged.
    withheld : dict, optional
        ``where -> no-verdict text`` of the pairs with a fit that did not converge.

    Returns
    -------
    list of (statement, where, verdict, evidence)
    """

    def compare(statement, where, better, worse, sizes):
        z = _z_below(better, worse)
        evidence = "; ".join(
            f"{size}: {pm(x['best_error'], x.get('best_sem'))} at t = {x['best_t']}"
            for size, x in zip(sizes, (better, worse), strict=True)
        )
        verdict = "holds" if significant(z) else "does not hold"
        return (statement, where, verdict, f"{evidence}; z = {fmt(z, 1)}")

    withheld = withheld or {}
    out = []
    for where, (s2, s4) in sa_pairs.items():
        statement, _, verdict, evidence = compare(SA_PATCH, where, s2, s4, ("2x2", "4x4"))
        out.append((statement, where, withheld.get(where, verdict), evidence))
    if block is not None:
        b2, b4 = block
        why = next((w for w in (no_verdict(b2), no_verdict(b4)) if w is not None), None)
        row_ = compare(BLOCK_PATCH, "masked", b4, b2, ("4x4", "2x2"))
        out.append(row_ if why is None else (*row_[:2], why, row_[3]))
    return out


def read_baseline_summaries(path) -> dict[str, dict[str, dict]]:
    """``model -> task -> attrs`` (best_t, best_error, ...) of a ``baselines.h5``."""
    out: dict[str, dict[str, dict]] = {}
    for model in io.read(path).attrs["models"]:
        for task in TASKS:
            try:
                out.setdefault(model, {})[task] = io.read_attrs(path, f"models/{model}/{task}")
            except KeyError:
                pass
    return out


def _patch_medians(baselines_h5) -> dict[str, float]:
    """``model -> median masked-patch variance`` of a ``baselines.h5`` (Fig. 2)."""
    arrays, attrs = read_tree(baselines_h5, "patch_variances")
    return {str(m): float(v) for m, v in zip(attrs["models"], arrays["median"], strict=True)}


def _pixel_space_elsewhere(exp: dict) -> list[str]:
    """The bare-SA models (``exp``: name -> experiment config) whose errors are measured in
    another pixel space than [0, 1]."""
    return [m for m, e in exp.items() if e.get("embedding", {}).get("scale", "paper") != "paper"]


def _training_cells(a: dict, config: dict) -> list[str]:
    """Width, parameters, images, epochs, minutes and images/s of one trained baseline."""
    n_fit = a["n_train"] - a.get("n_val", 0)
    epochs = a.get("epochs_used", a.get("epochs"))
    seconds = a["train_seconds"]
    rate = n_fit * epochs / seconds if seconds > 0 else math.nan
    return [
        str(config.get("width", "?")),
        f"{a['n_parameters']['total']:,}",
        f"{a['n_train']:,}",
        f"{epochs} of {a.get('max_epochs', a.get('epochs'))}",
        fmt(seconds / 60, 1),
        fmt(rate, 0),
    ]


def baseline_report_lines(baselines_h5, reproduce_h5, summaries=None) -> list[str]:
    """The report's section on the baselines (markdown lines), from the two files only;
    ``summaries`` (``model -> read_summaries(...)`` of ``reproduce_h5``) if read already."""
    sa = summaries or {m: read_summaries(reproduce_h5, m) for m in model_names(reproduce_h5)}
    attrs = {m: io.read_attrs(reproduce_h5, f"models/{m}") for m in sa}
    exp = {m: a.get("experiment_config", {}) for m, a in attrs.items()}
    return _baseline_section(baselines_h5, sa, exp, unconverged_fits(attrs))[0]


BEATS_REFERENCES = (
    "a backprop baseline beats every simple predictor on the same inputs (spinsa's test, "
    "not a claim of the paper)"
)


def _baseline_reference_lines(bl: dict, sa: dict, same_inputs: dict) -> tuple[list[str], list]:
    """The baselines beside the simple references of the same corrupted test images (those
    of a bare-SA model in [0, 1] pixels with the baselines' patch size, ``same_inputs``:
    task -> model), and one verdict per baseline and task: beats every reference by more
    than :data:`SIGNIFICANT_Z` combined standard errors."""
    labels = {"recycled": "recycled block", "vit": "ViT"}
    lines, rows = [], []
    for task, model in same_inputs.items():
        refs = sa[model][task].get("references") or {}
        trained = {m: bl[m][task] for m in labels if task in bl.get(m, {})}
        if not refs or not trained:
            continue
        z = {(m, n): _z_below(a, {"best_error": r["error"], "best_sem": r["sem"]})
             for m, a in trained.items() for n, r in refs.items()}  # fmt: skip
        lines += [
            f"**{TASK_TITLES[task]}**: the baselines beside the references of the same "
            f"inputs (computed for {model}; z > {SIGNIFICANT_Z:g}: the baseline is lower)",
            "",
            "| reference | error | " + " | ".join(f"z of the {labels[m]}" for m in trained) + " |",
            "|---|---|" + "---|" * len(trained),
        ]
        for n, label in REFERENCES[task].items():
            if n in refs:
                cells = [label, pm(refs[n]["error"], refs[n]["sem"])]
                lines.append(row([*cells, *(fmt(z[m, n], 1) for m in trained)]))
        lines.append("")
        for m, a in trained.items():
            best = min(refs, key=lambda n: refs[n]["error"])
            lost = [REFERENCES[task][n] for n in REFERENCES[task] if n in refs
                    and not significant(z[m, n])]  # fmt: skip
            evidence = (
                f"{pm(a['best_error'], a['best_sem'])}; best reference: "
                f"{REFERENCES[task][best]}, {pm(refs[best]['error'], refs[best]['sem'])} "
                f"(z = {fmt(z[m, best], 1)}); not beaten: {', '.join(lost) or 'none'}"
            )
            verdict = no_verdict(a) or ("does not hold" if lost else "holds")
            rows.append((BEATS_REFERENCES, f"{labels[m]}, {task}", verdict, evidence))
    return lines, rows


def _same_inputs(exp: dict, sa: dict, elsewhere, patch: int) -> dict[str, str]:
    """``task -> bare-SA model`` whose test inputs the baselines share: [0, 1] pixels and
    the baselines' patch size (the masks follow the patches)."""
    out: dict[str, str] = {}
    for m in (m for m in sa if m not in elsewhere):
        if exp[m].get("embedding", {}).get("patch") == patch:
            for task in sa[m]:
                out.setdefault(task, m)
    return out


def _baseline_section(baselines_h5, sa, exp, unconverged) -> tuple[list[str], list]:
    """The baselines' section and its verdicts (:func:`assess_baseline_claims`, and each
    baseline against the simple references of its inputs)."""
    bl = read_baseline_summaries(baselines_h5)
    info = io.read(baselines_h5)
    configs = info.config.get("baselines", {})
    elsewhere = _pixel_space_elsewhere({m: exp[m] for m in sa})
    pv_arrays, pv_attrs = read_tree(baselines_h5, "patch_variances")
    pv_models = [str(m) for m in pv_attrs["models"]]
    medians = _patch_medians(baselines_h5)
    first = bl["recycled"]["masked"]
    lines = [
        "## Backprop baselines: recycled block and ViT",
        "",
        f"Trained by backpropagation on {first['n_train']:,} training images "
        f"({first['patch']}x{first['patch']} patches), each until the stopping rule held or "
        f"at most {first['epochs']} epochs, evaluated on the same {first['n_test']:,} test "
        "images with the run's task streams (same noise; the same masks when the patch sizes "
        "agree). Errors are mean squared pixel errors over all pixels in [0, 1]. "
        + (
            f"The {', '.join(elsewhere)} model(s) measure theirs in the notebook's pixel space "
            "min(2p, 1), so their errors are compared with no baseline's. "
            if elsewhere
            else ""
        )
        + "Training times are those of the training itself (images/s counts the training "
        "images of every epoch).",
        "",
        *_baseline_training_lines(first),
        "",
        "| model | task | width | parameters | training images | epochs | training (min) | "
        "images/s | best t | best error | error at t = 1 | error at t = T | converged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, label in (("recycled", "recycled block"), ("vit", "ViT")):
        for task, a in bl.get(model, {}).items():
            best = pm(a["best_error"], a["best_sem"]) + (
                " (constant in t)" if model == "vit" else ""
            )
            cells = [
                label,
                task,
                *_training_cells(a, configs.get(model, {})),
                a["best_t"] if model == "recycled" else "-",
                best,
                fmt(a["error_t1"]),
                fmt(a["error_T"]),
                _convergence_cell(a),
            ]
            lines.append(row(cells))
    for m, x in sa.items():
        for task, y in x.items():
            cells = [
                f"bare SA ({m})",
                task,
                *["-"] * 6,
                y["best_t"],
                pm(y["best_error"], y["best_sem"]),
                fmt(y["error_t1"]),
                fmt(y["error_T"]),
                "-",
            ]
            lines.append(row(cells))
    same = _same_inputs(exp, sa, elsewhere, first["patch"])
    reference_lines, reference_rows = _baseline_reference_lines(bl, sa, same)
    if reference_lines:
        lines += ["", *reference_lines]
    lines += [
        "",
        f"Masked-patch pixel variances (Fig. 2; first {pv_attrs['n_images']} test images, each "
        "model at its best t on the masked task):",
        "",
        "| model | patch | t | masked patches | mean variance | median variance |",
        "|---|---|---|---|---|---|",
    ]
    for k, m in enumerate(pv_models):
        patch = pv_attrs["patch"][m]
        lines.append(
            f"| {m} | {patch}x{patch} | {pv_attrs['best_t'][m] if m != 'clean' else '-'} | "
            f"{int(pv_arrays['n_patches'][k])} | {fmt(float(pv_arrays['mean'][k]), 5)} | "
            f"{fmt(medians[m], 5)} |"
        )
    lines += [
        "",
        "Fidelity statements, measured plainly: the block's best t in 2..8 (the training "
        "range 3..7, give or take one); the ViT's error below every other model's best; the "
        "block's best error below the bare SA's best; the bare SA's median masked-patch "
        "variance below both baselines'; and each baseline below every simple reference of "
        "its inputs. Below means by more than "
        f"{SIGNIFICANT_Z:g} combined standard errors. A statement gets a verdict only when the "
        "baselines it rests on converged.",
        "",
        "| statement | where | verdict | evidence |",
        "|---|---|---|---|",
    ]
    verdicts = reference_rows + assess_baseline_claims(bl, sa, medians, elsewhere, unconverged)
    lines += [
        f"| {claim} | {where} | **{verdict}** | {why} |" for claim, where, verdict, why in verdicts
    ]
    return lines, verdicts


def read_patch_study(baselines_h5) -> dict[int, dict]:
    """``patch -> attrs`` of the block's patch study in a ``baselines.h5`` (empty without)."""
    names = io.read(baselines_h5).attrs.get("patch_models") or []
    out = {}
    for name in names:
        attrs = io.read_attrs(baselines_h5, f"models/{name}/masked")
        out[int(attrs["patch"])] = attrs
    return out


def _same_recipe(a: dict, b: dict) -> bool:
    """Whether two experiment configs differ only in their patch size (and spin dimension)."""

    def strip(cfg):
        emb = {k: v for k, v in cfg.get("embedding", {}).items() if k not in ("patch", "d")}
        return {**{k: v for k, v in cfg.items() if k != "name"}, "embedding": emb}

    return strip(a) == strip(b)


def patch_claims(exp, summaries, study=None, unconverged=None) -> list[tuple]:
    """:func:`assess_patch_claims` of a reproduce run: its bare-SA recipes run on both patch
    sizes (``exp``: name -> experiment config; withheld where a fit did not converge,
    ``unconverged``) and the block's patch ``study`` (:func:`read_patch_study`)."""
    unconverged = unconverged or {}
    pairs, withheld = {}, {}
    for m2, e2 in exp.items():
        for m4, e4 in exp.items():
            sizes = (e2["embedding"]["patch"], e4["embedding"]["patch"])
            if sizes != (2, 4) or not _same_recipe(e2, e4):
                continue
            for task in (t for t in TASKS if t in summaries[m2] and t in summaries[m4]):
                where = f"{task}: {m2} / {m4}"
                pairs[where] = (summaries[m2][task], summaries[m4][task])
                late = [unconverged[m] for m in (m2, m4) if m in unconverged]
                if late:
                    withheld[where] = late[0]
    return assess_patch_claims(pairs, _study_pair(study or {}), withheld)


def _study_pair(study: dict[int, dict]) -> tuple[dict, dict] | None:
    """The patch study's (2x2, 4x4) attributes, or None without both."""
    return (study[2], study[4]) if {2, 4} <= set(study) else None


def patch_size_lines(claims: list[tuple], study=None, norms=None) -> list[str]:
    """The section on the paper's patch-size claim (:func:`patch_claims`, of the block's
    patch ``study``); [] without any. ``norms``: ``model -> (root-mean-square |J_ij| over
    the ordered pairs, cosine with the Hebbian couplings)`` of the bare-SA models, stated
    since the norm sets the regime."""
    if not claims:
        return []
    block = _study_pair(study or {})
    lines = [
        "## Patch size",
        "",
        "The paper reports that the bare SA works best with 2x2 patches and the recycled block "
        "with 4x4. Each bare-SA recipe is run on both (d = 8 and d = 32: two spin components per "
        "pixel, as the embedding's default); the masks differ with the patch size "
        "(30 % of the patches), so each patch size is its own masked task. Best errors over "
        "all pixels; a claim holds when the better size wins by more than "
        f"{SIGNIFICANT_Z:g} combined standard errors.",
        "",
    ]
    if block is not None:
        b2, b4 = block
        lines += [
            f"The block's patch study trains it on both patch sizes with one budget: "
            f"{b4['n_train']:,} training images, the same recipe, masked task only "
            f"(4x4: {_convergence_cell(b4)}; 2x2: {_convergence_cell(b2)}; training "
            f"{fmt(b4['train_seconds'] / 60, 1)} and {fmt(b2['train_seconds'] / 60, 1)} min).",
            "",
        ]
    if norms:
        lines += [
            'The fits keep the norm of their random start (`constraint = "global"`), which '
            "differs with N and d, so the two patch sizes need not run in one regime: root mean "
            "square |J_ij| over the ordered pairs (cosine with the Hebbian couplings) "
            + ", ".join(f"{m} {fmt(r, 4)} ({fmt(c, 3)})" for m, (r, c) in norms.items())
            + ".",
            "",
        ]
    lines += ["| statement | where | verdict | evidence |", "|---|---|---|---|"]
    for claim, where, verdict, why in claims:
        lines.append(f"| {claim} | {where} | **{verdict}** | {why} |")
    return lines


def _baseline_training_lines(attrs) -> list[str]:
    """How the baselines were stopped: the held-out images and the rule, from a model's
    attributes (a file of a spinsa before the convergence record: that it has none)."""
    record = Convergence.from_attrs(attrs)
    if record is None:
        return [
            "This file records no validation curve nor convergence: the baselines trained "
            "for a fixed number of epochs, so no statement gets a verdict."
        ]
    n_val = attrs.get("n_val", 0)
    if not n_val:
        return [
            "No training image was held out for validation (val_fraction = 0): nothing "
            "tells whether the baselines converged, so no statement gets a verdict."
        ]
    return [
        f"{n_val} of the training images were held out (never the test images); the loss on "
        "them after every epoch is the validation curve. Training stopped at the first epoch "
        f"with {record.criterion} (or at the most epochs), and each model keeps the weights "
        "of its lowest validation loss. A model that reached the most epochs first has not "
        "converged, and gives no verdict."
    ]


# ---------------------------------------------------------------------------- compare
# ---------------------------------------------------------------------------- report
def _paired_words(a: str, b: str, difference: float, z: float) -> str:
    """How a's best error compares with b's, image by image, in words."""
    if not math.isfinite(z):
        return f"{a} vs {b}: no standard error, no comparison"
    size = f"by {abs(difference):.2g} (z = {z:.1f})"
    if significant(z):
        return f"{a}'s best error is lower than {b}'s {size}"
    if significant(-z):
        return f"{a}'s best error is higher than {b}'s {size}"
    return (
        f"{a}'s and {b}'s best errors are not significantly different "
        f"(difference {difference:.2g}, z = {z:.1f}, |z| <= {SIGNIFICANT_Z:g})"
    )


def _models_lines(attrs: dict, names) -> list[str]:
    runs = attrs["runs"]
    rows = [
        [
            n,
            f"`{runs[n]['file']}`",
            fmt(runs[n].get("fit_norm"), 3),
            fmt(runs[n].get("fit_loss")),
            fmt(runs[n].get("hebbian_cosine"), 4),
        ]
        for n in names
    ]
    lines = [
        f"{len(names)} models on {attrs['dataset']} (N = {attrs['n_tokens']} tokens, "
        f"d = {attrs['d']}); entropy and pseudo-likelihood on {attrs['n_train_used']} "
        f"training and {attrs['n_test_used']} test images (λ_train = {attrs['lam_train']:g}, "
        f"λ_eval = {attrs['lam_eval']:g}).",
        "",
        *table(["model", "run file", "|J|_F", "fit loss", "cosine with Hebbian J"], rows),
    ]
    differing = attrs.get("differing") or {}
    if differing:
        lines += ["The runs' configs differ in:", ""]
        lines += table(["key", *names], [[f"`{k}`", *map(repr, v)] for k, v in differing.items()])
    for note in attrs.get("notes") or []:
        lines += [f"Note: {note}", ""]
    return lines


def _coupling_lines(h5: Path, names) -> list[str]:
    cos = analysis.load_analysis(h5, "cosines")
    lines = ["## Similarity of the couplings", "", "Global cosine <J_a, J_b> / (|J_a| |J_b|):", ""]
    lines += table(
        ["", *names],
        [[a, *(fmt(c, 4) for c in row)] for a, row in zip(names, cos.cosine, strict=True)],
    )
    rows, said = [], []
    for p, (a, b) in enumerate(cos.pairs):
        q = dict(zip(cos.levels, cos.quantiles[p], strict=True))
        pair = f"{names[a]} vs {names[b]}"
        rows.append(
            [
                pair,
                fmt(cos.cosine[a, b], 4),
                fmt(cos.mean[p], 4),
                fmt(q[0.5], 4),
                f"{fmt(q[0.05], 3)} to {fmt(q[0.95], 3)}",
            ]
        )
        said.append(
            f"{pair}: global cosine {fmt(cos.cosine[a, b], 3)}; the typical pair of tokens "
            f"(median) {fmt(q[0.5], 3)}, 90% of pairs between {fmt(q[0.05], 2)} and "
            f"{fmt(q[0.95], 2)}."
        )
    lines += ["Cosine of the blocks J_ij, pair of tokens by pair of tokens:", ""]
    lines += table(["tensors", "global", "mean per pair", "median", "5% to 95%"], rows)
    lines += [*(f"- {s}" for s in said), ""]

    sp = analysis.load_analysis(h5, "spectra")
    lines += ["## Spectra", ""]
    lines += [
        "M is the (Nd)×(Nd) matrix of J; its symmetrised part (M + Mᵀ)/2 is the quadratic "
        "form a spin configuration feels. Stable rank |J|²/σ_max²; block top share: mean "
        "σ₁²/Σσ² of a block J_ij (1: every block rank one, 1/d: isotropic).",
        "",
    ]
    rows = [
        [
            n,
            fmt(sp.norm[k], 3),
            fmt(sp.symmetric_eigenvalues[k, 0] / max(sp.norm[k], 1e-300), 4),
            fmt(sp.symmetric_eigenvalues[k, -1] / max(sp.norm[k], 1e-300), 4),
            f"{sp.positive_fraction[k]:.0%}",
            fmt(sp.stable_rank[k], 2),
            fmt(sp.block_top_fraction[k], 3),
        ]
        for k, n in enumerate(names)
    ]
    header = [
        "model",
        "|J|_F",
        "largest eig. of sym. part / |J|",
        "smallest / |J|",
        "positive eig.",
        "stable rank",
        "block top share",
    ]
    lines += table(header, rows)

    dist = analysis.load_analysis(h5, "distance")
    lines += ["## Strength against distance", ""]
    lines += [
        "|J_ij|_F over the pairs at each distance between patch centres (pixels), each tensor "
        "divided by its own mean pair strength (so 2 means twice the average pair):",
        "",
    ]
    n_bins = dist.bin_distance.size
    shown = sorted({b for b in (0, 1, 2, n_bins - 1) if 0 <= b < n_bins})  # near and far
    header = ["model", "mean |J_ij|_F", *(f"d = {dist.bin_distance[b]:.3g}" for b in shown)]
    rows = [
        [n, fmt(dist.scale[k], 4), *(pm(dist.mean[k, b], dist.sem[k, b], 2) for b in shown)]
        for k, n in enumerate(names)
    ]
    lines += table(header, rows)
    lines += [
        f"- {n}: the nearest pairs are {fmt(dist.mean[k, 0], 2)} times the mean, the "
        f"farthest {fmt(dist.mean[k, -1], 2)} times."
        for k, n in enumerate(names)
    ]
    return [*lines, ""]


def _data_lines(h5: Path, names) -> list[str]:
    lines = ["## Attention entropy on the data", ""]
    lines += [
        "H_i = −Σ_j α_ij log α_ij of every site's attention, averaged over sites, mean ± "
        "standard error over images; log(N − 1) is uniform attention (J = 0).",
        "",
    ]
    rows = []
    for split in ("test", "train"):
        e = analysis.load_analysis(h5, f"entropy/{split}")
        a = io.read_group(h5, f"analysis/entropy/{split}")[1]
        label = f"{a.get('data', split)}, λ = {e.lam:g} ({a.get('features', '')})"
        rows.append(
            [
                label,
                *(pm(e.mean[k], e.sem[k], 3) for k in range(len(names))),
                fmt(e.max_entropy, 3),
            ]
        )
        said = [
            f"{n}: {e.mean[k] / e.max_entropy:.0%} of the maximum, exp(H) = "
            f"{math.exp(e.mean[k]):.1f} effective tokens of {math.exp(e.max_entropy):.0f}"
            for k, n in enumerate(names)
        ]
        rows[-1].append("; ".join(said))
    lines += table(["data", *names, "log(N − 1)", "in words"], rows)

    lines += ["## Pseudo-likelihood", ""]
    for split in ("train", "test"):
        pl = analysis.load_analysis(h5, f"pseudolikelihood/{split}")
        a = io.read_group(h5, f"analysis/pseudolikelihood/{split}")[1]
        clamped = "" if pl.score_clamp is None else f", scores clamped at {pl.score_clamp:g}"
        lines += [
            f"L(J) on {pl.n_patterns} {a.get('data', split)} ({a.get('features', '')}, "
            f"λ = {pl.lam:g}{clamped}); "
            f"lower is better; L(0) = {fmt(pl.loss_zero)} (no couplings). The common norm is "
            f"the {'mean of the norms' if pl.common == 'mean' else 'given norm'}, "
            f"{fmt(pl.common_norm, 3)}: L falls without bound as |J| grows, so only values "
            "at one norm say which direction of J fits better.",
            "",
        ]
        rows = [
            [n, fmt(pl.norm[k], 3), fmt(pl.loss[k]), fmt(pl.loss_common[k])]
            for k, n in enumerate(names)
        ]
        lines += table(["model", "|J|_F", "L at its own norm", "L at the common norm"], rows)
        if np.isfinite(pl.loss_common).any():
            k = int(np.nanargmin(pl.loss_common))
            lines += [
                f"- At the common norm the lowest objective is {names[k]}'s "
                f"({fmt(pl.loss_common[k])}); an average over {pl.n_patterns} patterns, "
                "without a standard error.",
                "",
            ]
    return lines


def _task_lines(h5: Path, names, attrs: dict) -> list[str]:
    lines = ["## The tasks", ""]
    lines += [
        "From the evaluations stored in the run files. The best t is the first minimum of "
        "the mean error (t ≥ 1 for the masked task), chosen on the test images themselves, "
        "which favours the model slightly. A model beats a reference when its best error is "
        f"below it by more than {SIGNIFICANT_Z:g} combined standard errors (z > "
        f"{SIGNIFICANT_Z:g}). The lifetime is how long a trajectory's error stays below the "
        "best reference's error on the same image, around its minimum (censored: still "
        "below at t = T).",
        "",
    ]
    for task, lacking in (attrs.get("missing_tasks") or {}).items():
        lines += [
            f"No {TASK_TITLES[task]} table: {', '.join(lacking)} hold(s) no evaluation of "
            f"it (`spinsa evaluate RUN.h5 --task {task}`).",
            "",
        ]
    for task in TASKS:
        try:
            r = analysis.load_analysis(h5, f"tasks/{task}")
        except KeyError:
            continue
        labels = REFERENCES[task]

        def ref(k: int, r=r, labels=labels) -> str:
            best = r.best_reference[k]
            if not best:
                return "n/a"
            j = r.references.index(best)
            return f"{labels.get(best, best)}: {pm(r.reference_error[k, j], r.reference_sem[k, j])}"

        rows = {
            "best t: error": [
                f"t = {r.best_t[k]}: {pm(r.best_error[k], r.best_sem[k])}"
                for k in range(len(names))
            ],
            "best reference": [ref(k) for k in range(len(names))],
            "z over it": [fmt(r.z[k], 1) for k in range(len(names))],
            f"beats it (z > {SIGNIFICANT_Z:g})": [
                "**yes**" if r.beats[k] else "no" for k in range(len(names))
            ],
            "lifetime below it: mean ± s.e. (median)": [
                f"{pm(r.lifetime_mean[k], r.lifetime_sem[k], 1)} ({fmt(r.lifetime_median[k], 1)})"
                for k in range(len(names))
            ],
            "transient / censored": [
                f"{r.fraction_transient[k]:.0%} / {r.fraction_censored[k]:.0%}"
                for k in range(len(names))
            ],
            "final images vs their mean (coherence)": [
                pm(r.coherence_mean[k], r.coherence_sem[k], 3) for k in range(len(names))
            ],
            "final images vs nearest training image": [
                pm(r.nearest_corr_mean[k], r.nearest_corr_sem[k], 3) for k in range(len(names))
            ],
            "ended on fixed point / 2-cycle / neither": [
                " / ".join(
                    "n/a" if not np.isfinite(v) else f"{v:.0%}"
                    for v in (
                        r.fraction_fixed_point[k],
                        r.fraction_two_cycle[k],
                        r.fraction_other[k],
                    )
                )
                for k in range(len(names))
            ],
        }
        lines += [f"### {TASK_TITLES[task]} ({r.n_images[0]} test images)", ""]
        lines += table(["", *names], [[label, *cells] for label, cells in rows.items()])
        for k, n in enumerate(names):
            best = r.best_reference[k]
            if not best:
                lines.append(f"- {n}: the file holds no references; no claim is made.")
                continue
            verdict = (
                "beats the best reference: a transient memory that simple predictors do not hold"
                if r.beats[k]
                else f"does not beat the best reference by more than {SIGNIFICANT_Z:g} "
                "standard errors"
            )
            lines.append(
                f"- {n}: best error {pm(r.best_error[k], r.best_sem[k])} at t = {r.best_t[k]}; "
                f"{verdict} ({labels.get(best, best)}, z = {fmt(r.z[k], 1)})."
            )
        if np.isfinite(r.paired_z).any():
            lines += ["", "Best errors image by image (paired over the same test images):", ""]
            for a in range(len(names)):
                for b in range(a + 1, len(names)):
                    diff, z = r.paired_difference[a, b], r.paired_z[a, b]
                    lines.append(f"- {_paired_words(names[a], names[b], diff, z)}.")
        else:
            lines += [
                "",
                "No image-by-image comparison: the runs' test images or corruptions differ.",
            ]
        lines.append("")
    return lines


def write_compare_report(h5_path, out_path, figures: Sequence[str] = ()) -> Path:
    """Write ``report.md`` from a comparison file (reads the file only).

    Parameters
    ----------
    h5_path : str or PathLike
        ``compare.h5`` from :func:`compare_runs`.
    out_path : str or PathLike
    figures : sequence of str
        File names of the figures to embed (relative to the report).

    Returns
    -------
    Path
    """
    h5 = Path(h5_path)
    info = io.read(h5)
    if info.kind != COMPARE_KIND:
        raise ValueError(f"{h5} is a spinsa file of kind {info.kind!r}, not a comparison")
    attrs = info.attrs
    names = list(attrs["models"])
    lines = ["# Comparison of coupling tensors", "", *_models_lines(attrs, names)]
    lines += _coupling_lines(h5, names)
    lines += _data_lines(h5, names)
    lines += _task_lines(h5, names, attrs)
    if figures:
        lines += ["## Figures", "", *figure_lines(figures)]
        lines.append("")
    return atomic_write_text(out_path, "\n".join(lines))


# ---------------------------------------------------------------------------- sequences
def _order(names, backprop=()) -> list[str]:
    """The spin model, the ``backprop`` models, then the references."""
    first = [*SPIN_MODELS.values(), *backprop]
    return [n for n in first if n in names] + sorted(n for n in names if n not in first)


def error_table(scores: dict[str, dict[str, float]], backprop=()) -> list[str]:
    """The markdown table of test MSE and MAE (± standard error) of every model."""
    lines = ["| model | MSE | MAE | gain over persistence (z) |", "|---|---|---|---|"]
    for name in _order(scores, backprop):
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


_START_WORDS = {
    "zero": "the token to predict starts as the zero spin (the masked start)",
    "persistence": "the token to predict starts as the last observed value (the denoising "
    "start; at t = 0 the forecast is persistence)",
}


def _persistence_lines(a: dict) -> list[str]:
    """The verdict rows: does the dynamics, from each start, improve on persistence?"""
    lines = [
        "## Does the dynamics improve on persistence?",
        "",
        "A start beats persistence when its test MSE lies below persistence's by more than "
        f"{SIGNIFICANT_Z:g} combined standard errors (z below; the paired z is beside it).",
        "",
        "| start | t (chosen on validation) | MSE | z vs persistence (paired) | verdict |",
        "|---|---|---|---|---|",
    ]
    scores = a["scores"]
    for start, v in a["vs_persistence"].items():
        s = scores[SPIN_MODELS[start]]
        verdict = "beats persistence" if v["beats"] else "does not beat persistence"
        verdict = _fit_no_verdict(a) or verdict  # the verdict rests on the couplings' fit
        lines.append(
            f"| {start} | {a['best_t'][start]} | {pm(s['mse'], s['mse_sem'])} | "
            f"{fmt(v['z'], 1)} ({fmt(v['paired_z'], 1)}) | {verdict} |"
        )
    return [*lines, ""]


def _fit_no_verdict(a: dict) -> str | None:
    """None when the couplings' L-BFGS fit of a ``sequences.h5`` converged (its own status);
    else the text in place of a verdict drawn from any start of the spin model."""
    converged = a.get("fit_converged")
    if converged:
        return None
    return not_converged_text(None if converged is None else a.get("fit_iterations"), "iterations")


def _sequence_no_verdict(name: str, attrs: dict) -> str | None:
    """None when model ``name`` of a ``sequences.h5`` converged: a backprop model by the
    stopping rule, the spin model by its L-BFGS fit's own status; else the text in place of
    its verdict."""
    if name in SPIN_MODELS.values():  # every start reads the same fitted couplings
        return _fit_no_verdict(attrs)
    return no_verdict(attrs.get("convergence", {}).get(name, {}))


def _sequence_training_lines(attrs: dict, cfg: dict) -> list[str]:
    """How far every trained model converged, one bullet each."""
    records = attrs.get("convergence", {})
    lines = [
        "Convergence: a verdict only for a model that converged (the backprop models: at "
        "most " + f"{cfg['epochs']} epochs, stopped at {_criterion(cfg)} on the validation "
        "windows, with the weights of the lowest validation MSE; the spin model: the "
        "L-BFGS fit's own convergence).",
        "",
    ]
    for name in cfg["baselines"]:
        record = Convergence.from_attrs(records.get(name, {}))
        lines.append(f"- {name}: {record.describe() if record else no_verdict({})}")
    fit = {k: attrs.get(f"fit_{k}") for k in ("converged", "criterion", "iterations", "message")}
    spins = ", ".join(n for n in SPIN_MODELS.values() if n in attrs.get("scores", {}))
    lines.append(f"- {spins} (one L-BFGS fit of the couplings): {convergence_words(fit)}")
    return lines


def _criterion(cfg: dict) -> str:
    """The stopping rule of a sequences config (files before ``rel_tol``: 0, the rule then)."""
    return criterion_text(cfg.get("rel_tol", 0.0), cfg["patience"])


def write_sequences_report(
    h5, out_path, figures: Sequence[str] = (), command: str | None = None
) -> Path:
    """Write ``report.md`` of a ``sequences.h5`` (the setup, the table, plain statements),
    reading the file only; ``command``, the one that wrote the file, is named at the top."""
    info = io.read(h5)
    a, cfg = info.attrs, info.config
    scores = a["scores"]
    best_ref = min(filter(is_reference, scores), key=lambda m: scores[m]["mse"])
    starts = "; ".join(
        f"{SPIN_MODELS[s]}: {_START_WORDS[s]}, read at t = {t}" for s, t in a["best_t"].items()
    )
    lines = [
        "# Sequences: one-step forecasts of the normalised series",
        "",
        *provenance_lines("sequences", info, command),
        "",
        f"Series: {a['source']}, column {a['column']}; train / validation / test rows "
        f"{a['rows'][0]} / {a['rows'][1]} / {a['rows'][2]} (split by time, normalised with the "
        f"training part's mean {a['mean']:.3f} and standard deviation {a['std']:.3f}). Every "
        f"model predicts the next value from the {cfg['context']} before it, on the same "
        f"{len(info.array('truth'))} test windows.",
        "",
        f"The bare self-attention: {cfg['k']} value(s) per token, pseudo-likelihood at "
        f"λ = {cfg['lam_train']} (L = {a['fit_loss']:.4f}), the dynamics at "
        f"λ = {cfg['lam_eval']}, γ = {cfg['gamma']}, read at the t ≥ 1 of lowest validation "
        f"error. {starts}.",
        "",
        *error_table(scores, cfg["baselines"]),
        "",
        "z is the gain in standard errors of the paired difference of squared errors on the "
        "same windows. Standard errors treat the test errors as independent; neighbouring "
        f"rows are correlated, so they are too small, and a gain counts only when "
        f"z > {SIGNIFICANT_Z:g}.",
        "",
        *_persistence_lines(a),
    ]
    ref = scores[best_ref]
    forecasts, truth = io.read_group(h5, "forecasts")[0], info.array("truth")
    lines += [*_sequence_training_lines(a, cfg), ""]
    for name in _order(scores, cfg["baselines"]):
        s = scores[name]
        if is_reference(name):
            continue
        z = paired_gain_z((forecasts[name] - truth) ** 2, (forecasts[best_ref] - truth) ** 2)
        compared = f"the best reference ({best_ref}, {ref['mse']:.4f}; z = {z:+.1f})"
        why = _sequence_no_verdict(name, a)
        if why is not None:
            lines.append(f"- {name}: MSE {s['mse']:.4f}; **{why}** (against {compared}).")
            continue
        verdict = "beats" if significant(z) else "does not beat"
        lines.append(f"- {name}: MSE {s['mse']:.4f}; {verdict} {compared}.")
    lines += ["", "## The spin model's own analyses", ""]
    for start, t in a["best_t"].items():
        lines += [
            f"- {start} start: error against t lowest on the validation windows at t = {t}; "
            f"on average a test forecast stays better than persistence for "
            f"{a['lifetime_mean'][start]:.2f} steps of the dynamics.",
        ]
    lines += [
        f"- Attractors of the chain from {cfg['attractor_starts']} random spin chains "
        f"({cfg['attractor_steps']} steps): {a['n_attractors']} found; "
        f"{100 * a['fraction_unconverged']:.0f}% of the runs had not converged.",
        *_attractor_lines(info),
        "",
        *figure_lines(figures),
    ]
    return atomic_write_text(out_path, "\n".join(lines) + "\n")
