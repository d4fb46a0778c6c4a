"""The vector-spin model of self-attention (docs/model.md): energies, attention, fields, dynamics.

Spins ``x`` have shape (P, N, d): P samples, N tokens, a spin in R^d per token. Couplings
``J`` have shape (N, N, d, d); the diagonal blocks ``J[i, i]`` never enter (j != i
everywhere). With scores ``s_ij = x_i . J_ij x_j`` and inverse temperature ``lam``:

    alpha_ij = exp(lam s_ij) / sum_{k != i} exp(lam s_ik)
    e_i      = -(1/lam) log sum_{j != i} exp(lam s_ij)
    h_i      = sum_{j != i} alpha_ij J_ij x_j = -de_i/dx_i
    x_i(t+1) = Norm(h_i(x(t)) + gamma x_i(t))

Computation is float32 unless an input is float64. Memory stays O(P N d + N^2 d^2): the
kernels never form a P x N x N x d array (``attention`` returns P x N x N by definition).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from spinsa import _draw, _torch_dynamics
from spinsa._checks import (
    check_choice,
    check_count,
    check_lam,
    check_lam_gamma,
    check_positive,
    check_real,
    check_result,
    check_spins_couplings,
    import_xarray,
)
from spinsa._progress import progress as progress_bar
from spinsa.kernels import dynamics as _k

NORMS = tuple(_k.NORM_CODES)
UPDATES = ("sync", "async")


@dataclass(frozen=True)
class DynamicsConfig:
    """Parameters of a run of the dynamics.

    Attributes
    ----------
    lam : float
        Inverse temperature of the softmax, > 0.
    gamma : float
        Weight of the residual term: x(t+1) = Norm(h + gamma x).
    norm : {"sphere", "layernorm", "none"}
        Normalisation after each update.
    update : {"sync", "async"}
        All sites at once (a transformer layer) or random sequential, one site at a time.
    seed : int or None
        Seed of the site order of the asynchronous update (unused when synchronous).
    """

    lam: float = 1.0
    gamma: float = 1.0
    norm: Literal["sphere", "layernorm", "none"] = "sphere"
    update: Literal["sync", "async"] = "sync"
    seed: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "lam", check_positive(self.lam, "lam"))
        object.__setattr__(self, "gamma", check_real(self.gamma, "gamma"))
        check_choice(self.norm, "norm", NORMS)
        check_choice(self.update, "update", UPDATES)
        if self.seed is not None:
            object.__setattr__(self, "seed", check_count(self.seed, "seed"))


@dataclass(frozen=True)
class Trajectory:
    """The result of :func:`run`.

    Attributes
    ----------
    states : ndarray, shape (n_records, P, N, d)
        Spins at the recorded times.
    times : ndarray of int, shape (n_records,)
        The recorded times; always includes 0 and the last step.
    energies : ndarray, shape (n_steps + 1, P)
        Total energy E(x(t)) = sum_i e_i at every t = 0 .. n_steps.
    config : DynamicsConfig
        The parameters of the run.
    """

    states: np.ndarray
    times: np.ndarray
    energies: np.ndarray
    config: DynamicsConfig = field(default_factory=DynamicsConfig)

    @property
    def final(self) -> np.ndarray:
        """The last state, shape (P, N, d)."""
        return self.states[-1]

    @property
    def n_steps(self) -> int:
        return int(self.times[-1])

    def to_dict(self) -> dict:
        """The config as a plain dict (for HDF5 attrs)."""
        return asdict(self.config)

    def to_xarray(self):
        """The trajectory as an ``xarray.Dataset``: ``states`` on dimensions (t, P, N, d)
        with the recorded times as the coordinate ``t``, ``energies`` on (step, P) for every
        step 0 .. n_steps, the config as attributes.

        Returns
        -------
        xarray.Dataset
        """
        xr = import_xarray()
        return xr.Dataset(
            {
                "states": (("t", "P", "N", "d"), self.states),
                "energies": (("step", "P"), self.energies),
            },
            coords={"t": self.times, "step": np.arange(self.energies.shape[0])},
            attrs=asdict(self.config),
        )

    def to_dataframe(self):
        """The energies as a ``pandas.DataFrame``: one row per (step, sample), the column
        ``energy``.

        Returns
        -------
        pandas.DataFrame
        """
        return self.to_xarray()["energies"].rename("energy").to_dataframe()

    def plot(self, ax=None, *, max_lines: int = 20):
        """The total energy E(x(t)) of each sample against t (thin lines, at most
        ``max_lines`` of them) and their mean (black).

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        max_lines : int
            Samples drawn one by one at most.

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax)
        steps = np.arange(self.energies.shape[0])
        for p in range(min(self.energies.shape[1], int(max_lines))):
            ax.plot(steps, self.energies[:, p], color="C0", lw=0.8, alpha=0.5)
        ax.plot(steps, self.energies.mean(axis=1), color="k", lw=1.6, label="mean over samples")
        cfg = self.config
        title = f"energy along the dynamics (λ = {cfg.lam:g}, {cfg.update}, {cfg.norm})"
        _draw.finish(ax, title, ylabel="E(x(t))")
        return ax


