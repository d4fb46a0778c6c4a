"""spinsa.io: round trips, provenance, atomic files, groups in place, locks, kill -9, bad files."""

import dataclasses
import os
import re
import shutil
import signal
import socket
import threading
import time
from datetime import datetime, timedelta, timezone

import h5py
import numpy as np
import pytest
from damage import flip_byte

import spinsa
from spinsa import io
from spinsa.io import hdf5, schema


@pytest.fixture
def rng():
    return np.random.default_rng(20241003)


@dataclasses.dataclass(frozen=True)
class _Opt:
    lr: float = 5e-4
    betas: tuple = (0.9, 0.999)


@dataclasses.dataclass(frozen=True)
class _Config:
    lam: float = 5.0
    norm: str = "sphere"
    seed: int | None = None
    classes: tuple = ("0", "1")
    opt: _Opt = _Opt()


def _files(directory):
    return sorted(os.listdir(directory))


def _small(path, **kw):
    return io.write_file(path, {"x": np.arange(3.0)}, kind="run", **kw)


# --------------------------------------------------------------------------- round trips


def test_round_trip_arrays_attrs_config(tmp_path, rng):
    path = tmp_path / "fit.h5"
    J = rng.normal(size=(5, 5, 3, 3))  # float64 in, float32 out
    arrays = {
        "J": J,
        "trajectory": {"states": rng.normal(size=(4, 2, 5, 3)).astype(np.float32)},
        "losses": rng.normal(size=7),
        "counts": np.arange(6, dtype=np.int16).reshape(2, 3),
        "mask": np.array([True, False, True]),
        "labels": np.array(["zero", "one", "two"]),
        "hebbian/J": rng.normal(size=(5, 5, 3, 3)),
        "loss_final": 0.25,
    }
    attrs = {
        "n_train": 10_000,
        "lam_eval": 1.0,
        "converged": True,
        "note": None,
        "classes": ["a", "b"],
        "bounds": (0, 1),
        "nested": {"a": 1, "b": [1, 2]},
        "weights": np.linspace(0.0, 1.0, 4),
        "tricky": "json:not really json",
        "big": int(2**70),
    }
    cfg = _Config(seed=7)
    io.write_file(path, arrays, attrs, kind="fit", config=cfg, seeds={"init": 3, "data": None})

    f = io.read(path)
    assert f.kind == "fit"
    assert f.config == dataclasses.asdict(cfg) | {
        "classes": ["0", "1"],
        "opt": {"lr": 5e-4, "betas": [0.9, 0.999]},
    }
    assert _Config(**{**f.config, "opt": _Opt(**f.config["opt"])}) == dataclasses.replace(
        cfg, classes=["0", "1"], opt=_Opt(betas=[0.9, 0.999])
    )
    assert f.seeds == {"init": 3, "data": None}
    for key, value in attrs.items():
        got = f.attrs[key]
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got, value)
        elif isinstance(value, tuple):
            assert got == list(value)
        else:
            assert got == value and type(got) is type(value), key
    # the config, readable leaf by leaf
    assert f.attrs["config.lam"] == 5.0
    assert f.attrs["config.opt.lr"] == 5e-4
    assert f.attrs["config.seed"] == 7
    assert f.attrs["config.classes"] == ["0", "1"]
    assert f.attrs["config_type"].endswith("_Config")

    assert f.array("J").dtype == np.float32
    np.testing.assert_array_equal(f.array("J"), J.astype(np.float32))
    assert f.array("hebbian/J").dtype == np.float32
    for name in ["trajectory/states", "losses", "counts", "mask", "labels"]:
        value = arrays[name] if "/" not in name else arrays["trajectory"]["states"]
        got = f.array(name)
        assert got.dtype == value.dtype, name
        np.testing.assert_array_equal(got, value)
    assert f.array("loss_final") == 0.25
    assert f.datasets["trajectory/states"] == ((4, 2, 5, 3), np.dtype(np.float32))
    assert f.datasets["labels"][1] == np.dtype(str)
    assert f.groups == ("hebbian", "trajectory")


def test_provenance_attrs(tmp_path):
    before = datetime.now(timezone.utc).replace(microsecond=0)
    _small(tmp_path / "r.h5")
    attrs = io.read(tmp_path / "r.h5").attrs
    assert attrs["schema"] == io.SCHEMA == "spinsa/1"
    assert attrs["spinsa_version"] == spinsa.__version__
    assert attrs["numpy_version"] == np.__version__
    assert attrs["host"] == socket.gethostname()
    assert attrs["kind"] == "run"
    created = datetime.fromisoformat(attrs["created"])
    assert created.utcoffset() == timedelta(0)
    assert before <= created <= datetime.now(timezone.utc)


