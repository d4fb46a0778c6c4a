"""The committed results in docs/results cannot go stale silently.

Every report there must carry the marker of the current report format (so that a change of
the verdict rules or of what a report states makes every older report fail here), name the
command that regenerates it, and give no verdict that rests on a model recorded as not
converged (docs/convergence.md). docs/results/README.md must list every artefact.
"""

import re
from pathlib import Path

import pytest

from spinsa.report import (
    BEATS_REFERENCES,
    BLOCK_BEATS_SA,
    BLOCK_BEST_T,
    REPORT_FORMAT,
    SA_MORE_UNIFORM,
    VIT_BEST,
)

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
MARKER = re.compile(r"<!-- spinsa report: ([\w-]+), format (\d+), spinsa (\S+) -->")
VERDICTS = ("holds", "partly", "does not hold")


def reports() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*.md") if p.name != "README.md")


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of ``text``: a list of rows, each a list of stripped cells
    (the header first, the separator left out)."""
    out, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        elif current:
            out.append(current)
            current = []
    return out


def verdict_of(cell: str) -> str:
    return cell.strip("*")


def unconverged_baselines(text: str) -> set[tuple[str, str]]:
    """``(model, task)`` of every trained baseline whose row says it did not converge, from
    the tables with a "converged" column; refuses a baselines table without one."""
    out = set()
    for rows in tables(text):
        header = rows[0]
        if header[:2] != ["model", "task"] or "best error" not in header:
            continue
        assert "converged" in header, "a baselines table without its convergence column"
        k = header.index("converged")
        for cells in rows[1:]:
            if cells[0] in ("recycled block", "ViT") and "not converged" in cells[k]:
                out.add(({"recycled block": "recycled", "ViT": "vit"}[cells[0]], cells[1]))
    return out


def rests_on(statement: str, where: str) -> set[tuple[str, str]]:
    """The baselines a fidelity statement's verdict rests on (as spinsa.report decides)."""
    task = where.split(",")[0]
    if statement in (BLOCK_BEST_T, BLOCK_BEATS_SA):
        return {("recycled", task)}
    if statement == VIT_BEST:
        return {("vit", task), ("recycled", task)}
    if statement == SA_MORE_UNIFORM:
        return {("recycled", "masked"), ("vit", "masked")}
    if statement == BEATS_REFERENCES:
        label, task = where.split(", ")
        return {({"recycled block": "recycled", "ViT": "vit"}[label], task)}
    return set()


def unconverged_fits(text: str) -> set[str]:
    """The bare-SA models whose model line records a fit that did not converge."""
    return set(re.findall(r"^- \*\*([\w-]+)\*\*: .*\*\*not converged", text, re.MULTILINE))


def stale_reasons(text: str) -> list[str]:
    """Why a committed report is stale or misleading ([] when it is neither)."""
    marker = MARKER.search(text)
    if marker is None:
        return [f"no report marker: written before format {REPORT_FORMAT}"]
    reasons = []
    if int(marker.group(2)) < REPORT_FORMAT:
        reasons.append(f"format {marker.group(2)}, older than {REPORT_FORMAT}")
    if not re.search(r"by `spinsa [^`]+`", text):
        reasons.append("names no command that regenerates it")
    try:
        baselines = unconverged_baselines(text)
    except AssertionError as err:
        return [*reasons, str(err)]
    fits = unconverged_fits(text)
    for rows in tables(text):
        header = rows[0]
        if "verdict" not in header:
            continue
        v = header.index("verdict")
        for cells in rows[1:]:
            if verdict_of(cells[v]) not in VERDICTS:
                continue
            on = rests_on(cells[0], cells[1]) & baselines if header[0] == "statement" else set()
            named = {m for m in fits if re.search(rf"(^|[ ,(]){re.escape(m)}($|[ ,)])",
                                                  " ".join(cells[:2]))}  # fmt: skip
            if on or named:
                reasons.append(f"a verdict rests on a model that did not converge: {cells[:3]}")
    return reasons


def test_the_checks_catch_stale_reports():
    assert stale_reasons("# a report\n\n| a | b |\n|---|---|\n") == [
        f"no report marker: written before format {REPORT_FORMAT}"
    ]
    head = f"<!-- spinsa report: reproduce, format {REPORT_FORMAT}, spinsa 0.1.0 -->\n"
    head += "Written by spinsa from `reproduce.h5`, by `spinsa reproduce --out x`.\n\n"
    good_row = (
        "| recycled block | masked | 64 | 5 | 9 | 3 of 60 | 1.0 | 9 | 5 | 0.01 | 0.02 | 0.03 |"
    )
    bad_row = good_row.replace("3 of 60", "60 of 60")
    table = (
        "| model | task | width | parameters | training images | epochs | training (min) | "
        "images/s | best t | best error | error at t = 1 | error at t = T | converged |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    claims = "| statement | where | verdict | evidence |\n|---|---|---|---|\n"
    claim = f"| {BLOCK_BEST_T} | masked | **holds** | best t = 5 |\n"
    ok = head + table + good_row + " after 3 of at most 60 epochs |\n\n" + claims + claim
    assert stale_reasons(ok) == []
    not_converged = " **not converged after 60 epochs — no verdict** |\n\n"
    bad = head + table + bad_row + not_converged + claims + claim
    assert stale_reasons(bad) and "did not converge" in stale_reasons(bad)[0]
    withheld = claim.replace("**holds**", "**not converged after 60 epochs — no verdict**")
    assert stale_reasons(head + table + bad_row + not_converged + claims + withheld) == []
    old_table = table.replace(" converged |", " training (s) |")
    assert "without its convergence column" in stale_reasons(head + old_table + good_row)[0]
    assert "older than" in stale_reasons(head.replace(f"format {REPORT_FORMAT}", "format 1"))[0]
    fit = "- **design**: fit lbfgs: **not converged after 9 iterations — no verdict**\n\n"
    sa_claim = "| claim | model | verdict | evidence |\n|---|---|---|---|\n"
    sa_claim += "| x | design | **holds** | y |\n"
    assert stale_reasons(head + fit + sa_claim)


@pytest.mark.parametrize("path", reports(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_committed_report_is_current(path):
    reasons = stale_reasons(path.read_text())
    assert not reasons, (
        f"{path.relative_to(RESULTS.parent.parent)} is stale: {'; '.join(reasons)}. Regenerate "
        "it with the command that docs/results/README.md gives for it."
    )


def test_readme_lists_every_artefact():
    readme = (RESULTS / "README.md").read_text()
    files = sorted(p for p in RESULTS.rglob("*") if p.is_file() and p.name != "README.md")

    def listed(path: Path) -> bool:  # by name, or by its folder ("phase/")
        relative = path.relative_to(RESULTS)
        return relative.as_posix() in readme or f"{relative.parent.as_posix()}/" in readme

    missing = [str(p.relative_to(RESULTS)) for p in files if not listed(p)]
    assert not missing, f"docs/results/README.md does not list {missing}"
