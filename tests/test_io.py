"""kvdiv.io (checksummed Parquet) and kvdiv.joblog (a failing job's log holds its traceback)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kvdiv.io import checksum_path, read_parquet, sha256_file, write_parquet

REPO = Path(__file__).resolve().parents[1]


def frame(n: int = 2000) -> pl.DataFrame:
    return pl.DataFrame(
        {"document": [f"d{i % 7}" for i in range(n)], "tau": list(range(n)), "tv": [i / n for i in range(n)]}
    )


def test_parquet_round_trip_with_a_sha256sum_compatible_checksum(tmp_path):
    path = write_parquet(frame(), tmp_path / "replicates.parquet")
    assert checksum_path(path).read_text() == f"{sha256_file(path)}  replicates.parquet\n"
    assert read_parquet(path).equals(frame())


def test_truncated_parquet_is_an_error_naming_the_file(tmp_path):
    path = write_parquet(frame(), tmp_path / "replicates.parquet")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(path))}: sha256 .* truncated or altered; delete {re.escape(str(path))}"
    ):
        read_parquet(path)


def test_flipped_bits_in_a_page_are_an_error(tmp_path):
    path = write_parquet(frame(), tmp_path / "replicates.parquet")
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside the column data, far from the footer
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=re.escape(str(path))):
        read_parquet(path)


def test_missing_checksum_is_an_error(tmp_path):
    path = tmp_path / "replicates.parquet"
    frame().write_parquet(path)
    with pytest.raises(ValueError, match=r"replicates.parquet: its checksum file replicates.parquet.sha256 is missing"):
        read_parquet(path)


def test_load_metrics_names_a_truncated_metrics_file(tmp_path):
    from kvdiv.analysis.inputs import load_metrics

    for name in ("replicates", "profiles_aligned", "profiles_clock"):
        write_parquet(frame(), tmp_path / f"{name}.parquet")
    target = tmp_path / "replicates.parquet"
    target.write_bytes(target.read_bytes()[:50])
    with pytest.raises(ValueError, match=re.escape(str(target))):
        load_metrics([tmp_path])


# ------------------------------------------------------------------------- job logs


def test_a_failing_job_log_holds_the_traceback(tmp_path):
    log = tmp_path / "logs/job.log"
    script = (
        "import logging\n"
        "from kvdiv.joblog import job_log\n"
        f"with job_log({str(log)!r}):\n"
        "    print('progress line')\n"
        "    logging.info('a log record')\n"
        "    raise ValueError('results/x/replicates.parquet: truncated')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1
    text = log.read_text()
    assert "progress line" in text and "a log record" in text
    assert "Traceback (most recent call last)" in text and "ValueError: results/x/replicates.parquet: truncated" in text
    assert "ValueError" in proc.stderr  # and Snakemake's own output shows it too


def test_every_workflow_script_logs_through_job_log():
    scripts = sorted((REPO / "workflow_scripts").glob("*.py"))
    assert len(scripts) >= 15
    for script in scripts:
        text = script.read_text()
        assert "with job_log(snakemake.log[0])" in text, script.name
        assert "sys.stderr =" not in text and "open(snakemake.log" not in text, script.name
