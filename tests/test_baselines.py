"""Tests of spinsa.baselines: the recycled transformer block and the ViT (paper §V-C).

The blocks are checked against hand-written float64 numpy formulas; training on tiny
8x8 images runs on the CPU in seconds.
"""

import numpy as np
import pytest
from scipy.special import erf

torch = pytest.importorskip("torch")

import spinsa.baselines.train as train_module  # noqa: E402
from spinsa._convergence import stopping_epoch  # noqa: E402
from spinsa._training import sinusoidal_positions  # noqa: E402
from spinsa.baselines import (  # noqa: E402
    BaselineConfig,
    evaluate_baseline,
    predict_trajectory,
    train_baseline,
)
from spinsa.baselines.config import RESUME_NEUTRAL  # noqa: E402
from spinsa.baselines.evaluate import corrupt_images, load_baseline  # noqa: E402
from spinsa.baselines.models import (  # noqa: E402
    Block,
    RecycledBlock,
    ViT,
    build_model,
    count_parameters,
    mlp_hidden_width,
    patchify,
    unpatchify,
)
from spinsa.baselines.train import (  # noqa: E402
    HISTORY,
    load_checkpoint,
    lr_factor,
    mask_batch,
    noise_batch,
    sample_tau,
    validation_split,
)
from spinsa.embedding import PatchEmbedding  # noqa: E402
from spinsa.io import SpinsaFileError  # noqa: E402
from spinsa.tasks import draw_noisy, task_inputs  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_config(**kw):
    """A recipe on 8x8 images; every image trains (no validation set) unless ``kw`` says."""
    base = dict(
        val_fraction=0.0,
        image_shape=(8, 8),
        patch=2,
        width=16,
        heads=2,
        epochs=2,
        batch_size=4,
        warmup_epochs=0.0,
        device="cpu",
        progress=False,
    )
    base.update(kw)
    return BaselineConfig(**base)


def tiny_images(rng, P=8, H=8, W=8):
    """Smooth blobs in [0, 1]: a bright disc at a random place on a dark background."""
    r, c = np.mgrid[:H, :W]
    centres = rng.uniform(1.5, H - 2.5, size=(P, 2))
    radius = rng.uniform(1.5, 2.5, size=P)
    d2 = (r[None] - centres[:, 0, None, None]) ** 2 + (c[None] - centres[:, 1, None, None]) ** 2
    return np.clip(1.5 - np.sqrt(d2) / radius[:, None, None], 0, 1).astype(np.float32)


# --------------------------------------------------------------------------- numpy references


def np_layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_gelu(x):
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def np_silu(x):
    return x / (1 + np.exp(-x))


def np_linear(x, lin):
    return x @ lin.weight.detach().double().numpy().T + lin.bias.detach().double().numpy()


def np_attention(h, attn, value_activation, heads):
    D = h.shape[-1]
    qkv = np_linear(h, attn.qkv)
    q, k, v = qkv[..., :D], qkv[..., D : 2 * D], qkv[..., 2 * D :]
    if value_activation == "gelu":
        v = np_gelu(v)
    elif value_activation == "swiglu":
        a, g = v[..., :D], v[..., D:]
        v = a * np_silu(g)
    assert v.shape[-1] == D
    hd = D // heads
    out = np.empty_like(h)
    for head in range(heads):
        sl = slice(head * hd, (head + 1) * hd)
        s = np.einsum("bia,bja->bij", q[..., sl], k[..., sl]) / np.sqrt(hd)
        s -= s.max(-1, keepdims=True)
        alpha = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
        out[..., sl] = np.einsum("bij,bja->bia", alpha, v[..., sl])
    return np_linear(out, attn.proj)


def np_mlp(h, mlp):
    return np_linear(np_gelu(np_linear(h, mlp.fc1)), mlp.fc2)


def np_ln(x, ln):
    return np_layernorm(x, ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy())


def np_block(x, block, value_activation, heads, parallel):
    if parallel:
        h = np_ln(x, block.norm1)
        return x + np_attention(h, block.attn, value_activation, heads) + np_mlp(h, block.mlp)
    u = x + np_attention(np_ln(x, block.norm1), block.attn, value_activation, heads)
    return u + np_mlp(np_ln(u, block.norm2), block.mlp)


