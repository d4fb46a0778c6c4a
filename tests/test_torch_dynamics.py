"""The dynamics in torch (spinsa._torch_dynamics) against the numba kernels and plain numpy.

On the CPU (torch's CPU build) both paths run in one process: float32 agrees to 1e-5, float64
to 1e-10. Tests marked ``gpu`` run the same comparisons on CUDA where a GPU is present.
"""

import numpy as np
import pytest
import reference as ref
from tiny_configs import TINY

import spinsa
from spinsa import _torch_dynamics as td
from spinsa import io
from spinsa.damico import damico_run
from spinsa.experiments import ExperimentConfig
from spinsa.experiments.pipeline import evaluate_task, load_images, run_dynamics

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

NORMS = ("sphere", "layernorm", "none")
TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-10, atol=1e-10)}


def system(dtype, P=13, N=9, d=8, seed=0):
    """Unit spins and couplings of norm ~1 per block (a few steps stay well conditioned)."""
    x, J = ref.random_system(np.random.default_rng(seed), P=P, N=N, d=d, scale=0.8)
    return x.astype(dtype), J.astype(dtype)


def close(a, b, dtype, scale=1.0):
    """a == b to the tolerance of ``dtype``, relative to ``scale`` (the size of the values)."""
    tol = TOL[dtype]
    np.testing.assert_allclose(a, b, rtol=tol["rtol"], atol=tol["atol"] * scale)


# ------------------------------------------------------------------- eq. 1
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("update", ["sync", "async"])
@pytest.mark.parametrize("norm", NORMS)
def test_run_matches_numba(dtype, update, norm):
    x, J = system(dtype)
    steps = 3 if dtype == np.float32 else 6  # float32 rounding grows with the steps
    kw = dict(norm=norm, update=update, seed=5, record_every=2, gamma=0.7)
    a = spinsa.run(x, J, 1.5, steps, **kw)
    b = spinsa.run(x, J, 1.5, steps, device="cpu", **kw)
    assert b.states.dtype == a.states.dtype and b.states.shape == a.states.shape
    np.testing.assert_array_equal(b.times, a.times)
    assert b.config == a.config
    close(b.states, a.states, dtype, np.abs(a.states).max())
    close(b.energies, a.energies, dtype, np.abs(a.energies).max())


def test_step_matches_the_plain_formula():
    x, J = system(np.float64)
    b = spinsa.run(x, J, 2.0, 1, gamma=0.5, norm="layernorm", device="cpu")
    np.testing.assert_allclose(b.final, ref.step(x, J, 2.0, 0.5, "layernorm"), atol=1e-12)
    want = ref.site_energies(x, J, 2.0).sum(axis=1)
    np.testing.assert_allclose(b.energies[0], want, rtol=1e-12)


def test_fields_and_energies_match_the_plain_formulas():
    x, J = system(np.float64, P=5)
    by_key, _ = td._couplings(J, torch.device("cpu"))
    h, e = td.fields(torch.as_tensor(x), by_key, 3.0, energies=True)
    np.testing.assert_allclose(h.numpy(), ref.local_fields(x, J, 3.0), atol=1e-12)
    np.testing.assert_allclose(e.numpy(), ref.site_energies(x, J, 3.0), rtol=1e-12)
    none, alone = td.fields(torch.as_tensor(x), by_key, 3.0, energies=True, with_fields=False)
    assert none is None
    np.testing.assert_array_equal(alone.numpy(), e.numpy())


def test_chunks_over_samples_do_not_change_results(monkeypatch):
    x, J = system(np.float64, P=11)
    whole = spinsa.run(x, J, 1.0, 2, device="cpu")
    row = J.shape[0] ** 2 * J.shape[2] * 8  # one sample's pair tensor
    monkeypatch.setitem(td.CHUNK_BYTES, "cpu", 3 * row)  # chunks of 3 samples
    chunked = spinsa.run(x, J, 1.0, 2, device="cpu")
    np.testing.assert_allclose(chunked.states, whole.states, atol=1e-14)


def test_masked_zero_spins_and_callback():
    """Zero (masked) spins in x0; the callback sees numpy copies of every state."""
    x, J = system(np.float32)
    x[:, :3] = 0
    seen = {}

    def keep(name):
        return lambda t, s: seen.setdefault(name, []).append((t, s.copy()))

    a = spinsa.run(x, J, 1.0, 3, update="async", seed=1, callback=keep("numba"))
    b = spinsa.run(x, J, 1.0, 3, update="async", seed=1, callback=keep("cpu"), device="cpu")
    close(b.states, a.states, np.float32)
    assert [t for t, _ in seen["cpu"]] == [1, 2, 3]
    for (_, s_a), (_, s_b) in zip(seen["numba"], seen["cpu"]):
        assert isinstance(s_b, np.ndarray) and s_b.shape == x.shape
        close(s_b, s_a, np.float32)


