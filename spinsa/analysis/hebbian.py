"""Comparing couplings with the Hebb rule: per-pair similarity, geometry, spectra.

The Hebbian couplings of P patterns are J^Hebb_ij = (1/P) sum_mu xi^mu_i (xi^mu_j)^T
(:func:`spinsa.hebbian_couplings`). To compare them with fitted couplings J on an equal
footing they are rescaled to the same Frobenius norm (globally, or row by row). The
comparisons:

- per pair of tokens, the cosine similarity of the d x d blocks,
  cos_ij = <J_ij, K_ij>_F / (|J_ij|_F |K_ij|_F), and the global cosine <J, K>_F / (|J| |K|);
- the coupling strength |J_ij|_F as a function of the distance between patches i and j;
- spectra of the (N d) x (N d) matrix M[(i, a), (j, b)] = J[i, j, a, b] (eigenvalues,
  singular values, eigenvalues of its symmetric part) and the singular values of each block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spinsa import _draw
from spinsa._checks import check_choice, check_count, check_couplings, check_finite, check_spins
from spinsa.analysis._results import AnalysisResult, bin_edges
from spinsa.couplings import hebbian_couplings, row_norms
from spinsa.tasks import mean_sem

__all__ = [
    "CouplingSpectrum",
    "HebbianComparison",
    "StrengthDistance",
    "StrengthMaps",
    "compare_with_hebbian",
    "comparison_of",
    "coupling_cosine",
    "coupling_matrix",
    "coupling_spectrum",
    "matched_hebbian",
    "pair_cosines",
    "pair_strengths",
    "strength_maps",
    "strength_vs_distance",
]

MATCHES = ("global", "rows")


def matched_hebbian(xi, J, match: str = "global") -> np.ndarray:
    """Hebbian couplings of the patterns ``xi``, rescaled to the norm of ``J``.

    Parameters
    ----------
    xi : ndarray, shape (P, N, d)
    J : ndarray, shape (N, N, d, d)
        The couplings to match.
    match : {"global", "rows"}
        ``"global"``: same Frobenius norm |K| = |J|; ``"rows"``: same norm of every row,
        |K_i.| = |J_i.| (a row of zero norm in either stays zero).

    Returns
    -------
    ndarray, shape (N, N, d, d)
        In the dtype of ``J``.
    """
    xi = check_spins(xi, "xi")
    J = check_couplings(J, xi.shape[1], xi.shape[2], name="J")
    check_choice(match, "match", MATCHES)
    K = np.asarray(hebbian_couplings(xi), dtype=J.dtype)
    if match == "global":
        if not np.any(K):
            raise ValueError("the Hebbian couplings of xi are zero: there is no norm to match")
        scale = _norm(J) / _norm(K)
        return (K * scale).astype(J.dtype)
    rows_J, rows_K = row_norms(J), row_norms(K)
    scale = np.divide(rows_J, rows_K, out=np.zeros_like(rows_J), where=rows_K > 0)
    return (K * scale[:, None, None, None]).astype(J.dtype)


def _norm(A) -> float:
    """|A|_F in float64, without overflow for any finite A."""
    A = np.asarray(A, dtype=np.float64)
    top = float(np.abs(A).max(initial=0.0))
    return top * float(np.linalg.norm(A / top)) if top > 0 else 0.0


def _check_pair(J, K) -> tuple[np.ndarray, np.ndarray]:
    J = check_couplings(J, name="J", dtype=np.float64)
    K = check_couplings(K, J.shape[0], J.shape[2], name="K", dtype=np.float64)
    return J, K


def pair_strengths(J) -> np.ndarray:
    """|J_ij|_F, the Frobenius norm of every d x d block: J (N, N, d, d) -> (N, N) float64
    (zero on the diagonal)."""
    J = check_couplings(J, dtype=np.float64)
    return np.sqrt((J**2).sum(axis=(2, 3)))


def _scaled(A: np.ndarray, axis=None) -> np.ndarray:
    """A divided by its largest |entry| (over ``axis``; zeros stay zero): cosines do not
    change, and the squares in the norms can neither overflow nor, at the scale of the
    largest entry, underflow."""
    top = np.abs(A).max(axis=axis, keepdims=True, initial=0.0)
    return A / np.where(top > 0, top, 1.0)


def pair_cosines(J, K) -> np.ndarray:
    """<J_ij, K_ij>_F / (|J_ij|_F |K_ij|_F) for every pair of tokens: J, K (N, N, d, d) ->
    (N, N) float64, NaN on the diagonal and where a block is zero.

    Computed in float64 on every block divided by its largest entry, so couplings of any
    finite scale (float32 J at 1e30, float64 J at 1e300) give the same cosines.
    """
    J, K = _check_pair(J, K)
    J, K = _scaled(J, axis=(2, 3)), _scaled(K, axis=(2, 3))
    num = np.einsum("ijab,ijab->ij", J, K)
    den = np.sqrt((J**2).sum(axis=(2, 3)) * (K**2).sum(axis=(2, 3)))
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    np.fill_diagonal(out, np.nan)
    return np.clip(out, -1.0, 1.0)


def coupling_cosine(J, K) -> float:
    """Global cosine <J, K>_F / (|J|_F |K|_F) of J, K (N, N, d, d); NaN if either is zero.

    Computed in float64 on J and K divided by their largest entries (any finite scale)."""
    J, K = _check_pair(J, K)
    J, K = _scaled(J), _scaled(K)
    den = np.linalg.norm(J) * np.linalg.norm(K)
    return float(np.clip(np.vdot(J, K) / den, -1.0, 1.0)) if den > 0 else float("nan")


@dataclass(frozen=True)
class StrengthDistance(AnalysisResult):
    """Coupling strength |J_ij| against the distance between patches i and j.

    Attributes
    ----------
    distance, strength : ndarray of float64, shape (N (N - 1),)
        |r_i - r_j| and |J_ij|_F for every ordered pair i != j.
    bin_distance : ndarray of float64, shape (B,)
        Distance of each bin (its mean distance).
    mean, sem : ndarray of float64, shape (B,)
        Mean strength in each bin and its standard error (NaN with one pair).
    count : ndarray of int64, shape (B,)
        Pairs per bin.
    """

    _coords = {"B": "bin_distance"}

    _same_shape = ("distance strength", "bin_distance mean sem count")
    distance: np.ndarray
    strength: np.ndarray
    bin_distance: np.ndarray
    mean: np.ndarray
    sem: np.ndarray
    count: np.ndarray

    def plot(self, ax=None, *, label=None, color="C0"):
        """Mean strength |J_ij|_F in each distance bin, with standard errors.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        label, color
            Of the curve (to draw several on one axes).

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax)
        ax.errorbar(self.bin_distance, self.mean, np.nan_to_num(self.sem), color=color,
                    label=label, lw=1.2, marker="o", ms=2.5, capsize=0)  # fmt: skip
        _draw.finish(ax, "coupling strength vs distance", "distance", r"mean $|J_{ij}|_F$")
        return ax