# ----------------------------------------------------------------------------- fields
def _fields_and_energies(x, J, lam, clamp=np.inf, fields=True):
    """The fields in tiles (None where ``fields`` is False: the energies alone, faster) and
    the site energies in tiles."""
    Xt = _k.to_tiles(x)
    out = _k.tiles_like(Xt) if fields else None
    Et = np.empty(Xt.shape[:2] + Xt.shape[3:], dtype=x.dtype)
    _k.sweep(Xt, J, lam, clamp, 0.0, 0, False, out, Et)
    return out, Et


def local_fields(x, J, lam, *, score_clamp=None) -> np.ndarray:
    """Attention fields h_i = sum_{j != i} alpha_ij J_ij x_j.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Spins.
    J : array_like, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    lam : float
        Inverse temperature, > 0.
    score_clamp : float, optional
        Clamp the scores from above, s_ij -> min(s_ij, score_clamp), before ``lam`` (the
        published notebook's guard against overflow). None: no clamp.

    Returns
    -------
    ndarray, shape (P, N, d)
        The fields; equal to -de_i/dx_i.
    """
    x, J = check_spins_couplings(x, J)
    lam = check_lam(lam, x, J)
    clamp = np.inf if score_clamp is None else check_real(score_clamp, "score_clamp")
    out, _ = _fields_and_energies(x, J, lam, clamp)
    return _k.from_tiles(out, x.shape[0])


def site_energies(x, J, lam) -> np.ndarray:
    """Site energies e_i = -(1/lam) log sum_{j != i} exp(lam x_i . J_ij x_j).

    Parameters
    ----------
    x : array_like, shape (P, N, d)
    J : array_like, shape (N, N, d, d)
    lam : float

    Returns
    -------
    ndarray, shape (P, N)
    """
    x, J = check_spins_couplings(x, J)
    lam = check_lam(lam, x, J)
    _, Et = _fields_and_energies(x, J, lam, fields=False)
    out = _k.energies_from_tiles(Et, x.shape[0])
    check_result(out, "the site energies", f"lam = {lam:g} with these spins and couplings")
    return out


def energy(x, J, lam) -> np.ndarray:
    """Total energy E(x) = sum_i e_i(x), shape (P,) for x of shape (P, N, d)."""
    return site_energies(x, J, lam).sum(axis=1)


def attention(x, J, lam) -> np.ndarray:
    """Attention weights alpha_ij; rows sum to 1 and the diagonal is 0.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
    J : array_like, shape (N, N, d, d)
    lam : float

    Returns
    -------
    ndarray, shape (P, N, N)
    """
    x, J = check_spins_couplings(x, J)
    lam = check_lam(lam, x, J)
    out = np.empty((x.shape[0], x.shape[1], x.shape[1]), dtype=x.dtype)
    _k.attention(x, J, lam, out)
    return out


