"""Figures of the analyses of a run file (``/analysis/*``, from ``spinsa analyze``) and
:func:`plot_run`, which saves every figure a file has data for::

    paths = plot_run("run.h5", "figures/")        # overlaps.png, lifetimes.png, ...
"""

from __future__ import annotations

import functools
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._progress import progress as progress_bar
from spinsa.analysis.store import GROUP, load_result
from spinsa.io.results import check_evaluations
from spinsa.io.schema import decode_attr
from spinsa.plotting._base import band, finish, gray, new_figure, save_figure
from spinsa.plotting.experiments import figure_errors, figure_examples
from spinsa.tasks import TASK_TITLES, mean_sem

__all__ = [
    "FIGURES",
    "RESULT_TYPES",
    "figure_attractors",
    "figure_hebbian",
    "figure_hebbian_errors",
    "figure_lifetimes",
    "figure_overlaps",
    "figure_patches",
    "plot_run",
]

MODEL_LABELS = {"fitted": "fitted J", "hebbian": "Hebbian (norm-matched)"}


# How to make each result a figure draws, for the error when a file lacks it.
_MAKE = {
    "OverlapTrace": "spinsa.analysis.trajectory_overlaps(states, times, patterns, targets)",
    "LifetimeTable": "spinsa.analysis.summarize_lifetimes(lifetimes, levels)",
    "AttractorReport": "spinsa.analysis.find_attractors(J, lam, x0s, ...)",
    "HebbianComparison": "spinsa.analysis.compare_with_hebbian(J, xi)",
    "ErrorCurves": "spinsa.analysis.ErrorCurves(times, errors, ...) (the task errors of "
    "fitted and Hebbian couplings, which spinsa analyze computes)",
    "PatchVarianceHistograms": "spinsa.analysis.patch_variance_histograms(results)",
}


# The kind of file `spinsa analyze` reads (spinsa.experiments.pipeline.RUN_KIND; plotting
# sits below experiments, so the name is repeated here).
_ANALYZE_KIND = "experiment"


def _parent(group: str) -> str:
    return group.rsplit("/", 1)[0] if "/" in group else ""


@dataclass(frozen=True)
class _Contents:
    """What the figures need to know of a file before they load a result, from one walk of
    it: its kind, its groups and their attributes, its datasets, and which groups hold a
    saved result of which type (as :func:`spinsa.analysis.find_results` finds them).
    plot_run reads it once and hands it to every figure; a figure called alone reads it."""

    path: Path
    kind: str
    attrs: dict[str, dict[str, Any]]  # group -> its decoded attributes, for every group
    datasets: frozenset[str]
    results: dict[str, str]  # group -> result_type, for the groups that hold a result

    def of(self, result_type: str) -> list[str]:
        """The groups holding a result of ``result_type``, sorted."""
        return sorted(g for g, kind in self.results.items() if kind == result_type)


def _contents(path) -> _Contents:
    """The contents of ``path`` (one walk); a ``_Contents`` already read is returned as is."""
    if isinstance(path, _Contents):
        return path
    attrs: dict[str, dict[str, Any]] = {}
    datasets: set[str] = set()

    def visit(name, obj):
        if hasattr(obj, "keys"):  # a group (h5py is spinsa.io's to import, not a view's)
            attrs[name] = {k: decode_attr(v) for k, v in obj.attrs.items()}
        else:
            datasets.add(name)

    with io.open_file(path) as f:  # refuses what is not a spinsa file
        kind = decode_attr(f.attrs.get("kind", ""))
        f.visititems(visit)
    results = {g: a["result_type"] for g, a in attrs.items() if "result_type" in a}
    return _Contents(Path(path), kind, attrs, frozenset(datasets), results)


def _context(contents: _Contents, group: str) -> dict[str, Any]:
    """Attributes of the group that holds a result (``lam``, ``dynamics`` of ``spinsa
    analyze``), under those of the result itself; {} where neither says anything."""
    out: dict[str, Any] = {}
    for g in (_parent(group), group):
        out.update(contents.attrs.get(g, {}))
    return out


