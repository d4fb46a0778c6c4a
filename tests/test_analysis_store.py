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
from spinsa.analysis.attractors import AttractorReport


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
