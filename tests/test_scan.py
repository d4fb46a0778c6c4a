"""Scan files, points, the scan directory, serial execution, collect and plan.

The Dask LocalCluster tests (parallel equals serial, a killed worker, a killed client) are
in test_scan_dask.py.
"""

import dataclasses
import json
import os
import sys
import textwrap

import numpy as np
import pytest
from damage import flip_byte
from tiny_configs import TINY

import spinsa
from spinsa import experiments, io
from spinsa._config import config_from_dict, flatten
from spinsa.scan import (
    Axis,
    MissingDependencyError,
    PointKind,
    ScanDir,
    ScanMismatchError,
    ScanSpec,
    axis_values,
    collect,
    load_scan,
    open_collected,
    phase_diagram,
    point_key,
    point_kind,
    run_scan,
)
from spinsa.scan.kinds import SyntheticConfig, set_dotted, synthetic_summary
from spinsa.scan.run import run_point

SCAN = """
[scan]
name = "demo"
point = "synthetic"
retries = 1

[patterns]
n_tokens = 8
d = 3

[dynamics]
steps = 6

[axes]
"dynamics.lam" = [1.0, 4.0]
patterns.n_patterns = {start = 1, stop = 3, num = 2}
seed = {range = 2}
"""


def write(tmp_path, text, name="scan.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def scan_file(tmp_path):
    return write(tmp_path, SCAN)


def summaries(out):
    """key -> summary arrays of every point file of a scan directory."""
    return {p.stem: io.read_group(p, "summary")[0] for p in sorted(out.glob("points/*.h5"))}


# --------------------------------------------------------------------------- axes


def test_axis_values_lists_ranges_and_spacings():
    assert axis_values([1, 2.5, "a"], "x") == (1, 2.5, "a")
    assert axis_values({"values": [3, 1]}, "x") == (3, 1)
    assert axis_values({"range": 3}, "seed") == (0, 1, 2)
    assert axis_values({"range": [2, 8, 3]}, "seed") == (2, 5)
    lin = axis_values({"start": 10, "stop": 50, "num": 5}, "n")
    assert lin == (10, 20, 30, 40, 50) and all(type(v) is int for v in lin)
    np.testing.assert_allclose(
        axis_values({"start": 0.1, "stop": 10.0, "num": 5, "log": True}, "lam"),
        np.geomspace(0.1, 10.0, 5),
        rtol=1e-15,
    )
    assert axis_values({"start": 0.1, "stop": 10.0, "num": 5, "log": True}, "lam")[-1] == 10.0
    assert axis_values({"start": 16, "stop": 256, "num": 5, "log": True, "int": True}, "N") == (
        16,
        32,
        64,
        128,
        256,
    )
    np.testing.assert_allclose(
        axis_values({"start": 0.0, "stop": 1.0, "num": 3}, "g"), [0.0, 0.5, 1.0]
    )


@pytest.mark.parametrize(
    "spec, match",
    [
        ([], "no values"),
        ({"values": []}, "no values"),
        ({"range": 0}, "no values"),
        ([1, 2, 1], "repeats the value 1"),
        ({"start": 1, "stop": 2}, "needs"),
        ({"start": 0, "stop": 2, "num": 3, "log": True}, "start > 0"),
        ({"start": 1, "stop": 2, "num": 3, "step": 1}, "unknown key"),
        ({"start": 1, "stop": 3, "num": 9, "int": True}, "repeated values"),
        ({"range": [1, 5, 0]}, "step must not be 0"),
        ("1, 2", "expected a list"),
    ],
)
def test_axis_values_refuses_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        axis_values(spec, "x")


# --------------------------------------------------------------------------- scan files


def test_load_scan_dims_points_and_overrides(scan_file):
    spec = load_scan(scan_file)
    assert spec.name == "demo" and spec.point == "synthetic" and spec.retries == 1
    assert spec.dims == ("dynamics.lam", "patterns.n_patterns", "seed")
    assert spec.shape == (2, 2, 2)
    assert spec.base == {"patterns": {"n_tokens": 8, "d": 3}, "dynamics": {"steps": 6}}
    points = spec.points()
    assert [p.index for p in points] == list(np.ndindex(2, 2, 2))  # C order
    p = points[5]  # (1, 0, 1)
    assert p.coords == {"dynamics.lam": 4.0, "patterns.n_patterns": 1, "seed": 1}
    assert p.config["dynamics"]["lam"] == 4.0 and p.config["seed"] == 1
    assert p.config["patterns"] == {"n_patterns": 1, "n_tokens": 8, "d": 3, "correlation": 0.0}
    assert p.config["dynamics"]["steps"] == 6  # base kept, defaults filled in
    assert p.key == point_key("synthetic", p.config)
    assert len({q.key for q in points}) == 8


def test_quoted_and_unquoted_dotted_keys_are_the_same_scan(tmp_path, scan_file):
    other = write(tmp_path, SCAN.replace('"dynamics.lam"', "dynamics.lam"), "other.toml")
    assert load_scan(other).scan_hash == load_scan(scan_file).scan_hash


def test_point_key_follows_every_parameter(scan_file, tmp_path):
    keys = {p.key for p in load_scan(scan_file).points()}
    changed = write(tmp_path, SCAN.replace("steps = 6", "steps = 7"), "changed.toml")
    assert keys.isdisjoint({p.key for p in load_scan(changed).points()})
    assert point_key("a", {"x": 1}) != point_key("b", {"x": 1})
    assert point_key("a", {"x": 1, "y": 2}) == point_key("a", {"y": 2, "x": 1})


def test_zipped_axes_with_a_label(tmp_path):
    path = write(
        tmp_path,
        """
        [scan]
        point = "synthetic"
        [axes]
        seed = [0, 1, 2]
        [zip.alpha]
        alpha = [0.25, 0.5]
        "patterns.n_patterns" = [2, 4]
        "dynamics.steps" = [3, 3]
        """,
    )
    spec = load_scan(path)
    assert spec.dims == ("seed", "alpha") and spec.shape == (3, 2)
    zipped = spec.axes[1]
    assert zipped.zipped and zipped.coord == (0.25, 0.5)
    assert zipped.keys == ("patterns.n_patterns", "dynamics.steps")
    points = spec.points()
    assert [p.config["patterns"]["n_patterns"] for p in points[:2]] == [2, 4]
    assert points[1].coords == {"seed": 0, "alpha": 0.5}


def test_base_file_is_merged_under_the_scan(tmp_path):
    write(tmp_path, "[patterns]\nn_tokens = 5\nd = 2\n[dynamics]\nlam = 3.0\n", "base.toml")
    path = write(
        tmp_path,
        """
        [scan]
        point = "synthetic"
        base = "base.toml"
        [patterns]
        d = 6
        [axes]
        seed = [0, 1]
        """,
    )
    spec = load_scan(path)
    assert spec.base == {"patterns": {"n_tokens": 5, "d": 6}, "dynamics": {"lam": 3.0}}


def test_unknown_axis_name_lists_the_valid_ones(tmp_path):
    path = write(tmp_path, SCAN.replace('"dynamics.lam"', '"dynamics.lamda"'))
    with pytest.raises(ValueError, match="unknown axis name 'dynamics.lamda'") as err:
        load_scan(path).points()
    message = str(err.value)
    assert "Did you mean 'dynamics.lam'" in message
    for valid in ("dynamics.lam", "dynamics.gamma", "patterns.n_tokens", "corruption.noise"):
        assert valid in message


def test_axis_on_a_section_says_so(tmp_path):
    path = write(tmp_path, '[scan]\npoint = "synthetic"\n[axes]\n"patterns" = [1, 2]\n')
    with pytest.raises(ValueError, match="is a section"):
        load_scan(path).points()


@pytest.mark.parametrize(
    "text, match",
    [
        ('[scan]\npoint = "synthetic"\n[axes]\nseed = []\n', "no values"),
        ('[scan]\npoint = "synthetic"\n', "no axes"),
        (
            '[scan]\npoint = "synthetic"\n[zip.a]\nseed = [0, 1]\n"dynamics.lam" = [1.0]\n',
            "equal lengths",
        ),
        (
            '[scan]\npoint = "synthetic"\n[axes]\nseed = [0]\n[zip.a]\nseed = [1, 2]\n',
            "set by two axes",
        ),
        ('[scan]\npoint = "synthetic"\nretry = 3\n[axes]\nseed = [0]\n', "unknown key"),
        (  # a base key written below [scan]: TOML puts it in [scan], and the error says so
            '[scan]\npoint = "equilibrium"\nn_tokens = 32\n[axes]\nseed = [0]\n',
            r"unknown key 'n_tokens' in \[scan\].*goes before the first table",
        ),
        ('[scan]\npoint = "nope"\n[axes]\nseed = [0]\n', "unknown point kind 'nope'"),
        (
            '[scan]\npoint = "synthetic"\n[axes]\n"dynamics.lam" = [1.0, -1.0]\n',
            "dynamics.lam must be a finite number > 0",
        ),
        (  # the notebook's dynamics ignores gamma: an axis along which nothing changes
            '[dynamics]\npreset = "damico2024"\n[axes]\n"dynamics.gamma" = [0.0, 1.0]\n',
            "changes no point's config",
        ),
        ('[scan]\n[axes]\n"fit.lam" = [1.0]\n[collect]\npanel = ["fit.lam"]\n', "panel"),
    ],
)
def test_bad_scan_files(tmp_path, text, match):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=match):
        load_scan(path).points()


