"""Several run files side by side: what ``spinsa compare A.h5 B.h5 ...`` does.

:func:`compare_runs` reads K >= 2 run files fitted on the same data and embedding, loads
their training and test spins once, runs every comparison of :mod:`spinsa.analysis.compare`
and writes, in ``out_dir``::

    compare.h5          kind "comparison"; every result under /analysis/<name> (read it
                        back with spinsa.analysis.load_analysis(path, name))
    report.md           the tables and plain statements
    *.png               one figure per quantity (spinsa.plotting.compare)

The results and what they are computed on:

``cosines``, ``spectra``, ``distance``
    The couplings alone (distances between patch centres, in pixels).
``entropy/test``, ``entropy/train``
    Attention entropy on ``n_data`` clean test images at λ_eval (the attention of eq. 1
    on the raw spins), and on ``n_data`` training images at λ_train, as the fit saw them.
``pseudolikelihood/train``, ``pseudolikelihood/test``
    The fit's objective at λ_train on ``n_data`` training and test images (standardised
    and with the clamp of the runs' fits when they share those settings).
``tasks/masked``, ``tasks/denoise``
    From the evaluations stored in the run files (nothing is iterated again).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import analysis, io
from spinsa._checks import check_count
from spinsa._config import flatten
from spinsa._files import atomic_write_text
from spinsa._progress import progress as progress_bar
from spinsa.analysis.summary import SIGNIFICANT_Z
from spinsa.damico import standardize_features
from spinsa.experiments.baselines import format_number as _fmt
from spinsa.experiments.baselines import format_pm as _pm
from spinsa.experiments.pipeline import RUN_KIND, load_images, read_run
from spinsa.io.results import read_evaluation
from spinsa.references import REFERENCES
from spinsa.tasks import TASK_TITLES, TASKS

__all__ = ["COMPARE_KIND", "ComparisonResult", "compare_runs", "write_compare_report"]

COMPARE_KIND = "comparison"
H5_NAME = "compare.h5"
REPORT_NAME = "report.md"
N_DATA = 1000
# Keys of the [data] section that may differ: the test set's size changes no fit.
FREE_DATA_KEYS = ("data.n_test",)


@dataclass(frozen=True)
class ComparisonResult:
    """What :func:`compare_runs` wrote.

    Attributes
    ----------
    out_dir : Path
    h5 : Path
        ``compare.h5``.
    report : Path
        ``report.md``.
    figures : tuple of Path
    names : tuple of str
        The models' labels, in the order of the run files.
    """

    out_dir: Path
    h5: Path
    report: Path
    figures: tuple[Path, ...]
    names: tuple[str, ...]


# ---------------------------------------------------------------------------- inputs
def _labels(infos) -> tuple[str, ...]:
    """Each run file's ``name`` attribute (its stem without one), made unique."""
    raw = [str(i.attrs.get("name") or i.path.stem) for i in infos]
    out: list[str] = []
    for name in raw:
        label, n = name, 1
        while label in out:
            n += 1
            label = f"{name}-{n}"
        out.append(label)
    return tuple(out)


def _read_runs(paths):
    """Each run file's info and config; refused unless a run file with couplings."""
    infos, configs = [], []
    for path in paths:
        info, config = read_run(path, kinds=(RUN_KIND,))
        if "J" not in info.datasets:
            raise ValueError(f"{path} holds no couplings /J; give run files from spinsa train")
        infos.append(info)
        configs.append(config)
    return infos, configs


def _check_same_data(paths, configs, infos) -> None:
    """Refuse runs whose couplings live on different spins: another data set, embedding
    or shape of J (only ``data.n_test`` may differ)."""
    first = flatten(configs[0].to_dict())
    shape = infos[0].datasets["J"][0]
    for path, config, info in zip(paths[1:], configs[1:], infos[1:], strict=True):
        flat = flatten(config.to_dict())
        for key in sorted(
            k for k in set(first) | set(flat) if k.startswith(("data.", "embedding."))
        ):
            if key in FREE_DATA_KEYS or first.get(key) == flat.get(key):
                continue
            raise ValueError(
                f"{path} differs from {paths[0]} in {key} ({flat.get(key)!r} vs "
                f"{first.get(key)!r}): its couplings act on other spins; compare runs trained "
                "with the same [data] and [embedding] sections (only data.n_test may differ)"
            )
        if info.datasets["J"][0] != shape:
            raise ValueError(
                f"{path} has couplings of shape {info.datasets['J'][0]}, {paths[0]} of shape "
                f"{shape}; compare runs with the same tokens N and spin dimension d"
            )


