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

The block (:class:`Block`) is pre-LN, serial or parallel (MABViT/PaLM), with multi-head
self-attention by ``torch.nn.functional.scaled_dot_product_attention`` and an optional MABViT
activation of the values (:class:`SelfAttention`): ``"none"`` v = W_v h + b_v, ``"gelu"``
v = GELU(W_v h + b_v), ``"swiglu"`` v = (W_a h + b_a) * SiLU(W_g h + b_g), whose doubled
value projection is paid for by a narrower MLP (:func:`mlp_hidden_width`).

This module imports torch at import time; ``import spinsa.baselines`` does not import it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from spinsa._checks import check_choice, check_count, check_positive
from spinsa._torch import import_torch
from spinsa._training import sinusoidal_positions
from spinsa.baselines.config import OUTPUTS, VALUE_ACTIVATIONS, BaselineConfig
from spinsa.embedding import PatchEmbedding

torch = import_torch()
nn = torch.nn
F = torch.nn.functional

__all__ = [
    "Block",
    "PatchModel",
    "RecycledBlock",
    "SelfAttention",
    "ViT",
    "build_model",
    "check_model",
    "count_parameters",
    "mlp_hidden_width",
    "patchify",
    "unpatchify",
]


# --------------------------------------------------------------------------- helpers


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
    t = images.reshape(B, H // patch, patch, W // patch, patch).permute(0, 1, 3, 2, 4)
    return t.reshape(B, -1, patch * patch)


def unpatchify(tokens: Any, image_shape: tuple[int, int], patch: int) -> Any:
    """The inverse of :func:`patchify`: (B, N, patch²) -> (B, H, W)."""
    (H, W), B = image_shape, tokens.shape[0]
    t = tokens.reshape(B, H // patch, W // patch, patch, patch).permute(0, 1, 3, 2, 4)
    return t.reshape(B, H, W)


def mlp_hidden_width(width: int, mlp_ratio: float, value_activation: str = "none") -> int:
    """Hidden width of the block's MLP.

    ``round(mlp_ratio * width)``, minus round((D² + D) / (2D + 1)) for SwiGLU values: the extra
    D × D weight and D bias of the doubled value projection are paid for by the MLP, whose
    every hidden unit costs 2D + 1 parameters.
    """
    width = check_count(width, "width", 1)
    mlp_ratio = check_positive(mlp_ratio, "mlp_ratio")
    swiglu = check_choice(value_activation, "value_activation", VALUE_ACTIVATIONS) == "swiglu"
    paid_by_mlp = round((width * width + width) / (2 * width + 1)) if swiglu else 0
    hidden = round(mlp_ratio * width) - paid_by_mlp
    if hidden < 1:
        raise ValueError(
            f"mlp_ratio = {mlp_ratio} leaves no hidden unit in the MLP of width {width}"
            + (" with SwiGLU values" if swiglu else "")
        )
    return hidden


# --------------------------------------------------------------------------- the block


class SelfAttention(nn.Module):
    """Multi-head self-attention with an optional MABViT value activation.

    q, k, v = split(W_qkv h + b_qkv); v <- act(v); heads of width D / heads;
    SA(h) = W_o concat_heads(softmax(q k^T / sqrt(D / heads)) v) + b_o.

    Parameters
    ----------
    width, heads : int
        D and the number of heads, which divides D.
    value_activation : {"none", "gelu", "swiglu"}
        ``"swiglu"`` makes the value part of W_qkv 2D wide: v = a * SiLU(g), (a, g) = split(v).
    """

    def __init__(self, width: int, heads: int, value_activation: str = "none") -> None:
        super().__init__()
        width, heads = check_count(width, "width", 1), check_count(heads, "heads", 1)
        if width % heads:
            raise ValueError(f"width = {width} must be a multiple of heads = {heads}")
        self.heads = heads
        self.value_activation = check_choice(
            value_activation, "value_activation", VALUE_ACTIVATIONS
        )
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
        heads = (t.reshape(B, N, self.heads, -1).transpose(1, 2) for t in (q, k, self.values(v)))
        y = F.scaled_dot_product_attention(*heads)
        return self.proj(y.transpose(1, 2).reshape(B, N, D))


class Block(nn.Module):
    """Pre-LN transformer block, serial or parallel, with MABViT value activations.

    serial:   u = x + SA(LN1(x)),  x' = u + MLP(LN2(u))
    parallel: h = LN(x),           x' = x + SA(h) + MLP(h)     (one LayerNorm)

    Parameters
    ----------
    width, heads : int
        D and the number of attention heads.
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
        hidden = mlp_hidden_width(width, mlp_ratio, value_activation)
        self.mlp = nn.Sequential(  # MLP(h) = W2 GELU(W1 h + b1) + b2
            OrderedDict(fc1=nn.Linear(width, hidden), gelu=nn.GELU(), fc2=nn.Linear(hidden, width))
        )
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
    """What both baselines share: F_in, the positional encoding, F_out and the block options.

    Parameters
    ----------
    image_shape : (int, int)
        (H, W).
    patch : int
        Patch side; divides H and W.
    width, heads, mlp_ratio, value_activation, parallel
        The options of every :class:`Block` of the model.
    output : {"clip", "sigmoid"}
        Head nonlinearity: none during training and a clip to [0, 1] in
        :meth:`predict_from_state`, or a sigmoid.
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
        super().__init__()
        grid = PatchEmbedding(image_shape=image_shape, patch=patch)  # checks the tiling
        self.image_shape, self.patch, self.n_tokens = grid.image_shape, grid.patch, grid.n_tokens
        self.width = check_count(width, "width", 1)
        self.output = check_choice(output, "output", OUTPUTS)
        self.block_args = (width, heads, mlp_ratio, value_activation, parallel)
        self.f_in = nn.Linear(grid.a, width)
        self.f_out = nn.Linear(width, grid.a)
        positions = sinusoidal_positions(self.n_tokens, width)
        self.register_buffer("positions", positions, persistent=False)

    def encode(self, images: Any) -> Any:
        """z(0) = F_in p + e: (B, H, W) -> (B, N, D)."""
        if images.ndim != 3 or tuple(images.shape[1:]) != self.image_shape:
            H, W = self.image_shape
            raise ValueError(f"images must have shape (B, {H}, {W}), got {tuple(images.shape)}")
        return self.f_in(patchify(images, self.patch)) + self.positions

    def decode(self, z: Any) -> Any:
        """Training output F_out(z - e) (sigmoid-ed if output="sigmoid"): (B, N, D) -> (B, H, W)."""
        y = unpatchify(self.f_out(z - self.positions), self.image_shape, self.patch)
        return torch.sigmoid(y) if self.output == "sigmoid" else y

    def predict_from_state(self, z: Any) -> Any:
        """Decoded image in [0, 1]: :meth:`decode` clipped. (B, N, D) -> (B, H, W)."""
        return self.decode(z).clamp(0.0, 1.0)

    def forward(self, images: Any, n_iter: int = 1) -> Any:
        """Training output (not clipped) after ``n_iter`` iterations of the recycled block, or
        after the ViT's blocks (which ignore ``n_iter``): (B, H, W) -> (B, H, W)."""
        return self.decode(self.iterate(self.encode(images), n_iter))


class RecycledBlock(PatchModel):
    """One pre-LN block iterated: the backprop analogue of the self-attention dynamics.

    z(0) = F_in p + e,  z(t) = B(z(t-1)),  image(t) = F_out(z(t) - e).
    The parameters are those of :class:`PatchModel`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.block = Block(*self.block_args)

    def iterate(self, z: Any, n_iter: int) -> Any:
        """B applied ``n_iter`` >= 0 times: (B, N, D) -> (B, N, D)."""
        for _ in range(check_count(n_iter, "n_iter", 0)):
            z = self.block(z)
        return z

    def trajectory(self, images: Any, n_steps: int) -> Any:
        """Predictions in [0, 1] after t = 1, ..., T iterations: (B, H, W) -> (T, B, H, W)."""
        z, out = self.encode(images), []
        for _ in range(check_count(n_steps, "n_steps", 1)):
            z = self.block(z)
            out.append(self.predict_from_state(z))
        return torch.stack(out)


class ViT(PatchModel):
    """``n_blocks`` distinct pre-LN blocks applied once (no recycling).

    The parameters are those of :class:`PatchModel`, and the keyword ``n_blocks`` (the depth,
    5 in the paper's comparison).
    """

    def __init__(self, *args: Any, n_blocks: int = 5, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        n_blocks = check_count(n_blocks, "n_blocks", 1)
        self.blocks = nn.ModuleList(Block(*self.block_args) for _ in range(n_blocks))

    def iterate(self, z: Any, n_iter: int | None = None) -> Any:
        """Every block once (``n_iter`` is ignored): (B, N, D) -> (B, N, D)."""
        for block in self.blocks:
            z = block(z)
        return z

    def trajectory(self, images: Any, n_steps: int) -> Any:
        """The same prediction in [0, 1] repeated for t = 1..T: (B, H, W) -> (T, B, H, W)."""
        y = self.predict_from_state(self.iterate(self.encode(images)))
        return y.expand(check_count(n_steps, "n_steps", 1), *y.shape)


# --------------------------------------------------------------------------- factory


def check_model(model: Any) -> PatchModel:
    """``model`` if it is a RecycledBlock or a ViT, else a ValueError."""
    if not isinstance(model, PatchModel):
        raise ValueError(f"model must be a RecycledBlock or a ViT, got {type(model).__name__}")
    return model


def build_model(config: BaselineConfig) -> RecycledBlock | ViT:
    """The model of a config, with weights initialised from ``config.seed``.

    The global torch RNG is left untouched (the initialisation runs in a forked RNG).

    Parameters
    ----------
    config : BaselineConfig
        Its ``model`` picks the architecture, the rest its sizes and ``seed``.

    Returns
    -------
    RecycledBlock or ViT, on the CPU, float32.
    """
    if not isinstance(config, BaselineConfig):
        raise ValueError(f"config must be a BaselineConfig, got {type(config).__name__}")
    names = ("image_shape", "patch", "width", "heads", "mlp_ratio", "value_activation")
    kwargs = {name: getattr(config, name) for name in (*names, "parallel", "output")}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        if config.model == "vit":
            return ViT(**kwargs, n_blocks=config.n_blocks)
        return RecycledBlock(**kwargs)


def count_parameters(model: Any) -> dict[str, int]:
    """Trainable parameters by part.

    Parameters
    ----------
    model : RecycledBlock or ViT

    Returns
    -------
    dict
        ``{"f_in": ..., "f_out": ..., "blocks": ..., "total": ...}`` (the positional encoding is
        fixed and not counted).
    """
    check_model(model)
    blocks = model.block if isinstance(model, RecycledBlock) else model.blocks
    parts = {"f_in": model.f_in, "f_out": model.f_out, "blocks": blocks, "total": model}
    return {
        name: sum(p.numel() for p in part.parameters() if p.requires_grad)
        for name, part in parts.items()
    }