def _find(contents: _Contents, result_type: str, standard: str, group: str | None, analysis: str):
    """The group and the result of type ``result_type`` that a figure draws: at ``group``
    when given; else at ``/analysis/<standard>`` (where ``spinsa analyze`` writes it); else
    the one result of that type anywhere in the file. A clear error when there is none."""
    path = contents.path
    if group is not None:
        group = group.strip("/")
        try:
            result = load_result(path, group)
        except KeyError:
            found = contents.of(result_type)
            raise ValueError(
                f"{path} has no group {group!r}; its {result_type} results: {found}"
            ) from None
        if type(result).__name__ != result_type:
            raise ValueError(
                f"{path}: group {group!r} holds a {type(result).__name__}, not a {result_type}"
            )
        return group, result
    found = contents.of(result_type)
    std = f"{GROUP}/{standard}"
    if std in found or len(found) == 1:
        where = std if std in found else found[0]
        return where, load_result(path, where)
    if found:
        raise ValueError(
            f"{path} holds {len(found)} {result_type} results ({', '.join(found)}); choose "
            "one with group=..."
        )
    # spinsa analyze reads experiment run files (spinsa train) only: suggest it for those
    analyzable = contents.kind == _ANALYZE_KIND
    command = f", or run `spinsa analyze {path} --only {analysis}`" if analyzable else ""
    raise ValueError(
        f"{path} holds no {result_type}: there is no group {std!r} and no other group with "
        f"result_type {result_type!r}. Make one with {_MAKE.get(result_type, result_type)} and "
        f"save it with spinsa.analysis.save_analysis(path, {standard!r}, result){command}"
    )


def _beside(contents: _Contents, group: str, name: str, result_type: str | None = None):
    """A companion of a result (the decoded images of an attractor report, the strength maps
    of a Hebbian comparison): the result at ``<parent of group>/<name>`` (of ``result_type``
    when given); else, with ``result_type``, the one result of that type in the file; None
    where there is none (the figure leaves its panel out, or says what it lacks)."""
    where = f"{_parent(group)}/{name}".strip("/")
    found = list(contents.results) if result_type is None else contents.of(result_type)
    if where in found:
        return load_result(contents.path, where)
    if result_type is not None and len(found) == 1:
        return load_result(contents.path, found[0])
    return None


def _curve(ax, t, values, label, color, ls="-"):
    """Mean over images (the last axis of ``values``) with its standard-error band."""
    mean, sem, _ = mean_sem(values)
    band(ax, t, mean, sem, label, color, ls=ls)


def _title(fig, text: str, attrs: dict) -> None:
    """The figure's title, and under it the dynamics the analysis ran."""
    sub = [f"λ_eval = {float(attrs['lam']):g}"] if "lam" in attrs else []
    sub += [f"{attrs['dynamics']} dynamics"] if "dynamics" in attrs else []
    fig.suptitle("\n".join([text, ", ".join(sub)]) if sub else text, fontsize=11)


