"""A scan through a real SLURM scheduler: ``spinsa scan run --cluster slurm`` submits its
Dask workers as batch jobs, and the collected result equals a serial run's.

Runs only where a SLURM controller answers (``sinfo`` with a usable node), e.g. after
``sudo bash scripts/slurm-localhost.sh start``, which starts a one-node cluster on this
machine; skipped otherwise. The jobs run the interpreter running the tests and inherit its
environment (``sbatch`` exports it), so they import the same spinsa; the scan directory is
under pytest's temporary directory, which the jobs see since they run on this machine.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("dask_jobqueue")
xr = pytest.importorskip("xarray")

from spinsa.scan import collect, run_scan  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
USABLE = ("idle", "mixed", "allocated", "completing")


def _slurm_nodes() -> str | None:
    """Why no SLURM can take a job here, or None when a node can."""
    if shutil.which("sinfo") is None:
        return "no SLURM here (no sinfo): start one with scripts/slurm-localhost.sh"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 20 s"
    if out.returncode != 0:
        return f"no SLURM controller answers (sinfo: {out.stderr.strip()})"
    states = out.stdout.split()
    if not any(s.rstrip("*~#!%$@^-+") in USABLE for s in states):
        return f"no SLURM node can take jobs (states: {states or 'none'})"
    return None


pytestmark = [
    pytest.mark.slow,  # about 10 s each: the batch jobs start Python and Dask workers
    pytest.mark.usefixtures("slurm"),
]


@pytest.fixture(scope="module")
def slurm():
    """Skips the module's tests where no SLURM can take a job (asked once, when they run:
    sinfo takes about 9 s to give up on a controller that is down)."""
    reason = _slurm_nodes()
    if reason is not None:
        pytest.skip(reason)


SCAN = """
{top}
[scan]
name = "slurm-real"
point = "synthetic"

[patterns]
n_tokens = 8
d = 3

[dynamics]
steps = 5

[axes]
"dynamics.lam" = [1.0, 4.0]
seed = {{range = 3}}

[cluster]
cores = 1
processes = 1
memory = "2GB"
walltime = "00:10:00"
job_name = "{job_name}"
jobs = 2
"""


def _scan(tmp_path, job_name: str, sleep: float = 0.0) -> Path:
    path = tmp_path / "scan.toml"
    path.write_text(textwrap.dedent(SCAN.format(top=f"sleep = {sleep}", job_name=job_name)))
    return path


def _spinsa_run(path: Path, out: Path) -> subprocess.Popen:
    """``spinsa scan run PATH --out OUT --cluster slurm`` in a new process whose jobs inherit
    its environment (sbatch's default ``--export=ALL``): this checkout's spinsa."""
    pythonpath = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    cmd = [sys.executable, "-m", "spinsa.cli", "scan", "run", str(path), "--out", str(out),
           "--cluster", "slurm", "--no-progress"]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=path.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen, job_name: str, timeout: float) -> str:
    """The command's output once it ended; after ``timeout`` s it is killed, its jobs
    cancelled, and the test fails (rather than leave jobs on the cluster)."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        subprocess.run(["scancel", "-n", job_name], capture_output=True)
        pytest.fail(f"spinsa scan run did not end in {timeout} s: {proc.communicate()[0]}")


def _job_states(job_name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", job_name, "-o", "%T"], capture_output=True)
    return out.stdout.decode().split()


def test_scan_on_slurm_equals_serial(tmp_path):
    path = _scan(tmp_path, "spinsa-test")
    out = tmp_path / "slurm"
    proc = _spinsa_run(path, out)
    stdout = _finish(proc, "spinsa-test", timeout=300)
    assert proc.returncode == 0, stdout
    assert "slurm cluster: 2 jobs × 1 worker, 1 thread per point" in stdout, stdout
    logs = sorted((out / "dask-logs").glob("spinsa-test-*.err"))  # JOB_NAME-JOBID.err
    assert logs, "no job wrote to dask-logs/: did SLURM start the workers?"
    # a worker joined the scan's scheduler (the second job may start after the last point)
    assert any("Registered to:" in log.read_text() for log in logs), logs[0].read_text()
    assert "RUNNING" not in _job_states("spinsa-test"), "the scan left its jobs running"

    serial = run_scan(path, tmp_path / "serial", cluster="serial", progress=False)
    assert (serial.n_run, serial.n_failed) == (6, 0)
    xr.testing.assert_identical(collect(out, None), collect(tmp_path / "serial", None))


def test_interrupted_scan_cancels_its_jobs_and_says_so(tmp_path):
    path = _scan(tmp_path, "spinsa-test-int", sleep=60.0)  # no point ends before the signal
    proc = _spinsa_run(path, tmp_path / "out")
    deadline = time.monotonic() + 120
    while _job_states("spinsa-test-int").count("RUNNING") < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.5)
    if time.monotonic() >= deadline:
        _finish(proc, "spinsa-test-int", timeout=0)  # fails, after cleaning up
    time.sleep(2)  # the workers start and take their points
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    stdout = _finish(proc, "spinsa-test-int", timeout=120)
    assert proc.returncode == 130, stdout  # not dask-jobqueue's silent status 0
    assert "interrupted" in stdout and "run it again to resume" in stdout, stdout
    assert "RUNNING" not in _job_states("spinsa-test-int"), "Ctrl-C left the jobs running"
