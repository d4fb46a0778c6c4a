"""Figures of the analyses of a run file (``/analysis/*``, from ``spinsa analyze``) and
:func:`plot_run`, which saves every figure a file has data for::

    paths = plot_run("run.h5", "figures/")        # overlaps.png, lifetimes.png, ...
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._progress import progress as progress_bar
from spinsa.analysis.store import load_analysis
from spinsa.plotting._base import band, finish, gray, new_figure, save_figure
from spinsa.plotting.experiments import figure_errors, figure_examples
from spinsa.tasks import TASK_TITLES, mean_sem

__all__ = [
    "FIGURES",
    "figure_attractors",
    "figure_hebbian",
    "figure_hebbian_errors",
    "figure_lifetimes",
    "figure_overlaps",
    "figure_patches",
    "plot_run",
]

MODEL_LABELS = {"fitted": "fitted J", "hebbian": "Hebbian (norm-matched)"}


def _attrs(path, name: str) -> dict[str, Any]:
    return io.read_group(path, f"analysis/{name}")[1]


def _need(path, name: str) -> dict[str, Any]:
    """Attributes of ``/analysis/<name>``; a clear error when the file lacks it."""
    try:
        return _attrs(path, name)
    except KeyError:  # read_group's "no group": one open of the file, not two
        raise ValueError(
            f"{path} holds no {name!r} analysis; run `spinsa analyze {path} --only {name}` first"
        ) from None


def _curve(ax, t, values, label, color, ls="-"):
    """Mean over images (the last axis of ``values``) with its standard-error band."""
    mean, sem, _ = mean_sem(values)
    band(ax, t, mean, sem, label, color, ls=ls)


def _title(fig, text: str, attrs: dict) -> None:
    """The figure's title, and under it the dynamics the analysis ran."""
    sub = [f"λ_eval = {float(attrs['lam']):g}"] if "lam" in attrs else []
    sub += [f"{attrs['dynamics']} dynamics"] if "dynamics" in attrs else []
    fig.suptitle("\n".join([text, ", ".join(sub)]) if sub else text, fontsize=11)


def figure_overlaps(path, *, figsize=(11.0, 4.0)):
    """Overlap against t (``/analysis/overlaps``): with the start image (left), with the
    nearest training pattern and with the mean one (right); means over images, with bands of
    one standard error.

    Parameters
    ----------
    path : str or PathLike
        A run file holding ``/analysis/overlaps``.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    attrs = _need(path, "overlaps")
    fig = new_figure(figsize)
    ax1, ax2 = fig.subplots(1, 2)
    for starts, name, color in (("test", "test images", "C0"), ("train", "training images", "C1")):
        trace = load_analysis(path, f"overlaps/{starts}")
        label = f"{name} ({trace.target.shape[1]})"
        _curve(ax1, trace.times, trace.target, label, color)
        near = f"from {label}: nearest training pattern"
        _curve(ax2, trace.times, trace.nearest_overlap, near, color)
    mean = load_analysis(path, "overlaps/mean")
    _curve(ax2, mean.times, mean.target, "from test images: mean training pattern", "C2", "--")
    overlap = r"overlap $\frac{1}{N}\sum_i x_i(t)\cdot"
    finish(ax1, "overlap with the start image", ylabel=overlap + r" x_i(0)$")
    finish(ax2, "overlap with stored patterns", ylabel=overlap + r"\xi_i$ with a pattern $\xi$")
    _title(fig, "Overlaps along the dynamics", attrs)
    return fig


def figure_lifetimes(path, *, figsize=(11.0, 4.0)):
    """Histograms of the lifetimes of the transient (``/analysis/lifetimes``), one per task:
    how long the error stays below the corrupted input's (left) and the overlap with the
    clean image above the threshold (right), with mean ± s.e. and the censored fraction.

    Parameters
    ----------
    path : str or PathLike
        A run file holding ``/analysis/lifetimes``.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    attrs = _need(path, "lifetimes")
    fig = new_figure(figsize)
    titles = {
        "error": "error below that of the corrupted input",
        "overlap": f"overlap with the clean image > {float(attrs.get('threshold', 0.9)):g}",
    }
    for ax, (criterion, title) in zip(fig.subplots(1, 2), titles.items(), strict=True):
        table = load_analysis(path, f"lifetimes/table_{criterion}")
        tasks = _attrs(path, f"lifetimes/table_{criterion}").get("tasks", [])
        for row in range(table.levels.shape[0]):
            task = tasks[row] if row < len(tasks) else f"level {table.levels[row]:g}"
            label = (
                f"{TASK_TITLES.get(task, task)}: {table.lifetime_mean[row]:.1f} ± "
                f"{np.nan_to_num(table.lifetime_sem[row]):.1f}, "
                f"{table.fraction_censored[row]:.0%} censored"
            )
            density = table.counts[row] / max(int(table.n_samples[row]), 1)
            ax.stairs(density, table.bin_edges, color=f"C{row}", lw=1.6, label=label)
        finish(ax, title, "lifetime (iterations)", "fraction of test images", legend=None)
        ax.legend(fontsize=8, title="mean ± s.e.", title_fontsize=8)
    _title(fig, "Lifetimes of the transient memories", attrs)
    return fig


