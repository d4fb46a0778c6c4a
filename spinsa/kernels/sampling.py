"""Monte Carlo kernels: per-chain generators, the vMF sampler, heat-bath and Metropolis sweeps
(docs/sampling.md).

Random numbers. Every chain (or every resampled sample) owns a xoshiro256** generator whose
whole state is a row of four uint64 in an array ``states`` (n_chains, 4). A kernel advances
each row in place, so results do not depend on how numba spreads chains over threads, and a
chain stored with its row resumes exactly where it stopped. Rows are seeded from
``numpy.random.SeedSequence.spawn`` by :mod:`spinsa.sampling`; they must not be all zero.

The vMF sampler is Wood's (1994) rejection scheme for w = x . mu (density proportional to
e^{kappa w} (1 - w^2)^{(d-3)/2} on [-1, 1]) written in terms of 1 - w, so that kappa up to
1e300 keeps full precision; d = 3 inverts the cdf of w in closed form, d = 1 draws the sign
(P(+mu) = e^kappa / (2 cosh kappa)). kappa = 0 is the uniform law with any mu.

Site updates, for one chain ``x`` (N, d) and site i:

- attention model at beta = lam: the conditional e^{-lam e_i} is a mixture over j != i of
  vMF(h_ij / |h_ij|, lam |h_ij|), h_ij = J_ij x_j, with weights proportional to
  Z_d(lam |h_ij|) (a zero h_ij is the uniform component, weight |S^{d-1}| = Z_d(0));
- two-body model: x_i ~ vMF(h_i / |h_i|, beta |h_i|), h_i = sum_{j != i} J_ij x_j.
"""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange
from spinsa.kernels.vmf import log_partition

ATTENTION, TWOBODY = 0, 1
RANDOM, SYSTEMATIC = 0, 1

_TWO53 = 1.0 / 9007199254740992.0
_U5, _U7, _U9 = np.uint64(5), np.uint64(7), np.uint64(9)
_U11, _U17, _U45, _U64 = np.uint64(11), np.uint64(17), np.uint64(45), np.uint64(64)
_ONE = np.uint64(1)
# when the dropped term carries more than this share of a row's normaliser, the row's
# log-sum-exp is recomputed rather than updated by subtraction (Metropolis)
_CANCEL = 1e-6


# ------------------------------------------------------------------ generators
@njit(inline="always")
def _rotl(v, k):
    return (v << k) | (v >> (_U64 - k))


@njit
def next_u64(s):
    """xoshiro256**: the next 64-bit output of state row ``s`` (4,) uint64, advanced in place."""
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    result = _rotl(s1 * _U5, _U7) * _U9
    t = s1 << _U17
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, _U45)
    s[0], s[1], s[2], s[3] = s0, s1, s2, s3
    return result


@njit
def uniform(s):
    """A double in (0, 1]: 53 random bits, never 0 (so its log is finite)."""
    return float((next_u64(s) >> _U11) + _ONE) * _TWO53


@njit
def normal(s):
    """A standard normal (Box-Muller, one of the pair)."""
    return math.sqrt(-2.0 * math.log(uniform(s))) * math.cos(2.0 * math.pi * uniform(s))


@njit
def gamma_variate(a, s):
    """Gamma(a, 1) for a >= 1 (Marsaglia and Tsang's squeeze)."""
    dd = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * dd)
    while True:
        z = normal(s)
        v = 1.0 + c * z
        if v <= 0.0:
            continue
        v = v * v * v
        u = uniform(s)
        if math.log(u) < 0.5 * z * z + dd - dd * v + dd * math.log(v):
            return dd * v


@njit
def _symmetric_beta(a, s):
    """Beta(a, a) for a = 1/2 (closed form) or a >= 1 (two gammas)."""
    if a == 0.5:  # arcsine law: sin^2 of a uniform angle
        r = math.sin(0.5 * math.pi * uniform(s))
        return r * r
    g1 = gamma_variate(a, s)
    g2 = gamma_variate(a, s)
    return g1 / (g1 + g2)


# ------------------------------------------------------------------ von Mises-Fisher
@njit
def _one_minus_w(kappa, d, s):
    """1 - w, w = x . mu for x ~ vMF(mu, kappa) on S^{d-1}, d >= 2 (in [0, 2])."""
    if d == 3:  # closed-form inverse cdf: w = 1 + log(u + (1 - u) e^{-2 kappa}) / kappa
        u = uniform(s)
        if kappa == 0.0:
            return 2.0 * (1.0 - u)
        return -math.log1p((1.0 - u) * math.expm1(-2.0 * kappa)) / kappa
    m = d - 1.0
    b = m / (2.0 * kappa + math.sqrt(4.0 * kappa * kappa + m * m))
    x0 = (1.0 - b) / (1.0 + b)
    one_minus_x0 = 2.0 * b / (1.0 + b)
    log_1_x0sq = math.log(4.0 * b) - 2.0 * math.log1p(b)
    while True:
        z = _symmetric_beta(0.5 * m, s)
        den = 1.0 - (1.0 - b) * z
        omw = 2.0 * b * z / den
        # log acceptance: kappa (w - x0) + m (log(1 - x0 w) - log(1 - x0^2))
        t = kappa * (one_minus_x0 - omw)
        t += m * (math.log(one_minus_x0 + x0 * omw) - log_1_x0sq)
        if t >= math.log(uniform(s)):
            return omw


