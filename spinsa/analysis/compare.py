"""Several coupling tensors on the same data, side by side.

Each function takes K >= 1 (``pairwise_cosines``: K >= 2) couplings of one shape
(N, N, d, d) and their names, and returns one result with a leading model axis of length K:

- :func:`pairwise_cosines`: the global cosine <J_a, J_b>_F / (|J_a| |J_b|) of every two
  tensors and the per-pair cosines cos(J_a,ij, J_b,ij) (:func:`~spinsa.analysis.pair_cosines`);
- :func:`coupling_spectra`: the spectra of :func:`~spinsa.analysis.coupling_spectrum`, the
  singular values of the blocks J_ij pooled over the pairs, and a few numbers from them;
- :func:`distance_dependence`: |J_ij|_F against the distance of tokens i and j
  (:func:`~spinsa.analysis.strength_vs_distance`), each tensor divided by its own mean
  |J_ij|_F so that tensors of different norms compare;
- :func:`attention_entropy`: the entropy -sum_j alpha_ij log alpha_ij of every site's
  attention (:func:`spinsa.attention`) on data, against its maximum log(N - 1);
- :func:`pseudolikelihood_values`: the objective L(J) of :func:`spinsa.pl_loss_and_grad`
  each tensor reaches, at its own norm and rescaled to a common one;
- :func:`compare_tasks`: from the stored evaluations of one task (``/evaluation/<task>`` of
  run files), the best error, the best reference and the gain over it in combined standard
  errors, the lifetime of the transient below that reference, and the attractors' numbers.

A model "beats" a reference only when its best error is below it by more than
:data:`~spinsa.analysis.summary.SIGNIFICANT_Z` = 3 combined standard errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spinsa import _draw
from spinsa._checks import check_choice, check_couplings, check_spins
from spinsa.analysis._results import AnalysisResult, labels
from spinsa.analysis.hebbian import (
    coupling_cosine,
    coupling_spectrum,
    pair_cosines,
    strength_maps,
    strength_vs_distance,
)
from spinsa.analysis.lifetimes import summarize_lifetimes
from spinsa.analysis.summary import (
    SIGNIFICANT_Z,
    below_reference_lifetimes,
    significant,
    summarize_arrays,
)
from spinsa.fit.objective import pl_loss_and_grad
from spinsa.model import attention
from spinsa.references import REFERENCES
from spinsa.tasks import TASKS, mean_sem

__all__ = [
    "AttentionEntropy",
    "CouplingSpectra",
    "DistanceComparison",
    "PairwiseCosines",
    "PseudolikelihoodValues",
    "TaskComparison",
    "attention_entropy",
    "compare_tasks",
    "coupling_spectra",
    "distance_dependence",
    "pairwise_cosines",
    "pseudolikelihood_values",
]

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)  # of the per-pair cosines
CHUNK = 256  # samples whose (n, N, N) attention is held at once


def _names(names, K: int) -> tuple[str, ...]:
    """The models' names: ``J0``, ``J1``... by default; K distinct strings otherwise."""
    if names is None:
        return tuple(f"J{k}" for k in range(K))
    names = tuple(str(n) for n in names)
    if len(names) != K:
        raise ValueError(f"names must hold one name per tensor ({K}), got {len(names)}")
    if len(set(names)) != K:
        raise ValueError(f"names must be distinct, got {list(names)}")
    return names


def _tensors(
    Js, names, minimum: int = 1, nonzero: str = ""
) -> tuple[list[np.ndarray], tuple[str, ...]]:
    """Couplings of one shape (N, N, d, d), in their own dtype, and their names; with
    ``nonzero`` (what a zero tensor leaves undefined) a tensor of zeros is refused."""
    if isinstance(Js, np.ndarray) and Js.ndim == 4:
        raise ValueError("Js must be a sequence of coupling tensors (N, N, d, d), not one tensor")
    Js = list(Js)
    if len(Js) < minimum:
        raise ValueError(f"Js must hold at least {minimum} coupling tensors, got {len(Js)}")
    first = check_couplings(Js[0], name="Js[0]")
    N, d = first.shape[0], first.shape[2]
    out = [first] + [check_couplings(J, N, d, name=f"Js[{k}]") for k, J in enumerate(Js[1:], 1)]
    for k, J in enumerate(out):
        if nonzero and not np.any(J):
            raise ValueError(
                f"Js[{k}] is all zeros: {nonzero} of a zero tensor are undefined; "
                "leave it out (an unfitted run?)"
            )
    return out, _names(names, len(out))


