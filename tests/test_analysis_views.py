"""Results that draw themselves and become xarray: ``plot(ax=None)``, ``to_xarray()`` and
``to_dataframe()`` on every analysis result and on ``Trajectory``; the figures of
:mod:`spinsa.plotting.analysis` from a user's own file."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.axes import Axes

import spinsa
from spinsa import analysis, io
from spinsa.analysis import _results
from spinsa.analysis import attractors as at
from spinsa.analysis import compare as cp
from spinsa.analysis import hebbian as hb
from spinsa.analysis import lifetimes as lt
from spinsa.analysis import patches as pa
from spinsa.analysis import planted as pl
from spinsa.analysis import summary as su
from spinsa.analysis import twobody as tb


def _makers(rng):
    """One small, valid instance of every result class, by class name (K = 2 models,
    N = 4 tokens, d = 2, P = 5 samples, T = 6 records)."""
    K, N, d, P, T = 2, 4, 2, 5, 6
    r = rng.random
    ints = lambda *s: rng.integers(0, 3, s)  # noqa: E731
    names = ("fitted", "hebbian")
    xi = r((P, N, d))
    J = r((N, N, d, d))
    life = lt.overlap_lifetimes(r((T, P)), np.arange(T), 0.5)
    return {
        "CycleReport": lambda: at.CycleReport(ints(P), ints(P), r(P), r(P), max_period=2),
        "StateClusters": lambda: at.StateClusters(ints(P), np.arange(2), np.array([3, 2])),
        "AttractorReport": lambda: at.AttractorReport(
            ints(P),
            ints(P),
            ints(P),
            r(P),
            r((2, N, d)),
            np.ones(2, int),
            np.array([3, 1]),
            np.array([0.6, 0.2]),
            group_fractions=r((2, 2)),
            group_unconverged=r(2),
            group_names=("test", "random"),
            fraction_unconverged=0.2,
        ),  # fmt: skip
        "DecodedImages": lambda: at.DecodedImages(r((3, 4, 4))),
        "PairwiseCosines": lambda: cp.PairwiseCosines(
            r((K, K)), np.array([[0, 1]]), r((1, N, N)), r(1), r((1, 3)), r(3), names=names
        ),
        "CouplingSpectra": lambda: cp.CouplingSpectra(
            r((K, N * d)) + 0j,
            r((K, N * d)),
            r((K, N * d)),
            r((K, N * (N - 1), d)),
            r((K, d)),
            r((K, d)),
            r(K) + 1,
            r(K),
            r(K),
            r(K),
            names=names,
        ),  # fmt: skip
        "DistanceComparison": lambda: cp.DistanceComparison(
            r(3), ints(3), r((K, 3)), r((K, 3)), r(K), names=names
        ),
        "AttentionEntropy": lambda: cp.AttentionEntropy(
            r(K), r(K), r((K, N)), max_entropy=np.log(N - 1), names=names
        ),
        "PseudolikelihoodValues": lambda: cp.PseudolikelihoodValues(
            r(K), r(K), r(K), common_norm=1.0, loss_zero=-3.0, names=names
        ),
        "TaskComparison": lambda: cp.TaskComparison(
            np.arange(T),
            r((K, T)),
            r((K, T)),
            ints(K),
            r(K),
            r(K),
            r((K, 2)),
            r((K, 2)),
            r((K, 2)),
            r(K),
            r(K) > 0.5,
            r(K),
            r(K),
            r(K),
            r(K),
            r(K),
            np.arange(4.0),
            ints(K, 3),
            r(K),
            r(K),
            r(K),
            r(K),
            r(K),
            r(K),
            r(K),
            r((K, 3, 3)),
            r((K, K)),
            r((K, K)),
            ints(K),
            references=("mean", "blur"),
            best_reference=("mean", "blur"),
            names=names,
        ),  # fmt: skip
        "StrengthDistance": lambda: hb.StrengthDistance(r(12), r(12), r(3), r(3), r(3), ints(3)),
        "CouplingSpectrum": lambda: hb.CouplingSpectrum(r(8) + 0j, r(8), r(8) - 0.3, r((N, N, d))),
        "HebbianComparison": lambda: hb.HebbianComparison(
            J,
            r((N, N)),
            r((N, N)),
            r((N, N)),
            None,
            r(8),
            r(8),
            r(8),
            r(8),
            global_cosine=0.9,
            mean_pair_cosine=0.8,
        ),  # fmt: skip
        "StrengthMaps": lambda: hb.StrengthMaps(r((2, 2)), r((3, 3)), center_token=3),
        "Lifetimes": lambda: life,
        "LifetimeTable": lambda: lt.summarize_lifetimes([life, life], [0.1, 0.5]),
        "NearestPatterns": lambda: analysis.NearestPatterns(ints(T, P), r((T, P)), n_patterns=3),
        "OverlapTrace": lambda: analysis.OverlapTrace(
            np.arange(T), r((T, P)), ints(T, P), r((T, P))
        ),
        "PatchVariances": lambda: pa.PatchVariances(r(7), ints(7), ints(7), patch=2),
        "PatchVarianceHistograms": lambda: pa.patch_variance_histograms(
            {
                "clean": pa.PatchVariances(r(7), ints(7), ints(7)),
                "t = 1": pa.PatchVariances(r(7), ints(7), ints(7)),
            },
            bins=4,
        ),  # fmt: skip
        "RecoveryCurve": lambda: pl.RecoveryCurve(
            np.array([10, 100, 1000]), np.array([1.0, 0.3, 0.1]), r(3), slope=-0.5, kind="k"
        ),
        "ErrorCurves": lambda: su.ErrorCurves(
            np.arange(T),
            r((K, T, P)),
            r((K, T)),
            r((K, T)),
            r((K, T)),
            r((K, T)),
            r((K, T)),
            r((K, T)),
            models=names,
            task="masked",
        ),  # fmt: skip
        "TwoBodyFit": lambda: tb.TwoBodyFit(J, loss=1.0),
        "TwoBodyVsHebbian": lambda: tb.TwoBodyVsHebbian(
            np.array([2, 4]), r(2), r(2), r(2), r(2), r(2), np.array([True, False])
        ),
        "FixedPointStability": lambda: analysis.fixed_point_stability(
            J / 4, 2.0, xi[0] / np.linalg.norm(xi[0], axis=-1, keepdims=True), tol=np.inf
        ),
        "_xi": lambda: xi,
    }


MAKERS = sorted(k for k in _makers(np.random.default_rng(0)) if not k.startswith("_"))


def test_every_result_class_is_covered():
    # a new result class of spinsa needs a maker above, so that it is drawn and converted
    ours = [n for n, c in _results._REGISTRY.items() if c.__module__.startswith("spinsa.")]
    assert sorted(ours) == MAKERS


@pytest.mark.parametrize("name", MAKERS)
def test_every_result_draws_itself(name, rng):
    result = _makers(rng)[name]()
    ax = result.plot()
    assert isinstance(ax, Axes)
    drawn = ax.lines + ax.collections + ax.patches + ax.images + ax.containers
    assert drawn or ax.texts, f"{name}.plot drew nothing"
    ax.figure.canvas.draw()  # renders: labels and mathtext are valid
    # on a given axes, that axes comes back
    other = ax.figure.add_subplot(2, 2, 4)
    assert result.plot(ax=other) is other


@pytest.mark.parametrize("name", MAKERS)
def test_every_result_becomes_xarray(name, rng):
    result = _makers(rng)[name]()
    ds = result.to_xarray()
    arrays = result.to_arrays()
    coords = {k: np.asarray(v) for k, v in ds.coords.items()}
    for key, value in arrays.items():
        got = ds[key].values if key in ds.data_vars else coords[key]
        np.testing.assert_array_equal(got, value)
    assert ds.attrs["result_type"] == name
    for f, dims in result.dims().items():
        assert len(dims) == arrays[f].ndim and len(set(dims)) == len(dims)


def test_dims_come_from_the_docstring(rng):
    report = _makers(rng)["AttractorReport"]()
    dims = report.dims()
    assert dims["labels"] == ("P",) and dims["states"] == ("C", "N", "d")
    assert dims["group_fractions"] == ("G", "C") and dims["group_unconverged"] == ("G",)
    comp = _makers(rng)["HebbianComparison"]()
    assert comp.dims()["hebbian"] == ("N", "N_2", "d", "d_2")  # repeated symbols split
    trace = _makers(rng)["OverlapTrace"]().to_xarray()
    assert trace["target"].dims == ("T", "P") and "times" in trace.coords
    # "shape (P,) or (T, P)": the one that fits
    near = _makers(rng)["NearestPatterns"]()
    assert near.dims()["index"] == ("T", "P")
    # names label the model axis
    ds = _makers(rng)["AttentionEntropy"]().to_xarray()
    assert list(ds["K"].values) == ["fitted", "hebbian"]
    assert ds["mean"].sel(K="hebbian") == ds["mean"].values[1]


def test_to_dataframe_tabulates_arrays_that_share_dimensions(rng):
    life = _makers(rng)["Lifetimes"]()
    df = life.to_dataframe()
    assert len(df) == life.n_samples and "lifetime" in df.columns
    np.testing.assert_array_equal(df["peak"].to_numpy(), life.peak)
    report = _makers(rng)["AttractorReport"]()
    basins = report.to_dataframe("basin_size", "basin_fraction")
    assert basins.index.name == "C" and len(basins) == report.n_attractors
    with pytest.raises(ValueError, match="share their dimensions"):
        report.to_dataframe("labels", "basin_size")
    with pytest.raises(ValueError, match="no array"):
        report.to_dataframe("nope")


def test_plot_refuses_what_is_not_an_axes(rng):
    with pytest.raises(ValueError, match="ax must be a matplotlib Axes"):
        _makers(rng)["Lifetimes"]().plot(ax="left")


def test_trajectory_draws_itself_and_becomes_xarray(rng):
    from reference import random_system

    x, J = random_system(rng, P=3, N=5, d=3)
    traj = spinsa.run(x, J, 2.0, steps=6, record_every=2)
    ds = traj.to_xarray()
    assert ds["states"].dims == ("t", "P", "N", "d")
    np.testing.assert_array_equal(ds["t"].values, traj.times)
    np.testing.assert_array_equal(ds["states"].sel(t=4).values, traj.states[2])
    np.testing.assert_array_equal(ds["energies"].values, traj.energies)
    assert ds["energies"].dims == ("step", "P") and ds.attrs["lam"] == 2.0
    df = traj.to_dataframe()
    assert len(df) == 7 * 3
    np.testing.assert_allclose(df.loc[(6, 1), "energy"], traj.energies[6, 1])
    ax = traj.plot()
    assert isinstance(ax, Axes) and len(ax.lines) == 3 + 1  # one per sample, and the mean
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), traj.energies[:, 0])


# --------------------------------------------------------------------------- user files
def _user_file(tmp_path, rng, **results):
    """A file as a user writes it: spinsa.io with their own arrays, results saved where
    they chose."""
    path = tmp_path / "mine.h5"
    io.write_file(path, {"J": rng.random((4, 4, 2, 2))}, kind="run")
    for name, result in results.items():
        analysis.save_analysis(path, name, result)
    return path


def test_figures_read_results_from_a_users_file(tmp_path, rng):
    from spinsa import plotting

    m = _makers(rng)
    path = _user_file(
        tmp_path, rng, my_attractors=m["AttractorReport"](), hebb=m["HebbianComparison"](),
        life=m["LifetimeTable"](), over=m["OverlapTrace"](), patches=m["PatchVarianceHistograms"](),
        err=m["ErrorCurves"](),
    )  # fmt: skip
    fig = plotting.figure_attractors(path)  # a KeyError before: no analysis/attractors/report
    texts = [t.get_text() for f in fig.subfigs for ax in f.axes for t in ax.texts]
    assert any("basin 60%" in t for t in texts)  # the numbers, without decoded images
    fig = plotting.figure_hebbian(path)  # only the panels it has, and what it leaves out
    assert "strength maps" in " ".join(t.get_text() for t in fig.texts)
    for figure in (plotting.figure_lifetimes, plotting.figure_overlaps,
                   plotting.figure_patches, plotting.figure_hebbian_errors):  # fmt: skip
        figure(path).canvas.draw()
    fig = plotting.figure_overlaps(path, group="analysis/over")
    assert "analysis/over" in fig.axes[0].get_legend_handles_labels()[1][0]
    # a user's targets are whatever trajectory_overlaps got, not necessarily the start x(0)
    assert fig.axes[0].get_title() == "overlap with each trajectory's target"
    assert "x_i(0)" not in fig.axes[0].get_ylabel()


def test_figure_attractors_says_the_steps_run_not_the_cap(tmp_path, rng):
    from spinsa import plotting

    xi = analysis.random_spins(2, 6, 3, rng=1, dtype=np.float64)
    J = spinsa.hebbian_couplings(xi)
    report = analysis.find_attractors(J, 1.0, xi, until_converged=True, max_steps=3000)
    assert report.steps == 3000 and report.steps_run.max() < 3000
    path = _user_file(tmp_path, rng, attractors=report)
    title = plotting.figure_attractors(path).subfigs[0]._suptitle.get_text()
    assert f"slowest {report.steps_run.max()}, max_steps 3000" in title
    assert "after 3000 steps" not in title


def test_figures_say_what_is_missing_and_how_to_make_it(tmp_path, rng):
    from spinsa import plotting

    m = _makers(rng)
    path = _user_file(tmp_path, rng, a=m["AttractorReport"](), b=m["AttractorReport"]())
    with pytest.raises(ValueError, match=r"holds 2 AttractorReport results .*group="):
        plotting.figure_attractors(path)
    plotting.figure_attractors(path, group="analysis/b")
    with pytest.raises(ValueError, match="holds a AttractorReport, not a HebbianComparison"):
        plotting.figure_hebbian(path, group="analysis/a")
    with pytest.raises(ValueError, match="has no group 'nope'"):
        plotting.figure_attractors(path, group="nope")
    with pytest.raises(ValueError) as err:
        plotting.figure_hebbian(path)
    message = str(err.value)
    assert "no HebbianComparison" in message and "'analysis/hebbian/comparison'" in message
    assert "compare_with_hebbian" in message and "save_analysis" in message
    # spinsa analyze refuses a file of kind "run": the message must not send the user there
    assert "spinsa analyze" not in message
    with pytest.raises(ValueError, match=r"Make one with spinsa\.analysis\.ErrorCurves\("):
        plotting.figure_hebbian_errors(path)
    run_file = tmp_path / "run.h5"  # an experiment's run file (spinsa train) is analyzable
    io.write_file(run_file, {"J": rng.random((4, 4, 2, 2))}, kind="experiment")
    with pytest.raises(ValueError, match=r"or run `spinsa analyze .*run\.h5 --only hebbian`"):
        plotting.figure_hebbian(run_file)


def test_find_results_looks_everywhere(tmp_path, rng):
    m = _makers(rng)
    path = _user_file(tmp_path, rng, deep_down=m["Lifetimes"]())
    report = m["StateClusters"]()
    io.write_group(path, "elsewhere/clusters", report.to_arrays(), report.attrs())
    assert analysis.find_results(path) == ["analysis/deep_down", "elsewhere/clusters"]
    assert analysis.find_results(path, "StateClusters") == ["elsewhere/clusters"]
    back = analysis.load_result(path, "elsewhere/clusters")
    np.testing.assert_array_equal(back.sizes, report.sizes)
    with pytest.raises(ValueError, match="unknown analysis result type"):
        analysis.find_results(path, "Nope")


def test_plot_run_draws_a_users_file(tmp_path, rng):
    from spinsa import plotting

    m = _makers(rng)
    path = _user_file(
        tmp_path, rng, mine=m["AttractorReport"](), t1=m["OverlapTrace"](),
        t2=m["OverlapTrace"](), p1=m["PatchVarianceHistograms"](),
        p2=m["PatchVarianceHistograms"](),  # two of a kind: ambiguous, left out
    )  # fmt: skip
    written = plotting.plot_run(path, tmp_path / "figs")
    assert sorted(p.name for p in written) == ["attractors.png", "overlaps.png"]


def test_plot_run_draws_only_the_results_a_users_file_has(tmp_path, rng):
    from spinsa import plotting

    m = _makers(rng)
    # saved where spinsa analyze keeps other results: /analysis/hebbian holds no ErrorCurves
    path = _user_file(tmp_path, rng, hebbian=m["HebbianComparison"](), lifetimes=m["Lifetimes"]())
    written = plotting.plot_run(path, tmp_path / "figs")  # a ValueError before (hebbian_errors)
    assert [p.name for p in written] == ["hebbian.png"]


def test_plot_run_walks_the_file_once(tmp_path, rng, monkeypatch):
    """The table of contents is read once and handed to every figure (each figure and each
    companion looked the file through again before: 19 walks for six figures)."""
    import h5py

    from spinsa import plotting

    m = _makers(rng)
    saved = {  # where spinsa analyze writes them, with the companions beside them
        "attractors/report": "AttractorReport", "attractors/images": "DecodedImages",
        "hebbian/comparison": "HebbianComparison", "hebbian/maps": "StrengthMaps",
        "overlaps/test": "OverlapTrace", "overlaps/train": "OverlapTrace",
        "overlaps/mean": "OverlapTrace", "lifetimes/table_error": "LifetimeTable",
        "lifetimes/table_overlap": "LifetimeTable", "patches/histograms": "PatchVarianceHistograms",
    }  # fmt: skip
    path = _user_file(tmp_path, rng, **{name: m[kind]() for name, kind in saved.items()})
    walks = []
    visititems = h5py.Group.visititems
    count = lambda g, f: walks.append(g.name) or visititems(g, f)  # noqa: E731
    monkeypatch.setattr(h5py.Group, "visititems", count)
    written = plotting.plot_run(path, tmp_path / "figs")
    assert sorted(p.name for p in written) == [
        "attractors.png", "hebbian.png", "lifetimes.png", "overlaps.png", "patches.png"
    ]  # fmt: skip
    assert walks == ["/"]


def test_expressions_of_symbols_name_dimensions_too(rng):
    curves = _makers(rng)["ErrorCurves"]().to_xarray()
    assert curves["errors"].dims == ("M", "T+1", "P")
    assert list(curves["M"].values) == ["fitted", "hebbian"]
    np.testing.assert_array_equal(curves["times"].values, np.arange(6))
    assert curves["mean_all"].sel(M="hebbian").shape == (6,)
