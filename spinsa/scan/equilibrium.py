"""The ``"equilibrium"`` point kind: retrieval of stored patterns at a temperature, sampled by
the Monte Carlo chains of :mod:`spinsa.sampling` (docs/sampling.md, 'An equilibrium study').

P random patterns xi^mu of N unit spins in R^d are stored in Hebbian couplings; chains start
near the patterns (chain c near pattern c mod P) and run at temperature T; a point records
how much of its pattern each chain keeps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from spinsa._checks import check_choice, check_count, check_positive, check_real
from spinsa._config import config_from_dict

__all__ = ["EquilibriumConfig", "equilibrium_couplings", "equilibrium_summary"]


@dataclass(frozen=True)
class EquilibriumConfig:
    """Config of the ``"equilibrium"`` point.

    Models and temperature (beta = 1 / ``temperature``):

    - ``model="twobody"``: heat-bath Gibbs of the law e^{-beta E}, E = -1/2 sum_{i != j}
      x_i . J_ij x_j, with J_ij = (d / N) sum_mu xi_i^mu xi_j^mu^T: Hopfield's couplings
      for spins of length sqrt(d), so that retrieval at small load is lost near T = 1 for
      every d (mean field: m = A_d(d beta m));
    - ``model="attention"``: the attention model with J_ij = d sum_mu xi_i^mu xi_j^mu^T
      (a stored pattern scores d per pair: the softmax picks among its N - 1 copies);
      ``sampler="gibbs"``: its heat-bath conditionals at beta = lam = 1 / T (``lam`` is
      then unused); ``sampler="metropolis"``: the joint law e^{-beta E} of its energy
      E = sum_i e_i(x; J, lam) at fixed ``lam``.

    Attributes
    ----------
    model : {"twobody", "attention"}
    sampler : {"gibbs", "metropolis"}
        Metropolis samples the attention model only.
    n_tokens, n_patterns, d : int
        N, P (the load alpha = P / N) and the spin dimension.
    temperature : float
        T = 1 / beta > 0.
    lam : float
        The attention model's softmax inverse temperature under Metropolis.
    n_chains, n_sweeps, burn_in, thin : int
        Chains (independent replicas: the standard errors are over them), recorded sweeps
        after ``burn_in``, one record every ``thin`` sweeps.
    start_noise : float
        Gaussian noise per spin component added to a chain's pattern at the start.
    site_order : {"systematic", "random"}
        The chains' scan (a key ``scan`` would clash with a scan file's ``[scan]`` table).
    seed : int
        Seed of the patterns, the starts and the chains.
    """

    model: Literal["twobody", "attention"] = "twobody"
    sampler: Literal["gibbs", "metropolis"] = "gibbs"
    n_tokens: int = 64
    n_patterns: int = 2
    d: int = 1
    temperature: float = 0.5
    lam: float = 1.0
    n_chains: int = 16
    n_sweeps: int = 200
    burn_in: int = 100
    thin: int = 2
    start_noise: float = 0.2
    site_order: Literal["systematic", "random"] = "systematic"
    seed: int = 0

    def __post_init__(self):
        check_choice(self.model, "model", ("twobody", "attention"))
        check_choice(self.sampler, "sampler", ("gibbs", "metropolis"))
        check_choice(self.site_order, "site_order", ("systematic", "random"))
        check_count(self.n_tokens, "n_tokens", 2)
        check_count(self.n_patterns, "n_patterns", 1)
        check_count(self.d, "d", 1)
        check_positive(self.temperature, "temperature")
        check_positive(self.lam, "lam")
        check_count(self.n_chains, "n_chains", 2)
        check_count(self.n_sweeps, "n_sweeps", 1)
        check_count(self.burn_in, "burn_in", 0)
        check_count(self.thin, "thin", 1)
        if self.n_sweeps < self.thin:
            raise ValueError(f"n_sweeps ({self.n_sweeps}) must be >= thin ({self.thin}): "
                             "no record would be taken")  # fmt: skip
        if check_real(self.start_noise, "start_noise") < 0:
            raise ValueError(f"start_noise must be >= 0, got {self.start_noise}")
        check_count(self.seed, "seed", 0)
        if self.sampler == "metropolis" and self.model != "attention":
            raise ValueError("sampler = 'metropolis' samples the attention model; the "
                             "two-body model's heat bath (gibbs) is exact at any beta")  # fmt: skip


def equilibrium_couplings(xi: np.ndarray, model: str) -> np.ndarray:
    """The Hebbian couplings of :class:`EquilibriumConfig`, shape (N, N, d, d), float64.

    ``xi`` (P, N, d): J_ij = c sum_mu xi_i^mu xi_j^mu^T (zero diagonal blocks), with
    c = d / N for ``"twobody"`` and c = d for ``"attention"``.
    """
    from spinsa.couplings import hebbian_couplings

    P, N, d = xi.shape
    scale = P * d / N if model == "twobody" else P * d
    return hebbian_couplings(np.asarray(xi, np.float64)) * scale


def _starts(xi: np.ndarray, n_chains: int, noise: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """Chain c starts at pattern c mod P plus noise, back on the sphere (d = 1: a sign)."""
    which = np.arange(n_chains) % xi.shape[0]
    x0 = xi[which] + noise * rng.standard_normal((n_chains, *xi.shape[1:]))
    norms = np.linalg.norm(x0, axis=-1, keepdims=True)
    return np.where(norms > 0, x0 / np.where(norms > 0, norms, 1), xi[which]), which


def equilibrium_summary(config: EquilibriumConfig) -> dict[str, np.ndarray]:
    """Run one equilibrium point in memory: its ``/summary`` arrays.

    With m_mu = (1/N) sum_i xi_i^mu . x_i in every record after burn-in:

    - ``overlap``, ``overlap_sem``: m of the pattern each chain started near, averaged over
      the records of a chain, then over the chains (mean and standard error over chains);
    - ``max_overlap``, ``max_overlap_sem``: the same for max_mu |m_mu| (a chain that moved
      to another pattern, or to its mirror image -xi, still counts);
    - ``overlap_norm``, ``overlap_norm_sem``: the same for (sum_mu m_mu^2)^(1/2). For d >= 2
      the patterns' sites span planes, and the states x_i ~ cos(t) xi_i^1 + sin(t) xi_i^2
      have nearly the energy of a pattern: chains drift among such mixtures, which lowers
      ``overlap`` but not ``overlap_norm``;
    - ``paramagnetic_overlap``, ``paramagnetic_max_overlap``, ``paramagnetic_overlap_norm``:
      the same quantities for uniform random spins (400 draws; E|m| ~ sqrt(2 / (pi N d))):
      where they go when nothing is retrieved;
    - ``energy``: the mean energy per spin; ``acceptance``: Metropolis's acceptance rate
      (1 for heat bath); ``alpha``: P / N; ``beta``: 1 / T.
    """
    from spinsa import sampling
    from spinsa.datasets import correlated_patterns

    c = config
    rng = np.random.default_rng(c.seed)
    xi = correlated_patterns(c.n_patterns, c.n_tokens, c.d, 0.0, seed=rng).astype(np.float64)
    J = equilibrium_couplings(xi, c.model)
    x0, which = _starts(xi, c.n_chains, c.start_noise, rng)
    beta = 1.0 / c.temperature
    common = dict(n_chains=c.n_chains, n_sweeps=c.n_sweeps, scan=c.site_order,
                  burn_in=c.burn_in, thin=c.thin, x0=x0, rng=c.seed)  # fmt: skip
    if c.sampler == "metropolis":
        chains = sampling.metropolis(J, c.lam, beta, **common)
    else:
        chains = sampling.gibbs(J, beta, model=c.model, **common)
    m = np.einsum("rcia,pia->rcp", chains.records, xi) / c.n_tokens  # (R, C, P)
    own = m[:, np.arange(c.n_chains), which].mean(axis=0)  # (C,)
    best = np.abs(m).max(axis=2).mean(axis=0)
    norm = np.sqrt((m**2).sum(axis=2)).mean(axis=0)
    sem = np.sqrt(c.n_chains)
    floor = _random_overlaps(xi, rng)
    return {
        "overlap": np.float64(own.mean()),
        "overlap_sem": np.float64(own.std(ddof=1) / sem),
        "max_overlap": np.float64(best.mean()),
        "max_overlap_sem": np.float64(best.std(ddof=1) / sem),
        "overlap_norm": np.float64(norm.mean()),
        "overlap_norm_sem": np.float64(norm.std(ddof=1) / sem),
        **{f"paramagnetic_{k}": np.float64(v) for k, v in floor.items()},
        "energy": np.float64(chains.energies.mean() / c.n_tokens),
        "acceptance": np.float64(chains.acceptance.mean()),
        "alpha": np.float64(c.n_patterns / c.n_tokens),
        "beta": np.float64(beta),
    }


def _random_overlaps(xi: np.ndarray, rng, n: int = 400) -> dict[str, float]:
    """E|m_0|, E max_mu |m_mu| and E (sum_mu m_mu^2)^(1/2) over ``n`` uniform random spin
    configurations (the patterns' own, fixed ``xi``)."""
    P, N, d = xi.shape
    x = rng.standard_normal((n, N, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    m = np.einsum("kia,pia->kp", x, xi) / N
    return {"overlap": np.abs(m[:, 0]).mean(), "max_overlap": np.abs(m).max(1).mean(),
            "overlap_norm": np.sqrt((m**2).sum(1)).mean()}  # fmt: skip


def run_equilibrium_point(config: Mapping[str, Any], out_path: os.PathLike) -> None:
    """The ``"equilibrium"`` point: its summary written to ``out_path``."""
    from spinsa import io

    cfg = config_from_dict(EquilibriumConfig, config)
    io.write_file(out_path, {"summary": equilibrium_summary(cfg)}, kind="scan-point",
                  config=cfg, seeds={"seed": cfg.seed})  # fmt: skip
