"""The "equilibrium" point kind: Hebbian retrieval at a temperature (spinsa.scan.equilibrium),
its scan on a tiny grid, and its figure."""

import math
import textwrap

import numpy as np
import pytest
from scipy import optimize

from spinsa import io, sampling
from spinsa.datasets import correlated_patterns
from spinsa.scan import EquilibriumConfig, collect, point_kind, run_scan
from spinsa.scan.equilibrium import _starts, equilibrium_couplings, equilibrium_summary
from spinsa.vmf import mean_resultant_length


@pytest.mark.parametrize(
    "model, scale", [("twobody", lambda N, d: d / N), ("attention", lambda N, d: d)]
)
def test_couplings_are_scaled_hebbian(rng, model, scale):
    xi = correlated_patterns(3, 5, 2, 0.0, seed=1).astype(np.float64)
    J = equilibrium_couplings(xi, model)
    expected = scale(5, 2) * np.einsum("pia,pjb->ijab", xi, xi)
    expected[np.arange(5), np.arange(5)] = 0
    np.testing.assert_allclose(J, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("model, sampler", [("twobody", "gibbs"), ("attention", "gibbs"),
                                            ("attention", "metropolis")])  # fmt: skip
def test_summary_is_the_overlap_of_the_chains(model, sampler):
    """The same chains rebuilt from the public samplers; the overlaps by a plain loop."""
    cfg = EquilibriumConfig(model=model, sampler=sampler, n_tokens=6, n_patterns=2, d=2,
                            temperature=0.7, n_chains=4, n_sweeps=6, burn_in=2, thin=2,
                            seed=3)  # fmt: skip
    got = equilibrium_summary(cfg)
    gen = np.random.default_rng(3)
    xi = correlated_patterns(2, 6, 2, 0.0, seed=gen).astype(np.float64)
    x0, which = _starts(xi, 4, cfg.start_noise, gen)
    np.testing.assert_array_equal(which, [0, 1, 0, 1])
    J = equilibrium_couplings(xi, model)
    kw = dict(n_chains=4, n_sweeps=6, burn_in=2, thin=2, x0=x0, rng=3, scan="systematic")
    if sampler == "gibbs":
        chains = sampling.gibbs(J, 1 / 0.7, model=model, **kw)
    else:
        chains = sampling.metropolis(J, 1.0, 1 / 0.7, **kw)
    R = chains.records.shape[0]
    own = np.zeros(4)
    best = np.zeros(4)
    norm = np.zeros(4)
    for c in range(4):
        for r in range(R):
            m = [sum(xi[mu, i] @ chains.records[r, c, i] for i in range(6)) / 6 for mu in (0, 1)]
            own[c] += m[c % 2] / R
            best[c] += max(abs(m[0]), abs(m[1])) / R
            norm[c] += math.hypot(*m) / R
    assert got["overlap"] == pytest.approx(own.mean(), abs=1e-12)
    assert got["overlap_sem"] == pytest.approx(own.std(ddof=1) / 2, abs=1e-12)
    assert got["max_overlap"] == pytest.approx(best.mean(), abs=1e-12)
    assert got["overlap_norm"] == pytest.approx(norm.mean(), abs=1e-12)
    assert got["energy"] == pytest.approx(chains.energies.mean() / 6, abs=1e-12)
    assert got["paramagnetic_overlap"] == pytest.approx(math.sqrt(2 / (math.pi * 12)), rel=0.15)
    assert got["paramagnetic_overlap"] < got["paramagnetic_max_overlap"]
    assert got["paramagnetic_max_overlap"] < got["paramagnetic_overlap_norm"]


@pytest.mark.parametrize("d", [1, 3])
def test_one_pattern_follows_mean_field(d):
    """One stored pattern is a ferromagnet in disguise (the Mattis model): its overlap solves
    m = A_d(d beta m) for large N, the couplings being scaled by d."""
    T = 0.6
    cfg = EquilibriumConfig(n_tokens=200, n_patterns=1, d=d, temperature=T, n_chains=8,
                            n_sweeps=100, burn_in=50, seed=1)  # fmt: skip
    got = equilibrium_summary(cfg)
    m = optimize.brentq(lambda m: m - mean_resultant_length(d * m / T, d), 1e-3, 1.0)
    assert abs(got["overlap"] - m) < 5 * got["overlap_sem"] + 0.02  # + O(1/N)
    hot = equilibrium_summary(EquilibriumConfig(n_tokens=200, n_patterns=1, d=d,
                                                temperature=3.0, n_chains=8, seed=1))  # fmt: skip
    assert hot["overlap"] < 4 * hot["paramagnetic_overlap"]


def test_config_refusals():
    with pytest.raises(ValueError, match="metropolis' samples the attention model"):
        EquilibriumConfig(model="twobody", sampler="metropolis")
    with pytest.raises(ValueError, match="temperature"):
        EquilibriumConfig(temperature=0.0)
    with pytest.raises(ValueError, match="no record"):
        EquilibriumConfig(n_sweeps=1, thin=2)
    with pytest.raises(ValueError, match="unknown key"):
        point_kind("equilibrium").configure({"temprature": 1.0}, {})


def test_tiny_equilibrium_scan_collects_and_draws(tmp_path):
    pytest.importorskip("xarray")
    from spinsa.plotting.scan import draw_scan_figures, line_panels

    path = tmp_path / "eq.toml"
    path.write_text(textwrap.dedent("""
        n_tokens = 6
        n_chains = 2
        n_sweeps = 4
        burn_in = 2
        [scan]
        point = "equilibrium"
        [axes]
        model = ["twobody", "attention"]
        temperature = [0.5, 2.0]
        [zip.alpha]
        alpha = [0.1667, 0.3333]
        n_patterns = [1, 2]
        [collect]
        lines = { x = "temperature", hue = "alpha", panels = ["model"] }
        """))  # fmt: skip
    out = tmp_path / "out"
    run_scan(path, out, cluster="serial", progress=False)
    ds = collect(out, None)
    assert ds.sizes == {"model": 2, "temperature": 2, "alpha": 2}
    assert (ds["status"] == "done").all()
    key = ds["key"].sel(model="attention", temperature=2.0, alpha=0.3333).item()
    summary = io.read_group(out / "points" / f"{key}.h5", "summary")[0]
    assert ds["overlap"].sel(model="attention", temperature=2.0, alpha=0.3333) == summary["overlap"]
    fig = line_panels(ds, "overlap", "temperature", "alpha", ["model"])
    ax = fig.axes[1]  # attention
    y = ax.containers[1].lines[0].get_ydata()  # alpha = 1/3
    np.testing.assert_allclose(y, ds["overlap"].sel(model="attention", alpha=0.3333).values)
    paths = draw_scan_figures(ds, tmp_path / "fig", {"lines": {"x": "temperature", "hue": "alpha",
                                                             "panels": ["model"]}})  # fmt: skip
    assert [p.name for p in paths] == ["lines_overlap.png"] and paths[0].stat().st_size > 0
    with pytest.raises(ValueError, match="lines needs x"):
        draw_scan_figures(ds, tmp_path / "fig", {"lines": {"hue": "alpha"}})
