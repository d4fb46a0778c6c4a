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
- :mod:`~spinsa.analysis.patches`: variance of predicted pixels in masked patches;
- :mod:`~spinsa.analysis.store`: results to and from ``/analysis/<name>`` in HDF5 files.
"""

from spinsa.analysis._results import AnalysisResult
from spinsa.analysis.attractors import (
    AttractorReport,
    CycleReport,
    DecodedImages,
    StateClusters,
    cluster_states,
    find_attractors,
    find_cycles,
    fixed_points,
    lagged_distances,
    random_spins,
    step_sizes,
)
from spinsa.analysis.hebbian import (
    CouplingSpectrum,
    HebbianComparison,
    StrengthDistance,
    StrengthMaps,
    compare_with_hebbian,
    comparison_of,
    coupling_cosine,
    coupling_matrix,
    coupling_spectrum,
    matched_hebbian,
    pair_cosines,
    pair_strengths,
    strength_maps,
    strength_vs_distance,
)
from spinsa.analysis.lifetimes import (
    Lifetimes,
    LifetimeTable,
    error_lifetimes,
    lifetimes_vs_corruption,
    overlap_lifetimes,
    summarize_lifetimes,
)
from spinsa.analysis.overlaps import (
    NearestPatterns,
    OverlapTrace,
    decoded_correlations,
    mean_pattern,
    nearest_patterns,
    overlaps,
    pixel_correlations,
    target_overlaps,
    trajectory_overlaps,
)
from spinsa.analysis.patches import (
    PatchVarianceHistograms,
    PatchVariances,
    masked_patch_variances,
    patch_pixels,
    patch_variance_histograms,
)
from spinsa.analysis.store import list_analyses, load_analysis, save_analysis
from spinsa.analysis.summary import ErrorCurves
from spinsa.analysis.twobody import (
    TwoBodyFit,
    TwoBodyVsHebbian,
    fit_twobody,
    log_partition,
    log_sphere_area,
    mean_resultant_length,
    twobody_fields,
    twobody_log_density,
    twobody_log_likelihoods,
    twobody_nll,
    twobody_nll_and_grad,
    twobody_vs_hebbian,
)

__all__ = [
    "AnalysisResult",
    "AttractorReport",
    "CouplingSpectrum",
    "CycleReport",
    "DecodedImages",
    "ErrorCurves",
    "HebbianComparison",
    "LifetimeTable",
    "Lifetimes",
    "NearestPatterns",
    "OverlapTrace",
    "PatchVarianceHistograms",
    "PatchVariances",
    "StateClusters",
    "StrengthDistance",
    "StrengthMaps",
    "TwoBodyFit",
    "TwoBodyVsHebbian",
    "cluster_states",
    "compare_with_hebbian",
    "comparison_of",
    "coupling_cosine",
    "coupling_matrix",
    "coupling_spectrum",
    "decoded_correlations",
    "error_lifetimes",
    "find_attractors",
    "find_cycles",
    "fit_twobody",
    "fixed_points",
    "lagged_distances",
    "lifetimes_vs_corruption",
    "list_analyses",
    "load_analysis",
    "log_partition",
    "log_sphere_area",
    "masked_patch_variances",
    "matched_hebbian",
    "mean_pattern",
    "mean_resultant_length",
    "nearest_patterns",
    "overlap_lifetimes",
    "overlaps",
    "pair_cosines",
    "pair_strengths",
    "patch_pixels",
    "patch_variance_histograms",
    "pixel_correlations",
    "random_spins",
    "save_analysis",
    "step_sizes",
    "strength_maps",
    "strength_vs_distance",
    "summarize_lifetimes",
    "target_overlaps",
    "trajectory_overlaps",
    "twobody_fields",
    "twobody_log_density",
    "twobody_log_likelihoods",
    "twobody_nll",
    "twobody_nll_and_grad",
    "twobody_vs_hebbian",
]
