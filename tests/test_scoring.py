"""The compiled decode-and-score pass (spinsa.tasks.StateScorer) against the plain formulas:
decode_pixels, reconstruction_errors, a Pearson correlation and the step norm, for every
kind of embedding, masked and unmasked, float32 and float64."""

import functools

import numpy as np
import pytest
from tiny_configs import TINY

from spinsa import PatchEmbedding
from spinsa.tasks import (
    StateScorer,
    image_correlation,
    pixel_mask,
    reconstruction_errors,
)

# every kind of embedding: both scales, patches of 2 and 4, d above the minimum, colours
EMBEDDINGS = {
    "paper": dict(image_shape=(8, 12), patch=2),
    "damico2024": dict(image_shape=(8, 12), patch=2, scale="damico2024"),
    "patch4-wide": dict(image_shape=(8, 8), patch=4, d=40),
    "rgb": dict(image_shape=(4, 6), patch=2, channels=3),
    "rgb-damico2024": dict(image_shape=(4, 6), patch=2, channels=3, scale="damico2024"),
}


def _problem(rng, emb, P, dtype):
    """Clean images, states near their encodings (some far off, some tokens zeroed), the
    previous states, a token mask and a target image."""
    shape = (P, *emb.image_shape) + ((emb.channels,) if emb.channels > 1 else ())
    clean = rng.random(shape).astype(dtype)
    x = emb.encode(clean) + 0.3 * rng.standard_normal((P, emb.n_tokens, emb.d))
    x[1] = 5.0 * rng.standard_normal(x[1].shape)  # far off the image manifold: clamps
    x[:, 0] = 0.0  # the zero spin of a masked token decodes to 0
    prev = x + 0.1 * rng.standard_normal(x.shape)
    mask = rng.random((P, emb.n_tokens)) < 0.3
    mask[:3] = False
    mask[0, 0] = mask[1, -1] = True
    # image 2 has no masked pixels (masked error NaN), image 3 no visible ones
    mask[3] = True  # ... and one without visible pixels
    target = rng.random(shape[1:])
    return emb.pixel_space(clean), x.astype(dtype), prev.astype(dtype), mask, target


def _pearson(images, target):
    """One np.corrcoef per image."""
    return np.array([np.corrcoef(im.ravel(), target.ravel())[0, 1] for im in images])