def figure_attractors(path, *, n_show: int = 8, figsize=None):
    """The attractors reached and their basins (``/analysis/attractors``).

    Top: the mean training image, then the decoded attractors by decreasing basin, with
    their basin, period and correlation with the mean image. Bottom: for each group of
    starts, the fraction that reached each attractor (and that did not converge).

    Parameters
    ----------
    path : str or PathLike
        A run file holding ``/analysis/attractors``.
    n_show : int
        Attractors shown at most.
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    attrs = _need(path, "attractors")
    report = load_analysis(path, "attractors/report")
    images = load_analysis(path, "attractors/images").images
    panels = []
    try:
        panels.append((io.read_array(path, "data/mean_train_image"), "mean training\nimage"))
    except KeyError:  # a file without it: the attractors alone
        pass
    k = min(int(n_show), report.n_attractors)
    for a in range(k):
        text = f"#{a}: basin {report.basin_fraction[a]:.0%}\nperiod {report.attractor_period[a]}"
        if report.corr_mean is not None:
            text += f"\ncorr. with mean {report.corr_mean[a]:.2f}"
        panels.append((images[a], text))
    n_cols = max(len(panels), 3)
    fig = new_figure(figsize or (max(1.6 * n_cols, 8.0), 5.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
    axes = top.subplots(1, n_cols, squeeze=False)[0]
    for ax, (image, text) in zip(axes, panels, strict=False):
        gray(ax, image, text)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    if k == 0:
        axes[-1].text(0.5, 0.5, "no converged\ntrajectory", ha="center", va="center")
    top.suptitle(
        f"{report.n_attractors} attractor(s) after {report.steps} steps "
        f"(tol {report.tol:g}, q_min {report.q_min:g}); "
        f"{report.fraction_unconverged:.0%} of starts not converged",
        fontsize=9,
    )
    ax = bottom.subplots()
    if report.group_fractions is not None:
        names = list(report.group_names)
        order = [names.index(g) for g in ("test", "masked", "noisy", "random") if g in names]
        order += [k for k in range(len(names)) if k not in order]
        names = [names[k] for k in order]
        fractions = report.group_fractions[order]
        left = np.zeros(len(names))
        shown = min(report.n_attractors, 10)
        for a in range(shown):
            ax.barh(names, fractions[:, a], left=left, color=f"C{a % 10}", label=f"#{a}")
            left += fractions[:, a]
        rest = fractions[:, shown:].sum(axis=1)
        if rest.any():
            ax.barh(names, rest, left=left, color="0.6", label="other attractors")
            left += rest
        hatched = dict(color="white", edgecolor="0.3", hatch="//", label="not converged")
        ax.barh(names, report.group_unconverged[order], left=left, **hatched)
        ax.invert_yaxis()  # groups top to bottom in the order above
        ax.set_xlim(0, 1)
        ax.set_xlabel("fraction of starts in each basin")
        ax.set_ylabel("starts")
        ax.legend(
            fontsize=7, ncols=min(6, shown + 2), loc="upper center", bbox_to_anchor=(0.5, -0.25)
        )
    _title(fig, "Attractors and their basins", attrs)
    return fig


def figure_hebbian(path, *, n_scatter: int = 20_000, figsize=(16.0, 7.6)):
    """Fitted couplings against norm-matched Hebbian ones (``/analysis/hebbian``): matrix
    elements J_ij^ab against K_ij^ab (a seeded sample), |J_ij| on the patch grid around the
    central patch and by displacement (fitted and Hebbian), per-pair cosines, |J_ij| against
    distance, and the singular values of both.

    Parameters
    ----------
    path : str or PathLike
        A run file holding ``/analysis/hebbian`` and ``/J``.
    n_scatter : int
        Elements drawn in the scatter plot.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    attrs = _need(path, "hebbian")
    comp = load_analysis(path, "hebbian/comparison")
    J, K = io.read_array(path, "J"), comp.hebbian
    fig = new_figure(figsize)
    ax = fig.subplots(2, 4)

    N, _, d, _ = J.shape
    rng = np.random.default_rng(0)
    n = min(int(n_scatter), N * (N - 1) * d * d)
    i = rng.integers(0, N, n)
    j = (i + rng.integers(1, N, n)) % N  # j != i
    a, b = rng.integers(0, d, n), rng.integers(0, d, n)
    kx, jy = K[i, j, a, b], J[i, j, a, b]
    ax[0, 0].scatter(kx, jy, s=2, alpha=0.3, color="C0", rasterized=True)
    lim = float(np.nanmax(np.abs(np.concatenate([kx, jy])))) if n else 1.0
    ax[0, 0].plot([-lim, lim], [-lim, lim], color="0.4", lw=0.8, ls="--", label="J = K")
    title = f"matrix elements (global cosine {comp.global_cosine:.3f})"
    finish(ax[0, 0], title, r"Hebbian $K_{ij}^{ab}$ (norm-matched)", r"fitted $J_{ij}^{ab}$")

    def heat(axis, data, title, xlabel, ylabel, **kwargs):
        im = axis.imshow(
            np.ma.masked_invalid(data), cmap="viridis", interpolation="nearest", **kwargs
        )
        axis.set_title(title, fontsize=10)
        axis.set(xlabel=xlabel, ylabel=ylabel)
        fig.colorbar(im, ax=axis, shrink=0.85, label=r"$|J_{ij}|_F$")

    style = dict(lw=1.2, marker="o", ms=2.5, capsize=0)
    for row, (suffix, label) in enumerate((("", "fitted"), ("_hebbian", "Hebbian"))):
        maps = load_analysis(path, f"hebbian/maps{suffix}")
        gh, gw = maps.center.shape
        c = divmod(maps.center_token, gw)
        center = maps.center.astype(np.float64)
        center[c] = np.nan  # J_cc = 0 by definition; keep it out of the colour scale
        title = f"{label}: $|J_{{cj}}|$, c = central patch (x)"
        heat(ax[row, 1], center, title, "patch column", "patch row")
        ax[row, 1].plot(c[1], c[0], "x", color="red", ms=6)
        heat(
            ax[row, 2],
            maps.offset,
            f"{label}: mean $|J_{{ij}}|$ by displacement",
            "column of j − column of i (patches)",
            "row of j − row of i (patches)",
            extent=(-gw + 0.5, gw - 0.5, gh - 0.5, -gh + 0.5),
        )
        r = load_analysis(path, f"hebbian/distance{suffix}")
        ax[1, 0].errorbar(
            r.bin_distance, r.mean, np.nan_to_num(r.sem), color=f"C{row}", label=label, **style
        )
        values = getattr(comp, f"singular_values{suffix}")
        if values is None:  # compared with spectra=False
            continue
        ranks = np.arange(1, values.size + 1)
        ax[1, 3].semilogy(ranks, np.maximum(values, 1e-12), color=f"C{row}", lw=1.4, label=label)

    h, cosine = ax[0, 3], comp.mean_pair_cosine
    h.hist(comp.pair_cosine[np.isfinite(comp.pair_cosine)], bins=50, range=(-1, 1), color="C0")
    h.axvline(cosine, color="C3", lw=1.2, label=f"mean {cosine:.3f}")
    cosines = r"cosine of $J_{ij}$ and $K_{ij}$ (per pair of patches)"
    finish(h, "per-pair similarity", cosines, "pairs")

    finish(
        ax[1, 0],
        "coupling strength vs distance",
        "distance between patch centres (pixels)",
        r"mean $|J_{ij}|_F$",
    )
    spectra = comp.singular_values is not None
    if not spectra:
        ax[1, 3].text(0.5, 0.5, "spectra not computed\n(spectra=False)", ha="center", va="center")
    finish(
        ax[1, 3],
        "spectra",
        "rank",
        "singular value of the (Nd)×(Nd) matrix",
        legend=8 if spectra else None,
    )
    _title(
        fig,
        f"Fitted vs Hebbian couplings ({comp.n_patterns} patterns, |J| = "
        f"{comp.norm:.3g}, matched {comp.match})",
        attrs,
    )
    return fig