def test_spec_round_trips_through_a_dict(scan_file):
    spec = load_scan(scan_file)
    again = ScanSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.scan_hash == spec.scan_hash


# --------------------------------------------------------------------------- the synthetic point


def test_synthetic_point_against_plain_numpy():
    cfg = config_from_dict(
        SyntheticConfig,
        {"patterns": {"n_patterns": 3, "n_tokens": 10, "d": 4}, "dynamics": {"steps": 5}},
    )
    s = synthetic_summary(cfg)
    # the same computation written out
    rng = np.random.default_rng(cfg.seed)
    xi = spinsa.datasets.correlated_patterns(3, 10, 4, 0.0, seed=rng)
    x0 = xi + 0.3 * rng.standard_normal(xi.shape).astype(np.float32)
    x0 = x0 / np.linalg.norm(x0, axis=-1, keepdims=True)
    traj = spinsa.run(x0, spinsa.hebbian_couplings(xi), 1.0, 5)
    m = np.einsum("tpna,pna->tp", traj.states.astype(np.float64), xi) / 10
    np.testing.assert_allclose(s["overlap"], m.mean(1), rtol=1e-6)
    np.testing.assert_array_equal(s["t"], np.arange(6))
    # unit spins: |x - xi|^2 / 2 = 1 - x.xi, so the error is 1 - m
    np.testing.assert_allclose(s["error"], 1 - s["overlap"], atol=1e-6)
    assert s["best_error"] == s["error"][1:].min()
    assert s["best_t"] == 1 + np.argmin(s["error"][1:])
    np.testing.assert_allclose(s["energy"], traj.energies.mean(1))
    assert s["final_overlap"] == pytest.approx(m[-1].mean())