# --------------------------------------------------------------------------- dynamics
def step(x, J, lam, gamma=1.0, norm="sphere") -> np.ndarray:
    """One synchronous update x_i <- Norm(h_i(x) + gamma x_i) of every site.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
    J : array_like, shape (N, N, d, d)
    lam : float
    gamma : float, default 1
    norm : {"sphere", "layernorm", "none"}
        ``sphere`` divides by |x_i| (a zero spin stays zero), ``layernorm`` subtracts the
        mean of the d components and divides by their standard deviation (eps 1e-5).

    Returns
    -------
    ndarray, shape (P, N, d)
    """
    cfg = DynamicsConfig(lam=lam, gamma=gamma, norm=norm)
    x, J = check_spins_couplings(x, J)
    check_lam_gamma(lam, gamma, x, J)
    Xt = _k.to_tiles(x)
    out = _k.tiles_like(Xt)
    Et = np.empty(Xt.shape[:2] + Xt.shape[3:], dtype=x.dtype)
    _k.sweep(Xt, J, cfg.lam, np.inf, cfg.gamma, _k.NORM_CODES[cfg.norm], True, out, Et)
    return _k.from_tiles(out, x.shape[0])


def async_sweep(
    x, J, lam, gamma=1.0, norm="sphere", rng=None, *, order=None, return_order: bool = False
):
    """One asynchronous sweep: N single-site updates in a random order.

    Each site i, in a random permutation drawn from ``rng`` (or in ``order``), is set to
    Norm(h_i(x) + gamma x_i) with the field of the current state, so later sites see the
    earlier updates. All samples use the same permutation.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
    J : array_like, shape (N, N, d, d)
    lam, gamma, norm
        As in :func:`step`.
    rng : numpy.random.Generator or int or None
        The source of the site order (unused when ``order`` is given).
    order : array_like of int, shape (N,), optional
        The site order to use, a permutation of 0 .. N-1 (to replay a sweep).
    return_order : bool
        Also return the order used.

    Returns
    -------
    ndarray, shape (P, N, d)
        The state after the sweep.
    order : ndarray of int64, shape (N,)
        The sites in the order they were updated; only with ``return_order=True``.
    """
    cfg = DynamicsConfig(lam=lam, gamma=gamma, norm=norm, update="async")
    x, J = check_spins_couplings(x, J)
    check_lam_gamma(lam, gamma, x, J)
    if order is None:
        order = np.random.default_rng(rng).permutation(x.shape[1]).astype(np.int64)
    else:
        order = _check_order(order, x.shape[1])
    Xt = _k.to_tiles(x)
    _k.async_sweep(Xt, J, cfg.lam, np.inf, cfg.gamma, _k.NORM_CODES[cfg.norm], order)
    out = _k.from_tiles(Xt, x.shape[0])
    return (out, order) if return_order else out


def _check_order(order, N: int) -> np.ndarray:
    """A site order: a permutation of 0 .. N-1, as int64 (the kernel trusts it)."""
    a = np.asarray(order)
    if (
        a.shape != (N,)
        or not np.issubdtype(a.dtype, np.integer)
        or not np.array_equal(np.sort(a), np.arange(N))
    ):
        raise ValueError(
            f"order must be a permutation of the {N} sites 0 .. {N - 1} (an int array of shape "
            f"({N},)), got {a.dtype} array of shape {a.shape}"
        )
    return np.ascontiguousarray(a, dtype=np.int64)