def test_dataclass_configs_inside_a_mapping_are_stored_as_their_fields(tmp_path):
    # {"name": SomeConfig()} as config or as an attribute: stored the way a dataclass config
    # is (config_to_dict), not refused as "not JSON serialisable"
    from spinsa._config import config_from_dict, config_to_dict

    fit = spinsa.FitConfig(lam=2.5)
    path = _small(tmp_path / "r.h5", config={"a": fit, "b": {"c": _Opt()}}, attrs={"f": _Opt()})
    f = io.read(path)
    assert f.config["a"] == config_to_dict(fit)
    assert config_from_dict(spinsa.FitConfig, f.config["a"]) == fit
    assert f.config["b"] == {"c": {"lr": 5e-4, "betas": [0.9, 0.999]}}
    assert f.attrs["config.a.lam"] == 2.5 and f.attrs["config.b.c.lr"] == 5e-4
    assert f.attrs["f"] == {"lr": 5e-4, "betas": [0.9, 0.999]}


def test_string_attr_with_json_prefix_is_not_misread(tmp_path):
    _small(tmp_path / "r.h5", attrs={"s": "json:[1, 2]", "t": "plain"})
    with h5py.File(tmp_path / "r.h5") as f:
        assert f.attrs["t"] == "plain"  # native strings stay native in the file
    attrs = io.read(tmp_path / "r.h5").attrs
    assert attrs["s"] == "json:[1, 2]" and attrs["t"] == "plain"


def test_big_arrays_chunked_along_first_axis_and_compressed(tmp_path, rng):
    states = rng.normal(size=(50, 20, 30, 8))  # 1.9 MB, rows of 38 kB
    io.write_file(tmp_path / "r.h5", {"states": states, "small": np.zeros(10)}, kind="run")
    with h5py.File(tmp_path / "r.h5") as f:
        big, small = f["states"], f["small"]
        assert big.compression == "gzip" and big.compression_opts == 4 and big.shuffle
        assert big.chunks[1:] == (20, 30, 8) and 1 <= big.chunks[0] <= 50
        assert small.chunks == (10,) and small.compression is None  # chunked for its checksum
        assert big.fletcher32 and small.fletcher32
    np.testing.assert_array_equal(io.read_array(tmp_path / "r.h5", "states"), states)


def test_read_array_slices(tmp_path, rng):
    states = rng.normal(size=(6, 2, 4, 3)).astype(np.float32)
    io.write_file(tmp_path / "r.h5", {"trajectory/states": states}, kind="run")
    path = tmp_path / "r.h5"
    np.testing.assert_array_equal(io.read_array(path, "trajectory/states", -1), states[-1])
    np.testing.assert_array_equal(
        io.read_array(path, "/trajectory/states", np.s_[1:5:2, :, 0]), states[1:5:2, :, 0]
    )
    with pytest.raises(KeyError, match="no dataset 'trajectory/nope'.*trajectory/states"):
        io.read_array(path, "trajectory/nope")


def test_open_file_is_read_only(tmp_path):
    _small(tmp_path / "r.h5")
    with io.open_file(tmp_path / "r.h5") as f:
        assert f.mode == "r"
        np.testing.assert_array_equal(f["x"][:], np.arange(3.0))
    assert not f  # closed


# --------------------------------------------------------------------------- overwriting


def test_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "r.h5"
    _small(path, attrs={"version": 1})
    with pytest.raises(
        FileExistsError, match=r"already exists; pass overwrite=True \(or mode='w'\)"
    ):
        _small(path, attrs={"version": 2})
    assert io.read(path).attrs["version"] == 1
    _small(path, attrs={"version": 2}, overwrite=True)
    assert io.read(path).attrs["version"] == 2
    _small(path, attrs={"version": 3}, mode="w")
    assert io.read(path).attrs["version"] == 3
    assert _files(tmp_path) == ["r.h5"]
    with pytest.raises(ValueError, match="mode must be 'x'.*or 'w'"):
        _small(path, mode="a")


def test_bad_targets_and_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _small(tmp_path / "nowhere" / "r.h5")
    with pytest.raises(IsADirectoryError):
        _small(tmp_path)
    with pytest.raises(ValueError, match="kind must be a non-empty string"):
        io.write_file(tmp_path / "r.h5", {}, kind="")
    with pytest.raises(ValueError, match="'schema' is written by spinsa.io itself"):
        _small(tmp_path / "r.h5", attrs={"schema": "mine"})
    with pytest.raises(ValueError, match="'config.lam' is written by spinsa.io itself"):
        _small(tmp_path / "r.h5", attrs={"config.lam": 1.0})
    with pytest.raises(TypeError, match="attribute 'fn': cannot store a value of type function"):
        _small(tmp_path / "r.h5", attrs={"fn": lambda: 0})
    with pytest.raises(TypeError, match=r"arrays\['obj'\] has dtype object"):
        io.write_file(tmp_path / "r.h5", {"obj": np.array([{}, 1], dtype=object)}, kind="run")
    with pytest.raises(TypeError, match="config cannot be stored as JSON: function is not JSON"):
        _small(tmp_path / "r.h5", config={"fn": lambda: 0})
    with pytest.raises(TypeError, match="config must be a dataclass instance or a mapping"):
        _small(tmp_path / "r.h5", config=[1, 2])
    assert _files(tmp_path) == []


