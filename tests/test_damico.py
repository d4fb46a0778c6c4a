"""The notebook's dynamics preset against a slow loop written from its description."""

import numpy as np
import pytest

from spinsa import damico


def reference_step(x, J, lam, mask=None, clamp=20.0, eps=1e-9):
    """One step, image by image, token by token, in float64 (docs/model.md, 'The published
    recipe')."""
    P, N, d = x.shape
    out = np.empty_like(x, dtype=np.float64)
    for p in range(P):
        vis = np.ones(N, bool) if mask is None else ~mask[p]
        xv = x[p][vis]
        # the notebook: unbiased std without a mask, the biased one over the visible tokens
        mu, sd = xv.mean(axis=0), xv.std(axis=0, ddof=1 if mask is None else 0)
        xs = x[p].astype(np.float64).copy()
        for i in range(N):
            if vis[i]:
                xs[i] = (x[p, i] - mu) / (sd + eps)
        h = np.zeros((N, d))
        for i in range(N):
            s = np.full(N, -np.inf)
            for j in range(N):
                if j != i and vis[j]:
                    s[j] = lam * min(xs[i] @ J[i, j] @ xs[j], clamp)
            w = np.exp(s - s.max())
            w /= w.sum()
            for j in range(N):
                if w[j] > 0:
                    h[i] += w[j] * (J[i, j] @ xs[j])
        y = x[p] + 0.5 * h
        out[p] = y / (np.linalg.norm(y, axis=1).mean() + 1e-9)
    return out


def system(rng, P=4, N=7, d=3, scale=0.3):
    x = rng.standard_normal((P, N, d))
    J = scale * rng.standard_normal((N, N, d, d))
    J[np.arange(N), np.arange(N)] = 0
    return x, J


def random_mask(rng, P, N, k=2):
    mask = np.zeros((P, N), bool)
    for p in range(P):
        mask[p, rng.choice(N, k, replace=False)] = True
    return mask


