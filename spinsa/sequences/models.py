"""Backprop forecasters of a scalar series: an RNN, a transformer encoder and S4D, in torch.

Every model maps a window of ``context`` past values of a normalised series to the next one,
x: (B, context) float32 -> y_hat: (B,). Widths follow the small baselines of the ETT
literature (64 channels, 2 layers):

* :class:`RNNForecaster`: ``torch.nn.RNN`` (2 layers, hidden 64, tanh) over the values as a
  sequence of 1-vectors; the top layer's last hidden state -> Linear(64, 1).
* :class:`TransformerForecaster`: Linear(1, 64) + the fixed sinusoidal positional encoding,
  2 pre-LN encoder layers (8 heads, feed-forward 128 with GELU, dropout 0.1, no causal mask:
  every position sees the whole window), a final LayerNorm; the last position -> Linear(64, 1).
* :class:`S4DForecaster`: Linear(1, 64), 2 pre-norm :class:`S4DLayer` s, a final LayerNorm;
  the last position -> Linear(64, 1).

S4D (Gu, Gupta, Goel & Ré 2022, "On the parameterization and initialization of diagonal
state space models"): per channel h a diagonal complex SSM x'(t) = A x(t) + B u(t),
y(t) = 2 Re(C x(t)) + D u(t), discretised by zero-order hold with a learnt step Δ_h,

    Ā = exp(Δ A),   B̄ = (Ā - 1) / A · B,   K[l] = 2 Re(Σ_n C_n B̄_n Ā_n^l),
    y = K * u + D u      (a causal convolution of length L, by FFT with 2L padding).

Only one of each conjugate pair of modes is stored (the factor 2 Re adds its partner), so
``state=64`` is 32 complex modes per channel (as ``d_state=64`` in the authors' ``s4d.py``).
Initialisation **S4D-Lin**: A_n = -1/2 + iπn (n = 0..31), B = 1 (fixed), C_n with real and
imaginary parts ~ N(0, 1/2), log Δ ~ U[log 1e-3, log 1e-1], D ~ N(0, 1). A is learnt as
A = -exp(log_A_real) + i A_imag so that its real part stays negative.

This module imports torch at import time; ``import spinsa.sequences`` and
:mod:`spinsa.sequences.train` do not import it.
"""

from __future__ import annotations

import math
from typing import Any

from spinsa._checks import check_choice, check_count, check_positive
from spinsa._torch import import_torch
from spinsa._training import sinusoidal_positions

torch = import_torch()
nn = torch.nn
F = torch.nn.functional

__all__ = [
    "MODEL_NAMES",
    "SSM_PARAMETERS",
    "RNNForecaster",
    "S4DForecaster",
    "S4DKernel",
    "S4DLayer",
    "TransformerForecaster",
    "count_parameters",
    "make_model",
]

MODEL_NAMES = ("rnn", "transformer", "s4d")

#: Names of the S4D parameters that describe the state matrix and the step (A, Δ); the
#: trainer does not apply weight decay to them (as the authors' ``s4d.py`` does not).
SSM_PARAMETERS = ("log_dt", "log_A_real", "A_imag")


def _check_window(x: Any, context: int) -> None:
    if x.ndim != 2 or x.shape[1] != context:
        raise ValueError(f"x must have shape (B, {context}) (B windows), got {tuple(x.shape)}")