def _differing(configs, names) -> dict[str, list]:
    """``key -> one value per model`` for the config keys where the runs differ."""
    # every field, also the options a fit's stored config leaves out at their defaults
    flats = [
        {**flatten(c.to_dict()), **flatten({"fit": dataclasses.asdict(c.fit)})} for c in configs
    ]
    keys = sorted(set().union(*flats) - {"name"})
    return {k: [f.get(k) for f in flats] for k in keys if len({repr(f.get(k)) for f in flats}) > 1}


def _common(values, what: str, notes: list[str], names) -> Any:
    """The runs' common value of a setting, or the first run's with a note saying so."""
    if len({repr(v) for v in values}) == 1:
        return values[0]
    pairs = ", ".join(f"{n}: {v!r}" for n, v in zip(names, values, strict=True))
    notes.append(f"The runs differ in {what} ({pairs}); the comparison uses {values[0]!r}.")
    return values[0]


def _evaluation(path: Path, task: str) -> dict:
    """A run file's evaluation of ``task``: in the file, or for ``spinsa reproduce``'s
    ``fit-<model>.h5`` in its sibling ``eval-<model>-<task>.h5``."""
    try:
        return read_evaluation(path, task)[0]
    except KeyError:
        sibling = path.with_name(f"eval-{path.stem.removeprefix('fit-')}-{task}.h5")
        if not (path.stem.startswith("fit-") and sibling.exists()):
            raise
        return read_evaluation(sibling, task)[0]


def _subsample(n_total: int, n: int) -> np.ndarray:
    """``n`` evenly spaced indices of ``n_total`` (all of them if fewer)."""
    return np.unique(np.linspace(0, n_total - 1, min(n, n_total)).astype(np.int64))


