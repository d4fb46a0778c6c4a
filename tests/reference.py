"""Plain-numpy float64 references of the model and objective (docs/model.md), for clarity.

They materialise (P, N, N) scores and are meant for the small systems of the tests.
"""

import numpy as np


def scores(x, J):
    """s[p, i, j] = x_i . J_ij x_j (the diagonal is meaningless and masked by the callers)."""
    return np.einsum("pia,ijab,pjb->pij", x, J, x)


def _masked_scaled(x, J, lam):
    N = x.shape[1]
    s = lam * scores(x, J)
    s[:, np.arange(N), np.arange(N)] = -np.inf
    return s


def attention(x, J, lam):
    s = _masked_scaled(x, J, lam)
    s -= s.max(axis=2, keepdims=True)
    w = np.exp(s)
    return w / w.sum(axis=2, keepdims=True)


def site_energies(x, J, lam):
    s = _masked_scaled(x, J, lam)
    m = s.max(axis=2)
    return -(m + np.log(np.exp(s - m[..., None]).sum(axis=2))) / lam


def local_fields(x, J, lam):
    return np.einsum("pij,ijab,pjb->pia", attention(x, J, lam), J, x)


def normalize(y, norm):
    if norm == "sphere":
        n = np.linalg.norm(y, axis=-1, keepdims=True)
        return np.divide(y, n, out=np.zeros_like(y), where=n > 0)
    if norm == "layernorm":
        mu = y.mean(axis=-1, keepdims=True)
        var = y.var(axis=-1, keepdims=True)
        return (y - mu) / np.sqrt(var + 1e-5)
    return y


def step(x, J, lam, gamma=1.0, norm="sphere"):
    return normalize(local_fields(x, J, lam) + gamma * x, norm)


def pl_loss_and_grad(xi, J, lam):
    """L = (1/P) sum_mu sum_i e_i(xi^mu);  dL/dJ_ij = -(1/P) sum_mu alpha_ij xi_i xi_j^T."""
    P, N, _ = xi.shape
    loss = site_energies(xi, J, lam).sum() / P
    grad = -np.einsum("pij,pia,pjb->ijab", attention(xi, J, lam), xi, xi) / P
    grad[np.arange(N), np.arange(N)] = 0.0
    return loss, grad


def random_system(rng, P=3, N=5, d=4, scale=1.0, unit=True, dtype=np.float64):
    """Random spins (unit vectors if ``unit``) and couplings with zero diagonal blocks."""
    x = rng.standard_normal((P, N, d))
    if unit:
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
    J = scale * rng.standard_normal((N, N, d, d)) / np.sqrt(d)
    J[np.arange(N), np.arange(N)] = 0.0
    return x.astype(dtype), J.astype(dtype)
