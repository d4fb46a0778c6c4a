"""Linear stability of a fixed point of the synchronous dynamics.

The synchronous update is the map F(x)_i = Norm(y_i), y_i = h_i(x) + gamma x_i, with the
attention field h_i = sum_{j != i} alpha_ij v_ij, v_ij = J_ij x_j, alpha_ij the softmax over
j of lam s_ij, s_ij = x_i . v_ij (docs/model.md). Its Jacobian, block (i, k) of
dF_i / dx_k, is D_i dy_i / dx_k with

    dy_i/dx_k = alpha_ik J_ik + lam alpha_ik (v_ik - h_i) (J_ik^T x_i)^T           (k != i)
    dy_i/dx_i = lam (sum_j alpha_ij v_ij v_ij^T - h_i h_i^T) + gamma I

(the diagonal block is lam times the covariance of the v_ij under the attention), and D_i
the derivative of the normalisation at y_i:

- ``"sphere"``: (I - u u^T) / |y_i|, u = y_i / |y_i|;
- ``"layernorm"``: (C - z z^T / d) / sigma, C = I - 1 1^T / d, z = F(x)_i, sigma the
  standard deviation of y_i (with the eps of the update);
- ``"none"``: I.

A fixed point x* = F(x*) is linearly stable when every eigenvalue of the Jacobian lies
inside the unit circle: a small perturbation shrinks by about the spectral radius per
step. With ``norm="sphere"`` the spins live on a product of spheres, and the spectrum is
that of the Jacobian restricted to its tangent space (N (d - 1) eigenvalues): the radial
directions, which the normalisation removes, would only add N zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spinsa import _draw
from spinsa._checks import check_choice, check_lam_gamma, check_spins_couplings
from spinsa.analysis._results import AnalysisResult
from spinsa.analysis.attractors import default_tol
from spinsa.kernels.dynamics import LAYERNORM_EPS
from spinsa.model import NORMS

__all__ = ["FixedPointStability", "fixed_point_stability", "update_jacobian"]


def _one_state(x, J) -> tuple[np.ndarray, np.ndarray]:
    """One configuration (N, d) (or (1, N, d)) and J, validated, in float64."""
    x = np.asarray(x)
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 2:
        raise ValueError(
            f"x must be one configuration of shape (n_tokens, d) (or (1, n_tokens, d)), got "
            f"shape {x.shape}; take one state, e.g. report.states[0]"
        )
    x, J = check_spins_couplings(x[None].astype(np.float64), np.asarray(J, dtype=np.float64))
    return x[0], J


def _attention(x: np.ndarray, J: np.ndarray, lam: float):
    """The softmax of the update at x, computed once for both F(x) and its Jacobian: the
    values v_ij = J_ij x_j (N, N, d), the weights alpha_ij (N, N) (zero diagonal) and the
    fields h_i = sum_j alpha_ij v_ij (N, d)."""
    N = x.shape[0]
    v = np.einsum("ijab,jb->ija", J, x)  # v_ij = J_ij x_j
    s = lam * np.einsum("ia,ija->ij", x, v)
    s[np.diag_indices(N)] = -np.inf
    alpha = np.exp(s - s.max(axis=1, keepdims=True))
    alpha /= alpha.sum(axis=1, keepdims=True)
    return v, alpha, np.einsum("ij,ija->ia", alpha, v)


def _normalise(y: np.ndarray, norm: str):
    """Norm(y_i) of every row of y (N, d), as the update does, and its derivative D_i
    (N, d, d), None for ``"none"`` (the identity)."""
    d = y.shape[1]
    if norm == "sphere":
        r = np.linalg.norm(y, axis=1)
        u = y / np.where(r > 0, r, 1.0)[:, None]  # a zero spin stays zero
        D = (np.eye(d) - np.einsum("ia,ib->iab", u, u)) / np.where(r > 0, r, np.inf)[:, None, None]
        return u, D
    if norm == "layernorm":
        c = y - y.mean(axis=1, keepdims=True)
        sigma = np.sqrt((c * c).mean(axis=1) + LAYERNORM_EPS)
        z = c / sigma[:, None]
        C = np.eye(d) - np.full((d, d), 1.0 / d)
        return z, (C - np.einsum("ia,ib->iab", z, z) / d) / sigma[:, None, None]
    return y, None


def _linearise(
    x: np.ndarray, J: np.ndarray, lam: float, gamma: float, norm: str
) -> tuple[np.ndarray, np.ndarray]:
    """The update F(x) (N, d) and the (N, N, d, d) blocks dF_i/dx_k at x (float64 arrays,
    validated), from one softmax."""
    N, d = x.shape
    v, alpha, h = _attention(x, J, lam)
    w = np.einsum("ijab,ia->ijb", J, x)  # J_ij^T x_i = ds_ij / dx_j
    # outer products and matmuls, not 3-operand einsums (those loop over every index)
    weighted = alpha[:, :, None] * (v - h[:, None, :])
    dy = alpha[:, :, None, None] * J + lam * weighted[..., :, None] * w[..., None, :]
    second = np.einsum("ija,ijb->iab", alpha[:, :, None] * v, v) - h[:, :, None] * h[:, None, :]
    dy[np.arange(N), np.arange(N)] = lam * second + gamma * np.eye(d)
    F, D = _normalise(h + gamma * x, norm)
    return F, (dy if D is None else D[:, None] @ dy)


def update_jacobian(J, lam: float, x, *, gamma: float = 1.0, norm: str = "sphere") -> np.ndarray:
    """The Jacobian of the synchronous update map F at the configuration ``x`` (module
    docstring), analytic, in float64.

    Parameters
    ----------
    J : array_like, shape (N, N, d, d)
    lam : float
    x : array_like, shape (N, d)
        One configuration (any, not only a fixed point).
    gamma : float
    norm : {"sphere", "layernorm", "none"}
        As in :func:`spinsa.step`.

    Returns
    -------
    ndarray of float64, shape (N d, N d)
        M[i d + a, k d + b] = dF_i^a / dx_k^b.
    """
    x, J = _one_state(x, J)
    check_choice(norm, "norm", NORMS)
    lam, gamma = check_lam_gamma(lam, gamma, x[None], J)
    N, d = x.shape
    return _linearise(x, J, lam, gamma, norm)[1].transpose(0, 2, 1, 3).reshape(N * d, N * d)


def _tangent_bases(x: np.ndarray) -> np.ndarray:
    """(N, d, d - 1): orthonormal bases of the planes orthogonal to each x_i."""
    _, _, vt = np.linalg.svd(x[:, None, :])  # rows 1.. of vt span x_i's complement
    return vt[:, 1:, :].transpose(0, 2, 1)


@dataclass(frozen=True)
class FixedPointStability(AnalysisResult):
    """The linear stability of a fixed point of the synchronous dynamics (the arguments of
    :func:`fixed_point_stability` are kept as attributes).

    Attributes
    ----------
    eigenvalues : ndarray of complex128, shape (M,)
        Eigenvalues of the Jacobian of the update map at the fixed point, by decreasing
        modulus; M = N (d - 1) in the tangent space of the spheres (``tangent``), N d
        otherwise.
    spectral_radius : float
        The largest modulus: a small perturbation shrinks (grows) by about this factor per
        step.
    stable : bool
        ``spectral_radius < 1``: the fixed point attracts every small perturbation.
    residual : float
        max_i |F(x)_i - x_i|: how far ``x`` is from being a fixed point.
    tangent : bool
        Whether the spectrum is that of the tangent space (``norm="sphere"``).
    lam, gamma : float
    norm : str
    """

    eigenvalues: np.ndarray
    spectral_radius: float = float("nan")
    stable: bool = False
    residual: float = float("nan")
    tangent: bool = True
    lam: float = 1.0
    gamma: float = 1.0
    norm: str = "sphere"

    def plot(self, ax=None):
        """The eigenvalues in the complex plane, with the unit circle (the stability edge)."""
        ax = _draw.axes(ax, figsize=(4.2, 4.0))
        phi = np.linspace(0.0, 2 * np.pi, 400)
        ax.plot(np.cos(phi), np.sin(phi), color="0.5", lw=0.8, ls="--")  # the stability edge
        ax.scatter(self.eigenvalues.real, self.eigenvalues.imag, s=10, color="C0", zorder=3)
        ax.set_aspect("equal", adjustable="datalim")
        verdict = "stable" if self.stable else "not stable"
        title = f"{verdict}: spectral radius {self.spectral_radius:.4g}"
        _draw.finish(ax, title, "Re μ", "Im μ")
        return ax


def fixed_point_stability(
    J, lam: float, x, *, gamma: float = 1.0, norm: str = "sphere", tol: float | None = None
) -> FixedPointStability:
    """Linear stability of the fixed point ``x`` of the synchronous dynamics: the spectrum
    of the Jacobian of the update map there (:func:`update_jacobian`), in the tangent space
    of the spheres for ``norm="sphere"``.

    Parameters
    ----------
    J : array_like, shape (N, N, d, d)
    lam : float
    x : array_like, shape (N, d)
        The fixed point, e.g. one of ``find_attractors(...).states`` (converged with
        ``until_converged=True``).
    gamma : float
    norm : {"sphere", "layernorm", "none"}
        As in :func:`spinsa.step`.
    tol : float, optional
        Largest accepted residual max_i |F(x)_i - x_i|; default 10 times
        :func:`~spinsa.analysis.default_tol` of ``x``'s dtype (1.2e-4 in float32, 2.2e-13
        in float64). ``np.inf`` accepts any configuration (the spectrum then describes the
        map there, not the stability of a fixed point).

    Returns
    -------
    FixedPointStability

    Notes
    -----
    The cost is that of a dense non-symmetric eigenvalue problem of size N (d - 1): on the
    tutorial's couplings (N = 49, d = 32, 1519 eigenvalues) 30 to 75 s on 2 shared cores
    under a load of 13, almost all of it in ``numpy.linalg.eigvals``.
    """
    x_in = np.asarray(x)
    x, J64 = _one_state(x, J)
    check_choice(norm, "norm", NORMS)
    lam, gamma = check_lam_gamma(lam, gamma, x[None], J64)
    if tol is None:  # the step-size floor of a converged run in x's dtype, with a margin
        tol = 10 * default_tol(np.float64 if x_in.dtype == np.float64 else np.float32)
    tol = float(tol)
    F, blocks = _linearise(x, J64, lam, gamma, norm)
    residual = float(np.abs(F - x).max())
    if not residual <= tol:
        raise ValueError(
            f"x is not a fixed point: max_i |F(x)_i - x_i| = {residual:.3g} > tol = {tol:.3g}; "
            "run the dynamics to convergence first (find_attractors(..., until_converged=True)), "
            "or pass tol=np.inf for the spectrum of the map at any configuration"
        )
    N, d = x.shape
    tangent = norm == "sphere"
    if tangent:  # B_i^T (dF_i/dx_k) B_k on the planes orthogonal to the spins
        B = _tangent_bases(x)
        blocks = B.transpose(0, 2, 1)[:, None] @ blocks @ B[None]
        d = d - 1
    M = blocks.transpose(0, 2, 1, 3).reshape(N * d, N * d)
    mu = np.linalg.eigvals(M).astype(np.complex128)
    mu = mu[np.argsort(-np.abs(mu), kind="stable")]
    radius = float(np.abs(mu[0])) if mu.size else 0.0
    return FixedPointStability(
        mu, spectral_radius=radius, stable=bool(radius < 1.0), residual=residual,
        tangent=tangent, lam=lam, gamma=gamma, norm=norm,
    )  # fmt: skip