def figure_hebbian_errors(path, *, figsize=(11.0, 4.0)):
    """Task errors of the fitted and the Hebbian couplings from the same corrupted images
    (``/analysis/hebbian``), one panel per task; the masked task from t = 1, as in the paper
    (its t = 0, the masked input, dotted).

    Parameters
    ----------
    path : str or PathLike
        A run file holding ``/analysis/hebbian``.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    attrs = _need(path, "hebbian")
    fig = new_figure(figsize)
    for ax, task in zip(fig.subplots(1, 2), ("masked", "denoise"), strict=True):
        curves = load_analysis(path, f"hebbian/errors_{task}")
        n = _attrs(path, f"hebbian/errors_{task}").get("n_images")
        first = 1 if task == "masked" and curves.times.size > 1 else 0
        for m, model in enumerate(curves.models):
            label, ls = MODEL_LABELS.get(model, model), "-" if m == 0 else "--"
            t, sem = curves.times[first:], curves.sem_all[m, first:]
            band(ax, t, curves.mean_all[m, first:], sem, label, f"C{m}", ls=ls)
            if first:
                ax.axhline(curves.mean_all[m, 0], color=f"C{m}", ls=":", lw=1.0)
        if first:
            ax.plot([], [], color="0.3", ls=":", label="masked input (t = 0)")
        title = f"{TASK_TITLES.get(task, task)} ({n} test images)"
        finish(ax, title, ylabel="mean squared error (all pixels)")
    _title(fig, "Fitted vs norm-matched Hebbian couplings on the tasks", attrs)
    return fig


def figure_patches(path, *, figsize=(6.5, 4.2)):
    """Distribution of the pixel variance inside masked patches (``/analysis/patches``):
    clean images against predictions at t = 1, the best t and T (the paper's Fig. 2).

    Parameters
    ----------
    path : str or PathLike
        A run file holding ``/analysis/patches``.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    attrs = _need(path, "patches")
    hist = load_analysis(path, "patches/histograms")
    fig = new_figure(figsize)
    ax = fig.subplots()
    for m, model in enumerate(hist.models):
        color, ls = "0.2" if m == 0 else f"C{m - 1}", ("-", "--", ":", "-.")[m % 4]
        label = f"{model}: mean {hist.mean[m]:.4g}"
        ax.stairs(hist.density[m], hist.bin_edges, color=color, lw=1.6, ls=ls, label=label)
    ax.set_yscale("log")
    finish(
        ax,
        f"{int(hist.n_patches[0])} masked patches",
        "variance of the pixels of a masked patch",
        "probability density",
    )
    _title(fig, "Texture of the predicted patches", attrs)
    return fig


#: Figure name -> (function, the analysis it reads).
FIGURES: dict[str, tuple[Callable, str]] = {
    "overlaps": (figure_overlaps, "overlaps"),
    "lifetimes": (figure_lifetimes, "lifetimes"),
    "attractors": (figure_attractors, "attractors"),
    "hebbian": (figure_hebbian, "hebbian"),
    "hebbian_errors": (figure_hebbian_errors, "hebbian"),
    "patches": (figure_patches, "patches"),
}


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
    """Save every figure that a run file has data for: the evaluation curves and examples
    when it holds ``/evaluation/*``, and each of :data:`FIGURES` whose analysis it holds.

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
    info = io.read(path)  # refuses non-spinsa files
    out = Path(out_dir) if out_dir is not None else path.with_name(f"{path.stem}-figures")
    jobs: list[tuple[str, Callable]] = []
    if any(g.startswith("evaluation/") or "/evaluation/" in g for g in info.groups):
        jobs += [("errors", figure_errors), ("examples", figure_examples)]
    jobs += [
        (name, fn) for name, (fn, group) in FIGURES.items() if f"analysis/{group}" in info.groups
    ]
    kind = info.attrs.get("kind")
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
            written.append(save_figure(fn(path), out / f"{name}.{fmt}", dpi=dpi))
            bar.update()
    return written