# ---------------------------------------------------------------------------- driver
def compare_runs(
    paths: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    n_data: int = N_DATA,
    overwrite: bool = False,
    progress: bool = False,
) -> ComparisonResult:
    """Compare the couplings and evaluations of K >= 2 run files on the same data.

    Parameters
    ----------
    paths : sequence of str or PathLike
        Run files (``kind = "experiment"``, from ``spinsa train``, :func:`run_experiment`
        or ``spinsa reproduce``'s ``fit-<model>.h5``, whose evaluations are read from the
        ``eval-<model>-<task>.h5`` beside it), fitted on the same data and embedding.
    out_dir : str or PathLike
        Directory of ``compare.h5``, ``report.md`` and the figures (created if needed).
    n_data : int
        Training and test images on which the attention entropy and the pseudo-likelihood
        are measured: evenly spaced training images, and the run's first test images.
    overwrite : bool
        Replace an earlier comparison in ``out_dir`` (default: refuse before any work).
    progress : bool

    Returns
    -------
    ComparisonResult
    """
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(
            f"a comparison needs at least two run files, got {len(paths)}: "
            "spinsa compare A.h5 B.h5 [C.h5 ...] -o OUT_DIR"
        )
    n_data = check_count(n_data, "n_data", 2)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file; give a directory for the comparison (-o)")
    h5, report = out / H5_NAME, out / REPORT_NAME
    if not overwrite and (h5.exists() or report.exists()):
        raise FileExistsError(
            f"{out} already holds a comparison ({H5_NAME}, {REPORT_NAME}); pass overwrite=True "
            "(spinsa compare --overwrite) to replace it, or choose another directory"
        )
    infos, configs = _read_runs(paths)
    _check_same_data(paths, configs, infos)
    names = _labels(infos)
    stages = ["data", "cosines", "spectra", "distance", "entropy", "pseudolikelihood", "tasks"]
    bar = progress_bar(len(stages) + 2, "spinsa compare", "stage", enabled=progress)
    timings: dict[str, float] = {}

    def stage(name: str) -> None:
        bar.set_postfix_str(name)
        timings[name] = time.perf_counter()

    stage("data")
    notes: list[str] = []
    fits = [c.fit for c in configs]
    lam_train = float(_common([f.lam for f in fits], "λ_train (fit.lam)", notes, names))
    standardize = bool(
        _common([getattr(f, "standardize", False) for f in fits], "fit.standardize", notes, names)
    )
    clamp = _common(
        [getattr(f, "score_clamp", None) for f in fits], "fit.score_clamp", notes, names
    )
    lam_eval = float(
        _common([c.dynamics.lam_eval for c in configs], "λ_eval (dynamics.lam_eval)", notes, names)
    )
    notebook = [n for n, c in zip(names, configs, strict=True) if c.dynamics.preset != "design"]
    if notebook:
        notes.append(
            f"{', '.join(notebook)} iterate(s) the published notebook's dynamics (standardised "
            "features, clamped scores); the entropy on test images is that of eq. 1's attention "
            "on the raw spins."
        )
    n_test = min(min(c.data.n_test for c in configs), n_data)
    config = configs[0].with_overrides({"data.n_test": n_test})
    images = load_images(config)
    emb = config.make_embedding()
    x_train = emb.encode(images.train[_subsample(images.train.shape[0], n_data)])
    x_test = emb.encode(images.test)
    seen = (lambda x: standardize_features(x)) if standardize else (lambda x: x)
    Js = [io.read_array(p, "J") for p in paths]
    bar.update()

    results: dict[str, tuple[analysis.AnalysisResult, dict[str, Any]]] = {}
    stage("cosines")
    results["cosines"] = (analysis.pairwise_cosines(Js, names), {})
    bar.update()
    stage("spectra")
    results["spectra"] = (analysis.coupling_spectra(Js, names), {})
    bar.update()
    stage("distance")
    positions = emb.token_positions("center")
    result = analysis.distance_dependence(Js, positions, names, grid_shape=emb.grid_shape)
    results["distance"] = (result, {"distance_unit": "pixels"})
    bar.update()
    stage("entropy")
    on_test = {"data": "test images", "features": "raw spins", "lam_is": "lam_eval"}
    results["entropy/test"] = (analysis.attention_entropy(x_test, Js, lam_eval, names), on_test)
    features = "standardised spins" if standardize else "raw spins"
    on_train = {"data": "training images", "features": features, "lam_is": "lam_train"}
    result = analysis.attention_entropy(seen(x_train), Js, lam_train, names)
    results["entropy/train"] = (result, on_train)
    bar.update()
    stage("pseudolikelihood")
    for split, x in (("train", x_train), ("test", x_test)):
        result = analysis.pseudolikelihood_values(seen(x), Js, lam_train, names, score_clamp=clamp)
        data = "training images" if split == "train" else "test images"
        results[f"pseudolikelihood/{split}"] = (result, {"data": data, "features": features})
    bar.update()
    stage("tasks")
    missing: dict[str, list[str]] = {}
    same_inputs = len({c.data.n_test for c in configs}) == 1 and not any(
        k.startswith("tasks.") for k in _differing(configs, names)
    )
    for task in TASKS:
        evaluations, lacking = [], []
        for path, name in zip(paths, names, strict=True):
            try:
                evaluations.append(_evaluation(path, task))
            except KeyError:
                lacking.append(name)
        if lacking:
            missing[task] = lacking
            continue
        result = analysis.compare_tasks(task, evaluations, names, paired=same_inputs)
        results[f"tasks/{task}"] = (result, {"paired": bool(same_inputs)})
    bar.update()
    now = time.perf_counter()
    order = list(timings) + ["end"]
    marks = [*timings.values(), now]
    seconds = {order[k]: marks[k + 1] - marks[k] for k in range(len(timings))}

    runs = {
        name: {
            "file": str(path),
            **{k: info.attrs.get(k) for k in ("fit_loss", "fit_norm", "hebbian_cosine")},
        }
        for name, path, info in zip(names, paths, infos, strict=True)
    }
    attrs = {
        "models": list(names),
        "run_files": [str(p) for p in paths],
        "runs": runs,
        "n_data": int(n_data),
        "n_train_used": int(x_train.shape[0]),
        "n_test_used": int(x_test.shape[0]),
        "dataset": config.data.dataset,
        "n_tokens": int(emb.n_tokens),
        "d": int(emb.d),
        "grid_shape": list(emb.grid_shape),
        "lam_train": lam_train,
        "lam_eval": lam_eval,
        "standardize": standardize,
        "score_clamp": clamp,
        "differing": _differing(configs, names),
        "missing_tasks": missing,
        "notes": notes,
        "stage_seconds": seconds,
    }
    out.mkdir(parents=True, exist_ok=True)
    arrays = {f"analysis/{n}": r.to_arrays() for n, (r, _) in results.items()}
    group_attrs = {f"analysis/{n}": {**r.attrs(), **extra} for n, (r, extra) in results.items()}
    io.write_file(h5, arrays, attrs, kind=COMPARE_KIND, group_attrs=group_attrs, overwrite=True)

    from spinsa.plotting.compare import plot_comparison  # matplotlib on first use

    bar.set_postfix_str("figures")
    figures = plot_comparison(h5, out)
    bar.update()
    write_compare_report(h5, report, [f.name for f in figures])
    bar.update()
    bar.close()
    return ComparisonResult(out, h5, report, tuple(figures), names)


