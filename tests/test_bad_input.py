"""The bad-input matrix: every wrong shape, value, option, file or environment gets an error
of the right type whose message says what was wrong (and, on the command line, no traceback
and a documented exit status)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
from damage import flip_byte

import spinsa
from spinsa import io, references
from spinsa._config import read_toml
from spinsa.datasets import DataNotFoundError, load_mnist, subsample
from spinsa.experiments import ExperimentConfig, train
from spinsa.experiments.config import DataSection, DynamicsSection, TasksSection
from spinsa.fit import FitConfig, InsufficientMemoryError, estimate_memory
from spinsa.sequences.data import split_series
from spinsa.tasks import draw_noisy, mask_tokens, reconstruction_errors, task_inputs

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 5, 2)).astype(np.float32)
X /= np.linalg.norm(X, axis=-1, keepdims=True)
J = spinsa.random_couplings(5, 2, seed=1)
EMB = spinsa.PatchEmbedding(image_shape=(4, 4), patch=2)
IMAGES = RNG.random((3, 4, 4))


X64, J64 = X.astype(np.float64), J.astype(np.float64)
ZERO = np.zeros_like(J)
SERIES = np.random.default_rng(3).standard_normal(300)


def fit(**options):
    """A fit of X that the entry checks refuse before any work."""
    return lambda: spinsa.fit_pseudolikelihood(X, **{"backend": "lbfgs", "max_iter": 2, **options})


def nan(a):
    a = np.array(a, dtype=np.float64)
    a.flat[1] = np.nan
    return a


# (what, call, exception type, phrase of the message)
API = [
    ("spins of one image without the sample axis", lambda: spinsa.run(X[0], J, 1.0, 2), ValueError, "x0[None]"),
    ("NaN in the spins", lambda: spinsa.run(nan(X), J, 1.0, 2), ValueError, "NaN"),
    ("inf in the couplings", lambda: spinsa.local_fields(X, np.full_like(J, np.inf), 1.0), ValueError, "infinite"),
    ("lam = 0", lambda: spinsa.run(X, J, 0.0, 2), ValueError, "lam"),
    ("negative lam", lambda: spinsa.step(X, J, -1.0), ValueError, "lam"),
    ("lam that overflows float32", lambda: spinsa.run(X, J, 1e39, 3), ValueError, "too large for float32"),
    ("lam as a string", lambda: spinsa.site_energies(X, J, "1"), ValueError, "lam"),
    ("negative steps", lambda: spinsa.run(X, J, 1.0, -1), ValueError, "steps"),
    ("unknown norm", lambda: spinsa.run(X, J, 1.0, 2, norm="cube"), ValueError, "norm"),
    ("unknown update", lambda: spinsa.run(X, J, 1.0, 2, update="random"), ValueError, "update"),
    ("infinite gamma", lambda: spinsa.step(X, J, 1.0, gamma=np.inf), ValueError, "gamma"),
    ("couplings of another d", lambda: spinsa.attention(X, spinsa.random_couplings(5, 3), 1.0), ValueError, "d = 2"),
    ("couplings of another N", lambda: spinsa.energy(X, spinsa.random_couplings(4, 2), 1.0), ValueError, "N = 5"),
    ("complex spins", lambda: spinsa.local_fields(X.astype(complex), J, 1.0), ValueError, "real"),
    ("string spins", lambda: spinsa.local_fields(np.full((1, 5, 2), "a"), J, 1.0), ValueError, "real"),
    ("one token", lambda: spinsa.run(X[:, :1], J[:1, :1], 1.0, 1), ValueError, "at least 2 tokens"),
    ("record_every 0", lambda: spinsa.run(X, J, 1.0, 2, record_every=0), ValueError, "record_every"),
    ("Hebbian couplings of no patterns", lambda: spinsa.hebbian_couplings(X[:0]), ValueError, "no patterns"),
    ("random couplings of one token", lambda: spinsa.random_couplings(1, 2), ValueError, "N"),
    ("a patch that does not tile", lambda: spinsa.PatchEmbedding(image_shape=(28, 28), patch=3), ValueError, "does not tile"),
    ("d too small", lambda: spinsa.PatchEmbedding(image_shape=(4, 4), patch=2, d=4), ValueError, "too small"),
    ("unknown embedding scale", lambda: spinsa.PatchEmbedding(scale="log"), ValueError, "scale"),
    ("8-bit images", lambda: EMB.encode(IMAGES * 255), ValueError, "divide by 255"),
    ("NaN pixels", lambda: EMB.encode(nan(IMAGES)), ValueError, "NaN"),
    ("one image without the sample axis", lambda: EMB.encode(IMAGES[0]), ValueError, "images[None]"),
    ("images of another size", lambda: EMB.encode(np.zeros((2, 5, 5))), ValueError, "(P, 4, 4)"),
    ("spins of the wrong shape to decode", lambda: EMB.decode(X), ValueError, "(P, 4, 8)"),
    ("mask fraction above 1", lambda: mask_tokens(X, 1.5), ValueError, "fraction"),
    ("an unknown task", lambda: task_inputs("inpaint", IMAGES, EMB), ValueError, "task"),
    ("an index of the wrong length", lambda: task_inputs("masked", IMAGES, EMB, index=[1]), ValueError, "index"),
    ("a negative seed", lambda: task_inputs("masked", IMAGES, EMB, seed=-1), ValueError, "seed"),
    ("negative noise variance", lambda: draw_noisy(IMAGES, variance=-0.1), ValueError, "variance"),
    ("decoded images of another shape", lambda: reconstruction_errors(IMAGES[:, :2], IMAGES), ValueError, "decoded must have shape"),
    ("an unknown fit backend", lambda: spinsa.fit_pseudolikelihood(X, backend="newton"), ValueError, "backend"),
    ("an unknown preset", lambda: spinsa.fit_pseudolikelihood(X, preset="vaswani2017"), ValueError, "damico2024"),
    ("a negative learning rate", lambda: FitConfig(lr=-1.0), ValueError, "lr"),
    ("an unknown fit option", lambda: spinsa.fit_pseudolikelihood(X, learning_rate=0.1), ValueError, "unknown fit option"),
    ("no patterns to fit", lambda: spinsa.fit_pseudolikelihood(X[:0], backend="lbfgs"), ValueError, "empty"),
    ("J0 of the wrong shape", lambda: spinsa.fit_pseudolikelihood(X, J0=J[:4]), ValueError, "J0"),
    ("a zero score clamp", lambda: FitConfig(score_clamp=0.0), ValueError, "score_clamp"),
    ("a learning-rate decay above 1", lambda: FitConfig(lr_decay=2.0), ValueError, "lr_decay"),
    ("site sampling with L-BFGS", lambda: FitConfig(backend="lbfgs", site_sampling="one"), ValueError, "site_sampling"),
    ("NaN couplings in the objective", lambda: spinsa.pl_loss_and_grad(X, nan(J), 1.0), ValueError, "NaN"),
    ("a fit too big for the memory", lambda: estimate_memory(10**9, 196, 8).check(host_available=2**30), InsufficientMemoryError, "needs about"),
    ("a pixel mask that is not bool", lambda: references.mean_fill(IMAGES, np.zeros((3, 4, 4)), IMAGES[0]), ValueError, "pixel_mask"),
    ("more neighbours than images", lambda: references.knn_mean(IMAGES, IMAGES, 3), ValueError, "k must be"),
    ("a blur of width 0", lambda: references.gaussian_blur(IMAGES, 0.0), ValueError, "sigma"),
    ("an unknown config section", lambda: ExperimentConfig.from_dict({"dynamic": {}}), ValueError, "unknown key 'dynamic'"),
    ("a misspelt fit key", lambda: ExperimentConfig.from_toml("[fit]\nlamda = 5.0\n"), ValueError, "unknown key 'lamda'"),
    ("a fit value of the wrong type", lambda: ExperimentConfig.from_toml('[fit]\nlam = "five"\n'), ValueError, "lam"),
    ("n_train and per_class together", lambda: DataSection(n_train=10, per_class=1), ValueError, "exclusive"),
    ("lam_eval = 0", lambda: DynamicsSection(lam_eval=0.0), ValueError, "lam"),
    ("an unknown dynamics preset", lambda: DynamicsSection(preset="x"), ValueError, "preset"),
    ("a mask fraction of 0", lambda: TasksSection(mask_fraction=0.0), ValueError, "mask_fraction"),
    ("invalid TOML", lambda: read_toml("[fit\n"), ValueError, "not valid TOML"),
    ("a missing TOML file", lambda: read_toml("missing.toml"), FileNotFoundError, "does not exist"),
    ("a subset larger than the data", lambda: subsample(np.arange(10) % 2, n=11), ValueError, "between 1 and 10"),
    ("an unknown split", lambda: load_mnist("validation"), ValueError, "split"),
    ("overlaps with patterns of another N", lambda: spinsa.analysis.overlaps(X, X[:, :4]), ValueError, "xi must have shape"),
    ("an attractor search of 0 steps", lambda: spinsa.analysis.find_attractors(J, 1.0, X, 0), ValueError, "steps"),
    # issue 29, findings 1-8: one finiteness rule at the boundaries
    ("float64 lam beyond the softmax's range (run)", lambda: spinsa.run(X64, J64, 1e32, 3), ValueError, "too large for float64"),
    ("float64 lam beyond the softmax's range (local_fields)", lambda: spinsa.local_fields(X64, J64, 1e32), ValueError, "too large for float64"),
    ("float64 lam beyond the softmax's range (step)", lambda: spinsa.step(X64, J64, 1e32), ValueError, "too large for float64"),
    ("float64 lam beyond the softmax's range (energy)", lambda: spinsa.energy(X64, J64, 1e300), ValueError, "too large for float64"),
    ("float64 lam beyond the softmax's range (attention)", lambda: spinsa.attention(X64, J64, 1e32), ValueError, "too large for float64"),
    ("float32 lam whose energies overflow", lambda: spinsa.energy(X, J, 1e-40), ValueError, "too small for float32"),
    ("float32 lam that rounds to zero", lambda: spinsa.run(X, J, 1e-300, 2), ValueError, "too small for float32"),
    ("gamma that overflows float32 (run)", lambda: spinsa.run(X, J, 1.0, 3, gamma=1e39), ValueError, "gamma = 1e+39 is too large"),
    ("gamma that overflows float32 (step)", lambda: spinsa.step(X, J, 1.0, gamma=-1e39), ValueError, "gamma"),
    ("gamma that overflows float64 (async)", lambda: spinsa.async_sweep(X64, J64, 1.0, gamma=1e200), ValueError, "gamma"),
    ("spins that grow without a norm", lambda: spinsa.run(X, J, 1.0, 8, gamma=1e8, norm="none"), spinsa.NonFiniteResultError, "norm = 'none'"),
    ("random couplings of a scale beyond float32", lambda: spinsa.random_couplings(6, 3, scale=1e39), spinsa.NonFiniteResultError, "scale = 1e+39"),
    ("a series beyond the range it can normalise", lambda: split_series(SERIES * 1e300, 5, rows=(100, 50, 50)), ValueError, "outside the range"),
    ("a series of subnormal values", lambda: split_series(SERIES * 1e-310, 5, rows=(100, 50, 50)), ValueError, "below the resolution"),
    ("a split of two parts", lambda: split_series(SERIES, 5, rows=(50, 20)), ValueError, "three counts"),
    ("cosines of zero couplings", lambda: spinsa.analysis.pairwise_cosines([ZERO, J]), ValueError, "Js[0] is all zeros"),
    ("spectra of zero couplings", lambda: spinsa.analysis.coupling_spectra([J, ZERO]), ValueError, "Js[1] is all zeros"),
    ("zero couplings against Hebb", lambda: spinsa.analysis.compare_with_hebbian(ZERO, X), ValueError, "J is all zeros"),
    ("a fit at lam 1e39 in float32", fit(lam=1e39), ValueError, "--set fit.dtype=float64"),
    ("a fit at lam 1e-40 in float32", fit(lam=1e-40), ValueError, "too small for float32"),
    ("a fit at lam 1e-300 in float32", fit(lam=1e-300), ValueError, "too small for float32"),
    ("a fit at lam 1e300 in float64", fit(lam=1e300, dtype="float64"), ValueError, "too large for float64"),
    ("a row-constrained fit at lam 1e30", fit(lam=1e30, constraint="row"), ValueError, "too large for float32"),
    ("a torch fit at lam 1e39", fit(lam=1e39, backend="torch"), ValueError, "too large for float32"),
    ("a CD fit at lam 1e39", fit(lam=1e39, backend="torch", method="cd"), ValueError, "too large for float32"),
    ("a BPTT fit at lam 1e39", fit(lam=1e39, backend="torch", method="bptt"), ValueError, "too large for float32"),
    ("BPTT noise beyond float32", fit(backend="torch", method="bptt", task="denoise", noise_std=1e30), ValueError, "noise_std = 1e+30"),
    ("CD with k = 10**12 (finding 19)", fit(backend="torch", method="cd", chain="dynamics", k=10**12), ValueError, "k = 1000000000000"),
    ("BPTT unrolled 10**12 steps", fit(backend="torch", method="bptt", tau_max=10**12), InsufficientMemoryError, "needs about"),
    ("a fit whose lr blows J up", fit(backend="torch", lr=1e30, epochs=2, constraint="l2"), spinsa.NonFiniteResultError, "lr = 1e+30"),
]  # fmt: skip


@pytest.mark.parametrize("what, call, error, phrase", API, ids=[c[0] for c in API])
def test_api_bad_input(what, call, error, phrase):
    with pytest.raises(error) as info:
        call()
    assert phrase in str(info.value), f"{what}: {info.value}"


@pytest.mark.parametrize("update", ["sync", "async"])
def test_zero_samples_give_empty_results_of_the_right_shape(update):
    none = X[:0]  # (0, N, d)
    traj = spinsa.run(none, J, 1.0, 3, update=update)
    assert traj.states.shape == (4, 0, 5, 2) and traj.energies.shape == (4, 0)
    assert spinsa.step(none, J, 1.0).shape == (0, 5, 2)
    assert spinsa.energy(none, J, 1.0).shape == (0,)
    assert spinsa.site_energies(none, J, 1.0).shape == (0, 5)
    assert spinsa.local_fields(none, J, 1.0).shape == (0, 5, 2)
    assert spinsa.attention(none, J, 1.0).shape == (0, 5, 5)


def test_an_attractor_search_from_no_samples_is_empty():
    """Finding 7: zero initial conditions give an empty report, not a reshape error."""
    report = spinsa.analysis.find_attractors(J, 1.0, X[:0], 10, patterns=X)
    assert report.labels.shape == (0,) and report.states.shape == (0, 5, 2)
    assert report.basin_size.shape == (0,) and report.fraction_unconverged == 0.0


def test_matrix_is_large_enough():
    assert len(API) + len(CLI) >= 60


# --------------------------------------------------------------------------- files
def _files(tmp):
    paths = {
        "notes": tmp / "notes.h5",
        "foreign": tmp / "foreign.h5",
        "newer": tmp / "newer.h5",
        "truncated": tmp / "truncated.h5",
        "changed": tmp / "changed.h5",
        "run": tmp / "run.h5",
    }
    paths["notes"].write_text("not an HDF5 file\n")
    with h5py.File(paths["foreign"], "w") as f:
        f["x"] = np.zeros(3)
    io.write_file(paths["newer"], {"x": np.zeros(3)}, kind="fit")
    with h5py.File(paths["newer"], "a") as f:
        f.attrs["schema"] = "spinsa/99"
    io.write_file(tmp / "whole.h5", {"x": np.zeros(100_000)}, kind="fit")
    data = (tmp / "whole.h5").read_bytes()
    paths["truncated"].write_bytes(data[: len(data) // 2])
    (tmp / "whole.h5").rename(paths["changed"])
    flip_byte(paths["changed"], "x")
    return paths


@pytest.mark.parametrize(
    "name, reason",
    [("notes", "not-hdf5"), ("foreign", "foreign"), ("newer", "newer-schema"),
     ("truncated", "corrupt"), ("changed", "corrupt"), ("missing", "missing")],
)  # fmt: skip
def test_io_refuses_what_it_cannot_read(tmp_path, name, reason):
    paths = _files(tmp_path)
    path = paths.get(name, tmp_path / "missing.h5")
    with pytest.raises(io.SpinsaFileError) as info:
        io.verify(path)
    assert info.value.reason == reason and str(path) in str(info.value)


def test_io_refuses_to_overwrite(tmp_path):
    io.write_file(tmp_path / "a.h5", {"x": np.zeros(2)}, kind="fit")
    with pytest.raises(FileExistsError, match="overwrite"):
        io.write_file(tmp_path / "a.h5", {"x": np.zeros(2)}, kind="fit")


def test_an_empty_cache_says_how_to_fill_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPINSA_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError, match="spinsa data fetch mnist"):
        load_mnist("test", n=2)


# --------------------------------------------------------------------------- command line
RUNNER = """
import contextlib, io, json, sys, traceback
from spinsa.cli import main
out = []
for argv in json.load(open(sys.argv[1])):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
        except BaseException:
            code, _ = "raised", err.write(traceback.format_exc())
    out.append([code, err.getvalue()])
