"""How much memory a fit or a dynamics run needs, and refusing what cannot fit.

The figures count the arrays the code allocates (patterns, couplings, gradients, optimiser
state, the largest intermediate of the chunked objective, recorded states) and round up
generously; Python's and the libraries' own overhead (a few hundred MB) is not included.
They are meant to catch the configuration that needs 60 GB on a 16 GB laptop before it starts,
not to predict the resident size to the megabyte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from spinsa._checks import check_choice, check_count

__all__ = ["MemoryEstimate", "InsufficientMemoryError", "estimate_memory", "available_memory"]


class InsufficientMemoryError(MemoryError, ValueError):
    """A configuration that needs more memory than is available (raised before starting)."""


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a fit or a dynamics run needs, where, and which knob reduces them.

    Attributes
    ----------
    host_bytes : int
        Main memory (RAM).
    device_bytes : int
        GPU memory (0 when everything runs on the CPU).
    device : str
        ``"cpu"`` or ``"cuda"``.
    parts : tuple of (str, int, str)
        (what, bytes, where: ``"host"`` or ``"device"``), the largest first.
    knobs : str
        What to change to need less.
    """

    host_bytes: int
    device_bytes: int
    device: str
    parts: tuple[tuple[str, int, str], ...]
    knobs: str

    @property
    def total(self) -> int:
        """host_bytes + device_bytes."""
        return self.host_bytes + self.device_bytes

    def __str__(self) -> str:
        lines = [f"about {_fmt(self.host_bytes)} of RAM"]
        if self.device != "cpu":
            lines[0] += f" and {_fmt(self.device_bytes)} of GPU memory"
        lines += [f"  {what:<44} {_fmt(b):>10}  ({where})" for what, b, where in self.parts]
        return "\n".join(lines)

    def check(self, host_available: int | None = None, device_available: int | None = None):
        """Raise :class:`InsufficientMemoryError` if the estimate exceeds what is available.

        ``host_available`` / ``device_available`` default to :func:`available_memory`.
        """
        checks = [("cpu", self.host_bytes, host_available, "RAM", "is available")]
        if self.device != "cpu":
            checks.append(
                (self.device, self.device_bytes, device_available, "GPU memory", "is free")
            )
        for device, need, have, what, verb in checks:
            have = available_memory(device) if have is None else have
            if have is not None and need > have:
                raise InsufficientMemoryError(
                    f"this configuration needs about {_fmt(need)} of {what} but only "
                    f"{_fmt(have)} {verb}. {self.knobs}\n{self}"
                )
        return self


def available_memory(device: str = "cpu") -> int | None:
    """Free bytes: ``MemAvailable`` of the host, or ``torch.cuda.mem_get_info`` of the GPU.

    ``None`` when it cannot be told (then nothing is refused).
    """
    if device == "cpu":
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    try:
        import torch

        return int(torch.cuda.mem_get_info()[0])
    except Exception:
        return None


def _torch_device(config) -> str:
    if config.device != "auto":
        return config.device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def estimate_memory(
    n_samples: int,
    n_tokens: int,
    d: int,
    *,
    kind: str = "fit",
    config=None,
    steps: int = 0,
    record_every: int = 1,
    dtype: str | None = None,
    **options,
) -> MemoryEstimate:
    """Bytes that a pseudo-likelihood fit or a dynamics run of this size will need.

    Parameters
    ----------
    n_samples, n_tokens, d : int
        P, N and d of the patterns (fit) or of the initial states (dynamics).
    kind : {"fit", "dynamics"}
    config : FitConfig, optional
        The fit's options (``kind="fit"``); default: ``FitConfig.from_preset(**options)``, so
        ``estimate_memory(10_000, 196, 8, backend="lbfgs")`` works.
    steps, record_every : int
        Dynamics: number of steps and the recording interval of :func:`spinsa.run`.
    dtype : {"float32", "float64"}, optional
        The spins' dtype (default float32); for a fit, the same as the ``dtype`` option.

    Returns
    -------
    MemoryEstimate
        Call ``.check()`` on it to refuse what does not fit.
    """
    P = check_count(n_samples, "n_samples", 1)
    N = check_count(n_tokens, "n_tokens", 2)
    d = check_count(d, "d", 1)
    check_choice(kind, "kind", ("fit", "dynamics"))
    if kind == "dynamics":
        if options or config is not None:
            raise ValueError("config and fit options apply to kind='fit' only")
        dtype = np.dtype(check_choice(dtype or "float32", "dtype", ("float32", "float64")))
        steps, every = check_count(steps, "steps"), check_count(record_every, "record_every", 1)
        return _dynamics(P, N, d, steps, every, dtype)
    from spinsa.fit.config import FitConfig

    if dtype is not None:
        options["dtype"] = dtype
    if config is None:
        preset = options.pop("preset", None)
        config = FitConfig.from_preset(preset, **options)
    elif options:
        raise ValueError("pass either config or fit options, not both")
    if config.backend == "torch":
        return _fit_torch(P, N, d, config)
    return _fit_lbfgs(P, N, d, config)


def _finish(parts, device: str, knobs: str) -> MemoryEstimate:
    parts = tuple(sorted(((w, int(b), where) for w, b, where in parts), key=lambda p: -p[1]))
    host = sum(b for _, b, where in parts if where == "host")
    dev = sum(b for _, b, where in parts if where == "device")
    return MemoryEstimate(host, dev, device, parts, knobs)


