"""Analysis results to and from /analysis/<name> in spinsa HDF5 files."""

import dataclasses

import numpy as np
import pytest

from spinsa import io
from spinsa.analysis import (
    cluster_states,
    coupling_spectrum,
    list_analyses,
    load_analysis,
    nearest_patterns,
    overlap_lifetimes,
    save_analysis,
)
from spinsa.analysis.attractors import AttractorReport, StateClusters
from spinsa.analysis.patches import PatchVariances


def same(a, b):
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        elif isinstance(x, float) and np.isnan(x):
            assert np.isnan(y)
        else:
            assert x == y, f.name


@pytest.fixture
def h5(tmp_path):
    path = tmp_path / "run.h5"
    io.write_file(path, {"x": np.zeros(3)}, kind="run")
    return path


def test_results_round_trip(h5, rng):
    x = rng.standard_normal((4, 5, 3))
    results = {
        "nearest": nearest_patterns(x, x),
        "lifetimes": overlap_lifetimes(rng.random((6, 4)), np.arange(6), 0.5),
        "spectrum": coupling_spectrum(rng.standard_normal((3, 3, 2, 2))),
        "clusters/final": cluster_states(x, 0.9),
        "attractors": AttractorReport(
            labels=np.array([0, -1]),
            period=np.array([1, 0]),
            convergence_time=np.array([3, -1]),
            final_step=np.array([0.0, 0.1]),
            states=np.ones((1, 5, 3)),
            attractor_period=np.array([1]),
            basin_size=np.array([1]),
            basin_fraction=np.array([0.5]),
            group_fractions=np.array([[1.0], [0.0]]),
            group_unconverged=np.array([0.0, 1.0]),
            group_names=("a", "b"),
            fraction_unconverged=0.5,
        ),
    }
    for name, r in results.items():
        save_analysis(h5, name, r, attrs={"source": "test"})
    for name, r in results.items():
        same(r, load_analysis(h5, name))
    assert list_analyses(h5) == sorted(results)
    _, attrs = io.read_group(h5, "analysis/lifetimes")
    assert attrs["criterion"] == "overlap" and attrs["source"] == "test"


def test_refuses_to_overwrite_and_bad_input(h5, rng):
    r = nearest_patterns(rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2)))
    save_analysis(h5, "n", r)
    with pytest.raises(ValueError, match="overwrite"):
        save_analysis(h5, "n", r)
    save_analysis(h5, "n", r, overwrite=True)
    with pytest.raises(ValueError, match="clashes"):
        save_analysis(h5, "m", r, attrs={"absolute": True})
    with pytest.raises(ValueError, match="result"):
        save_analysis(h5, "m", {"a": 1})
    with pytest.raises(KeyError):
        load_analysis(h5, "missing")


def test_a_file_written_by_an_earlier_version_still_loads(h5):
    # /analysis/<name> is a contract with files written years ago: one dataset per array
    # field, one attribute per other field, plus result_type. Written here by hand, the way
    # the first version of spinsa.analysis wrote an AttractorReport without optional arrays.
    arrays = {
        "labels": np.array([0, 0, -1]),
        "period": np.array([1, 1, 0]),
        "convergence_time": np.array([4, 2, -1]),
        "final_step": np.array([0.0, 0.0, 0.3]),
        "states": np.ones((1, 5, 3), dtype=np.float32),
        "attractor_period": np.array([1]),
        "basin_size": np.array([2]),
        "basin_fraction": np.array([2 / 3]),
        "group_fractions": np.array([[1.0], [0.5]]),
        "group_unconverged": np.array([0.0, 0.5]),
    }
    attrs = {
        "result_type": "AttractorReport",
        "group_names": ["clean", "random"],
        "fraction_unconverged": 1 / 3,
        "lam": 1.0,
        "gamma": 1.0,
        "norm": "sphere",
        "update": "sync",
        "steps": 50,
        "max_period": 2,
        "tol": 1e-5,
        "q_min": 0.99,
        "source": "fitted",
    }
    io.write_group(h5, "analysis/attractors", arrays, attrs)
    report = load_analysis(h5, "attractors")
    assert isinstance(report, AttractorReport) and report.overlap_mean is None
    assert report.group_names == ("clean", "random") and report.n_attractors == 1
    for name, value in arrays.items():
        np.testing.assert_array_equal(getattr(report, name), value)
    # written again, it has the same layout
    save_analysis(h5, "again", report, attrs={"source": "fitted"})
    arrays_again, attrs_again = io.read_group(h5, "analysis/again")
    assert sorted(arrays_again) == sorted(arrays)
    provenance = ("created", "spinsa_version")  # stamped by spinsa.io on every write
    added = {"until_converged": False}  # fields added since, at their defaults
    assert {k: v for k, v in attrs_again.items() if k not in provenance} == attrs | added


def test_shapes_that_disagree_are_refused():
    with pytest.raises(ValueError, match="token must have the shape"):
        PatchVariances(np.zeros(3), np.zeros(3, dtype=np.int64), np.zeros(2, dtype=np.int64))
    clusters = StateClusters(np.zeros(2, dtype=np.int64), np.zeros(1), np.ones(1), q_min=0.9)
    assert clusters.labels.flags.writeable is False
