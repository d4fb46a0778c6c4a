"""Figures from HDF5 files: they read what the experiments and analyses wrote, never recompute.

::

    from spinsa import plotting
    fig = plotting.figure_errors("out/reproduce.h5")          # the paper's Fig. 1 curves
    plotting.save_figure(fig, "out/fig1_errors.png")
    plotting.plot_run("run.h5", "figures/")                   # every figure of a run file

- :mod:`~spinsa.plotting.experiments`: error curves with their references, decoded
  examples, the notebook's view, masked-patch variances (evaluations, ``reproduce.h5``,
  ``baselines.h5``);
- :mod:`~spinsa.plotting.analysis`: one figure per analysis of ``spinsa analyze``, and
  :func:`plot_run`.

matplotlib is imported on first use; figures are drawn on the Agg canvas without pyplot's
global state, so they work without a display. The layer below the experiments: plotting
reads files through :mod:`spinsa.io` and never imports :mod:`spinsa.experiments`.
"""

from spinsa.plotting._base import new_figure, save_figure
from spinsa.plotting.analysis import (
    FIGURES,
    figure_attractors,
    figure_hebbian,
    figure_hebbian_errors,
    figure_lifetimes,
    figure_overlaps,
    figure_patches,
    plot_run,
)
from spinsa.plotting.experiments import (
    figure_errors,
    figure_examples,
    figure_notebook_view,
    figure_patch_variances,
)

__all__ = [
    "FIGURES",
    "figure_attractors",
    "figure_errors",
    "figure_examples",
    "figure_hebbian",
    "figure_hebbian_errors",
    "figure_lifetimes",
    "figure_notebook_view",
    "figure_overlaps",
    "figure_patch_variances",
    "figure_patches",
    "new_figure",
    "plot_run",
    "save_figure",
]