def _distances(positions, N: int) -> np.ndarray:
    """|r_i - r_j| for positions of shape (N, D), or a callable that returns them (such as
    the bound method ``PatchEmbedding.token_positions``); (N, N) float64."""
    if callable(positions):  # emb.token_positions passed without calling it
        positions = positions()
    positions = np.asarray(positions, dtype=np.float64)
    if positions.ndim != 2 or positions.shape[0] != N:
        raise ValueError(
            f"positions must have shape (N, D) with N = {N}, got {positions.shape} (e.g. "
            "PatchEmbedding.token_positions(), or the method itself)"
        )
    check_finite(positions, "positions")
    return np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=-1)


def strength_vs_distance(J, positions, bins=None) -> StrengthDistance:
    """How the coupling strength |J_ij|_F decays with the distance between patches.

    Parameters
    ----------
    J : ndarray, shape (N, N, d, d)
    positions : ndarray, shape (N, D), or a callable returning one
        Position of every token: grid coordinates, ``emb.token_positions()`` (pixels), or
        the method ``emb.token_positions`` itself (distances do not depend on its anchor).
    bins : int or array_like, optional
        ``None`` (default): one bin per distinct distance (a grid has few); an int: that many
        equal-width bins; an array: bin edges (pairs outside the edges are left out).

    Returns
    -------
    StrengthDistance
        Every ordered pair's distance and strength, shape (N (N - 1),), and per bin the mean
        distance, mean strength, its standard error and the count, shape (B,).
    """
    S = pair_strengths(J)
    off = ~np.eye(S.shape[0], dtype=bool)
    dist, strength = _distances(positions, S.shape[0])[off], S[off]
    if bins is None:
        keys, which = np.unique(np.round(dist, 9), return_inverse=True)
        n_bins = keys.size
    else:
        edges = bin_edges(bins, dist.min(), dist.max())
        which = np.clip(np.searchsorted(edges, dist, side="right") - 1, 0, edges.size - 2)
        which[(dist < edges[0]) | (dist > edges[-1])] = -1
        n_bins = edges.size - 1
    order = np.argsort(which, kind="stable")  # pairs grouped by bin, in their own order
    split = np.searchsorted(which[order], np.arange(n_bins + 1))  # bin b: split[b]:split[b+1]

    def per_bin(values) -> np.ndarray:  # (B, 3): mean, sem, count
        return np.array([mean_sem(v) for v in np.split(values[order], split)[1:-1]]).reshape(-1, 3)

    mean, sem, count = per_bin(strength).T
    bin_distance = per_bin(dist)[:, 0]
    return StrengthDistance(dist, strength, bin_distance, mean, sem, count.astype(np.int64))


