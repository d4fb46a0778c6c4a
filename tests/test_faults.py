"""Faults: a fit killed with SIGKILL (mid-run, or mid-way through writing its checkpoint)
resumes to the result of a fit that was never interrupted."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from damage import kill_when

import spinsa
from spinsa.datasets import random_patterns

pytestmark = pytest.mark.slow

OPTIONS = dict(backend="lbfgs", lam=5.0, max_iter=12, segment_iters=2, dtype="float64")
CHILD = """
import os, sys, time
import numpy as np
import spinsa
from spinsa.datasets import random_patterns

if sys.argv[2] == "slow-rename":  # hold the second checkpoint before its rename: a window
    real_replace, renames = os.replace, []

    def slow_replace(src, dst):
        renames.append(dst)
        if len(renames) == 2:  # an older checkpoint exists, the newer one is written
            open(sys.argv[3], "w").close()  # tell the parent
            time.sleep(2.0)
        real_replace(src, dst)

    os.replace = slow_replace
xi = random_patterns(48, 6, 3, seed=1, dtype=np.float64)
spinsa.fit_pseudolikelihood(xi, checkpoint=sys.argv[1], callback=lambda s, J: time.sleep(0.05),
                            **{OPTIONS!r})
"""


def _reference():
    xi = random_patterns(48, 6, 3, seed=1, dtype=np.float64)
    return xi, spinsa.fit_pseudolikelihood(xi, **OPTIONS)


def _start(tmp_path, mode):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.replace("{OPTIONS!r}", repr(OPTIONS))))
    flag = tmp_path / "renaming"
    ckpt = tmp_path / "fit.ckpt.h5"
    proc = subprocess.Popen([sys.executable, str(script), str(ckpt), mode, str(flag)])
    return proc, ckpt, flag


def test_lbfgs_fit_killed_mid_run_resumes_to_the_uninterrupted_result(tmp_path):
    xi, reference = _reference()
    proc, ckpt, _ = _start(tmp_path, "plain")
    # kill once the second segment's checkpoint exists, i.e. inside the third segment
    seen = []

    def second_checkpoint():
        if ckpt.exists():
            stamp = ckpt.stat().st_mtime_ns
            if not seen or seen[-1] != stamp:
                seen.append(stamp)
        return len(seen) >= 2

    assert kill_when(proc, second_checkpoint), "the fit finished before it could be killed"
    resumed = spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, **OPTIONS)
    assert resumed.resumed_from >= 1
    np.testing.assert_array_equal(resumed.J, reference.J)
    np.testing.assert_array_equal(resumed.step_loss, reference.step_loss)


def test_fit_killed_while_writing_its_checkpoint_resumes_to_the_same_result(tmp_path):
    xi, reference = _reference()
    proc, ckpt, flag = _start(tmp_path, "slow-rename")
    # the flag appears when a checkpoint is written but not yet renamed into place
    assert kill_when(proc, flag.exists), "the fit finished before it could be killed"
    leftovers = [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    assert leftovers, "the kill was meant to land between writing and renaming"
    resumed = spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, **OPTIONS)
    assert resumed.resumed_from == 1  # from the older, complete checkpoint
    np.testing.assert_array_equal(resumed.J, reference.J)
    np.testing.assert_array_equal(resumed.step_loss, reference.step_loss)
