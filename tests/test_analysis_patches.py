"""Variance of predicted pixels inside masked patches."""

import numpy as np
import pytest

from spinsa.analysis import (
    PatchVariances,
    masked_patch_variances,
    patch_pixels,
    patch_variance_histograms,
)
from spinsa.embedding import PatchEmbedding


def test_patch_pixels_follow_the_embedding_token_order(rng):
    emb = PatchEmbedding(image_shape=(6, 4), patch=2)
    images = rng.random((3, 6, 4))
    px = patch_pixels(images, 2)
    assert px.shape == (3, emb.n_tokens, 4)
    index = emb.token_index_map()
    for k in range(emb.n_tokens):
        r, c = emb.token_positions()[k]
        np.testing.assert_array_equal(px[:, k], images[:, r : r + 2, c : c + 2].reshape(3, 4))
        np.testing.assert_array_equal(np.sort(px[0, k]), np.sort(images[0][index == k]))


def test_masked_patch_variances_match_a_loop(rng):
    images = rng.random((4, 6, 6))
    mask = rng.random((4, 9)) < 0.4
    res = masked_patch_variances(images, mask, 2)
    expected = []
    for p in range(4):
        for k in range(9):
            if mask[p, k]:
                r, c = divmod(k, 3)
                expected.append(images[p, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2].var())
    np.testing.assert_allclose(res.variance, expected, rtol=1e-12)
    assert res.variance.size == mask.sum()
    np.testing.assert_array_equal(mask[res.sample, res.token], True)


def test_flat_predictions_have_zero_variance(rng):
    mask = np.ones((2, 4), dtype=bool)
    res = masked_patch_variances(np.full((2, 4, 4), 0.3), mask, 2)
    np.testing.assert_allclose(res.variance, 0.0, atol=1e-15)
    colour = masked_patch_variances(rng.random((2, 4, 4, 3)), mask, 2)
    assert colour.variance.shape == (8,)


def test_histograms_per_model(rng):
    mask = np.ones((5, 9), dtype=bool)
    models = {
        "flat": masked_patch_variances(np.full((5, 6, 6), 0.5), mask, 2),
        "noisy": masked_patch_variances(rng.random((5, 6, 6)), mask, 2),
    }
    h = patch_variance_histograms(models, bins=10)
    assert h.models == ("flat", "noisy") and h.counts.shape == (2, 10)
    np.testing.assert_array_equal(h.n_patches, [45, 45])
    np.testing.assert_allclose((h.density * np.diff(h.bin_edges)).sum(axis=1), 1.0)
    assert h.counts[0, 0] == 45 and h.mean[0] == 0 and h.mean[1] > 0.01


def test_bad_inputs(rng):
    with pytest.raises(ValueError, match="divide"):
        patch_pixels(rng.random((1, 5, 4)), 2)
    with pytest.raises(ValueError, match="mask"):
        masked_patch_variances(rng.random((1, 4, 4)), np.ones((1, 3), dtype=bool), 2)
    with pytest.raises(ValueError, match="mask"):
        masked_patch_variances(rng.random((1, 4, 4)), np.ones((1, 4)), 2)
    with pytest.raises(ValueError, match="PatchVariances"):
        patch_variance_histograms({"a": np.zeros(3)})
    assert isinstance(
        masked_patch_variances(rng.random((1, 4, 4)), np.ones((1, 4), bool), 2), PatchVariances
    )
