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


def figure_spin_error(val_curve, test_curve, references: dict, best_t: int, *, figsize=(7, 4)):
    """The bare self-attention's MSE against t (validation and test) beside the references'
    test MSE (``references`` name -> (mse, sem))."""
    fig = new_figure(figsize)
    ax = fig.subplots()
    t = np.arange(len(val_curve))
    ax.plot(t[1:], val_curve[1:], color="C0", lw=1.6, label="validation")
    ax.plot(t[1:], test_curve[1:], color="C1", lw=1.6, label="test")
    ax.axvline(best_t, color="0.5", lw=0.8, ls=":", label=f"t chosen on validation: {best_t}")
    for k, (name, (mse, sem)) in enumerate(references.items()):
        level(ax, mse, sem, f"{name} (test)", f"C{k + 2}")
    ax.set_yscale("log")
    finish(ax, "bare self-attention: error of the masked last token", "t (iterations)", "MSE")
    return fig


def plot_sequences(path: str | os.PathLike, out_dir: str | os.PathLike, *, dpi: int = 120):
    """Save ``forecasts.png`` and ``spin_error.png`` of a ``sequences.h5``; returns the paths."""
    info = io.read(path)
    out = Path(out_dir)
    forecasts = io.read_group(path, "forecasts")[0]
    spin = io.read_group(path, "spin")[0]
    scores = info.attrs["scores"]
    refs = {m: (s["mse"], s["mse_sem"]) for m, s in scores.items() if is_reference(m)}
    figures = {
        "forecasts.png": figure_forecasts(
            info.array("truth"), forecasts, info.attrs.get("step_seconds", 3600)
        ),
        "spin_error.png": figure_spin_error(
            spin["val_mse_t"], spin["test_mse_t"], refs, info.attrs["best_t"]
        ),
    }
    return [save_figure(fig, out / name, dpi=dpi) for name, fig in figures.items()]