@pytest.mark.parametrize("kind", EMBEDDINGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
def test_compiled_scores_are_the_plain_formulas(rng, kind, dtype, masked):
    emb = PatchEmbedding(**EMBEDDINGS[kind])
    P = 6
    clean, x, prev, mask, target = _problem(rng, emb, P, dtype)
    pmask = pixel_mask(mask, emb) if masked else None
    got = StateScorer(emb, clean, pmask, target)(x, prev, decode=True)

    decoded = emb.decode_pixels(x)
    want = reconstruction_errors(decoded, clean, pmask)
    # float32 states: the decoded pixels agree to float32 rounding, the scores with them
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == np.float64 else dict(rtol=1e-5, atol=2e-6)
    assert got.decoded.dtype == decoded.dtype and got.decoded.shape == decoded.shape
    np.testing.assert_allclose(got.decoded, decoded, **tol)
    for name in ("all", "masked", "visible"):
        np.testing.assert_allclose(getattr(got.errors, name), getattr(want, name), **tol)
    if masked:
        assert np.isnan(got.errors.masked[2]) and np.isnan(got.errors.visible[3])
        assert np.isfinite(got.errors.masked[[0, 1, 3]]).all()
    else:
        assert np.isnan(got.errors.masked).all() and np.isnan(got.errors.visible).all()
    np.testing.assert_allclose(got.correlation, _pearson(decoded, target), **tol)
    step = np.linalg.norm(x.astype(np.float64) - prev, axis=2).mean(axis=1)
    np.testing.assert_allclose(got.step, step, **tol)
    # the pixels of zeroed tokens are black
    assert (got.decoded.reshape(P, -1)[:, emb.token_pixels()[0]] == 0).all()


@pytest.mark.parametrize("kind", ["paper", "rgb-damico2024"])
def test_both_backends_agree_and_leave_out_what_is_not_asked(rng, kind):
    emb = PatchEmbedding(**EMBEDDINGS[kind])
    clean, x, prev, mask, target = _problem(rng, emb, 5, np.float64)
    for backend in ("numba", "numpy"):
        bare = StateScorer(emb, clean, backend=backend)(x)
        assert bare.correlation is None and bare.step is None and bare.decoded is None
        assert np.isnan(bare.errors.masked).all()
    pmask = pixel_mask(mask, emb)
    a = StateScorer(emb, clean, pmask, target)(x, prev, decode=True)
    b = StateScorer(emb, clean, pmask, target, backend="numpy")(x, prev, decode=True)
    for name in ("all", "masked", "visible"):
        np.testing.assert_allclose(getattr(a.errors, name), getattr(b.errors, name), rtol=1e-12)
    for name in ("correlation", "step", "decoded"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-15)


def test_image_correlation_is_pearson_and_nan_for_constant_images(rng):
    images = rng.random((4, 5, 3))
    images[2] = 0.25
    target = rng.random((5, 3))
    r = image_correlation(images, target)
    np.testing.assert_allclose(r[[0, 1, 3]], _pearson(images[[0, 1, 3]], target), rtol=1e-12)
    assert np.isnan(r[2])
    emb = PatchEmbedding(image_shape=(4, 4), patch=2)
    x = np.zeros((2, emb.n_tokens, emb.d))  # zero spins decode to black
    clean = rng.random((2, 4, 4))
    assert np.isnan(StateScorer(emb, clean, target=clean[0])(x).correlation).all()


def test_token_pixels_follow_the_token_map():
    for kw in EMBEDDINGS.values():
        emb = PatchEmbedding(**kw)
        pix = emb.token_pixels()
        assert pix.shape == (emb.n_tokens, emb.a * emb.channels)
        assert sorted(pix.ravel()) == list(range(pix.size))
        token_of_pixel = np.repeat(emb.token_index_map().ravel(), emb.channels)
        want = np.broadcast_to(np.arange(emb.n_tokens)[:, None], pix.shape)
        np.testing.assert_array_equal(token_of_pixel[pix], want)
    # inside a token: pixels row-major in the patch, then channels (docs of PatchEmbedding)
    emb = PatchEmbedding(image_shape=(4, 6), patch=2, channels=3)
    gr, gc, r, c, ch = 1, 2, 1, 0, 2
    assert (
        emb.token_pixels()[gr * 3 + gc, (r * 2 + c) * 3 + ch]
        == ((gr * 2 + r) * 6 + gc * 2 + c) * 3 + ch
    )


def test_bad_input_is_refused_with_what_was_wrong(rng):
    emb = PatchEmbedding(image_shape=(4, 4), patch=2)
    clean, x, prev, mask, target = _problem(rng, emb, 4, np.float64)
    scorer = StateScorer(emb, clean, target=target)
    with pytest.raises(ValueError, match=r"x must have shape \(P, N, d\) = \(4, 4, 8\)"):
        scorer(x[:3])
    with pytest.raises(ValueError, match="prev must have shape"):
        scorer(x, prev[:, :2])
    bad = x.copy()
    bad[2, 1, 3] = np.nan
    with pytest.raises(ValueError, match="x contains NaN or infinite values .in 1 of 4"):
        scorer(bad)
    with pytest.raises(ValueError, match="prev contains NaN"):
        scorer(x, bad)
    with pytest.raises(ValueError, match="real float"):
        scorer(x.astype(np.int64))
    with pytest.raises(ValueError, match="backend"):
        StateScorer(emb, clean, backend="cuda")
    with pytest.raises(ValueError, match="pixel_mask must be a bool array"):
        StateScorer(emb, clean, pixel_mask=np.zeros((4, 4, 4)))
    with pytest.raises(ValueError, match="target must have one image's shape"):
        StateScorer(emb, clean, target=target[:2])
    with pytest.raises(ValueError, match="clean must have shape"):
        StateScorer(emb, clean[:, :2])


@pytest.mark.parametrize("preset", ["design", "damico2024"])
def test_an_evaluation_records_the_same_with_either_scorer(monkeypatch, preset):
    """The recorder with the compiled scorer against the numpy one (the former path)."""
    from spinsa import random_couplings
    from spinsa.experiments import pipeline

    scale = "paper" if preset == "design" else "damico2024"
    cfg = TINY.with_overrides({"embedding.scale": scale, "dynamics.preset": preset})
    images = pipeline.load_images(cfg)
    emb = cfg.make_embedding()
    J = random_couplings(emb.n_tokens, emb.d, scale=0.5, seed=3)
    runs = {}
    for backend in ("numba", "numpy"):
        recorder = functools.partial(pipeline._Recorder, backend=backend)
        with monkeypatch.context() as patch:
            patch.setattr(pipeline, "_Recorder", recorder)
            runs[backend] = pipeline.evaluate_task(cfg, J, images, "masked", chunk_size=7)
    a, b = runs["numba"], runs["numpy"]
    for name in ("all", "masked", "visible"):
        np.testing.assert_allclose(getattr(a.errors, name), getattr(b.errors, name), atol=1e-6)
    np.testing.assert_allclose(a.mean_image_corr, b.mean_image_corr, atol=1e-6)
    np.testing.assert_allclose(a.step_change, b.step_change, rtol=1e-6)
    np.testing.assert_allclose(a.examples, b.examples, atol=1e-6)
    np.testing.assert_allclose(a.final_mean_image, b.final_mean_image, atol=1e-6)
    np.testing.assert_array_equal(a.final_period, b.final_period)


def test_the_evaluation_benchmark_runs_both_scorers():
    from spinsa.bench import bench_evaluation

    res = bench_evaluation(P=6, steps=2, repeat=1)
    assert res["fast"].seconds > 0 and res["plain"].seconds > 0
    assert res["max_abs_diff"] < 1e-5  # float32 states: float32 rounding