# --------------------------------------------------------------------------- cosines
@dataclass(frozen=True)
class PairwiseCosines(AnalysisResult):
    """How alike K coupling tensors are, globally and pair of tokens by pair of tokens.

    Attributes
    ----------
    cosine : ndarray of float64, shape (K, K)
        <J_a, J_b>_F / (|J_a|_F |J_b|_F) (:func:`~spinsa.analysis.coupling_cosine`); a
        tensor of zeros has no direction and is refused.
    pairs : ndarray of int64, shape (K (K - 1) / 2, 2)
        The two tensors (a, b), a < b, of each comparison below.
    pair_cosine : ndarray of float64, shape (K (K - 1) / 2, N, N)
        cos(J_a,ij, J_b,ij) of the d x d blocks (:func:`~spinsa.analysis.pair_cosines`);
        NaN on the diagonal and where a block is zero.
    mean : ndarray of float64, shape (K (K - 1) / 2,)
        Mean of ``pair_cosine`` over the off-diagonal pairs where it is defined.
    quantiles : ndarray of float64, shape (K (K - 1) / 2, Q)
        Its quantiles at ``levels``.
    levels : ndarray of float64, shape (Q,)
    names : tuple of str, length K
    """

    _coords = {"K": "names"}

    cosine: np.ndarray
    pairs: np.ndarray
    pair_cosine: np.ndarray
    mean: np.ndarray
    quantiles: np.ndarray
    levels: np.ndarray
    names: tuple[str, ...] = ()

    def plot(self, ax=None):
        """The K x K matrix of global cosines, each value written in its cell."""
        ax = _draw.axes(ax, figsize=(4.2, 3.6))
        K = self.cosine.shape[0]
        im = ax.imshow(self.cosine, vmin=-1, vmax=1, cmap="RdBu_r", interpolation="nearest")
        for a in range(K):
            for b in range(K):
                ax.text(b, a, f"{self.cosine[a, b]:.3f}", ha="center", va="center", fontsize=8)
        names = labels(self.names, K)
        ax.set_xticks(range(K), names, rotation=30, ha="right")
        ax.set_yticks(range(K), names)
        ax.figure.colorbar(im, ax=ax, label="cosine")
        ax.set_title("global cosines of the couplings", fontsize=10)
        return ax


def pairwise_cosines(Js: Sequence, names: Sequence[str] | None = None) -> PairwiseCosines:
    """Global and per-pair cosine similarities of every two of K coupling tensors.

    Parameters
    ----------
    Js : sequence of ndarray, each of shape (N, N, d, d)
        K >= 2 tensors on the same tokens and spin dimension.
    names : sequence of str, length K, optional
        Labels of the tensors (default ``J0``, ``J1``...).

    Returns
    -------
    PairwiseCosines
        cos(J, J) = 1 and cos(J, -J) = -1, globally and for every non-zero block.
    """
    Js, names = _tensors(Js, names, minimum=2, nonzero="the cosines")
    K = len(Js)
    cosine = np.ones((K, K))
    pairs = np.array([(a, b) for a in range(K) for b in range(a + 1, K)], dtype=np.int64)
    maps, means, quantiles = [], [], []
    for a, b in pairs:
        cosine[a, b] = cosine[b, a] = coupling_cosine(Js[a], Js[b])
        cos = pair_cosines(Js[a], Js[b])
        valid = cos[np.isfinite(cos)]
        maps.append(cos)
        means.append(valid.mean() if valid.size else np.nan)
        quantiles.append(np.quantile(valid, QUANTILES) if valid.size else np.full(5, np.nan))
    return PairwiseCosines(
        cosine=cosine,
        pairs=pairs,
        pair_cosine=np.stack(maps),
        mean=np.asarray(means, dtype=np.float64),
        quantiles=np.asarray(quantiles, dtype=np.float64),
        levels=np.asarray(QUANTILES),
        names=names,
    )


