import dataclasses
import warnings

import numpy as np
import pytest

from spinsa.embedding import PatchEmbedding

CASES = [((28, 28), 2), ((28, 28), 4), ((8, 12), 4), ((6, 6), 1), ((6, 9), 3)]


def two_vector(p):
    """The plain map p -> (p, 1 - p) / sqrt(p² + (1 - p)²), stacked on a last axis."""
    return np.stack([p, 1 - p], axis=-1) / np.hypot(p, 1 - p)[..., None]


def patch_vectors_by_loops(images, patch):
    """s[P, N, 2a] with the documented orders: tokens row-major, pixels row-major in a patch."""
    P, H, W = images.shape
    out = []
    for r0 in range(0, H, patch):
        for c0 in range(0, W, patch):
            comps = [
                two_vector(images[:, r0 + r, c0 + c]) for r in range(patch) for c in range(patch)
            ]
            out.append(np.concatenate(comps, axis=-1))
    return np.stack(out, axis=1)


@pytest.mark.parametrize("shape, patch", CASES)
def test_round_trip_float32(rng, shape, patch):
    emb = PatchEmbedding(image_shape=shape, patch=patch, seed=1)
    images = rng.random((3, *shape)).astype(np.float32)
    images[0, 0, 0], images[0, -1, -1] = 0.0, 1.0
    x = emb.encode(images)
    assert x.shape == (3, emb.n_tokens, 2 * patch**2) and x.dtype == np.float32
    assert emb.n_tokens == (shape[0] // patch) * (shape[1] // patch)
    back = emb.decode(x)
    assert back.shape == images.shape and back.dtype == np.float32
    np.testing.assert_allclose(back, images, atol=1e-5)


def test_round_trip_float64_and_unit_norm(rng):
    emb = PatchEmbedding(image_shape=(8, 12), patch=4, seed=2)
    images = rng.random((4, 8, 12))
    x = emb.encode(images)
    assert x.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(emb.decode(x), images, atol=1e-12)


def test_default_is_papers_setting():
    emb = PatchEmbedding()
    assert (emb.n_tokens, emb.d, emb.a, emb.grid_shape) == (196, 8, 4, (14, 14))
    emb4 = PatchEmbedding(patch=4)
    assert (emb4.n_tokens, emb4.d) == (49, 32)
    assert "d=8" in repr(emb)


def test_matches_plain_two_vector_map(rng):
    for shape, patch in [((6, 6), 1), ((8, 12), 4), ((6, 9), 3)]:
        emb = PatchEmbedding(image_shape=shape, patch=patch, seed=3)
        images = rng.random((2, *shape))
        s = emb.encode(images) @ emb.F * emb.a  # F^T F = I / a
        np.testing.assert_allclose(s, patch_vectors_by_loops(images, patch), atol=1e-12)


def test_F_orthonormal_and_sign_convention():
    emb = PatchEmbedding(image_shape=(4, 4), patch=2, d=11, seed=5)
    F = emb.F
    assert F.shape == (11, 8)
    np.testing.assert_allclose(F.T @ F * emb.a, np.eye(8), atol=1e-12)
    # F sqrt(a) is the Q of the seeded Gaussian with diag(R) > 0: R = Q^T G upper triangular.
    G = np.random.default_rng(5).standard_normal((11, 8))
    R = (F * np.sqrt(emb.a)).T @ G
    np.testing.assert_allclose(np.tril(R, -1), 0, atol=1e-12)
    assert (np.diag(R) > 0).all()


def test_seed_reproducibility():
    a, b = PatchEmbedding(seed=7), PatchEmbedding(seed=7)
    np.testing.assert_array_equal(a.F, b.F)
    assert a == b and hash(a) == hash(b)
    assert not np.allclose(a.F, PatchEmbedding(seed=8).F)


def test_immutable():
    emb = PatchEmbedding()
    with pytest.raises(dataclasses.FrozenInstanceError):
        emb.patch = 4
    with pytest.raises(ValueError):
        emb.F[0, 0] = 1.0
    assert set(dataclasses.asdict(emb)) == {
        "image_shape",
        "patch",
        "d",
        "seed",
        "channels",
        "scale",
    }


def test_d_larger_than_minimum_round_trips(rng):
    emb = PatchEmbedding(image_shape=(8, 8), patch=2, d=20, seed=4)
    images = rng.random((3, 8, 8))
    x = emb.encode(images)
    assert x.shape == (3, 16, 20)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(emb.decode(x), images, atol=1e-12)


def test_channels_round_trip_and_order(rng):
    emb = PatchEmbedding(image_shape=(4, 6), patch=2, channels=3, seed=0)
    assert emb.d == 24
    images = rng.random((2, 4, 6, 3))
    x = emb.encode(images)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(emb.decode(x), images, atol=1e-12)
    s = x @ emb.F * (emb.a * 3)
    # token 1 = grid (0, 1); pixel (r, c) = (1, 0) inside it, channel 2: components 2*(2*3 + 2)
    np.testing.assert_allclose(s[:, 1, 16:18], two_vector(images[:, 1, 2, 2]), atol=1e-12)


def test_bad_parameters_name_the_problem():
    with pytest.raises(ValueError, match=r"d = 7.*a = 4.*minimum.*8"):
        PatchEmbedding(d=7)
    with pytest.raises(ValueError, match=r"width W = 30.*1, 2$"):
        PatchEmbedding(image_shape=(28, 30), patch=4)
    with pytest.raises(ValueError, match=r"height H = 28 nor the width W = 28.*1, 2, 4, 7, 14, 28"):
        PatchEmbedding(patch=3)
    with pytest.raises(ValueError, match="scale"):
        PatchEmbedding(scale="other")
    with pytest.raises(ValueError, match="patch"):
        PatchEmbedding(patch=0)


def test_bad_images_name_the_problem():
    emb = PatchEmbedding(image_shape=(4, 4), patch=2)
    with pytest.raises(ValueError, match=r"\[0, 1\].*\[-0.5, 1\]"):
        emb.encode(np.full((1, 4, 4), -0.5).clip(None, 1) + np.eye(4) * 1.5)
    with pytest.raises(ValueError, match=r"\[0, 255\].*divide by 255"):
        emb.encode(np.arange(16, dtype=np.uint8).reshape(1, 4, 4) * 17)
    nan = np.zeros((1, 4, 4))
    nan[0, 1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        emb.encode(nan)
    with pytest.raises(ValueError, match=r"images\[None\]"):
        emb.encode(np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"\(P, 4, 8\)"):
        emb.decode(np.zeros((1, 3, 8)))


def test_zero_spins_decode_to_zero_without_warnings(rng):
    emb = PatchEmbedding(image_shape=(8, 8), patch=2)
    images = rng.random((2, 8, 8))
    x = emb.encode(images)
    x[0, [0, 5]] = 0.0
    x[1] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = emb.decode(x)
        off = emb.decode(rng.standard_normal((3, 16, 8)))  # arbitrary spins off the manifold
    assert (back[1] == 0).all()
    assert (back[0, :2, :2] == 0).all() and (back[0, 2:4, 2:4] == 0).all()
    np.testing.assert_allclose(back[0, 2:, 4:], images[0, 2:, 4:], atol=1e-12)
    assert np.isfinite(off).all() and off.min() >= 0 and off.max() <= 1


def test_token_geometry():
    emb = PatchEmbedding(image_shape=(8, 12), patch=4)
    corner = emb.token_positions()
    np.testing.assert_array_equal(corner, [[0, 0], [0, 4], [0, 8], [4, 0], [4, 4], [4, 8]])
    np.testing.assert_allclose(emb.token_positions("center"), corner + 1.5)
    index = emb.token_index_map()
    r, c = np.indices((8, 12))
    np.testing.assert_array_equal(corner[index], np.stack([r // 4 * 4, c // 4 * 4], axis=-1))


def test_damico2024_scale(rng):
    paper = PatchEmbedding(image_shape=(4, 4), patch=2, seed=9)
    nb = PatchEmbedding(image_shape=(4, 4), patch=2, seed=9, scale="damico2024")
    np.testing.assert_allclose(nb.F, paper.F / np.sqrt(2), atol=1e-15)
    images = rng.random((3, 4, 4))
    x = nb.encode(images)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1 / np.sqrt(2), atol=1e-12)
    np.testing.assert_allclose(x, paper.encode(np.minimum(2 * images, 1)) / np.sqrt(2), atol=1e-12)
    # min(2p, 1) is inverted below its clipping; every p >= 1/2 decodes to 1/2
    np.testing.assert_allclose(nb.decode(x), np.minimum(images, 0.5), atol=1e-12)


def _spins_with_pairs(emb, u, v):
    """Spins whose first token decodes to the pixel pairs (u, v) (s = c F^T x inverted)."""
    s = np.zeros((1, emb.n_tokens, emb.n_components))
    s[0, 0, 0::2], s[0, 0, 1::2] = u, v
    return s @ emb.F.T  # x = F s, so c F^T x = s (c F^T F = I)


@pytest.mark.parametrize("scale", ["paper", "damico2024"])
def test_decoder_clamps_components_before_the_ratio(scale):
    emb = PatchEmbedding(image_shape=(4, 4), patch=2, scale=scale)
    top = 0.5 if scale == "damico2024" else 1.0  # the notebook's pixels are q / 2
    # u > 0 > v (with u + v < 0): white; u < 0 < v: black; both <= 0: black
    u = np.array([0.3, -0.5, -0.2, -0.1])
    v = np.array([-0.5, 0.3, -0.6, -0.1])
    got = emb.decode(_spins_with_pairs(emb, u, v))[0, :2, :2].ravel()
    np.testing.assert_allclose(got, [top, 0.0, 0.0, 0.0], atol=1e-12)


def test_decoder_clamp_differs_from_ratio_then_clip():
    # u = 0.3 > 0 > v = -0.5: u + v < 0, so "ratio, then clip" gives 0 where the clamp gives 1
    emb = PatchEmbedding(image_shape=(2, 2), patch=2)
    got = emb.decode(_spins_with_pairs(emb, [0.3, 0.3, 0.3, 0.3], [-0.5] * 4))
    np.testing.assert_allclose(got, 1.0, atol=1e-12)


@pytest.mark.parametrize("scale", ["paper", "damico2024"])
def test_round_trip_of_valid_spins_is_unchanged_by_the_clamp(rng, scale):
    emb = PatchEmbedding(image_shape=(8, 8), patch=2, scale=scale)
    images = rng.random((5, 8, 8))
    images[0] = 0.0
    images[1] = 1.0
    expect = images if scale == "paper" else np.minimum(images, 0.5)
    np.testing.assert_allclose(emb.decode(emb.encode(images)), expect, atol=1e-12)


@pytest.mark.parametrize("scale", ["paper", "damico2024"])
def test_pixel_space_and_decode_pixels(rng, scale):
    emb = PatchEmbedding(image_shape=(4, 4), patch=2, scale=scale)
    images = rng.random((3, 4, 4))
    want = images if scale == "paper" else np.minimum(2 * images, 1)
    np.testing.assert_allclose(emb.pixel_space(images), want, atol=1e-15)
    np.testing.assert_allclose(emb.decode_pixels(emb.encode(images)), want, atol=1e-12)