def _fit_torch(P: int, N: int, d: int, config) -> MemoryEstimate:
    from spinsa.fit.torch_backend import _INTERMEDIATES, auto_chunk_size

    s = np.dtype(config.dtype).itemsize
    device = _torch_device(config)
    where = "host" if device == "cpu" else "device"
    nJ = N * N * d * d
    per_sample = _INTERMEDIATES * N * N * d * s
    chunk = config.chunk_size or auto_chunk_size(N, d, s)
    batch = min(config.batch_size, P)
    # steps see one minibatch at a time; on the GPU the epoch evaluation sees all P in chunks.
    # On the CPU the closed form is the numba kernel, which streams the minibatch.
    chunk = min(chunk, P if where == "device" else batch)
    if config.site_sampling == "one" and where == "host":
        work = ("one-site objective of a minibatch", 4 * batch * N * d * s)
    elif where == "host":
        work = ("the closed form's transposed chunk", N * d * min(batch, 512) * s)
    else:
        work = (f"objective intermediates, chunk of {chunk} samples", chunk * per_sample)
    opt_buffers = {"adam": 2, "adamw": 2, "sgd": 1}[config.optimizer]
    parts = [
        ("patterns (P, N, d)", P * N * d * s, "host"),
        ("couplings, gradient, float64 accumulator", nJ * (2 * s + 8), where),
        (f"{config.optimizer} state", opt_buffers * nJ * s, where),
        (work[0], work[1], where),
        ("epoch evaluation on the host (float64)", nJ * (s + 3 * 8), "host"),
    ]
    if config.method == "bptt":  # checkpointing: τ + 1 states and one step's intermediates
        states = (config.tau_max + 1) * batch * N * d * s
        parts.append((f"unrolled states (tau <= {config.tau_max})", states, where))
        parts.append(("one step's intermediates (backward)", _INTERMEDIATES * batch * N * N * d * s,
                      where))  # fmt: skip
    elif config.method == "cd":
        parts.append(("the model's states (CD chains)", 2 * batch * N * d * s, where))
    if config.couplings != "full":  # K, Q, their gradients and the optimiser's state of them
        from spinsa.fit.parametrisation import factor_shape

        n = 2 * int(np.prod(factor_shape(config.couplings, N, d, config.heads, config.rank)))
        parts.append(("factors K, Q with gradients and state", (2 + opt_buffers) * n * s, where))
    if where == "device":
        parts.append(("patterns on the GPU", P * N * d * s, "device"))
    else:
        parts.append(("patterns in the evaluation kernel's layout", P * N * d * s, "host"))
    if where == "host":
        knobs = f"Lower batch_size (now {batch})"
    else:
        knobs = f"Lower chunk_size (now {chunk} samples, {_fmt(chunk * per_sample)})"
    knobs += ", use dtype='float32'" if config.dtype == "float64" else ""
    knobs += ", or fit fewer patterns at once"
    return _finish(parts, device, knobs)


def _fit_lbfgs(P: int, N: int, d: int, config) -> MemoryEstimate:
    import numba

    from spinsa.kernels import objective as _k_objective

    s = np.dtype(config.dtype).itemsize
    nJ = N * N * d * d
    m = config.history_size
    chunk = N * d * _k_objective.chunk_width(P) * s
    # the full objective streams the patterns through one transposed chunk at a time; the
    # rows' threads share one transposed copy of all of them
    copy = P * N * d * s if config.constraint == "row" else chunk
    parts = [
        ("patterns (P, N, d)", P * N * d * s, "host"),
        ("the objective's transposed patterns", copy, "host"),
        ("couplings, gradient and its float64 sums", 2 * nJ * s + nJ * 8, "host"),
    ]
    if config.constraint == "row":
        workers = config.workers or numba.get_num_threads()
        lbfgs_bytes = workers * (2 * m + 8) * (N - 1) * d * d * 8
        parts.append((f"L-BFGS memory of {workers} rows at once (m = {m})", lbfgs_bytes, "host"))
    else:
        n = N * (N - 1) * d * d
        parts.append((f"L-BFGS memory (m = {m}, float64)", (2 * m + 8) * n * 8, "host"))
    parts.append(("history and projections (float64)", 3 * nJ * 8, "host"))
    knobs = f"Lower history_size (now {m})"
    knobs += ", use dtype='float32'" if config.dtype == "float64" else ""
    knobs += ", or use constraint='row' (the rows are solved a few at a time)"
    return _finish(parts, "cpu", knobs)


def _dynamics(P: int, N: int, d: int, steps: int, record_every: int, dtype) -> MemoryEstimate:
    s = dtype.itemsize
    n_records = steps // record_every + 1 + (1 if steps % record_every else 0)
    parts = [
        (f"recorded states ({n_records} records)", n_records * P * N * d * s, "host"),
        ("energies (steps + 1, P)", (steps + 1) * P * 8, "host"),
        ("current, next state and fields", 3 * P * N * d * s, "host"),
        ("couplings", N * N * d * d * s, "host"),
    ]
    knobs = (
        f"Record fewer states (record_every, now {record_every}), run fewer samples at once "
        "(split x0), or use dtype='float32'"
    )
    return _finish(parts, "cpu", knobs)
