"""Figures of the analyses of a run file: they read ``/analysis/*`` and never recompute.

One function per analysis of :func:`spinsa.experiments.analyze_run`, each returning a
matplotlib ``Figure`` drawn on the Agg canvas (no pyplot, no display needed), and
:func:`plot_run`, which saves every figure a file has data for::

    from spinsa.plotting import figure_overlaps, plot_run
    fig = figure_overlaps("run.h5")
    paths = plot_run("run.h5", "figures/")        # overlaps.png, lifetimes.png, ...

matplotlib is imported on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._progress import progress as progress_bar
from spinsa.plotting._base import new_figure, save_figure
from spinsa.plotting.experiments import figure_errors, figure_examples
from spinsa.tasks import mean_sem

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

TASK_TITLES = {"masked": "masked prediction", "denoise": "denoising"}
MODEL_LABELS = {"fitted": "fitted J", "hebbian": "Hebbian (norm-matched)"}


# --------------------------------------------------------------------------- helpers


def _group_attrs(path, name: str) -> dict[str, Any]:
    from spinsa import io

    return io.read_group(path, f"analysis/{name}")[1]


def _need(path, name: str) -> dict[str, Any]:
    """Attributes of ``/analysis/<name>``; a clear error when the file lacks it."""
    from spinsa import io

    if f"analysis/{name}" not in io.read(path).groups:
        raise ValueError(
            f"{path} holds no {name!r} analysis; run `spinsa analyze {path} --only {name}` first"
        )
    return _group_attrs(path, name)


def _load(path, name: str):
    from spinsa.analysis.store import load_analysis

    return load_analysis(path, name)


def _mean_sem(a: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over ``axis`` (NaN left out; a band of 0 where undefined)."""
    mean, sem, _ = mean_sem(a, axis)
    return mean, np.nan_to_num(sem)


def _band(ax, t, mean, sem, label, color, ls="-"):
    ax.plot(t, mean, color=color, lw=1.6, ls=ls, label=label)
    ax.fill_between(t, mean - sem, mean + sem, color=color, alpha=0.2, lw=0)


def _subtitle(attrs: dict) -> str:
    parts = []
    if "lam" in attrs:
        parts.append(f"λ_eval = {float(attrs['lam']):g}")
    if "dynamics" in attrs:
        parts.append(f"{attrs['dynamics']} dynamics")
    return ", ".join(parts)


def _title(fig, text: str, attrs: dict) -> None:
    sub = _subtitle(attrs)
    fig.suptitle(f"{text}\n{sub}" if sub else text, fontsize=11)


# --------------------------------------------------------------------------- overlaps


