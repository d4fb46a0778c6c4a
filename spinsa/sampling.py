"""Monte Carlo sampling of the attention model and the two-body model at a temperature
(docs/sampling.md).

- :func:`sample_vmf`: von Mises-Fisher draws on S^{d-1} (d = 1 is the Ising case);
- :func:`site_resample`: redraw one chosen site per sample from its conditional;

Every function takes ``rng``: None, an int seed, a ``numpy.random.SeedSequence`` or a
``numpy.random.Generator``. It is turned into one xoshiro256** state per chain or sample
(:func:`generator_states`), so that results do not depend on the number of threads.
"""

from __future__ import annotations

import numpy as np

from spinsa._checks import check_choice, check_couplings, check_finite, check_positive, check_spins
from spinsa.kernels import sampling as _k

__all__ = ["MODELS", "generator_states", "sample_vmf", "site_resample"]

MODELS = {"attention": _k.ATTENTION, "twobody": _k.TWOBODY}


def generator_states(rng, n: int) -> np.ndarray:
    """``n`` independent xoshiro256** states, shape (n, 4) uint64, from ``rng``.

    The rows are 4 n words of one ``SeedSequence``'s ``generate_state`` (a hash of the seed,
    so neighbouring rows are unrelated); a ``Generator`` contributes 128 bits of entropy,
    drawn from it. An all-zero row (probability 2^-256) is refused.
    """
    if isinstance(rng, np.random.Generator):
        seq = np.random.SeedSequence(rng.integers(0, 2**63, size=2).tolist())
    elif isinstance(rng, np.random.SeedSequence):
        seq = rng
    elif rng is None or isinstance(rng, (int, np.integer)):
        seq = np.random.SeedSequence(None if rng is None else int(rng))
    else:
        raise ValueError(
            "rng must be None, an int seed, a numpy SeedSequence or a numpy Generator, "
            f"got {type(rng).__name__}"
        )
    states = seq.generate_state(4 * int(n), np.uint64).reshape(int(n), 4)
    if np.any(np.all(states == 0, axis=1)):  # pragma: no cover - probability 2^-256
        raise RuntimeError("an all-zero generator state was drawn; use another seed")
    return states


def sample_vmf(mu, kappa, rng=None) -> np.ndarray:
    """Draws from von Mises-Fisher laws on S^{d-1}, density e^{kappa mu . x} / Z_d(kappa).

    Parameters
    ----------
    mu : array_like, shape (M, d)
        Mean directions (normalised here; any direction where kappa = 0).
    kappa : array_like, shape (M,) or scalar
        Concentrations >= 0; 0 is the uniform law. d = 1: x = +-mu with
        P(+mu) = e^kappa / (2 cosh kappa).
    rng : None, int, SeedSequence or Generator

    Returns
    -------
    ndarray of float64, shape (M, d)
        Unit vectors; E[x . mu] = A_d(kappa) (:func:`spinsa.vmf.mean_resultant_length`).
    """
    mu = np.array(mu, dtype=np.float64, ndmin=2)
    if mu.ndim != 2 or mu.shape[1] < 1:
        raise ValueError(f"mu must have shape (n_draws, d), got shape {mu.shape}")
    check_finite(mu, "mu")
    kappa = np.broadcast_to(np.asarray(kappa, dtype=np.float64), mu.shape[:1]).copy()
    check_finite(kappa, "kappa")
    if np.any(kappa < 0):
        raise ValueError("kappa must be >= 0 (a concentration)")
    norms = np.linalg.norm(mu, axis=1)
    if np.any((norms == 0) & (kappa > 0)):
        raise ValueError("mu has a zero row where kappa > 0: a mean direction needs a length")
    unit = np.zeros_like(mu)
    unit[:, 0] = 1.0  # any direction serves the uniform law
    nz = norms > 0
    unit[nz] = mu[nz] / norms[nz, None]
    out = np.empty_like(unit)
    _k.sample_vmf_many(unit, kappa, generator_states(rng, mu.shape[0]), out)
    return out


def _check_model_inputs(x, J, lam, model, lam_name="lam"):
    model = check_choice(model, "model", tuple(MODELS))
    x = check_spins(x)
    J = check_couplings(J, x.shape[1], x.shape[2])
    lam = check_positive(lam, lam_name)
    return x, J, lam, model


def site_resample(x, J, lam, sites, rng=None, model="attention") -> np.ndarray:
    """A copy of ``x`` in which spin ``sites[p]`` of each sample p is redrawn from its
    conditional law given the other spins of that sample.

    - ``model="attention"``: the density of x_i proportional to e^{-lam e_i(x)}, a mixture
      over j != i of vMF(h_ij / |h_ij|, lam |h_ij|) with weights Z_d(lam |h_ij|),
      h_ij = J_ij x_j (a zero h_ij is the uniform component); beta = lam.
    - ``model="twobody"``: vMF(h_i / |h_i|, lam |h_i|), h_i = sum_{j != i} J_ij x_j, with
      ``lam`` read as the inverse temperature beta.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Spins; only the redrawn site must be a unit vector afterwards (the others are used
        as they are).
    J : array_like, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    lam : float
        lam > 0 (beta for the two-body model).
    sites : array_like of int, shape (P,)
        The site to redraw in each sample, 0 <= sites[p] < N.
    rng : None, int, SeedSequence or Generator
        One generator state per sample is drawn from it.
    model : {"attention", "twobody"}

    Returns
    -------
    ndarray, shape (P, N, d), the dtype of ``x``
    """
    x, J, lam, model = _check_model_inputs(x, J, lam, model)
    P, N, _ = x.shape
    sites = np.asarray(sites)
    if sites.shape != (P,) or not np.issubdtype(sites.dtype, np.integer):
        raise ValueError(f"sites must be integers of shape ({P},) (one per sample), got "
                         f"{sites.dtype} of shape {sites.shape}")
    if np.any((sites < 0) | (sites >= N)):
        raise ValueError(f"sites must lie in [0, {N}), got min {sites.min()}, max {sites.max()}")
    X = np.array(x, dtype=np.float64)
    _k.resample_sites(X, J, lam, MODELS[model], sites.astype(np.int64), generator_states(rng, P))
    return X.astype(x.dtype, copy=False)
