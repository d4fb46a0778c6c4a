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

from spinsa.plotting import analysis, experiments
from spinsa.plotting._base import new_figure, save_figure
from spinsa.plotting.analysis import *  # noqa: F403
from spinsa.plotting.experiments import *  # noqa: F403

__all__ = ["new_figure", "save_figure", *analysis.__all__, *experiments.__all__]
