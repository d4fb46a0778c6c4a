"""Figures of a comparison of coupling tensors (``spinsa compare``), one per quantity.

Each ``figure_*`` draws one result of :mod:`spinsa.analysis.compare` as it was stored;
:func:`plot_comparison` reads them from the comparison file and saves every figure::

    paths = plot_comparison("out/compare.h5", "out/")   # cosines.png, spectra.png, ...
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spinsa import io
from spinsa.analysis.store import list_analyses, load_analysis
from spinsa.plotting._base import band, finish, gray, new_figure, save_figure
from spinsa.tasks import TASK_TITLES

__all__ = [
    "figure_compared_tasks",
    "figure_cosines",
    "figure_distance",
    "figure_entropy",
    "figure_final_images",
    "figure_pseudolikelihood",
    "figure_spectra",
    "plot_comparison",
]


def _heat(fig, ax, data, title, label, **kwargs) -> None:
    im = ax.imshow(np.ma.masked_invalid(data), interpolation="nearest", **kwargs)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8, label=label)


def figure_cosines(result, *, figsize=None):
    """Global cosines of every two tensors (matrix) and the distribution of the per-pair
    cosines cos(J_a,ij, J_b,ij) for each two (histograms, mean marked).

    Parameters
    ----------
    result : spinsa.analysis.PairwiseCosines
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    names, K = list(result.names), result.cosine.shape[0]
    side = 3.0 + 0.55 * K  # the matrix grows with the models, its numbers stay legible
    fig = new_figure(figsize or (side + 6.5, side))
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[side, 6.5])
    _heat(
        fig,
        ax1,
        result.cosine,
        "global cosine <J_a, J_b> / (|J_a| |J_b|)",
        "cosine",
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
    )
    ax1.set_xticks(range(K), names, rotation=30, ha="right", fontsize=8)
    ax1.set_yticks(range(K), names, fontsize=8)
    for a in range(K):
        for b in range(K):
            ax1.text(b, a, f"{result.cosine[a, b]:.2f}", ha="center", va="center", fontsize=7)
    # per pair of tokens: every other tensor against the first (K - 1 curves, not K(K-1)/2)
    for p, (a, b) in enumerate(result.pairs):
        if a != 0:
            continue
        cos = result.pair_cosine[p]
        label = f"{names[b]}: mean {result.mean[p]:.3f}"
        ax2.hist(
            cos[np.isfinite(cos)],
            bins=50,
            range=(-1, 1),
            histtype="step",
            lw=1.5,
            color=f"C{b}",
            label=label,
            density=True,
        )
        ax2.axvline(result.mean[p], color=f"C{b}", lw=0.8, ls="--")
    ax2.legend(fontsize=7, loc="upper left")
    finish(ax2, f"per pair of tokens (i, j), against {names[0]}", r"cosine of the blocks $J_{ij}$",
           "density", legend=False)  # fmt: skip
    fig.suptitle("How alike the couplings are", fontsize=11)
    return fig


