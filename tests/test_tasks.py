import warnings

import numpy as np
import pytest

from spinsa.embedding import PatchEmbedding
from spinsa.tasks import (
    ReconstructionErrors,
    corrupt_gaussian,
    draw_masks,
    draw_noisy,
    mask_tokens,
    masked_count,
    pixel_mask,
    reconstruction_errors,
    summarize,
    task_inputs,
)


def unit_spins(rng, P, N, d):
    x = rng.standard_normal((P, N, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize(
    "N, fraction, k",
    # int(fraction * N), as the published notebook: 58 of 196 at 0.3; 0.29 * 100 counts 29
    [(196, 0.3, 58), (49, 0.3, 14), (5, 0.5, 2), (10, 0, 0), (10, 1, 10), (100, 0.29, 29)],
)
def test_mask_counts_and_zero_spins(rng, N, fraction, k):
    x = unit_spins(rng, 6, N, 4)
    xm, mask = mask_tokens(x, fraction, rng)
    assert mask.shape == (6, N) and mask.dtype == bool
    np.testing.assert_array_equal(mask.sum(axis=1), k)
    assert (xm[mask] == 0).all()
    np.testing.assert_array_equal(xm[~mask], x[~mask])
    assert xm.dtype == x.dtype and not np.shares_memory(xm, x)


def test_mask_reproducible_and_uniform(rng):
    x = unit_spins(rng, 2000, 10, 2)
    _, m1 = mask_tokens(x, 0.3, 11)
    _, m2 = mask_tokens(x, 0.3, np.random.default_rng(11))
    np.testing.assert_array_equal(m1, m2)
    gen = np.random.default_rng(11)
    _, a = mask_tokens(x, 0.3, gen)
    _, b = mask_tokens(x, 0.3, gen)
    assert not np.array_equal(a, b)  # a Generator advances between calls
    freq = m1.mean(axis=0)  # each token masked with probability 3/10
    assert np.abs(freq - 0.3).max() < 5 * np.sqrt(0.3 * 0.7 / 2000)
    with pytest.raises(ValueError, match="fraction"):
        mask_tokens(x, 1.5, 0)
    with pytest.raises(ValueError, match="rng"):
        mask_tokens(x, 0.3, "seed")


def test_pixel_mask_against_loops(rng):
    emb = PatchEmbedding(image_shape=(8, 12), patch=4)
    mask = rng.random((3, emb.n_tokens)) < 0.5
    pm = pixel_mask(mask, emb)
    assert pm.shape == (3, 8, 12) and pm.dtype == bool
    for p in range(3):
        for r in range(8):
            for c in range(12):
                assert pm[p, r, c] == mask[p, (r // 4) * 3 + c // 4]
    with pytest.raises(ValueError, match=r"\(P, 6\)"):
        pixel_mask(mask[:, :5], emb)


def test_masked_task_pipeline(rng):
    emb = PatchEmbedding(image_shape=(8, 8), patch=2)
    images = rng.random((4, 8, 8))
    xm, mask = mask_tokens(emb.encode(images), 0.3, 0)
    pm = pixel_mask(mask, emb)
    decoded = emb.decode(xm)
    assert (decoded[pm] == 0).all()
    np.testing.assert_allclose(decoded[~pm], images[~pm], atol=1e-12)
    err = reconstruction_errors(decoded, images, pm)
    np.testing.assert_allclose(err.visible, 0, atol=1e-20)
    want = [np.mean(images[p][pm[p]] ** 2) for p in range(4)]
    np.testing.assert_allclose(err.masked, want, rtol=1e-12)


def test_corrupt_gaussian_restores_mean_and_variance(rng):
    images = rng.random((5, 10, 10))
    images[4] = 0.25  # a constant image stays constant
    y = corrupt_gaussian(images, 0.7, 3, clip=False)
    np.testing.assert_allclose(y.mean(axis=(1, 2)), images.mean(axis=(1, 2)), atol=1e-12)
    np.testing.assert_allclose(y.std(axis=(1, 2)), images.std(axis=(1, 2)), atol=1e-12)
    np.testing.assert_allclose(y[4], 0.25, atol=1e-15)
    assert np.corrcoef(y[0].ravel(), images[0].ravel())[0, 1] < 0.9  # noise was added
    # the same noise, rescaled, is what the plain formula gives
    noisy = images + np.sqrt(0.7) * np.random.default_rng(3).standard_normal(images.shape)
    mu, sd = noisy[0].mean(), noisy[0].std()
    np.testing.assert_allclose(y[0], images[0].mean() + (noisy[0] - mu) * images[0].std() / sd)
    np.testing.assert_allclose(corrupt_gaussian(images, 0.0, 0, clip=False), images, atol=1e-12)


def test_corrupt_gaussian_clips_and_is_reproducible(rng):
    images = rng.random((3, 8, 8)).astype(np.float32)
    y = corrupt_gaussian(images, 0.7, 1)
    assert y.dtype == np.float32 and y.shape == images.shape
    assert y.min() >= 0 and y.max() <= 1
    np.testing.assert_array_equal(y, corrupt_gaussian(images, 0.7, 1))
    assert not np.array_equal(y, corrupt_gaussian(images, 0.7, 2))
    with pytest.raises(ValueError, match="variance"):
        corrupt_gaussian(images, -1.0, 0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        corrupt_gaussian(images + 1, 0.7, 0)


def test_reconstruction_errors_against_formula(rng):
    T, P = 4, 3
    clean = rng.random((P, 6, 6))
    decoded = rng.random((T, P, 6, 6)).astype(np.float32)
    pm = rng.random((P, 6, 6)) < 0.3
    pm[2] = False  # an image with no masked pixel
    err = reconstruction_errors(decoded, clean, pm)
    assert err.all.shape == err.masked.shape == err.visible.shape == (T, P)
    for t in range(T):
        for p in range(P):
            sq = (decoded[t, p].astype(np.float64) - clean[p]) ** 2
            assert np.isclose(err.all[t, p], sq.mean(), rtol=1e-12)
            assert np.isclose(err.visible[t, p], sq[~pm[p]].mean(), rtol=1e-12)
            if p < 2:
                assert np.isclose(err.masked[t, p], sq[pm[p]].mean(), rtol=1e-12)
    assert np.isnan(err.masked[:, 2]).all()
    plain = reconstruction_errors(decoded, clean)
    np.testing.assert_array_equal(plain.all, err.all)
    assert np.isnan(plain.masked).all() and np.isnan(plain.visible).all()
    single = reconstruction_errors(decoded[1], clean, pm)
    assert single.all.shape == (P,)
    np.testing.assert_array_equal(single.visible, err.visible[1])
    with pytest.raises(ValueError, match="decoded"):
        reconstruction_errors(decoded[:, :2], clean)
    with pytest.raises(ValueError, match="pixel_mask"):
        reconstruction_errors(decoded, clean, pm[:2])


def test_reconstruction_errors_with_channels(rng):
    clean = rng.random((2, 4, 4, 3))
    decoded = rng.random((5, 2, 4, 4, 3))
    pm = rng.random((2, 4, 4)) < 0.5
    err = reconstruction_errors(decoded, clean, pm)
    sq = (decoded[3, 1] - clean[1]) ** 2
    assert np.isclose(err.masked[3, 1], sq[pm[1]].mean())
    assert np.isclose(err.all[3, 1], sq.mean())


def test_summarize_against_numpy(rng):
    clean = rng.random((6, 4, 4))
    decoded = rng.random((3, 6, 4, 4))
    pm = rng.random((6, 4, 4)) < 0.4
    pm[0] = False
    err = reconstruction_errors(decoded, clean, pm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = summarize(err)
        s_none = summarize(reconstruction_errors(decoded, clean))
    np.testing.assert_allclose(s.mean.all, err.all.mean(axis=1))
    np.testing.assert_allclose(s.sem.all, err.all.std(axis=1, ddof=1) / np.sqrt(6))
    m = err.masked[:, 1:]  # image 0 has no masked pixel and is left out
    np.testing.assert_allclose(s.mean.masked, m.mean(axis=1))
    np.testing.assert_allclose(s.sem.masked, m.std(axis=1, ddof=1) / np.sqrt(5))
    np.testing.assert_array_equal(s.count.masked, 5)
    np.testing.assert_array_equal(s.count.visible, 6)
    assert np.isnan(s_none.mean.masked).all() and np.isnan(s_none.sem.visible).all()
    with pytest.raises(ValueError, match="ReconstructionErrors"):
        summarize(err.all)


def test_errors_are_frozen(rng):
    a = rng.random((2, 3))
    err = ReconstructionErrors(a, a, a)
    with pytest.raises(ValueError):
        err.all[0, 0] = 1.0
    a[0, 0] = 5.0  # the caller's array stays writable and was copied
    assert err.all[0, 0] != 5.0
    with pytest.raises(ValueError, match="one shape"):
        ReconstructionErrors(a, a[0], a)


def test_masked_count_is_the_notebooks_truncation():
    assert masked_count(0.3, 196) == int(0.3 * 196) == 58
    assert [masked_count(f, 10) for f in (0.0, 0.19, 0.2, 0.99, 1.0)] == [0, 1, 2, 9, 10]


def test_task_inputs_depend_on_each_images_number_only(rng):
    emb = PatchEmbedding(image_shape=(8, 8), patch=2)
    images = rng.random((6, 8, 8))
    index = np.array([3, 10, 11, 40, 41, 99])
    for task in ("masked", "denoise"):
        x_all, m_all = task_inputs(task, images, emb, index=index, seed=5)
        # a subset, reordered, gets the same corruption image by image
        sub = [4, 0, 2]
        x_sub, m_sub = task_inputs(task, images[sub], emb, index=index[sub], seed=5)
        np.testing.assert_array_equal(x_sub, x_all[sub])
        if task == "masked":
            np.testing.assert_array_equal(m_sub, m_all[sub])
            assert m_all.sum(axis=1).tolist() == [masked_count(0.3, 16)] * 6
            np.testing.assert_array_equal(x_all[m_all], 0)
        else:
            assert m_all is None
        other, _ = task_inputs(task, images, emb, index=index, seed=6)
        assert not np.array_equal(other, x_all)


def test_draw_masks_and_noise_from_the_documented_streams(rng):
    images = rng.random((3, 4, 4))
    index = np.array([7, 0, 2])
    masks = draw_masks(index, 16, 0.25, seed=9)
    noisy = draw_noisy(images, index, 0.7, seed=9)
    for p, k in enumerate(index):
        chosen = np.random.default_rng([9, 0, k]).permutation(16)[:4]
        np.testing.assert_array_equal(np.flatnonzero(masks[p]), np.sort(chosen))
        z = np.random.default_rng([9, 1, k]).standard_normal((4, 4))
        y = images[p] + np.sqrt(0.7) * z
        y = images[p].mean() + (y - y.mean()) * images[p].std() / y.std()
        np.testing.assert_allclose(noisy[p], np.clip(y, 0, 1), rtol=1e-12)
    with pytest.raises(ValueError, match="index"):
        draw_noisy(images, [1, 2], 0.7)
    with pytest.raises(ValueError, match="task"):
        task_inputs("blur", images, PatchEmbedding(image_shape=(4, 4), patch=2))