def figure_overlaps(path, *, group: str | None = None, figsize=(11.0, 4.0)):
    """Overlap against t: with each trajectory's target (left: for ``spinsa analyze``'s
    traces, the start image) and with stored patterns (right: the nearest one, and the mean
    one where a trace's target is a pattern); means over trajectories, with bands of one
    standard error.

    Every :class:`~spinsa.analysis.OverlapTrace` of the file is drawn (or the one at
    ``group``), each curve labelled by what its group's attributes say: ``starts`` (the
    images the runs started from, as ``spinsa analyze`` writes ``/analysis/overlaps/test``
    and ``train``) or ``target_pattern`` (the pattern its target overlaps are with, as in
    ``overlaps/mean``); otherwise by its group. A trace draws only the curves it holds
    (``target``, ``nearest_overlap``); a panel that no trace has data for says which
    argument of :func:`~spinsa.analysis.trajectory_overlaps` gives it.

    Parameters
    ----------
    path : str or PathLike
        A spinsa file holding OverlapTrace results.
    group : str, optional
        The group of the one trace to draw.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    contents = _contents(path)
    if group is None:
        groups = contents.of("OverlapTrace")
        groups = groups or [_find(contents, "OverlapTrace", "overlaps/test", None, "overlaps")[0]]
    else:
        groups = [_find(contents, "OverlapTrace", "overlaps/test", group, "overlaps")[0]]
    fig = new_figure(figsize)
    ax1, ax2 = fig.subplots(1, 2)
    from_starts = True  # every curve on the left is an overlap with the start image
    drawn = {ax1: 0, ax2: 0}
    for k, where in enumerate(groups):
        trace, attrs = load_result(contents.path, where), contents.attrs[where]
        color = f"C{k % 10}"
        n = next((a.shape[1] for a in (trace.target, trace.nearest_overlap) if a is not None), 0)
        label = f"from {attrs['starts']}" if "starts" in attrs else where
        label += f" ({n})"
        curves = []
        if trace.target is not None and "target_pattern" in attrs:  # a pattern, not a start
            curves.append((ax2, trace.target, f"{label}: {attrs['target_pattern']}", "--"))
        elif trace.target is not None:
            curves.append((ax1, trace.target, label, "-"))
            from_starts = from_starts and "starts" in attrs
        if trace.nearest_overlap is not None:
            curves.append((ax2, trace.nearest_overlap, f"{label}: nearest pattern", "-"))
        for ax, values, text, ls in curves:
            if values.shape[1]:  # a trace of no trajectory has no mean to draw
                _curve(ax, trace.times, values, text, color, ls)
                drawn[ax] += 1
    overlap = r"overlap $\frac{1}{N}\sum_i x_i(t)\cdot"
    if not drawn[ax1]:
        _missing(ax1, "no trace holds overlaps with its targets\n"
                 "(trajectory_overlaps(..., targets=...))")  # fmt: skip
    elif from_starts:  # spinsa analyze's traces: the targets are the clean start images
        finish(ax1, "overlap with the start image", ylabel=overlap + r" x_i(0)$")
    else:  # a user's traces: the targets are what trajectory_overlaps was given
        finish(ax1, "overlap with each trajectory's target", ylabel=overlap + r" y_i$, target $y$")
    if not drawn[ax2]:
        _missing(ax2, "no trace holds overlaps with stored patterns\n"
                 "(trajectory_overlaps(..., patterns=xi))")  # fmt: skip
    else:
        finish(ax2, "overlap with stored patterns", ylabel=overlap + r"\xi_i$ with a pattern $\xi$")
    _title(fig, "Overlaps along the dynamics", _context(contents, groups[0]))
    return fig


def figure_lifetimes(path, *, group: str | None = None, figsize=(11.0, 4.0)):
    """Histograms of the lifetimes of the transient, one per task: how long the error stays
    below the corrupted input's (left) and the overlap with the clean image above the
    threshold (right), with mean ± s.e. and the censored fraction
    (:meth:`LifetimeTable.plot <spinsa.analysis.LifetimeTable.plot>`).

    Where the attractor that the trajectories end on passes the threshold itself, the
    legend says for which fraction of the images, and so does a caption: their lifetimes
    count only the time nearer the clean image than midway to the attractor
    (:mod:`spinsa.analysis.lifetimes`). A table measured without the attractor says that
    its lifetimes may count the time spent at it.

    A run file of ``spinsa analyze`` holds ``/analysis/lifetimes/table_{error,overlap}``;
    any other file is drawn from its one :class:`~spinsa.analysis.LifetimeTable`, or the one
    at ``group``, in a single panel.

    Parameters
    ----------
    path : str or PathLike
        A spinsa file holding LifetimeTable results.
    group : str, optional
        The group of the one table to draw.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    contents = _contents(path)
    where, table = _find(contents, "LifetimeTable", "lifetimes/table_error", group, "lifetimes")
    attrs = _context(contents, where)
    if group is None and where == f"{GROUP}/lifetimes/table_error":
        threshold = float(attrs.get("threshold", 0.9))
        midway = "" if table.fraction_attractor_passes is None else " and midway to the attractor"
        panels = {
            "error": f"error below that of the corrupted input{midway}",
            "overlap": f"overlap with the clean image > {threshold:g}{midway}",
        }
    else:
        panels = {where: f"lifetimes ({table.criterion}) of {where}"}
    fig = new_figure(figsize if len(panels) > 1 else (6.0, 4.0))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    notes = []
    for ax, (key, title) in zip(axes, panels.items(), strict=True):
        at = f"{GROUP}/lifetimes/table_{key}" if len(panels) > 1 else key
        table, context = load_result(contents.path, at), _context(contents, at)
        names = [TASK_TITLES.get(t, t) for t in context.get("tasks", [])]
        table.plot(ax, names=names)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("fraction of test images" if len(panels) > 1 else ax.get_ylabel())
        notes.append(_attractor_note(table, names, context.get("attractor")))
    notes = list(dict.fromkeys(n for n in notes if n))
    if notes:
        text = textwrap.fill(" ".join(notes), 60 * len(panels) + 40)
        fig.supxlabel(text, fontsize=8, color="tab:red")
    _title(fig, "Lifetimes of the transient memories", attrs)
    return fig


