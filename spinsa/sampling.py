"""Monte Carlo sampling of the attention model and the two-body model at a temperature
(docs/sampling.md).

- :func:`sample_vmf`: von Mises-Fisher draws on S^{d-1} (d = 1 is the Ising case);
- :func:`site_resample`: redraw one chosen site per sample from its conditional;
- :func:`gibbs`: heat-bath chains (the attention model at beta = lam, the two-body model at
  any beta); :func:`metropolis`: the attention model's energy at any beta;
- :func:`diagnostics`: integrated autocorrelation time, effective sample size and R-hat of
  a recorded observable (ArviZ, loaded on first use).

Chains run ``burn_in`` sweeps, then record every ``thin`` sweeps; with ``checkpoint=path``
the state is written atomically (:mod:`spinsa.io`) every ``checkpoint_every`` records, and a
run that was killed resumes from it to the same result as an uninterrupted one. A finished
run asked again for more ``n_sweeps`` extends its chains from the checkpoint: 1000 sweeps
then 2000 give the same arrays as 2000 at once.

Every function takes ``rng``: None (fresh entropy from the operating system), an int seed
>= 0, a ``numpy.random.SeedSequence`` or a ``numpy.random.Generator``. It is turned into one
xoshiro256** stream per chain or sample (:func:`generator_states`), so that results do not
depend on the number of threads. Chains record the int seed they ran with
(``chains.config.seed``, drawn afresh when ``rng`` is None): passing it back as ``rng``
repeats them exactly (docs/decisions.md, 'Independent replicas by default').
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from spinsa import io
from spinsa._checks import (
    check_choice,
    check_count,
    check_couplings,
    check_finite,
    check_lam,
    check_positive,
    check_spins,
)
from spinsa._config import config_differences
from spinsa._files import data_fingerprint
from spinsa._progress import progress as progress_bar
from spinsa.kernels import sampling as _k
from spinsa.model import energy as attention_energy

__all__ = [
    "MODELS",
    "ChainConfig",
    "Chains",
    "Diagnostics",
    "diagnostics",
    "generator_states",
    "gibbs",
    "heat_bath_sweeps",
    "metropolis",
    "row_matched_states",
    "sample_vmf",
    "site_resample",
    "twobody_energy",
]

MODELS = {"attention": _k.ATTENTION, "twobody": _k.TWOBODY}


def _seed_sequence(rng) -> np.random.SeedSequence:
    """The ``SeedSequence`` of any accepted ``rng`` (a Generator contributes 128 bits drawn
    from it, so that it advances and two calls get different streams)."""
    if isinstance(rng, np.random.Generator):
        return np.random.SeedSequence(rng.integers(0, 2**63, size=2).tolist())
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if rng is None:
        return np.random.SeedSequence()
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.SeedSequence(int(rng))
    raise ValueError(
        "rng must be None, an int seed >= 0, a numpy SeedSequence or a numpy Generator, "
        f"got {rng!r}"
    )


def generator_states(rng, n: int) -> np.ndarray:
    """``n`` independent xoshiro256** states, shape (n, 4) uint64, from ``rng``.

    Parameters
    ----------
    rng : None, int, SeedSequence or Generator
        None takes fresh entropy; an int seed >= 0 or a ``SeedSequence`` is used as given;
        a ``Generator`` contributes 128 bits of entropy drawn from it.
    n : int
        Streams (chains or samples).

    Returns
    -------
    ndarray of uint64, shape (n, 4)
        Row k is the first four outputs of SplitMix64 seeded with ``key + k``, ``key`` one
        64-bit word of ``rng``'s ``SeedSequence``
        (:func:`spinsa.kernels.sampling.splitmix_states`): the seeding the authors of
        xoshiro recommend, under which the first outputs of the rows are uniform at any
        ``n`` (tested at 4e6 rows). Rows are distinct and never zero; the streams of two
        seeds overlap only if their keys lie within ``n`` of each other (probability about
        2 n / 2^64).
    """
    key = int(_seed_sequence(rng).generate_state(1, np.uint64)[0])
    return _k.splitmix_states(key, check_count(n, "n", 0))


@lru_cache(maxsize=32)
def heat_bath_table(d: int) -> np.ndarray:
    """(log Z_d, A_d) on the heat-bath kernels' grid, shape (n, 2); read-only, one per d."""
    table = np.empty((int(_k.TABLE_TOP / _k.TABLE_STEP) + 1, 2))
    _k.logz_table(float(d), table)
    table.flags.writeable = False
    return table


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


