"""A scan through a real SLURM scheduler: ``spinsa scan run --cluster slurm`` submits its
Dask workers as batch jobs, and the collected result equals a serial run's.

Runs only where a SLURM controller answers (``sinfo`` with a usable node), e.g. after
``sudo bash scripts/slurm-localhost.sh start``, which starts a one-node cluster on this
machine; skipped otherwise. The jobs run the interpreter running the tests and inherit its
environment (``sbatch`` exports it), so they import the same spinsa; the scan directory is
under pytest's temporary directory, which the jobs see since they run on this machine.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap
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
    pytest.mark.slow,  # about 20 s: the batch jobs start Python and Dask workers
    pytest.mark.skipif(_slurm_nodes() is not None, reason=str(_slurm_nodes())),
]

SCAN = """
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
seed = {range = 3}

[cluster]
cores = 1
processes = 1
memory = "2GB"
walltime = "00:10:00"
job_name = "spinsa-test"
jobs = 2
"""


def test_scan_on_slurm_equals_serial(tmp_path):
    path = tmp_path / "scan.toml"
    path.write_text(textwrap.dedent(SCAN))
    out = tmp_path / "slurm"
    # the jobs inherit this environment (sbatch's default --export=ALL): this checkout's spinsa
    pythonpath = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    cmd = [sys.executable, "-m", "spinsa.cli", "scan", "run", str(path), "--out", str(out),
           "--cluster", "slurm", "--no-progress"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "slurm cluster: 2 jobs × 1 workers" in proc.stdout, proc.stdout
    logs = sorted((out / "dask-logs").glob("spinsa-test-*.err"))  # JOB_NAME-JOBID.err
    assert logs, "no job wrote to dask-logs/: did SLURM start the workers?"
    # a worker joined the scan's scheduler (the second job may start after the last point)
    assert any("Registered to:" in log.read_text() for log in logs), logs[0].read_text()
    job_ids = [re.search(r"-(\d+)\.err$", p.name).group(1) for p in logs]
    running = subprocess.run(
        ["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert " RUNNING" not in running.stdout, f"jobs left running: {running.stdout}"

    serial = run_scan(path, tmp_path / "serial", cluster="serial", progress=False)
    assert (serial.n_run, serial.n_failed) == (6, 0)
    xr.testing.assert_identical(collect(out, None), collect(tmp_path / "serial", None))