def coupling_matrix(J) -> np.ndarray:
    """The (N d, N d) matrix M[i d + a, j d + b] = J[i, j, a, b] of J (N, N, d, d)."""
    J = check_couplings(J)
    N, _, d, _ = J.shape
    return J.transpose(0, 2, 1, 3).reshape(N * d, N * d)


@dataclass(frozen=True)
class CouplingSpectrum(AnalysisResult):
    """Spectra of a set of couplings.

    Attributes
    ----------
    eigenvalues : ndarray of complex128, shape (N d,), or None
        Eigenvalues of M (J is not symmetric in general), by decreasing real part; None
        when not asked for (``coupling_spectrum(J, eigenvalues=False)``).
    singular_values : ndarray of float64, shape (N d,)
        Singular values of M, decreasing.
    symmetric_eigenvalues : ndarray of float64, shape (N d,)
        Eigenvalues of (M + M^T) / 2, decreasing.
    block_singular_values : ndarray of float64, shape (N, N, d), or None
        Singular values of every block J_ij, decreasing (zero on the diagonal); None when
        not asked for.
    """

    eigenvalues: np.ndarray | None
    singular_values: np.ndarray
    symmetric_eigenvalues: np.ndarray
    block_singular_values: np.ndarray | None

    def plot(self, ax=None):
        """Singular values of the (N d) x (N d) matrix by rank (log scale), and the
        eigenvalues of its symmetric part on a second axis when they are all positive.
        """
        ax = _draw.axes(ax)
        ranks = np.arange(1, self.singular_values.size + 1)
        ax.semilogy(ranks, np.maximum(self.singular_values, 1e-12), color="C0",
                    label="singular values")  # fmt: skip
        positive = self.symmetric_eigenvalues[self.symmetric_eigenvalues > 0]
        ax.semilogy(np.arange(1, positive.size + 1), positive, color="C1", ls="--",
                    label="positive eigenvalues of (M + M^T)/2")  # fmt: skip
        _draw.finish(ax, "spectrum of the couplings", "rank", "value")
        return ax


# M counts as symmetric when |M - M^T|_F <= this many epsilons of J's dtype times |M|_F
SYMMETRY_EPS = 16