_FIELD_MAX = 1e150  # |h_i| above this: |h_i|^2 and the Gram blocks J_ij^T J_ij could overflow


def _check_field_scale(J: np.ndarray, beta: float, beta_name: str, heat_bath: bool = True):
    """Refuse couplings whose fields overflow float64 in the samplers.

    A site's field h_i = sum_{j != i} J_ij x_j of unit spins is bounded by
    B = max_i sum_{j != i} sum_ab |J_ij,ab|. The heat bath squares |h_i| (and J_ij) and
    draws from vMF(h_i / |h_i|, beta |h_i|): B must stay below 1e150 and beta B below
    1e300, or an overflowed norm would give zero or NaN spins.
    """
    N = J.shape[0]
    with np.errstate(over="ignore"):
        rows = np.abs(J).sum(axis=(1, 2, 3)) - np.abs(J[np.arange(N), np.arange(N)]).sum((1, 2))
        bound = float(rows.max(initial=0.0))
        kappa = beta * bound
    if not (bound <= _FIELD_MAX and kappa <= 1e300):
        hint = (f"the sampled law depends on {beta_name} J only: pass J / s and "
                f"{beta_name} * s for a scale s" if heat_bath else "rescale J")  # fmt: skip
        raise ValueError(
            f"J is too large for float64: the fields h_i = sum_j J_ij x_j can reach "
            f"|h_i| = {bound:.3g} ({beta_name} |h_i| = {kappa:.3g}); they must stay below "
            f"{_FIELD_MAX:.0e} ({beta_name} |h_i| below 1e+300) so that their squares do not "
            f"overflow; {hint}"
        )


def _check_model_inputs(x, J, lam, model, lam_name="lam"):
    model = check_choice(model, "model", tuple(MODELS))
    x = check_spins(x)
    J = check_couplings(J, x.shape[1], x.shape[2])
    lam = check_positive(lam, lam_name)
    _check_field_scale(J, lam, lam_name)
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
        raise ValueError(
            f"sites must be integers of shape ({P},) (one per sample), got "
            f"{sites.dtype} of shape {sites.shape}"
        )
    if np.any((sites < 0) | (sites >= N)):
        raise ValueError(f"sites must lie in [0, {N}), got min {sites.min()}, max {sites.max()}")
    X = np.array(x, dtype=np.float64)
    states = generator_states(rng, P)
    _k.resample_sites(
        X, J, lam, MODELS[model], sites.astype(np.int64), states, heat_bath_table(x.shape[2]),
        *_k.coupled_sites(J),
    )  # fmt: skip
    return X.astype(x.dtype, copy=False)


def row_matched_states(x, J, lam, rng=None) -> np.ndarray:
    """Every site redrawn in turn: ``out[p, i]`` is a draw of x_i from the attention model's
    conditional (at beta = lam) given the other spins of ``x[p]``.

    Row i of a pseudo-likelihood fit then reads x_i from ``out`` and the other spins from
    ``x``: the "row-matched" states on which the normalised pseudo-likelihood is consistent
    and whose gradient is CD's single-site model term (docs/inverse-problems.md).

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Spins.
    J : array_like, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    lam : float
        lam > 0.
    rng : None, int, SeedSequence or Generator
        One generator state per sample is drawn from it.

    Returns
    -------
    ndarray, shape (P, N, d), the dtype of ``x``
        Unit spins; ``out[p, i]`` for every p and i is a fresh draw.
    """
    x, J, lam, _ = _check_model_inputs(x, J, lam, "attention")
    out = np.empty_like(x)
    states = generator_states(rng, x.shape[0])
    _k.resample_every_site(x, J, lam, states, heat_bath_table(x.shape[2]), out)
    return out


def heat_bath_sweeps(x, J, lam, n_sweeps, rng=None) -> np.ndarray:
    """The states after ``n_sweeps`` systematic heat-bath sweeps of the attention model at
    beta = lam, started at ``x``: what :func:`gibbs` does, without records or checkpoints
    (the chains of CD's ``chain="sweep"`` and of planted samples).

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Starting spins, one chain per sample.
    J : array_like, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    lam : float
        lam > 0.
    n_sweeps : int
        Sweeps of N site updates each, >= 0.
    rng : None, int, SeedSequence or Generator
        One generator state per chain is drawn from it.

    Returns
    -------
    ndarray, shape (P, N, d), the dtype of ``x``
    """
    x, J, lam, _ = _check_model_inputs(x, J, lam, "attention")
    n_sweeps = check_count(n_sweeps, "n_sweeps", 0)
    X = x.astype(np.float64)
    states = generator_states(rng, X.shape[0])
    _k.gibbs_sweeps(
        X, J, lam, _k.ATTENTION, _k.SYSTEMATIC, n_sweeps, states, heat_bath_table(X.shape[2]),
        *_k.coupled_sites(J),
    )  # fmt: skip
    return X.astype(x.dtype)


