"""Planted studies in one file: the synthetic kind's PL couplings, flipped starts and load
axis; categorical and log axes in the scan figures; the critical load and its figure."""

import textwrap
import warnings

import numpy as np
import pytest
from reference import random_system

import spinsa
from spinsa._config import config_from_dict
from spinsa.analysis import HOPFIELD_ALPHA_C, critical_load, crossing
from spinsa.scan import collect, load_scan, phase_diagram, run_scan
from spinsa.scan.kinds import (
    SyntheticConfig,
    configure_synthetic,
    synthetic_couplings,
    synthetic_summary,
)
from spinsa.tasks import noisy_starts


def overlaps(x, xi):
    return np.einsum("pna,pna->p", x, xi) / xi.shape[1]


# --------------------------------------------------------------------------- noisy starts


def test_flipped_starts_have_the_overlap_of_their_flips(rng):
    xi, _ = random_system(rng, P=3, N=20, d=4)
    x0 = noisy_starts(xi, flip=0.25, rng=1)
    np.testing.assert_allclose(overlaps(x0, xi), 1 - 2 * 5 / 20, rtol=1e-12)
    flipped = ~np.isclose(np.einsum("pna,pna->pn", x0, xi), 1.0)
    assert (flipped.sum(axis=1) == 5).all()  # exactly round(flip N) per pattern
    np.testing.assert_array_equal(noisy_starts(xi, flip=0.25, rng=1), x0)  # seeded


def test_noisy_starts_without_flips_are_the_old_gaussian_starts(rng):
    xi, _ = random_system(rng, P=2, N=6, d=3)
    z = np.random.default_rng(7).standard_normal(xi.shape)
    y = xi + 0.4 * z
    expected = y / np.linalg.norm(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(noisy_starts(xi, noise=0.4, rng=7), expected, rtol=1e-12)
    x = noisy_starts(xi, noise=2.0, flip=0.5, rng=3)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(noise=-0.1), "noise must be >= 0"), (dict(flip=1.5), r"flip must be .* \[0, 1\]")],
)
def test_noisy_starts_refuse_bad_levels(rng, kwargs, match):
    xi, _ = random_system(rng, P=2, N=6, d=3)
    with pytest.raises(ValueError, match=match):
        noisy_starts(xi, **kwargs)


# --------------------------------------------------------------------------- the synthetic kind


def test_old_synthetic_points_keep_their_config_and_results():
    plain = configure_synthetic({}, {})
    assert set(plain) == {"patterns", "corruption", "dynamics", "analysis", "seed", "sleep"}
    assert "alpha" not in plain["patterns"] and "flip" not in plain["corruption"]
    summary = synthetic_summary(config_from_dict(SyntheticConfig, plain))
    assert {"retrieved_fraction", "initial_overlap"} <= set(summary)
    assert "hebbian_cosine" not in summary


def test_the_load_sets_the_number_of_patterns():
    config = configure_synthetic({"patterns": {"n_tokens": 40}}, {"patterns.alpha": 0.138})
    assert config["patterns"]["n_patterns"] == 6  # round(0.138 * 40)
    again = configure_synthetic(config, {})  # the resolved config is stable
    assert again == config
    with pytest.raises(ValueError, match="patterns.alpha"):
        configure_synthetic({}, {"patterns.alpha": -0.1})


def test_pl_couplings_are_the_fit_of_the_patterns_at_the_hebbian_norm():
    base = {"patterns": {"n_tokens": 8, "d": 2, "n_patterns": 3}, "couplings": "pl",
            "fit": {"lam": 8.0, "max_iter": 30}}  # fmt: skip
    config = config_from_dict(SyntheticConfig, configure_synthetic(base, {}))
    xi = spinsa.datasets.correlated_patterns(3, 8, 2, 0.0, seed=np.random.default_rng(0))
    J, fitted = synthetic_couplings(config, xi)
    hebb = spinsa.couplings.hebbian_couplings(xi)
    np.testing.assert_allclose(np.linalg.norm(J), np.linalg.norm(hebb), rtol=1e-4)
    direct = spinsa.fit_pseudolikelihood(
        xi, J0=hebb, backend="lbfgs", lam=8.0, constraint="global", max_iter=30,
        dtype=str(xi.dtype), check_memory=False,
    ).J  # fmt: skip
    np.testing.assert_allclose(J, direct, rtol=1e-5, atol=1e-7)
    cos = (J * hebb).sum() / (np.linalg.norm(J) * np.linalg.norm(hebb))
    assert fitted["hebbian_cosine"] == pytest.approx(cos, rel=1e-5)
    assert cos < 0.999  # at lam |J| this large the fit leaves the Hebbian direction