# ---------------------------------------------------------------------------- report
def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header, rows) -> list[str]:
    return [_row(header), "|" + "---|" * len(header), *(_row(r) for r in rows), ""]


def _paired_words(a: str, b: str, difference: float, z: float) -> str:
    """How a's best error compares with b's, image by image, in words."""
    if not math.isfinite(z):
        return f"{a} vs {b}: no standard error, no comparison"
    size = f"by {abs(difference):.2g} (z = {z:.1f})"
    if z > SIGNIFICANT_Z:
        return f"{a}'s best error is lower than {b}'s {size}"
    if z < -SIGNIFICANT_Z:
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
            _fmt(runs[n].get("fit_norm"), 3),
            _fmt(runs[n].get("fit_loss")),
            _fmt(runs[n].get("hebbian_cosine"), 4),
        ]
        for n in names
    ]
    lines = [
        f"{len(names)} models on {attrs['dataset']} (N = {attrs['n_tokens']} tokens, "
        f"d = {attrs['d']}); entropy and pseudo-likelihood on {attrs['n_train_used']} "
        f"training and {attrs['n_test_used']} test images (λ_train = {attrs['lam_train']:g}, "
        f"λ_eval = {attrs['lam_eval']:g}).",
        "",
        *_table(["model", "run file", "|J|_F", "fit loss", "cosine with Hebbian J"], rows),
    ]
    differing = attrs.get("differing") or {}
    if differing:
        lines += ["The runs' configs differ in:", ""]
        lines += _table(["key", *names], [[f"`{k}`", *map(repr, v)] for k, v in differing.items()])
    for note in attrs.get("notes") or []:
        lines += [f"Note: {note}", ""]
    return lines