# --------------------------------------------------------------------------- crashes


class _Explodes:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("conversion failed")


def test_crash_while_writing_leaves_no_file(tmp_path, rng):
    arrays = {"a": rng.normal(size=(100, 200)), "b": _Explodes()}
    with pytest.raises(RuntimeError, match="conversion failed"):
        io.write_file(tmp_path / "r.h5", arrays, kind="run")
    assert _files(tmp_path) == []


def test_interrupt_while_writing_leaves_no_file(tmp_path, monkeypatch):
    calls = []
    real = hdf5._write_dataset

    def interrupted(*args):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(hdf5, "_write_dataset", interrupted)
    with pytest.raises(KeyboardInterrupt):
        io.write_file(tmp_path / "r.h5", {"a": np.ones(3), "b": np.ones(3)}, kind="run")
    assert calls == ["a", "b"]
    assert _files(tmp_path) == []


def test_crash_while_overwriting_keeps_the_old_file(tmp_path):
    path = tmp_path / "r.h5"
    _small(path, attrs={"version": 1})
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        io.write_file(path, {"b": _Explodes()}, kind="run", overwrite=True)
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["r.h5"]


# --------------------------------------------------------------------------- write_group


def test_write_group_adds_and_keeps_the_rest(tmp_path, rng):
    path = tmp_path / "r.h5"
    J = rng.normal(size=(4, 4, 2, 2)).astype(np.float32)
    io.write_file(
        path,
        {"J": J, "trajectory/times": np.arange(5)},
        {"note": "base"},
        kind="run",
        config={"lam": 2.0},
    )
    m = rng.normal(size=(5, 3))
    io.write_group(path, "analysis/overlaps", {"m": m, "sub": {"q": np.ones(2)}}, {"lam": 1.0})

    f = io.read(path)
    assert f.attrs["note"] == "base" and f.config == {"lam": 2.0} and f.kind == "run"
    assert set(f.groups) == {"analysis", "analysis/overlaps", "analysis/overlaps/sub", "trajectory"}
    np.testing.assert_array_equal(f.array("J"), J)
    np.testing.assert_array_equal(f.array("trajectory/times"), np.arange(5))
    arrays, attrs = io.read_group(path, "analysis/overlaps")
    assert list(arrays) == ["m"]
    np.testing.assert_array_equal(arrays["m"], m)
    np.testing.assert_array_equal(f.array("analysis/overlaps/sub/q"), np.ones(2))
    assert attrs["lam"] == 1.0 and attrs["spinsa_version"] == spinsa.__version__
    datetime.fromisoformat(attrs["created"])
    assert _files(tmp_path) == ["r.h5"]

    with pytest.raises(ValueError, match="already has a group 'analysis/overlaps'; pass overwrite"):
        io.write_group(path, "analysis/overlaps", {"m": np.zeros(1)})
    io.write_group(path, "analysis/overlaps", {"m2": np.zeros(1)}, overwrite=True)
    arrays, _ = io.read_group(path, "analysis/overlaps")
    assert list(arrays) == ["m2"]
    with pytest.raises(ValueError, match="'J' is a dataset, not a group"):
        io.write_group(path, "J", {}, overwrite=True)
    with pytest.raises(KeyError, match="no group 'nope'"):
        io.read_group(path, "nope")