def test_the_fit_section_belongs_to_pl_couplings(tmp_path):
    hebbian = configure_synthetic({"fit": {"lam": 3.0}}, {})  # one base for both kinds
    assert hebbian == configure_synthetic({}, {})
    assert configure_synthetic({"fit": {"lam": 3.0}}, {"couplings": "pl"})["fit"]["lam"] == 3.0
    (tmp_path / "s.toml").write_text(
        '[scan]\npoint = "synthetic"\n[axes]\n"fit.lam" = [1.0, 2.0]\n'
    )
    with pytest.raises(ValueError, match="changes no point's config"):
        load_scan(tmp_path / "s.toml").points()
    with pytest.raises(ValueError, match="couplings must be one of"):
        configure_synthetic({"couplings": "random"}, {})


STUDY = """
[scan]
name = "planted"
point = "synthetic"

[patterns]
n_tokens = 10
d = 1

[corruption]
noise = 0.0
flip = 0.1

[dynamics]
steps = 4

[fit]
max_iter = 5

[axes]
couplings = ["hebbian", "pl"]
"patterns.alpha" = [0.1, 0.2, 0.4]
seed = { range = 2 }
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A planted study written as a new user would: couplings, alpha and seed are axes, not
    keys of the base; [fit] applies to the PL points only."""
    pytest.importorskip("xarray")
    tmp = tmp_path_factory.mktemp("planted")
    path = tmp / "scan.toml"
    path.write_text(textwrap.dedent(STUDY))
    run_scan(path, tmp / "out", cluster="serial", progress=False)
    return path, collect(tmp / "out", None)


def test_axes_that_are_not_keys_of_the_base_are_accepted(tmp_path):
    text = STUDY.replace("[fit]\nmax_iter = 5\n", "")
    (tmp_path / "a.toml").write_text(text)
    (tmp_path / "b.toml").write_text(text.replace("couplings = [", "coupling = ["))
    spec = load_scan(tmp_path / "a.toml")
    points = spec.points()
    assert len(points) == 12 and len({p.key for p in points}) == 12
    with pytest.raises(ValueError, match="unknown axis name 'coupling'.*Did you mean 'couplings'"):
        load_scan(tmp_path / "b.toml").points()


def test_collect_keeps_the_categorical_axis_as_a_dimension(study):
    _, ds = study
    assert ds.sizes["couplings"] == 2 and ds["couplings"].values.tolist() == ["hebbian", "pl"]
    assert np.isnan(ds["hebbian_cosine"].sel(couplings="hebbian")).all()
    assert np.isfinite(ds["hebbian_cosine"].sel(couplings="pl")).all()
    m0 = ds["initial_overlap"].values
    np.testing.assert_allclose(m0, 0.8)  # one flip of ten spins, d = 1
    with pytest.raises(ValueError, match="couplings is a categorical axis"):
        phase_diagram(ds, "final_overlap", "patterns.alpha", "seed")
    ax = phase_diagram(ds, "final_overlap", "patterns.alpha", "couplings")  # drawn: fine
    expected = ds["final_overlap"].mean("seed").transpose("couplings", "patterns.alpha")
    np.testing.assert_allclose(np.asarray(ax.collections[0].get_array()).reshape(2, 3),
                               expected.values)  # fmt: skip
    assert [t.get_text() for t in ax.get_yticklabels()] == ["hebbian", "pl"]


def test_scan_figures_make_categorical_axes_panels_or_lines(study, tmp_path):
    from spinsa.plotting.scan import draw_phase_diagrams, draw_scan_figures

    _, ds = study
    paths = draw_phase_diagrams(ds, tmp_path, ["final_overlap"], x="patterns.alpha", y="seed")
    assert [p.name for p in paths] == ["final_overlap.png"]
    lines = {"x": "patterns.alpha", "variables": ["retrieved_fraction"]}
    assert draw_scan_figures(ds, tmp_path, {"lines": lines})[0].exists()


def test_panels_of_lines_have_no_colour_bar_and_average_nothing():
    xr = pytest.importorskip("xarray")
    from spinsa.plotting.scan import phase_panels

    # an equilibrium scan: temperature (numeric) x model (categorical), x and y not given
    coords = {"temperature": [0.2, 0.6, 1.2], "model": ["twobody", "attention"]}
    da = xr.DataArray(np.random.default_rng(0).random((3, 2)), coords, ("temperature", "model"))
    ds = xr.Dataset({"overlap": da})
    fig = phase_panels(ds, "overlap", None, None, ["model"])
    assert len(fig.axes) == 2  # two panels of lines, no colour bar: lines have no colours
    assert fig._suptitle.get_text() == "overlap"  # no "mean over the other axes": none left
    seeds = xr.concat([da, da], xr.DataArray([0, 1], dims="seed", name="seed"))
    fig = phase_panels(xr.Dataset({"overlap": seeds}), "overlap", "temperature", "seed", ["model"])
    assert len(fig.axes) == 3  # heat maps: one colour bar for both panels


