"""``spinsa bench``: the benchmark harness (:mod:`spinsa.bench`) from the command line."""

from __future__ import annotations

__all__ = ["add_bench"]


def add_bench(sub) -> None:
    """Declare ``spinsa bench`` (the benchmark harness) on the subcommand parsers ``sub``."""
    from spinsa.bench import BENCHMARKS

    p = sub.add_parser(
        "bench",
        help="benchmarks against plain implementations",
        description="Time the numba dynamics, the pseudo-likelihood objective, a Gibbs sweep, "
        "a baseline's training step and the Hebbian comparison against plain implementations "
        "in the same process; print times, ratios, useful GFLOP/s (the flops the formulas "
        "need: 2d^2 + 4d per pair and sample for a step, 4d^2 + 3d for the objective and "
        "gradient) as a fraction of this machine's measured float32 matmul peak, and the CPU "
        "and vector width numba compiled for (NUMBA_CPU_NAME and NUMBA_CPU_FEATURES choose "
        "another). The full run takes a few minutes.",
    )
    p.add_argument(
        "--only",
        choices=list(BENCHMARKS),
        action="append",
        help="run only these benchmarks (repeatable)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes (P=256, T=5; P=2048 only; baselines of width 32) for a smoke run",
    )
    p.add_argument(
        "--no-plain", action="store_true", help="skip the plain implementations (fast code only)"
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cpu: the numba kernels against plain implementations, and the torch dynamics "
        "against numba (default); cuda: the torch paths on the GPU (the objective's closed "
        "form against autograd; the torch dynamics of spinsa.run(device='cuda') against the "
        "plain torch loop, and alone at P=10000, T=100), the numbers to report from a machine "
        "with a GPU",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help="also write the results as JSON (times, GFLOP/s, ratios, the machine, the date)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the --json file if it exists")
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args) -> int:
    import subprocess

    import numba

    import spinsa
    from spinsa import bench

    only = [b for b in bench.BENCHMARKS if b in (args.only or bench.BENCHMARKS)]
    if args.json:  # refused before the benchmarks run, not after
        from spinsa._files import check_writable

        check_writable(args.json, args.overwrite)
    if args.device == "cuda":
        from spinsa._torch import resolve_device

        resolve_device("cuda")  # a clear error where there is no GPU, before any work
    target = core = coretype = None  # on the CPU: numba's target and the BLAS kernels
    if args.device == "cpu":
        target, core = bench.compile_target(), bench.blas_core()
        coretype = bench.peak_coretype(target["vector_bits"], core)
    try:
        peak = bench.matmul_peak(device=args.device, coretype=coretype)
    except subprocess.CalledProcessError as err:  # kernels this CPU cannot run, say
        print(f"the peak with OPENBLAS_CORETYPE={coretype} failed ({err.stderr.strip()[-200:]});")
        print("it is measured with the kernels OpenBLAS chose")
        coretype = None
        peak = bench.matmul_peak(device=args.device)
    print(
        f"spinsa {spinsa.__version__}, numba {numba.__version__}, {numba.get_num_threads()} threads"
    )
    if args.device == "cuda":
        print(f"device: {bench.device_description(args.device)}")
        print(f"float32 matmul peak (torch, 8192^2, on the GPU): {peak:.1f} GFLOP/s")
    else:
        print(f"compiled for: {_target_line(target)}")
        kernels = f"OpenBLAS's {coretype or core} kernels" if core else "its own kernels"
        print(f"float32 matmul peak (numpy BLAS, {kernels}, 2048^2): {peak:.1f} GFLOP/s")
        if coretype:
            print(
                f"  (measured in a process with OPENBLAS_CORETYPE={coretype}, for the "
                f"{target['vector_bits']}-bit vectors of the kernels; OpenBLAS chose its "
                f"{core} kernels here)"
            )
    runs = bench.run_benchmarks(only, args.quick, not args.no_plain, args.device)
    # measured again: a peak taken while something else ran would inflate every fraction
    again = bench.matmul_peak(device=args.device, coretype=coretype)
    peak = max(peak, again)
    print(f"matmul peak again, after the benchmarks: {again:.1f} GFLOP/s", end="")
    print(f"; the fractions below use the larger, {peak:.1f}")
    for title, res, ratio in runs:
        _print_pair(title, res, peak, ratio)
    verdicts = [] if args.quick or args.device != "cpu" else bench.speed_targets(runs, peak)
    if args.device == "cuda" and not args.quick:
        verdicts = bench.gpu_targets(runs, peak)
    if verdicts:
        print("\ntargets (this machine, this run)")
        for line, _ in verdicts:
            print(f"  {line}")
    if args.json:
        _write_json(args.json, args.device, target, peak, coretype or core, runs, verdicts)
        print(f"\nresults written to {args.json}")
    return 0