def test_records_are_copies_not_views():
    x, J = system(np.float32)
    b = spinsa.run(x, J, 1.0, 3, update="async", seed=2, device="cpu")
    assert not np.array_equal(b.states[1], b.states[3])  # an in-place sweep must not leak


# ---------------------------------------------------------------- the notebook's
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["plain", "mask", "clamp_visible"])
def test_damico_matches_numba_and_numpy(dtype, case):
    x, J = system(dtype, N=12)
    mask = None
    if case != "plain":
        mask = np.random.default_rng(3).random(x.shape[:2]) < 0.3
        x = np.where(mask[..., None], 0, x).astype(dtype)
    steps = 2 if dtype == np.float32 else 5
    kw = dict(mask=mask, clamp_visible=case == "clamp_visible")
    a = damico_run(x, J, 1.0, steps, **kw)
    b = damico_run(x, J, 1.0, steps, device="cpu", **kw)
    c = damico_run(x, J, 1.0, steps, fast=False, **kw)
    assert b.dtype == a.dtype
    close(b, a, dtype, np.abs(a).max())
    close(b, c, dtype, np.abs(a).max())
    if case == "clamp_visible":
        np.testing.assert_array_equal(b[~mask], x[~mask])


def test_damico_clamps_the_scores():
    """Large scores: the clamp at 20 decides the weights (both paths clamp alike)."""
    x, J = system(np.float64, N=10)
    a = damico_run(x, 3.0 * J, 4.0, 3, clamp=2.0)
    b = damico_run(x, 3.0 * J, 4.0, 3, clamp=2.0, device="cpu")
    np.testing.assert_allclose(b, a, atol=1e-10)
    assert not np.allclose(b, damico_run(x, 3.0 * J, 4.0, 3, device="cpu"), atol=1e-3)


def test_damico_callback():
    x, J = system(np.float32)
    seen = []
    out = damico_run(x, J, 1.0, 2, device="cpu", callback=lambda t, s: seen.append((t, s)))
    assert [t for t, _ in seen] == [1, 2]
    np.testing.assert_array_equal(seen[-1][1], out)


# ------------------------------------------------------------------- devices
def test_default_and_numba_are_the_same_path():
    x, J = system(np.float32)
    a = spinsa.run(x, J, 1.0, 3)
    for device in ("numba", None):
        np.testing.assert_array_equal(spinsa.run(x, J, 1.0, 3, device=device).states, a.states)
    if not torch.cuda.is_available():  # auto: numba where torch sees no GPU
        np.testing.assert_array_equal(spinsa.run(x, J, 1.0, 3, device="auto").states, a.states)


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "", 0, "CPU"])
def test_unknown_device_lists_the_known_ones(device):
    x, J = system(np.float32)
    with pytest.raises(ValueError, match="'numba'.*'auto'.*'cpu'.*'cuda'"):
        spinsa.run(x, J, 1.0, 1, device=device)
    with pytest.raises(ValueError, match="device must be one of"):
        damico_run(x, J, 1.0, 1, device=device)


def test_cuda_without_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    x, J = system(np.float32)
    for run in (spinsa.run, damico_run):
        with pytest.raises(ValueError, match="CUDA is not available.*use device='cpu'"):
            run(x, J, 1.0, 1, device="cuda")