def figure_overlaps(path, *, figsize=(11.0, 4.0)):
    """Overlap against t from test and training images (``/analysis/overlaps``).

    Left: overlap with the start image, m(x(t), x(0)), for test and training starts. Right:
    overlap with the nearest training pattern, and of the test trajectories with the mean
    training pattern. Lines are means over images, bands one standard error.

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
    test, train = _load(path, "overlaps/test"), _load(path, "overlaps/train")
    mean = _load(path, "overlaps/mean")
    fig = new_figure(figsize)
    ax1, ax2 = fig.subplots(1, 2)
    n_test, n_train = test.target.shape[1], train.target.shape[1]
    for trace, label, color in (
        (test, f"test images ({n_test})", "C0"),
        (train, f"training images ({n_train})", "C1"),
    ):
        m, s = _mean_sem(trace.target)
        _band(ax1, trace.times, m, s, label, color)
        m, s = _mean_sem(trace.nearest_overlap)
        _band(ax2, trace.times, m, s, f"from {label}: nearest training pattern", color)
    m, s = _mean_sem(mean.target)
    _band(ax2, mean.times, m, s, "from test images: mean training pattern", "C2", ls="--")
    ax1.set_title("overlap with the start image", fontsize=10)
    ax2.set_title("overlap with stored patterns", fontsize=10)
    for ax in (ax1, ax2):
        ax.set_xlabel("t (iterations)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_ylabel(r"overlap $\frac{1}{N}\sum_i x_i(t)\cdot x_i(0)$")
    ax2.set_ylabel(r"overlap $\frac{1}{N}\sum_i x_i(t)\cdot\xi_i$ with a pattern $\xi$")
    _title(fig, "Overlaps along the dynamics", attrs)
    return fig


# --------------------------------------------------------------------------- lifetimes


def figure_lifetimes(path, *, figsize=(11.0, 4.0)):
    """Histograms of the lifetimes of the transient (``/analysis/lifetimes``).

    Left: time during which the pixel error stays below that of the corrupted input; right:
    time during which the overlap with the clean image stays above the threshold. One
    histogram per task; the legend gives mean ± standard error and the fraction still
    there at the end of the run (censored).

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
    axes = fig.subplots(1, 2)
    titles = {
        "error": "error below that of the corrupted input",
        "overlap": f"overlap with the clean image > {float(attrs.get('threshold', 0.9)):g}",
    }
    for ax, criterion in zip(axes, ("error", "overlap"), strict=True):
        table = _load(path, f"lifetimes/table_{criterion}")
        tasks = _group_attrs(path, f"lifetimes/table_{criterion}").get("tasks", [])
        edges = table.bin_edges
        for row in range(table.levels.shape[0]):
            task = tasks[row] if row < len(tasks) else f"level {table.levels[row]:g}"
            n = max(int(table.n_samples[row]), 1)
            label = (
                f"{TASK_TITLES.get(task, task)}: {table.lifetime_mean[row]:.1f} ± "
                f"{np.nan_to_num(table.lifetime_sem[row]):.1f}, "
                f"{table.fraction_censored[row]:.0%} censored"
            )
            ax.stairs(table.counts[row] / n, edges, color=f"C{row}", lw=1.6, label=label)
        ax.set_title(titles[criterion], fontsize=10)
        ax.set_xlabel("lifetime (iterations)")
        ax.set_ylabel("fraction of test images")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="mean ± s.e.", title_fontsize=8)
    _title(fig, "Lifetimes of the transient memories", attrs)
    return fig


# --------------------------------------------------------------------------- attractors