def _coupling_lines(h5: Path, names) -> list[str]:
    cos = analysis.load_analysis(h5, "cosines")
    lines = ["## Similarity of the couplings", "", "Global cosine <J_a, J_b> / (|J_a| |J_b|):", ""]
    lines += _table(
        ["", *names],
        [[a, *(_fmt(c, 4) for c in row)] for a, row in zip(names, cos.cosine, strict=True)],
    )
    rows, said = [], []
    for p, (a, b) in enumerate(cos.pairs):
        q = dict(zip(cos.levels, cos.quantiles[p], strict=True))
        pair = f"{names[a]} vs {names[b]}"
        rows.append(
            [
                pair,
                _fmt(cos.cosine[a, b], 4),
                _fmt(cos.mean[p], 4),
                _fmt(q[0.5], 4),
                f"{_fmt(q[0.05], 3)} to {_fmt(q[0.95], 3)}",
            ]
        )
        said.append(
            f"{pair}: global cosine {_fmt(cos.cosine[a, b], 3)}; the typical pair of tokens "
            f"(median) {_fmt(q[0.5], 3)}, 90% of pairs between {_fmt(q[0.05], 2)} and "
            f"{_fmt(q[0.95], 2)}."
        )
    lines += ["Cosine of the blocks J_ij, pair of tokens by pair of tokens:", ""]
    lines += _table(["tensors", "global", "mean per pair", "median", "5% to 95%"], rows)
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
            _fmt(sp.norm[k], 3),
            _fmt(sp.symmetric_eigenvalues[k, 0] / max(sp.norm[k], 1e-300), 4),
            _fmt(sp.symmetric_eigenvalues[k, -1] / max(sp.norm[k], 1e-300), 4),
            f"{sp.positive_fraction[k]:.0%}",
            _fmt(sp.stable_rank[k], 2),
            _fmt(sp.block_top_fraction[k], 3),
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
    lines += _table(header, rows)

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
        [n, _fmt(dist.scale[k], 4), *(_pm(dist.mean[k, b], dist.sem[k, b], 2) for b in shown)]
        for k, n in enumerate(names)
    ]
    lines += _table(header, rows)
    lines += [
        f"- {n}: the nearest pairs are {_fmt(dist.mean[k, 0], 2)} times the mean, the "
        f"farthest {_fmt(dist.mean[k, -1], 2)} times."
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
                *(_pm(e.mean[k], e.sem[k], 3) for k in range(len(names))),
                _fmt(e.max_entropy, 3),
            ]
        )
        said = [
            f"{n}: {e.mean[k] / e.max_entropy:.0%} of the maximum, exp(H) = "
            f"{math.exp(e.mean[k]):.1f} effective tokens of {math.exp(e.max_entropy):.0f}"
            for k, n in enumerate(names)
        ]
        rows[-1].append("; ".join(said))
    lines += _table(["data", *names, "log(N − 1)", "in words"], rows)

    lines += ["## Pseudo-likelihood", ""]
    for split in ("train", "test"):
        pl = analysis.load_analysis(h5, f"pseudolikelihood/{split}")
        a = io.read_group(h5, f"analysis/pseudolikelihood/{split}")[1]
        clamped = "" if pl.score_clamp is None else f", scores clamped at {pl.score_clamp:g}"
        lines += [
            f"L(J) on {pl.n_patterns} {a.get('data', split)} ({a.get('features', '')}, "
            f"λ = {pl.lam:g}{clamped}); "
            f"lower is better; L(0) = {_fmt(pl.loss_zero)} (no couplings). The common norm is "
            f"the {'mean of the norms' if pl.common == 'mean' else 'given norm'}, "
            f"{_fmt(pl.common_norm, 3)}: L falls without bound as |J| grows, so only values "
            "at one norm say which direction of J fits better.",
            "",
        ]
        rows = [
            [n, _fmt(pl.norm[k], 3), _fmt(pl.loss[k]), _fmt(pl.loss_common[k])]
            for k, n in enumerate(names)
        ]
        lines += _table(["model", "|J|_F", "L at its own norm", "L at the common norm"], rows)
        if np.isfinite(pl.loss_common).any():
            k = int(np.nanargmin(pl.loss_common))
            lines += [
                f"- At the common norm the lowest objective is {names[k]}'s "
                f"({_fmt(pl.loss_common[k])}); an average over {pl.n_patterns} patterns, "
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
            return (
                f"{labels.get(best, best)}: {_pm(r.reference_error[k, j], r.reference_sem[k, j])}"
            )

        rows = {
            "best t: error": [
                f"t = {r.best_t[k]}: {_pm(r.best_error[k], r.best_sem[k])}"
                for k in range(len(names))
            ],
            "best reference": [ref(k) for k in range(len(names))],
            "z over it": [_fmt(r.z[k], 1) for k in range(len(names))],
            f"beats it (z > {SIGNIFICANT_Z:g})": [
                "**yes**" if r.beats[k] else "no" for k in range(len(names))
            ],
            "lifetime below it: mean ± s.e. (median)": [
                f"{_pm(r.lifetime_mean[k], r.lifetime_sem[k], 1)} ({_fmt(r.lifetime_median[k], 1)})"
                for k in range(len(names))
            ],
            "transient / censored": [
                f"{r.fraction_transient[k]:.0%} / {r.fraction_censored[k]:.0%}"
                for k in range(len(names))
            ],
            "final images vs their mean (coherence)": [
                _pm(r.coherence_mean[k], r.coherence_sem[k], 3) for k in range(len(names))
            ],
            "final images vs nearest training image": [
                _pm(r.nearest_corr_mean[k], r.nearest_corr_sem[k], 3) for k in range(len(names))
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
        lines += _table(["", *names], [[label, *cells] for label, cells in rows.items()])
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
                f"- {n}: best error {_pm(r.best_error[k], r.best_sem[k])} at t = {r.best_t[k]}; "
                f"{verdict} ({labels.get(best, best)}, z = {_fmt(r.z[k], 1)})."
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
        lines += ["## Figures", ""]
        lines += [f"![{Path(f).stem}]({f})" for f in figures]
        lines.append("")
    return atomic_write_text(out_path, "\n".join(lines))
