"""The stage engine: one rule for "done" under every pipeline (spinsa.experiments.stages)."""

import h5py
import numpy as np
import pytest

from spinsa import io
from spinsa.experiments.stages import ConfigChangedError, Pipeline, stage_done, stage_state
from tests.damage import flip_byte


def _write(path, config, value=1.0):
    io.write_file(
        path, {"x": np.full(8, value)}, {}, kind="test-stage", config=config, overwrite=True
    )
    return path


def test_a_stage_is_done_when_its_file_verifies_and_holds_the_same_config(tmp_path):
    path = tmp_path / "s.h5"
    assert stage_state(path, {"a": 1}) == "missing" and not stage_done(path, {"a": 1})
    _write(path, {"a": 1, "b": (1, 2)})
    assert stage_done(path, {"a": 1, "b": [1, 2]})  # compared as stored: a tuple is a list
    assert stage_done(path)  # a file named by its config's hash: verification alone


def test_another_config_is_refused_naming_what_differs(tmp_path):
    path = _write(tmp_path / "s.h5", {"fit": {"lam": 5.0}})
    with pytest.raises(ConfigChangedError, match=r"fit.lam = 5.0 there, 2.0 now\); pass --x") as e:
        stage_done(path, {"fit": {"lam": 2.0}}, hint="pass --x")
    assert e.value.differences == {"fit.lam": (5.0, 2.0)} and path.exists()


def test_a_damaged_file_is_set_aside_and_its_stage_runs_again(tmp_path):
    path = _write(tmp_path / "s.h5", {"a": 1})
    flip_byte(path, "x")
    assert stage_state(path, {"a": 1}) == "damaged" and path.exists()  # read only
    assert not stage_done(path, {"a": 1})
    assert not path.exists() and (tmp_path / "s.h5.corrupt").exists()


def test_a_file_spinsa_did_not_write_is_never_touched(tmp_path):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(io.SpinsaFileError):
        stage_done(path, {"a": 1})
    assert path.exists()


def test_a_pipeline_skips_finished_stages_and_reruns_what_depends_on_a_rerun(tmp_path):
    ran, lines = [], []
    a, b, c = (tmp_path / f"{n}.h5" for n in "abc")

    def plan(config_a):
        p = Pipeline("test", say=lines.append)
        p.add("a", lambda: (ran.append("a"), _write(a, config_a)), output=a, config=config_a)
        p.add("b", lambda: (ran.append("b"), _write(b, {})), output=b, config={}, deps=("a",))
        p.add("c", lambda: (ran.append("c"), _write(c, {})), output=c, config={})
        p.add("mem", lambda: ran.append("mem"))  # no file: always runs
        return p

    assert plan({"k": 1}).run().keys() == {"a", "b", "c", "mem"}
    ran.clear()
    p = plan({"k": 1})
    assert p.todo() == ["mem"]
    p.run()
    assert ran == ["mem"] and any("done earlier, skipped" in line for line in lines)
    ran.clear()
    flip_byte(a, "x")  # a damaged stage is redone, and so is the stage that reads it
    plan({"k": 1}).run()
    assert ran == ["a", "b", "mem"]
    with pytest.raises(ConfigChangedError):
        plan({"k": 2}).run()