# --------------------------------------------------------------------------- spectra
@dataclass(frozen=True)
class CouplingSpectra(AnalysisResult):
    """Spectra of K coupling tensors, each seen as the (N d, N d) matrix
    M[i d + a, j d + b] = J[i, j, a, b] (:func:`~spinsa.analysis.coupling_matrix`).

    Attributes
    ----------
    eigenvalues : ndarray of complex128, shape (K, N d)
        Eigenvalues of M, by decreasing real part.
    singular_values : ndarray of float64, shape (K, N d)
        Singular values of M, decreasing.
    symmetric_eigenvalues : ndarray of float64, shape (K, N d)
        Eigenvalues of the symmetrised (M + M^T) / 2, decreasing.
    block_singular_values : ndarray of float64, shape (K, N (N - 1), d)
        Singular values of every off-diagonal block J_ij (i != j, row-major), decreasing.
    block_mean, block_sem : ndarray of float64, shape (K, d)
        Mean over the pairs of the k-th singular value of a block, and its standard error.
    norm : ndarray of float64, shape (K,)
        |J|_F: divide a spectrum by it to compare tensors of different norms.
    stable_rank : ndarray of float64, shape (K,)
        |J|_F^2 / sigma_max(M)^2, between 1 (rank one) and N d.
    block_top_fraction : ndarray of float64, shape (K,)
        Mean over the non-zero blocks of sigma_1^2 / sum_k sigma_k^2: 1 when every block has
        rank one (Hebbian couplings of a single pattern), 1/d for isotropic blocks.
    positive_fraction : ndarray of float64, shape (K,)
        Fraction of positive eigenvalues of (M + M^T) / 2.
    names : tuple of str, length K
    """

    _coords = {"K": "names"}

    _same_shape = (
        "eigenvalues singular_values symmetric_eigenvalues",
        "block_mean block_sem",
        "norm stable_rank block_top_fraction positive_fraction",
    )
    eigenvalues: np.ndarray
    singular_values: np.ndarray
    symmetric_eigenvalues: np.ndarray
    block_singular_values: np.ndarray
    block_mean: np.ndarray
    block_sem: np.ndarray
    norm: np.ndarray
    stable_rank: np.ndarray
    block_top_fraction: np.ndarray
    positive_fraction: np.ndarray
    names: tuple[str, ...] = ()

    def plot(self, ax=None):
        """Singular values of each tensor over its norm, by rank (log scale)."""
        ax = _draw.axes(ax)
        ranks = np.arange(1, self.singular_values.shape[1] + 1)
        for k, name in enumerate(labels(self.names, self.norm.size)):
            values = self.singular_values[k] / (self.norm[k] or 1.0)
            ax.semilogy(ranks, np.maximum(values, 1e-12), color=f"C{k}", label=name)
        _draw.finish(ax, "singular values", "rank", r"$\sigma_k / |J|_F$")
        return ax


def coupling_spectra(Js: Sequence, names: Sequence[str] | None = None) -> CouplingSpectra:
    """Spectra of every tensor (:func:`~spinsa.analysis.coupling_spectrum`), with the
    singular values of the blocks pooled over the pairs of tokens.

    Parameters
    ----------
    Js : sequence of ndarray, each of shape (N, N, d, d)
    names : sequence of str, length K, optional

    Returns
    -------
    CouplingSpectra
    """
    Js, names = _tensors(Js, names, nonzero="the stable rank and the block fractions")
    N = Js[0].shape[0]
    off = ~np.eye(N, dtype=bool)
    spectra = [coupling_spectrum(J) for J in Js]
    blocks = np.stack([s.block_singular_values[off] for s in spectra])  # (K, N (N - 1), d)
    block_mean, block_sem, _ = mean_sem(blocks, axis=1)
    power = (blocks**2).sum(axis=2)
    top = np.full(power.shape, np.nan)
    np.divide(blocks[..., 0] ** 2, power, out=top, where=power > 0)
    sv = np.stack([s.singular_values for s in spectra])
    norm = np.sqrt((sv**2).sum(axis=1))  # = |J|_F
    stable = np.full(norm.shape, np.nan)
    np.divide(norm**2, sv[:, 0] ** 2, out=stable, where=sv[:, 0] > 0)
    sym = np.stack([s.symmetric_eigenvalues for s in spectra])
    return CouplingSpectra(
        eigenvalues=np.stack([s.eigenvalues for s in spectra]),
        singular_values=sv,
        symmetric_eigenvalues=sym,
        block_singular_values=blocks,
        block_mean=block_mean,
        block_sem=block_sem,
        norm=norm,
        stable_rank=stable,
        block_top_fraction=mean_sem(top, axis=1)[0],
        positive_fraction=(sym > 0).mean(axis=1),
        names=names,
    )