def test_one_hebbian_pattern_is_a_fixed_point():
    cfg = config_from_dict(
        SyntheticConfig,
        {
            "patterns": {"n_patterns": 1, "n_tokens": 12, "d": 3},
            "corruption": {"noise": 0.0},
            "dynamics": {"steps": 4, "lam": 2.0},
        },
    )
    s = synthetic_summary(cfg)
    np.testing.assert_allclose(s["overlap"], 1.0, atol=1e-5)
    assert s["n_attractors"] == 1
    assert s["lifetime"] == 4  # above the threshold from t = 0 to the end
    assert s["mean_overlap"] == pytest.approx(1.0, abs=1e-5)  # the mean of one pattern is it


def test_synthetic_config_refuses_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown key 'lamda' in \[dynamics\]; known keys: lam"):
        point_kind("synthetic").configure({"dynamics": {"lamda": 1.0}}, {})


# --------------------------------------------------------------------------- serial runs


def test_serial_run_writes_one_file_per_point_and_resumes(scan_file, tmp_path):
    out = tmp_path / "out"
    report = run_scan(scan_file, out, cluster="serial", progress=False)
    assert (report.n_points, report.n_run, report.n_skipped, report.n_failed) == (8, 8, 0, 0)
    assert report.complete
    spec = load_scan(scan_file)
    points = spec.points()
    for p in points:
        f = io.read(out / "points" / f"{p.key}.h5")
        assert f.kind == "scan-point" and f.config == p.config
    record = json.loads((out / "scan.json").read_text())
    assert record["scan_hash"] == spec.scan_hash and record["keys"] == [p.key for p in points]
    assert ScanDir(out).read() == (spec, [p.key for p in points])
    again = run_scan(scan_file, out, cluster="serial", progress=False)
    assert (again.n_run, again.n_skipped) == (0, 8)


