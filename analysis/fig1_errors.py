"""Fig. 1 of D'Amico & Negri (2024): reconstruction error against t, and example images.

Reads a results file and draws, without recomputing anything:

* ``<stem>_errors.<fmt>``: mean squared pixel error against t for masked prediction and
  denoising, one line per model, with standard-error bands (masked from t = 1, as the paper);
* ``<stem>_examples_<model>.<fmt>``: decoded test images at t = 0, 1, 5, 20, 100.

The file is a ``reproduce.h5`` (``spinsa reproduce``), or a run file from
``spinsa train`` + ``spinsa evaluate`` or ``spinsa.experiments.run_experiment``.

Usage (from the repository root; takes seconds)::

    .venv/bin/python analysis/fig1_errors.py runs/reproduce-quick/reproduce.h5 --out out/
    .venv/bin/python analysis/fig1_errors.py run.h5 --pixels masked --format pdf
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spinsa import plotting
from spinsa.experiments import model_names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="reproduce.h5 or a run file")
    parser.add_argument("--out", type=Path, default=Path("out"), help="output directory")
    parser.add_argument("--stem", default="fig1", help="file name prefix (default fig1)")
    parser.add_argument(
        "--pixels",
        choices=("all", "masked", "visible"),
        default="all",
        help="pixels the error is averaged over (default all)",
    )
    parser.add_argument("--format", default="png", help="png, pdf, svg ... (default png)")
    parser.add_argument("--examples", type=int, default=4, help="example rows per task")
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    written = [
        plotting.save_figure(
            plotting.figure_errors(args.results, pixels=args.pixels),
            args.out / f"{args.stem}_errors.{args.format}",
        )
    ]
    for model in model_names(args.results):
        written.append(
            plotting.save_figure(
                plotting.figure_examples(args.results, model=model, n_examples=args.examples),
                args.out / f"{args.stem}_examples_{model}.{args.format}",
            )
        )
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