# --------------------------------------------------------------------------- distance
@dataclass(frozen=True)
class DistanceComparison(AnalysisResult):
    """Coupling strength against distance for K tensors, each in units of its own mean.

    Attributes
    ----------
    bin_distance : ndarray of float64, shape (B,)
        Mean distance of the pairs in each bin (the same bins for every tensor).
    count : ndarray of int64, shape (B,)
        Pairs per bin.
    mean, sem : ndarray of float64, shape (K, B)
        Mean of |J_ij|_F / s over the pairs of each bin and its standard error, where s is
        the tensor's ``scale``.
    scale : ndarray of float64, shape (K,)
        Mean of |J_ij|_F over the N (N - 1) pairs i != j (1 for a zero tensor).
    offset : ndarray of float64, shape (K, 2 gh - 1, 2 gw - 1), or None
        Mean |J_ij|_F / s by grid displacement (:func:`~spinsa.analysis.strength_maps`),
        when a grid shape was given.
    names : tuple of str, length K
    """

    _coords = {"K": "names"}

    _same_shape = ("mean sem",)
    bin_distance: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    sem: np.ndarray
    scale: np.ndarray
    offset: np.ndarray | None = None
    names: tuple[str, ...] = ()

    def plot(self, ax=None):
        """Mean strength |J_ij|_F (in units of each tensor's mean) against distance, with
        standard errors.
        """
        ax = _draw.axes(ax)
        for k, name in enumerate(labels(self.names, self.mean.shape[0])):
            sem = np.nan_to_num(self.sem[k])
            ax.errorbar(self.bin_distance, self.mean[k], sem, color=f"C{k}", label=name,
                        marker="o", ms=2.5, lw=1.2)  # fmt: skip
        _draw.finish(ax, "strength against distance", "distance", r"$|J_{ij}|_F$ / mean")
        return ax


def distance_dependence(
    Js: Sequence,
    positions,
    names: Sequence[str] | None = None,
    *,
    bins=None,
    grid_shape: tuple[int, int] | None = None,
) -> DistanceComparison:
    """How |J_ij|_F decays with the distance |r_i - r_j| of tokens i and j, for K tensors.

    Every tensor is divided by its own mean block strength, so that a value of 2 means
    "twice as strong as the average pair" whatever the tensor's norm.

    Parameters
    ----------
    Js : sequence of ndarray, each of shape (N, N, d, d)
    positions : ndarray, shape (N, D)
        Position of every token, e.g. ``PatchEmbedding.token_positions("center")``.
    names : sequence of str, length K, optional
    bins : int or array_like, optional
        As in :func:`~spinsa.analysis.strength_vs_distance` (default: one bin per distance).
    grid_shape : (int, int), optional
        (gh, gw) of the token grid: adds the maps by grid displacement.

    Returns
    -------
    DistanceComparison
    """
    Js, names = _tensors(Js, names)
    per = [strength_vs_distance(J, positions, bins) for J in Js]
    scale = np.array([p.strength.mean() if np.any(p.strength) else 1.0 for p in per])
    offset = None
    if grid_shape is not None:
        maps = [strength_maps(J, grid_shape).offset for J in Js]
        offset = np.stack(maps) / scale[:, None, None]
    return DistanceComparison(
        bin_distance=per[0].bin_distance,
        count=per[0].count,
        mean=np.stack([p.mean for p in per]) / scale[:, None],
        sem=np.stack([p.sem for p in per]) / scale[:, None],
        scale=scale,
        offset=offset,
        names=names,
    )


# --------------------------------------------------------------------------- entropy
@dataclass(frozen=True)
class AttentionEntropy(AnalysisResult):
    """Entropy of the attention of every site, H_i = -sum_{j != i} alpha_ij log alpha_ij.

    Attributes
    ----------
    mean, sem : ndarray of float64, shape (K,)
        Mean over the samples of (1/N) sum_i H_i, and its standard error.
    site_entropy : ndarray of float64, shape (K, N)
        Mean of H_i over the samples, per site.
    max_entropy : float
        log(N - 1), the entropy of uniform attention (every score equal, e.g. J = 0).
    lam : float
        The inverse temperature of the softmax.
    n_samples : int
    names : tuple of str, length K
    """

    _coords = {"K": "names"}

    _same_shape = ("mean sem",)
    mean: np.ndarray
    sem: np.ndarray
    site_entropy: np.ndarray
    max_entropy: float = float("nan")
    lam: float = 1.0
    n_samples: int = 0
    names: tuple[str, ...] = ()

    def plot(self, ax=None):
        """Mean attention entropy of each tensor with its standard error, against that of
        uniform attention, log(N - 1).
        """
        ax = _draw.axes(ax)
        names = labels(self.names, self.mean.size)
        ax.bar(names, self.mean, yerr=np.nan_to_num(self.sem), color="C0", capsize=3)
        ax.axhline(self.max_entropy, color="0.3", ls="--", label="uniform, log(N - 1)")
        _draw.finish(ax, f"attention entropy (λ = {self.lam:g})", "couplings", "entropy (nats)")
        return ax