# ------------------------------------------------------------------ chains
SCANS = {"random": _k.RANDOM, "systematic": _k.SYSTEMATIC}
METHODS = ("gibbs", "metropolis")
CHAIN_KIND = "chains"
STREAMS = "splitmix64"  # how generator_states seeds the streams; stored in checkpoints
_STEP_RANGE = (1e-3, 4.0)  # Metropolis step sizes stay in here while they adapt


@dataclass(frozen=True)
class ChainConfig:
    """What a set of chains is: the model, the sampler, the schedule and the seed.

    ``beta`` is the inverse temperature of the sampled law; ``lam`` the softmax's (the
    attention model's energy e_i(x; J, lam)); heat-bath Gibbs of the attention model needs
    beta = lam. Records are taken after ``burn_in`` sweeps, every ``thin`` sweeps,
    ``n_sweeps // thin`` of them. ``seed`` (an int in [0, 2^63)) is the one the chains ran
    with: :func:`gibbs` and :func:`metropolis` draw it from their ``rng`` (afresh when it is
    None), so that passing it back as ``rng`` repeats the chains.
    """

    model: str = "attention"
    method: str = "gibbs"
    beta: float = 1.0
    lam: float = 1.0
    n_chains: int = 4
    n_sweeps: int = 100
    burn_in: int = 0
    thin: int = 1
    scan: str = "random"
    seed: int = 0
    step: float = 0.5  # Metropolis: the initial proposal scale
    target_acceptance: float = 0.4  # Metropolis: what the step adapts to during burn-in

    def __post_init__(self):
        check_choice(self.model, "model", tuple(MODELS))
        check_choice(self.method, "method", METHODS)
        check_choice(self.scan, "scan", tuple(SCANS))
        for name in ("beta", "lam", "step"):
            check_positive(getattr(self, name), name)
        check_count(self.n_chains, "n_chains", 1)
        check_count(self.n_sweeps, "n_sweeps", 0)
        check_count(self.burn_in, "burn_in", 0)
        check_count(self.thin, "thin", 1)
        if check_count(self.seed, "seed", 0) >= 2**63:
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed}")
        if self.burn_in + self.n_sweeps >= 2**62:
            raise ValueError(f"burn_in + n_sweeps must be < 2**62 (the sweeps are counted in "
                             f"int64), got {self.burn_in} + {self.n_sweeps}")  # fmt: skip
        if not 0 < self.target_acceptance < 1:
            raise ValueError(f"target_acceptance must lie in (0, 1), got {self.target_acceptance}")
        if self.method == "metropolis" and self.model != "attention":
            raise ValueError(
                "metropolis samples the attention model; for the two-body model "
                "use gibbs (its heat bath is exact at any beta)"
            )
        if self.method == "gibbs" and self.model == "attention" and self.beta != self.lam:
            raise ValueError(
                f"heat-bath Gibbs of the attention model is exact only at beta = lam (got beta "
                f"= {self.beta}, lam = {self.lam}); use metropolis for beta != lam"
            )

    @property
    def n_records(self) -> int:
        return self.n_sweeps // self.thin


@dataclass(frozen=True)
class Chains:
    """Recorded states and observables of a set of chains.

    Attributes
    ----------
    config : ChainConfig
        Its ``seed`` is the one the chains ran with: pass it as ``rng`` to repeat them.
    records : ndarray, shape (n_records, n_chains, N, d)
        The spins after sweep ``sweeps[r]`` (counted from the start, burn-in included).
    sweeps : ndarray of int, shape (n_records,)
    energies : ndarray, shape (n_records, n_chains)
        E(x) = sum_i e_i(x; J, lam) (attention), or -1/2 sum_{i != j} x_i . J_ij x_j
        (two-body: the Boltzmann energy for symmetric J, in units where the law is e^{-beta E}).
    magnetisation : ndarray, shape (n_records, n_chains, d)
        (1/N) sum_i x_i.
    acceptance : ndarray, shape (n_records, n_chains)
        Share of accepted moves in the sweeps since the previous record (1 for heat bath).
    step : ndarray, shape (n_chains,)
        Metropolis proposal scales after burn-in adaptation.
    last : ndarray, shape (n_chains, N, d)
        The chains' current spins; ``states`` (n_chains, 4) uint64 their generators.
    """

    config: ChainConfig
    records: np.ndarray
    sweeps: np.ndarray
    energies: np.ndarray
    magnetisation: np.ndarray
    acceptance: np.ndarray
    step: np.ndarray
    last: np.ndarray
    states: np.ndarray