@njit
def sample_vmf(mu, kappa, s, out):
    """out (d,) <- a draw of vMF(mu, kappa); ``mu`` (d,) a unit vector (any if kappa = 0)."""
    d = mu.shape[0]
    if d == 1:
        # P(x = +mu) = e^kappa / (2 cosh kappa) = 1 / (1 + e^{-2 kappa})
        sign = 1.0 if uniform(s) * (1.0 + math.exp(-2.0 * kappa)) <= 1.0 else -1.0
        out[0] = sign * mu[0]
        return
    omw = _one_minus_w(kappa, float(d), s)
    w = 1.0 - omw
    r = math.sqrt(max(omw * (2.0 - omw), 0.0))
    # a uniform direction orthogonal to mu: a Gaussian vector, mu's component removed
    while True:
        proj = 0.0
        for a in range(d):
            out[a] = normal(s)
            proj += out[a] * mu[a]
        n2 = 0.0
        for a in range(d):
            out[a] -= proj * mu[a]
            n2 += out[a] * out[a]
        if n2 > 1e-300:
            break
    inv = r / math.sqrt(n2)
    for a in range(d):
        out[a] = w * mu[a] + inv * out[a]


@njit
def sample_vmf_many(mu, kappa, states, out):
    """Row n of out (M, d) <- vMF(mu[n], kappa[n]) with generator states[n]."""
    for n in prange(mu.shape[0]):
        sample_vmf(mu[n], kappa[n], states[n], out[n])


# ------------------------------------------------------------------ heat-bath site updates
@njit(inline="always")
def _block_times(J, i, j, x, mu):
    """mu <- J_ij x_j; returns |J_ij x_j|."""
    d = x.shape[1]
    r2 = 0.0
    for a in range(d):
        acc = 0.0
        for b in range(d):
            acc += J[i, j, a, b] * x[j, b]
        mu[a] = acc
        r2 += acc * acc
    return math.sqrt(r2)


@njit
def _draw_along(mu, r, kappa_scale, s, x, i, tmp):
    """x[i] <- vMF(mu / r, kappa_scale r) (uniform where r = 0)."""
    d = mu.shape[0]
    if r > 0.0:
        for a in range(d):
            mu[a] /= r
    else:
        for a in range(d):
            mu[a] = 0.0
        mu[0] = 1.0
    sample_vmf(mu, kappa_scale * r, s, tmp)
    for a in range(d):
        x[i, a] = tmp[a]


@njit
def attention_site(x, J, lam, i, s, logw, mu, tmp):
    """Heat-bath update of site i of one chain x (N, d) under e^{-lam e_i}.

    Scratch: logw (N,), mu (d,), tmp (d,).
    """
    N, d = x.shape
    dd = float(d)
    top = -np.inf
    for j in range(N):
        if j == i:
            logw[j] = -np.inf
            continue
        r = _block_times(J, i, j, x, mu)
        logw[j] = log_partition(lam * r, dd)
        top = max(top, logw[j])
    total = 0.0
    for j in range(N):
        logw[j] = math.exp(logw[j] - top)  # now a weight in [0, 1]
        total += logw[j]
    target = uniform(s) * total
    pick = -1
    acc = 0.0
    for j in range(N):
        if logw[j] > 0.0:
            pick = j
            acc += logw[j]
            if acc >= target:
                break
    r = _block_times(J, i, pick, x, mu)
    _draw_along(mu, r, lam, s, x, i, tmp)


@njit
def twobody_site(x, J, beta, i, s, mu, tmp):
    """Heat-bath update of site i of one chain x (N, d): x_i ~ vMF(h_i/|h_i|, beta |h_i|)."""
    N, d = x.shape
    for a in range(d):
        mu[a] = 0.0
    for j in range(N):
        if j == i:
            continue
        for a in range(d):
            acc = 0.0
            for b in range(d):
                acc += J[i, j, a, b] * x[j, b]
            mu[a] += acc
    r2 = 0.0
    for a in range(d):
        r2 += mu[a] * mu[a]
    _draw_along(mu, math.sqrt(r2), beta, s, x, i, tmp)


@njit(parallel=True)
def resample_sites(X, J, lam, model, sites, states):
    """X[p, sites[p]] <- a draw from its conditional, for every sample p of X (P, N, d)."""
    P, N, d = X.shape
    for p in prange(P):
        mu = np.empty(d)
        tmp = np.empty(d)
        if model == ATTENTION:
            logw = np.empty(N)
            attention_site(X[p], J, lam, sites[p], states[p], logw, mu, tmp)
        else:
            twobody_site(X[p], J, lam, sites[p], states[p], mu, tmp)


@njit(parallel=True)
def gibbs_sweeps(X, J, beta, model, scan, n_sweeps, states):
    """``n_sweeps`` heat-bath sweeps (N site updates each) of every chain of X (C, N, d).

    ``scan``: RANDOM (each update picks a uniform site) or SYSTEMATIC (sites 0 .. N-1).
    """
    C, N, d = X.shape
    for c in prange(C):
        s = states[c]
        x = X[c]
        mu = np.empty(d)
        tmp = np.empty(d)
        logw = np.empty(N)
        for _ in range(n_sweeps):
            for k in range(N):
                i = k
                if scan == RANDOM:
                    i = min(int(uniform(s) * N), N - 1)
                if model == ATTENTION:
                    attention_site(x, J, beta, i, s, logw, mu, tmp)
                else:
                    twobody_site(x, J, beta, i, s, mu, tmp)