def attention_entropy(
    x, Js: Sequence, lam: float, names: Sequence[str] | None = None
) -> AttentionEntropy:
    """How spread the attention of each tensor is on the configurations ``x``.

    Parameters
    ----------
    x : ndarray, shape (P, N, d)
        Configurations (e.g. embedded images), P >= 1.
    Js : sequence of ndarray, each of shape (N, N, d, d)
    lam : float
        Inverse temperature of :func:`spinsa.attention`.
    names : sequence of str, length K, optional

    Returns
    -------
    AttentionEntropy
        ``mean`` between 0 (every site attends to one token) and ``max_entropy``.
    """
    from scipy.special import entr  # -a log a, 0 at a = 0

    x = check_spins(x, "x")
    if x.shape[0] < 1:
        raise ValueError("x holds no configuration (0 samples)")
    Js, names = _tensors(Js, names)
    check_couplings(Js[0], x.shape[1], x.shape[2], name="Js[0]")
    P, N = x.shape[:2]
    per_sample, per_site = np.empty((len(Js), P)), np.empty((len(Js), N))
    for k, J in enumerate(Js):
        H = np.empty((P, N))
        for start in range(0, P, CHUNK):
            alpha = attention(x[start : start + CHUNK], J, lam).astype(np.float64)
            H[start : start + CHUNK] = entr(alpha).sum(axis=2)
        per_sample[k], per_site[k] = H.mean(axis=1), H.mean(axis=0)
    mean, sem, _ = mean_sem(per_sample)
    return AttentionEntropy(
        mean=mean,
        sem=sem,
        site_entropy=per_site,
        max_entropy=float(np.log(N - 1)),
        lam=float(lam),
        n_samples=int(P),
        names=names,
    )


# --------------------------------------------------------------------------- objective
@dataclass(frozen=True)
class PseudolikelihoodValues(AnalysisResult):
    """The pseudo-likelihood objective L(J) = (1/P) sum_mu sum_i e_i(xi^mu; J) of K tensors.

    L falls without bound as |J| grows, so tensors of different norms are compared at one
    common Frobenius norm as well: J -> J c / |J|_F.

    Attributes
    ----------
    loss : ndarray of float64, shape (K,)
        L(J) at each tensor's own norm.
    loss_common : ndarray of float64, shape (K,)
        L(J c / |J|_F) at the common norm c (NaN for a zero tensor).
    norm : ndarray of float64, shape (K,)
        |J|_F.
    common_norm : float
        c.
    common : str
        How c was chosen: ``"mean"`` (the mean of the norms) or ``"given"``.
    loss_zero : float
        L(0) = -N log(N - 1) / lam: uniform attention, no couplings.
    lam : float
    score_clamp : float or None
        As in :func:`spinsa.pl_loss_and_grad`.
    n_patterns : int
    names : tuple of str, length K
    """

    _coords = {"K": "names"}

    _same_shape = ("loss loss_common norm",)
    loss: np.ndarray
    loss_common: np.ndarray
    norm: np.ndarray
    common_norm: float = float("nan")
    common: str = "mean"
    loss_zero: float = float("nan")
    lam: float = 1.0
    score_clamp: float | None = None
    n_patterns: int = 0
    names: tuple[str, ...] = ()

    def plot(self, ax=None):
        """The pseudo-likelihood loss of each tensor at the common norm, against L(0)."""
        ax = _draw.axes(ax)
        names = labels(self.names, self.loss.size)
        ax.bar(names, self.loss_common, color="C0", label=f"at |J| = {self.common_norm:.3g}")
        ax.axhline(self.loss_zero, color="0.3", ls="--", label="J = 0")
        _draw.finish(ax, f"pseudo-likelihood loss (λ = {self.lam:g})", "couplings", "L(J)")
        return ax