def twobody_energy(x, J) -> np.ndarray:
    """E(x) = -1/2 sum_{i != j} x_i . J_ij x_j, shape (P,) for x (P, N, d) (diagonal ignored)."""
    x, J = np.asarray(x, np.float64), np.asarray(J, np.float64)
    N = J.shape[0]
    off = J * (1 - np.eye(N))[:, :, None, None]
    return -0.5 * np.einsum("pia,ijab,pjb->p", x, off, x, optimize=True)


class _State:
    """What a run carries from block to block (and what a checkpoint holds)."""

    def __init__(self, cfg: ChainConfig, X: np.ndarray, states: np.ndarray):
        R, C, (N, d) = cfg.n_records, cfg.n_chains, X.shape[1:]
        self.X, self.states, self.done, self.n_rec = X, states, 0, 0
        self.step = np.full(C, cfg.step)
        self.records = np.empty((R, C, N, d))
        self.sweeps = np.empty(R, np.int64)
        self.energies = np.empty((R, C))
        self.magnetisation = np.empty((R, C, d))
        self.acceptance = np.empty((R, C))

    CARRIED = ("X", "states", "step")  # the chains' state now
    RECORDED = ("records", "sweeps", "energies", "magnetisation", "acceptance")  # one per record
    ARRAYS = CARRIED + RECORDED

    def save(self, path: Path, cfg: ChainConfig, inputs: dict[str, str]) -> None:
        arrays = {k: getattr(self, k) for k in self.ARRAYS}
        attrs = {"done": self.done, "n_rec": self.n_rec, "streams": STREAMS,
                 **{f"{k}_sha1": v for k, v in inputs.items()}}  # fmt: skip
        io.write_file(path, {"chain": arrays}, attrs, kind=CHAIN_KIND, config=asdict(cfg),
                      overwrite=True)  # fmt: skip

    def load(self, path: Path, cfg: ChainConfig, inputs: dict[str, str]) -> None:
        """Continue the chains of ``path``. Its config must be ``cfg`` but for ``n_sweeps``:
        the sweeps run so far are the same whatever the total, so more sweeps extend the
        chains (their records are copied into the longer arrays), fewer are refused once
        they have been run. ``inputs``: the sha1 of ``J`` and ``x0``, which must match."""
        info = io.read(path)
        afresh = "delete it or give another path to start afresh"
        if info.kind != CHAIN_KIND:
            raise ValueError(
                f"checkpoint {path} is not a chains checkpoint: its kind is {info.kind!r}, a "
                f"checkpoint's is {CHAIN_KIND!r}; {afresh}"
            )
        if info.attrs.get("streams") != STREAMS:
            raise ValueError(
                f"checkpoint {path} was written with another seeding of the chains' random "
                f"streams ({info.attrs.get('streams', 'one SeedSequence for all chains')!r}, "
                f"now {STREAMS!r}): continued, its chains would differ from a fresh run of "
                f"the same arguments; {afresh}"
            )
        diff = config_differences(info.config, asdict(cfg))
        diff.pop("n_sweeps", None)
        why = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items()]
        why += [f"{k} differs" for k, v in inputs.items() if info.attrs.get(f"{k}_sha1") != v]
        if why:
            raise ValueError(f"checkpoint {path} belongs to other chains ({', '.join(why)}); "
                             f"{afresh}")  # fmt: skip
        done, n_rec = int(info.attrs["done"]), int(info.attrs["n_rec"])
        if done > cfg.burn_in + cfg.n_records * cfg.thin:
            raise ValueError(
                f"checkpoint {path} holds chains {done} sweeps long ({n_rec} records), more "
                f"than n_sweeps={cfg.n_sweeps} asks for; pass n_sweeps >= "
                f"{done - cfg.burn_in} to extend them, or give another path to start afresh"
            )
        io.verify(path)
        arrays, _ = io.read_group(path, "chain")
        for k in self.CARRIED:
            setattr(self, k, np.ascontiguousarray(arrays[k]))
        for k in self.RECORDED:  # arrays of this run's length, the first n_rec filled
            getattr(self, k)[:n_rec] = arrays[k][:n_rec]
        self.done, self.n_rec = done, n_rec


