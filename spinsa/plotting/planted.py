"""The planted inverse problems' figure (docs/inverse-problems.md): reconstruction error and
cosine against the number of samples M, log–log, with the fitted slopes; read from the
``/analysis/<name>`` groups of one file (:func:`spinsa.analysis.recovery_curve` results)."""

from __future__ import annotations

import numpy as np

from spinsa.analysis.store import list_analyses, load_analysis
from spinsa.plotting._base import finish, new_figure

__all__ = ["figure_recovery"]

_STYLE = {"row_matched": "-", "full_sweep": "--"}
_MARK = {"normalised": "o", "pl": "s", "cd": "^"}


def figure_recovery(path, *, figsize=(11.0, 4.2)):
    """Error |J − J*|/|J*| (left, log–log, slope in the legend) and cosine (right) against M,
    one curve per saved RecoveryCurve: colour the planted kind, solid row-matched samples,
    dashed full sweeps, the marker the fitting method."""
    curves = [load_analysis(path, n) for n in list_analyses(path)]
    curves = [c for c in curves if type(c).__name__ == "RecoveryCurve"]
    if not curves:
        raise ValueError(f"{path} holds no RecoveryCurve analysis; run recovery_curve first")
    kinds = sorted({c.kind for c in curves})
    colors = dict(zip(kinds, ("C0", "C1", "C2", "C3", "C4"), strict=False))
    fig = new_figure(figsize)
    ax_err, ax_cos = fig.subplots(1, 2)
    for c in curves:
        style = dict(color=colors[c.kind], ls=_STYLE.get(c.sampling, ":"),
                     marker=_MARK.get(c.method, "x"), ms=4)  # fmt: skip
        name = f"{c.kind}, {c.method}, {c.sampling.replace('_', '-')}"
        slope = "" if not np.isfinite(c.slope) else f" (slope {c.slope:.2f})"
        ax_err.loglog(c.n_samples, c.error, label=name + slope, **style)
        ax_cos.semilogx(c.n_samples, c.cosine, label=name, **style)
    finish(ax_err, "error against samples", "M (samples)", "|J − J*| / |J*|", legend=6)
    finish(ax_cos, "cosine with the planted couplings", "M (samples)", "cos(J, J*)", legend=None)
    ax_cos.set_ylim(top=1.02)
    return fig