def _attractor_note(table, names: list[str], attractor) -> str:
    """What a lifetime figure must say of the attractor: where it passes the threshold
    itself, or that it was not compared with (``attractor``: what ``spinsa analyze`` said
    of it, if anything)."""
    if table.fraction_attractor_passes is None:
        why = f"the attractor search found {attractor}" if isinstance(attractor, str) else (
            f"{table.criterion}_lifetimes(..., attractor=...)")  # fmt: skip
        return (f"Measured without the attractor ({why}): where the attractor passes the "
                "threshold, a lifetime counts the time spent on it.")  # fmt: skip
    rows = []
    for k in range(table.levels.shape[0]):
        frac = table.attractor_passes_at(k)
        if frac > 0:
            name = names[k] if k < len(names) else f"level {table.levels[k]:g}"
            rows.append(f"{name}: {frac:.0%}")
    if not rows:
        return ""
    return (f"The attractor itself passes the threshold for some images ({', '.join(rows)}): "
            "their lifetimes count only the time nearer the target than midway to it.")  # fmt: skip


def figure_attractors(path, *, group: str | None = None, n_show: int = 8, figsize=None):
    """The attractors reached and their basins.

    Top: the mean training image (``/data/mean_train_image``), then the decoded attractors
    (a :class:`~spinsa.analysis.DecodedImages` beside the report, ``.../images``) by
    decreasing basin, with their basin, period and correlation with the mean image; without
    decoded images, their basin and period alone. Bottom: for each group of starts, the
    fraction that reached each attractor and that did not converge
    (:meth:`AttractorReport.plot <spinsa.analysis.AttractorReport.plot>`).

    Parameters
    ----------
    path : str or PathLike
        A spinsa file holding an :class:`~spinsa.analysis.AttractorReport`: at
        ``/analysis/attractors/report`` (``spinsa analyze``), at ``group``, or as the one
        report anywhere in the file.
    group : str, optional
        The group of the report to draw.
    n_show : int
        Attractors shown at most.
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    contents = _contents(path)
    where, report = _find(contents, "AttractorReport", "attractors/report", group, "attractors")
    decoded = _beside(contents, where, "images", "DecodedImages")
    panels = []
    if "data/mean_train_image" in contents.datasets:  # else the attractors alone
        mean_image = io.read_array(contents.path, "data/mean_train_image")
        panels.append((mean_image, "mean training\nimage"))
    k = min(int(n_show), report.n_attractors)
    for a in range(k):
        text = f"#{a}: basin {report.basin_fraction[a]:.0%}\nperiod {report.attractor_period[a]}"
        if report.corr_mean is not None:
            text += f"\ncorr. with mean {report.corr_mean[a]:.2f}"
        panels.append((None if decoded is None else decoded.images[a], text))
    n_cols = max(len(panels), 3)
    fig = new_figure(figsize or (max(1.6 * n_cols, 8.0), 5.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
    axes = top.subplots(1, n_cols, squeeze=False)[0]
    for ax, (image, text) in zip(axes, panels, strict=False):
        if image is not None:
            gray(ax, image, text)
        else:  # no decoded images in the file: the numbers alone
            _missing(ax, text)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    if k == 0:
        axes[-1].text(0.5, 0.5, "no converged\ntrajectory", ha="center", va="center")
    if report.until_converged and report.steps_run is not None and report.steps_run.size:
        # report.steps is then the cap max_steps, not what the trajectories ran
        run = report.steps_run
        when = (f"after {np.median(run):g} steps (median; slowest {run.max()}, "
                f"max_steps {report.steps})")  # fmt: skip
    else:
        when = f"after {report.steps} steps"
    top.suptitle(
        f"{report.n_attractors} attractor(s) {when}\n"
        f"(tol {report.tol:g}, q_min {report.q_min:g}); "
        f"{report.fraction_unconverged:.0%} of starts not converged",
        fontsize=9,
    )
    report.plot(bottom.subplots())
    _title(fig, "Attractors and their basins", _context(contents, where))
    return fig


def figure_hebbian(path, *, group: str | None = None, n_scatter: int = 20_000, figsize=None):
    """Fitted couplings against norm-matched Hebbian ones (``/analysis/hebbian``): the
    panels that the file has data for, in this order: matrix elements J_ij^ab against
    K_ij^ab (a seeded sample; from ``/J``), the per-pair cosines (always), |J_ij| on the
    patch grid around the central patch and by displacement (fitted and Hebbian: from
    ``maps`` and ``maps_hebbian`` beside the comparison), |J_ij| against distance
    (``distance``, ``distance_hebbian``) and the singular values of both (unless compared
    with ``spectra=False``). ``spinsa analyze`` writes every one of them; a figure of a
    comparison alone draws what it holds, and its caption names what is left out and the
    function that makes it.

    Parameters
    ----------
    path : str or PathLike
        A spinsa file holding a :class:`~spinsa.analysis.HebbianComparison`: at
        ``/analysis/hebbian/comparison`` (``spinsa analyze``), at ``group``, or as the one
        comparison anywhere in the file.
    group : str, optional
        The group of the comparison to draw.
    n_scatter : int
        Elements drawn in the scatter plot.
    figsize : (float, float), optional
        Default: 4 by 3.8 inches per panel, four panels a row.

    Returns
    -------
    matplotlib.figure.Figure
    """
    contents = _contents(path)
    where, comp = _find(contents, "HebbianComparison", "hebbian/comparison", group, "hebbian")
    panels: list[Callable] = []  # each draws one panel on the axes it is given
    left_out: list[str] = []
    if "J" in contents.datasets:
        J = io.read_array(contents.path, "J")
        panels.append(lambda ax: _scatter_elements(ax, J, comp, n_scatter))
    else:
        left_out.append("the matrix elements (no /J in the file)")
    panels.append(comp.plot)
    curves = []
    for suffix, label in (("", "fitted"), ("_hebbian", "Hebbian")):
        maps = _beside(contents, where, f"maps{suffix}")
        if maps is None:
            left_out.append(f"the {label} strength maps (spinsa.analysis.strength_maps)")
        else:
            panels.append(functools.partial(_map, maps=maps, which="center", label=label))
            panels.append(functools.partial(_map, maps=maps, which="offset", label=label))
        r = _beside(contents, where, f"distance{suffix}")
        if r is not None:
            curves.append((r, label, "C1" if suffix else "C0"))
    if curves:
        panels.append(functools.partial(_distance_curves, curves=curves))
    else:
        left_out.append("strength vs distance (spinsa.analysis.strength_vs_distance)")
    if comp.singular_values is not None:
        panels.append(functools.partial(_spectra, comp=comp))
    else:
        left_out.append("the spectra (compared with spectra=False)")
    n_cols = min(4, len(panels))
    n_rows = -(-len(panels) // n_cols)
    fig = new_figure(figsize or (4.0 * n_cols, 3.8 * n_rows + 0.4))
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax, draw in zip(axes, panels, strict=False):
        draw(ax)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    _title(
        fig,
        f"Fitted vs Hebbian couplings ({comp.n_patterns} patterns, |J| = "
        f"{comp.norm:.3g}, matched {comp.match})",
        _context(contents, where),
    )
    if left_out:  # what a figure of spinsa analyze's results shows besides
        text = textwrap.fill("not in the file: " + "; ".join(left_out), 70 * n_cols)
        fig.supxlabel(text, fontsize=7, color="0.35")
    return fig


def _map(ax, maps, which: str, label: str) -> None:
    """|J_cj| around the central patch (``which="center"``) or the mean |J_ij| by
    displacement (``"offset"``), with its colour bar."""
    maps.plot(ax, which=which)
    ax.set_title(f"{label}: " + ax.get_title(), fontsize=10)


def _distance_curves(ax, curves) -> None:
    """|J_ij| against distance, a curve per :class:`StrengthDistance` ``(result, label,
    color)``."""
    for r, label, color in curves:
        r.plot(ax, label=label, color=color)
    finish(
        ax,
        "coupling strength vs distance",
        "distance between patch centres (pixels)",
        r"mean $|J_{ij}|_F$",
    )


def _spectra(ax, comp) -> None:
    """The singular values of the fitted and the Hebbian couplings."""
    for k, (suffix, label) in enumerate((("", "fitted"), ("_hebbian", "Hebbian"))):
        values = getattr(comp, f"singular_values{suffix}")
        if values is not None:
            ranks = np.arange(1, values.size + 1)
            ax.semilogy(ranks, np.maximum(values, 1e-12), color=f"C{k}", lw=1.4, label=label)
    finish(ax, "spectra", "rank", "singular value of the (Nd)×(Nd) matrix", legend=8)


def _missing(ax, text: str) -> None:
    """A panel whose data the file lacks: say so, without axes."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8)