def pseudolikelihood_values(
    xi,
    Js: Sequence,
    lam: float,
    names: Sequence[str] | None = None,
    *,
    common_norm: float | None = None,
    score_clamp: float | None = None,
) -> PseudolikelihoodValues:
    """The objective each tensor reaches on the patterns ``xi`` (:func:`spinsa.pl_loss_and_grad`).

    Parameters
    ----------
    xi : ndarray, shape (P, N, d)
        Patterns, as the fit saw them (standardised first for a fit with ``standardize``).
    Js : sequence of ndarray, each of shape (N, N, d, d)
    lam : float
        λ of the objective (a fit's ``lam``, λ_train).
    names : sequence of str, length K, optional
    common_norm : float, optional
        The Frobenius norm every tensor is rescaled to for ``loss_common`` (default: the
        mean of their norms).
    score_clamp : float, optional
        As in :func:`spinsa.pl_loss_and_grad` (the published notebook's fit: 20).

    Returns
    -------
    PseudolikelihoodValues
    """
    Js, names = _tensors(Js, names)
    norms = np.array([np.linalg.norm(J.astype(np.float64)) for J in Js])
    given = common_norm is not None
    c = float(common_norm) if given else float(norms.mean())
    if not (np.isfinite(c) and c >= 0):
        raise ValueError(f"common_norm must be a finite number >= 0, got {common_norm!r}")
    loss = np.array([pl_loss_and_grad(xi, J, lam, score_clamp)[0] for J in Js])
    common = np.full(len(Js), np.nan)
    for k, J in enumerate(Js):
        if norms[k] > 0:
            scaled = (J.astype(np.float64) * (c / norms[k])).astype(J.dtype)
            common[k] = pl_loss_and_grad(xi, scaled, lam, score_clamp)[0]
    N = Js[0].shape[0]
    return PseudolikelihoodValues(
        loss=loss,
        loss_common=common,
        norm=norms,
        common_norm=c,
        common="given" if given else "mean",
        loss_zero=float(-N * np.log(N - 1) / float(lam)),
        lam=float(lam),
        score_clamp=None if score_clamp is None else float(score_clamp),
        n_patterns=int(np.shape(xi)[0]),
        names=names,
    )


