"""Figures of a sequence benchmark file (``sequences.h5``); they read the file, never fit."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from spinsa import io
from spinsa.plotting._base import finish, level, new_figure, save_figure
from spinsa.sequences.references import is_reference

__all__ = ["figure_forecasts", "figure_spin_error", "plot_sequences"]

TWO_WEEKS = 14 * 86_400  # seconds shown in the forecast figure


def figure_forecasts(truth, forecasts: dict, step_seconds: int = 3600, *, figsize=(12.0, 6.5)):
    """The first two weeks of test values and every model's one-step forecasts of them.

    ``truth`` (n,); ``forecasts`` name -> (n,); ``step_seconds`` the spacing of the rows.
    One panel for the learnt models, one for the references, on the same axes.
    """
    hours = max(1, TWO_WEEKS // step_seconds)
    n = min(hours, len(truth))
    t = np.arange(n)
    fig = new_figure(figsize)
    axes = fig.subplots(2, 1, sharex=True, sharey=True)
    for ax, refs in zip(axes, (False, True), strict=True):
        ax.plot(t, truth[:n], color="k", lw=1.6, label="truth")
        for k, (name, pred) in enumerate(forecasts.items()):
            if is_reference(name) == refs:
                ax.plot(t, pred[:n], color=f"C{k}", lw=1.0, label=name)
        title = "references" if refs else "models"
        finish(
            ax,
            f"one-step forecasts over the first {n} test rows ({step_seconds} s apart): {title}",
            "row of the test part",
            "normalised value",
            legend=7,
        )
    return fig


def figure_spin_error(curves: dict, references: dict, best_t: dict, *, figsize=(7, 4)):
    """The bare self-attention's MSE against t (validation and test) from each start of the
    token to predict, beside the references' test MSE.

    ``curves`` start -> {"val_mse_t": (T + 1,), "test_mse_t": (T + 1,)}; ``references``
    name -> (mse, sem); ``best_t`` start -> the t chosen on validation. The zero start is
    drawn from t = 1 (its t = 0 is the masked token), the persistence start from t = 0
    (persistence itself).
    """
    fig = new_figure(figsize)
    ax = fig.subplots()
    for k, (start, c) in enumerate(curves.items()):
        first = 1 if start == "zero" else 0
        t = np.arange(len(c["val_mse_t"]))[first:]
        color = f"C{k}"
        ax.plot(t, c["val_mse_t"][first:], color=color, lw=1.6, ls="--",
                label=f"{start} start: validation")  # fmt: skip
        ax.plot(t, c["test_mse_t"][first:], color=color, lw=1.6, label=f"{start} start: test")
        ax.axvline(best_t[start], color=color, lw=0.8, ls=":",
                   label=f"{start} start: t chosen on validation, {best_t[start]}")  # fmt: skip
    for k, (name, (mse, sem)) in enumerate(references.items()):
        level(ax, mse, sem, f"{name} (test)", f"C{k + len(curves)}")
    ax.set_yscale("log")
    finish(ax, "bare self-attention: error of the last token", "t (iterations)", "MSE")
    return fig


def plot_sequences(path: str | os.PathLike, out_dir: str | os.PathLike, *, dpi: int = 120):
    """Save ``forecasts.png`` and ``spin_error.png`` of a ``sequences.h5``; returns the paths."""
    info = io.read(path)
    out = Path(out_dir)
    forecasts = io.read_group(path, "forecasts")[0]
    best_t = info.attrs["best_t"]
    curves = {start: io.read_group(path, f"spin/{start}")[0] for start in best_t}
    scores = info.attrs["scores"]
    refs = {m: (s["mse"], s["mse_sem"]) for m, s in scores.items() if is_reference(m)}
    figures = {
        "forecasts.png": figure_forecasts(
            info.array("truth"), forecasts, info.attrs.get("step_seconds", 3600)
        ),
        "spin_error.png": figure_spin_error(curves, refs, best_t),
    }
    return [save_figure(fig, out / name, dpi=dpi) for name, fig in figures.items()]
