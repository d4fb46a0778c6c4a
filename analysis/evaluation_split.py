"""Where an evaluation's time goes: the dynamics, the per-step decoding and scoring, the rest.

Runs ``spinsa.experiments.pipeline.evaluate_task`` on synthetic 28 x 28 digits with random
couplings (2x2 patches, d = 8) for each preset and task, twice in one process: with the
recorder's compiled decode-and-score pass and with its numpy backend (the former path).
The recorder's calls and ``run_dynamics`` are timed apart; "other" is the rest (the task
inputs, the references, the final images' statistics). Prints one line per run; writes
nothing (the figures it gave are in the git history of docs/benchmarks.md,
'An evaluation's decoding and scoring').

Usage (from the repository root; about 2 minutes on 2 cores at the defaults)::

    .venv/bin/python analysis/evaluation_split.py --n-test 1000 --steps 20
"""

from __future__ import annotations

import argparse
import functools
import time

import spinsa
from spinsa.experiments import ExperimentConfig, pipeline


def split(cfg, J, images, task: str, backend: str) -> dict:
    """Seconds of one evaluation: total, recorder, dynamics (without the recorder), other."""
    spent = {"recorder": 0.0, "run": 0.0}

    class Timed(pipeline._Recorder):
        def __call__(self, t, x):
            t0 = time.perf_counter()
            super().__call__(t, x)
            spent["recorder"] += time.perf_counter() - t0

    def timed_run(*args, **kwargs):
        t0 = time.perf_counter()
        run_dynamics(*args, **kwargs)
        spent["run"] += time.perf_counter() - t0

    run_dynamics, recorder = pipeline.run_dynamics, pipeline._Recorder
    pipeline._Recorder = functools.partial(Timed, backend=backend)
    pipeline.run_dynamics = timed_run
    try:
        t0 = time.perf_counter()
        pipeline.evaluate_task(cfg, J, images, task)
        total = time.perf_counter() - t0
    finally:
        pipeline._Recorder, pipeline.run_dynamics = recorder, run_dynamics
    rec = spent["recorder"]
    return dict(total=total, recorder=rec, dynamics=spent["run"] - rec, other=total - spent["run"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-test", type=int, default=1000, help="test images P")
    parser.add_argument("--steps", type=int, default=20, help="steps T")
    parser.add_argument("--presets", nargs="+", default=["design", "damico2024"])
    args = parser.parse_args()
    for preset in args.presets:
        scale = "paper" if preset == "design" else "damico2024"
        data = dict(dataset="synthetic", n_train=2000, n_test=args.n_test, image_size=28)
        cfg = ExperimentConfig.from_dict(
            dict(name=preset, data=data, embedding=dict(patch=2, d=8, scale=scale),
                 dynamics=dict(preset=preset, steps=args.steps))
        )  # fmt: skip
        images = pipeline.load_images(cfg)
        emb = cfg.make_embedding()
        J = spinsa.random_couplings(emb.n_tokens, emb.d, scale=0.5, seed=1)
        small = cfg.with_overrides({"data.n_test": 8, "dynamics.steps": 2})
        for backend in ("numba", "numpy"):  # compile (or load the cache) before timing
            split(small, J, pipeline.load_images(small), "masked", backend)
        for task in ("masked", "denoise"):
            for backend in ("numpy", "numba"):
                s = split(cfg, J, images, task, backend)
                print(
                    f"{preset:10s} {task:8s} P={args.n_test} T={args.steps} recorder={backend:5s}: "
                    f"total {s['total']:6.2f} s, recorder {s['recorder']:5.2f} s "
                    f"({s['recorder'] / s['total']:4.0%}), dynamics {s['dynamics']:6.2f} s, "
                    f"other {s['other']:5.2f} s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
