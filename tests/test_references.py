"""The simple references against direct numpy computations on tiny image sets."""

import numpy as np
import pytest

from spinsa import references as R
from spinsa.tasks import reconstruction_errors


def tiny(rng, P=5, H=6, W=7):
    return rng.random((P, H, W))


def masks(rng, P=5, H=6, W=7, p=0.35):
    m = rng.random((P, H, W)) < p
    m[:, 0, 0] = False  # every image keeps a visible pixel
    return m


def test_mean_fill_is_the_mean_in_the_hole(rng):
    x, m, mean = tiny(rng), masks(rng), rng.random((6, 7))
    got = R.mean_fill(x, m, mean)
    for p in range(5):
        for r in range(6):
            for c in range(7):
                assert got[p, r, c] == (mean[r, c] if m[p, r, c] else x[p, r, c])


def jacobi(x, m, sweeps=20000):
    """Iterated 3x3 averaging of the masked pixels, loop by loop, to convergence."""
    P, H, W = x.shape
    y = np.where(m, 0.0, x)
    for _ in range(sweeps):
        new = y.copy()
        for p in range(P):
            for r in range(H):
                for c in range(W):
                    if m[p, r, c]:
                        nb = [
                            y[p, r + dr, c + dc]
                            for dr in (-1, 0, 1)
                            for dc in (-1, 0, 1)
                            if (dr or dc) and 0 <= r + dr < H and 0 <= c + dc < W
                        ]
                        new[p, r, c] = np.mean(nb)
        if np.abs(new - y).max() < 1e-13:
            return new
        y = new
    raise AssertionError("the Jacobi reference did not converge")


def test_harmonic_inpainting_is_the_fixed_point_of_neighbour_averaging(rng):
    x, m = tiny(rng, P=3, H=5, W=5), masks(rng, P=3, H=5, W=5, p=0.5)
    got = R.harmonic_inpaint(x, m, chunk=2)  # two solves
    np.testing.assert_allclose(got, jacobi(x, m), atol=1e-10)
    np.testing.assert_array_equal(got[~m], x[~m])


def test_harmonic_inpainting_of_a_fully_masked_image_is_zero(rng):
    x = tiny(rng, P=2, H=4, W=4)
    m = np.zeros(x.shape, bool)
    m[1] = True
    got = R.harmonic_inpaint(x, m)
    np.testing.assert_array_equal(got[0], x[0])
    np.testing.assert_array_equal(got[1], 0)


def test_nearest_fill_uses_the_nearest_image_on_the_visible_pixels(rng):
    x, m, train = tiny(rng), masks(rng), tiny(rng, P=11)
    got, index = R.nearest_fill(x, m, train, chunk=2)
    for p in range(5):
        d = [((x[p] - t)[~m[p]] ** 2).sum() for t in train]
        assert index[p] == int(np.argmin(d))
        np.testing.assert_allclose(got[p], np.where(m[p], train[index[p]], x[p]), rtol=1e-6)


def gaussian_kernel(sigma):
    radius = int(4.0 * sigma + 0.5)  # scipy's truncation
    k = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    return k / k.sum(), radius


def test_gaussian_blur_is_a_separable_reflected_convolution(rng):
    x = tiny(rng, P=2, H=9, W=8)
    k, r = gaussian_kernel(1.25)
    padded = np.pad(x, ((0, 0), (r, r), (r, r)), mode="symmetric")  # scipy's "reflect"
    rows = sum(k[i] * padded[:, i : i + 9, :] for i in range(2 * r + 1))
    want = sum(k[i] * rows[:, :, i : i + 8] for i in range(2 * r + 1))
    np.testing.assert_allclose(R.gaussian_blur(x, 1.25), want, atol=1e-12)


def test_knn_mean_averages_the_nearest_images(rng):
    x, train = tiny(rng), tiny(rng, P=12)
    got = R.knn_mean(x, train, 3, exclude=np.array([0, 1, 2, 3, 4]), chunk=2)
    for p in range(5):
        d = np.array([((x[p] - t) ** 2).sum() for t in train])
        d[p] = np.inf  # excluded
        np.testing.assert_allclose(got[p], train[np.argsort(d)[:3]].mean(axis=0), rtol=1e-6)


def test_sigma_and_k_are_the_candidates_with_the_smallest_error(rng):
    clean = tiny(rng, P=8)
    noisy = np.clip(clean + 0.3 * rng.standard_normal(clean.shape), 0, 1)
    train = np.concatenate([clean, tiny(rng, P=10)])
    sigma, errs = R.choose_blur_sigma(clean, noisy, (0.5, 1.0, 2.0))
    direct = [np.mean((R.gaussian_blur(noisy, s) - clean) ** 2) for s in (0.5, 1.0, 2.0)]
    np.testing.assert_allclose(errs, direct)
    assert sigma == (0.5, 1.0, 2.0)[int(np.argmin(direct))]
    k, kerr = R.choose_k(clean, noisy, train, (1, 2, 4), exclude=np.arange(8))
    direct = [
        np.mean((R.knn_mean(noisy, train, c, exclude=np.arange(8)) - clean) ** 2) for c in (1, 2, 4)
    ]
    np.testing.assert_allclose(kerr, direct, rtol=1e-6)
    assert k == (1, 2, 4)[int(np.argmin(direct))]


def test_task_references_errors_and_choices(rng):
    clean, train = tiny(rng), tiny(rng, P=20)
    m = masks(rng)
    inputs = np.where(m, 0.0, clean)
    refs = R.task_references("masked", clean, inputs, train, pixel_mask=m)
    assert list(refs) == list(R.REFERENCES["masked"])
    want = reconstruction_errors(R.mean_fill(inputs, m, train.mean(axis=0)), clean, m)
    np.testing.assert_allclose(refs["mean_fill"].errors.all, want.all)
    masked_input = [(clean[p][m[p]] ** 2).mean() for p in range(5)]  # the hole is black
    np.testing.assert_allclose(refs["masked_input"].errors.masked, masked_input)
    noisy = np.clip(clean + 0.3 * rng.standard_normal(clean.shape), 0, 1)
    tune = np.clip(train[:6] + 0.3 * rng.standard_normal((6, 6, 7)), 0, 1)
    refs = R.task_references(
        "denoise",
        clean,
        noisy,
        train,
        tune_clean=train[:6],
        tune_noisy=tune,
        tune_index=np.arange(6),
    )
    assert list(refs) == list(R.REFERENCES["denoise"])
    sigma = refs["blur"].params["sigma"]
    want = reconstruction_errors(R.gaussian_blur(noisy, sigma), clean)
    np.testing.assert_allclose(refs["blur"].errors.all, want.all)
    assert refs["knn_mean"].params["k"] in R.KNN_KS
    assert np.isnan(refs["knn_mean"].errors.masked).all()  # no mask in denoising


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="pixel_mask"):
        R.mean_fill(np.zeros((2, 3, 3)), np.zeros((2, 3, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="mean_image"):
        R.mean_fill(np.zeros((2, 3, 3)), np.zeros((2, 3, 3), bool), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="k must be"):
        R.knn_mean(np.zeros((2, 3, 3)), np.zeros((4, 3, 3)), 4)
    with pytest.raises(ValueError, match="sigma"):
        R.gaussian_blur(np.zeros((1, 3, 3)), 0.0)
    with pytest.raises(ValueError, match="task"):
        R.task_references("inpaint", np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="pixel_mask"):
        R.task_references("masked", np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), np.zeros((2, 3, 3)))