# --------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class TaskComparison(AnalysisResult):
    """K models on one task, from their stored evaluations (``/evaluation/<task>``).

    Attributes
    ----------
    times : ndarray of int64, shape (T + 1,)
        0 .. T for the longest run.
    mean_all, sem_all : ndarray of float64, shape (K, T + 1)
        Mean squared pixel error over the test images and its standard error (NaN past a
        shorter run's end).
    best_t : ndarray of int64, shape (K,)
        First minimum of the mean error (t >= 1 for the masked task).
    best_error, best_sem : ndarray of float64, shape (K,)
    references : tuple of str, length R
        Names of the references (:data:`spinsa.references.REFERENCES`).
    reference_error, reference_sem, reference_z : ndarray of float64, shape (K, R)
        Each reference's error on the model's test inputs, its standard error, and
        (reference - best) / combined standard error; NaN where a file lacks it.
    best_reference : tuple of str, length K
        The reference with the smallest error ("" without references).
    z : ndarray of float64, shape (K,)
        ``reference_z`` of the best reference: the gain over it.
    beats : ndarray of bool, shape (K,)
        z > ``significant_z``: a transient memory that simple predictors do not hold.
    lifetime_mean, lifetime_sem, lifetime_median : ndarray of float64, shape (K,)
        How long a trajectory's error stays below the best reference's error on the same
        image, around its minimum (t >= 1 for the masked task;
        :func:`~spinsa.analysis.summary.below_reference_lifetimes`).
    fraction_transient, fraction_censored : ndarray of float64, shape (K,)
        Fraction of images whose stretch below the reference ends within the run, and
        whose stretch lasts to the end (a lower bound).
    lifetime_bin_edges : ndarray of float64, shape (B + 1,)
    lifetime_counts : ndarray of int64, shape (K, B)
        Histograms of the lifetimes.
    coherence_mean, coherence_sem : ndarray of float64, shape (K,)
        Correlation of each final image with the mean final image (``final_coherence``).
    nearest_corr_mean, nearest_corr_sem : ndarray of float64, shape (K,)
        Correlation of each final image with its nearest training image.
    fraction_fixed_point, fraction_two_cycle, fraction_other : ndarray of float64, shape (K,)
        How the runs ended (``final_period`` 1, 2 and 0); NaN for files without it.
    final_mean_image : ndarray of float64, shape (K, H, W)
        Mean over the test images of the decoded state at t = T.
    paired_difference, paired_z : ndarray of float64, shape (K, K)
        Entry (a, b): the mean over images of (error of b at its best t - error of a at its
        best t), and that mean over its standard error; z > 3 means a is lower than b.
        Only for the same test images (``paired``), NaN otherwise and on the diagonal.
    n_images : ndarray of int64, shape (K,)
    task : str
    significant_z : float
    names : tuple of str, length K
    """

    _coords = {"K": "names", "T+1": "times"}

    _same_shape = (
        "mean_all sem_all",
        "reference_error reference_sem reference_z",
        "best_t best_error best_sem z beats lifetime_mean lifetime_sem lifetime_median "
        "fraction_transient fraction_censored coherence_mean coherence_sem nearest_corr_mean "
        "nearest_corr_sem fraction_fixed_point fraction_two_cycle fraction_other n_images",
        "paired_difference paired_z",
    )
    times: np.ndarray
    mean_all: np.ndarray
    sem_all: np.ndarray
    best_t: np.ndarray
    best_error: np.ndarray
    best_sem: np.ndarray
    reference_error: np.ndarray
    reference_sem: np.ndarray
    reference_z: np.ndarray
    z: np.ndarray
    beats: np.ndarray
    lifetime_mean: np.ndarray
    lifetime_sem: np.ndarray
    lifetime_median: np.ndarray
    fraction_transient: np.ndarray
    fraction_censored: np.ndarray
    lifetime_bin_edges: np.ndarray
    lifetime_counts: np.ndarray
    coherence_mean: np.ndarray
    coherence_sem: np.ndarray
    nearest_corr_mean: np.ndarray
    nearest_corr_sem: np.ndarray
    fraction_fixed_point: np.ndarray
    fraction_two_cycle: np.ndarray
    fraction_other: np.ndarray
    final_mean_image: np.ndarray
    paired_difference: np.ndarray
    paired_z: np.ndarray
    n_images: np.ndarray
    references: tuple[str, ...] = ()
    best_reference: tuple[str, ...] = ()
    task: str = "masked"
    significant_z: float = SIGNIFICANT_Z
    names: tuple[str, ...] = ()

    def plot(self, ax=None):
        """Mean error of each model against t, with standard-error bands; the best
        reference of each as a dotted level.
        """
        ax = _draw.axes(ax)
        names = labels(self.names, self.mean_all.shape[0])
        for k, name in enumerate(names):
            _draw.band(ax, self.times, self.mean_all[k], self.sem_all[k], name, f"C{k}")
            if self.best_reference and self.best_reference[k]:
                r = list(self.references).index(self.best_reference[k])
                ax.axhline(self.reference_error[k, r], color=f"C{k}", ls=":", lw=1.0)
        _draw.finish(ax, f"{self.task} task", ylabel="mean squared error (all pixels)")
        return ax


def _stat(arrays: Mapping[str, Any], key: str) -> tuple[float, float]:
    """Mean and standard error of a stored per-image array; NaN when the file lacks it."""
    if key not in arrays:
        return np.nan, np.nan
    m, s, _ = mean_sem(arrays[key])
    return float(m), float(s)


def _lifetime_columns(lifetimes: dict[int, Any], K: int) -> dict[str, np.ndarray]:
    """The lifetime fields of :class:`TaskComparison` from the models' ``Lifetimes`` (by
    model index; a model without references has none: NaN and an empty histogram)."""
    columns = ("lifetime_mean", "lifetime_sem", "lifetime_median")
    columns += ("fraction_transient", "fraction_censored")
    out = {c: np.full(K, np.nan) for c in columns}
    if not lifetimes:
        edges = np.array([-0.5, 0.5])
        return {**out, "lifetime_bin_edges": edges, "lifetime_counts": np.zeros((K, 1), int)}
    which = sorted(lifetimes)  # a row per model, its index as the "level"
    table = summarize_lifetimes([lifetimes[k] for k in which], np.asarray(which, dtype=float))
    for c in columns:
        out[c][which] = getattr(table, c)
    counts = np.zeros((K, table.counts.shape[1]), dtype=np.int64)
    counts[which] = table.counts
    return {**out, "lifetime_bin_edges": table.bin_edges, "lifetime_counts": counts}