def figure_attractors(path, *, n_show: int = 8, figsize=None):
    """The attractors reached and their basins (``/analysis/attractors``).

    Top: the mean training image, then the decoded attractors by decreasing basin, each
    titled with its basin fraction, its period and its correlation with the mean training
    image. Bottom: for each group of starts (clean test images, masked, noisy, random
    spins), the fraction that reached each attractor (and that did not converge).

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
    from spinsa import io

    attrs = _need(path, "attractors")
    report = _load(path, "attractors/report")
    images = _load(path, "attractors/images").images
    info = io.read(path)
    mean_img = (
        io.read_array(path, "data/mean_train_image")
        if "data/mean_train_image" in info.datasets
        else None
    )
    k = min(int(n_show), report.n_attractors)
    n_cols = max(k + (mean_img is not None), 3)
    fig = new_figure(figsize or (max(1.6 * n_cols, 8.0), 5.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
    axes = top.subplots(1, n_cols, squeeze=False)[0]
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    col = 0
    if mean_img is not None:
        axes[0].imshow(mean_img, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        axes[0].set_title("mean training\nimage", fontsize=8)
        col = 1
    for a in range(k):
        ax = axes[col + a]
        ax.imshow(images[a], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        text = f"#{a}: basin {report.basin_fraction[a]:.0%}\nperiod {report.attractor_period[a]}"
        if report.corr_mean is not None:
            text += f"\ncorr. with mean {report.corr_mean[a]:.2f}"
        ax.set_title(text, fontsize=8)
    for ax in axes[col + k :]:
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
        preferred = ["test", "masked", "noisy", "random"]
        names = list(report.group_names)
        order = [names.index(g) for g in preferred if g in names]
        order += [k for k in range(len(names)) if k not in order]
        names = [names[k] for k in order]
        fractions = report.group_fractions[order]
        left = np.zeros(len(names))
        shown = min(report.n_attractors, 10)
        for a in range(shown):
            w = fractions[:, a]
            ax.barh(names, w, left=left, color=f"C{a % 10}", label=f"#{a}")
            left += w
        rest = fractions[:, shown:].sum(axis=1)
        if rest.any():
            ax.barh(names, rest, left=left, color="0.6", label="other attractors")
            left += rest
        ax.barh(
            names,
            report.group_unconverged[order],
            left=left,
            color="white",
            edgecolor="0.3",
            hatch="//",
            label="not converged",
        )
        ax.invert_yaxis()  # groups top to bottom in the order above
        ax.set_xlim(0, 1)
        ax.set_xlabel("fraction of starts in each basin")
        ax.set_ylabel("starts")
        ax.legend(
            fontsize=7, ncols=min(6, shown + 2), loc="upper center", bbox_to_anchor=(0.5, -0.25)
        )
    _title(fig, "Attractors and their basins", attrs)
    return fig


# --------------------------------------------------------------------------- hebbian


def figure_hebbian(path, *, n_scatter: int = 20_000, figsize=(16.0, 7.6)):
    """Fitted couplings against norm-matched Hebbian ones (``/analysis/hebbian``).

    Top: scatter of the matrix elements J_ij^ab against K_ij^ab (a seeded random sample of
    ``n_scatter`` off-diagonal elements), |J_cj| over the patch grid for the central patch c
    and averaged over pairs by displacement, the histogram of the per-pair cosines. Bottom:
    |J_ij| against the distance between patches, the singular values of both, and the
    Hebbian grid maps.

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
    from spinsa import io

    attrs = _need(path, "hebbian")
    comp = _load(path, "hebbian/comparison")
    J = io.read_array(path, "J")
    K = comp.hebbian
    fig = new_figure(figsize)
    ax = fig.subplots(2, 4)

    N, _, d, _ = J.shape
    rng = np.random.default_rng(0)
    n = min(int(n_scatter), N * (N - 1) * d * d)
    i = rng.integers(0, N, n)
    j = (i + rng.integers(1, N, n)) % N  # j != i
    a, b = rng.integers(0, d, n), rng.integers(0, d, n)
    kx, jy = K[i, j, a, b], J[i, j, a, b]
    s = ax[0, 0]
    s.scatter(kx, jy, s=2, alpha=0.3, color="C0", rasterized=True)
    lim = float(np.nanmax(np.abs(np.concatenate([kx, jy])))) if n else 1.0
    s.plot([-lim, lim], [-lim, lim], color="0.4", lw=0.8, ls="--", label="J = K")
    s.set_xlabel(r"Hebbian $K_{ij}^{ab}$ (norm-matched)")
    s.set_ylabel(r"fitted $J_{ij}^{ab}$")
    s.set_title(f"matrix elements (global cosine {comp.global_cosine:.3f})", fontsize=10)
    s.legend(fontsize=8)
    s.grid(alpha=0.3)

    def heat(axis, data, title, mark=None):
        im = axis.imshow(data, cmap="viridis", interpolation="nearest")
        if mark is not None:
            axis.plot(mark[1], mark[0], "x", color="red", ms=6)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("patch column")
        axis.set_ylabel("patch row")
        fig.colorbar(im, ax=axis, shrink=0.85, label=r"$|J_{ij}|_F$")

    for row, name, label in ((0, "maps", "fitted"), (1, "maps_hebbian", "Hebbian")):
        maps = _load(path, f"hebbian/{name}")
        gh, gw = maps.center.shape
        c = divmod(maps.center_token, gw)
        center = maps.center.astype(np.float64)
        center[c] = np.nan  # J_cc = 0 by definition; keep it out of the colour scale
        heat(
            ax[row, 1],
            np.ma.masked_invalid(center),
            f"{label}: $|J_{{cj}}|$, c = central patch (x)",
            c,
        )
        off = np.ma.masked_invalid(maps.offset)
        im = ax[row, 2].imshow(
            off,
            cmap="viridis",
            interpolation="nearest",
            extent=(-gw + 0.5, gw - 0.5, gh - 0.5, -gh + 0.5),
        )
        ax[row, 2].set_title(f"{label}: mean $|J_{{ij}}|$ by displacement", fontsize=10)
        ax[row, 2].set_xlabel("column of j − column of i (patches)")
        ax[row, 2].set_ylabel("row of j − row of i (patches)")
        fig.colorbar(im, ax=ax[row, 2], shrink=0.85, label=r"$|J_{ij}|_F$")

    cos = comp.pair_cosine[np.isfinite(comp.pair_cosine)]
    h = ax[0, 3]
    h.hist(cos, bins=50, range=(-1, 1), color="C0")
    h.axvline(comp.mean_pair_cosine, color="C3", lw=1.2, label=f"mean {comp.mean_pair_cosine:.3f}")
    h.set_xlabel(r"cosine of $J_{ij}$ and $K_{ij}$ (per pair of patches)")
    h.set_ylabel("pairs")
    h.set_title("per-pair similarity", fontsize=10)
    h.legend(fontsize=8)
    h.grid(alpha=0.3)

    sd = ax[1, 0]
    for name, label, color in (("distance", "fitted", "C0"), ("distance_hebbian", "Hebbian", "C1")):
        r = _load(path, f"hebbian/{name}")
        sd.errorbar(
            r.bin_distance,
            r.mean,
            yerr=np.nan_to_num(r.sem),
            color=color,
            lw=1.2,
            marker="o",
            ms=2.5,
            capsize=0,
            label=label,
        )
    sd.set_xlabel("distance between patch centres (pixels)")
    sd.set_ylabel(r"mean $|J_{ij}|_F$")
    sd.set_title("coupling strength vs distance", fontsize=10)
    sd.legend(fontsize=8)
    sd.grid(alpha=0.3)

    sv = ax[1, 3]
    for values, label, color in (
        (comp.singular_values, "fitted", "C0"),
        (comp.singular_values_hebbian, "Hebbian", "C1"),
    ):
        sv.semilogy(
            np.arange(1, values.size + 1),
            np.maximum(values, 1e-12),
            color=color,
            lw=1.4,
            label=label,
        )
    sv.set_xlabel("rank")
    sv.set_ylabel("singular value of the (Nd)×(Nd) matrix")
    sv.set_title("spectra", fontsize=10)
    sv.legend(fontsize=8)
    sv.grid(alpha=0.3)
    _title(
        fig,
        f"Fitted vs Hebbian couplings ({comp.n_patterns} patterns, |J| = "
        f"{comp.norm:.3g}, matched {comp.match})",
        attrs,
    )
    return fig