def test_a_record_of_an_older_spinsa_is_updated_by_a_rerun(scan_file, tmp_path):
    out = tmp_path / "out"
    run_scan(scan_file, out, cluster="serial", progress=False)
    record = json.loads((out / "scan.json").read_text())
    del record["keys"], record["sha256"]  # as spinsa wrote it before it listed the points
    (out / "scan.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="older spinsa; run the scan again"):
        ScanDir(out).read()
    again = run_scan(scan_file, out, cluster="serial", progress=False)
    assert (again.n_run, again.n_skipped) == (0, 8)
    assert ScanDir(out).read()[1] == [p.key for p in load_scan(scan_file).points()]


def test_a_changed_scan_record_is_refused_with_the_way_out(scan_file, tmp_path):
    out = tmp_path / "out"
    run_scan(scan_file, out, cluster="serial", progress=False)
    text = (out / "scan.json").read_text()
    (out / "scan.json").write_text(text.replace('"steps": 6', '"steps": 7'))  # one digit
    for call in (lambda: ScanDir(out).read(), lambda: run_scan(scan_file, out, progress=False)):
        with pytest.raises(io.SpinsaFileError, match="checksum fails.*--force"):
            call()
    (out / "scan.json").unlink()
    again = run_scan(scan_file, out, cluster="serial", force=True, progress=False)
    assert (again.n_run, again.n_skipped) == (0, 8)


def _value_point(config, out_path):
    """A point of the tests' own: a number and a short curve drawn with its seed."""
    rng = np.random.default_rng(config["seed"])
    summary = {"value": rng.standard_normal(), "curve": rng.standard_normal(3)}
    io.write_file(out_path, {"summary": summary}, kind="scan-point", config=config)


class _Flaky:
    """A point function that raises at seed 1, counting its calls per seed."""

    def __init__(self):
        self.calls = {}

    def __call__(self, config, out_path):
        self.calls[config["seed"]] = self.calls.get(config["seed"], 0) + 1
        if config["seed"] == 1:
            raise RuntimeError(f"boom at seed {config['seed']}")
        _value_point(config, out_path)


def seed_spec(n, **base):
    seeds = tuple(range(n))
    return ScanSpec("t", "flaky", dict(base), (Axis("seed", ("seed",), (seeds,), seeds),))


def test_a_point_that_raises_is_retried_recorded_and_the_scan_goes_on(tmp_path):
    out, flaky = tmp_path / "out", _Flaky()
    kind = PointKind("flaky", flaky, set_dotted)
    report = run_scan(seed_spec(4, seed=0), out, cluster="serial", kind=kind, progress=False)
    assert (report.n_run, report.n_failed) == (3, 1)
    assert flaky.calls == {0: 1, 1: 3, 2: 1, 3: 1}  # 1 + retries=2 at seed 1
    bad = report.failed[0]
    error = (out / "points" / f"{bad}.error").read_text()
    assert error.startswith("RuntimeError: boom at seed 1\n")
    assert "Traceback" in error and 'in __call__\n    raise RuntimeError(f"boom' in error
    # the next run re-does the failed point only
    again = run_scan(seed_spec(4, seed=0), out, cluster="serial", kind=kind, progress=False)
    assert (again.n_skipped, again.n_run, again.n_failed) == (3, 0, 1)
    assert flaky.calls[1] == 6 and flaky.calls[0] == 1
    # once the cause is fixed, the point runs and its error record goes
    fixed = PointKind("flaky", _value_point, set_dotted)
    third = run_scan(seed_spec(4, seed=0), out, cluster="serial", kind=fixed, progress=False)
    assert (third.n_skipped, third.n_run, third.n_failed) == (3, 1, 0)
    assert not list((out / "points").glob("*.error"))


class _Interrupt:
    """A point function that raises KeyboardInterrupt (a client's Ctrl-C) at call `at`."""

    def __init__(self, at):
        self.calls, self.at = 0, at

    def __call__(self, config, out_path):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        point_kind("synthetic").run(config, out_path)


def test_interrupted_serial_scan_resumes_with_equal_results(scan_file, tmp_path):
    xr = pytest.importorskip("xarray")
    spec = load_scan(scan_file)
    stopper = dataclasses.replace(point_kind("synthetic"), run=_Interrupt(at=4))
    with pytest.raises(KeyboardInterrupt):
        run_scan(spec, tmp_path / "a", cluster="serial", kind=stopper, progress=False)
    assert len(list((tmp_path / "a" / "points").glob("*.h5"))) == 3
    resumed = run_scan(spec, tmp_path / "a", cluster="serial", progress=False)
    assert (resumed.n_skipped, resumed.n_run) == (3, 5)
    run_scan(spec, tmp_path / "b", cluster="serial", progress=False)
    a, b = summaries(tmp_path / "a"), summaries(tmp_path / "b")
    assert a.keys() == b.keys()
    for key in a:
        for name in a[key]:
            np.testing.assert_array_equal(a[key][name], b[key][name])
    xr.testing.assert_identical(collect(tmp_path / "a", None), collect(tmp_path / "b", None))


def test_run_point_skips_a_finished_file_and_refuses_a_silent_function(tmp_path):
    config = {"seed": 0}
    assert run_point(_value_point, config, tmp_path, "p", 1) >= 0  # the seconds it ran
    assert run_point(_value_point, config, tmp_path, "p", 1) is None  # complete: not run
    with pytest.raises(RuntimeError, match="returned without writing"):
        run_point(lambda c, p: None, config, tmp_path, "q", 1)
    (tmp_path / "r.h5").write_bytes((tmp_path / "p.h5").read_bytes()[:200])  # torn: not done
    assert run_point(_value_point, config, tmp_path, "r", 1) >= 0
    assert (tmp_path / "r.h5.corrupt").exists()
    io.check_file(tmp_path / "r.h5")


def test_run_point_sets_and_restores_the_thread_count(tmp_path):
    import numba

    seen = {}

    def record(config, out_path):
        seen.update(numba=numba.get_num_threads(), omp=os.environ["OMP_NUM_THREADS"])
        _value_point(config, out_path)

    before, omp = numba.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    run_point(record, {"seed": 0}, tmp_path, "p", 1)
    assert seen == {"numba": 1, "omp": "1"}
    assert numba.get_num_threads() == before and os.environ.get("OMP_NUM_THREADS") == omp


def test_corrupt_point_file_and_leftover_temporaries_are_run_again(scan_file, tmp_path):
    out = tmp_path / "out"
    run_scan(scan_file, out, cluster="serial", progress=False)
    victim = sorted((out / "points").glob("*.h5"))[0]
    victim.write_bytes(victim.read_bytes()[:100])  # a torn copy
    leftover = out / "points" / f".{victim.name}.tmp-123-abcd"  # a writer killed mid-write
    leftover.write_bytes(b"half a file")
    report = run_scan(scan_file, out, cluster="serial", progress=False)
    assert (report.n_skipped, report.n_run) == (7, 1)
    assert victim.with_name(victim.name + ".corrupt").exists() and not leftover.exists()
    io.check_file(victim)


def test_a_point_whose_data_changed_is_reported_and_run_again(scan_file, tmp_path, capsys):
    xr = pytest.importorskip("xarray")
    out = tmp_path / "out"
    run_scan(scan_file, out, cluster="serial", progress=False)
    before = collect(out, None)
    victim = sorted((out / "points").glob("*.h5"))[0]
    flip_byte(victim, "summary/mean_overlap")  # a bit flipped on disk: the file still opens
    with pytest.warns(UserWarning, match="checksum failed"):
        damaged = collect(out, None)
    at = damaged["key"] == victim.stem
    assert damaged["status"].where(at, drop=True).item() == "corrupt"
    assert np.isnan(damaged["mean_overlap"].where(at, drop=True)).all()
    report = run_scan(scan_file, out, cluster="serial", progress=False, log=print)
    assert (report.n_skipped, report.n_run) == (7, 1)
    assert "1 file(s) torn or failing a checksum" in capsys.readouterr().out
    assert victim.with_name(victim.name + ".corrupt").exists()
    xr.testing.assert_identical(collect(out, None), before)
    collect(out)
    flip_byte(out / "collected.nc", "mean_overlap")
    with pytest.raises(io.SpinsaFileError, match="scan collect"):
        open_collected(out)


def test_directory_of_a_different_scan_is_refused_unless_forced(scan_file, tmp_path, capsys):
    from spinsa.cli import main

    out = tmp_path / "out"
    run_scan(scan_file, out, cluster="serial", progress=False)
    other = write(tmp_path, SCAN.replace("[1.0, 4.0]", "[1.0, 2.0]"), "other.toml")
    with pytest.raises(ScanMismatchError, match="different scan file.*--force"):
        run_scan(other, out, cluster="serial", progress=False)
    assert main(["scan", "plan", str(other), "--out", str(out)]) == 2
    assert "different scan file" in capsys.readouterr().err
    report = run_scan(other, out, cluster="serial", progress=False, force=True)
    assert (report.n_skipped, report.n_run) == (4, 4)  # the lam = 1.0 half is shared
    assert json.loads((out / "scan.json").read_text())["scan_hash"] == load_scan(other).scan_hash


def test_non_scan_directory_is_refused(scan_file, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "thesis.tex").write_text("...")
    with pytest.raises(FileExistsError, match="holds no scan"):
        run_scan(scan_file, tmp_path / "busy", cluster="serial", progress=False)


def test_a_function_of_ones_own_as_point_kind(tmp_path):
    text = """
        seed = 0
        [scan]
        point = "spinsa.scan.kinds:run_synthetic_point"
        [dynamics]
        steps = 2
        [axes]
        seed = [0, 1]
        """
    path = write(tmp_path, text)
    assert [p.config for p in load_scan(path).points()] == [
        {"seed": s, "dynamics": {"steps": 2}} for s in (0, 1)
    ]  # the base as written: the function fills in its own defaults
    report = run_scan(path, tmp_path / "out", cluster="serial", progress=False)
    assert report.n_run == 2
    bad = write(tmp_path, text.replace("seed = [0, 1]", '"dynamics.lam" = [1.0]'), "bad.toml")
    with pytest.raises(ValueError, match="unknown axis name 'dynamics.lam'.*dynamics.steps, seed"):
        load_scan(bad).points()


# --------------------------------------------------------------------------- missing deps


@pytest.mark.parametrize("module", ["dask.distributed", "distributed"])
def test_without_dask_the_error_says_what_to_install(scan_file, tmp_path, monkeypatch, module):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError, match=r'pip install "spinsa\[cluster\]"'):
        run_scan(scan_file, tmp_path / "out", progress=False)
    with pytest.raises(MissingDependencyError, match=r'pip install "spinsa\[cluster\]"'):
        run_scan(scan_file, tmp_path / "out", scheduler="tcp://127.0.0.1:1", progress=False)
    assert not (tmp_path / "out").exists()  # refused before touching the disk
    run_scan(scan_file, tmp_path / "out", cluster="serial", progress=False)  # no Dask needed