print(json.dumps(out))
"""

CONFIG_OK = '[data]\ndataset = "synthetic"\nn_train = 20\nn_test = 4\nimage_size = 8\n'
CLI = [
    # (what, argv with {tmp} for the directory, exit status, phrase of the message)
    ("patterns that are not HDF5", "train --patterns {tmp}/notes.h5 -o {tmp}/x.h5", 4, "not an HDF5 file"),
    ("a missing patterns file", "train --patterns {tmp}/missing.npy -o {tmp}/x.h5", 4, "does not exist"),
    ("patterns of an unknown format", "train --patterns {tmp}/c.toml -o {tmp}/x.h5", 2, "unknown format"),
    ("an output that is a directory", "train --random-patterns 6 3 2 --max-iter 1 -o {tmp}/dir --overwrite --no-progress", 4, "dir"),
    ("an output that exists", "train --random-patterns 6 3 2 -o {tmp}/run.h5", 4, "already exists"),
    ("an output in a missing directory", "train --random-patterns 6 3 2 --max-iter 1 -o {tmp}/no/x.h5 --no-progress", 4, "no"),
    ("an output on a read-only file system", "train --random-patterns 6 3 2 --max-iter 1 -o /proc/spinsa-x.h5 --no-progress", 4, "spinsa-x.h5"),
    ("a fit too big for the memory", "train --random-patterns 10000000 196 8 -o {tmp}/x.h5", 5, "needs about"),
    ("its estimate, which needs no data", "train --random-patterns 100000000 196 8 --estimate -o {tmp}/x.h5", 0, ""),
    ("a misspelt key in --set", "train {tmp}/c.toml --set fit.lamda=2 -o {tmp}/x.h5", 2, "lamda"),
    ("--set without a value", "train {tmp}/c.toml --set fit.lam -o {tmp}/x.h5", 2, "KEY=VALUE"),
    ("an invalid TOML config", "train {tmp}/bad.toml -o {tmp}/x.h5", 2, "not valid TOML"),
    ("an unknown key in the config", "train {tmp}/unknown.toml -o {tmp}/x.h5", 2, "unknown key"),
    ("a value of the wrong type", "train {tmp}/wrongtype.toml -o {tmp}/x.h5", 2, "lam"),
    ("a missing config file", "train {tmp}/none.toml -o {tmp}/x.h5", 4, "does not exist"),
    ("a patch that does not tile", "train {tmp}/c.toml --patch 3 -o {tmp}/x.h5", 2, "does not tile"),
    ("an unknown backend", "train {tmp}/c.toml --backend newton -o {tmp}/x.h5", 2, "backend"),
    ("an unknown option", "train {tmp}/c.toml --lamda 5 -o {tmp}/x.h5", 2, "unrecognized"),
    ("no output", "train {tmp}/c.toml", 2, "required"),
    ("MNIST without a cache and without network", "train --dataset mnist --per-class 2 -o {tmp}/x.h5 --no-progress", 3, "mnist"),
    ("evaluating a missing file", "evaluate {tmp}/missing.h5 --task masked", 4, "no such file"),
    ("evaluating a text file", "evaluate {tmp}/notes.h5 --task masked", 4, "not an HDF5 file"),
    ("evaluating a foreign HDF5 file", "evaluate {tmp}/foreign.h5 --task masked", 4, "not a spinsa file"),
    ("evaluating a truncated file", "evaluate {tmp}/truncated.h5 --task masked", 4, "truncated or corrupt"),
    ("evaluating a file of a newer spinsa", "evaluate {tmp}/newer.h5 --task masked", 4, "newer"),
    ("evaluating a run whose couplings changed on disk", "evaluate {tmp}/flipped.h5 --task masked", 4, "checksum failed"),
    ("evaluating a fit file, not a run file", "evaluate {tmp}/run.h5 --task masked", 2, "kind"),
    ("an unknown task", "evaluate {tmp}/run.h5 --task inpaint", 2, "invalid choice"),
    ("analysing a text file", "analyze {tmp}/notes.h5", 4, "not an HDF5 file"),
    ("an unknown analysis", "analyze {tmp}/run.h5 --only nope", 2, "unknown analysis"),
    ("plotting a missing file", "plot {tmp}/missing.h5", 4, "no such file"),
    ("plotting a fit file, which has no figures", "plot {tmp}/run.h5", 2, "spinsa train CONFIG.toml"),
    ("plotting a run without results", "plot {tmp}/flipped-free.h5", 2, "neither evaluations nor analyses"),
    ("--quick with --config", "reproduce --quick --config {tmp}/c.toml", 2, "not both"),
    ("a reproduce directory that is a file", "reproduce --quick --out {tmp}/notes.h5", 4, "not a directory"),
    ("an unknown baseline recipe", "reproduce --baselines huge", 2, "invalid choice"),
    ("verifying an unknown data set", "data verify cifar", 2, "unknown data set"),
    ("fetching from a missing directory", "data fetch fashion-mnist --from {tmp}/nowhere", 3, "nowhere"),
    ("a demo with a corruption above 1", "demo --corrupt 2", 2, "--corrupt"),
    ("an unknown benchmark", "bench --only everything", 2, "invalid choice"),
    ("scanning a missing spec", "scan run {tmp}/missing.toml --out {tmp}/scan", 4, "missing.toml"),
    ("no command at all", "--debugx", 2, "unrecognized"),
]  # fmt: skip


@pytest.mark.slow
def test_cli_bad_input_matrix(tmp_path):
    """Every case in one subprocess: no traceback on standard error, the documented status."""
    _files(tmp_path)
    (tmp_path / "dir").mkdir()
    (tmp_path / "c.toml").write_text(CONFIG_OK)
    (tmp_path / "bad.toml").write_text("[fit\nlam = 5\n")
    (tmp_path / "unknown.toml").write_text(CONFIG_OK + "[fit]\nlamda = 5.0\n")
    (tmp_path / "wrongtype.toml").write_text(CONFIG_OK + '[fit]\nlam = "five"\n')
    spinsa.fit_pseudolikelihood(X, backend="lbfgs", max_iter=1).save(tmp_path / "run.h5")
    config = ExperimentConfig.from_toml(tmp_path / "c.toml").with_overrides({"fit.max_iter": 2})
    train(config, tmp_path / "flipped.h5")
    shutil.copy(tmp_path / "flipped.h5", tmp_path / "flipped-free.h5")  # before the flip
    flip_byte(tmp_path / "flipped.h5", "J")
    argvs = [c[1].format(tmp=tmp_path).split() for c in CLI]
    (tmp_path / "argv.json").write_text(json.dumps(argvs))
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER))
    env = {
        **os.environ,
        "SPINSA_DATA": str(tmp_path / "empty-cache"),  # nothing fetched
        "PIP_CONFIG_FILE": os.devnull,  # and no index to fetch from
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
        "MPLBACKEND": "Agg",
        # this checkout's spinsa, not an installed one (the runner's directory comes first)
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),  # fmt: skip
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "argv.json")],
        capture_output=True, text=True, env=env, check=True, timeout=600,
    )  # fmt: skip
    results = json.loads(done.stdout.strip().splitlines()[-1])
    failures = []
    for (what, argv, status, phrase), (code, err) in zip(CLI, results, strict=True):
        if "Traceback" in err or code != status or phrase not in err:
            failures.append(f"{what} ({argv}): status {code}, wanted {status}\n{err}")
        else:
            try:
                _check_advice(err, argv.format(tmp=tmp_path).split())
            except AssertionError as exc:
                failures.append(f"{what} ({argv}): {exc}")
    assert not failures, "\n\n".join(failures)


def test_debug_shows_the_traceback(tmp_path):
    from spinsa.cli import main

    with pytest.raises(io.SpinsaFileError):
        main(["--debug", "evaluate", str(tmp_path / "missing.h5"), "--task", "masked"])


def test_a_warning_is_one_line(monkeypatch, capsys):
    import warnings

    from spinsa.cli import basics, main

    def warn(args):  # as dask's "Port 8787 is already in use.\nPerhaps ..." on scan run
        warnings.warn("first line.\nsecond line\n  third", UserWarning, stacklevel=1)

    monkeypatch.setattr(basics, "_cmd_info", warn)
    assert main(["info"]) == 0
    err = capsys.readouterr().err
    assert err == "spinsa info: warning: first line. second line third\n"


def test_interrupt_and_bugs_have_their_own_status():
    from spinsa.cli import EXIT_CODES, explain

    assert EXIT_CODES[explain(KeyboardInterrupt())[0]] == 130
    assert explain(ZeroDivisionError())[0] == ""  # a bug keeps its traceback
    assert EXIT_CODES[explain(MemoryError())[0]] == 5


def test_a_missing_torch_is_one_line_with_the_usage_status(tmp_path, monkeypatch, capsys):
    from spinsa.cli import EXIT_CODES, main

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    argv = ["train", "--random-patterns", "5", "4", "2", "--backend", "torch"]
    code = main([*argv, "-o", str(tmp_path / "fit.h5"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == EXIT_CODES["usage"]
    assert 'pip install "spinsa[torch]"' in err and "Traceback" not in err


# ------------------------------------------------- command line: the newer surfaces (issue 29)
# In-process (spinsa.cli.main), each case refused before any work. ``{tmp}`` is a directory of
# files made once by ``surfaces``; every case also checks that a refused command wrote no -o file.
TRAIN = "train --random-patterns 16 5 3 --max-iter 3 --no-progress --no-checkpoint -o {tmp}/o.h5"
TORCH = TRAIN + " --backend torch --set fit.epochs=1"
SEQ = "sequences run --rows 200 100 100 --context 10 --no-baselines --no-progress -o {tmp}/sq"
BENCH = "bench --quick --only dynamics --no-plain"
SCAN_SPEC = (
    '[scan]\nname = "s"\npoint = "synthetic"\n[patterns]\nn_tokens = 4\nd = 2\n'
    '[dynamics]\nsteps = 2\n[axes]\n"dynamics.lam" = [1.0]\n'
)
CLI_NEW = [
    # findings 1-3, 6, 19: a fit that would give NaN, inf or no end is refused before it starts
    ("finding 1: lam 1e39 in a float32 fit", TRAIN + " --lam 1e39", 2, "--set fit.dtype=float64"),
    ("finding 2: lam 1e-40 in a float32 fit", TRAIN + " --lam 1e-40", 2, "too small for float32"),
    ("finding 6: lam 1e-300 in a float32 fit", TRAIN + " --lam 1e-300", 2, "too small for float32"),
    ("finding 6: lam 1e300 in a float64 fit", TRAIN + " --lam 1e300 --set fit.dtype=float64", 2, "too large for float64"),
    ("a row-constrained fit at lam 1e31", TRAIN + " --lam 1e31 --set fit.constraint=row", 2, "too large"),
    ("a torch fit at lam 1e39", TORCH + " --lam 1e39", 2, "too large for float32"),
    ("a CD fit at lam 1e39", TORCH + " --lam 1e39 --set fit.method=cd", 2, "too large for float32"),
    ("a BPTT fit at lam 1e39", TORCH + " --lam 1e39 --set fit.method=bptt", 2, "too large for float32"),
    ("finding 3: BPTT noise 1e30", TORCH + " --set fit.method=bptt --set fit.task=denoise --set fit.noise_std=1e30", 2, "noise_std = 1e+30"),
    ("finding 19: CD with k = 10**12", TORCH + " --set fit.method=cd --set fit.chain=dynamics --set fit.k=1000000000000", 2, "k = 1000000000000"),
    ("a torch fit whose lr makes J NaN", TORCH + " --set fit.lr=1e30 --set fit.constraint=l2 --set fit.epochs=2", 2, "came out non-finite"),
    # findings 9, 13: bench's --json is checked before the benchmarks run
    ("finding 9: bench --json onto an existing file", BENCH + " --json {tmp}/exists.json", 4, "pass --overwrite"),
    ("finding 13: bench --json not writable", BENCH + " --json /proc/spinsa-bench.json", 4, "cannot write"),
    ("bench --json in a missing directory", BENCH + " --json {tmp}/nowhere/b.json", 4, "does not exist"),
    ("bench --json onto a directory", BENCH + " --json {tmp}/dir", 4, "is a directory"),
    # findings 11, 13, 17: compare
    ("finding 17: compare a default-d run with an explicit --dim 8 (then finding 13: an unwritable -o)", "compare {tmp}/run.h5 {tmp}/run-d8.h5 -o /proc --no-progress", 4, "cannot write in /proc"),
    ("compare runs on another embedding d, naming the default", "compare {tmp}/run.h5 {tmp}/run-d10.h5 -o {tmp}/c1 --no-progress", 2, "(10 vs the default)"),
    ("finding 11: compare --overwrite into a reproduce directory", "compare {tmp}/run.h5 {tmp}/run-d8.h5 -o {tmp}/repro --overwrite --no-progress", 4, "not a comparison's report"),
    ("compare into an earlier comparison", "compare {tmp}/run.h5 {tmp}/run-d8.h5 -o {tmp}/cmp --no-progress", 4, "--overwrite"),
    ("compare of one run", "compare {tmp}/run.h5 -o {tmp}/c2", 2, "at least two"),
    ("compare into a file", "compare {tmp}/run.h5 {tmp}/run-d8.h5 -o {tmp}/exists.json", 4, "is a file"),
    ("compare a fit file", "compare {tmp}/fit.h5 {tmp}/run.h5 -o {tmp}/c3", 2, "kind 'fit'"),
    # finding 14: advice that leads somewhere
    ("finding 14: plot of a fit file names a command that accepts it", "plot {tmp}/fit.h5", 2, "spinsa train CONFIG.toml"),
    ("finding 14: plot of a sequences file", "plot {tmp}/seq.h5", 2, "spinsa sequences run draws"),
    ("finding 14: plot of a comparison", "plot {tmp}/cmp/compare.h5", 2, "spinsa compare draws"),
    ("finding 14: plot --dpi 100000", "plot {tmp}/run.h5 --dpi 100000", 2, "--dpi must be between"),
    ("finding 14: sequences --dim 100000, refused by the fit's memory check", SEQ + " --csv {tmp}/ok.csv --dim 100000", 5, "smaller sizes"),
    ("plot --dpi 0", "plot {tmp}/run.h5 --dpi 0", 2, "--dpi must be between"),
    ("finding 14: sequences -o FILE", SEQ.replace("{tmp}/sq", "{tmp}/exists.json") + " --csv {tmp}/ok.csv", 4, "a directory was expected"),
    ("finding 14: scan --force onto a file", "scan run {tmp}/scan.toml --out {tmp}/exists.json --force", 4, "choose another --out"),
    ("an existing output of a command without --overwrite", "evaluate {tmp}/run.h5 --task masked --out {tmp}/exists.json", 4, "exists"),
    ("finding 10: sequences run into a reproduce directory", SEQ.replace("{tmp}/sq", "{tmp}/repro") + " --csv {tmp}/ok.csv --overwrite", 4, "another command's run"),
    ("sequences run into a comparison", SEQ.replace("{tmp}/sq", "{tmp}/cmp") + " --csv {tmp}/ok.csv", 4, "another command's run"),
    # findings 13, 15, 16: sequences and CSV, refused before the fit
    ("finding 13: sequences --lam-eval 1e300", SEQ + " --csv {tmp}/ok.csv --lam-eval 1e300", 2, "--lam-eval = 1e+300"),
    ("finding 8: sequences --rows of two parts", SEQ.replace("--rows 200 100 100", "--rows 50 20") + " --csv {tmp}/ok.csv", 2, "expected 3 arguments"),
    ("finding 15: CSV values near 1e201", SEQ + " --csv {tmp}/huge.csv", 3, "outside the range"),
    ("finding 15: CSV values near 1e307", SEQ + " --csv {tmp}/huger.csv", 3, "outside the range"),
    ("finding 15: CSV of subnormal values", SEQ + " --csv {tmp}/subnormal.csv", 2, "below the resolution"),
    ("finding 16: a repeated column name", SEQ + " --csv {tmp}/repeated.csv", 3, "more than once"),
    ("finding 16: 1_000 in a CSV", SEQ + " --csv {tmp}/underscore.csv", 3, "digit separators"),
    ("finding 16: sub-second times out of order", SEQ + " --csv {tmp}/subsecond-back.csv", 3, "to the microsecond"),
    ("a CSV column that is not there", SEQ + " --csv {tmp}/ok.csv --column nope", 2, "no column 'nope'"),
    ("a CSV with NaN", SEQ + " --csv {tmp}/nan.csv", 3, "non-finite"),
    # finding 18: data verify
    ("finding 18: data verify on a corrupt data set", "data verify mnist", 3, ""),
    ("data verify of a data set not fetched", "data verify fashion-mnist", 3, ""),
]  # fmt: skip


def _csv(path, values, times=None):
    """A CSV time series: hourly times from 2020 unless given, one value column OT."""
    if times is None:
        times = [str(np.datetime64("2020-01-01T00:00:00") + np.timedelta64(h, "h")) for h in
                 range(len(values))]  # fmt: skip
    path.write_text("date,OT\n" + "".join(f"{t},{float(v)!r}\n" for t, v in zip(times, values)))


@pytest.fixture(scope="module")
def surfaces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("surfaces")
    (tmp / "dir").mkdir()
    (tmp / "exists.json").write_text("{}")
    (tmp / "scan.toml").write_text(SCAN_SPEC)
    spinsa.fit_pseudolikelihood(X, backend="lbfgs", max_iter=1).save(tmp / "fit.h5")
    config = ExperimentConfig.from_dict(read_toml(CONFIG_OK)).with_overrides({"fit.max_iter": 1})
    train(config, tmp / "run.h5")
    train(config.with_overrides({"embedding.d": 8}), tmp / "run-d8.h5")  # the default d of patch 2
    train(config.with_overrides({"embedding.d": 10}), tmp / "run-d10.h5")
    (tmp / "repro").mkdir()
    (tmp / "repro" / "report.md").write_text("# reproduce's report\n")
    io.write_file(tmp / "repro" / "reproduce.h5", {"x": np.zeros(2)}, kind="reproduce")
    (tmp / "cmp").mkdir()
    io.write_file(tmp / "cmp" / "compare.h5", {"x": np.zeros(2)}, kind="comparison")
    io.write_file(tmp / "seq.h5", {"x": np.zeros(2)}, kind="sequences")
    wave = np.sin(np.arange(400) / 5.0) + 0.1 * SERIES[np.arange(400) % 300]
    _csv(tmp / "ok.csv", wave)
    _csv(tmp / "huge.csv", wave * 1e201)
    _csv(tmp / "huger.csv", wave * 1e307)
    _csv(tmp / "subnormal.csv", (wave + 2.0) * 1e-310)
    _csv(tmp / "nan.csv", np.where(np.arange(400) == 7, np.nan, wave))
    (tmp / "repeated.csv").write_text((tmp / "ok.csv").read_text().replace("date,OT", "date,OT,OT")
                                      .replace("\n2", ",1\n2"))  # fmt: skip
    (tmp / "underscore.csv").write_text(
        "date,OT\n2020-01-01 00:00:00,1_000\n2020-01-01 01:00:00,2\n"
    )
    (tmp / "subsecond-back.csv").write_text(
        "date,OT\n2020-01-01 00:00:00.5,1\n2020-01-01 00:00:00.25,2\n2020-01-01 00:00:01,3\n"
    )
    return tmp


def _run_cli(argv, capsys):
    from spinsa.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("what, argv, status, phrase", CLI_NEW, ids=[c[0] for c in CLI_NEW])
def test_cli_newer_surfaces(what, argv, status, phrase, surfaces, capsys, monkeypatch):
    """The documented status, the phrase, one or two lines and no traceback; nothing written."""
    from spinsa import datasets

    monkeypatch.setenv("SPINSA_DATA", str(surfaces / "empty-cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    if "corrupt data set" in what:

        def corrupt(name):
            raise datasets.DataCorruptError(f"{name}: the checksum of its arrays fails")

        monkeypatch.setattr(datasets, "verify", corrupt)
    args = argv.format(tmp=surfaces).split()
    code, err = _run_cli(args, capsys)
    assert code == status and phrase in err and "Traceback" not in err, f"{what}: {code}\n{err}"
    _check_advice(err, args)
    for flag in ("-o", "--json"):  # a refused command leaves no output behind
        if flag in args and status != 0 and not args[args.index(flag) + 1].endswith("exists.json"):
            target = Path(args[args.index(flag) + 1])
            assert not target.is_file() or target.parent.name in ("cmp",), f"{what}: {target}"


def _check_advice(err: str, argv: list[str]) -> None:
    """Every command a message names exists, and every flag it names belongs to the command
    that printed it or to a command it names (finding 14: advice that leads somewhere)."""
    import re

    from spinsa.cli import build_parser, command_options

    parser = build_parser()
    command, options = command_options(parser, argv)
    named = [m.split() for m in re.findall(r"(?<!^)spinsa ((?:[a-z]+ ?){1,2})", err, re.M)]
    subcommands = {c.name for c in _subcommands(parser)}
    for words in (w for w in named if w[0] in subcommands):  # else prose: "a spinsa file"
        name, known = command_options(parser, words)
        options |= known
    options |= set(parser._option_string_actions) | set(argv)  # spinsa's own; the input echoed
    for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", err):
        assert flag in options, f"{command} suggests {flag}, which no command named has\n{err}"


def test_newer_surfaces_cover_every_command():
    """Exit codes as documented, with a case for every subcommand (item 7 of issue 29)."""
    from spinsa.cli import build_parser, command_options

    parser = build_parser()
    commands = {c.name for c in _subcommands(parser)}
    covered = {command_options(parser, c[1].split())[0].split()[0] for c in CLI + CLI_NEW
               if command_options(parser, c[1].split())[0]}  # fmt: skip
    missing = commands - covered - {"info"}  # info takes no input
    assert not missing, f"no bad-input case for: {sorted(missing)}"


def _subcommands(parser):
    import argparse

    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [argparse.Namespace(name=name) for name in subs.choices]


@pytest.mark.parametrize("arrays, attrs", [({"J": np.full((2, 2, 1, 1), np.nan)}, {}),
                                           ({"fit/J": np.zeros((2, 2, 1, 1))}, {"loss": np.inf})])  # fmt: skip
def test_no_file_is_written_with_non_finite_couplings_or_loss(tmp_path, arrays, attrs):
    with pytest.raises(ValueError, match="refusing to write"):
        io.write_file(tmp_path / "x.h5", arrays, attrs, kind="fit")
    assert not (tmp_path / "x.h5").exists()
