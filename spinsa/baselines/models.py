"""Transformer baselines trained by backpropagation (D'Amico & Negri 2024, §V-C).

Both models read an image as N = (H/patch)(W/patch) tokens, one per non-overlapping
``patch x patch`` square, in the token order of :class:`spinsa.PatchEmbedding` (row-major over
the grid of patches, pixels row-major inside a patch):

    z_i(0) = F_in p_i + e_i                      p_i in R^a: the patch's a = patch² pixels
    y_i    = F_out (z_i - e_i)                   the patch's predicted pixels

with F_in: R^a -> R^D and F_out: R^D -> R^a trained linear maps (with biases) and e_i the
fixed sinusoidal positional encoding, *added after the embedding and subtracted before the
output* so that the iterated state lives in the same frame at every t. A masked patch is
a patch of zero pixels (its token is F_in 0 + e_i = b_in + e_i); the model is not told which
patches are masked.

* :class:`RecycledBlock`: one pre-LN block B iterated, z(t) = B(z(t-1)); trained with τ
  iterations drawn from {3, ..., 7} at every step and evaluated at every t = 1..T.
* :class:`ViT`: ``n_blocks`` distinct blocks applied once; its prediction does not depend on
  t (a horizontal line in the error-vs-t plot).

The block (:class:`Block`), pre-LN, with multi-head self-attention SA computed by
``torch.nn.functional.scaled_dot_product_attention``:

    serial (default):  u = x + SA(LN1(x)),        x' = u + MLP(LN2(u))
    parallel=True:     h = LN(x),                 x' = x + SA(h) + MLP(h)

MLP(h) = W2 GELU(W1 h + b1) + b2. The MABViT value activations act on the values before the
attention average: ``"none"`` v = W_v h + b_v, ``"gelu"`` v = GELU(W_v h + b_v), ``"swiglu"``
v = (W_a h + b_a) * SiLU(W_g h + b_g) (the value projection is twice as wide, and the MLP's
hidden width is reduced by round((D² + D) / (2D + 1)) ≈ D/2 so that the block keeps its
number of parameters up to a few).

This module imports torch at import time; ``import spinsa.baselines`` does not import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count, check_positive
from spinsa.baselines._torch import require_torch
from spinsa.baselines.config import OUTPUTS, VALUE_ACTIVATIONS, BaselineConfig

torch = require_torch()
nn = torch.nn
F = torch.nn.functional

__all__ = [
    "Block",
    "MLP",
    "PatchModel",
    "RecycledBlock",
    "SelfAttention",
    "ViT",
    "build_model",
    "count_parameters",
    "mlp_hidden_width",
    "patchify",
    "sinusoidal_positions",
    "unpatchify",
]


# --------------------------------------------------------------------------- helpers


def sinusoidal_positions(n_tokens: int, width: int) -> Any:
    """The fixed sinusoidal positional encoding of Vaswani et al. (2017).

    e[k, 2m] = sin(k / 10000^(2m/D)),  e[k, 2m+1] = cos(k / 10000^(2m/D)),  k = token index.

    Parameters
    ----------
    n_tokens : int
        N.
    width : int
        D (odd D drops the last cosine).

    Returns
    -------
    torch.Tensor, shape (N, D), float32
    """
    n_tokens = check_count(n_tokens, "n_tokens", 1)
    width = check_count(width, "width", 1)
    k = np.arange(n_tokens, dtype=np.float64)[:, None]
    m = np.arange((width + 1) // 2, dtype=np.float64)[None, :]
    angle = k / 10000.0 ** (2 * m / width)
    e = np.empty((n_tokens, 2 * angle.shape[1]))
    e[:, 0::2] = np.sin(angle)
    e[:, 1::2] = np.cos(angle)
    return torch.from_numpy(e[:, :width].astype(np.float32))


def patchify(images: Any, patch: int) -> Any:
    """Cut images into flattened patches, in :class:`spinsa.PatchEmbedding`'s token order.

    Parameters
    ----------
    images : torch.Tensor, shape (B, H, W)
    patch : int
        Side of the square patches; divides H and W.

    Returns
    -------
    torch.Tensor, shape (B, N, patch²)
        ``out[b, k, r * patch + c]`` = pixel (r, c) of patch k (row-major over the grid).
    """
    B, H, W = images.shape
    gh, gw = H // patch, W // patch
    t = images.reshape(B, gh, patch, gw, patch).permute(0, 1, 3, 2, 4)
    return t.reshape(B, gh * gw, patch * patch)


def unpatchify(tokens: Any, image_shape: tuple[int, int], patch: int) -> Any:
    """The inverse of :func:`patchify`: (B, N, patch²) -> (B, H, W)."""
    B = tokens.shape[0]
    H, W = image_shape
    gh, gw = H // patch, W // patch
    t = tokens.reshape(B, gh, gw, patch, patch).permute(0, 1, 3, 2, 4)
    return t.reshape(B, H, W)


def mlp_hidden_width(width: int, mlp_ratio: float, value_activation: str = "none") -> int:
    """Hidden width of the block's MLP.

    ``round(mlp_ratio * width)``, minus round((D² + D) / (2D + 1)) for SwiGLU values: the extra
    D × D weight and D bias of the doubled value projection are paid for by the MLP, whose
    every hidden unit costs 2D + 1 parameters.
    """
    width = check_count(width, "width", 1)
    mlp_ratio = check_positive(mlp_ratio, "mlp_ratio")
    check_choice(value_activation, "value_activation", VALUE_ACTIVATIONS)
    hidden = int(round(mlp_ratio * width))
    if value_activation == "swiglu":
        hidden -= int(round((width * width + width) / (2 * width + 1)))
    if hidden < 1:
        raise ValueError(
            f"mlp_ratio = {mlp_ratio} leaves no hidden unit in the MLP of width {width}"
            + (" with SwiGLU values" if value_activation == "swiglu" else "")
        )
    return hidden


# --------------------------------------------------------------------------- the block


class SelfAttention(nn.Module):
    """Multi-head self-attention with an optional MABViT value activation.

    q, k, v = split(W_qkv h + b_qkv); v <- act(v); heads of width D / heads;
    SA(h) = W_o concat_heads(softmax(q k^T / sqrt(D / heads)) v) + b_o.

    Parameters
    ----------
    width : int
        D.
    heads : int
        Number of heads (divides D).
    value_activation : {"none", "gelu", "swiglu"}
        ``"swiglu"`` makes the value part of W_qkv 2D wide: v = a * SiLU(g), (a, g) = split(v).
    """

    def __init__(self, width: int, heads: int, value_activation: str = "none") -> None:
        super().__init__()
        width = check_count(width, "width", 1)
        heads = check_count(heads, "heads", 1)
        if width % heads:
            raise ValueError(f"width = {width} must be a multiple of heads = {heads}")
        check_choice(value_activation, "value_activation", VALUE_ACTIVATIONS)
        self.width, self.heads, self.value_activation = width, heads, value_activation
        self.value_width = 2 * width if value_activation == "swiglu" else width
        self.qkv = nn.Linear(width, 2 * width + self.value_width)
        self.proj = nn.Linear(width, width)

    def values(self, v: Any) -> Any:
        """The value activation: (..., value_width) -> (..., D)."""
        if self.value_activation == "gelu":
            return F.gelu(v)
        if self.value_activation == "swiglu":
            a, g = v.chunk(2, dim=-1)
            return a * F.silu(g)
        return v

    def forward(self, h: Any) -> Any:
        """(B, N, D) -> (B, N, D)."""
        B, N, D = h.shape
        q, k, v = self.qkv(h).split([D, D, self.value_width], dim=-1)
        v = self.values(v)
        H, hd = self.heads, D // self.heads
        q, k, v = (t.reshape(B, N, H, hd).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, N, D))


class MLP(nn.Module):
    """MLP(h) = W2 GELU(W1 h + b1) + b2, (B, N, D) -> (B, N, D)."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, h: Any) -> Any:
        return self.fc2(F.gelu(self.fc1(h)))