def figure_spectra(result, *, figsize=(15.0, 4.2)):
    """Spectra of every tensor, each divided by its Frobenius norm: eigenvalues of the
    symmetrised (N d) x (N d) matrix by rank, its singular values, and the mean k-th
    singular value of a block J_ij (with its standard error).

    Parameters
    ----------
    result : spinsa.analysis.CouplingSpectra
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = new_figure(figsize)
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for k, name in enumerate(result.names):
        norm = result.norm[k] if result.norm[k] > 0 else 1.0
        sym, sv = result.symmetric_eigenvalues[k] / norm, result.singular_values[k] / norm
        ax1.plot(np.arange(1, sym.size + 1), sym, color=f"C{k}", lw=1.4, label=name)
        ax2.semilogy(
            np.arange(1, sv.size + 1),
            np.maximum(sv, 1e-12),
            color=f"C{k}",
            lw=1.4,
            label=f"{name}: stable rank {result.stable_rank[k]:.1f}",
        )
        ranks = np.arange(1, result.block_mean.shape[1] + 1)
        ax3.errorbar(
            ranks,
            result.block_mean[k] / norm,
            np.nan_to_num(result.block_sem[k]) / norm,
            color=f"C{k}",
            marker="o",
            ms=3,
            lw=1.2,
            label=f"{name}: top share {result.block_top_fraction[k]:.2f}",
        )
    ax1.axhline(0.0, color="0.5", lw=0.8)
    finish(ax1, "symmetrised (M + Mᵀ)/2", "rank", "eigenvalue / |J|")
    finish(ax2, "singular values of M", "rank", "singular value / |J|")
    finish(ax3, r"blocks $J_{ij}$ (mean over pairs)", "k", r"$\sigma_k(J_{ij})$ / |J|")
    fig.suptitle("Spectra of the couplings, in units of each tensor's norm", fontsize=11)
    return fig


def figure_distance(result, *, unit: str = "pixels", figsize=None):
    """|J_ij|_F against the distance of tokens i and j, each tensor in units of its own mean
    pair strength, and (when stored) the maps by grid displacement.

    Parameters
    ----------
    result : spinsa.analysis.DistanceComparison
    unit : str
        Unit of the distances, for the axis label.
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    K = len(result.names)
    maps = result.offset is not None
    cols = min(K, 4) if maps else 0  # the maps four to a row, right of the curves
    rows = -(-K // 4) if maps else 1
    fig = new_figure(figsize or (5.0 + 3.6 * cols, 3.6 * rows))
    grid = fig.add_gridspec(rows, 1 + cols)
    axes = [fig.add_subplot(grid[:, 0])]
    axes += [fig.add_subplot(grid[k // 4, 1 + k % 4]) for k in range(K if maps else 0)]
    for k, name in enumerate(result.names):
        axes[0].errorbar(
            result.bin_distance,
            result.mean[k],
            np.nan_to_num(result.sem[k]),
            color=f"C{k}",
            marker="o",
            ms=3,
            lw=1.2,
            label=name,
        )
    axes[0].axhline(1.0, color="0.5", lw=0.8, ls="--")
    axes[0].set_yscale("log")  # a tensor with its norm in a few pairs spans decades
    finish(
        axes[0],
        "strength against distance",
        f"distance between tokens ({unit})",
        r"$|J_{ij}|_F$ / mean over pairs",
    )
    if maps:
        for k, name in enumerate(result.names):
            top = float(np.nanpercentile(result.offset[k], 99))  # its own scale: one tensor
            # with a few strong pairs would wash out the others
            gh, gw = (s // 2 + 1 for s in result.offset.shape[1:])
            _heat(
                fig,
                axes[1 + k],
                result.offset[k],
                f"{name}: by displacement",
                "/ mean",
                vmin=0.0,
                vmax=top,
                extent=(-gw + 0.5, gw - 0.5, gh - 0.5, -gh + 0.5),
            )
            axes[1 + k].set(xlabel="column of j − column of i", ylabel="row of j − row of i")
    fig.suptitle("How the couplings decay with distance on the image grid", fontsize=11)
    return fig


def figure_entropy(results: dict, *, grid_shape=None, figsize=None):
    """Attention entropy of every tensor: means ± standard errors against log(N - 1) (one
    group of bars per data set), and the per-site entropy on the token grid.

    Parameters
    ----------
    results : dict of str to spinsa.analysis.AttentionEntropy
        Label (e.g. ``"test, λ_eval = 1"``) -> result, all for the same tensors.
    grid_shape : (int, int), optional
        (gh, gw) of the tokens: per-site maps of the first result; else a curve per site.
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    labels = list(results)
    first = results[labels[0]]
    K = len(first.names)
    maps = grid_shape is not None and int(np.prod(grid_shape)) == first.site_entropy.shape[1]
    fig = new_figure(figsize or (5.0 + (3.4 * K if maps else 5.0), 4.0))
    axes = fig.subplots(1, 1 + (K if maps else 1), squeeze=False)[0]
    width = 0.8 / K
    for k, name in enumerate(first.names):
        pos = np.arange(len(labels)) + (k - (K - 1) / 2) * width
        mean = [results[lab].mean[k] for lab in labels]
        sem = [np.nan_to_num(results[lab].sem[k]) for lab in labels]
        axes[0].bar(pos, mean, width, yerr=sem, color=f"C{k}", label=name)
    axes[0].axhline(first.max_entropy, color="0.3", ls="--", lw=1.0, label="log(N − 1): uniform")
    axes[0].set_xticks(range(len(labels)), labels, fontsize=8)
    finish(axes[0], "mean over sites and samples", "", "entropy (nats)", legend=7)
    if maps:
        lo, hi = float(first.site_entropy.min()), float(first.site_entropy.max())
        for k, name in enumerate(first.names):  # one colour scale: the models compare
            image = first.site_entropy[k].reshape(grid_shape)
            title = f"{name}: per site ({labels[0]})"
            _heat(fig, axes[1 + k], image, title, "entropy", vmin=lo, vmax=hi)
            axes[1 + k].set(xlabel="token column", ylabel="token row")
    else:
        for k, name in enumerate(first.names):
            axes[1].plot(first.site_entropy[k], color=f"C{k}", lw=1.2, label=name)
        finish(axes[1], f"per site ({labels[0]})", "token", "entropy (nats)")
    fig.suptitle(r"Attention entropy $-\sum_j \alpha_{ij} \log \alpha_{ij}$", fontsize=11)
    return fig


def figure_pseudolikelihood(results: dict, *, figsize=(10.0, 4.0)):
    """The pseudo-likelihood objective of every tensor at its own norm (left) and at the
    common norm (right), per data set, against L(0) (no couplings).

    Parameters
    ----------
    results : dict of str to spinsa.analysis.PseudolikelihoodValues
        Label (e.g. ``"training"``) -> result, all for the same tensors.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure
    """
    labels = list(results)
    first = results[labels[0]]
    K = len(first.names)
    fig = new_figure(figsize)
    width = 0.8 / K
    for ax, field, title in zip(
        fig.subplots(1, 2),
        ("loss", "loss_common"),
        ("at each tensor's own norm", f"at the common norm |J| = {first.common_norm:.3g}"),
        strict=True,
    ):
        for k, name in enumerate(first.names):
            pos = np.arange(len(labels)) + (k - (K - 1) / 2) * width
            ax.bar(
                pos,
                [getattr(results[lab], field)[k] for lab in labels],
                width,
                color=f"C{k}",
                label=name,
            )
        ax.axhline(first.loss_zero, color="0.3", ls="--", lw=1.0, label="L(0): no couplings")
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        finish(ax, title, "", "L(J) (lower is better)", legend=7)
    fig.suptitle(f"Pseudo-likelihood objective, λ = {first.lam:g}", fontsize=11)
    return fig


def figure_compared_tasks(results: Sequence, *, figsize=None):
    """Per task: the error curves (bands of one standard error; the masked task from
    t = 1) with each model's best reference dotted, and the lifetime of the transient below
    that reference.

    Parameters
    ----------
    results : sequence of spinsa.analysis.TaskComparison
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    results = list(results)
    fig = new_figure(figsize or (11.0, 3.8 * len(results)))
    axes = fig.subplots(len(results), 2, squeeze=False, width_ratios=[1.6, 1.0])
    for row, r in enumerate(results):
        first = 1 if r.task == "masked" and r.times.size > 1 else 0
        ax = axes[row, 0]
        for k, name in enumerate(r.names):
            t = r.times[first:]
            band(ax, t, r.mean_all[k, first:], r.sem_all[k, first:], name, f"C{k}")
            if r.best_reference[k]:
                ax.axhline(
                    r.reference_error[k, r.references.index(r.best_reference[k])],
                    color=f"C{k}",
                    ls=":",
                    lw=1.0,
                )
        ax.plot([], [], color="0.3", ls=":", label="best reference (dotted)")
        title = TASK_TITLES.get(r.task, r.task)
        finish(ax, f"{title}: error", ylabel="mean squared error (all pixels)")
        ax = axes[row, 1]
        for k, name in enumerate(r.names):
            n = max(int(r.n_images[k]), 1)
            label = f"{name}: {r.lifetime_mean[k]:.1f} ± {np.nan_to_num(r.lifetime_sem[k]):.1f}"
            ax.stairs(
                r.lifetime_counts[k] / n, r.lifetime_bin_edges, color=f"C{k}", lw=1.5, label=label
            )
        finish(
            ax,
            f"{title}: time below the best reference",
            "lifetime (iterations)",
            "fraction of test images",
        )
    fig.suptitle("The models on the tasks", fontsize=11)
    return fig


def figure_final_images(results: Sequence, *, figsize=None):
    """The mean decoded image at t = T of every model on every task, with the coherence of
    the final images with it and how the runs ended.

    Parameters
    ----------
    results : sequence of spinsa.analysis.TaskComparison
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    results = list(results)
    K = len(results[0].names)
    fig = new_figure(figsize or (2.4 * K + 0.6, 2.8 * len(results)))
    axes = fig.subplots(len(results), K, squeeze=False)
    for row, r in enumerate(results):
        for k, name in enumerate(r.names):
            text = (
                f"{name}, {r.task}\ncoherence {r.coherence_mean[k]:.2f}, "
                f"fixed {r.fraction_fixed_point[k]:.0%}"
            )
            gray(axes[row, k], np.clip(r.final_mean_image[k], 0.0, 1.0), text)
    fig.suptitle("Mean final image (t = T) of each model", fontsize=11)
    return fig


def _load_group(path, prefix: str) -> dict:
    """``sub -> result`` of the analyses stored under ``prefix/`` (``entropy/test``...)."""
    return {
        n.split("/", 1)[1]: load_analysis(path, n)
        for n in list_analyses(path)
        if n.startswith(prefix + "/")
    }


def plot_comparison(
    path: str | os.PathLike, out_dir: str | os.PathLike, *, fmt: str = "png", dpi: int = 150
) -> list[Path]:
    """Save every figure of a comparison file (written by
    :func:`spinsa.experiments.compare.compare_runs`).

    Parameters
    ----------
    path : str or PathLike
        The comparison file (``kind = "comparison"``).
    out_dir : str or PathLike
        Directory of the figures (created if needed).
    fmt : str
    dpi : int

    Returns
    -------
    list of Path
        ``cosines``, ``spectra``, ``distance``, ``entropy``, ``pseudolikelihood`` and, when
        the runs were evaluated, ``tasks`` and ``final_images``.
    """
    info = io.read(path)
    attrs = info.attrs
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entropy, pl = _load_group(path, "entropy"), _load_group(path, "pseudolikelihood")
    tasks = _load_group(path, "tasks")
    tasks = [tasks[t] for t in TASK_TITLES if t in tasks]
    grid = attrs.get("grid_shape")
    labels = {"test": "test images", "train": "training images"}
    figures = {
        "cosines": lambda: figure_cosines(load_analysis(path, "cosines")),
        "spectra": lambda: figure_spectra(load_analysis(path, "spectra")),
        "distance": lambda: figure_distance(load_analysis(path, "distance")),
        "entropy": lambda: figure_entropy(
            {f"{labels.get(k, k)}, λ = {v.lam:g}": v for k, v in entropy.items()},
            grid_shape=tuple(grid) if grid else None,
        ),
        "pseudolikelihood": lambda: figure_pseudolikelihood(
            {labels.get(k, k): v for k, v in pl.items()}
        ),
    }
    if tasks:
        figures["tasks"] = lambda: figure_compared_tasks(tasks)
        figures["final_images"] = lambda: figure_final_images(tasks)
    return [save_figure(draw(), out / f"{name}.{fmt}", dpi=dpi) for name, draw in figures.items()]