def _observe(st: _State, cfg: ChainConfig, J: np.ndarray, accepted: np.ndarray, n: int):
    r = st.n_rec
    st.records[r] = st.X
    st.sweeps[r] = st.done
    if cfg.model == "attention":
        st.energies[r] = attention_energy(st.X, J, cfg.lam)
    else:
        st.energies[r] = twobody_energy(st.X, J)
    st.magnetisation[r] = st.X.mean(axis=1)
    st.acceptance[r] = accepted / max(n, 1)
    st.n_rec += 1


def _block(st: _State, cfg: ChainConfig, J: np.ndarray, n_sweeps: int) -> np.ndarray:
    """Advance every chain ``n_sweeps`` sweeps; the moves accepted by each chain."""
    accepted = np.empty(cfg.n_chains, np.int64)
    if cfg.method == "gibbs":
        _k.gibbs_sweeps(st.X, J, cfg.beta, MODELS[cfg.model], SCANS[cfg.scan], n_sweeps,
                        st.states, heat_bath_table(st.X.shape[2]), *st.rows)  # fmt: skip
        accepted[:] = n_sweeps * st.X.shape[1]
    else:
        _k.metropolis_sweeps(st.X, J, cfg.lam, cfg.beta, SCANS[cfg.scan], n_sweeps, st.step,
                             st.states, accepted)  # fmt: skip
    return accepted


_UNIT_TOL = 1e-5  # x0's spins must have norms within this of 1


