"""Issue 43's reproductions on files, figures and commands: a user's file the figures cannot
draw is refused with a message that says what is missing and how to make it, never a raw
KeyError; shapes are part of a file's schema; and the small things (the nanny's warning at
the end of every scan, the extras table)."""

import logging
import shutil
import types
from pathlib import Path

import h5py
import numpy as np
import pytest

from spinsa import io
from spinsa.io.results import check_evaluations, read_evaluation


def _cli(capsys, *argv):
    """``spinsa ARGV`` in this process: (exit status, standard error)."""
    from spinsa.cli import main

    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


# ------------------------------------------------------------------- 2: a bare evaluation
def test_plot_of_an_evaluation_without_its_datasets_says_what_is_missing(tmp_path, capsys):
    # issue 43, item 2: a plain h5py file that claims to be a run file, with one dataset
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.attrs.update(schema="spinsa/1", kind="experiment")
        f["evaluation/masked/errors"] = np.zeros((3, 4))
    code, err = _cli(capsys, "plot", path, "-o", tmp_path / "d")
    assert code == 4, err  # a file error, not exit 1 with KeyError: 'times'
    assert "KeyError" not in err and "Traceback" not in err
    assert "'evaluation/masked' lacks the datasets times, errors/all" in err
    assert f"spinsa evaluate {path} --task masked --overwrite" in err  # how to fix it
    assert not (tmp_path / "d").exists()  # refused before any figure


# ------------------------------------------------------------- 15: shapes are the schema
def _replace(path, name, array):
    """Replace a dataset by another with a valid checksum, as an edit with h5py would."""
    with h5py.File(path, "r+") as f:
        del f[name]
        f.create_dataset(name, data=array, chunks=True, fletcher32=True)


@pytest.fixture
def misshapen(run_file, tmp_path):
    """A copy of the session's run file whose denoising examples have one row too many."""
    path = tmp_path / "run.h5"
    shutil.copy(run_file, path)
    images = io.read_array(path, "evaluation/denoise/examples/images")
    k, n, H, W = images.shape
    _replace(path, "evaluation/denoise/examples/images", np.zeros((k, n, H + 1, W), np.float32))
    io.verify(path)  # every checksum holds: only the shape tells
    return path, (k, n, H, W)


def test_plot_and_evaluate_refuse_a_misshapen_dataset(misshapen, tmp_path, capsys):
    # issue 43, item 15: exit 0 from both before, and plot drew the wrong images
    path, (k, n, H, W) = misshapen
    wanted = f"evaluation/denoise/examples/images has shape ({k}, {n}, {H + 1}, {W})"
    layout = f"wants (k = {k}, n = {n}, H = {H}, W = {W})"
    code, err = _cli(capsys, "plot", path, "-o", tmp_path / "figs")
    assert code == 4 and wanted in err and layout in err, err
    assert not (tmp_path / "figs").exists()
    code, err = _cli(capsys, "evaluate", path, "--task", "masked", "--overwrite", "--no-progress")
    assert code == 4 and wanted in err, err
    assert f"spinsa evaluate {path} --task denoise --overwrite" in err
    with pytest.raises(io.SpinsaFileError, match="examples/images has shape") as info:
        read_evaluation(path, "denoise")
    assert info.value.reason == "corrupt"
    # the advice works: the damaged evaluation is written again, and the file plots
    code, err = _cli(capsys, "evaluate", path, "--task", "denoise", "--overwrite", "--no-progress")
    assert code == 0, err
    check_evaluations(path)
    assert _cli(capsys, "plot", path, "-o", tmp_path / "figs", "--no-progress")[0] == 0


def test_every_dataset_of_an_evaluation_is_checked_against_the_others(run_file, tmp_path):
    datasets = io.read(run_file).datasets
    reference = next(n for n in datasets if n.startswith("evaluation/masked/references/"))
    for name, shape in [
        ("evaluation/masked/errors/visible", lambda s: (s[0], s[1] + 1)),  # another P
        ("evaluation/masked/mean/all", lambda s: (s[0] - 1,)),  # another T
        ("evaluation/masked/step_change", lambda s: (s[0] + 2,)),  # T + 1, not T
        (reference, lambda s: (s[0], 1)),  # (P,), not 2-d
        ("evaluation/masked/final_mean_image", lambda s: (s[1], s[0], 1)),
    ]:
        path = tmp_path / f"{name.replace('/', '-')}.h5"
        shutil.copy(run_file, path)
        _replace(path, name, np.zeros(shape(datasets[name][0]), np.float32))
        with pytest.raises(io.SpinsaFileError, match=f"{name} has shape"):
            check_evaluations(path)
    check_evaluations(run_file)  # the file as spinsa wrote it passes


# --------------------------------------------------------------------- 22: small things
def test_a_local_cluster_closes_without_the_nannys_kill_notice(monkeypatch):
    # issue 43, item 22: every `spinsa scan run` ended with "distributed.nanny - WARNING -
    # Worker process still alive after 4.0 seconds, killing" as its local cluster closed
    from spinsa.scan import run

    nanny = logging.getLogger("distributed.nanny")
    kill = "Worker process still alive after 4.0 seconds, killing"

    class Cluster:  # a LocalCluster whose close logs as distributed's does
        def __init__(self, **options):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            nanny.warning(kill)
            nanny.warning("Restarting worker")  # any other message still shows

    class Client:
        dashboard_link = "http://127.0.0.1:8787/status"

        def __init__(self, cluster):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    fake = types.SimpleNamespace(LocalCluster=Cluster, Client=Client)
    monkeypatch.setattr(run, "require", lambda module, needed_for: fake)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    nanny.addHandler(handler)
    try:
        with run.open_client("local", workers=1):
            pass
        assert seen == ["Restarting worker"]
        nanny.warning(kill)  # outside a scan, the logger is left as it was
        assert seen == ["Restarting worker", kill]
    finally:
        nanny.removeHandler(handler)


def test_the_extras_table_lists_every_extra():
    # issue 43, item 22: docs/install.md's table left out `sampling`
    tomllib = pytest.importorskip("tomllib")  # Python 3.11

    root = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    text = (root / "docs" / "install.md").read_text()
    table = text.split("## Extras", 1)[1].split("\n\n", 2)[1]
    rows = {line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]}
    assert set(extras) <= rows, sorted(set(extras) - rows)


def test_lifetime_table_repr_is_short(rng):
    # issue 43, item 22: the repr dumped every histogram array
    from spinsa.analysis import overlap_lifetimes, summarize_lifetimes

    per = [overlap_lifetimes(rng.random((400, 30)), np.arange(400), 0.5) for _ in range(2)]
    table = summarize_lifetimes(per, [0.3, 0.7])
    text = repr(table)
    assert text.startswith("LifetimeTable(criterion='overlap', levels=[0.3, 0.7]")
    assert "lifetime_mean=" in text and "counts=<2 x 400 histogram>" in text
    assert len(text) < 400 and "array(" not in text
