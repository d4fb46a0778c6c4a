"""Checkpoints of a running fit (the file of a finished one: :mod:`spinsa.fit.result`).

A checkpoint is a spinsa HDF5 file (``kind="fit-checkpoint"``, written atomically through
:mod:`spinsa.io`) with everything needed to continue the fit exactly where it stopped:

- ``state/couplings``  J (N, N, d, d) in the fit's own dtype (not downcast, so that a
                       resumed float64 fit is bit-identical to an uninterrupted one)
- ``state/targets``    the fixed norm(s): (1,) global, (N,) per row, (0,) for the L2 penalty
- ``optimizer/<name>`` the torch optimiser's per-parameter state (``exp_avg``, ``step``...)
- ``history/<name>``   the history so far (see :class:`spinsa.fit.FitResult`)
- ``lbfgs/<name>``     per-row L-BFGS bookkeeping (iterations, finished flags, last losses)
- ``method/<name>``    what a method or a parametrisation carries between steps: the
                       persistent chains of PCD (``chains``), the factors of J (``K``, ``Q``)
- root attributes      epoch/segment and step counters, the numpy generator's state, the
                       wall time so far, the data's SHA-1 and shape, the config

L-BFGS keeps its curvature memory inside scipy; it is not saved. The L-BFGS backend instead
restarts from the current couplings every ``segment_iters`` iterations whether or not it is
interrupted, and checkpoints between segments, so a resumed fit retraces the uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spinsa import io
from spinsa._config import config_differences
from spinsa.fit.result import HISTORY

__all__ = ["FitState", "save_checkpoint", "load_checkpoint"]

CHECKPOINT_KIND = "fit-checkpoint"
# options that do not change the result: a checkpoint made with other values still resumes
RESUME_FREE = ("check_memory", "workers", "checkpoint_every")
_ROWS = ("row_iters", "row_done", "row_loss", "row_gnorm2", "row_success")  # L-BFGS, per row


@dataclass
class FitState:
    """Mutable state of a fit in progress (what a checkpoint holds)."""

    J: np.ndarray
    targets: np.ndarray
    rng_state: dict | None = None
    epoch: int = 0  # torch: epochs done; L-BFGS: segments done
    step: int = 0
    optimizer: dict[str, np.ndarray] = field(default_factory=dict)
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # chains, factors of J
    step_loss: list[float] = field(default_factory=list)
    step_grad_norm: list[float] = field(default_factory=list)
    step_norm: list[float] = field(default_factory=list)
    epoch_loss: list[float] = field(default_factory=list)
    epoch_grad_norm: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)  # with a validation split
    wall_time: float = 0.0
    n_samples_seen: float = 0.0  # in full-objective evaluations of one pattern
    finished: bool = False
    converged: bool | None = None
    criterion: str = ""
    message: str = ""
    resumed_from: int = 0
    device: str = ""
    # L-BFGS bookkeeping
    iterations: int = 0
    row_iters: np.ndarray | None = None
    row_done: np.ndarray | None = None
    row_loss: np.ndarray | None = None
    row_gnorm2: np.ndarray | None = None
    row_success: np.ndarray | None = None


def save_checkpoint(path, state: FitState, config, fingerprint: str) -> None:
    """Write ``state`` atomically to ``path`` (replacing the previous checkpoint)."""
    arrays: dict[str, Any] = {
        "state": {"couplings": state.J, "targets": np.asarray(state.targets, np.float64)},
        "history": {k: np.asarray(getattr(state, k), np.float64) for k in HISTORY},
    }
    if state.optimizer:
        arrays["optimizer"] = {k: np.asarray(v) for k, v in state.optimizer.items()}
    if state.extra:
        arrays["method"] = dict(state.extra)
    if state.row_iters is not None:
        arrays["lbfgs"] = {k: getattr(state, k) for k in _ROWS}
    attrs = {
        "epoch": int(state.epoch),
        "step": int(state.step),
        "iterations": int(state.iterations),
        "rng_state": state.rng_state,
        "wall_time": float(state.wall_time),
        "n_samples_seen": float(state.n_samples_seen),
        "finished": bool(state.finished),
        "converged": state.converged,
        "criterion": state.criterion,
        "message": state.message,
        "device": state.device,
        "data_sha1": fingerprint,
    }
    io.write_file(path, arrays, attrs, kind=CHECKPOINT_KIND, config=config, overwrite=True)


def load_checkpoint(path, config, fingerprint: str) -> FitState:
    """The state saved at ``path``, after checking it belongs to this config and this data.

    Raises ``ValueError`` naming the differing options (or the data) when the checkpoint was
    written by another fit.
    """
    info = io.read(path)
    if info.kind != CHECKPOINT_KIND:
        raise ValueError(f"{path} is a spinsa file of kind {info.kind!r}, not a fit checkpoint")
    diff = config_differences(info.config, config.to_dict(), ignore=RESUME_FREE)
    if diff:
        shown = ", ".join(f"{k}: {saved!r} -> {now!r}" for k, (saved, now) in diff.items())
        raise ValueError(
            f"checkpoint {path} was written by a fit with other options ({shown}); "
            "delete it or give another checkpoint path to start afresh"
        )
    a = info.attrs
    if a.get("data_sha1") != fingerprint:
        raise ValueError(
            f"checkpoint {path} was written for other training data (the patterns differ); "
            "delete it or give another checkpoint path to start afresh"
        )
    try:
        io.verify(path)
    except io.SpinsaFileError as err:
        raise io.SpinsaFileError(f"{err} (Delete this checkpoint to start the fit afresh.)",
                                 err.reason) from err  # fmt: skip
    state_arrays, _ = io.read_group(path, "state")
    hist, _ = io.read_group(path, "history")
    optimizer = io.read_group(path, "optimizer")[0] if "optimizer" in info.groups else {}
    lb = io.read_group(path, "lbfgs")[0] if "lbfgs" in info.groups else {}
    extra = io.read_group(path, "method")[0] if "method" in info.groups else {}
    epoch = int(a["epoch"])
    return FitState(
        J=np.ascontiguousarray(state_arrays["couplings"]),
        targets=state_arrays["targets"],
        rng_state=a.get("rng_state"),
        epoch=epoch,
        step=int(a["step"]),
        optimizer=optimizer,
        extra=extra,
        **{k: list(hist.get(k, ())) for k in HISTORY},  # val_loss: absent in older files
        wall_time=float(a["wall_time"]),
        n_samples_seen=float(a["n_samples_seen"]),
        finished=bool(a["finished"]),
        converged=a.get("converged"),
        criterion=a.get("criterion", ""),
        message=a.get("message", ""),
        resumed_from=epoch,
        device=a.get("device", ""),
        iterations=int(a.get("iterations", 0)),
        **{k: lb.get(k) for k in _ROWS},
    )
