"""Monte Carlo kernels: per-chain generators, the vMF sampler, heat-bath and Metropolis sweeps
(docs/sampling.md).

Random numbers. Every chain (or every resampled sample) owns a xoshiro256** generator whose
whole state is a row of four uint64 in an array ``states`` (n_chains, 4). A kernel advances
each row in place, so results do not depend on how numba spreads chains over threads, and a
chain stored with its row resumes exactly where it stopped. Row k is seeded as the
generator's authors recommend (Blackman and Vigna, https://prng.di.unimi.it): the first four
outputs of SplitMix64 started at the 64-bit seed ``key + k`` (:func:`splitmix_states`), with
``key`` drawn from a ``numpy.random.SeedSequence`` by :mod:`spinsa.sampling`. Rows are never
all zero (SplitMix64's output function is a bijection and its four inputs differ).

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

from spinsa.kernels._math import exp_weight
from spinsa.kernels._numba import njit, prange
from spinsa.kernels.vmf import log_partition, log_partition_and_mean

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
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_U27, _U30, _U31 = np.uint64(27), np.uint64(30), np.uint64(31)


def splitmix_states(key: int, n: int) -> np.ndarray:
    """xoshiro256** states for ``n`` streams, shape (n, 4) uint64: row k holds the first four
    outputs of SplitMix64 seeded with ``key + k`` (mod 2^64).

    SplitMix64 (Steele, Lea and Flood 2014; the seeding Blackman and Vigna recommend for
    xoshiro): z <- z + 0x9E3779B97F4A7C15, output mix(z), with mix the bijection
    z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
    z ^= z >> 31. The 4 n inputs key + k + m * 0x9E37..., m = 1 .. 4, are distinct for
    n < 2^61, so no two words of the table are equal and at most one is zero. Plain numpy
    (uint64 arithmetic wraps).
    """
    z = np.uint64(int(key) % 2**64) + np.arange(int(n), dtype=np.uint64)
    out = np.empty((int(n), 4), np.uint64)
    for m in range(4):
        z += _GOLDEN
        w = (z ^ (z >> _U30)) * _MIX1
        w = (w ^ (w >> _U27)) * _MIX2
        out[:, m] = w ^ (w >> _U31)
    return out


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


# ------------------------------------------------------------------ tabulated log Z_d
TABLE_STEP = 1.0 / 64.0  # cubic Hermite on this grid: |error| < 1e-9 in log Z_d (tested)
TABLE_TOP = 64.0  # above this kappa, log Z_d is evaluated directly (Hankel: a few terms)


@njit
def logz_table(d, out):
    """out (n, 2) <- (log Z_d, A_d) at kappa = k TABLE_STEP, k = 0 .. n - 1."""
    for k in range(out.shape[0]):
        out[k, 0], out[k, 1] = log_partition_and_mean(k * TABLE_STEP, d)


@njit(inline="always")
def logz_lookup(kappa, d, table):
    """log Z_d(kappa) by cubic Hermite interpolation of ``table`` (values and their exact
    derivatives A_d); directly beyond it. Each heat-bath update needs N - 1 of these."""
    t = kappa * (1.0 / TABLE_STEP)
    k = int(t)
    if k >= table.shape[0] - 1:
        return log_partition(kappa, d)
    u = t - k
    f0, g0 = table[k, 0], table[k, 1] * TABLE_STEP
    f1, g1 = table[k + 1, 0], table[k + 1, 1] * TABLE_STEP
    df = f1 - f0
    return f0 + u * (g0 + u * ((3.0 * df - 2.0 * g0 - g1) + u * (g0 + g1 - 2.0 * df)))


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
def _pick_and_draw(x, J, lam, i, s, logw, top, mu, tmp):
    """Draw j with probability proportional to e^{logw[j]} (``top`` its maximum), then
    x[i] <- vMF(h_ij / |h_ij|, lam |h_ij|). logw is overwritten with the weights."""
    N = x.shape[0]
    total = 0.0
    for j in range(N):
        logw[j] = exp_weight(logw[j] - top)  # now a weight in [0, 1]
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
def attention_site(x, J, lam, i, s, table, logw, mu, tmp):
    """Heat-bath update of site i of one chain x (N, d) under e^{-lam e_i}.

    ``table``: :func:`logz_table` for this d. Scratch: logw (N,), mu (d,), tmp (d,).
    """
    N, d = x.shape
    dd = float(d)
    top = -np.inf
    for j in range(N):
        if j == i:
            logw[j] = -np.inf
            continue
        r = _block_times(J, i, j, x, mu)
        logw[j] = logz_lookup(lam * r, dd, table)
        top = max(top, logw[j])
    _pick_and_draw(x, J, lam, i, s, logw, top, mu, tmp)


@njit(parallel=True)
def gram_blocks(J):
    """G (N, d(d+1)/2, N): G[i, p, j] = (J_ij^T J_ij)_bc, doubled off the diagonal, p running
    over the pairs b <= c, so that |J_ij x_j|^2 = sum_p G[i, p, j] Q[p, j] with
    Q[p, j] = x_jb x_jc (:func:`pair_products`); j is the contiguous axis, so one site's
    N norms vectorise."""
    N, _, d, _ = J.shape
    G = np.empty((N, d * (d + 1) // 2, N))
    for i in prange(N):
        for j in range(N):
            p = 0
            for b in range(d):
                for c in range(b, d):
                    acc = 0.0
                    for a in range(d):
                        acc += J[i, j, a, b] * J[i, j, a, c]
                    G[i, p, j] = acc if b == c else 2.0 * acc
                    p += 1
    return G


@njit
def pair_products(x, j, Q):
    """Column j of Q (d(d+1)/2, N) <- x_jb x_jc over the pairs b <= c (see gram_blocks)."""
    d = x.shape[1]
    p = 0
    for b in range(d):
        for c in range(b, d):
            Q[p, j] = x[j, b] * x[j, c]
            p += 1


@njit
def attention_site_gram(x, J, G, Q, lam, i, s, table, logw, mu, tmp):
    """:func:`attention_site` with |h_ij|^2 = sum_p G[i, p, j] Q[p, j] (:func:`gram_blocks`):
    d(d+1)/2 products per pair instead of d^2 + d, vectorised over j. Q (d(d+1)/2, N) must hold
    :func:`pair_products` of x and is kept up to date."""
    N, d = x.shape
    dd = float(d)
    for j in range(N):
        logw[j] = 0.0
    for p in range(Q.shape[0]):
        for j in range(N):
            logw[j] += G[i, p, j] * Q[p, j]
    top = -np.inf
    for j in range(N):
        # the quadratic form can round below zero where h_ij nearly vanishes
        logw[j] = logz_lookup(lam * math.sqrt(max(logw[j], 0.0)), dd, table)
    logw[i] = -np.inf
    for j in range(N):
        top = max(top, logw[j])
    _pick_and_draw(x, J, lam, i, s, logw, top, mu, tmp)
    pair_products(x, i, Q)


@njit
def twobody_site_among(x, J, beta, i, cols, s, mu, tmp):
    """Heat-bath update of site i of one chain x (N, d): x_i ~ vMF(h_i/|h_i|, beta |h_i|),
    h_i summed over the sites ``cols`` only, those whose block J_ij is not zero
    (:func:`coupled_sites`; a zero block adds nothing): a lattice costs its bonds, not N."""
    d = x.shape[1]
    for a in range(d):
        mu[a] = 0.0
    for j in cols:
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
def resample_every_site(X, J, lam, states, table, out):
    """out[p, i] <- a draw of x_i from its conditional given the other spins of X[p], for
    every sample p and site i; the rest of ``out`` is X. One generator state per sample;
    ``table``: the heat-bath table of :func:`logz_table`."""
    P, N, d = X.shape
    for p in prange(P):
        x = X[p].astype(np.float64)
        mu = np.empty(d)
        tmp = np.empty(d)
        logw = np.empty(N)
        s = states[p]
        for i in range(N):
            attention_site(x, J, lam, i, s, table, logw, mu, tmp)
            for a in range(d):
                out[p, i, a] = x[i, a]
                x[i, a] = X[p, i, a]  # the others stay the data's


def coupled_sites(J):
    """(indptr, indices): row i's sites j != i with a nonzero block J_ij are
    indices[indptr[i]:indptr[i + 1]], ascending (compressed sparse rows)."""
    N = J.shape[0]
    mask = np.any(J != 0, axis=(2, 3))
    mask[np.arange(N), np.arange(N)] = False
    indptr = np.zeros(N + 1, np.int64)
    indptr[1:] = np.cumsum(mask.sum(axis=1))
    return indptr, np.nonzero(mask)[1].astype(np.int64)


@njit(parallel=True)
def resample_sites(X, J, lam, model, sites, states, table, indptr, indices):
    """X[p, sites[p]] <- a draw from its conditional, for every sample p of X (P, N, d);
    ``indptr``, ``indices``: :func:`coupled_sites` of J (the two-body model's fields)."""
    P, N, d = X.shape
    for p in prange(P):
        mu = np.empty(d)
        tmp = np.empty(d)
        if model == ATTENTION:
            logw = np.empty(N)
            attention_site(X[p], J, lam, sites[p], states[p], table, logw, mu, tmp)
        else:
            i = sites[p]
            cols = indices[indptr[i] : indptr[i + 1]]
            twobody_site_among(X[p], J, lam, i, cols, states[p], mu, tmp)


@njit(parallel=True)
def gibbs_sweeps(X, J, beta, model, scan, n_sweeps, states, table, indptr, indices):
    """``n_sweeps`` heat-bath sweeps (N site updates each) of every chain of X (C, N, d).

    ``scan``: RANDOM (each update picks a uniform site) or SYSTEMATIC (sites 0 .. N-1).
    ``indptr``, ``indices``: :func:`coupled_sites` of J (used by the two-body model only;
    the attention model's zero blocks are uniform components and count).
    """
    C, N, d = X.shape
    if model == ATTENTION:
        G = gram_blocks(J)
    else:
        G = np.empty((0, 0, 0))
    for c in prange(C):
        s = states[c]
        x = X[c]
        mu = np.empty(d)
        tmp = np.empty(d)
        logw = np.empty(N)
        Q = np.empty((G.shape[1], N))
        if model == ATTENTION:
            for j in range(N):
                pair_products(x, j, Q)
        for _ in range(n_sweeps):
            for k in range(N):
                i = k
                if scan == RANDOM:
                    i = min(int(uniform(s) * N), N - 1)
                if model == ATTENTION:
                    attention_site_gram(x, J, G, Q, beta, i, s, table, logw, mu, tmp)
                else:
                    cols = indices[indptr[i] : indptr[i + 1]]
                    twobody_site_among(x, J, beta, i, cols, s, mu, tmp)


# ------------------------------------------------------------------ Metropolis (attention)
@njit(inline="always")
def _logaddexp(a, b):
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    top = max(a, b)
    return top + math.log(math.exp(a - top) + math.exp(b - top))


@njit
def _scores(x, J, lam, S, lse):
    """S[i, j] = x_i . J_ij x_j, lse[i] = log sum_{j != i} e^{lam S[i, j]} (= -lam e_i)."""
    N, d = x.shape
    for i in range(N):
        top = -np.inf
        for j in range(N):
            if j == i:
                S[i, j] = 0.0
                continue
            acc = 0.0
            for a in range(d):
                y = 0.0
                for b in range(d):
                    y += J[i, j, a, b] * x[j, b]
                acc += x[i, a] * y
            S[i, j] = acc
            top = max(top, lam * acc)
        total = 0.0
        for j in range(N):
            if j != i:
                total += math.exp(lam * S[i, j] - top)
        lse[i] = top + math.log(total)


@njit
def _propose(x, i, step, s, prop):
    """A move of x_i symmetric on the sphere: -x_i for d = 1, else Norm(x_i + step g)."""
    d = x.shape[1]
    if d == 1:
        prop[0] = -x[i, 0]
        return
    n2 = 0.0
    for a in range(d):
        prop[a] = x[i, a] + step * normal(s)
        n2 += prop[a] * prop[a]
    inv = 1.0 / math.sqrt(max(n2, 1e-300))
    for a in range(d):
        prop[a] *= inv


@njit
def _row_without(S, lam, k, i):
    """log sum_{j != k, i} e^{lam S[k, j]} (-inf if empty)."""
    top = -np.inf
    for j in range(S.shape[0]):
        if j != k and j != i:
            top = max(top, lam * S[k, j])
    if top == -np.inf:
        return top
    total = 0.0
    for j in range(S.shape[0]):
        if j != k and j != i:
            total += math.exp(lam * S[k, j] - top)
    return top + math.log(total)


@njit
def _metropolis_site(x, J, lam, ratio, i, step, s, S, lse, row, col, new_lse, prop):
    """One Metropolis move of site i under e^{-beta E}, E = sum_k e_k, ratio = beta / lam.

    Moving x_i changes row i of the scores and column i (x_i enters every e_k through s_ki);
    each e_k is updated from its stored log-sum-exp, recomputed where the subtraction would
    cancel. Returns 1 if the move was accepted.
    """
    N, d = x.shape
    _propose(x, i, step, s, prop)
    top = -np.inf
    for j in range(N):
        if j == i:
            continue
        a_row = 0.0
        a_col = 0.0
        for a in range(d):
            y = 0.0
            z = 0.0
            for b in range(d):
                y += J[i, j, a, b] * x[j, b]
                z += J[j, i, a, b] * prop[b]
            a_row += prop[a] * y
            a_col += x[j, a] * z
        row[j] = a_row
        col[j] = a_col
        top = max(top, lam * a_row)
    total = 0.0
    for j in range(N):
        if j != i:
            total += math.exp(lam * row[j] - top)
    new_lse[i] = top + math.log(total)
    delta = new_lse[i] - lse[i]
    for k in range(N):
        if k == i:
            continue
        share = math.exp(lam * S[k, i] - lse[k])
        if share < 1.0 - _CANCEL:
            rest = lse[k] + math.log1p(-share)
        else:
            rest = _row_without(S, lam, k, i)
        new_lse[k] = _logaddexp(rest, lam * col[k])
        delta += new_lse[k] - lse[k]
    if math.log(uniform(s)) >= ratio * delta:
        return 0
    for a in range(d):
        x[i, a] = prop[a]
    for j in range(N):
        lse[j] = new_lse[j]
        if j != i:
            S[i, j] = row[j]
            S[j, i] = col[j]
    return 1


@njit(parallel=True)
def metropolis_sweeps(X, J, lam, beta, scan, n_sweeps, steps, states, accepted):
    """``n_sweeps`` Metropolis sweeps of every chain of X (C, N, d) at inverse temperature
    beta for the energy sum_i e_i(x; J, lam); accepted[c] <- moves accepted by chain c."""
    C, N, d = X.shape
    ratio = beta / lam
    for c in prange(C):
        s = states[c]
        x = X[c]
        S = np.empty((N, N))
        lse = np.empty(N)
        row = np.empty(N)
        col = np.empty(N)
        new_lse = np.empty(N)
        prop = np.empty(d)
        _scores(x, J, lam, S, lse)
        n_acc = 0
        for _ in range(n_sweeps):
            for k in range(N):
                i = k
                if scan == RANDOM:
                    i = min(int(uniform(s) * N), N - 1)
                n_acc += _metropolis_site(
                    x, J, lam, ratio, i, steps[c], s, S, lse, row, col, new_lse, prop
                )
        accepted[c] = n_acc


@njit(parallel=True)
def uniform_spins(X, states):
    """Every spin of X (C, N, d) <- uniform on S^{d-1}, chain c from states[c]."""
    C, N, d = X.shape
    for c in prange(C):
        mu = np.zeros(d)
        mu[0] = 1.0
        for i in range(N):
            sample_vmf(mu, 0.0, states[c], X[c, i])
