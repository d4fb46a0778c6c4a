"""Figures from HDF5 files: they read what the experiments and analyses wrote, never recompute.

::

    fig = plotting.figure_errors("out/reproduce.h5")          # the paper's Fig. 1 curves
    plotting.save_figure(fig, "out/fig1_errors.png")
    plotting.plot_run("run.h5", "figures/")                   # every figure of a run file

:mod:`~spinsa.plotting.experiments` draws evaluations, ``reproduce.h5`` and ``baselines.h5``;
:mod:`~spinsa.plotting.analysis` the analyses of ``spinsa analyze``;
:mod:`~spinsa.plotting.compare` the comparisons of ``spinsa compare``;
:mod:`~spinsa.plotting.scan` the phase diagrams of a collected scan. matplotlib is imported
on first use and figures are drawn on the Agg canvas without pyplot's global state.
Plotting reads files through :mod:`spinsa.io`, below :mod:`spinsa.experiments`.
"""

from spinsa.plotting import analysis, compare, experiments, planted, scan
from spinsa.plotting._base import new_figure, save_figure
from spinsa.plotting.analysis import *  # noqa: F403
from spinsa.plotting.compare import *  # noqa: F403
from spinsa.plotting.experiments import *  # noqa: F403
from spinsa.plotting.planted import *  # noqa: F403
from spinsa.plotting.scan import *  # noqa: F403

__all__ = [
    "new_figure",
    "save_figure",
    *analysis.__all__,
    *compare.__all__,
    *experiments.__all__,
    *planted.__all__,
    *scan.__all__,
]
