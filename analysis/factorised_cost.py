"""Time and memory of factorised couplings against the full tensor (docs/training-methods.md).

Fits the pseudo-likelihood for a few epochs on the quick size's training images (10,000
MNIST images, 2x2 patches, d = 8) with the full couplings and with factorised ones
(J_ij = sum_h K_ijh^T Q_ijh for several heads H and ranks r, and the position-independent
"shared" block), all with Adam, batch 256, on the CPU. For each it records the parameters
the optimiser moves, their optimiser state, the seconds per epoch (between the first and
the last step, so without the full-batch evaluations) and the final pseudo-likelihood, to
``runs/factorised-cost.h5``, and prints a table.

Usage (from the repository root; about 3 minutes on 2 cores)::

    .venv/bin/python analysis/factorised_cost.py --epochs 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from spinsa import io
from spinsa.experiments import ExperimentConfig
from spinsa.experiments.pipeline import load_images
from spinsa.fit import fit_pseudolikelihood
from spinsa.fit.parametrisation import factor_shape

CASES = [  # (label, couplings, heads, rank)
    ("full", "full", 1, None),
    ("H=1, r=1", "factorised", 1, 1),
    ("H=1, r=2", "factorised", 1, 2),
    ("H=2, r=2", "factorised", 2, 2),
    ("H=1, r=8", "factorised", 1, 8),
    ("shared, H=1, r=8", "shared", 1, 8),
]


def _stamper(stamps: list[float]):
    """A fit callback that records the time of every step."""
    return lambda step, J: stamps.append(time.perf_counter())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit (default 2)")
    parser.add_argument("--out", type=Path, default=Path("runs/factorised-cost.h5"))
    args = parser.parse_args(argv)

    quick = {"data": {"per_class": 1000, "n_test": 1}, "embedding": {"d": 8}}
    config = ExperimentConfig.from_dict(quick)
    xi = config.make_embedding().encode(load_images(config, test=False).train)
    P, N, d = xi.shape
    rows = []
    for label, couplings, heads, rank in CASES:
        options = {} if couplings == "full" else dict(couplings=couplings, heads=heads, rank=rank)
        stamps: list[float] = []
        fit = fit_pseudolikelihood(
            xi, backend="torch", device="cpu", epochs=args.epochs, batch_size=256,
            eval_every=args.epochs, callback=_stamper(stamps), **options,
        )  # fmt: skip
        n_params = (
            N * N * d * d
            if couplings == "full"
            else 2 * int(np.prod(factor_shape(couplings, N, d, heads, rank)))
        )
        steps_per_epoch = -(-P // 256)
        seconds = (stamps[-1] - stamps[0]) / (len(stamps) - 1) * steps_per_epoch
        rows.append((label, n_params, 4 * n_params * 3, seconds, fit.loss))
        print(f"{label:<18} {n_params:>10,} parameters  {4 * n_params * 3 / 2**20:7.1f} MiB "
              f"(with Adam's state)  {seconds:6.1f} s/epoch  L = {fit.loss:.4f}")  # fmt: skip
    arrays = {
        "n_parameters": np.array([r[1] for r in rows]),
        "state_bytes": np.array([r[2] for r in rows]),
        "seconds_per_epoch": np.array([r[3] for r in rows]),
        "final_loss": np.array([r[4] for r in rows]),
    }
    attrs = {"cases": [r[0] for r in rows], "epochs": args.epochs, "n_train": int(P)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    io.write_file(args.out, arrays, attrs, kind="factorised-cost", overwrite=True)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