class RNNForecaster(nn.Module):
    """Elman RNN forecaster: h_t = tanh(W x_t + U h_{t-1} + b), 2 layers; y = w · h_L + c.

    Parameters
    ----------
    context : int
        Window length L.
    hidden : int
        Width of the hidden state (64).
    layers : int
        Stacked RNN layers (2).
    """

    def __init__(self, context: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.context = check_count(context, "context", 1)
        self.rnn = nn.RNN(1, hidden, num_layers=layers, nonlinearity="tanh", batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: Any) -> Any:
        """x: (B, L) -> (B,)."""
        _check_window(x, self.context)
        out, _ = self.rnn(x.unsqueeze(-1))  # (B, L, hidden): the top layer at every t
        return self.head(out[:, -1]).squeeze(-1)


class TransformerForecaster(nn.Module):
    """Pre-LN transformer encoder over the window; the last position reads out.

    h(0)_t = W_in x_t + b_in + e_t (e: sinusoidal), 2 pre-LN encoder layers,
    y = w · LN(h_L) + c.

    Parameters
    ----------
    context : int
        Window length L (the positional encoding has L rows).
    width, heads, feedforward, layers : int
        d_model (64), attention heads (8), feed-forward width (128), encoder layers (2).
    dropout : float
        In attention and feed-forward (0.1; off in eval mode).
    """

    def __init__(
        self,
        context: int,
        width: int = 64,
        heads: int = 8,
        feedforward: int = 128,
        layers: int = 2,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.context = check_count(context, "context", 1)
        self.embed = nn.Linear(1, width)
        self.register_buffer(
            "positions", sinusoidal_positions(self.context, width), persistent=False
        )
        layer = nn.TransformerEncoderLayer(
            width,
            heads,
            feedforward,
            dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, layers, norm=nn.LayerNorm(width), enable_nested_tensor=False
        )
        self.head = nn.Linear(width, 1)

    def forward(self, x: Any) -> Any:
        """x: (B, L) -> (B,)."""
        _check_window(x, self.context)
        h = self.encoder(self.embed(x.unsqueeze(-1)) + self.positions)
        return self.head(h[:, -1]).squeeze(-1)


class S4DKernel(nn.Module):
    """Diagonal SSM convolution of H independent channels, with the D skip term (S4D-Lin).

    Parameters
    ----------
    channels : int
        H, independent channels (one SSM each).
    state : int
        N, the state size counted with conjugate partners: N/2 complex modes are stored.
    dt_min, dt_max : float
        Range of the initial step, log Δ ~ U[log dt_min, log dt_max].

    Attributes
    ----------
    log_dt : Parameter, shape (H,)
    log_A_real, A_imag : Parameter, shape (H, N/2)
        A = -exp(log_A_real) + i A_imag.
    C : Parameter, shape (H, N/2, 2)
        Real and imaginary parts of C.
    D : Parameter, shape (H,)
    """

    def __init__(
        self, channels: int = 64, state: int = 64, dt_min: float = 1e-3, dt_max: float = 1e-1
    ):
        super().__init__()
        H = check_count(channels, "channels", 1)
        state = check_count(state, "state", 2)
        if state % 2:
            raise ValueError(f"state must be even (conjugate pairs), got {state}")
        lo, hi = math.log(check_positive(dt_min, "dt_min")), math.log(dt_max)
        if not hi >= lo:
            raise ValueError(f"dt_max must be >= dt_min, got {dt_max} < {dt_min}")
        modes = state // 2
        self.log_dt = nn.Parameter(torch.rand(H) * (hi - lo) + lo)
        self.C = nn.Parameter(torch.randn(H, modes, 2) * math.sqrt(0.5))
        self.log_A_real = nn.Parameter(torch.full((H, modes), math.log(0.5)))
        self.A_imag = nn.Parameter(math.pi * torch.arange(modes, dtype=torch.float32).repeat(H, 1))
        self.D = nn.Parameter(torch.randn(H))

    def discretised(self, dtype: Any = None) -> tuple[Any, Any, Any, Any]:
        """ZOH discretisation: (Δ A, Ā, B̄, C), complex, each of shape (H, N/2).

        ``dtype``: the real dtype to compute in (default: the parameters').
        """
        dtype = dtype or self.log_dt.dtype
        A = torch.complex(-torch.exp(self.log_A_real.to(dtype)), self.A_imag.to(dtype))
        dtA = A * torch.exp(self.log_dt.to(dtype)).unsqueeze(-1)
        A_bar = torch.exp(dtA)
        B_bar = (A_bar - 1.0) / A  # B = 1
        return dtA, A_bar, B_bar, torch.view_as_complex(self.C.to(dtype).contiguous())

    def kernel(self, length: int) -> Any:
        """K[h, l] = 2 Re(Σ_n C_hn B̄_hn Ā_hn^l), l = 0..length-1: shape (H, length).

        Ā^l = exp(l Δ A) (the Vandermonde matrix, exact powers).
        """
        dtA, _, B_bar, C = self.discretised()
        pos = torch.arange(length, device=dtA.device, dtype=dtA.real.dtype)
        vandermonde = torch.exp(dtA.unsqueeze(-1) * pos)  # (H, N/2, L)
        return 2.0 * torch.einsum("hn,hnl->hl", C * B_bar, vandermonde).real

    def forward(self, u: Any) -> Any:
        """y = K * u + D u, causal, by FFT: u (B, H, L) -> y (B, H, L)."""
        L = u.shape[-1]
        k_f = torch.fft.rfft(self.kernel(L), n=2 * L)
        u_f = torch.fft.rfft(u, n=2 * L)
        y = torch.fft.irfft(u_f * k_f, n=2 * L)[..., :L]
        return y + u * self.D.unsqueeze(-1)

    def recurrence(self, u: Any) -> Any:
        """The same output by the discretised recurrence, in complex128 (the reference).

        x_k = Ā x_{k-1} + B̄ u_k (x_{-1} = 0),  y_k = 2 Re(C · x_k) + D u_k.

        u: (B, H, L) -> y: (B, H, L) in u's dtype.
        """
        _, A_bar, B_bar, C = self.discretised(torch.float64)
        u64 = u.to(torch.float64)
        D = self.D.to(torch.float64).unsqueeze(-1)
        x = torch.zeros(u.shape[:-1] + A_bar.shape[-1:], dtype=A_bar.dtype, device=u.device)
        ys = []
        for k in range(u.shape[-1]):
            x = A_bar * x + B_bar * u64[..., k, None]
            ys.append(2.0 * (C * x).sum(-1).real)
        return (torch.stack(ys, dim=-1) + D * u64).to(u.dtype)


class S4DLayer(nn.Module):
    """One pre-norm S4D block on (B, L, H): x + W GELU(S4D(LN(x))) + b.

    The S4D convolution (with its D skip) runs per channel; the output Linear(H, H) is
    position-wise and mixes channels.

    Parameters
    ----------
    channels, state : int
        H (64) and the SSM state size N (64, i.e. 32 complex modes).
    """

    def __init__(self, channels: int = 64, state: int = 64):
        super().__init__()
        self.norm = nn.LayerNorm(channels)
        self.kernel = S4DKernel(channels, state)
        self.output = nn.Linear(channels, channels)

    def _block(self, x: Any, conv: Any) -> Any:
        z = conv(self.norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.output(F.gelu(z))

    def forward(self, x: Any) -> Any:
        """x: (B, L, H) -> (B, L, H), the convolution by FFT."""
        return self._block(x, self.kernel)

    def recurrence(self, x: Any) -> Any:
        """:meth:`forward` with the convolution done by :meth:`S4DKernel.recurrence`."""
        return self._block(x, self.kernel.recurrence)


class S4DForecaster(nn.Module):
    """Linear(1, H) -> 2 pre-norm S4D layers -> LayerNorm -> last position -> Linear(H, 1).

    Parameters
    ----------
    context : int
        Window length L.
    channels, state, layers : int
        H (64), the SSM state size N (64: 32 complex modes), S4D layers (2).
    """

    def __init__(self, context: int, channels: int = 64, state: int = 64, layers: int = 2):
        super().__init__()
        self.context = check_count(context, "context", 1)
        self.embed = nn.Linear(1, channels)
        self.layers = nn.ModuleList(S4DLayer(channels, state) for _ in range(layers))
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, 1)

    def _run(self, x: Any, recurrent: bool) -> Any:
        _check_window(x, self.context)
        h = self.embed(x.unsqueeze(-1))
        for layer in self.layers:
            h = layer.recurrence(h) if recurrent else layer(h)
        return self.head(self.norm(h[:, -1])).squeeze(-1)

    def forward(self, x: Any) -> Any:
        """x: (B, L) -> (B,)."""
        return self._run(x, recurrent=False)

    def recurrence(self, x: Any) -> Any:
        """:meth:`forward` with every convolution done by the recurrence."""
        return self._run(x, recurrent=True)


def make_model(name: str, context: int, seed: int = 0) -> Any:
    """A forecaster with its default sizes, its weights drawn from ``seed``.

    The global torch RNG is left untouched (the initialisation runs in a forked RNG).

    Parameters
    ----------
    name : {"rnn", "transformer", "s4d"}
    context : int
        Values in a window (the input length L).
    seed : int

    Returns
    -------
    torch.nn.Module
        Maps x: (B, context) to y_hat: (B,); in training mode, float32, on the CPU.
    """
    check_choice(name, "name", MODEL_NAMES)
    context = check_count(context, "context", 1)
    seed = check_count(seed, "seed", 0)
    cls = {"rnn": RNNForecaster, "transformer": TransformerForecaster, "s4d": S4DForecaster}[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(context)


def count_parameters(model: Any) -> int:
    """Trainable scalars of a model (a complex number counts as two)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