def _scatter_elements(ax, J, comp, n_scatter: int) -> None:
    """Matrix elements J_ij^ab against K_ij^ab, a seeded sample of them."""
    K = comp.hebbian
    N, _, d, _ = J.shape
    rng = np.random.default_rng(0)
    n = min(int(n_scatter), N * (N - 1) * d * d)
    i = rng.integers(0, N, n)
    j = (i + rng.integers(1, N, n)) % N  # j != i
    a, b = rng.integers(0, d, n), rng.integers(0, d, n)
    kx, jy = K[i, j, a, b], J[i, j, a, b]
    ax.scatter(kx, jy, s=2, alpha=0.3, color="C0", rasterized=True)
    lim = float(np.nanmax(np.abs(np.concatenate([kx, jy])))) if n else 1.0
    ax.plot([-lim, lim], [-lim, lim], color="0.4", lw=0.8, ls="--", label="J = K")
    title = f"matrix elements (global cosine {comp.global_cosine:.3f})"
    finish(ax, title, r"Hebbian $K_{ij}^{ab}$ (norm-matched)", r"fitted $J_{ij}^{ab}$")


def figure_hebbian_errors(path, *, group: str | None = None, figsize=(11.0, 4.0)):
    """Task errors of the fitted and the Hebbian couplings from the same corrupted images,
    one panel per task; the masked task from t = 1, as in the paper (its t = 0, the masked
    input, dotted).

    Parameters
    ----------
    path : str or PathLike
        A spinsa file holding :class:`~spinsa.analysis.ErrorCurves`: at
        ``/analysis/hebbian/errors_{masked,denoise}`` (``spinsa analyze``), or the one at
        ``group`` (or the one in the file), in a single panel.
    group : str, optional
        The group of the one set of curves to draw.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    contents = _contents(path)
    where, _ = _find(contents, "ErrorCurves", "hebbian/errors_masked", group, "hebbian")
    if group is None and where == f"{GROUP}/hebbian/errors_masked":
        panels = [f"{GROUP}/hebbian/errors_{task}" for task in ("masked", "denoise")]
    else:
        panels = [where]
    fig = new_figure(figsize if len(panels) > 1 else (6.0, 4.0))
    for ax, at in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        curves, n = load_result(contents.path, at), _context(contents, at).get("n_images")
        task = curves.task or at.rsplit("_", 1)[-1]
        first = 1 if task == "masked" and curves.times.size > 1 else 0
        curves.plot(ax, first=first)
        for line, model in zip(ax.get_lines(), curves.models, strict=False):
            line.set_label(MODEL_LABELS.get(model, model))
        if first:
            for m in range(curves.mean_all.shape[0]):
                ax.axhline(curves.mean_all[m, 0], color=f"C{m}", ls=":", lw=1.0)
            ax.plot([], [], color="0.3", ls=":", label="masked input (t = 0)")
        images = f" ({n} test images)" if n is not None else ""
        finish(
            ax, f"{TASK_TITLES.get(task, task)}{images}", ylabel="mean squared error (all pixels)"
        )
    _title(fig, "Fitted vs norm-matched Hebbian couplings on the tasks", _context(contents, where))
    return fig


def figure_patches(path, *, group: str | None = None, figsize=(6.5, 4.2)):
    """Distribution of the pixel variance inside masked patches: clean images against
    predictions at t = 1, the best t and T (the paper's Fig. 2;
    :meth:`PatchVarianceHistograms.plot <spinsa.analysis.PatchVarianceHistograms.plot>`).

    Parameters
    ----------
    path : str or PathLike
        A spinsa file holding a :class:`~spinsa.analysis.PatchVarianceHistograms`: at
        ``/analysis/patches/histograms`` (``spinsa analyze``), at ``group``, or as the one
        anywhere in the file.
    group : str, optional
        The group of the histograms to draw.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    contents = _contents(path)
    where, hist = _find(contents, "PatchVarianceHistograms", "patches/histograms", group, "patches")
    fig = new_figure(figsize)
    hist.plot(fig.subplots())
    _title(fig, "Texture of the predicted patches", _context(contents, where))
    return fig