def _target_line(target: dict) -> str:
    """The CPU, its SIMD features and the vector width, in one line."""
    cpu = target["cpu"] + (" (NUMBA_CPU_NAME)" if target["cpu_from_env"] else "")
    features = " ".join(target["features"]) or "no SIMD feature known"
    width = f"{target['vector_bits']}-bit vectors" if target["vector_bits"] else "scalar code"
    return f"{cpu}, {features}; {width}"


def _print_pair(title, res, peak, ratio="ratio"):
    fast = res["fast"]
    print(f"\n{title}")
    if fast.gflops != fast.gflops:  # NaN: no flop count (the analysis)
        for t in (res["fast"], res.get("plain")):
            if t is not None:
                print(f"  {t.name:<22}{t.seconds:9.3f} s")
        if "plain" in res:
            print(f"  {ratio:<22}{res['plain'].seconds / fast.seconds:9.2f} x")
        return
    old = ""
    if fast.gflops_old is not None:  # the former 4 P N^2 d^2 count, for older figures
        old = f"; {100 * fast.gflops_old / peak:.1f}% by the old 4 P N^2 d^2 count"
    print(
        f"  {fast.name:<22}{fast.seconds:9.3f} s  {fast.gflops:7.1f} GFLOP/s "
        f"({100 * fast.gflops / peak:4.1f}% of matmul peak in useful flops{old})"
    )
    if "plain" in res:
        plain = res["plain"]
        print(f"  {plain.name:<22}{plain.seconds:9.3f} s  {plain.gflops:7.1f} GFLOP/s")
        print(f"  {ratio:<22}{plain.seconds / fast.seconds:9.2f} x")
    keys = ("images_per_s", "plain_images_per_s", "extra_mb", "updates_per_s", "record_seconds")
    keys += ("fixed_seconds",)  # a call of spinsa.run beyond its sweeps
    for key in (*keys, "max_abs_diff", "max_rel_diff"):
        if key in res:
            print(f"  {key:<22}{res[key]:9.3g}")


def _write_json(path, device: str, target, peak: float, blas: str | None, runs, verdicts) -> None:
    """The results of a run, with the machine and the date, as JSON (written atomically);
    ``target``: :func:`spinsa.bench.compile_target` of the run (None on a GPU)."""
    import dataclasses
    import datetime
    import json
    import os
    import platform

    import numba

    import spinsa
    from spinsa._files import atomic_write_text
    from spinsa.bench import Timing, device_description

    def as_json(res: dict) -> dict:
        out = {
            k: dataclasses.asdict(v) if isinstance(v, Timing) else float(v) for k, v in res.items()
        }
        if "plain" in res:
            out["ratio"] = res["plain"].seconds / res["fast"].seconds
        return out

    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cores": len(os.sched_getaffinity(0)),
        "spinsa": spinsa.__version__,
        "numba": numba.__version__,
        "threads": numba.get_num_threads(),
        "device": device_description(device),
        "compile_target": target,
        "matmul_peak_gflops": peak,
        "matmul_peak_openblas_core": blas,  # the kernels the peak was measured with
        "benchmarks": [{"title": t, **as_json(res)} for t, res, _ in runs],
        "targets": [{"target": line, "met": met} for line, met in verdicts],
    }
    atomic_write_text(path, json.dumps(record, indent=1))