class Block(nn.Module):
    """Pre-LN transformer block, serial or parallel, with MABViT value activations.

    serial:   u = x + SA(LN1(x)),  x' = u + MLP(LN2(u))
    parallel: h = LN(x),           x' = x + SA(h) + MLP(h)     (one LayerNorm)

    Parameters
    ----------
    width : int
        D.
    heads : int
        Attention heads.
    mlp_ratio : float
        MLP hidden width / D (see :func:`mlp_hidden_width`).
    value_activation : {"none", "gelu", "swiglu"}
    parallel : bool
    """

    def __init__(
        self,
        width: int,
        heads: int,
        mlp_ratio: float = 4.0,
        value_activation: str = "none",
        parallel: bool = False,
    ) -> None:
        super().__init__()
        self.parallel = bool(parallel)
        self.attn = SelfAttention(width, heads, value_activation)
        self.mlp = MLP(width, mlp_hidden_width(width, mlp_ratio, value_activation))
        self.norm1 = nn.LayerNorm(width)
        self.norm2 = None if self.parallel else nn.LayerNorm(width)

    def forward(self, x: Any) -> Any:
        """(B, N, D) -> (B, N, D)."""
        if self.parallel:
            h = self.norm1(x)
            return x + self.attn(h) + self.mlp(h)
        u = x + self.attn(self.norm1(x))
        return u + self.mlp(self.norm2(u))