def _check_memory(cfg: ChainConfig, N: int, d: int) -> None:
    """Refuse, before anything is allocated, chains whose arrays cannot fit in memory: the
    records (records, energies, magnetisation, acceptance), the chains' spins and streams,
    and the Gram blocks of the attention model's heat bath."""
    C, R = cfg.n_chains, cfg.n_records
    need = R * (C * (N * d + d + 2) + 1) * 8 + C * (2 * N * d + 8) * 8
    if cfg.method == "gibbs" and cfg.model == "attention":
        need += N * N * (d * (d + 1) // 2) * 8
    from spinsa.fit.memory import InsufficientMemoryError, available_memory

    have = available_memory() or 2**62
    if need > have:
        gib = 2.0**30
        raise InsufficientMemoryError(
            f"{cfg.method} needs about {need / gib:.3g} GiB for n_chains={C} chains of "
            f"{N} x {d} spins and their {R} records (n_sweeps // thin = {cfg.n_sweeps} // "
            f"{cfg.thin}), but {have / gib:.3g} GiB is available; lower n_chains or "
            "n_sweeps, or raise thin"
        )


def _run(cfg, J, x0, checkpoint, checkpoint_every, show, callback) -> Chains:
    J = check_couplings(J)
    N, d = J.shape[0], J.shape[2]
    if N < 2:
        raise ValueError(f"J must couple at least 2 sites, got N = {N}")
    if d < 1:
        raise ValueError(f"J must have spin dimension d >= 1 (axes 2 and 3), got shape {J.shape}")
    if cfg.method == "gibbs":
        _check_field_scale(J, cfg.beta, "beta")
    else:
        _check_field_scale(J, cfg.lam, "lam", heat_bath=False)
    _check_memory(cfg, N, d)
    states = generator_states(cfg.seed, cfg.n_chains)
    if x0 is None:
        X = np.empty((cfg.n_chains, N, d))
        _k.uniform_spins(X, states)
    else:
        X = np.array(check_spins(x0, "x0"), dtype=np.float64)
        if X.shape != (cfg.n_chains, N, d):
            raise ValueError(f"x0 must have shape (n_chains, N, d) = {(cfg.n_chains, N, d)}, "
                             f"got {X.shape}")  # fmt: skip
        norms = np.linalg.norm(X, axis=-1)
        if np.any(np.abs(norms - 1) > _UNIT_TOL):
            raise ValueError(
                f"x0 must hold unit spins (norms within {_UNIT_TOL:g} of 1), got norms from "
                f"{norms.min():.4g} to {norms.max():.4g}; pass "
                "x0 / np.linalg.norm(x0, axis=-1, keepdims=True)"
            )
    if cfg.model == "attention" and cfg.n_records:  # the records' energies, before burn-in
        check_lam(cfg.lam, X, J)
    inputs = {"J": data_fingerprint(J), "x0": data_fingerprint(X)}
    st = _State(cfg, X, states)
    st.rows = _k.coupled_sites(J)  # the two-body field skips zero blocks (lattices)
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None and path.exists():
        st.load(path, cfg, inputs)
    total = cfg.burn_in + cfg.n_records * cfg.thin
    with progress_bar(total, f"{cfg.method} {cfg.model}", "sweep", enabled=show,
                      initial=st.done) as bar:  # fmt: skip
        while st.done < total:
            burning = st.done < cfg.burn_in
            n = min(cfg.thin, cfg.burn_in - st.done) if burning else cfg.thin
            accepted = _block(st, cfg, J, n)
            st.done += n
            bar.update(n)
            if burning and cfg.method == "metropolis":  # adapt only during burn-in
                rate = accepted / (n * N)
                st.step = np.clip(st.step * np.exp(2.0 * (rate - cfg.target_acceptance)),
                                  *_STEP_RANGE)  # fmt: skip
            if not burning:
                _observe(st, cfg, J, accepted, n * N)
                if callback is not None:
                    callback(st.n_rec - 1, st.X)
            if path is not None and (
                st.done == total or (not burning and st.n_rec % checkpoint_every == 0)
            ):
                st.save(path, cfg, inputs)
    return Chains(cfg, st.records, st.sweeps, st.energies, st.magnetisation, st.acceptance,
                  st.step, st.X.copy(), st.states.copy())  # fmt: skip


def gibbs(J, beta, n_chains, n_sweeps, model="attention", scan="random", burn_in=0, thin=1,
          x0=None, rng=None, progress=False, checkpoint=None, checkpoint_every=100,
          callback: Callable[[int, np.ndarray], None] | None = None) -> Chains:  # fmt: skip
    """Heat-bath Gibbs chains: each update redraws one site from its conditional.

    ``model="attention"``: the vMF mixture of :func:`site_resample`, at beta = lam = ``beta``
    (for N >= 3 the chain's stationary law depends on ``scan``: docs/sampling.md).
    ``model="twobody"``: x_i ~ vMF(h_i / |h_i|, beta |h_i|), whose stationary law is
    e^{-beta E} for symmetric J (J_ji = J_ij^T).

    Parameters
    ----------
    J : array_like, shape (N, N, d, d)
    beta : float
        Inverse temperature (the attention model's lam).
    n_chains, n_sweeps : int
        Chains run side by side; sweeps (N site updates each) after burn-in.
    model : {"attention", "twobody"}
    scan : {"random", "systematic"}
        Each update picks a uniform site, or sweeps sites 0 .. N-1 in order.
    burn_in, thin : int
        Sweeps before the first record; sweeps between records (n_sweeps // thin records).
    x0 : array_like, shape (n_chains, N, d), optional
        Starting spins, unit vectors (norms within 1e-5 of 1, used as given; others are
        refused); uniform on the sphere by default (drawn from the chains' own generators).
    rng : None, int, SeedSequence or Generator, default None
        Where the chains' seed comes from: an int >= 0 is the seed; a ``SeedSequence`` or a
        ``Generator`` gives one (a Generator advances); None draws fresh entropy, so that
        two calls give independent replicas, or, with an existing ``checkpoint``, takes
        the checkpoint's seed. The seed is recorded as ``chains.config.seed``: pass it as
        ``rng`` to repeat the chains. Chain c draws from its own xoshiro256** stream
        (:func:`generator_states`), so results do not depend on the number of threads.
    progress : bool
        A progress bar over sweeps (:mod:`spinsa._progress`).
    checkpoint : path, optional
        A spinsa HDF5 file (kind ``"chains"``) written atomically every ``checkpoint_every``
        records and at the end; if it exists, the run resumes from it (its config, J and x0
        must be the same: a ``ValueError`` says what differs). ``n_sweeps`` may differ: a
        larger one extends finished chains, with the same result as one run of that many
        sweeps; one smaller than the sweeps already run is refused.
    callback : callable(record_index, X), optional
        Called after each record with the chains' spins (n_chains, N, d).

    Returns
    -------
    Chains

    Raises
    ------
    ValueError
        On bad arguments, naming the argument: among them x0 off the sphere, and J so
        large that beta |h_i| overflows float64 (``J / s`` with ``beta * s`` samples the
        same law).
    MemoryError
        (:class:`spinsa.fit.InsufficientMemoryError`, also a ``ValueError``) before
        anything is allocated, when the chains and their records need more memory than is
        available.
    """
    cfg = ChainConfig(model=model, method="gibbs", beta=beta, lam=beta, n_chains=n_chains,
                      n_sweeps=n_sweeps, burn_in=burn_in, thin=thin, scan=scan,
                      seed=_chain_seed(rng, checkpoint))  # fmt: skip
    return _run(cfg, J, x0, checkpoint, check_count(checkpoint_every, "checkpoint_every", 1),
                progress, callback)  # fmt: skip


def metropolis(J, lam, beta, n_chains, n_sweeps, scan="random", burn_in=0, thin=1, step=0.5,
               target_acceptance=0.4, x0=None, rng=None, progress=False, checkpoint=None,
               checkpoint_every=100,
               callback: Callable[[int, np.ndarray], None] | None = None) -> Chains:  # fmt: skip
    """Metropolis chains of the attention model's law e^{-beta E(x)}, E = sum_i e_i(x; J, lam).

    A move proposes x_i' = Norm(x_i + step g), g standard normal (the flip x_i' = -x_i for
    d = 1), symmetric on the sphere, accepted with probability min(1, e^{-beta dE}). During
    burn-in each chain's step adapts towards ``target_acceptance``; afterwards it is fixed,
    so the recorded chain is a true Markov chain. Unlike heat-bath Gibbs this samples the
    joint law at any beta, including beta = lam.

    Parameters
    ----------
    J : array_like, shape (N, N, d, d)
    lam, beta : float
        The softmax's inverse temperature in e_i; the sampling inverse temperature.
    n_chains, n_sweeps, scan, burn_in, thin
        As in :func:`gibbs`.
    step, target_acceptance : float
        Initial proposal scale; the acceptance rate it adapts to during burn-in.
    x0, rng, progress, checkpoint, checkpoint_every, callback
        As in :func:`gibbs`.

    Returns
    -------
    Chains
    """
    cfg = ChainConfig(model="attention", method="metropolis", beta=beta, lam=lam,
                      n_chains=n_chains, n_sweeps=n_sweeps, burn_in=burn_in, thin=thin,
                      scan=scan, seed=_chain_seed(rng, checkpoint), step=step,
                      target_acceptance=target_acceptance)  # fmt: skip
    return _run(cfg, J, x0, checkpoint, check_count(checkpoint_every, "checkpoint_every", 1),
                progress, callback)  # fmt: skip


def _chain_seed(rng, checkpoint) -> int:
    """The int seed in [0, 2^63) that chains run with and record, from any accepted ``rng``
    (None: fresh entropy, or the seed of an existing ``checkpoint`` so that a killed run
    called again with the same arguments resumes)."""
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if not 0 <= rng < 2**63:
            raise ValueError(f"rng must be an int seed in [0, 2**63), got {rng}")
        return int(rng)
    if rng is None and checkpoint is not None and Path(checkpoint).is_file():
        info = io.read(checkpoint)
        if info.kind == CHAIN_KIND and "seed" in info.config:
            return int(info.config["seed"])
    return int(_seed_sequence(rng).generate_state(1, np.uint64)[0] >> np.uint64(1))


# ------------------------------------------------------------------ diagnostics
@dataclass(frozen=True)
class Diagnostics:
    """Convergence of one recorded observable across chains.

    Each attribute is a float for values of shape (n_chains, n_draws), and an array of shape
    ``values.shape[2:]`` (one per component) for values of shape (n_chains, n_draws, ...).

    Attributes
    ----------
    tau : float or ndarray
        Integrated autocorrelation time in draws: n_chains n_draws / ess.
    ess : float or ndarray
        Effective sample size (ArviZ's rank-normalised bulk ESS).
    rhat : float or ndarray
        Rank-normalised split R-hat (ArviZ); near 1 when the chains agree, inf when each
        chain is stuck at its own value.
    """

    tau: float | np.ndarray
    ess: float | np.ndarray
    rhat: float | np.ndarray


def _chain_draw(values) -> np.ndarray:
    """``values`` as a float64 array (chain, draw, ...), its order checked (see diagnostics)."""
    dims = getattr(values, "dims", None)
    if isinstance(dims, tuple) and not isinstance(values, np.ndarray):  # an xarray DataArray
        missing = [k for k in ("chain", "draw") if k not in dims]
        if missing:
            raise ValueError(f"values is a DataArray with dims {dims}; diagnostics needs dims "
                             f"named 'chain' and 'draw' (missing: {missing})")  # fmt: skip
        return np.asarray(values.transpose("chain", "draw", ...).values, dtype=np.float64)
    if dims is not None and not isinstance(values, np.ndarray):
        raise ValueError("values must be an array or an xarray DataArray (one observable); for a "
                         "Dataset pass one of its variables, e.g. ds['energy']")  # fmt: skip
    values = np.asarray(values, dtype=np.float64)
    if values.ndim >= 2 and values.shape[0] > values.shape[1]:
        raise ValueError(
            f"values has shape {values.shape}: more chains ({values.shape[0]}) than draws "
            f"({values.shape[1]}), which looks transposed. diagnostics takes ArviZ's (chain, "
            "draw[, ...]) order, while Chains arrays are (n_records, n_chains, ...): pass "
            "chains.energies.T, or np.moveaxis(a, 1, 0) for more axes. For truly more chains "
            "than draws, pass xarray.DataArray(values, dims=('chain', 'draw'))"
        )
    return values


def diagnostics(values) -> Diagnostics:
    """ESS, integrated autocorrelation time and R-hat of one observable recorded by chains.

    For example ``diagnostics(chains.energies.T)``. Needs ArviZ (``pip install
    "spinsa[sampling]"``), imported on first use.

    Parameters
    ----------
    values : array_like, shape (n_chains, n_draws) or (n_chains, n_draws, ...), or DataArray
        ArviZ's (chain, draw[, ...]) order. :class:`Chains` arrays are (n_records, n_chains,
        ...): pass ``chains.energies.T`` or ``np.moveaxis(chains.magnetisation, 1, 0)``.
        A plain array with more chains than draws looks transposed and is refused; an
        ``xarray.DataArray`` is read by its dims named ``"chain"`` and ``"draw"``, in any
        order and with any shape.

    Returns
    -------
    Diagnostics
        Floats for two axes; arrays of shape ``values.shape[2:]`` for more.

    Raises
    ------
    ValueError
        For fewer than 2 chains ("R-hat needs >= 2 chains"), fewer than 4 draws, a
        transposed-looking array, values that are not finite, and an observable that is
        constant over every chain and draw (ESS and R-hat are undefined for it).
    """
    values = _chain_draw(values)
    if values.ndim == 1:
        raise ValueError(f"R-hat needs >= 2 chains, got one chain of {values.size} draws (shape "
                         f"{values.shape}); pass values of shape (n_chains, n_draws)")  # fmt: skip
    if values.ndim < 2:
        raise ValueError(f"values must have shape (n_chains, n_draws[, ...]), got shape "
                         f"{values.shape}")  # fmt: skip
    n_chains, n_draws = values.shape[:2]
    if n_chains < 2:
        raise ValueError(
            f"R-hat needs >= 2 chains, got {n_chains} (values of shape {values.shape}, in "
            "(chain, draw) order); run 4 or more chains"
        )
    if n_draws < 4:
        raise ValueError(f"diagnostics needs at least 4 draws per chain, got {n_draws} (values "
                         f"of shape {values.shape}, in (chain, draw) order)")  # fmt: skip
    check_finite(values, "values")
    flat = values.reshape(n_chains, n_draws, -1)
    constant = np.ptp(flat, axis=(0, 1)) == 0
    if constant.any():
        where = tuple(int(i) for i in np.unravel_index(int(np.argmax(constant)), values.shape[2:]))
        at = f" at index {where}" if values.ndim > 2 else ""
        raise ValueError(
            f"values{at} are constant (every draw of every chain is "
            f"{flat[0, 0, int(np.argmax(constant))]:g}): the ESS, tau and R-hat of a constant "
            "observable are undefined"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import arviz
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError('diagnostics need ArviZ: pip install "spinsa[sampling]"') from err
    with np.errstate(divide="ignore", invalid="ignore"):
        ess = np.array([arviz.ess(flat[:, :, k], method="bulk") for k in range(flat.shape[2])])
        rhat = np.array([arviz.rhat(flat[:, :, k], method="rank") for k in range(flat.shape[2])])
    # chains each stuck at its own value: no variance within, some between (ArviZ: NaN)
    rhat[np.ptp(flat, axis=1).max(axis=0) == 0] = np.inf
    if np.isnan(ess).any() or np.isnan(rhat).any():  # pragma: no cover - ArviZ's own limits
        raise ValueError(f"ArviZ gave ESS {ess} and R-hat {rhat} (NaN) for values of shape "
                         f"{values.shape}")  # fmt: skip
    tau = n_chains * n_draws / ess

    def shaped(a):
        return float(a[0]) if values.ndim == 2 else a.reshape(values.shape[2:])

    return Diagnostics(tau=shaped(tau), ess=shaped(ess), rhat=shaped(rhat))
