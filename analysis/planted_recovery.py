"""The planted inverse problems of docs/inverse-problems.md: N = 8, d = 3, lambda = 1.

    PYTHONPATH=. .venv/bin/python analysis/planted_recovery.py runs/planted.h5 \
        docs/results/planted/recovery.png

Samples M configurations of planted couplings (random asymmetric, Hebbian, ring lattice;
blocks of norm about 3), fits them back and saves every RecoveryCurve to the HDF5 file,
then draws the figure from the file.
"""

import sys
import time

from spinsa import io, plotting
from spinsa.analysis import planted_couplings, recovery_curve, save_analysis

LAM, SCALE = 1.0, 3.0
MS = (500, 2000, 8000)
RUNS = [  # (kind, sampling, method, values of M)
    *[(k, s, "normalised", MS) for k in ("random", "hebbian", "lattice")
      for s in ("row_matched", "full_sweep")],
    ("random", "row_matched", "pl", MS),
    ("hebbian", "row_matched", "pl", MS),
    ("random", "full_sweep", "cd", (500, 2000)),
]


def main(out, figure):
    io.write_file(out, {}, kind="planted", config=dict(lam=LAM, scale=SCALE), overwrite=True)
    for kind, sampling, method, Ms in RUNS:
        t = time.time()
        J = planted_couplings(kind, 8, 3, scale=SCALE, seed=1)
        c = recovery_curve(J, LAM, Ms, sampling, method, kind=kind, seed=2)
        save_analysis(out, f"{kind}-{sampling}-{method}", c)
        print(f"{kind:8s} {sampling:12s} {method:10s} error {c.error.round(3)} "
              f"cosine {c.cosine.round(3)} slope {c.slope:.3f} ({time.time() - t:.0f} s)",
              flush=True)
    plotting.save_figure(plotting.figure_recovery(out), figure)


if __name__ == "__main__":
    main(*sys.argv[1:3])