def test_crash_in_write_group_leaves_file_intact(tmp_path):
    path = tmp_path / "r.h5"
    _small(path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        io.write_group(path, "analysis", {"ok": np.ones(3), "bad": _Explodes()})
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["r.h5"]
    assert "analysis" not in io.read(path).groups


def test_write_group_refuses_bad_files(tmp_path):
    with pytest.raises(io.SpinsaFileError, match="no such file"):
        io.write_group(tmp_path / "none.h5", "analysis", {})


# --------------------------------------------------------------------------- bad files


def _reason(path):
    with pytest.raises(io.SpinsaFileError) as info:
        io.check_file(path)
    assert isinstance(info.value, ValueError)
    return info.value.reason, str(info.value)


def test_missing_file(tmp_path):
    reason, msg = _reason(tmp_path / "run.h5")
    assert reason == "missing" and "run.h5: no such file" in msg
    (tmp_path / ".run.h5.tmp-123-abcd").write_bytes(b"")
    reason, msg = _reason(tmp_path / "run.h5")
    assert reason == "missing" and "did not finish" in msg
    with pytest.raises(io.SpinsaFileError, match="no such file"):
        io.read(tmp_path / "other.h5")


def test_text_file_named_h5(tmp_path):
    (tmp_path / "run.h5").write_text("lam,gamma\n1.0,1.0\n")
    reason, msg = _reason(tmp_path / "run.h5")
    assert reason == "not-hdf5" and "is not an HDF5 file" in msg
    assert _reason(tmp_path)[0] == "not-hdf5"  # a directory


def test_truncated_file(tmp_path, rng):
    path = tmp_path / "run.h5"
    io.write_file(path, {"x": rng.normal(size=(64, 64))}, kind="run")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    reason, msg = _reason(path)
    assert reason == "corrupt" and "truncated or corrupt" in msg
    with pytest.raises(io.SpinsaFileError, match="truncated or corrupt"):
        io.read_array(path, "x")


ALL_KINDS = {
    "J": np.arange(2 * 2 * 3 * 3, dtype=np.float64).reshape(2, 2, 3, 3),
    "big": np.linspace(0.0, 1.0, 40_000),  # compressed
    "small": np.arange(7, dtype=np.int16),
    "mask": np.array([True, False, True, True]),
    "labels": np.array(["zéro", "one", "two"]),
    "group/states": np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(2, 3, 4),
    "scalar": np.float64(1234.56789),
    "scalar_text": np.array("a scalar string"),
}


@pytest.mark.parametrize("name", sorted(ALL_KINDS))
def test_a_flipped_byte_in_any_dataset_is_an_error_on_read(tmp_path, name):
    path = tmp_path / "r.h5"
    io.write_file(path, ALL_KINDS, kind="run")
    io.verify(path)  # intact
    flip_byte(path, name)
    for read in (lambda: io.read_array(path, name), lambda: io.verify(path)):
        with pytest.raises(io.SpinsaFileError, match="checksum failed") as info:
            read()
        assert info.value.reason == "corrupt" and str(path) in str(info.value)
    if np.ndim(ALL_KINDS[name]):  # the data, not the object header: the rest reads
        assert io.read(path).datasets[name][0] == np.shape(ALL_KINDS[name])


def test_a_flipped_byte_in_a_group_added_in_place_is_detected(tmp_path):
    path = tmp_path / "r.h5"
    io.write_file(path, {"x": np.zeros(3)}, kind="run")
    io.write_group(path, "analysis/m", {"m": np.linspace(0.0, 1.0, 50), "n": 987654321})
    for name in ("analysis/m/m", "analysis/m/n"):
        damaged = tmp_path / f"{name.replace('/', '-')}.h5"
        shutil.copy(path, damaged)
        flip_byte(damaged, name)
        with pytest.raises(io.SpinsaFileError, match="checksum failed"):
            io.read_group(damaged, "analysis/m")
        with pytest.raises(io.SpinsaFileError, match="checksum failed"):
            io.verify(damaged)


def test_every_dataset_carries_a_checksum(tmp_path):
    io.write_file(tmp_path / "r.h5", {**ALL_KINDS, "empty": np.zeros((0, 3))}, kind="run")
    with h5py.File(tmp_path / "r.h5") as f:
        layouts = {}
        f.visititems(lambda n, o: layouts.update({n: o}) if isinstance(o, h5py.Dataset) else None)
        for name, ds in layouts.items():
            if ds.ndim == 0:  # compact: in the object header, which HDF5 checksums
                assert ds.id.get_create_plist().get_layout() == h5py.h5d.COMPACT, name
            elif ds.size:
                assert ds.fletcher32, name
        assert h5py.check_string_dtype(f["labels"].dtype).length is not None  # not in a heap
    assert io.read_array(tmp_path / "r.h5", "labels").tolist() == ["zéro", "one", "two"]
    assert io.read_array(tmp_path / "r.h5", "scalar_text") == "a scalar string"
    assert io.read_array(tmp_path / "r.h5", "empty").shape == (0, 3)


def test_foreign_hdf5_file(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = np.ones(3)
    reason, msg = _reason(tmp_path / "a.h5")
    assert (
        reason == "foreign" and "not a spinsa file" in msg and "no root attribute 'schema'" in msg
    )
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f.attrs["schema"] = "netket/3"
    reason, msg = _reason(tmp_path / "b.h5")
    assert reason == "foreign" and "'netket/3'" in msg


def test_newer_schema(tmp_path):
    path = tmp_path / "r.h5"
    _small(path)
    with h5py.File(path, "r+") as f:
        f.attrs["schema"] = "spinsa/2"
    reason, msg = _reason(path)
    assert reason == "newer-schema" and "'spinsa/2'" in msg and "pip install -U spinsa" in msg
    with pytest.raises(io.SpinsaFileError, match="newer"):
        io.write_group(path, "analysis", {})


# --------------------------------------------------------------------------- trajectories


def _trajectory(rng, model):
    P, N, d = 3, 5, 4
    x0 = rng.normal(size=(P, N, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    J = rng.normal(size=(N, N, d, d)) / d
    J[np.arange(N), np.arange(N)] = 0.0
    return model.run(x0, J, 2.0, 6, record_every=2, seed=11), J


def test_save_and_load_trajectory(tmp_path, rng):
    model = pytest.importorskip("spinsa.model")
    traj, J = _trajectory(rng, model)
    path = tmp_path / "run.h5"
    io.save_trajectory(path, traj, J=J, extra_attrs={"task": "masked"})
    back = io.load_trajectory(path)

    assert type(back) is type(traj) and back.config == traj.config
    for field in dataclasses.fields(traj):
        if field.init and field.name != "config":
            np.testing.assert_array_equal(getattr(back, field.name), getattr(traj, field.name))
    np.testing.assert_array_equal(back.final, traj.final)
    f = io.read(path)
    assert f.kind == "run" and f.attrs["task"] == "masked"
    assert f.config == dataclasses.asdict(traj.config)
    assert f.seeds == {"dynamics": traj.config.seed}
    assert f.array("J").dtype == np.float32
    np.testing.assert_allclose(f.array("J"), J, rtol=1e-6)
    with pytest.raises(FileExistsError):
        io.save_trajectory(path, traj)
    io.save_trajectory(path, traj, overwrite=True)
    assert "J" not in io.read(path).datasets


def test_trajectory_errors(tmp_path, rng):
    model = pytest.importorskip("spinsa.model")
    traj, _ = _trajectory(rng, model)
    with pytest.raises(ValueError, match=r"J has shape \(5, 5, 3, 3\).*expected J.shape"):
        io.save_trajectory(tmp_path / "r.h5", traj, J=np.zeros((5, 5, 3, 3)))
    with pytest.raises(TypeError, match="traj must be a spinsa.model.Trajectory"):
        io.save_trajectory(tmp_path / "r.h5", {"states": 1})
    _small(tmp_path / "fit.h5")
    with pytest.raises(ValueError, match="holds no trajectory"):
        io.load_trajectory(tmp_path / "fit.h5")


# --------------------------------------------------------------------------- write_group in place


def test_write_group_writes_in_place(tmp_path, rng):
    path = tmp_path / "r.h5"
    io.write_file(path, {"trajectory/states": rng.normal(size=(64, 4, 16, 8))}, kind="run")
    inode = path.stat().st_ino
    io.write_group(path, "analysis/a", {"m": rng.normal(size=(200, 50))})
    io.write_group(path, "analysis/b", {"m": np.ones(3)}, {"note": "second"})
    io.write_group(path, "analysis/a", {"m": np.zeros(3)}, overwrite=True)
    assert path.stat().st_ino == inode  # the same file, not a renamed copy
    assert _files(tmp_path) == ["r.h5"]
    f = io.read(path)
    assert set(f.groups) == {"analysis", "analysis/a", "analysis/b", "trajectory"}
    np.testing.assert_array_equal(f.array("analysis/a/m"), np.zeros(3))
    with h5py.File(path) as h:  # the replaced group is unreachable; each object has one link
        counts = []
        h.visititems(lambda n, o: counts.append(h5py.h5o.get_info(o.id).rc))
        assert counts == [1] * len(counts)


def test_write_group_copies_when_the_change_spans_pages(tmp_path, monkeypatch):
    path = tmp_path / "r.h5"
    _small(path)
    io.write_group(path, "analysis/a", {"m": np.ones(2)})
    before = path.read_bytes()
    os.link(path, tmp_path / "old")  # keeps the original file once the copy replaces it
    monkeypatch.setattr(hdf5, "PAGE", 16)  # no change to the old bytes fits in 16 bytes
    io.write_group(path, "analysis/b", {"m": np.zeros(2)})
    assert (tmp_path / "old").read_bytes() == before  # the try in place left no trace
    assert not os.path.samefile(path, tmp_path / "old")
    np.testing.assert_array_equal(io.read_array(path, "analysis/a/m"), np.ones(2))
    np.testing.assert_array_equal(io.read_array(path, "analysis/b/m"), np.zeros(2))


def test_write_group_copies_when_the_parent_is_crowded(tmp_path):
    # Beyond 8 members HDF5 keeps a group's links in a B-tree and a heap: one more link
    # rewrites several pages, which a kill could tear, so the file is copied instead.
    path = tmp_path / "r.h5"
    _small(path)
    for i in range(9):
        io.write_group(path, f"analysis/g{i}", {"m": np.full(2, i)})
    inode = path.stat().st_ino
    io.write_group(path, "analysis/g9", {"m": np.full(2, 9)})
    assert path.stat().st_ino != inode and _files(tmp_path) == ["r.h5"]
    for i in range(10):
        np.testing.assert_array_equal(io.read_array(path, f"analysis/g{i}/m"), np.full(2, i))


def test_interrupted_write_group_leaves_the_file_byte_for_byte(tmp_path, monkeypatch, rng):
    path = tmp_path / "r.h5"
    io.write_file(path, {"x": rng.normal(size=(100, 100))}, kind="run")
    io.write_group(path, "analysis/a", {"m": np.ones(3)})
    before = path.read_bytes()
    real = hdf5._write_dataset

    def interrupted(group, name, data):
        real(group, name, data)  # HDF5 has written the first dataset when the interrupt comes
        raise KeyboardInterrupt

    monkeypatch.setattr(hdf5, "_write_dataset", interrupted)
    with pytest.raises(KeyboardInterrupt):
        io.write_group(path, "analysis/b", {"m": rng.normal(size=(100, 100)), "n": np.ones(2)})
    assert path.read_bytes() == before


def test_write_group_refuses_a_dataset_on_the_path(tmp_path):
    path = tmp_path / "r.h5"
    _small(path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="'x' is a dataset, not a group"):
        io.write_group(path, "x/analysis", {"m": np.ones(2)})
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- locks


_NO_LOCKS = pytest.mark.skipif(
    os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() in ("FALSE", "0"),
    reason="HDF5 file locking is turned off",
)


@_NO_LOCKS
def test_a_read_waits_for_a_write(tmp_path, monkeypatch):
    path = tmp_path / "r.h5"
    _small(path)
    monkeypatch.setattr(hdf5, "LOCK_WAIT_S", 0.3)
    with hdf5._locked(path):  # a write_group at work
        with pytest.raises(BlockingIOError, match="open elsewhere.*kept this read waiting"):
            io.read(path)  # busy, not corrupt: no SpinsaFileError
    monkeypatch.setattr(hdf5, "LOCK_WAIT_S", 10.0)
    writer = hdf5._locked(path)
    writer.__enter__()
    threading.Timer(0.2, writer.__exit__, (None, None, None)).start()
    assert io.read(path).kind == "run"  # waited for the writer to finish


@_NO_LOCKS
def test_a_write_waits_for_readers(tmp_path, monkeypatch):
    path = tmp_path / "r.h5"
    _small(path)
    monkeypatch.setattr(hdf5, "LOCK_WAIT_S", 0.3)
    with io.open_file(path):  # e.g. an h5py.File left open in a notebook
        with pytest.raises(BlockingIOError, match="kept this write waiting"):
            io.write_group(path, "analysis", {"m": np.ones(2)})
    monkeypatch.setattr(hdf5, "LOCK_WAIT_S", 10.0)
    reader = io.open_file(path)
    f = reader.__enter__()
    threading.Timer(0.2, reader.__exit__, (None, None, None)).start()
    io.write_group(path, "analysis", {"m": np.ones(2)})  # waits for the reader to close
    assert not f
    np.testing.assert_array_equal(io.read_array(path, "analysis/m"), np.ones(2))


# --------------------------------------------------------------------------- kill -9
#
# A writer killed outright (SIGKILL: `kill -9`, a time limit, the OOM killer) must leave the
# file as it was or with the new group complete, readable, and open to later writes.

_FORK = pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a writer to kill it")
_EVENTS = ("pwrite", "ftruncate", "fsync", "replace", "sendfile")  # os calls that change files
_PAGE = hdf5.PAGE


def _kill_arrays(seed):
    rng = np.random.default_rng(seed)
    return {"m": rng.normal(size=(90, 100)), "n": np.arange(seed, seed + 5), "sub": {"q": [seed]}}


def _kill_base(path, crowded):
    rng = np.random.default_rng(0)
    io.write_file(
        path,
        {"J": rng.normal(size=(6, 6, 2, 2)), "trajectory/states": rng.normal(size=(30, 9, 6, 2))},
        {"note": "base"},
        kind="run",
        group_attrs={"trajectory": {"who": "write_file"}},
    )
    io.write_group(path, "analysis/a", _kill_arrays(1), {"seed": 1, "s": "one"})
    for i in range(9 if crowded else 0):  # beyond 8 members: dense storage
        io.write_group(path, f"crowded/g{i}", {"m": np.full(3, i)}, {"s": "x" * i})


def _tree(path):
    """Every object in the file: its values (datasets) and attributes (but ``created``)."""
    out = {}
    with io.open_file(path) as f:

        def visit(name, obj):
            attrs = {k: repr(schema.decode_attr(v)) for k, v in obj.attrs.items()}
            attrs.pop("created", None)
            value = obj[()].tobytes() if isinstance(obj, h5py.Dataset) else None
            out[name] = (value, attrs)

        f.visititems(visit)
    return out


def _in_child(fn, kill_at=None, torn=False):
    """Run ``fn`` in a forked process that SIGKILLs itself at its ``kill_at``-th file change.

    The calls of ``_EVENTS`` are counted; at number ``kill_at`` the process kills itself
    before the call or, if ``torn``, after writing the first page of a ``pwrite`` that
    crosses pages (the kernel writes whole pages). Returns, if ``fn`` finished, whether each
    call was a ``pwrite`` crossing pages; None if the process was killed.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(r)
            calls = []

            def counted(real, name):
                def call(*args):
                    crosses = name == "pwrite" and args[2] % hdf5.PAGE + len(args[1]) > hdf5.PAGE
                    if len(calls) == kill_at:
                        if torn and crosses:
                            fd, data, offset = args
                            real(fd, data[: hdf5.PAGE - offset % hdf5.PAGE], offset)
                        os.kill(os.getpid(), signal.SIGKILL)
                    calls.append(crosses)
                    return real(*args)

                return call

            for name in _EVENTS:
                if hasattr(os, name):
                    setattr(os, name, counted(getattr(os, name), name))
            fn()
            os.write(w, bytes(calls))
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as out:
        calls = [bool(c) for c in out.read()]
    if kill_at is not None and os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return None
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the writer failed"
    return calls


@_FORK
@pytest.mark.parametrize(
    ("group", "overwrite", "page"),
    [
        ("analysis/b", False, _PAGE),  # a parent with room: in place
        ("analysis/a", True, _PAGE),  # replace a group in place
        pytest.param("trajectory", True, _PAGE, marks=pytest.mark.slow),  # made by write_file
        pytest.param("new/deep/group", False, _PAGE, marks=pytest.mark.slow),  # at the root
        ("crowded/g9", False, _PAGE),  # a crowded parent: the file is copied
        pytest.param("analysis/b", False, 64, marks=pytest.mark.slow),  # tried, dropped, copied
    ],
)
def test_kill_at_every_file_change_of_write_group(tmp_path, monkeypatch, group, overwrite, page):
    monkeypatch.setattr(hdf5, "PAGE", page)
    base, path = tmp_path / "base.h5", tmp_path / "r.h5"
    _kill_base(base, crowded=group.startswith("crowded"))

    def write():
        io.write_group(path, group, _kill_arrays(7), {"seed": 7}, overwrite=overwrite)

    shutil.copy(base, path)
    before = _tree(path)
    calls = _in_child(write)
    after = _tree(path)
    assert after != before and len(calls) > 5
    later = {
        "later": (None, {"spinsa_version": repr(spinsa.__version__)}),
        "later/x": (np.ones(2).tobytes(), {}),
    }
    trials = [(k, False) for k in range(len(calls))] + [(k, True) for k, c in enumerate(calls) if c]
    for kill_at, torn in trials:
        shutil.copy(base, path)
        assert _in_child(write, kill_at, torn) is None
        io.check_file(path)
        state = _tree(path)
        assert state in (before, after), (kill_at, torn)
        inode = path.stat().st_ino
        io.write_group(path, "later", {"x": np.ones(2)})  # the file still takes writes,
        assert _tree(path) == {**state, **later}
        assert page != _PAGE or path.stat().st_ino == inode  # in place, over the leftovers


def _loop_step(path, i):
    """Step i of a writer's loop: add group i, or (every fourth) replace the one of step i - 2."""
    replace = i % 4 == 3
    seed_of = i - 2 if replace else i
    group = f"loop/{seed_of % 2}/g{seed_of}"  # two parents, crowded (copied) after 8 members
    io.write_group(path, group, _kill_arrays(i), {"seed": i}, overwrite=replace)


def _loop_state(n_steps):
    """``group -> seed`` after the first ``n_steps`` steps of the loop."""
    state = {}
    for i in range(n_steps):
        replace = i % 4 == 3
        seed_of = i - 2 if replace else i
        state[f"loop/{seed_of % 2}/g{seed_of}"] = i
    return state


def _seeds(path):
    """``group -> seed`` of the groups the loop wrote."""
    seeds = {}

    def visit(name, obj):
        if name.startswith("loop/") and "seed" in obj.attrs:
            seeds[name] = int(obj.attrs["seed"])

    with io.open_file(path) as f:
        f.visititems(visit)
    return seeds


@_FORK
def test_kill_a_writing_loop_at_random_times(tmp_path, rng):
    base, path = tmp_path / "base.h5", tmp_path / "r.h5"
    _kill_base(base, crowded=False)
    base_tree = _tree(base)
    for delay in rng.uniform(0.02, 0.3, size=6):
        shutil.copy(base, path)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer: one byte down the pipe per finished step
            try:
                os.close(r)
                for i in range(10**6):
                    _loop_step(path, i)
                    os.write(w, b".")
            finally:
                os._exit(1)
        os.close(w)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(r, "rb") as out:
            done = len(out.read())
        tree = _tree(path)  # opens, and every object reads
        assert {k: v for k, v in tree.items() if not k.startswith("loop")} == base_tree
        state = _seeds(path)
        assert state in (_loop_state(done), _loop_state(done + 1)), (delay, done)
        for name, seed in state.items():
            for key, value in _kill_arrays(seed).items():
                if key != "sub":
                    np.testing.assert_array_equal(io.read_array(path, f"{name}/{key}"), value)
        _loop_step(path, 1000)  # the file still takes writes
        assert _seeds(path) == {**state, "loop/0/g1000": 1000}


# --------------------------------------------------------------------------- layouts


def _evaluation(T1=4, P=3, k=2, n=2, H=4, W=4):
    """The arrays of /evaluation/<task> (docs/files.md) at these sizes, all zeros."""
    parts = [f"{s}/{p}" for s in ("errors", "mean", "sem") for p in ("all", "masked", "visible")]
    return {
        "times": np.arange(T1),
        **{name: np.zeros((T1, P) if name.startswith("errors") else T1) for name in parts},
        "step_change": np.zeros(T1 - 1),
        "final_mean_image": np.zeros((H, W)),
        "references/mean_fill/all": np.zeros(P),
        "examples": {"images": np.zeros((k, n, H, W)), "times": np.arange(k),
                     "index": np.arange(n), "clean": np.zeros((n, H, W))},
    }  # fmt: skip


def test_evaluation_shapes_are_checked_on_read(tmp_path):
    from spinsa.io.results import check_evaluations, read_evaluation

    config = {"data": {"image_size": 4}}
    good = io.write_file(tmp_path / "good.h5", {"evaluation/masked": _evaluation()},
                         kind="experiment", config=config)  # fmt: skip
    check_evaluations(good)
    arrays, _ = read_evaluation(good, "masked")
    assert arrays["examples"]["images"].shape == (2, 2, 4, 4)
    cases = {
        "examples/images has shape (2, 2, 5, 4)": {"examples": {"images": np.zeros((2, 2, 5, 4))}},
        "errors/all has shape (5, 3)": {"errors/all": np.zeros((5, 3))},  # T1 = 4 from times
        "wants (T = 3)": {"step_change": np.zeros(4)},
        "references/mean_fill/all has shape (2,)": {"references/mean_fill/all": np.zeros(2)},
    }
    for k, (phrase, change) in enumerate(cases.items()):
        arrays = _evaluation()
        for name, value in change.items():
            if isinstance(value, dict):
                arrays[name] = {**arrays[name], **value}
            else:
                arrays[name] = value
        path = io.write_file(tmp_path / f"bad{k}.h5", {"evaluation/masked": arrays},
                             kind="experiment", config=config)  # fmt: skip
        with pytest.raises(io.SpinsaFileError, match=re.escape(phrase)) as info:
            read_evaluation(path, "masked")
        assert info.value.reason == "corrupt" and "spinsa evaluate" in str(info.value)
    # the image shape of the config: 4 x 4, not the 6 x 6 of consistent examples
    arrays = _evaluation(H=6, W=6)
    path = io.write_file(tmp_path / "other.h5", {"evaluation/denoise": arrays},
                         kind="experiment", config=config)  # fmt: skip
    with pytest.raises(io.SpinsaFileError, match=r"final_mean_image has shape \(6, 6\)"):
        check_evaluations(path)
    check_evaluations(path, skip=("evaluation/denoise",))  # about to be written again
    arrays = _evaluation()
    del arrays["times"]
    path = io.write_file(tmp_path / "bare.h5", {"evaluation/masked": arrays}, kind="experiment")
    with pytest.raises(io.SpinsaFileError, match="lacks the datasets times of the layout"):
        read_evaluation(path, "masked")


def test_read_attrs_reads_a_groups_attributes_alone(tmp_path):
    path = tmp_path / "f.h5"
    io.write_file(path, {"models": {"m": {"J": np.ones((3, 3))}}}, kind="experiment",
                  group_attrs={"models/m": {"fit_converged": False, "n": 3}})  # fmt: skip
    assert io.read_attrs(path, "models/m") == io.read_group(path, "models/m")[1]
    assert io.read_attrs(path, "models/m")["fit_converged"] is False
    assert io.read_attrs(path)["kind"] == "experiment"
    with pytest.raises(KeyError, match="no group 'nope'"):
        io.read_attrs(path, "nope")