# --------------------------------------------------------------------------- the models


class PatchModel(nn.Module):
    """Shared input and output of the baselines: F_in, positional encoding, F_out.

    Parameters
    ----------
    image_shape : (int, int)
        (H, W).
    patch : int
        Patch side; divides H and W.
    width : int
        D.
    output : {"clip", "sigmoid"}
        Head nonlinearity: none during training and a clip to [0, 1] in :meth:`predict`, or
        a sigmoid.
    """

    def __init__(
        self, image_shape: tuple[int, int], patch: int, width: int, output: str = "clip"
    ) -> None:
        super().__init__()
        H, W = (check_count(n, "image_shape", 1) for n in image_shape)
        patch = check_count(patch, "patch", 1)
        if H % patch or W % patch:
            raise ValueError(f"patch = {patch} must divide the image shape {(H, W)}")
        check_choice(output, "output", OUTPUTS)
        self.image_shape, self.patch, self.width, self.output = (H, W), patch, width, output
        self.n_tokens = (H // patch) * (W // patch)
        a = patch * patch
        self.f_in = nn.Linear(a, width)
        self.f_out = nn.Linear(width, a)
        self.register_buffer(
            "positions", sinusoidal_positions(self.n_tokens, width), persistent=False
        )

    def _check_images(self, images: Any) -> Any:
        if images.ndim != 3 or tuple(images.shape[1:]) != self.image_shape:
            raise ValueError(
                f"images must have shape (B, {self.image_shape[0]}, {self.image_shape[1]}), "
                f"got {tuple(images.shape)}"
            )
        return images

    def encode(self, images: Any) -> Any:
        """z(0) = F_in p + e: (B, H, W) -> (B, N, D)."""
        self._check_images(images)
        return self.f_in(patchify(images, self.patch)) + self.positions

    def decode(self, z: Any) -> Any:
        """Training output F_out(z - e) (sigmoid-ed if output="sigmoid"): (B, N, D) -> (B, H, W)."""
        y = unpatchify(self.f_out(z - self.positions), self.image_shape, self.patch)
        return torch.sigmoid(y) if self.output == "sigmoid" else y

    def predict_from_state(self, z: Any) -> Any:
        """Decoded image in [0, 1]: :meth:`decode` clipped. (B, N, D) -> (B, H, W)."""
        return self.decode(z).clamp(0.0, 1.0)


class RecycledBlock(PatchModel):
    """One pre-LN block iterated: the backprop analogue of the self-attention dynamics.

    z(0) = F_in p + e,  z(t) = B(z(t-1)),  image(t) = F_out(z(t) - e).

    Parameters
    ----------
    image_shape, patch, width, output
        See :class:`PatchModel`.
    heads, mlp_ratio, value_activation, parallel
        See :class:`Block`.
    """

    def __init__(
        self,
        image_shape: tuple[int, int] = (28, 28),
        patch: int = 4,
        width: int = 128,
        heads: int = 4,
        mlp_ratio: float = 4.0,
        value_activation: str = "none",
        parallel: bool = False,
        output: str = "clip",
    ) -> None:
        super().__init__(image_shape, patch, width, output)
        self.block = Block(width, heads, mlp_ratio, value_activation, parallel)

    def forward(self, images: Any, n_iter: int = 1) -> Any:
        """Training output after ``n_iter`` iterations: (B, H, W) -> (B, H, W) (not clipped)."""
        n_iter = check_count(n_iter, "n_iter", 0)
        z = self.encode(images)
        for _ in range(n_iter):
            z = self.block(z)
        return self.decode(z)

    def trajectory(self, images: Any, n_steps: int) -> Any:
        """Predictions in [0, 1] after t = 1, ..., T iterations: (B, H, W) -> (T, B, H, W)."""
        n_steps = check_count(n_steps, "n_steps", 1)
        z = self.encode(images)
        out = []
        for _ in range(n_steps):
            z = self.block(z)
            out.append(self.predict_from_state(z))
        return torch.stack(out)


class ViT(PatchModel):
    """``n_blocks`` distinct pre-LN blocks applied once (no recycling).

    Parameters
    ----------
    image_shape, patch, width, output
        See :class:`PatchModel`.
    heads, mlp_ratio, value_activation, parallel
        See :class:`Block`.
    n_blocks : int
        Depth (5 in the paper's comparison).
    """

    def __init__(
        self,
        image_shape: tuple[int, int] = (28, 28),
        patch: int = 4,
        width: int = 128,
        heads: int = 4,
        mlp_ratio: float = 4.0,
        value_activation: str = "none",
        parallel: bool = False,
        output: str = "clip",
        n_blocks: int = 5,
    ) -> None:
        super().__init__(image_shape, patch, width, output)
        n_blocks = check_count(n_blocks, "n_blocks", 1)
        self.blocks = nn.ModuleList(
            Block(width, heads, mlp_ratio, value_activation, parallel) for _ in range(n_blocks)
        )

    def forward(self, images: Any, n_iter: int | None = None) -> Any:
        """Training output: (B, H, W) -> (B, H, W) (``n_iter`` is ignored)."""
        z = self.encode(images)
        for block in self.blocks:
            z = block(z)
        return self.decode(z)

    def trajectory(self, images: Any, n_steps: int) -> Any:
        """The same prediction in [0, 1] repeated for t = 1..T: (B, H, W) -> (T, B, H, W)."""
        n_steps = check_count(n_steps, "n_steps", 1)
        z = self.encode(images)
        for block in self.blocks:
            z = block(z)
        y = self.predict_from_state(z)
        return y.unsqueeze(0).expand(n_steps, *y.shape)


# --------------------------------------------------------------------------- factory


def build_model(config: BaselineConfig) -> RecycledBlock | ViT:
    """The model of a config, with weights initialised from ``config.seed``.

    The global torch RNG is left untouched (the initialisation runs in a forked RNG).

    Returns
    -------
    RecycledBlock or ViT, on the CPU, float32.
    """
    if not isinstance(config, BaselineConfig):
        raise ValueError(f"config must be a BaselineConfig, got {type(config).__name__}")
    kwargs = dict(
        image_shape=config.image_shape,
        patch=config.patch,
        width=config.width,
        heads=config.heads,
        mlp_ratio=config.mlp_ratio,
        value_activation=config.value_activation,
        parallel=config.parallel,
        output=config.output,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        if config.model == "vit":
            return ViT(n_blocks=config.n_blocks, **kwargs)
        return RecycledBlock(**kwargs)


def count_parameters(model: Any) -> dict[str, int]:
    """Trainable parameters by part.

    Returns
    -------
    dict
        ``{"f_in": ..., "f_out": ..., "blocks": ..., "total": ...}`` (the positional encoding is
        fixed and not counted).
    """
    if not isinstance(model, PatchModel):
        raise ValueError(f"model must be a RecycledBlock or a ViT, got {type(model).__name__}")

    def n(module: Any) -> int:
        return sum(p.numel() for p in module.parameters() if p.requires_grad)

    blocks = model.block if isinstance(model, RecycledBlock) else model.blocks
    counts = {"f_in": n(model.f_in), "f_out": n(model.f_out), "blocks": n(blocks)}
    counts["total"] = n(model)
    return counts
