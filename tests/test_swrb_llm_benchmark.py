"""Smoke test of benchmarks/swrb_llm.py on a tiny random model (seconds): both modes, batches, resume, Markdown."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "swrb_llm.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("swrb_llm_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_defaults_and_explicit_options(bench):
    args = bench.parse_args(["--quick", "--replicates", "4"])
    assert (args.documents, args.horizon, args.replicates) == (1, 32, 4)
    assert bench.parse_args([]).horizon == 128
    with pytest.raises(SystemExit):
        bench.parse_args(["--replicates", "1"])


@pytest.fixture
def one_thread():
    """Tiny matrices: one torch thread (two spin against each other on a loaded 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_benchmark_runs_on_a_tiny_model(bench, tiny_llama, tmp_path, one_thread):
    out = tmp_path / "swrb.md"
    argv = [
        "--quick",
        "--length",
        "512",
        "--horizon",
        "8",
        "--window",
        "2",
        "--replicates",
        "3",
        "--batch",
        "2",
        "--bootstrap",
        "20",
        "--window-size",
        "16",
        "--raw-dir",
        str(tmp_path / "raw"),
        "--out",
        str(out),
    ]
    tables = bench.run(tiny_llama, bench.parse_args(argv))
    reps = tables["replicates"]
    actions = list(bench.default_actions())
    assert len(actions) == 6 and bench.parse_args([]).high_retention == 0.999
    # 2 documents × 6 actions × 2 modes × 3 replicates, replicate ids 0..2 across the two batches
    assert reps.height == 2 * 7 * 2 * 3
    per_cell = reps.group_by("document", "action", "mode").agg(pl.col("replicate").sort())
    assert all(r == [0, 1, 2] for r in per_cell["replicate"].to_list())
    cells = tables["cells"]
    assert cells.height == 14 and set(cells["retention"].to_list()) == {0.5, 0.9, 0.99, 0.999}
    assert (cells["complete_pair_evaluations"] == 8).all()
    assert ((cells["swrb_pair_evaluations"] >= 8) & (cells["swrb_pair_evaluations"] <= 14)).all()
    text = out.read_text()
    for heading in (
        "## R_H per retention",
        "## Mean agreement",
        "## (1 − α) enclosure",
        "## Beside the finite-state figures",
        "## The complete coupling's Var(M) estimated from swrb draws",
    ):
        assert heading in text
    agree = tables["agreement"]
    assert set(agree["key"]) == {"R_H", "R_L", "B_L", "P_div"} and "| 99% | P_div |" in text
    check = tables["variance_check"]
    assert (
        check.height == 4
        and (
            check["cells"] == 2 * (check["retention"] == 0.999).cast(int) + 4 * (check["retention"] != 0.999).cast(int)
        ).all()
    )
    assert reps.filter(pl.col("mode") == "swrb")["M_path"].null_count() == 0
    assert "| 99% |" in text and "| 99.9% |" in text and "snapkv_99p9" in text
    # a hand-written interpretation survives a rerun, which reuses the per-document raw files
    out.write_text(text + "\n## Interpretation\n\nhand-written\n")
    again = bench.run(tiny_llama, bench.parse_args(argv))
    assert again["cells"].equals(cells)
    assert out.read_text().endswith("## Interpretation\n\nhand-written\n")
    # more replicates only add batches: batch 0's replicates are reused unchanged
    more = bench.run(tiny_llama, bench.parse_args([*argv, "--replicates", "4"]))["replicates"]
    assert more.height == 2 * 7 * 2 * 4
    key = ["document", "action", "mode", "replicate"]
    first = reps.filter(pl.col("replicate") < 2).sort(key)
    assert more.filter(pl.col("replicate") < 2).sort(key).select(first.columns).equals(first)
