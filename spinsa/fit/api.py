"""``fit_pseudolikelihood``: validate, initialise, resume, dispatch to a backend, report.

The backends sit behind one table (:data:`BACKENDS`); each receives validated patterns, a
:class:`~spinsa.fit.checkpoint.FitState` (fresh or loaded from a checkpoint) and a driver
(:class:`_Run`) that records the history, shows the progress bar, calls the user's callback
and writes checkpoints.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from spinsa._checks import check_couplings, check_fit_inputs, check_fit_result, check_result
from spinsa._files import data_fingerprint
from spinsa._progress import progress as progress_bar
from spinsa._torch import resolve_device
from spinsa.damico import standardize_features
from spinsa.fit.checkpoint import FitState, load_checkpoint, save_checkpoint
from spinsa.fit.config import FitConfig, NormWarning
from spinsa.fit.memory import estimate_memory
from spinsa.fit.monitor import EpochMonitor, split_validation
from spinsa.fit.objective import check_patterns, frobenius, row_norms
from spinsa.fit.result import HISTORY, FitResult

__all__ = ["fit_pseudolikelihood", "initial_couplings", "BACKENDS"]


def _fit_torch(xi, state, config, run):
    from spinsa.fit.minibatch import fit_torch

    fit_torch(xi, state, config, run)


def _fit_lbfgs(xi, state, config, run):
    from spinsa.fit.lbfgs import fit_lbfgs

    fit_lbfgs(xi, state, config, run)


# name -> solver(xi, state, config, run); FitConfig validates the name against this table
BACKENDS: dict[str, Callable] = {"torch": _fit_torch, "lbfgs": _fit_lbfgs}


def initial_couplings(n_tokens: int, d: int, init: str, rng: np.random.Generator, dtype):
    """Random initial couplings with zero diagonal blocks, shape (N, N, d, d).

    ``"uniform"``: U(-1/2, 1/2)/d² entry-wise (the published notebook's initialisation);
    ``"normal"``: N(0, 1/(d²(N-1))) entry-wise, so that every row has norm about 1.
    """
    shape = (n_tokens, n_tokens, d, d)
    if init == "uniform":
        J = (rng.random(shape) - 0.5) / d**2
    elif init == "normal":
        J = rng.standard_normal(shape) / (d * np.sqrt(n_tokens - 1))
    else:
        raise ValueError(f"init must be one of 'uniform', 'normal'; got {init!r}")
    J[np.arange(n_tokens), np.arange(n_tokens)] = 0.0
    return np.ascontiguousarray(J, dtype=dtype)


class _Run:
    """Records steps and epochs into the state, reports progress, writes checkpoints."""

    def __init__(
        self, state, config, checkpoint, fingerprint, callback, progress, total_steps,
        monitor=None,
    ):  # fmt: skip
        self.state, self.config = state, config
        self.monitor = monitor  # EpochMonitor of an epoch fit (torch backend), else None
        self.checkpoint, self.fingerprint = checkpoint, fingerprint
        self.callback = callback
        self._t0 = time.perf_counter()
        self._wall0 = state.wall_time
        self._seen0 = state.n_samples_seen
        self.bar = progress_bar(
            total_steps,
            f"fit ({config.backend})",
            "step",
            enabled=progress,
            initial=min(state.step, total_steps),
        )

    def _elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def record_step(self, loss: float, grad_norm: float, norm: float, get_J) -> None:
        s = self.state
        s.step += 1
        s.step_loss.append(loss)
        s.step_grad_norm.append(grad_norm)
        s.step_norm.append(norm)
        rate = (s.n_samples_seen - self._seen0) / max(self._elapsed(), 1e-9)
        self.bar.set_postfix(
            loss=f"{loss:.5g}", grad=f"{grad_norm:.3g}", samples_s=f"{rate:.3g}", refresh=False
        )
        self.bar.update(1)
        if self.callback is not None:
            self.callback(s.step, get_J())

    def record_epoch(self, loss: float, grad_norm: float, J=None) -> None:
        """The full-batch loss and gradient norm; with an epoch monitor and the couplings
        ``J``, the validation loss too."""
        self.state.epoch_loss.append(loss)
        self.state.epoch_grad_norm.append(grad_norm)
        if self.monitor is not None and J is not None:
            self.monitor.record(self.state, loss, J)

    def stop_early(self) -> bool:
        """Whether an epoch fit stops now (early stopping on, its criterion met)."""
        return self.monitor is not None and self.monitor.should_stop(self.state)

    def finish_epochs(self) -> None:
        """Record an epoch fit's convergence (criterion, converged, epochs, message)."""
        self.state.finished = True
        if self.monitor is not None:
            self.monitor.finish(self.state)

    def end_of_epoch(self, checkpoint_now: bool) -> None:
        self.state.wall_time = self._wall0 + self._elapsed()
        if checkpoint_now and self.checkpoint is not None:
            save_checkpoint(self.checkpoint, self.state, self.config, self.fingerprint)


def _build_config(config, preset, options) -> FitConfig:
    if config is not None:
        if not isinstance(config, FitConfig):
            raise ValueError(f"config must be a FitConfig, got {type(config).__name__}")
        if preset is not None:
            raise ValueError("pass either config or preset, not both")
        return dataclasses.replace(config, **options) if options else config
    return FitConfig.from_preset(preset, **options)


def _targets(J: np.ndarray, config: FitConfig) -> np.ndarray:
    if config.constraint == "global":
        value = config.norm if config.norm is not None else frobenius(J)
        if not value > 0:
            raise ValueError(
                "the initial couplings are zero, so their norm cannot be kept; "
                "give norm=... or non-zero J0"
            )
        return np.array([value])
    if config.constraint == "row":
        if config.norm is not None:
            return np.full(J.shape[0], config.norm)
        norms = row_norms(J)
        if not (norms > 0).all():
            raise ValueError(
                f"rows {np.flatnonzero(norms == 0).tolist()} of the initial "
                "couplings are zero, so their norms cannot be kept; give norm=..."
            )
        return norms
    return np.zeros(0)


def _apply_targets(J: np.ndarray, targets: np.ndarray, constraint: str) -> np.ndarray:
    if constraint == "global":
        return (J * (targets[0] / frobenius(J))).astype(J.dtype)
    if constraint == "row":
        norms = row_norms(J)
        if not (norms > 0).all():
            raise ValueError(
                f"rows {np.flatnonzero(norms == 0).tolist()} of J0 are zero; "
                "a row of fixed norm needs a non-zero starting point"
            )
        return (J * (targets / norms)[:, None, None, None]).astype(J.dtype)
    return J


def _total_steps(P: int, config: FitConfig) -> int:
    if config.backend == "torch":
        return config.epochs * -(-P // min(config.batch_size, P))
    return config.max_iter


def _check_factored(config: FitConfig, J0, d: int) -> None:
    """Factored couplings start from random factors of a rank that fits in d."""
    if config.couplings == "full":
        return
    if J0 is not None:
        raise ValueError(
            f"couplings={config.couplings!r} starts from random factors, not from J0; "
            "leave J0 out (the fit keeps the norm the config's init or norm gives)"
        )
    if config.rank is not None and config.rank > d:
        raise ValueError(
            f"rank must be <= d = {d} (a d x d block has rank <= d), got {config.rank}"
        )


def _check_J0(J0, N: int, d: int, dtype) -> np.ndarray:
    """A checked copy of J0 with zero diagonal blocks (a warning if they were not)."""
    J0 = check_couplings(J0, N, d, dtype=dtype, name="J0").copy()
    diag = J0[np.arange(N), np.arange(N)]
    if np.any(diag != 0):
        warnings.warn(
            "J0 has non-zero diagonal blocks J0[i, i]; they are set to zero",
            UserWarning,
            stacklevel=3,  # the caller of fit_pseudolikelihood
        )
        J0[np.arange(N), np.arange(N)] = 0.0
    return J0


def _checkpoint_path(checkpoint) -> Path | None:
    """``checkpoint`` as a path in a directory that exists, or None."""
    if checkpoint is None:
        return None
    checkpoint = Path(checkpoint)
    if not checkpoint.parent.is_dir():
        raise FileNotFoundError(
            f"cannot checkpoint to {checkpoint}: directory {checkpoint.parent} does not exist"
        )
    return checkpoint


def _saved_state(checkpoint: Path, config: FitConfig, fingerprint: str, N: int, d: int):
    """The state in an existing checkpoint, refused if not of this config, data and shape."""
    state = load_checkpoint(checkpoint, config, fingerprint)
    dtype = config.np_dtype
    if state.J.shape != (N, N, d, d) or state.J.dtype != dtype:
        raise ValueError(
            f"checkpoint {checkpoint} holds couplings of shape "
            f"{state.J.shape} {state.J.dtype}, not ({N}, {N}, {d}, {d}) "
            f"{dtype}"
        )
    return state


def _note_initial_norm(J: np.ndarray, config: FitConfig) -> None:
    """Warn that a fixed norm was left to the random initial couplings (a preset's choice
    is its own, documented one)."""
    if config.norm is not None or config.preset is not None:
        return
    if config.constraint not in ("global", "row"):
        return
    N, d = J.shape[0], J.shape[2]
    if config.constraint == "global":
        value = f"|J| = {frobenius(J):.3g}"
    else:
        value = f"row norms |J_i| ~ {float(np.median(row_norms(J))):.3g}"
    warnings.warn(
        f"constraint={config.constraint!r} with norm=None keeps the random initial couplings' "
        f"norm, {value} (init={config.init!r}, N={N}, d={d}); with lam={config.lam:g} it "
        "decides how far the fit is from Hebbian (docs/tutorial.md, 'The coupling norm'). "
        "Pass norm=... to choose it (or J0=...; on the command line --set fit.norm=...)",
        NormWarning,
        stacklevel=4,
    )


def _new_state(J0, N: int, d: int, config: FitConfig) -> FitState:
    """The state of a new fit: J0 (default: random from ``init`` and ``seed``) brought to the
    norm(s) kept, and the generator of the loop."""
    init_seq, loop_seq = np.random.SeedSequence(config.seed).spawn(2)
    if J0 is None:
        J0 = initial_couplings(N, d, config.init, np.random.default_rng(init_seq), config.np_dtype)
        _note_initial_norm(J0, config)
    targets = _targets(J0, config)
    J0 = _apply_targets(J0, targets, config.constraint)
    return FitState(
        J=np.ascontiguousarray(J0),
        targets=targets,
        rng_state=np.random.default_rng(loop_seq).bit_generator.state,
    )


def _solve(xi, state, config, checkpoint, fingerprint, callback, progress) -> None:
    """Run the backend on ``state`` to the end, with a progress bar and a last checkpoint.

    An epoch fit (torch) first holds out its validation split, if any, and gets an
    :class:`~spinsa.fit.monitor.EpochMonitor`; L-BFGS records its own convergence."""
    monitor = None
    if config.backend == "torch":
        xi, xi_val = split_validation(xi, config.validation_fraction, config.seed)
        monitor = EpochMonitor(config, xi_val, -(-len(xi) // min(config.batch_size, len(xi))))
    run = _Run(
        state, config, checkpoint, fingerprint, callback, progress,
        _total_steps(len(xi), config), monitor,
    )  # fmt: skip
    try:
        BACKENDS[config.backend](xi, state, config, run)
    finally:
        run.bar.close()
    run.end_of_epoch(checkpoint_now=True)


def _result(state: FitState, config: FitConfig) -> FitResult:
    return FitResult(
        J=state.J,
        config=config,
        **{k: getattr(state, k) for k in HISTORY},
        wall_time=state.wall_time,
        device=state.device,
        converged=state.converged,
        criterion=state.criterion,
        iterations=int(state.iterations),
        message=state.message,
        resumed_from=state.resumed_from,
        n_samples_seen=int(round(state.n_samples_seen)),
        factors={k: state.extra[k] for k in ("K", "Q") if k in state.extra},
    )


def fit_pseudolikelihood(
    xi,
    J0=None,
    *,
    backend: str | None = None,
    lam: float | None = None,
    preset: str | None = None,
    config: FitConfig | None = None,
    checkpoint=None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    progress: bool = False,
    **options,
) -> FitResult:
    """Fit the couplings by minimising the pseudo-likelihood (docs/model.md, 'The objective').

    L(J) = (1/P) Σ_μ Σ_i e_i(ξ^μ; J) at λ = ``lam``, with the closed-form gradient
    ∂L/∂J_ij = -(1/P) Σ_μ α_ij ξ_i ξ_jᵀ (no autograd), under a fixed global norm, fixed row
    norms, or an L2 penalty (``constraint=``). With ``standardize=True`` the ξ are first
    standardised over the tokens, and with ``score_clamp`` the scores are clamped before λ
    (both part of the ``"damico2024"`` preset, as in the published notebook).

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        Training patterns, unit spins (see ``unit_spins`` in :class:`FitConfig` for what
        happens otherwise: by default a warning, and the patterns are fitted as given).
    J0 : array_like, shape (N, N, d, d), optional
        Warm start; its diagonal blocks are set to zero (with a warning if they were not).
        With a fixed norm and ``norm=None``, its norm(s) are the ones kept. Default: random
        couplings from ``init`` and ``seed``.
    backend : {"lbfgs", "torch"}, optional
        Full-batch L-BFGS with numba, or a minibatch first-order optimiser in torch.
        Default: the preset's, else ``"lbfgs"`` (``"torch"`` for a method or
        parametrisation only torch runs); the same default as ``spinsa train``.
    lam : float, optional
        λ_train (default 5, as in the paper).
    preset : {"damico2024"}, optional
        A named recipe (:data:`spinsa.fit.PRESETS`); ``options`` override its values.
    config : FitConfig, optional
        A complete config; ``options`` override its values.
    checkpoint : str or PathLike, optional
        Checkpoint file. If it exists, the fit resumes from it (after checking that the
        options and the data are the same) and ends with the couplings an uninterrupted fit
        would have reached; if it holds a finished fit, its result is returned at once.
        Written atomically after every ``checkpoint_every`` epochs (torch) or every L-BFGS
        segment.
    callback : callable, optional
        ``callback(step, J)`` after every optimiser step (L-BFGS: every iteration), with J a
        numpy copy (N, N, d, d). With ``backend="lbfgs", constraint="row"`` the rows iterate
        independently in threads: the calls come after each segment, one per iteration, all
        with the couplings at the end of the segment.
    progress : bool
        Show a progress bar with the loss, the gradient norm and samples/s.
    **options
        Any field of :class:`FitConfig` (``constraint``, ``norm``, ``epochs``, ``lr``, ...).

    Returns
    -------
    FitResult
        Couplings, per-step and per-epoch history, wall time and the full config.

    Examples
    --------
    >>> res = spinsa.fit_pseudolikelihood(xi, backend="lbfgs", lam=5.0, constraint="row")
    >>> res = spinsa.fit_pseudolikelihood(xi, preset="damico2024", epochs=10)
    """
    if backend is not None:
        options["backend"] = backend
    if lam is not None:
        options["lam"] = lam
    config = _build_config(config, preset, options)
    if config.backend == "torch":  # fail early, before any work: torch missing, CUDA absent
        resolve_device(config.device)
    xi = check_patterns(xi, config.unit_spins, dtype=config.np_dtype)
    if config.standardize:
        xi = standardize_features(xi)
    P, N, d = xi.shape
    if config.check_memory:
        estimate_memory(P, N, d, config=config).check()
    _check_factored(config, J0, d)

    fingerprint = data_fingerprint(xi)
    if J0 is not None:
        J0 = _check_J0(J0, N, d, config.np_dtype)
        fingerprint += ":" + data_fingerprint(J0)
    checkpoint = _checkpoint_path(checkpoint)
    if checkpoint is not None and checkpoint.exists():
        state = _saved_state(checkpoint, config, fingerprint, N, d)
    else:
        state = _new_state(J0, N, d, config)
    check_fit_inputs(xi, state.J, state.targets, config)
    if not state.finished:
        _solve(xi, state, config, checkpoint, fingerprint, callback, progress)
    check_fit_result(state.J, [*state.step_loss[-1:], *state.epoch_loss[-1:]], config)
    _check_grad_norm(state, config)
    return _result(state, config)


def _check_grad_norm(state: FitState, config: FitConfig) -> None:
    """The gradient norm of the last epoch is finite (its loss is, checked before), else an
    error that names the options (the penalty's gradient l2·J can overflow where J and the
    loss do not)."""
    penalty = f"l2 = {config.l2:g}, " if config.constraint == "l2" else ""
    cause = (
        f"{penalty}lam = {config.lam:g} in {config.dtype}; lower "
        + ("l2 or lam" if penalty else "lam")
        + ", or use dtype='float64'"
    )
    check_result(state.epoch_grad_norm[-1:], "the fit's gradient norm", cause)