def test_jobqueue_asked_for_without_it(scan_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    with pytest.raises(MissingDependencyError, match=r"--cluster slurm needs dask_jobqueue.*pip"):
        run_scan(scan_file, tmp_path / "out", cluster="slurm", progress=False)


def test_without_xarray_collect_says_what_to_install(scan_file, tmp_path, monkeypatch):
    run_scan(scan_file, tmp_path / "out", cluster="serial", progress=False)
    monkeypatch.setitem(sys.modules, "xarray", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "spinsa\[cluster\]"'):
        collect(tmp_path / "out")


def test_cli_reports_missing_dask_in_one_line(scan_file, tmp_path, monkeypatch, capsys):
    from spinsa.cli import main

    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    assert main(["scan", "run", str(scan_file), "--out", str(tmp_path / "o")]) == 2
    assert 'pip install "spinsa[cluster]"' in capsys.readouterr().err


# --------------------------------------------------------------------------- collect


def test_collect_puts_every_point_at_its_coordinates(scan_file, tmp_path):
    xr = pytest.importorskip("xarray")
    out = tmp_path / "out"
    run_scan(scan_file, out, cluster="serial", progress=False)
    ds = collect(out)
    spec = load_scan(scan_file)
    assert ds.sizes == {"dynamics.lam": 2, "patterns.n_patterns": 2, "seed": 2, "t": 7}
    np.testing.assert_array_equal(ds["patterns.n_patterns"], [1, 3])
    np.testing.assert_array_equal(ds["t"], np.arange(7))
    for p in spec.points():
        summary = io.read_group(out / "points" / f"{p.key}.h5", "summary")[0]
        at = ds.isel(dict(zip(spec.dims, p.index)))
        assert at["key"].item() == p.key and at["status"].item() == "done"
        for name in ("best_error", "best_t", "lifetime", "n_attractors", "mean_overlap"):
            assert at[name].item() == summary[name]
        np.testing.assert_array_equal(at["error"].values, summary["error"])
    assert ds["n_attractors"].dtype.kind == "i"  # complete: integers stay integers
    assert ds.attrs["n_done"] == 8 and ds.attrs["scan_hash"] == spec.scan_hash
    saved = xr.open_dataset(out / "collected.nc", engine="h5netcdf").load()
    xr.testing.assert_identical(saved, ds)


def test_collect_marks_missing_and_failed_points(tmp_path):
    pytest.importorskip("xarray")
    out = tmp_path / "out"
    kind = PointKind("flaky", _Flaky(), set_dotted)
    run_scan(seed_spec(4, seed=0), out, cluster="serial", kind=kind, progress=False)
    (out / "points" / f"{point_key('flaky', {'seed': 3})}.h5").unlink()
    ds = collect(out, None)
    assert ds["status"].values.tolist() == ["done", "failed", "done", "missing"]
    assert np.isnan(ds["value"].values[[1, 3]]).all()
    assert np.isfinite(ds["value"].values[[0, 2]]).all()
    assert ds["curve"].dims == ("seed", "curve_index") and ds.attrs["n_done"] == 2


def test_curves_of_different_lengths_are_padded_with_nan(tmp_path):
    pytest.importorskip("xarray")
    path = write(
        tmp_path,
        """
        [scan]
        point = "synthetic"
        [patterns]
        n_tokens = 6
        [axes]
        "dynamics.steps" = [2, 5]
        """,
    )
    run_scan(path, tmp_path / "out", cluster="serial", progress=False)
    ds = collect(tmp_path / "out", None)
    np.testing.assert_array_equal(ds["t"], np.arange(6))
    assert np.isnan(ds["error"].sel({"dynamics.steps": 2}).values[3:]).all()
    assert np.isfinite(ds["error"].sel({"dynamics.steps": 5}).values).all()


def test_phase_diagram_shows_the_seed_average(scan_file, tmp_path):
    pytest.importorskip("xarray")
    run_scan(scan_file, tmp_path / "out", cluster="serial", progress=False)
    ds = collect(tmp_path / "out", None)
    ax = phase_diagram(ds, "best_error", "dynamics.lam", "patterns.n_patterns")
    mesh = ax.collections[0]
    expected = ds["best_error"].mean("seed").transpose("patterns.n_patterns", "dynamics.lam")
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(2, 2), expected.values)
    assert "mean over seed" in ax.get_title()
    fixed = phase_diagram(
        ds, "error", "dynamics.lam", "seed", fixed={"t": 3, "patterns.n_patterns": 3}
    )
    expected = ds["error"].sel({"t": 3, "patterns.n_patterns": 3}).transpose("seed", "dynamics.lam")
    np.testing.assert_allclose(
        np.asarray(fixed.collections[0].get_array()).reshape(2, 2), expected.values
    )
    with pytest.raises(ValueError, match="not a numeric variable"):
        phase_diagram(ds, "nope")
    line = phase_diagram(ds, "best_error", fixed={"dynamics.lam": 3.9, "seed": 1})  # nearest
    expected = ds["best_error"].sel({"dynamics.lam": 4.0, "seed": 1})
    np.testing.assert_allclose(line.lines[0].get_ydata(), expected.values)


def test_cli_plan_run_collect(scan_file, tmp_path, capsys):
    from spinsa.cli import main

    out = tmp_path / "out"
    assert main(["scan", "plan", str(scan_file)]) == 0
    text = capsys.readouterr().out
    assert "8 points = dynamics.lam (2) × patterns.n_patterns (2) × seed (2)" in text
    assert all(p.key in text for p in load_scan(scan_file).points())
    args = ["scan", "run", str(scan_file), "--out", str(out), "--cluster", "serial"]
    assert main([*args, "--no-progress"]) == 0
    assert "8/8 points done" in capsys.readouterr().out
    assert main(["scan", "plan", str(scan_file), "--out", str(out)]) == 0
    assert "status: 8 done, 0 failed, 0 pending" in capsys.readouterr().out
    figures = tmp_path / "figs"
    main(["scan", "collect", str(out), "--figures", str(figures), "--fix", "seed=0"])
    text = capsys.readouterr().out
    assert "8/8 points collected" in text
    assert sorted(p.name for p in figures.iterdir()) == sorted(
        f"{v}.png" for v in ("best_error", "best_t", "lifetime", "n_attractors", "mean_overlap")
    )


def test_experiment_kind_takes_its_axis_names_from_experiment_config():
    base = point_kind("experiment").configure({}, {})
    valid = flatten(experiments.ExperimentConfig.from_dict({}).to_dict())
    assert flatten(base).keys() == valid.keys()


EXPERIMENT = """
[scan]
name = "experiment"

[data]
dataset = "synthetic"
per_class = 1
n_test = 6
image_size = 8

[fit]
backend = "lbfgs"
max_iter = 5

[dynamics]
steps = 4

[tasks]
example_times = [0, 4]
n_examples = 1

[axes]
"dynamics.lam_eval" = [0.5, 2.0]
"""


def test_experiment_axes_go_through_with_overrides(tmp_path):
    path = write(tmp_path, '[scan]\n[axes]\n"fit.lam" = [1.0, 5.0]\n')
    points = load_scan(path).points()
    default = experiments.ExperimentConfig()
    for p, lam in zip(points, (1.0, 5.0), strict=True):
        expected = default.with_overrides({"fit.lam": lam}).to_dict()
        assert p.config == expected  # the base's fit backend is kept
        assert p.config["fit"]["backend"] == default.fit.backend


STUDY = (
    EXPERIMENT
    + """
"fit.norm" = [3.0]
"dynamics.gamma" = [0.0, 1.0]
"dynamics.preset" = ["design", "damico2024"]
"fit.lam" = [1.0, 5.0]

[collect]
x = "fit.norm*dynamics.lam_eval"
y = "dynamics.gamma"
panels = ["dynamics.preset"]
mark = { "dynamics.lam_eval" = 0.5, "dynamics.gamma" = 1.0 }
variables = ["masked.ref_gain_z", "denoise.lifetime"]
best = ["masked.ref_gain_z"]
"""
)


@pytest.mark.slow  # 10-20 s: the experiment pipeline's kernels load (or compile) first
def test_a_tiny_study_fits_once_per_fit_config_and_draws_its_phase_diagrams(tmp_path, monkeypatch):
    pytest.importorskip("xarray")
    fits = []
    train = experiments.train

    def counting_train(config, out_path, **kwargs):
        fits.append(config.fit.lam)
        return train(config, out_path, **kwargs)

    monkeypatch.setattr(experiments, "train", counting_train)
    path = write(tmp_path, STUDY)
    out = tmp_path / "out"
    report = run_scan(path, out, cluster="serial", progress=False)
    # 2 fits (fit.lam) × (2 lam_eval × 2 gamma × design + 2 lam_eval × damico, gamma ignored)
    assert sorted(fits) == [1.0, 5.0] and report.n_fits == 2
    assert report.complete and report.n_points == 16
    assert len(list((out / "points").glob("*.h5"))) == 12  # damico's two gammas: one file
    fit_files = {f.name for f in (out / "fits").glob("*.h5")}
    assert len(fit_files) == 2
    for p in load_scan(path).points():
        f = out / "points" / f"{p.key}.h5"
        assert io.read(f).attrs["fit_file"] in fit_files
        assert "J" not in io.read(f).datasets  # the couplings stay in the fit file
    again = run_scan(path, out, cluster="serial", progress=False)
    assert again.n_fits == 0 and again.n_run == 0 and len(fits) == 2

    ds = collect(out, None)
    dims = {"fit.norm": 1, "dynamics.gamma": 2, "dynamics.preset": 2, "fit.lam": 2}
    assert dict(ds.sizes) == {"dynamics.lam_eval": 2, **dims, "t": 5}
    assert ds["dynamics.preset"].values.tolist() == ["design", "damico2024"]
    damico = ds.sel({"dynamics.preset": "damico2024"})
    np.testing.assert_array_equal(  # one file for both
        damico["masked.error"].isel({"dynamics.gamma": 0}),
        damico["masked.error"].isel({"dynamics.gamma": 1}),
    )
    for name in ("ref_gain_z", "lifetime", "best_t", "final_nearest_overlap", "cycle_fraction"):
        assert f"masked.{name}" in ds and f"denoise.{name}" in ds
    assert np.isfinite(ds["hebbian_cosine"]).all()
    at = ds.isel({"dynamics.lam_eval": 0, "fit.norm": 0, "dynamics.gamma": 0,
                  "dynamics.preset": 0, "fit.lam": 1})  # fmt: skip
    f = out / "points" / f"{at['key'].item()}.h5"
    curve = io.read_array(f, "evaluation/masked/mean/all")
    np.testing.assert_array_equal(at["masked.error"].values, curve)
    assert at["masked.best_error"].item() == curve[1:].min()  # the masked input is not a prediction

    from spinsa.cli import main

    assert main(["scan", "collect", str(out)]) == 0
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert figures == ["curves.png", "denoise.lifetime.png", "masked.ref_gain_z.png"]
    assert main(["plot", str(out), "-o", str(tmp_path / "again")]) == 0
    assert len(list((tmp_path / "again").glob("*.png"))) == 3


def test_lifetime_and_gain_of_a_constructed_error_curve():
    """A curve that dips below the best reference by 5 standard errors from t = 3 to t = 6."""
    from spinsa.scan.kinds import _task_quantities

    T, P = 10, 100
    times = np.arange(T + 1)
    mean = np.full(T + 1, 1.0)
    mean[3:7] = [0.6, 0.5, 0.55, 0.6]  # the reference is 0.8 ± 0.01, the curve ± 0.02
    sem = np.full(T + 1, 0.02)
    ref = np.full(P, 0.8)
    ref[::2] += 0.1
    ref[1::2] -= 0.1  # mean 0.8, standard error 0.1 / sqrt(P) * sqrt(P / (P - 1)) ≈ 0.01
    empty = np.zeros(0)
    arrays = {
        "times": times,
        "mean": {"all": mean, "masked": mean},
        "sem": {"all": sem, "masked": sem},
        "mean_image_corr_mean": np.zeros(T + 1),
        "mean_image_corr_sem": np.zeros(T + 1),
        "final_coherence": np.ones(P),
        "final_nearest_corr": np.full(P, 0.5),
        "final_period": np.r_[np.ones(P // 2), np.full(P // 4, 2), np.zeros(P // 4)].astype(int),
        "step_change": empty,
        "references": {"ref": {"all": ref, "masked": ref}},
    }
    q = _task_quantities("denoise", arrays)
    ref_sem = ref.std(ddof=1) / np.sqrt(P)
    assert q["best_t"] == 4 and q["best_error"] == 0.5
    assert q["ref_gain_z"] == pytest.approx(0.3 / np.hypot(0.02, ref_sem))
    assert q["transient_memory"] == 1
    # z(t) > 3 at t = 3..6: (0.8 - 0.6) / 0.0224 = 8.9; it fails again at t = 7
    assert (q["t_enter"], q["t_leave"], q["lifetime"]) == (3, 7, 4)
    assert q["lifetime_censored"] == 0
    assert (q["fixed_point_fraction"], q["cycle_fraction"]) == (0.5, 0.25)
    mean[7:] = 0.7  # still below the reference at T: censored, a lower bound
    q = _task_quantities("denoise", arrays)
    assert (q["t_enter"], q["lifetime"], q["lifetime_censored"]) == (3, 7, 1)
    mean[:] = 0.79  # within 3 standard errors everywhere: no memory, lifetime 0
    q = _task_quantities("denoise", arrays)
    assert q["transient_memory"] == 0 and q["lifetime"] == 0 and np.isnan(q["t_enter"])


def test_a_fit_file_of_another_config_is_refused(tmp_path):
    from spinsa.experiments.pipeline import evaluate_fit

    config = TINY
    experiments.train(config, tmp_path / "fit.h5")
    other = config.with_overrides({"fit.lam": 2.0, "dynamics.gamma": 0.5})
    with pytest.raises(ValueError, match="differs in fit.lam"):
        evaluate_fit(other, tmp_path / "fit.h5", tmp_path / "point.h5")
    assert not (tmp_path / "point.h5").exists()
    evaluate_fit(
        config.with_overrides({"dynamics.gamma": 0.5}), tmp_path / "fit.h5", tmp_path / "point.h5"
    )  # fmt: skip  (the dynamics is the point's own)
    assert io.read(tmp_path / "point.h5").config["dynamics"]["gamma"] == 0.5


def test_a_kind_with_half_a_fit_is_refused():
    with pytest.raises(ValueError, match="both fit_config and fit"):
        PointKind("x", print, set_dotted, fit_config=dict)


def test_scan_set_changes_the_base_and_refuses_a_bare_key(scan_file, tmp_path, capsys):
    from spinsa.cli import main

    assert main(["scan", "plan", str(scan_file), "--set", "corruption.noise=0.1"]) == 0
    assert main(["scan", "plan", str(scan_file), "--set", "corruption.noise"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
