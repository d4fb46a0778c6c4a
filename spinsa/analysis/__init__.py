"""Measurements on trajectories and couplings: the physicist's toolbox of spinsa.

Arrays in, frozen dataclasses out, for any couplings (fitted, Hebbian, random) and any data
(images, synthetic patterns):

- :mod:`~spinsa.analysis.overlaps`: overlaps with stored patterns, nearest pattern at every
  time, correlations of decoded images;
- :mod:`~spinsa.analysis.lifetimes`: peak overlap and lifetime of transient memories;
- :mod:`~spinsa.analysis.attractors`: fixed points, cycles, convergence times, attractors
  and their basins;
- :mod:`~spinsa.analysis.hebbian`: comparison with norm-matched Hebbian couplings;
- :mod:`~spinsa.analysis.twobody`: the two-body vector-spin model and its pseudo-likelihood;
- :mod:`~spinsa.analysis.planted`: planted inverse problems: sample a planted J*, fit it
  back, error against the number of samples;
- :mod:`~spinsa.analysis.stability`: the Jacobian of the update map and the linear
  stability of a fixed point;
- :mod:`~spinsa.analysis.capacity`: the critical load of a capacity curve, with its error;
- :mod:`~spinsa.analysis.patches`: variance of predicted pixels in masked patches;
- :mod:`~spinsa.analysis.compare`: several coupling tensors on the same data: cosines,
  spectra, strength against distance, attention entropy, pseudo-likelihood, and their
  evaluations on the two tasks side by side;
- :mod:`~spinsa.analysis.store`: results to and from ``/analysis/<name>`` in HDF5 files.
"""

from spinsa.analysis import (
    attractors,
    capacity,
    compare,
    hebbian,
    lifetimes,
    patches,
    planted,
    stability,
    twobody,
)
from spinsa.analysis import overlaps as _overlaps  # the function overlaps takes the name
from spinsa.analysis._results import AnalysisResult
from spinsa.analysis.attractors import *  # noqa: F403
from spinsa.analysis.capacity import *  # noqa: F403
from spinsa.analysis.compare import *  # noqa: F403
from spinsa.analysis.hebbian import *  # noqa: F403
from spinsa.analysis.lifetimes import *  # noqa: F403
from spinsa.analysis.overlaps import *  # noqa: F403
from spinsa.analysis.patches import *  # noqa: F403
from spinsa.analysis.planted import *  # noqa: F403
from spinsa.analysis.stability import *  # noqa: F403
from spinsa.analysis.store import (
    find_results,
    list_analyses,
    load_analysis,
    load_result,
    save_analysis,
)
from spinsa.analysis.summary import ErrorCurves
from spinsa.analysis.twobody import *  # noqa: F403

__all__ = [
    "AnalysisResult",
    "ErrorCurves",
    "find_results",
    "list_analyses",
    "load_analysis",
    "load_result",
    "save_analysis",
    *attractors.__all__,
    *capacity.__all__,
    *compare.__all__,
    *hebbian.__all__,
    *lifetimes.__all__,
    *_overlaps.__all__,
    *patches.__all__,
    *planted.__all__,
    *stability.__all__,
    *twobody.__all__,
]