def test_bad_input_is_refused_before_any_device_work():
    x, J = system(np.float32)
    with pytest.raises(ValueError, match="lam"):
        spinsa.run(x, J, -1.0, 1, device="cpu")
    with pytest.raises(ValueError, match="mask"):
        damico_run(x, J, 1.0, 1, mask=np.zeros(3, bool), device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("update", ["sync", "async"])
def test_cuda_matches_numba(update):
    x, J = system(np.float32, P=300, N=30)
    a = spinsa.run(x, J, 1.0, 3, update=update, seed=0)
    b = spinsa.run(x, J, 1.0, 3, update=update, seed=0, device="cuda")
    close(b.states, a.states, np.float32)
    close(b.energies, a.energies, np.float32, np.abs(a.energies).max())
    mask = np.random.default_rng(0).random(x.shape[:2]) < 0.3
    a = damico_run(x, J, 1.0, 2, mask=mask, clamp_visible=True)
    close(damico_run(x, J, 1.0, 2, mask=mask, clamp_visible=True, device="cuda"), a, np.float32)


# ------------------------------------------------------------- experiments
def test_config_device_round_trips_and_stays_out_at_its_default():
    assert "device" not in TINY.to_dict()["dynamics"]  # stored configs as before
    cfg = TINY.with_overrides({"dynamics.device": "cuda:1"})
    assert cfg.to_dict()["dynamics"]["device"] == "cuda:1"
    assert ExperimentConfig.from_dict(cfg.to_dict()) == cfg
    text = '[dynamics]\ndevice = "cpu"\npreset = "damico2024"\n'
    assert ExperimentConfig.from_toml(text).dynamics.device == "cpu"  # both presets
    with pytest.raises(ValueError, match="dynamics.device must be one of"):
        TINY.with_overrides({"dynamics.device": "tpu"})


def test_a_file_without_the_field_reads_as_numba(tmp_path):
    path = io.write_file(tmp_path / "f.h5", {"a": np.zeros(1)}, kind="fit", config=TINY)
    assert "device" not in io.read(path).config["dynamics"]
    assert ExperimentConfig.from_dict(io.read(path).config).dynamics.device == "numba"


def test_stage_done_whatever_device_computed_it(tmp_path):
    from spinsa.experiments.stages import ConfigChangedError, stage_done

    on_gpu = TINY.with_overrides({"dynamics.device": "cuda"})
    path = io.write_file(tmp_path / "s.h5", {"a": np.zeros(1)}, kind="fit", config=on_gpu)
    assert stage_done(path, TINY.to_dict())
    with pytest.raises(ConfigChangedError, match="dynamics.steps"):
        stage_done(path, TINY.with_overrides({"dynamics.steps": 9}).to_dict())


@pytest.mark.parametrize(  # the notebook's preset has no asynchronous update
    "preset, update", [("design", "sync"), ("design", "async"), ("damico2024", "sync")]
)
def test_run_dynamics_with_clamp_visible_on_torch(preset, update):
    cfg = TINY.with_overrides(
        {"dynamics.preset": preset, "dynamics.update": update, "tasks.clamp_visible": True}
    )
    x, J = system(np.float32, N=10)
    mask = np.random.default_rng(4).random(x.shape[:2]) < 0.3
    x = np.where(mask[..., None], 0, x).astype(np.float32)
    got = {}
    for device in ("numba", "cpu"):
        c = cfg.with_overrides({"dynamics.device": device})
        run_dynamics(c, J, x, mask, 3, lambda t, s, d=device: got.setdefault(d, []).append(s))
    assert len(got["cpu"]) == 3
    for a, b in zip(got["numba"], got["cpu"]):
        close(b, a, np.float32)
        np.testing.assert_array_equal(b[~mask], x[~mask])


def test_evaluation_on_torch_matches_numba(run_file):
    J = io.read_array(run_file, "J")
    images = load_images(TINY)
    a = evaluate_task(TINY, J, images, "masked")
    b = evaluate_task(TINY.with_overrides({"dynamics.device": "cpu"}), J, images, "masked")
    np.testing.assert_allclose(b.errors.all, a.errors.all, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(b.final_period, a.final_period)


# ------------------------------------------------------------------ the bench
def test_bench_case_runs_and_checks_its_result():
    from spinsa import bench

    res = bench.bench_torch_dynamics(P=6, N=10, d=4, steps=1, repeat=1)
    assert {"fast", "plain", "max_abs_diff"} <= set(res) and res["max_abs_diff"] < 1e-5
    assert res["fast"].name.startswith("spinsa.run (torch") and res["plain"].gflops > 0
    fast = bench.Timing("spinsa.run (torch, cuda)", 4.0, 2000.0)
    runs = [("torch dynamics on the GPU: N=196, d=8, P=10000, T=100, float32", {"fast": fast}, "")]
    lines = bench.gpu_targets(runs, peak=10_000.0)
    assert [ok for _, ok in lines] == [True, False] and "20 %" in lines[1][0]


def test_evaluate_command_on_torch(run_file, tmp_path, capsys):
    from spinsa.cli import main
    from spinsa.io.results import read_evaluation

    out = tmp_path / "e.h5"
    assert main(["evaluate", str(run_file), "--task", "masked", "--device", "cpu",
                 "--out", str(out), "--no-progress"]) == 0  # fmt: skip
    assert ExperimentConfig.from_dict(io.read(out).config).dynamics.device == "cpu"
    want = read_evaluation(run_file, "masked")[0]["errors"]["all"]
    got = read_evaluation(out, "masked")[0]["errors"]["all"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert main(["evaluate", str(run_file), "--task", "masked", "--device", "tpu",
                 "--out", str(tmp_path / "f.h5")]) == 2  # fmt: skip
    assert "dynamics.device must be one of" in capsys.readouterr().err


def test_reproduce_refuses_an_unknown_device_before_writing(tmp_path):
    from spinsa.experiments import reproduce

    with pytest.raises(ValueError, match="dynamics.device must be one of"):
        reproduce(tmp_path / "r", device="gpu", log=None)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("P, steps", [(4, 0), (0, 2)])
def test_no_steps_and_no_samples(P, steps):
    x, J = system(np.float32, P=4)
    a, b = spinsa.run(x[:P], J, 1.0, steps), spinsa.run(x[:P], J, 1.0, steps, device="cpu")
    assert b.states.shape == a.states.shape and b.energies.shape == a.energies.shape
    close(b.states, a.states, np.float32)
    close(b.energies, a.energies, np.float32, max(1.0, np.abs(a.energies).max(initial=0)))
    assert damico_run(x[:P], J, 1.0, steps, device="cpu").shape == (P, *x.shape[1:])