def test_heat_map_cells_are_centred_and_never_cross_zero():
    xr = pytest.importorskip("xarray")

    def edges(values, y=(0.0, 1.0, 2.0)):
        da = xr.DataArray(np.ones((len(values), len(y))), coords={"x": values, "y": list(y)},
                          dims=("x", "y"))  # fmt: skip
        ds = xr.Dataset({"v": da})
        ax = phase_diagram(ds, "v", "x", "y")
        return ax.collections[0].get_coordinates()[0, :, 0], ax

    e, ax = edges([1.0, 8.0])  # the lambda axis: two equal cells, labelled
    np.testing.assert_allclose(e, [-0.5, 0.5, 1.5])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "8"]
    e, ax = edges([1.0, 2.0, 4.0, 8.0])  # geometric: log cells around every value
    np.testing.assert_allclose(e, [2**-0.5, 2**0.5, 2**1.5, 2**2.5, 2**3.5])
    assert ax.get_xscale() == "log"
    e, _ = edges([1.0, 2.0, 3.0])  # evenly spaced: half a step either side
    np.testing.assert_allclose(e, [0.5, 1.5, 2.5, 3.5])
    e, _ = edges([1.0, 8.0, 15.0])  # evenly spaced, but a cell would cross zero
    np.testing.assert_allclose(e, [-0.5, 0.5, 1.5, 2.5])


# --------------------------------------------------------------------------- critical load


def test_crossing_is_the_linear_interpolation():
    alpha = np.array([0.1, 0.2, 0.3, 0.4])
    assert crossing(alpha, [1.0, 0.8, 0.2, 0.0], 0.5) == (pytest.approx(0.25), "inside")
    assert crossing(alpha, [1.0, 0.9, 0.7, 0.6], 0.5)[1] == "above"
    assert crossing(alpha, [0.4, 0.9, 0.7, 0.6], 0.5)[1] == "below"
    assert crossing(alpha, [1.0, np.nan, 0.0, 0.0], 0.5)[0] == pytest.approx(0.2)  # NaN skipped


def test_critical_load_of_identical_seeds_has_no_spread():
    alpha = np.linspace(0.05, 0.3, 6)
    curve = np.clip(1.5 - 8 * alpha, 0, 1)  # crosses 1/2 at 0.125
    load = critical_load(alpha, np.repeat(curve[:, None], 4, axis=1))
    assert load.alpha_c == pytest.approx(0.125) and load.where == "inside"
    assert load.sem == 0 and load.censored_fraction == 0


def test_critical_load_error_bar_covers_the_truth():
    """Noisy seeds of a known curve: the estimate is within 5 standard errors of 0.15,
    and the bootstrap error is close to the spread of estimates over repeated studies."""
    rng = np.random.default_rng(3)
    alpha = np.linspace(0.05, 0.3, 11)
    truth = 1 / (1 + np.exp((alpha - 0.15) / 0.03))

    def study(n_seeds):
        noisy = truth[:, None] + 0.1 * rng.standard_normal((alpha.size, n_seeds))
        return critical_load(alpha, noisy, n_boot=300, seed=int(rng.integers(1 << 30)))

    loads = [study(10) for _ in range(30)]
    estimates = np.array([ld.alpha_c for ld in loads])
    sems = np.array([ld.sem for ld in loads])
    assert abs(estimates.mean() - 0.15) < 5 * estimates.std(ddof=1) / np.sqrt(estimates.size)
    assert 0.5 < sems.mean() / estimates.std(ddof=1) < 2
    one = critical_load(alpha, truth)  # one seed: no error bar
    assert np.isnan(one.sem) and one.n_seeds == 1


@pytest.mark.parametrize(
    "alpha, values, match",
    [([0.2, 0.1], np.ones((2, 2)), "strictly increasing"),
     ([0.1, 0.2], np.ones((3, 2)), "shape")],
)  # fmt: skip
def test_critical_load_refuses_bad_input(alpha, values, match):
    with pytest.raises(ValueError, match=match):
        critical_load(alpha, values)


def test_capacity_figure_reads_off_each_curve(study):
    from spinsa.plotting.scan import capacity_figure

    _, ds = study
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a load where both seeds agree
        ax, loads = capacity_figure(ds, n_boot=50)
    assert set(loads) == {"hebbian", "pl"}
    r = ds["retrieved_fraction"].sel(couplings="pl").transpose("patterns.alpha", "seed")
    assert loads["pl"] == critical_load(r["patterns.alpha"].values, r.values, n_boot=50)
    assert any(line.get_xdata()[0] == HOPFIELD_ALPHA_C for line in ax.lines)