def compare_tasks(
    task: str,
    evaluations: Sequence[Mapping[str, Any]],
    names: Sequence[str] | None = None,
    *,
    paired: bool = False,
) -> TaskComparison:
    """Tabulate K models' evaluations of one task: errors, references, transients, attractors.

    Parameters
    ----------
    task : {"masked", "denoise"}
    evaluations : sequence of dict, length K
        The arrays of each model's ``/evaluation/<task>``, as
        :func:`spinsa.io.results.read_evaluation` returns them (``times``,
        ``errors/{all,...}`` of shape (T + 1, P), ``mean``, ``sem``, ``references``,
        ``final_*``...).
    names : sequence of str, length K, optional
    paired : bool
        The evaluations ran on the same test images in the same order (same data and
        number of test images): adds ``paired_difference`` and ``paired_z``, the
        comparison image by image.

    Returns
    -------
    TaskComparison
    """
    check_choice(task, "task", TASKS)
    evaluations = list(evaluations)
    if not evaluations:
        raise ValueError("evaluations must hold at least one evaluation")
    names = _names(names, len(evaluations))
    K = len(evaluations)
    first = 1 if task == "masked" else 0  # the masked input at t = 0 is not a prediction
    summaries = [summarize_arrays(task, a) for a in evaluations]
    lengths = [int(a["mean"]["all"].shape[0]) for a in evaluations]
    curves = np.full((2, K, max(lengths)), np.nan)
    present = {n for a in evaluations for n in a.get("references", {})}
    refs = [n for n in REFERENCES[task] if n in present] + sorted(present - set(REFERENCES[task]))
    ref = np.full((3, K, len(refs)), np.nan)
    lifetimes, per_image, best_ref = {}, [], []
    attractors = np.full((7, K), np.nan)
    shape = np.shape(evaluations[0]["final_mean_image"])
    final_mean = np.full((K, *shape), np.nan)
    for k, (a, s) in enumerate(zip(evaluations, summaries, strict=True)):
        curves[0, k, : lengths[k]] = a["mean"]["all"]
        curves[1, k, : lengths[k]] = a["sem"]["all"]
        for r, name in enumerate(refs):
            if name in s["references"]:
                ref[:, k, r] = [s["references"][name][key] for key in ("error", "sem", "z")]
        best = s["best_reference"]
        best_ref.append(best or "")
        errors = np.asarray(a["errors"]["all"], dtype=np.float64)
        per_image.append(errors[s["best_t"]])
        if best is not None:  # below the best reference's error on the same image
            baseline = a["references"][best]["all"]
            lifetimes[k] = below_reference_lifetimes(errors, a["times"], baseline, first)
        periods = np.asarray(a.get("final_period", np.zeros(0)))
        fractions = [np.mean(periods == p) if periods.size else np.nan for p in (1, 2, 0)]
        attractors[:, k] = [
            *_stat(a, "final_coherence"),
            *_stat(a, "final_nearest_corr"),
            *fractions,
        ]
        if np.shape(a["final_mean_image"]) == shape:
            final_mean[k] = a["final_mean_image"]
    life = _lifetime_columns(lifetimes, K)
    best_error = np.array([s["best_error"] for s in summaries])
    z = np.array([ref[2, k, refs.index(b)] if b else np.nan for k, b in enumerate(best_ref)])
    difference, paired_z = np.full((K, K), np.nan), np.full((K, K), np.nan)
    if paired and len({e.shape for e in per_image}) == 1:
        for a_ in range(K):
            for b_ in range(K):
                if a_ != b_:
                    m, sem, _ = mean_sem(per_image[b_] - per_image[a_])
                    difference[a_, b_] = m
                    paired_z[a_, b_] = m / sem if sem > 0 else np.nan
    return TaskComparison(
        times=np.arange(max(lengths), dtype=np.int64),
        mean_all=curves[0],
        sem_all=curves[1],
        best_t=np.array([s["best_t"] for s in summaries], dtype=np.int64),
        best_error=best_error,
        best_sem=np.array([s["best_sem"] for s in summaries]),
        reference_error=ref[0],
        reference_sem=ref[1],
        reference_z=ref[2],
        z=z,
        beats=significant(z),
        **life,
        coherence_mean=attractors[0],
        coherence_sem=attractors[1],
        nearest_corr_mean=attractors[2],
        nearest_corr_sem=attractors[3],
        fraction_fixed_point=attractors[4],
        fraction_two_cycle=attractors[5],
        fraction_other=attractors[6],
        final_mean_image=final_mean,
        paired_difference=difference,
        paired_z=paired_z,
        n_images=np.array([len(p) for p in per_image], dtype=np.int64),
        references=tuple(refs),
        best_reference=tuple(best_ref),
        task=task,
        significant_z=SIGNIFICANT_Z,
        names=names,
    )