def randomize(module, seed):
    """Non-trivial LayerNorm affine parameters and biases, so that no term can hide."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype) + (p == 1) * 1.0)


# --------------------------------------------------------------------------- the block


@pytest.mark.parametrize("value_activation", ["none", "gelu", "swiglu"])
@pytest.mark.parametrize("parallel", [False, True])
def test_block_matches_hand_written_formula(rng, value_activation, parallel):
    D, heads = 8, 2
    block = Block(D, heads, mlp_ratio=2.0, value_activation=value_activation, parallel=parallel)
    randomize(block, 1)
    block = block.double()
    x = rng.standard_normal((3, 5, D))
    got = block(torch.from_numpy(x)).detach().numpy()
    want = np_block(x, block, value_activation, heads, parallel)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_block_options_change_the_forward_pass(rng):
    """Same weights, different option: a different output (and the formula says which)."""
    D, heads = 8, 2
    x = torch.from_numpy(rng.standard_normal((2, 5, D)))
    serial = Block(D, heads, 2.0).double()
    randomize(serial, 2)
    gelu = Block(D, heads, 2.0, value_activation="gelu").double()
    gelu.load_state_dict(serial.state_dict())
    parallel = Block(D, heads, 2.0, parallel=True).double()
    parallel.load_state_dict({k: v for k, v in serial.state_dict().items() if "norm2" not in k})
    y0, y1, y2 = (b(x).detach().numpy() for b in (serial, gelu, parallel))
    assert np.abs(y0 - y1).max() > 1e-3
    assert np.abs(y0 - y2).max() > 1e-3
    # the parallel block is the serial formula with LN2(u) replaced by LN1(x)
    xn = x.numpy()
    h = np_ln(xn, serial.norm1)
    want = xn + np_attention(h, serial.attn, "none", heads) + np_mlp(h, serial.mlp)
    np.testing.assert_allclose(y2, want, rtol=1e-10, atol=1e-10)


def test_swiglu_value_gate():
    """v = a * SiLU(g) with (a, g) the two halves of the doubled value projection."""
    block = Block(4, 1, 2.0, value_activation="swiglu").double()
    assert block.attn.qkv.out_features == 4 * 4
    v = torch.tensor([[1.0, -2.0, 0.5, 3.0, 0.0, 1.0, -1.0, 2.0]], dtype=torch.float64)
    a, g = v[:, :4].numpy(), v[:, 4:].numpy()
    np.testing.assert_allclose(block.attn.values(v).numpy(), a * np_silu(g), rtol=1e-12)


def test_block_rejects_bad_sizes():
    with pytest.raises(ValueError, match="multiple of heads"):
        Block(10, 3)
    with pytest.raises(ValueError, match="value_activation"):
        Block(8, 2, value_activation="relu")
    with pytest.raises(ValueError, match="no hidden unit"):
        mlp_hidden_width(8, 0.4, "swiglu")


# --------------------------------------------------------------------------- shapes, counts


def test_sinusoidal_positions_formula():
    e = sinusoidal_positions(7, 6).numpy()
    k = np.arange(7)[:, None]
    m = np.arange(3)[None, :]
    np.testing.assert_allclose(e[:, 0::2], np.sin(k / 10000 ** (2 * m / 6)), rtol=1e-6)
    np.testing.assert_allclose(e[:, 1::2], np.cos(k / 10000 ** (2 * m / 6)), rtol=1e-6)
    assert sinusoidal_positions(4, 5).shape == (4, 5)


@pytest.mark.parametrize("patch", [1, 2, 4])
def test_patchify_uses_the_embedding_token_order(rng, patch):
    images = rng.random((3, 8, 12)).astype(np.float32)
    tokens = patchify(torch.from_numpy(images), patch).numpy()
    N = (8 // patch) * (12 // patch)
    assert tokens.shape == (3, N, patch * patch)
    index = PatchEmbedding(image_shape=(8, 12), patch=patch).token_index_map()
    for r in range(8):
        for c in range(12):
            pixel = (r % patch) * patch + (c % patch)
            np.testing.assert_array_equal(tokens[:, index[r, c], pixel], images[:, r, c])
    back = unpatchify(torch.from_numpy(tokens), (8, 12), patch).numpy()
    np.testing.assert_array_equal(back, images)


def block_count(D, hidden, value_width, parallel):
    qkv = D * (2 * D + value_width) + 2 * D + value_width
    proj = D * D + D
    mlp = D * hidden + hidden + hidden * D + D
    norms = (1 if parallel else 2) * 2 * D
    return qkv + proj + mlp + norms


@pytest.mark.parametrize("model", ["recycled", "vit"])
@pytest.mark.parametrize("value_activation", ["none", "gelu", "swiglu"])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("patch", [2, 4])
def test_shapes_and_parameter_counts(model, value_activation, parallel, patch):
    D = 16
    cfg = tiny_config(
        model=model,
        patch=patch,
        width=D,
        value_activation=value_activation,
        parallel=parallel,
        n_blocks=3,
    )
    m = build_model(cfg)
    assert isinstance(m, RecycledBlock if model == "recycled" else ViT)
    a = patch * patch
    hidden = 4 * D - (D // 2 if value_activation == "swiglu" else 0)
    assert mlp_hidden_width(D, 4.0, value_activation) == hidden
    vw = 2 * D if value_activation == "swiglu" else D
    n_blocks = 1 if model == "recycled" else 3
    counts = count_parameters(m)
    assert counts["f_in"] == a * D + D
    assert counts["f_out"] == D * a + a
    assert counts["blocks"] == n_blocks * block_count(D, hidden, vw, parallel)
    assert counts["total"] == counts["f_in"] + counts["f_out"] + counts["blocks"]
    x = torch.rand(5, 8, 8)
    assert m(x, 3).shape == (5, 8, 8)
    assert m.encode(x).shape == (5, cfg.n_tokens, D)
    with torch.no_grad():
        traj = m.trajectory(x, 4)
    assert traj.shape == (4, 5, 8, 8)
    assert float(traj.min()) >= 0 and float(traj.max()) <= 1


def test_default_parameter_counts():
    """The numbers quoted in the docs (width 128, 4 heads, MLP ratio 4, 28x28 images)."""
    expected = {
        ("recycled", 4): 202_512,
        ("vit", 4): 995_600,
        ("recycled", 2): 199_428,
        ("vit", 2): 992_516,
    }
    for (model, patch), total in expected.items():
        m = build_model(BaselineConfig(model=model, patch=patch))
        assert count_parameters(m)["total"] == total
    # SwiGLU values keep the block within a few parameters of the plain one
    plain = count_parameters(build_model(BaselineConfig()))["blocks"]
    swiglu = count_parameters(build_model(BaselineConfig(value_activation="swiglu")))["blocks"]
    assert abs(swiglu - plain) <= 128


def test_model_rejects_wrong_image_shape():
    m = build_model(tiny_config())
    with pytest.raises(ValueError, match="images must have shape"):
        m(torch.rand(2, 8, 9), 1)


def test_build_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = build_model(tiny_config(seed=5))
    assert torch.equal(torch.random.get_rng_state(), before)
    b = build_model(tiny_config(seed=5))
    c = build_model(tiny_config(seed=6))
    for (k, p), q, r in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values()
    ):
        assert torch.equal(p, q), k
    assert not all(torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))


# --------------------------------------------------------------------------- positional encoding


@pytest.mark.parametrize("output", ["clip", "sigmoid"])
def test_positional_encoding_is_subtracted_before_the_output(rng, output):
    m = build_model(tiny_config(output=output)).double()
    randomize(m, 3)
    x = rng.random((3, 8, 8))
    p = patchify(torch.from_numpy(x), 2).numpy()  # (3, 16, 4)
    e = np.zeros((16, 16))
    k, i = np.arange(16)[:, None], np.arange(8)[None, :]
    e[:, 0::2], e[:, 1::2] = np.sin(k / 10000 ** (2 * i / 16)), np.cos(k / 10000 ** (2 * i / 16))
    e = e.astype(np.float32).astype(np.float64)  # the model keeps the encoding in float32

    def head(z):
        y = np_linear(z - e, m.f_out)
        return 1 / (1 + np.exp(-y)) if output == "sigmoid" else y

    z0 = np_linear(p, m.f_in) + e
    # zero iterations: the encoding cancels exactly, F_out(F_in p)
    y0 = m(torch.from_numpy(x), 0).detach().numpy()
    want0 = np_linear(np_linear(p, m.f_in), m.f_out)
    want0 = 1 / (1 + np.exp(-want0)) if output == "sigmoid" else want0
    np.testing.assert_allclose(patchify(torch.from_numpy(y0), 2).numpy(), want0, atol=1e-12)
    # two iterations: F_out(B(B(F_in p + e)) - e)
    z2 = np_block(np_block(z0, m.block, "none", 2, False), m.block, "none", 2, False)
    y2 = m(torch.from_numpy(x), 2).detach().numpy()
    np.testing.assert_allclose(patchify(torch.from_numpy(y2), 2).numpy(), head(z2), atol=1e-10)
    traj = m.trajectory(torch.from_numpy(x), 2).detach().numpy()
    np.testing.assert_allclose(traj[1], np.clip(y2, 0, 1), atol=1e-12)


def test_vit_applies_distinct_blocks_once(rng):
    m = build_model(tiny_config(model="vit", n_blocks=3)).double()
    randomize(m, 4)
    x = torch.from_numpy(rng.random((2, 8, 8)))
    z = m.encode(x).detach().numpy()
    for blk in m.blocks:
        z = np_block(z, blk, "none", 2, False)
    want = unpatchify(torch.from_numpy(np_linear(z - m.positions.numpy(), m.f_out)), (8, 8), 2)
    np.testing.assert_allclose(m(x).detach().numpy(), want.numpy(), atol=1e-10)
    traj = m.trajectory(x, 5).detach().numpy()
    for t in range(5):
        np.testing.assert_array_equal(traj[t], traj[0])


# --------------------------------------------------------------------------- training pieces


def test_tau_is_uniform_on_3_to_7():
    g = torch.Generator().manual_seed(0)
    draws = np.array([sample_tau(g, 3, 7) for _ in range(5000)])
    values, counts = np.unique(draws, return_counts=True)
    np.testing.assert_array_equal(values, [3, 4, 5, 6, 7])
    sigma = np.sqrt(5000 * 0.2 * 0.8)
    assert np.all(np.abs(counts - 1000) < 5 * sigma)


def test_training_draws_tau_in_3_to_7(rng):
    cfg = tiny_config(epochs=3, batch_size=1)
    _, hist = train_baseline(cfg, tiny_images(rng, P=16), "denoise")
    assert hist.step_tau.shape == (48,)
    assert set(hist.step_tau.tolist()) <= {3, 4, 5, 6, 7}
    assert len(set(hist.step_tau.tolist())) >= 4
    _, hist_vit = train_baseline(cfg.replace(model="vit", epochs=1), tiny_images(rng), "masked")
    assert np.all(hist_vit.step_tau == 0)


def test_lr_schedules():
    cfg = tiny_config(epochs=4, lr=1e-2, warmup_epochs=1.0)
    spe = 5  # steps per epoch
    assert lr_factor(cfg, 0, spe) == pytest.approx(1 / 5)
    assert lr_factor(cfg, 4, spe) == pytest.approx(1.0)
    assert lr_factor(cfg, 5, spe) == pytest.approx(1.0)
    assert lr_factor(cfg, 5 + 15 // 2, spe) == pytest.approx(0.5 * (1 + np.cos(np.pi * 7 / 15)))
    assert lr_factor(cfg, 19, spe) == pytest.approx(0.5 * (1 + np.cos(np.pi * 14 / 15)))
    step = cfg.replace(schedule="step", step_epochs=2, step_gamma=0.5, warmup_epochs=0.0)
    assert [lr_factor(step, s, spe) for s in (0, 9, 10, 19)] == [1.0, 1.0, 0.5, 0.5]
    const = cfg.replace(schedule="constant", warmup_epochs=0.0)
    assert lr_factor(const, 17, spe) == 1.0


def test_progress_is_one_line_per_stage_off_a_terminal(rng, capsys):
    train_baseline(tiny_config(epochs=2, progress=True), tiny_images(rng, P=8), "masked")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("recycled (masked): 4 steps in "), lines
    assert "epoch=2" in lines[0]
    train_baseline(tiny_config(epochs=1), tiny_images(rng, P=8), "masked")  # progress=False
    assert capsys.readouterr().err == ""


def test_history_records_the_schedule(rng):
    cfg = tiny_config(epochs=2, batch_size=3, warmup_epochs=0.5, lr=3e-3)
    _, hist = train_baseline(cfg, tiny_images(rng, P=7), "masked")
    spe = 3
    want = [cfg.lr * lr_factor(cfg, s, spe) for s in range(2 * spe)]
    np.testing.assert_allclose(hist.step_lr, want, rtol=1e-12)
    assert hist.n_epochs == 2 and hist.step_loss.shape == (6,)
    np.testing.assert_allclose(hist.epoch_loss, hist.step_loss.reshape(2, 3).mean(1))


def test_mask_batch_zeroes_exactly_k_patches(rng):
    clean = torch.from_numpy(tiny_images(rng, P=6) * 0.5 + 0.5)  # no zero pixel
    imap = torch.from_numpy(PatchEmbedding(image_shape=(8, 8), patch=2).token_index_map())
    g = torch.Generator().manual_seed(0)
    inputs, pm = mask_batch(clean, 5, imap, 16, g)
    assert pm.shape == (6, 8, 8)
    # a masked pixel's whole patch is masked, and 5 patches (20 pixels) per image
    assert torch.equal(pm.sum((1, 2)), torch.full((6,), 20))
    tok = pm.reshape(6, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(6, 16, 4)
    assert torch.all(tok.all(-1) == tok.any(-1))
    assert torch.equal(inputs == 0, pm)
    assert torch.equal(inputs[~pm], clean[~pm])
    # the masked count follows spinsa.tasks.masked_count: int(fraction * N)
    assert tiny_config(mask_fraction=0.3).n_masked == 4  # 0.3 * 16 = 4.8
    assert BaselineConfig(patch=4).n_masked == 14  # 0.3 * 49 = 14.7
    assert BaselineConfig(patch=2).n_masked == 58  # 0.3 * 196 = 58.8


def test_noise_batch_restores_mean_and_variance(rng):
    clean = torch.from_numpy(rng.uniform(0.3, 0.7, size=(4, 8, 8)))
    clean[3] = 0.5  # a constant image stays constant
    g = torch.Generator().manual_seed(1)
    out = noise_batch(clean, 1e-4, g)
    assert out.shape == clean.shape and not torch.equal(out, clean)
    np.testing.assert_allclose(out.mean((1, 2)), clean.mean((1, 2)), atol=1e-12)
    np.testing.assert_allclose(
        out[:3].std((1, 2), correction=0), clean[:3].std((1, 2), correction=0), rtol=1e-10
    )
    np.testing.assert_allclose(out[3], 0.5)
    big = noise_batch(torch.from_numpy(tiny_images(rng)), 0.7, g)
    assert float(big.min()) >= 0 and float(big.max()) <= 1


def test_tiny_block_overfits_a_few_images(rng):
    images = tiny_images(rng, P=4)
    cfg = tiny_config(
        epochs=150, batch_size=4, lr=1e-2, schedule="constant", weight_decay=0.0, seed=1
    )
    _, hist = train_baseline(cfg, images, "masked")
    first, last = hist.step_loss[:3].mean(), hist.step_loss[-10:].mean()
    assert last < first / 10, (first, last)


# --------------------------------------------------------------- the faster step, the old one


@pytest.mark.parametrize("model", ["recycled", "vit"])
def test_plain_forward_is_the_models_forward(rng, model):
    """The bench's written-out forward (explicit softmax attention) is the models' forward
    (scaled_dot_product_attention), for every τ."""
    from spinsa.bench import plain_baseline_forward

    net = build_model(tiny_config(model=model, n_blocks=3, seed=4))
    images = torch.from_numpy(tiny_images(rng, P=5))
    for tau in (1, 3):
        with torch.no_grad():
            fast, plain = net(images, tau), plain_baseline_forward(net, images, tau)
        torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="serial blocks"):
        plain_baseline_forward(build_model(tiny_config(parallel=True)), images, 1)


@pytest.mark.parametrize("model", ["recycled", "vit"])
@pytest.mark.parametrize("task", ["masked", "denoise"])
def test_fast_training_step_gives_the_old_loss(rng, model, task):
    """train_baseline (fused AdamW, clipping of all tensors at once, SDPA) gives every step the
    loss of the old code path written as a plain loop (torch's default AdamW, a loop over the
    tensors, explicit attention), same seed: equal to float32 rounding, step after step."""
    from spinsa.bench import plain_baseline_training

    images = tiny_images(rng, P=22)  # 6 steps, the last one short
    cfg = tiny_config(model=model, epochs=1, warmup_epochs=0.5, grad_clip=0.5, seed=3)
    _, hist = train_baseline(cfg, images, task)
    losses, taus = plain_baseline_training(cfg, images, task)
    assert len(losses) == 6
    np.testing.assert_array_equal(hist.step_tau, taus)
    np.testing.assert_allclose(hist.step_loss, losses, rtol=2e-5)
    # the losses move: the comparison is of six different models, not one
    assert np.ptp(losses) > 100 * 2e-5 * losses.max()


@pytest.mark.parametrize("model", ["recycled", "vit"])
def test_baseline_flops_are_torchs_count(model):
    """baseline_forward_flops is what torch's flop counter counts in the forward pass,
    written out with matmuls (the counter has no formula for the CPU's fused attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    from spinsa.bench import baseline_forward_flops, plain_baseline_forward

    cfg = tiny_config(model=model, n_blocks=3, width=16, heads=2, mlp_ratio=3.0)
    net, images = build_model(cfg), torch.rand(3, 8, 8)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        plain_baseline_forward(net, images, 4)
    assert counter.get_total_flops() == 3 * baseline_forward_flops(cfg, 4)


def test_bench_baseline_step_runs_both_loops():
    from spinsa.bench import bench_baseline_step

    res = bench_baseline_step("recycled", width=16, batch=8, n_steps=2, repeat=1)
    assert res["max_rel_diff"] < 1e-5
    assert res["fast"].gflops > 0 and res["plain"].seconds > 0 and res["images_per_s"] > 0


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_and_resume_give_the_uninterrupted_weights(rng, tmp_path):
    images = tiny_images(rng, P=10)
    cfg = tiny_config(epochs=3, batch_size=4, warmup_epochs=1.0)
    ref_model, ref_hist = train_baseline(cfg, images, "masked", checkpoint=tmp_path / "a.pt")

    path = tmp_path / "b.pt"
    _, part = train_baseline(cfg, images, "masked", checkpoint=path, stop_after=1)
    assert part.n_epochs == 1 and load_checkpoint(path)["epoch"] == 1
    # a fresh process would rebuild everything from the file: resume with a new call
    model, hist = train_baseline(
        cfg.replace(progress=True), images, "masked", checkpoint=path, resume=True
    )
    for (name, p), q in zip(ref_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(p, q), name
    np.testing.assert_array_equal(hist.step_loss, ref_hist.step_loss)
    np.testing.assert_array_equal(hist.step_tau, ref_hist.step_tau)
    np.testing.assert_array_equal(hist.step_lr, ref_hist.step_lr)
    assert hist.n_epochs == 3

    # a finished checkpoint returns at once with the trained weights
    again, hist2 = train_baseline(cfg, images, "masked", checkpoint=path, resume=True)
    assert torch.equal(again.f_in.weight, model.f_in.weight)
    np.testing.assert_array_equal(hist2.epoch_loss, hist.epoch_loss)

    loaded, loaded_cfg, task, loaded_hist = load_baseline(path)
    assert loaded_cfg.replace(progress=False) == cfg and task == "masked"
    assert torch.equal(loaded.block.mlp.fc1.weight, model.block.mlp.fc1.weight)
    np.testing.assert_array_equal(loaded_hist.step_loss, hist.step_loss)


def early_config(**kw):
    """A recipe that the stopping rule ends after a few epochs (of at most 40)."""
    return tiny_config(epochs=40, val_fraction=0.25, patience=2, lr=3e-3, **kw)


def test_validation_split_is_seeded_and_disjoint():
    fit, val = validation_split(20, 0.25, seed=3)
    assert len(val) == 5 and len(fit) == 15 and not set(fit) & set(val)
    np.testing.assert_array_equal(np.sort(np.concatenate([fit, val])), np.arange(20))
    np.testing.assert_array_equal(validation_split(20, 0.25, seed=3)[1], val)
    assert not np.array_equal(validation_split(20, 0.25, seed=4)[1], val)
    assert len(validation_split(20, 0.01, seed=0)[1]) == 1  # at least one image
    assert len(validation_split(20, 0.0, seed=0)[1]) == 0
    with pytest.raises(ValueError, match="leaves none to train on"):
        validation_split(1, 0.1, seed=0)


@pytest.mark.parametrize("model", ["recycled", "vit"])
def test_validation_curve_is_the_loss_on_held_out_images(rng, model):
    images = tiny_images(rng, P=16)
    cfg = tiny_config(model=model, epochs=3, val_fraction=0.25, tau_min=2, tau_max=3)
    net, hist = train_baseline(cfg, images, "masked")
    assert hist.val_loss.shape == (3,) and np.isfinite(hist.val_loss).all()
    c = hist.convergence
    assert (c.epochs_used, c.max_epochs, c.best_epoch) == (3, 3, int(np.argmin(hist.val_loss)))
    assert not c.converged  # 3 epochs cannot show 5 epochs without progress
    # the model holds the best epoch's weights: their loss on the held-out images, with
    # masks drawn once from seed + 2 and tau averaged over 2..3, is the best of the curve
    _, val = validation_split(16, 0.25, cfg.seed)
    clean = torch.from_numpy(images[val])
    imap = torch.from_numpy(PatchEmbedding(image_shape=(8, 8), patch=2).token_index_map())
    g = torch.Generator().manual_seed(cfg.seed + 2)
    inputs, _ = mask_batch(clean, cfg.n_masked, imap, 16, g)
    taus = (2, 3) if model == "recycled" else (1,)
    with torch.no_grad():
        want = np.mean([float(((net(inputs, t) - clean) ** 2).double().mean()) for t in taus])
    np.testing.assert_allclose(want, hist.val_loss[c.best_epoch], rtol=1e-5)
    # the training steps never saw the held-out images: 12 images, 3 steps of 4 per epoch
    assert hist.step_loss.shape == (9,)


def test_early_stop_converges_and_keeps_the_best_weights(rng, tmp_path):
    images = tiny_images(rng, P=24)
    cfg = early_config()
    net, hist = train_baseline(cfg, images, "denoise", checkpoint=tmp_path / "e.pt")
    c = hist.convergence
    assert c.converged and c.epochs_used == hist.n_epochs < cfg.epochs
    assert c.epochs_used - 1 == stopping_epoch(hist.val_loss, cfg.rel_tol, cfg.patience)
    assert (
        c.criterion == "less than 0.5 % relative improvement of the best validation loss "
        "over 2 epochs"
    )
    ckpt = load_checkpoint(tmp_path / "e.pt")
    assert ckpt["convergence"] == c.to_attrs()
    loaded, _, _, loaded_hist = load_baseline(tmp_path / "e.pt")
    assert loaded_hist.convergence == c
    for (name, p), q in zip(net.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(p, q), name  # the best weights, not the last ones
    if c.best_epoch < c.epochs_used - 1:  # the checkpoint's last weights are other ones
        assert not torch.equal(ckpt["model"]["f_in.weight"], net.f_in.weight)


def test_resume_after_a_kill_with_early_stopping_gives_the_uninterrupted_run(
    rng, tmp_path, monkeypatch
):
    images = tiny_images(rng, P=24)
    cfg = early_config()
    ref_net, ref = train_baseline(cfg, images, "denoise")
    n = ref.convergence.epochs_used
    assert ref.convergence.converged and 4 <= n < cfg.epochs

    # killed while validating the last epoch but one, before its checkpoint
    real, calls = train_module._validation_loss, []

    def dying(*args, **kw):
        calls.append(1)
        if len(calls) == n - 1:
            raise KeyboardInterrupt
        return real(*args, **kw)

    path = tmp_path / "k.pt"
    monkeypatch.setattr(train_module, "_validation_loss", dying)
    with pytest.raises(KeyboardInterrupt):
        train_baseline(cfg, images, "denoise", checkpoint=path)
    monkeypatch.setattr(train_module, "_validation_loss", real)
    assert load_checkpoint(path)["epoch"] == n - 2
    net, hist = train_baseline(cfg, images, "denoise", checkpoint=path, resume=True)
    for (name, p), q in zip(ref_net.state_dict().items(), net.state_dict().values()):
        assert torch.equal(p, q), name
    for name in set(HISTORY) - {"epoch_seconds"}:  # every number but the wall times
        np.testing.assert_array_equal(getattr(hist, name), getattr(ref, name), err_msg=name)
    assert hist.convergence == ref.convergence


def test_checkpoint_guards(rng, tmp_path):
    images = tiny_images(rng, P=4)
    cfg = tiny_config(epochs=1)
    path = tmp_path / "c.pt"
    train_baseline(cfg, images, "masked", checkpoint=path)
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary file left behind
    with pytest.raises(FileExistsError, match="resume=True"):
        train_baseline(cfg, images, "masked", checkpoint=path)
    with pytest.raises(ValueError, match="another config: width = 16 there, 8 now"):
        train_baseline(cfg.replace(width=8), images, "masked", checkpoint=path, resume=True)
    with pytest.raises(ValueError, match="task"):
        train_baseline(cfg, images, "denoise", checkpoint=path, resume=True)
    with pytest.raises(ValueError, match="other data.*same images_train"):
        train_baseline(cfg, images[::-1], "masked", checkpoint=path, resume=True)
    # fields that do not change the numbers may differ
    for name in RESUME_NEUTRAL:
        assert name in BaselineConfig.__dataclass_fields__
    train_baseline(cfg.replace(checkpoint_every=3), images, "masked", checkpoint=path, resume=True)
    # a checkpoint from another device type resumes, with a warning about the noise stream
    ckpt = load_checkpoint(path)
    ckpt["device_type"] = "cuda"
    torch.save(ckpt, path)
    with pytest.warns(UserWarning, match="redrawn"):
        train_baseline(cfg, images, "masked", checkpoint=path, resume=True)
    raw = bytearray(path.read_bytes())  # a bit flipped in the middle of the weights
    raw[len(raw) // 2] ^= 0x10
    (tmp_path / "flipped.pt").write_bytes(bytes(raw))
    with pytest.raises(SpinsaFileError, match="CRC-32 of its record .* fails"):
        load_checkpoint(tmp_path / "flipped.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({**ckpt, "format": "spinsa-baseline/1"}, path)  # of spinsa before the trainer
    with pytest.raises(ValueError, match="older spinsa.*delete it and train again"):
        train_baseline(cfg, images, "masked", checkpoint=path, resume=True)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_constant_schedule_resumes_under_a_higher_cap(rng, tmp_path):
    """The cap does not enter a constant schedule: a run that reached it goes on under a
    higher one with exactly the result of a run that had the higher cap from the start."""
    images = tiny_images(rng, P=12)
    cfg = tiny_config(epochs=2, schedule="constant", val_fraction=0.25, patience=5)
    path = tmp_path / "c.pt"
    _, short = train_baseline(cfg, images, "masked", checkpoint=path)
    assert short.convergence.max_epochs == 2 and not short.convergence.converged
    net, longer = train_baseline(cfg.replace(epochs=4), images, "masked", checkpoint=path,
                                 resume=True)  # fmt: skip
    ref_net, ref = train_baseline(cfg.replace(epochs=4), images, "masked")
    for name in set(HISTORY) - {"epoch_seconds"}:
        np.testing.assert_array_equal(getattr(longer, name), getattr(ref, name), err_msg=name)
    assert longer.convergence == ref.convergence and longer.convergence.max_epochs == 4
    for p, q in zip(net.state_dict().values(), ref_net.state_dict().values(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="holds 4 epochs, more than epochs = 3"):
        train_baseline(cfg.replace(epochs=3), images, "masked", checkpoint=path, resume=True)
    cosine = tmp_path / "cosine.pt"
    train_baseline(cfg.replace(schedule="cosine"), images, "masked", checkpoint=cosine)
    with pytest.raises(ValueError, match="another config: epochs = 2 there, 4 now"):
        train_baseline(cfg.replace(schedule="cosine", epochs=4), images, "masked",
                       checkpoint=cosine, resume=True)  # fmt: skip


def test_train_rejects_bad_input(rng):
    cfg = tiny_config()
    with pytest.raises(ValueError, match="task"):
        train_baseline(cfg, tiny_images(rng), "inpaint")
    with pytest.raises(ValueError, match=r"shape \(P, 8, 8\)"):
        train_baseline(cfg, rng.random((4, 9, 8)), "masked")
    with pytest.raises(ValueError, match="divide by 255"):
        train_baseline(cfg, 255 * tiny_images(rng), "masked")
    with pytest.raises(ValueError, match="config"):
        train_baseline({"width": 8}, tiny_images(rng), "masked")


# --------------------------------------------------------------------------- evaluation


def test_corruption_matches_the_spin_harness(rng):
    images = tiny_images(rng, P=5)
    emb = PatchEmbedding(image_shape=(8, 8), patch=2)
    index = np.array([4, 9, 0, 2, 7])
    inputs, pm = corrupt_images(images, "masked", 2, seed=7, index=index)
    _, mask = task_inputs("masked", images, emb, index=index, seed=7)
    np.testing.assert_array_equal(pm, mask[:, emb.token_index_map()])
    np.testing.assert_array_equal(inputs, np.where(pm, 0, images))
    noisy, none = corrupt_images(images, "denoise", 2, seed=7, index=index)
    assert none is None
    np.testing.assert_allclose(noisy, draw_noisy(images, index, 0.7, 7), rtol=1e-6)


@pytest.mark.parametrize("model", ["recycled", "vit"])
def test_evaluate_matches_plain_mse(rng, model):
    m = build_model(tiny_config(model=model, n_blocks=2))
    images = tiny_images(rng, P=7)
    res = evaluate_baseline(m, images, "masked", T=4, seed=3, batch_size=3)
    assert res.errors.all.shape == (4, 7)
    np.testing.assert_array_equal(res.times, [1, 2, 3, 4])
    inputs, pm = corrupt_images(images, "masked", 2, seed=3)
    pred = predict_trajectory(m, inputs, 4)
    assert pred.shape == (4, 7, 8, 8)
    sq = (pred.astype(np.float64) - images) ** 2
    np.testing.assert_allclose(res.errors.all, sq.mean((2, 3)), rtol=1e-12)
    masked = np.array([[sq[t, p][pm[p]].mean() for p in range(7)] for t in range(4)])
    np.testing.assert_allclose(res.errors.masked, masked, rtol=1e-12)
    if model == "vit":
        np.testing.assert_array_equal(res.errors.all, np.broadcast_to(res.errors.all[0], (4, 7)))
    summary = res.summary()
    np.testing.assert_allclose(summary.mean.all, sq.mean((2, 3)).mean(1), rtol=1e-12)
    # batch size does not change the numbers
    res_big = evaluate_baseline(m, images, "masked", T=4, seed=3, batch_size=100)
    np.testing.assert_allclose(res_big.errors.all, res.errors.all, rtol=1e-6)


def test_evaluate_denoise_with_input(rng):
    m = build_model(tiny_config())
    images = tiny_images(rng, P=4)
    res = evaluate_baseline(m, images, "denoise", T=3, seed=0, include_input=True)
    np.testing.assert_array_equal(res.times, [0, 1, 2, 3])
    noisy, _ = corrupt_images(images, "denoise", 2, seed=0)
    np.testing.assert_allclose(res.errors.all[0], ((noisy - images) ** 2).mean((1, 2)), rtol=1e-6)
    assert np.isnan(res.errors.masked).all()


def test_evaluate_rejects_bad_input(rng):
    m = build_model(tiny_config())
    with pytest.raises(ValueError, match="T must be"):
        evaluate_baseline(m, tiny_images(rng), "masked", T=0)
    with pytest.raises(ValueError, match="images_test"):
        evaluate_baseline(m, rng.random((3, 6, 6)), "masked")
    with pytest.raises(ValueError, match="RecycledBlock or a ViT"):
        evaluate_baseline(torch.nn.Linear(2, 2), tiny_images(rng), "masked")


# --------------------------------------------------------------------------- config, imports


def test_config_validation():
    with pytest.raises(ValueError, match="multiple of heads"):
        BaselineConfig(width=30, heads=4)
    with pytest.raises(ValueError, match="patch = 3"):
        BaselineConfig(patch=3)
    with pytest.raises(ValueError, match="tau_max"):
        BaselineConfig(tau_min=5, tau_max=4)
    with pytest.raises(ValueError, match="model"):
        BaselineConfig(model="resnet")
    with pytest.raises(ValueError, match="mask_fraction"):
        BaselineConfig(mask_fraction=1.0)
    with pytest.raises(ValueError, match="epochs"):
        BaselineConfig(epochs=2.0)
    with pytest.raises(ValueError, match="schedule"):
        BaselineConfig(schedule="linear")
    with pytest.raises(ValueError, match=r"val_fraction must be in \[0, 1\)"):
        BaselineConfig(val_fraction=1.0)
    with pytest.raises(ValueError, match="val_fraction"):
        BaselineConfig(val_fraction=-0.1)
    with pytest.raises(ValueError, match="rel_tol"):
        BaselineConfig(rel_tol=1.5)
    with pytest.raises(ValueError, match="patience"):
        BaselineConfig(patience=0)
    cfg = BaselineConfig()
    assert (cfg.val_fraction, cfg.rel_tol, cfg.patience) == (0.1, 0.005, 5)


def test_config_toml_round_trip(tmp_path):
    cfg = BaselineConfig(model="vit", value_activation="swiglu", parallel=True, lr=5e-4)
    assert BaselineConfig.from_toml(cfg.to_toml()) == cfg
    rule = BaselineConfig(val_fraction=0.2, rel_tol=0.01, patience=3)
    assert BaselineConfig.from_toml(rule.to_toml()) == rule
    assert "rel_tol = 0.01\npatience = 3\n" in rule.to_toml()
    odd = BaselineConfig(image_shape=(12, 8), patch=2, device='cuda:1"\\', weight_decay=1e-20)
    assert BaselineConfig.from_toml(odd.to_toml()) == odd
    assert BaselineConfig.from_dict(odd.to_dict()) == odd
    path = tmp_path / "rb.toml"
    path.write_text('[baseline]\nmodel = "recycled"\npatch = 2\nlr = 1\nimage_shape = [28, 28]\n')
    cfg2 = BaselineConfig.from_toml(path)
    assert cfg2.patch == 2 and cfg2.lr == 1.0 and isinstance(cfg2.lr, float)
    assert BaselineConfig.from_toml(str(path)) == cfg2
    with pytest.raises(ValueError, match="unknown key 'depth' in the baseline config"):
        BaselineConfig.from_toml("depth = 3\n")
    with pytest.raises(ValueError, match="unknown key 'extra' in \\[baseline\\]"):
        BaselineConfig.from_toml("[baseline]\nwidth = 8\nheads = 2\n[baseline.extra]\n")
    with pytest.raises(ValueError, match="unknown key 'epochs'.*known keys: baseline"):
        BaselineConfig.from_toml("epochs = 3\n[baseline]\nwidth = 8\n")
    quick = BaselineConfig.quick(width=16)
    assert (quick.device, quick.width, quick.heads, quick.epochs) == ("cpu", 16, 2, 2)


@pytest.mark.gpu
def test_training_on_gpu(rng):
    cfg = tiny_config(device="cuda", epochs=2)
    model, hist = train_baseline(cfg, tiny_images(rng, P=16), "masked")
    assert next(model.parameters()).is_cuda
    assert np.isfinite(hist.step_loss).all()
    res = evaluate_baseline(model, tiny_images(rng, P=5), "masked", T=3)
    assert np.isfinite(res.errors.all).all()


@pytest.mark.gpu
def test_resume_on_gpu(rng, tmp_path):
    images = tiny_images(rng, P=10)
    cfg = tiny_config(device="cuda", epochs=3)
    ref, _ = train_baseline(cfg, images, "denoise")
    path = tmp_path / "g.pt"
    train_baseline(cfg, images, "denoise", checkpoint=path, stop_after=2)
    model, _ = train_baseline(cfg, images, "denoise", checkpoint=path, resume=True)
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # the matmul peak and four short trainings: about a minute on a busy machine
def test_bench_cli_prints_the_baseline_step(tmp_path, capsys):
    import json

    from spinsa.cli import main

    path = tmp_path / "bench.json"
    assert main(["bench", "--only", "baseline", "--quick", "--no-plain", "--json", str(path)]) == 0
    assert "images_per_s" in capsys.readouterr().out
    record = json.loads(path.read_text())
    assert [b["title"].split(",")[0] for b in record["benchmarks"]] == [
        "baseline training step: vit",
        "baseline training step: recycled",
    ]
    assert all(b["images_per_s"] > 0 for b in record["benchmarks"])
