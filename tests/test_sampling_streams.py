"""The samplers' random streams (spinsa.sampling.generator_states) and seeds: uniform at any
number of streams, every form of ``rng`` accepted, replicas independent by default.

The statistical thresholds are p > 1e-3 and |z| < 5 at fixed seeds (docs/sampling.md,
'Random streams'). The seeds are those at which the earlier seeding (one
SeedSequence.generate_state for all rows) failed: chi^2 = 2115 and 4561 for 999 degrees
of freedom (first output at seed 3, second at seed 2), 244.7 for 59 (vMF at seed 7).
"""

import math

import numpy as np
import pytest
from scipy import stats

from spinsa import sampling
from spinsa.kernels import sampling as kernels
from spinsa.vmf import mean_resultant_length

MASK = 2**64 - 1


def splitmix64_reference(seed, n):
    """The first ``n`` outputs of SplitMix64 seeded with ``seed``, in plain Python integers
    (Steele, Lea and Flood 2014; Vigna's splitmix64.c)."""
    out, z = [], seed & MASK
    for _ in range(n):
        z = (z + 0x9E3779B97F4A7C15) & MASK
        w = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        w = ((w ^ (w >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(w ^ (w >> 31))
    return out


def test_splitmix64_reference_matches_its_published_outputs():
    # the outputs of splitmix64.c seeded with 1234567, as its test vector lists them
    assert splitmix64_reference(1234567, 5) == [
        6457827717110365317, 3203168211198807973, 9817491932198370423,
        4593380528125082431, 16408922859458223821,
    ]  # fmt: skip


@pytest.mark.parametrize("key", [0, 1234567, 2**64 - 3])
def test_splitmix_states_are_splitmix64_of_consecutive_seeds(key):
    states = kernels.splitmix_states(key, 5)
    assert states.dtype == np.uint64 and states.shape == (5, 4)
    for k in range(5):
        assert [int(w) for w in states[k]] == splitmix64_reference(key + k, 4)


def test_generator_states_take_every_form_of_rng():
    a = sampling.generator_states(7, 3)
    np.testing.assert_array_equal(a, sampling.generator_states(np.int64(7), 3))
    np.testing.assert_array_equal(a, sampling.generator_states(np.random.SeedSequence(7), 3))
    gen = np.random.default_rng(7)
    g1, g2 = sampling.generator_states(gen, 3), sampling.generator_states(gen, 3)
    assert not np.array_equal(g1, g2)  # the Generator advances
    fresh = [sampling.generator_states(None, 3) for _ in range(2)]
    assert not np.array_equal(*fresh)
    for bad in ("7", 1.5, -1, True):
        with pytest.raises(ValueError, match="rng must be None, an int seed >= 0"):
            sampling.generator_states(bad, 3)


def xoshiro_outputs(states, n):
    """The first ``n`` outputs of xoshiro256** of every row of ``states`` (M, 4), shape
    (n, M), by vectorised numpy (uint64 arithmetic wraps)."""
    s = [states[:, k].copy() for k in range(4)]

    def rotl(v, k):
        return (v << np.uint64(k)) | (v >> np.uint64(64 - k))

    out = []
    for _ in range(n):
        out.append(rotl(s[1] * np.uint64(5), 7) * np.uint64(9))
        t = s[1] << np.uint64(17)
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return np.array(out)


def test_numpy_xoshiro_is_the_kernels():
    states = sampling.generator_states(1, 6)
    ours = xoshiro_outputs(states, 3)
    for m in range(6):
        row = states[m].copy()
        np.testing.assert_array_equal([kernels.next_u64(row) for _ in range(3)], ours[:, m])


def uniforms(words):
    """The kernels' uniform(): 53 top bits, in (0, 1]."""
    return ((words >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53


@pytest.mark.parametrize("output, seed", [(1, 3), (2, 2)])
def test_first_outputs_are_uniform_over_4e6_streams(output, seed):
    """Issue 42: at 4e6 rows the earlier seeding gave chi^2 2115 (first output, seed 3) and
    4561 (second output, seed 2) over 1000 bins. Now p > 1e-3, and the mean is 1/2 within
    5 standard errors."""
    n = 4_000_000
    u = uniforms(xoshiro_outputs(sampling.generator_states(seed, n), output)[output - 1])
    counts = np.bincount(np.minimum((u * 1000).astype(np.int64), 999), minlength=1000)
    assert stats.chisquare(counts).pvalue > 1e-3
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)


def test_vmf_d3_is_uniform_in_its_cdf_at_2_5e6_draws():
    """d = 3 draws use one uniform each for w = x . mu, whose cdf is
    F(w) = (e^{kappa w} - e^{-kappa}) / (e^kappa - e^-kappa): F(w) must be uniform
    (60 bins, p > 1e-3; the earlier seeding gave chi^2 244.7 at this seed, 74.0 on average
    over seeds 0-7), and E[w] = A_3(kappa) within 5 standard errors."""
    n, kappa = 2_500_000, 2.0
    mu = np.array([0.0, 0.6, 0.8])
    w = sampling.sample_vmf(np.broadcast_to(mu, (n, 3)), kappa, rng=7) @ mu
    F = np.expm1(kappa * (w + 1)) / np.expm1(2 * kappa)
    counts = np.bincount(np.clip((F * 60).astype(np.int64), 0, 59), minlength=60)
    assert stats.chisquare(counts).pvalue > 1e-3
    assert abs(w.mean() - float(mean_resultant_length(kappa, 3))) < 5 * w.std() / math.sqrt(n)


# ------------------------------------------------------------------ seeds of chains
def small_couplings(rng, N=5, d=2):
    return 0.7 * rng.standard_normal((N, N, d, d))


def test_chains_accept_a_generator_and_a_seed_sequence(rng):
    J = small_couplings(rng)
    gen = np.random.default_rng(4)
    a = sampling.gibbs(J, 1.0, 3, 4, rng=gen)
    b = sampling.gibbs(J, 1.0, 3, 4, rng=gen)
    assert not np.array_equal(a.records, b.records)  # the Generator advanced
    again = sampling.gibbs(J, 1.0, 3, 4, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(again.records, a.records)
    # the seed a run drew is recorded, and passed back as rng repeats the run
    np.testing.assert_array_equal(sampling.gibbs(J, 1.0, 3, 4, rng=a.config.seed).records,
                                  a.records)  # fmt: skip
    seq = sampling.metropolis(J, 1.0, 0.5, 3, 4, rng=np.random.SeedSequence(9))
    same = sampling.metropolis(J, 1.0, 0.5, 3, 4, rng=np.random.SeedSequence(9))
    np.testing.assert_array_equal(same.records, seq.records)
    np.testing.assert_array_equal(
        sampling.metropolis(J, 1.0, 0.5, 3, 4, rng=seq.config.seed).records, seq.records
    )
    with pytest.raises(ValueError, match=r"rng must be an int seed in \[0, 2\*\*63\)"):
        sampling.gibbs(J, 1.0, 3, 4, rng=2**63)
    with pytest.raises(ValueError, match="rng must be None"):
        sampling.gibbs(J, 1.0, 3, 4, rng="seed")


def test_replicas_are_independent_by_default_and_record_their_seed(rng):
    J = small_couplings(rng)
    a, b = (sampling.gibbs(J, 1.0, 2, 3, model="twobody") for _ in range(2))
    assert a.config.seed != b.config.seed
    assert not np.array_equal(a.records, b.records)
    repeat = sampling.gibbs(J, 1.0, 2, 3, model="twobody", rng=a.config.seed)
    np.testing.assert_array_equal(repeat.records, a.records)


def test_a_killed_run_without_seed_resumes_with_its_checkpoints_seed(rng, tmp_path):
    J = small_couplings(rng)
    path = tmp_path / "chains.h5"

    class Stop(Exception):
        pass

    def stop_at_2(r, x):
        if r == 2:
            raise Stop

    with pytest.raises(Stop):
        sampling.gibbs(J, 1.0, 2, 8, checkpoint=path, checkpoint_every=1, callback=stop_at_2)
    resumed = sampling.gibbs(J, 1.0, 2, 8, checkpoint=path)
    whole = sampling.gibbs(J, 1.0, 2, 8, rng=resumed.config.seed)
    np.testing.assert_array_equal(resumed.records, whole.records)