def _matrix_spectra(M: np.ndarray, eigenvalues: bool, rtol: float) -> dict:
    """Singular values, eigenvalues of the symmetric part and (if asked) eigenvalues of the
    float64 matrix M (n, n), each sorted as :class:`CouplingSpectrum` says.

    A symmetric M (Hebbian couplings are) needs one symmetric eigendecomposition for all
    three: for M = S + A with S symmetric and A antisymmetric, Weyl's inequalities (singular
    values) and the Bauer-Fike theorem (eigenvalues, S normal) move each value by at most
    |A|_2 <= |A|_F, which ``rtol`` keeps at the rounding level of J's dtype. Otherwise the
    SVD, and the general eigenvalue problem (by far the slowest) only when asked for.

    BLAS runs on one thread here: these LAPACK reductions to tridiagonal or bidiagonal form
    are bound by memory, and next to other busy threads (numba's, other processes') a
    multi-threaded BLAS made them 5 to 20 times slower on a 2-core machine.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _matrix_spectra_here(M, eigenvalues, rtol)


def _matrix_spectra_here(M: np.ndarray, eigenvalues: bool, rtol: float) -> dict:
    S = (M + M.T) / 2
    sym = np.linalg.eigvalsh(S)[::-1].copy()
    out = {"symmetric_eigenvalues": sym}
    if np.linalg.norm(M - S) <= rtol * np.linalg.norm(M):
        out["singular_values"] = np.sort(np.abs(sym))[::-1].copy()
        if eigenvalues:
            out["eigenvalues"] = sym.astype(np.complex128)
        return out
    out["singular_values"] = np.linalg.svd(M, compute_uv=False)
    if eigenvalues:
        ev = np.linalg.eigvals(M)
        out["eigenvalues"] = ev[np.lexsort((-ev.imag, -ev.real))].astype(np.complex128)
    return out


def coupling_spectrum(J, *, eigenvalues: bool = True, blocks: bool = True) -> CouplingSpectrum:
    """Eigenvalues and singular values of J (N, N, d, d) seen as one (N d, N d) matrix M,
    and the singular values of its N^2 blocks J_ij.

    Computed in float64. The block singular values come from one batched LAPACK call over
    the stacked (N, N, d, d) array. A symmetric M (up to the rounding of J's dtype, as
    Hebbian couplings are) takes one symmetric eigendecomposition; otherwise the SVD of M
    and, when ``eigenvalues`` is true, the general eigenvalue problem, which costs more than
    everything else together (about 10 s at N d = 1568 on 2 cores).

    Parameters
    ----------
    J : ndarray, shape (N, N, d, d)
    eigenvalues : bool
        Compute the (complex) eigenvalues of M; ``False`` leaves them ``None``.
    blocks : bool
        Compute the singular values of every block; ``False`` leaves them ``None``.

    Returns
    -------
    CouplingSpectrum
    """
    J = check_couplings(J)
    eps = np.finfo(J.dtype).eps  # float32 or float64, as check_couplings returns it
    J64 = np.asarray(J, dtype=np.float64)
    spectra = _matrix_spectra(coupling_matrix(J64), bool(eigenvalues), SYMMETRY_EPS * eps)
    return CouplingSpectrum(
        eigenvalues=spectra.get("eigenvalues"),
        singular_values=spectra["singular_values"],
        symmetric_eigenvalues=spectra["symmetric_eigenvalues"],
        block_singular_values=np.linalg.svd(J64, compute_uv=False) if blocks else None,
    )


@dataclass(frozen=True)
class HebbianComparison(AnalysisResult):
    """Fitted couplings side by side with norm-matched Hebbian ones.

    Attributes
    ----------
    hebbian : ndarray, shape (N, N, d, d)
        The norm-matched Hebbian couplings K.
    pair_cosine : ndarray of float64, shape (N, N)
        cos(J_ij, K_ij): NaN on the diagonal (J_ii = 0 by definition; at N = 2 that is
        half the entries) and where a block of J or K is zero (a pair of tokens that a zero
        spin of every pattern leaves without Hebbian coupling), finite elsewhere.
    strength, strength_hebbian : ndarray of float64, shape (N, N)
        |J_ij|_F and |K_ij|_F.
    distance : ndarray of float64, shape (N, N), or None
        |r_i - r_j| when positions were given.
    singular_values, symmetric_eigenvalues : ndarray of float64, shape (N d,), or None
        As in :class:`CouplingSpectrum`; with the suffix ``_hebbian``, those of K. None
        when the comparison was made with ``spectra=False``.
    global_cosine : float
        <J, K>_F / (|J| |K|).
    mean_pair_cosine, median_pair_cosine : float
        Over the off-diagonal pairs where both blocks are non-zero.
    norm : float
        |J|_F (= |K|_F with ``match = "global"``).
    match : str
    n_patterns : int
    """

    _same_shape = ("pair_cosine strength strength_hebbian distance",)
    hebbian: np.ndarray
    pair_cosine: np.ndarray
    strength: np.ndarray
    strength_hebbian: np.ndarray
    distance: np.ndarray | None
    singular_values: np.ndarray | None
    singular_values_hebbian: np.ndarray | None
    symmetric_eigenvalues: np.ndarray | None
    symmetric_eigenvalues_hebbian: np.ndarray | None
    global_cosine: float = float("nan")
    mean_pair_cosine: float = float("nan")
    median_pair_cosine: float = float("nan")
    norm: float = 0.0
    match: str = "global"
    n_patterns: int = 0

    def plot(self, ax=None):
        """Histogram of the per-pair cosines cos(J_ij, K_ij), with their mean."""
        ax = _draw.axes(ax)
        cosine = self.pair_cosine[np.isfinite(self.pair_cosine)]
        ax.hist(cosine, bins=50, range=(-1, 1), color="C0")
        ax.axvline(self.mean_pair_cosine, color="C3", lw=1.2,
                   label=f"mean {self.mean_pair_cosine:.3f}")  # fmt: skip
        cosines = r"cosine of $J_{ij}$ and $K_{ij}$ (per pair of patches)"
        _draw.finish(ax, f"per-pair similarity (global {self.global_cosine:.3f})", cosines, "pairs")
        return ax


def compare_with_hebbian(
    J, xi, positions=None, match: str = "global", *, spectra: bool = True
) -> HebbianComparison:
    """Everything :mod:`spinsa.analysis.hebbian` measures, for J against Hebb(xi).

    Parameters
    ----------
    J : ndarray, shape (N, N, d, d)
        Couplings (fitted, random...).
    xi : ndarray, shape (P, N, d)
        The patterns whose Hebbian couplings J is compared with (the training set).
    positions : ndarray, shape (N, D), or a callable returning one, optional
        Token positions, for the distance matrix: ``emb.token_positions()`` or the method
        ``emb.token_positions`` itself.
    match : {"global", "rows"}
        How the Hebbian couplings are rescaled (:func:`matched_hebbian`).
    spectra : bool
        Compute the singular values and the eigenvalues of the symmetric part of both
        (N d, N d) matrices (:func:`coupling_spectrum`, without its complex eigenvalues and
        block singular values, which the comparison does not hold). They are most of the
        cost (a few seconds at N = 196, d = 8); ``False`` leaves those fields ``None``.

    Returns
    -------
    HebbianComparison
    """
    xi = check_spins(xi, "xi")
    J = check_couplings(J, xi.shape[1], xi.shape[2])
    if not np.any(J):
        raise ValueError(
            "J is all zeros: its cosines with the Hebbian couplings are undefined; "
            "compare fitted (non-zero) couplings"
        )
    distance = None if positions is None else _distances(positions, J.shape[0])
    K = matched_hebbian(xi, J, match)
    sJ = sK = None
    if spectra:
        sJ = coupling_spectrum(J, eigenvalues=False, blocks=False)
        sK = coupling_spectrum(K, eigenvalues=False, blocks=False)
    return comparison_of(J, K, sJ, sK, distance, match, int(xi.shape[0]))


def comparison_of(J, K, spectrum, spectrum_hebbian, distance, match, n_patterns):
    """The :class:`HebbianComparison` of J with the matched Hebbian K (N, N, d, d), given
    their :func:`coupling_spectrum` (or None for both, to leave the spectra out) and the
    (N, N) ``distance`` of the tokens (or None).

    The assembly step of :func:`compare_with_hebbian`, for callers that already hold K and
    both spectra (the analysis driver stores them too); inputs are not checked again.
    """
    cos = pair_cosines(J, K)
    valid = cos[np.isfinite(cos)]

    def field(spectrum, name):
        return None if spectrum is None else getattr(spectrum, name)

    return HebbianComparison(
        hebbian=K,
        pair_cosine=cos,
        strength=pair_strengths(J),
        strength_hebbian=pair_strengths(K),
        distance=distance,
        singular_values=field(spectrum, "singular_values"),
        singular_values_hebbian=field(spectrum_hebbian, "singular_values"),
        symmetric_eigenvalues=field(spectrum, "symmetric_eigenvalues"),
        symmetric_eigenvalues_hebbian=field(spectrum_hebbian, "symmetric_eigenvalues"),
        global_cosine=coupling_cosine(J, K),
        mean_pair_cosine=float(valid.mean()) if valid.size else float("nan"),
        median_pair_cosine=float(np.median(valid)) if valid.size else float("nan"),
        norm=_norm(J),
        match=match,
        n_patterns=int(n_patterns),
    )


@dataclass(frozen=True)
class StrengthMaps(AnalysisResult):
    """Coupling strength |J_ij|_F laid out on the grid of patches.

    Attributes
    ----------
    center : ndarray of float64, shape (gh, gw)
        |J_cj|_F at the grid position of j, for the central token c = ``center_token`` (row
        ``gh // 2``, column ``gw // 2``).
    offset : ndarray of float64, shape (2 gh - 1, 2 gw - 1)
        Mean of |J_ij|_F over the pairs with grid displacement (r_j - r_i, c_j - c_i); NaN
        at zero displacement.
    center_token : int
    """

    center: np.ndarray
    offset: np.ndarray
    center_token: int = 0

    def __post_init__(self):
        super().__post_init__()
        gh, gw = self.center.shape
        if self.offset.shape != (2 * gh - 1, 2 * gw - 1):
            raise ValueError(
                f"offset must have shape ({2 * gh - 1}, {2 * gw - 1}), got {self.offset.shape}"
            )

    def plot(self, ax=None, *, which: str = "center"):
        """A map of |J_ij|_F: around the central patch (x), or by displacement.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        which : {"center", "offset"}
            |J_cj| on the grid of j, or the mean |J_ij| by displacement r_j - r_i.

        Returns
        -------
        matplotlib.axes.Axes
        """
        check_choice(which, "which", ("center", "offset"))
        ax = _draw.axes(ax, figsize=(4.4, 3.6))
        gh, gw = self.center.shape
        if which == "center":
            data = self.center.astype(np.float64)
            c = divmod(self.center_token, gw)
            data[c] = np.nan  # J_cc = 0 by definition; keep it out of the colour scale
            im = ax.imshow(np.ma.masked_invalid(data), cmap="viridis", interpolation="nearest")
            ax.plot(c[1], c[0], "x", color="red", ms=6)
            ax.set(
                xlabel="patch column",
                ylabel="patch row",
                title=r"$|J_{cj}|$, c = central patch (x)",
            )
        else:
            extent = (-gw + 0.5, gw - 0.5, gh - 0.5, -gh + 0.5)
            im = ax.imshow(np.ma.masked_invalid(self.offset), cmap="viridis",
                           interpolation="nearest", extent=extent)  # fmt: skip
            ax.set(xlabel="column of j − column of i", ylabel="row of j − row of i",
                   title=r"mean $|J_{ij}|$ by displacement")  # fmt: skip
        ax.title.set_fontsize(10)
        ax.figure.colorbar(im, ax=ax, shrink=0.85, label=r"$|J_{ij}|_F$")
        return ax


def strength_maps(J, grid_shape: tuple[int, int]) -> StrengthMaps:
    """|J_ij|_F on the patch grid: around the central token, and averaged by displacement.

    Parameters
    ----------
    J : ndarray, shape (N, N, d, d)
    grid_shape : (int, int)
        (gh, gw) with gh * gw = N, tokens in row-major grid order
        (:attr:`spinsa.PatchEmbedding.grid_shape`).

    Returns
    -------
    StrengthMaps
    """
    S = pair_strengths(J)
    gh, gw = (check_count(g, "grid_shape[...]", 1) for g in grid_shape)
    if gh * gw != S.shape[0]:
        raise ValueError(f"grid_shape {grid_shape} does not hold the N = {S.shape[0]} tokens")
    c = (gh // 2) * gw + gw // 2
    r, q = np.divmod(np.arange(gh * gw), gw)
    dr = (r[None, :] - r[:, None]) + gh - 1
    dc = (q[None, :] - q[:, None]) + gw - 1
    off = ~np.eye(gh * gw, dtype=bool)
    shape = (2 * gh - 1, 2 * gw - 1)
    flat = np.ravel_multi_index((dr[off], dc[off]), shape)
    total = np.bincount(flat, weights=S[off], minlength=shape[0] * shape[1])
    count = np.bincount(flat, minlength=shape[0] * shape[1])
    offset = np.full(total.shape, np.nan)
    np.divide(total, count, out=offset, where=count > 0)
    return StrengthMaps(
        center=S[c].reshape(gh, gw), offset=offset.reshape(shape), center_token=int(c)
    )