#: Figure name -> the result class it draws (found anywhere in a user's file).
RESULT_TYPES = {
    "overlaps": "OverlapTrace",
    "lifetimes": "LifetimeTable",
    "attractors": "AttractorReport",
    "hebbian": "HebbianComparison",
    "hebbian_errors": "ErrorCurves",
    "patches": "PatchVarianceHistograms",
}

#: Figure name -> (function, the analysis it reads).
FIGURES: dict[str, tuple[Callable, str]] = {
    "overlaps": (figure_overlaps, "overlaps"),
    "lifetimes": (figure_lifetimes, "lifetimes"),
    "attractors": (figure_attractors, "attractors"),
    "hebbian": (figure_hebbian, "hebbian"),
    "hebbian_errors": (figure_hebbian_errors, "hebbian"),
    "patches": (figure_patches, "patches"),
}
_ANALYSIS_FIGURES = {fn for fn, _ in FIGURES.values()}  # those that accept a _Contents


# Files whose figures another command draws, or that have none.
_OWN_FIGURES = {
    "fit": "couplings alone, with nothing to plot; train from a config (spinsa train "
    "CONFIG.toml -o RUN.h5) for a run file that spinsa evaluate, analyze and plot accept",
    "sequences": "spinsa sequences run draws its figures beside it (forecasts.png, "
    "spin_error.png); run it again to redraw them",
    "comparison": "spinsa compare draws its figures beside it; run it again with --overwrite "
    "to redraw them",
    "sequences-fit": "the couplings of spinsa sequences run, whose figures are beside it",
}