def test_standardize_features_unbiased_zero_mean_unit_std(rng):
    x = rng.standard_normal((3, 9, 4))
    xs = damico.standardize_features(x, eps=0.0)
    np.testing.assert_allclose(xs.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(xs.std(axis=1, ddof=1), 1, rtol=1e-12)


def test_standardize_features_with_mask_uses_visible_tokens_only(rng):
    x = rng.standard_normal((3, 9, 4))
    mask = random_mask(rng, 3, 9, k=3)
    x[mask] = 0
    xs = damico.standardize_features(x, mask, eps=0.0)
    for p in range(3):
        v = xs[p][~mask[p]]
        np.testing.assert_allclose(v.mean(axis=0), 0, atol=1e-12)
        np.testing.assert_allclose(v.std(axis=0, ddof=0), 1, rtol=1e-12)  # biased, as published
        np.testing.assert_array_equal(xs[p][mask[p]], 0)  # masked tokens left as they are


def test_fields_match_plain_formula_without_clamp(rng):
    x, J = system(rng, scale=0.05)
    h = damico.damico_fields(x, J, 2.0, clamp=1e9)
    s = 2.0 * np.einsum("pia,ijab,pjb->pij", x, J, x)
    s[:, np.arange(7), np.arange(7)] = -np.inf
    a = np.exp(s - s.max(axis=2, keepdims=True))
    a /= a.sum(axis=2, keepdims=True)
    np.testing.assert_allclose(h, np.einsum("pij,ijab,pjb->pia", a, J, x), rtol=1e-12)


@pytest.mark.parametrize("scale", [0.05, 10.0])  # the clamp idle, and acting
def test_step_matches_loop_reference(rng, scale):
    x, J = system(rng, scale=scale)
    for fast in (False, True):
        got = damico.damico_step(x, J, 1.5, fast=fast)
        np.testing.assert_allclose(got, reference_step(x, J, 1.5), rtol=1e-10, atol=1e-12)


def test_clamp_acts_at_large_couplings(rng):
    x, J = system(rng, scale=10.0)
    xs = damico.standardize_features(x)
    assert np.einsum("pia,ijab,pjb->pij", xs, J, xs).max() > 20  # the clamp binds here
    clamped = damico.damico_step(x, J, 1.0)
    free = damico.damico_step(x, J, 1.0, clamp=1e9)
    assert not np.allclose(clamped, free)
    np.testing.assert_allclose(free, reference_step(x, J, 1.0, clamp=1e9), rtol=1e-10)


def test_masked_first_step_matches_loop_reference(rng):
    x, J = system(rng, scale=0.4)
    mask = random_mask(rng, 4, 7)
    x[mask] = 0
    got = damico.damico_step(x, J, 1.0, mask)
    np.testing.assert_allclose(got, reference_step(x, J, 1.0, mask), rtol=1e-10, atol=1e-12)


def test_step_renormalises_to_unit_mean_token_norm(rng):
    x, J = system(rng)
    y = damico.damico_step(x, J, 1.0)
    # 1 up to the notebook's 1e-9 in the denominator
    np.testing.assert_allclose(np.linalg.norm(y, axis=2).mean(axis=1), 1.0, rtol=1e-8)


def test_fused_path_with_the_clamp_acting(rng):
    x, J = system(rng, P=6, scale=10.0)
    x[3] *= 0  # a zero image stays finite
    xs = damico.standardize_features(x)
    assert np.einsum("pia,ijab,pjb->pij", xs, J, xs).max() > 20  # the clamp binds
    got = damico.damico_step(x, J, 1.0)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[3], 0)
    np.testing.assert_allclose(got, reference_step(x, J, 1.0), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("clamp_visible", [False, True])
def test_fused_run_matches_numpy_run(rng, clamp_visible):
    """Many tiles (P > 128), a masked first step, then steps in tiles: both paths agree."""
    x, J = system(rng, P=150, N=7, d=3, scale=0.5)
    mask = random_mask(rng, 150, 7)
    x[mask] = 0
    runs = []
    for fast in (True, False):
        seen = []
        final = damico.damico_run(
            x,
            J,
            1.0,
            4,
            mask,
            clamp_visible=clamp_visible,
            fast=fast,
            callback=lambda t, s, seen=seen: seen.append(s),
        )
        runs.append((final, seen))
    (fast_final, fast_seen), (np_final, np_seen) = runs
    np.testing.assert_allclose(fast_final, np_final, rtol=1e-10, atol=1e-12)
    for a, b in zip(fast_seen, np_seen, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    if clamp_visible:
        np.testing.assert_array_equal(fast_final[~mask], x[~mask])


def test_float32_fast_and_numpy_paths_agree(rng):
    x, J = system(rng, P=5, N=12, d=4, scale=0.1)
    x, J = x.astype(np.float32), J.astype(np.float32)
    a = damico.damico_step(x, J, 1.0, fast=True)
    b = damico.damico_step(x, J, 1.0, fast=False)
    assert a.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_run_applies_the_mask_on_the_first_step_only(rng):
    x, J = system(rng, scale=0.3)
    mask = random_mask(rng, 4, 7)
    x[mask] = 0
    seen = []
    final = damico.damico_run(x, J, 1.0, 3, mask, callback=lambda t, s: seen.append((t, s)))
    expect = reference_step(x, J, 1.0, mask)
    np.testing.assert_allclose(seen[0][1], expect, rtol=1e-10)
    for _ in range(2):
        expect = reference_step(expect, J, 1.0)
    np.testing.assert_allclose(final, expect, rtol=1e-9)
    assert [t for t, _ in seen] == [1, 2, 3]


def test_run_clamp_visible_keeps_visible_tokens(rng):
    x, J = system(rng, scale=0.3)
    mask = random_mask(rng, 4, 7)
    x[mask] = 0
    final = damico.damico_run(x, J, 1.0, 4, mask, clamp_visible=True)
    np.testing.assert_array_equal(final[~mask], x[~mask])
    assert not np.allclose(final[mask], 0)


def test_zero_steps_returns_the_input(rng):
    x, J = system(rng)
    np.testing.assert_array_equal(damico.damico_run(x, J, 1.0, 0), x)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mask": np.zeros((4, 7), int)}, "bool"),
        ({"mask": np.zeros((4, 6), bool)}, "shape"),
        ({"lam": 0.0}, "lam"),
    ],
)
def test_bad_input(rng, kwargs, match):
    x, J = system(rng)
    args = {"lam": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        damico.damico_step(x, J, args.pop("lam"), **args)


def test_clamp_visible_needs_a_mask(rng):
    x, J = system(rng)
    with pytest.raises(ValueError, match="clamp_visible"):
        damico.damico_run(x, J, 1.0, 2, clamp_visible=True)
