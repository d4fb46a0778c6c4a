"""Overlaps, nearest patterns and pixel correlations against plain numpy formulas."""

import numpy as np
import pytest
from reference import random_system

from spinsa.analysis import (
    decoded_correlations,
    mean_pattern,
    nearest_patterns,
    overlaps,
    pixel_correlations,
    target_overlaps,
    trajectory_overlaps,
)


def unit(rng, *shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_overlaps_match_plain_formula(rng):
    x = unit(rng, 3, 4, 6, 5)  # (T, P, N, d)
    xi = unit(rng, 7, 6, 5)
    m = overlaps(x, xi)
    expected = np.einsum("tpia,mia->tpm", x, xi) / 6
    assert m.shape == (3, 4, 7)
    np.testing.assert_allclose(m, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk_size", [1, 3, 1000])
def test_chunking_does_not_change_the_result(rng, chunk_size):
    x = unit(rng, 5, 6, 4).astype(np.float32)
    xi = unit(rng, 9, 6, 4).astype(np.float32)
    m = overlaps(x, xi, chunk_size=chunk_size)
    assert m.dtype == np.float32
    np.testing.assert_allclose(m, np.einsum("pia,mia->pm", x, xi) / 6, rtol=1e-5, atol=1e-6)


def test_stored_pattern_has_overlap_one_with_itself(rng):
    xi = unit(rng, 5, 8, 3)
    m = overlaps(xi, xi)
    np.testing.assert_allclose(np.diag(m), 1.0, rtol=1e-12)
    near = nearest_patterns(xi, xi)
    np.testing.assert_array_equal(near.index, np.arange(5))
    np.testing.assert_allclose(near.overlap, 1.0, rtol=1e-12)


def test_nearest_patterns_match_argmax(rng):
    x = unit(rng, 4, 10, 6, 3)
    xi = unit(rng, 13, 6, 3)
    near = nearest_patterns(x, xi, chunk_size=7)
    full = np.einsum("tpia,mia->tpm", x, xi) / 6
    np.testing.assert_array_equal(near.index, full.argmax(-1))
    np.testing.assert_allclose(near.overlap, full.max(-1), rtol=1e-12)
    assert near.n_patterns == 13


def test_absolute_nearest_finds_the_flipped_pattern(rng):
    xi = unit(rng, 4, 6, 3)
    near = nearest_patterns(-xi, xi, absolute=True)
    np.testing.assert_array_equal(near.index, np.arange(4))
    np.testing.assert_allclose(near.overlap, -1.0, rtol=1e-12)
    assert not np.array_equal(nearest_patterns(-xi, xi).index, np.arange(4))


def test_torch_backend_agrees_with_numpy(rng):
    pytest.importorskip("torch")
    x = unit(rng, 3, 5, 6, 4)
    xi = unit(rng, 11, 6, 4)
    np.testing.assert_allclose(
        overlaps(x, xi, backend="torch", device="cpu", chunk_size=4),
        overlaps(x, xi),
        rtol=1e-10,
    )
    a = nearest_patterns(x, xi, backend="torch", device="cpu")
    np.testing.assert_array_equal(a.index, nearest_patterns(x, xi).index)


def test_target_overlaps(rng):
    x = unit(rng, 3, 4, 5, 2)
    t = unit(rng, 4, 5, 2)
    np.testing.assert_allclose(
        target_overlaps(x, t), np.einsum("tpia,pia->tp", x, t) / 5, rtol=1e-12
    )
    np.testing.assert_allclose(target_overlaps(t, t), 1.0, rtol=1e-12)


def test_trajectory_overlaps_bundles_both(rng):
    states = unit(rng, 4, 3, 5, 2)
    xi = unit(rng, 6, 5, 2)
    tr = trajectory_overlaps(states, np.arange(4), targets=xi[:3], patterns=xi)
    assert tr.target.shape == tr.nearest_index.shape == (4, 3)
    np.testing.assert_allclose(tr.target, target_overlaps(states, xi[:3]))
    with pytest.raises(ValueError, match="nothing to compare"):
        trajectory_overlaps(states, np.arange(4))
    with pytest.raises(ValueError, match="times"):
        trajectory_overlaps(states, np.arange(3), targets=xi[:3])


def test_mean_pattern(rng):
    xi = unit(rng, 5, 4, 3)
    m = mean_pattern(xi, project=False)
    np.testing.assert_allclose(m, xi.mean(0))
    u = mean_pattern(xi)
    np.testing.assert_allclose(np.linalg.norm(u, axis=-1), 1.0)
    np.testing.assert_allclose(mean_pattern(np.zeros((2, 3, 2))), 0.0)


def test_pixel_correlations_match_corrcoef(rng):
    clean = rng.random((3, 4, 5))
    images = rng.random((2, 3, 4, 5))
    r = pixel_correlations(images, clean)
    expected = [
        [np.corrcoef(images[t, p].ravel(), clean[p].ravel())[0, 1] for p in range(3)]
        for t in range(2)
    ]
    np.testing.assert_allclose(r, expected, rtol=1e-12)
    np.testing.assert_allclose(pixel_correlations(clean, clean), 1.0)
    flat = pixel_correlations(np.full_like(clean, 0.5), clean)
    assert np.isnan(flat).all()


def test_decoded_correlations_of_clean_states_are_one(rng):
    from spinsa.embedding import PatchEmbedding

    emb = PatchEmbedding(image_shape=(4, 6), patch=2)
    images = rng.random((3, 4, 6))
    x = emb.encode(images)
    r = decoded_correlations(np.stack([x, x]), images, emb)
    assert r.shape == (2, 3)
    np.testing.assert_allclose(r, 1.0, atol=1e-5)


def test_bad_inputs_are_refused(rng):
    x, _ = random_system(rng, P=2, N=4, d=3)
    with pytest.raises(ValueError, match="xi must have shape"):
        overlaps(x, np.zeros((3, 4, 2)))
    with pytest.raises(ValueError, match="x must have shape"):
        overlaps(x[0], x)
    with pytest.raises(ValueError, match="backend"):
        overlaps(x, x, backend="cupy")
    with pytest.raises(ValueError, match="chunk_size"):
        overlaps(x, x, chunk_size=0)
    with pytest.raises(ValueError, match="targets must have shape"):
        target_overlaps(x, x[:1])
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        overlaps(bad, x)