def plot_run(
    path: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    *,
    fmt: str = "png",
    dpi: int = 150,
    progress: bool = False,
) -> list[Path]:
    """Save every figure that a file has data for: the evaluation curves and examples
    when it holds ``/evaluation/*``, and each of :data:`FIGURES` whose analysis it holds,
    where ``spinsa analyze`` writes it or as the one result of its kind (:data:`RESULT_TYPES`)
    anywhere in the file.

    Parameters
    ----------
    path : str or PathLike
        A spinsa file with ``/analysis`` or ``/evaluation`` groups.
    out_dir : str or PathLike, optional
        Directory of the figures (default: ``<stem>-figures`` next to the file).
    fmt : str
        File format: ``"png"``, ``"pdf"``, ``"svg"``...
    dpi : int
    progress : bool

    Returns
    -------
    list of Path
        The files written (``errors.png``, ``examples.png``, ``overlaps.png``...).
    """
    path = Path(path)
    contents = _contents(path)  # the one walk of the file; refuses non-spinsa files
    out = Path(out_dir) if out_dir is not None else path.with_name(f"{path.stem}-figures")
    jobs: list[tuple[str, Callable]] = []
    if any(g.startswith("evaluation/") or "/evaluation/" in g for g in contents.attrs):
        check_evaluations(path)  # a missing or misshapen dataset: refused before any figure
        jobs += [("errors", figure_errors), ("examples", figure_examples)]
    for name, (fn, group) in FIGURES.items():
        # where spinsa analyze writes it, or a user's file with one result of its kind
        # (overlaps: any number, one curve each); a result of another type in the group (a
        # user's HebbianComparison saved as "hebbian", no ErrorCurves) draws nothing here
        found = contents.of(RESULT_TYPES[name])
        standard = any(g.startswith(f"{GROUP}/{group}/") for g in found)
        if standard or len(found) == 1 or (found and name == "overlaps"):
            jobs.append((name, fn))
    kind = contents.kind or None
    if not jobs and kind in _OWN_FIGURES:  # advice for a command that accepts the file
        raise ValueError(f"{path} is a spinsa file of kind {kind!r}: {_OWN_FIGURES[kind]}")
    if not jobs:
        raise ValueError(
            f"{path} holds neither evaluations nor analyses to plot; run `spinsa evaluate` "
            f"or `spinsa analyze {path}` first"
        )
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with progress_bar(len(jobs), "spinsa plot", "figure", enabled=progress) as bar:
        for name, fn in jobs:
            bar.set_postfix_str(name)
            # the analysis figures take the contents read above; the evaluation's, the path
            source = contents if fn in _ANALYSIS_FIGURES else path
            written.append(save_figure(fn(source), out / f"{name}.{fmt}", dpi=dpi))
            bar.update()
    return written