def run(
    x0,
    J,
    lam,
    steps,
    gamma=1.0,
    norm="sphere",
    record_every=1,
    update="sync",
    seed=None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    progress: bool = False,
    device: str | None = None,
) -> Trajectory:
    """Iterate the dynamics for ``steps`` steps from ``x0``.

    Parameters
    ----------
    x0 : array_like, shape (P, N, d)
        Initial spins.
    J : array_like, shape (N, N, d, d)
        Couplings.
    lam : float
        Inverse temperature (lam_eval), > 0.
    steps : int
        Number of steps (synchronous updates, or asynchronous sweeps), >= 0. With 0 nothing
        runs: the trajectory holds the start state alone (``times == [0]``, ``final`` is
        ``x0``) and its energy, the t = 0 point of a scan over ``steps``.
    gamma, norm
        As in :func:`step`.
    record_every : int, default 1
        Keep the state every ``record_every`` steps (and always at t = 0 and t = steps).
    update : {"sync", "async"}
        Synchronous updates or random sequential sweeps (see :func:`async_sweep`).
    seed : int or None
        Seed of the asynchronous site orders.
    callback : callable, optional
        ``callback(t, x)`` after every step with the state x(t) of shape (P, N, d).
    progress : bool
        Show a progress bar.
    device : str, optional
        Where the dynamics runs: None or ``"numba"``, the CPU kernels (the default);
        ``"cpu"``, ``"cuda"``, ``"cuda:<k>"``, torch on that device; ``"auto"``, torch on
        CUDA when a GPU is seen, else numba. The same results to rounding, as numpy arrays.

    Returns
    -------
    Trajectory
        ``states`` (n_records, P, N, d), ``times``, ``energies`` (steps + 1, P), ``config``.
    """
    cfg = DynamicsConfig(lam=lam, gamma=gamma, norm=norm, update=update, seed=seed)
    steps = check_count(steps, "steps")
    record_every = check_count(record_every, "record_every", minimum=1)
    x0, J = check_spins_couplings(x0, J, x_name="x0")
    check_lam_gamma(lam, gamma, x0, J)
    dev = _torch_dynamics.dynamics_device(device)
    if dev is not None:
        return _run_torch(x0, J, cfg, steps, record_every, callback, progress, dev)
    P = x0.shape[0]
    norm_code = _k.NORM_CODES[cfg.norm]
    rng = np.random.default_rng(cfg.seed)

    Xt = _k.to_tiles(x0)
    new = _k.tiles_like(Xt)
    Et = np.empty(Xt.shape[:2] + Xt.shape[3:], dtype=x0.dtype)
    Jb = _k.sweep_bounds(Xt, J)
    energies = np.empty((steps + 1, P), dtype=np.float64)
    times = np.array([0, *(t for t in range(1, steps + 1) if t % record_every == 0 or t == steps)])
    states = np.empty((times.size, *x0.shape), dtype=x0.dtype)  # one allocation for all records
    states[0] = x0
    n_recorded = 1

    def total_energy():
        return _k.energies_from_tiles(Et, P).sum(axis=1, dtype=np.float64)

    with progress_bar(steps, "dynamics", "step", enabled=progress) as bar:  # closed on error too
        for t in range(1, steps + 1):
            if cfg.update == "sync":
                # also the energies of x(t - 1)
                _k.sweep(Xt, J, cfg.lam, np.inf, cfg.gamma, norm_code, True, new, Et, Jb)
                Xt, new = new, Xt
            else:
                _k.sweep(Xt, J, cfg.lam, np.inf, 0.0, 0, False, None, Et, Jb)  # E only
                order = rng.permutation(x0.shape[1]).astype(np.int64)
                _k.async_sweep(Xt, J, cfg.lam, np.inf, cfg.gamma, norm_code, order)
            energies[t - 1] = total_energy()
            if n_recorded < times.size and times[n_recorded] == t:
                x = _k.from_tiles(Xt, P, out=states[n_recorded])
                n_recorded += 1
            elif callback is not None:
                x = _k.from_tiles(Xt, P)
            if callback is not None:
                callback(t, x)
            bar.update()
    _k.sweep(Xt, J, cfg.lam, np.inf, 0.0, 0, False, None, Et, Jb)  # E of the final state
    energies[steps] = total_energy()
    _check_trajectory(states, energies, cfg)
    return Trajectory(
        states=states,
        times=np.asarray(times, dtype=np.int64),
        energies=energies,
        config=cfg,
    )


def _run_torch(x0, J, cfg, steps, record_every, callback, progress, dev) -> Trajectory:
    """:func:`run` on a torch device (:mod:`spinsa._torch_dynamics`), checked arguments."""
    with progress_bar(steps, f"dynamics ({dev.type})", "step", enabled=progress) as bar:
        states, times, energies = _torch_dynamics.design_run(
            x0, J, cfg.lam, cfg.gamma, cfg.norm, cfg.update, steps, dev,
            seed=cfg.seed, record_every=record_every, callback=callback, bar=bar,
        )  # fmt: skip
    _check_trajectory(states, energies, cfg)
    return Trajectory(states=states, times=times, energies=energies, config=cfg)


def _check_trajectory(states, energies, cfg) -> None:
    """The states and energies of a run are finite, else an error naming the parameters."""
    # norm='none' lets the spins grow step by step beyond what the checks of x0 bound
    cause = f"lam = {cfg.lam:g}, gamma = {cfg.gamma:g}, norm = {cfg.norm!r}; use norm='sphere'"
    check_result(states, "the states of the dynamics", cause)
    check_result(energies, "the energies of the dynamics", cause)
