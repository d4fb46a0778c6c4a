"""Scans on a real Dask LocalCluster (2 worker processes × 1 thread).

Parallel results equal a serial run; a worker killed mid-point has its point rescheduled;
a client killed mid-scan leaves its finished files and a re-run runs only the missing
points, to a collected dataset identical to that of an uninterrupted scan; an existing
scheduler's address works; the SLURM job script carries the options.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dask.distributed")
xr = pytest.importorskip("xarray")

import cloudpickle  # noqa: E402

from spinsa import io  # noqa: E402
from spinsa.scan import Axis, PointKind, ScanSpec, collect, run_scan  # noqa: E402
from spinsa.scan.kinds import set_dotted  # noqa: E402

# the workers cannot import this test module: its point functions travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCAN = """
{top}
[scan]
name = "dask-test"
point = "synthetic"

[patterns]
n_tokens = 8
d = 3

[dynamics]
steps = 5

[axes]
"dynamics.lam" = [1.0, 4.0]
"patterns.n_patterns" = [1, 3]
seed = {{range = {n_seeds}}}
"""


def scan_file(tmp_path, *, sleep=0.0, n_seeds=2, name="scan.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(SCAN.format(top=f"sleep = {sleep}", n_seeds=n_seeds)))
    return path


@pytest.fixture(scope="module")
def client():
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_local_cluster_equals_serial(client, tmp_path):
    path = scan_file(tmp_path)
    par = run_scan(path, tmp_path / "par", client=client, progress=False)
    assert (par.n_points, par.n_run, par.n_failed, par.cluster) == (8, 8, 0, "client")
    ser = run_scan(path, tmp_path / "ser", cluster="serial", progress=False)
    assert ser.n_run == 8
    xr.testing.assert_identical(collect(tmp_path / "par", None), collect(tmp_path / "ser", None))


def _slow_point(config, out_path):
    """Leaves a marker `<seed>-<pid>` when it starts, then sleeps and writes its seed."""
    (Path(config["markers"]) / f"{config['seed']}-{os.getpid()}").touch()
    time.sleep(config["sleep"])
    summary = {"seed_written": np.int64(config["seed"]), "pid": np.int64(os.getpid())}
    io.write_file(out_path, {"summary": summary}, kind="scan-point", config=config)


def _kill_a_running_point(started, killed, deadline):
    """Kill (SIGKILL) the worker process of the first point seen started."""
    while time.monotonic() < deadline and not killed:
        for marker in started.glob("*-*"):
            seed, pid = map(int, marker.name.split("-"))
            os.kill(pid, signal.SIGKILL)
            killed.update(seed=seed, pid=pid)
            return
        time.sleep(0.02)


def test_killed_worker_point_is_rescheduled(client, tmp_path):
    seeds = tuple(range(6))
    spec = ScanSpec(
        "kill",
        "slow",
        {"seed": 0, "sleep": 0.6, "markers": str(tmp_path / "started")},
        (Axis("seed", ("seed",), (seeds,), seeds),),
    )
    out, killed = tmp_path / "out", {}
    (tmp_path / "started").mkdir()
    killer = threading.Thread(
        target=_kill_a_running_point,
        args=(tmp_path / "started", killed, time.monotonic() + 120),
        daemon=True,
    )
    killer.start()
    kind = PointKind("slow", _slow_point, set_dotted)
    report = run_scan(spec, out, client=client, kind=kind, progress=False)
    killer.join()
    assert killed, "no running point was seen"
    assert report.complete and (report.n_run, report.n_failed) == (6, 0)
    pids = {}  # seed -> the processes that started it
    for marker in (tmp_path / "started").iterdir():
        seed, pid = map(int, marker.name.split("-"))
        pids.setdefault(seed, set()).add(pid)
    restarted = [seed for seed, p in pids.items() if len(p) == 2 and killed["pid"] in p]
    assert len(restarted) == 1  # the point running on the killed worker, started again
    ds = collect(out, None)
    np.testing.assert_array_equal(ds["seed_written"].values, seeds)
    assert ds["pid"].sel(seed=restarted[0]).item() != killed["pid"]  # written by the rerun


@pytest.mark.slow  # about 15 s: a second Python process starts its own cluster
def test_killed_client_rerun_runs_only_the_missing_points(client, tmp_path):
    path = scan_file(tmp_path, sleep=0.4, n_seeds=3)  # 12 points
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "spinsa.cli", "scan", "run", str(path), "--out", str(out),
           "--workers", "2", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 180
    while len(list((out / "points").glob("*.h5"))) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the client, its scheduler and its workers
    proc.wait()
    proc.stdout.close()
    time.sleep(0.2)
    n_before = len(list((out / "points").glob("*.h5")))
    assert 2 <= n_before < 12
    report = run_scan(path, out, client=client, progress=False)
    assert (report.n_skipped, report.n_run, report.n_failed) == (n_before, 12 - n_before, 0)
    full = run_scan(path, tmp_path / "full", client=client, progress=False)
    assert full.n_run == 12
    xr.testing.assert_identical(collect(out, None), collect(tmp_path / "full", None))


def _threads_point(config, out_path):
    import numba

    summary = {"numba": np.int64(numba.get_num_threads()), "omp": os.environ["OMP_NUM_THREADS"]}
    summary["trim"] = os.environ.get("MALLOC_TRIM_THRESHOLD_", "unset")  # see MALLOC_ENV
    io.write_file(out_path, {"summary": summary}, kind="scan-point", config=config)


def test_points_run_with_the_cores_of_their_worker(client, tmp_path):
    seeds = (0, 1, 2, 3)
    spec = ScanSpec("threads", "threads", {"seed": 0}, (Axis("seed", ("seed",), (seeds,), seeds),))
    kind = PointKind("threads", _threads_point, set_dotted)
    run_scan(spec, tmp_path / "a", client=client, kind=kind, progress=False)
    expected = max(1, len(os.sched_getaffinity(0)) // 2)  # 2 workers × 1 thread here
    for f in (tmp_path / "a" / "points").glob("*.h5"):
        summary = io.read_group(f, "summary")[0]
        assert summary["numba"] == expected and summary["omp"] == str(expected)
    run_scan(spec, tmp_path / "b", client=client, kind=kind, progress=False, threads_per_point=1)
    for f in (tmp_path / "b" / "points").glob("*.h5"):
        assert io.read_group(f, "summary")[0]["numba"] == 1


def test_local_cluster_workers_keep_freed_memory_in_the_heap(tmp_path):
    from spinsa.scan.run import MALLOC_ENV

    spec = ScanSpec("threads", "threads", {"seed": 0}, (Axis("seed", ("seed",), ((0,),), (0,)),))
    kind = PointKind("threads", _threads_point, set_dotted)
    run_scan(spec, tmp_path, cluster="local", workers=1, kind=kind, progress=False)
    (f,) = (tmp_path / "points").glob("*.h5")
    assert io.read_group(f, "summary")[0]["trim"] == MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]


def test_existing_scheduler_address(client, tmp_path):
    path = scan_file(tmp_path)
    report = run_scan(path, tmp_path / "out", scheduler=client.scheduler.address, progress=False)
    assert report.complete and report.cluster == "scheduler"


SLURM = """
[scan]
point = "synthetic"
[axes]
seed = [0, 1]
[cluster]
cores = 8
processes = 2
memory = "16GB"
walltime = "01:00:00"
queue = "short"
account = "phys"
job_extra_directives = ["--constraint=avx512"]
jobs = 3
"""


def test_slurm_job_script_carries_the_options(tmp_path, capsys):
    pytest.importorskip("dask_jobqueue")
    from spinsa.cli import main

    path = tmp_path / "slurm.toml"
    path.write_text(SLURM)
    assert (
        main(["scan", "plan", str(path), "--cluster", "slurm", "--out", str(tmp_path / "o")]) == 0
    )
    text = capsys.readouterr().out
    for expected in (
        "#SBATCH -p short",
        "#SBATCH -A phys",
        "#SBATCH -t 01:00:00",
        "#SBATCH --constraint=avx512",
        "export OMP_NUM_THREADS=4",
        "export MALLOC_TRIM_THRESHOLD_=268435456",  # freed memory kept in the heap
        "--resources spinsa_point=1",
        "--nworkers 2",
        str(tmp_path / "o" / "dask-logs"),
    ):
        assert expected in text, expected
    assert "4 threads per point" in text


def test_slurm_without_cores_or_with_unknown_options(tmp_path):
    pytest.importorskip("dask_jobqueue")
    from spinsa.scan.run import jobqueue_cluster

    with pytest.raises(ValueError, match="needs the cores of one job"):
        jobqueue_cluster("slurm", {"memory": "1GB"})
    with pytest.raises(ValueError, match="refused the scan file's \\[cluster\\] options.*colour"):
        jobqueue_cluster("slurm", {"cores": 2, "memory": "1GB", "colour": "blue"})


def _fit(config, out_path):
    """A 'fit' that records its process and fails for fit = 0 (a shared stage's stand-in)."""
    if config["fit"] == 0:
        raise RuntimeError("this fit cannot converge")
    io.write_file(out_path, {"value": np.float64(config["fit"])}, kind="fit", config=config)


def _evaluate(config, out_path, fit_path):
    summary = {"result": io.read_array(fit_path, "value") * config["x"]}
    io.write_file(out_path, {"summary": summary}, kind="scan-point", config=config)


SHARED = PointKind(
    "shared-test", _evaluate, set_dotted, fit_config=lambda c: {"fit": c["fit"]}, fit=_fit
)


@pytest.mark.parametrize("where", ["serial", "dask"])
def test_points_wait_for_their_shared_fit_and_share_its_failure(client, tmp_path, where):
    axes = (Axis("fit", ("fit",), ((0, 2, 3),), (0, 2, 3)), Axis("x", ("x",), ((1, 10),), (1, 10)))
    spec = ScanSpec("shared", "shared-test", {"fit": 1, "x": 1}, axes, retries=0)
    run = dict(client=client) if where == "dask" else dict(cluster="serial")
    report = run_scan(spec, tmp_path, kind=SHARED, progress=False, **run)
    assert (report.n_fits, report.n_run, report.n_failed) == (3, 4, 2)  # fit = 0 failed
    assert len(list((tmp_path / "fits").glob("*.h5"))) == 2
    failed = [(tmp_path / "points" / f"{key}.error").read_text() for key in report.failed]
    assert all(t.startswith("its fit failed") and "cannot converge" in t for t in failed)
    ds = collect(tmp_path, None)
    assert ds["result"].sel(fit=3, x=10).item() == 30.0
    assert np.isnan(ds["result"].sel(fit=0)).all()
    again = run_scan(spec, tmp_path, kind=SHARED, progress=False, **run)
    assert again.n_fits == 1 and again.n_run == 0  # only the failed fit is tried again


def test_importing_dask_jobqueue_keeps_ctrl_c_an_interrupt():
    """dask_jobqueue 0.9 replaces the SIGINT handler by sys.exit() when imported: a scan on
    SLURM stopped by Ctrl-C then ended with status 0 and no message (found on a real
    slurmctld, tests/test_scan_slurm_real.py). spinsa's import of it keeps Python's handler."""
    pytest.importorskip("dask_jobqueue")
    code = (
        "import signal, sys\n"
        "from spinsa.scan.run import require\n"
        "require('dask_jobqueue', 'the test')\n"
        "assert 'dask_jobqueue.runner' in sys.modules\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    )
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": repo}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
