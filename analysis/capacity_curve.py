"""The capacity figure of docs/capacity.md, from a collected synthetic scan.

    spinsa scan run analysis/configs/capacity.toml --out runs/capacity
    spinsa scan collect runs/capacity
    PYTHONPATH=. .venv/bin/python analysis/capacity_curve.py runs/capacity docs/results/capacity

Reads ``collected.nc`` of the scan directory (never recomputes), draws the retrieved
fraction against the load alpha = P/N per kind of couplings with the critical load alpha_c
(where half the patterns are retrieved; bootstrap error over the seeds) and the Hopfield
reference, and prints alpha_c of each curve.
"""

import sys
from pathlib import Path

from spinsa import scan
from spinsa.analysis import critical_load
from spinsa.plotting import new_figure, save_figure
from spinsa.plotting.scan import capacity_figure


def report(ds):
    """alpha_c of every (couplings, N), as docs/capacity.md quotes them."""
    for couplings in ds["couplings"].values.tolist():
        for n in ds["patterns.n_tokens"].values.tolist():
            r = ds["retrieved_fraction"].sel({"couplings": couplings, "patterns.n_tokens": n})
            r = r.transpose("patterns.alpha", "seed")
            load = critical_load(r["patterns.alpha"].values, r.values)
            print(
                f"N = {n:4d} {couplings:8s} alpha_c = {load.alpha_c:.4f} +- {load.sem:.4f} "
                f"(68 %: {load.low:.4f} .. {load.high:.4f}; {load.n_seeds} seeds, "
                f"{load.n_boot} resamplings, {load.censored_fraction:.0%} censored)"
            )


def main(scan_dir, out_dir):
    ds = scan.open_collected(scan_dir)
    fig = new_figure((11.0, 4.2))
    left, right = fig.subplots(1, 2, sharey=True)
    n_small = int(ds["patterns.n_tokens"].min())
    capacity_figure(
        ds, x="patterns.alpha", hue="couplings", fixed={"patterns.n_tokens": n_small}, ax=left
    )
    left.set_title(f"N = {n_small}: Hebbian and PL couplings", fontsize=10)
    capacity_figure(
        ds, x="patterns.alpha", hue="patterns.n_tokens", fixed={"couplings": "hebbian"}, ax=right
    )
    right.set_title(
        "Hebbian couplings: N = " + ", ".join(str(n) for n in ds["patterns.n_tokens"].values),
        fontsize=10,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "capacity.png", dpi=120)
    report(ds)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