def figure_hebbian_errors(path, *, figsize=(11.0, 4.0)):
    """Task errors of the fitted and the Hebbian couplings (``/analysis/hebbian``).

    One panel per task: mean squared pixel error against t, with standard-error bands, from
    the same corrupted test images. The masked task is drawn from t = 1, as in the paper (its
    t = 0, the masked input, is the dotted line).

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
    axes = fig.subplots(1, 2)
    for ax, task in zip(axes, ("masked", "denoise"), strict=True):
        curves = _load(path, f"hebbian/errors_{task}")
        n = _group_attrs(path, f"hebbian/errors_{task}").get("n_images")
        first = 1 if task == "masked" and curves.times.size > 1 else 0
        for m, model in enumerate(curves.models):
            color = f"C{m}"
            t = curves.times[first:]
            _band(
                ax,
                t,
                curves.mean_all[m, first:],
                np.nan_to_num(curves.sem_all[m, first:]),
                MODEL_LABELS.get(model, model),
                color,
                ls="-" if m == 0 else "--",
            )
            if first:
                ax.axhline(curves.mean_all[m, 0], color=color, ls=":", lw=1.0)
        if first:
            ax.plot([], [], color="0.3", ls=":", label="masked input (t = 0)")
        ax.set_title(f"{TASK_TITLES.get(task, task)} ({n} test images)", fontsize=10)
        ax.set_xlabel("t (iterations)")
        ax.set_ylabel("mean squared error (all pixels)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _title(fig, "Fitted vs norm-matched Hebbian couplings on the tasks", attrs)
    return fig


# --------------------------------------------------------------------------- patches


def figure_patches(path, *, figsize=(6.5, 4.2)):
    """Distribution of the pixel variance inside masked patches (``/analysis/patches``).

    The clean test images against the predictions at t = 1, at the best t and at t = T
    (D'Amico & Negri 2024, Fig. 2): flat grey predictions pile up at zero variance.

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
    hist = _load(path, "patches/histograms")
    fig = new_figure(figsize)
    ax = fig.subplots()
    styles = ("-", "--", ":", "-.")
    for m, model in enumerate(hist.models):
        color = "0.2" if m == 0 else f"C{m - 1}"
        ax.stairs(
            hist.density[m],
            hist.bin_edges,
            color=color,
            lw=1.6,
            ls=styles[m % 4],
            label=f"{model}: mean {hist.mean[m]:.4g}",
        )
    ax.set_yscale("log")
    ax.set_xlabel("variance of the pixels of a masked patch")
    ax.set_ylabel("probability density")
    ax.set_title(f"{int(hist.n_patches[0])} masked patches", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _title(fig, "Texture of the predicted patches", attrs)
    return fig


# --------------------------------------------------------------------------- all of them


#: Figure name -> (function, the analysis it reads).
FIGURES: dict[str, tuple[Callable, str]] = {
    "overlaps": (figure_overlaps, "overlaps"),
    "lifetimes": (figure_lifetimes, "lifetimes"),
    "attractors": (figure_attractors, "attractors"),
    "hebbian": (figure_hebbian, "hebbian"),
    "hebbian_errors": (figure_hebbian_errors, "hebbian"),
    "patches": (figure_patches, "patches"),
}


def plot_run(
    path: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    *,
    fmt: str = "png",
    dpi: int = 150,
    progress: bool = False,
) -> list[Path]:
    """Save every figure that a run file has data for.

    The evaluation curves and examples (:func:`spinsa.plotting.figure_errors` and
    :func:`~spinsa.plotting.figure_examples`) when the file holds ``/evaluation/*``, and one
    figure per analysis of :data:`FIGURES` whose ``/analysis/<name>`` group it holds.

    Parameters
    ----------
    path : str or PathLike
        A spinsa file (a run file, or anything with ``/analysis`` or ``/evaluation`` groups).
    out_dir : str or PathLike, optional
        Directory of the figures (created if needed); default ``<stem>-figures`` next to
        the file.
    fmt : str
        File format, e.g. ``"png"``, ``"pdf"``, ``"svg"``.
    dpi : int
    progress : bool
        A progress bar over the figures.

    Returns
    -------
    list of Path
        The files written (``errors.png``, ``examples.png``, ``overlaps.png``...).
    """
    from spinsa import io

    path = Path(path)
    info = io.read(path)  # refuses non-spinsa files
    out = Path(out_dir) if out_dir is not None else path.with_name(f"{path.stem}-figures")
    jobs: list[tuple[str, Callable]] = []
    if any(g.startswith("evaluation/") or "/evaluation/" in g for g in info.groups):
        jobs += [("errors", figure_errors), ("examples", figure_examples)]
    for name, (fn, group) in FIGURES.items():
        if f"analysis/{group}" in info.groups:
            jobs.append((name, fn))
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
