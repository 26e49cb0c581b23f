"""benchmarks/swrb_llm.py: a smoke run on a tiny random model (seconds: both modes, batches, resume, Markdown), and its
renderer (benchmarks/swrb_llm_tables.py) on synthetic replicates: every section and table, the numbers' formats."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
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


# --- the renderer on synthetic replicates (no model) ---------------------------------------------------------------

ACTIONS = {"snapkv_50": 0.5, "recent_50": 0.5, "snapkv_99": 0.99}
SECTIONS = (
    "# Complete vs residual-branch (SWRB) sampling on toy (CPU)",
    "## R_H per retention",
    "## R_H per action and by probability of divergence",
    "## Window and capacity (L = 2): M_L vs Z_L (R_L), capacity vs W_L (B_L)",
    "## The complete mode's own TV-integrated estimator",
    "## Mean agreement (unbiasedness on a real model)",
    "## (1 − α) enclosure of R_H per action from sampled profiles (α = 0.05, L = 2)",
    "## The complete coupling's Var(M) estimated from swrb draws (the report's method)",
    "## Beside the finite-state figures",
    "## Per (document, action) cells",
)


def synthetic_replicates(documents: int = 3, replicates: int = 4, horizon: int = 8, seed: int = 3) -> pl.DataFrame:
    """Rows shaped as :func:`kvdiv.metrics.trajectory_replicates` gives them for both modes (values drawn at random:
    the renderer's input, not a model's)."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(documents):
        for action, retention in ACTIONS.items():
            for mode in ("complete", "swrb"):
                for r in range(replicates):
                    # at 99 % retention the complete replicates of document 0 never diverge (a zero-variance cell)
                    diverged = not (retention == 0.99 and d == 0) and rng.random() < 0.8
                    j = int(rng.integers(1, horizon + 1))
                    m = float(rng.random()) if diverged else 0.0
                    rows.append(
                        {
                            "document": f"doc{d}",
                            "action": action,
                            "mode": mode,
                            "replicate": r,
                            "R_H": m if mode == "complete" else float(rng.random()),
                            "R_L": m / 3 if mode == "complete" else float(rng.random()) / 3,
                            "B_L": float(rng.random()) / 2,
                            "risk_tv": float(rng.random()) if mode == "complete" else None,
                            "D": float(rng.uniform(0.2, 1.0)) if mode == "swrb" else None,
                            "J": j if mode == "swrb" else 0,
                            "tau": int(rng.integers(2, horizon + 1)) if mode == "complete" and diverged else None,
                            "M_path": float(rng.random()) if mode == "swrb" else None,
                            "pair_evaluations": float(horizon + (horizon - j if mode == "swrb" else 0)),
                            "rows": float(2 * horizon + (j if mode == "swrb" else 0)),
                            "wall_s": float(rng.uniform(0.1, 0.2)),
                        }
                    )
    return pl.DataFrame(rows, infer_schema_length=None)


SETUP = {
    "model": "toy",
    "command": "python benchmarks/swrb_llm.py --quick",
    "compute_min": 1.4,
    "documents": 3,
    "strata": ["ruler_512"],
    "per_family": 3,
    "prompt_tokens_min": 500,
    "prompt_tokens_max": 512,
    "actions": list(ACTIONS),
    "window_size": 16,
    "high": "no extra action",
    "horizon": 8,
    "window": 2,
    "replicates": 4,
    "batch": 2,
    "seed": 1,
    "bootstrap": 30,
    "alpha": 0.05,
    "machine": "x86_64, 2 cores",
    "threads": 1,
    "load_min": 1.0,
    "load_max": 2.0,
}


@pytest.fixture(scope="module")
def synthetic(bench):
    return bench.benchmark_tables(synthetic_replicates(), ACTIONS, horizon=8, n_boot=30, seed=5, alpha=0.05)


@pytest.fixture(scope="module")
def renderer(bench):
    """benchmarks/swrb_llm_tables.py, as the benchmark imports it (its folder is on the path once it is loaded)."""
    return importlib.import_module("swrb_llm_tables")


def tables_of(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of cells (header first, the ``|---|`` line dropped); a ``\\|`` is a
    literal bar inside a cell."""
    out, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif current:
            out.append([row for row in current if set("".join(row)) != {"-"}])
            current = []
    return out


def test_render_writes_every_section_with_its_table(renderer, synthetic):
    text = renderer.render(synthetic, SETUP)
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert "R = 4 replicates per (document, action)" in text and "`snapkv_50`, `recent_50`, `snapkv_99`" in text
    tables = tables_of(text)
    # retention, action, divergence, window, risk_tv, agreement, enclosure, variance check, finite state, cells
    assert len(tables) == 10
    assert all(len({len(row) for row in t}) == 1 for t in tables), "a row with a different number of cells"
    retention, action, divergence, window, risk_tv, agree, enclosure, check, finite, cells = tables
    assert [r[0] for r in retention[1:]] == ["50%", "99%", "all"]
    assert retention[-1][-4:] == ["", "", "", ""]  # the all-cells row has no per-retention costs
    assert [r[0] for r in action[1:]] == sorted(ACTIONS)
    assert sum(int(r[1]) for r in divergence[1:]) == 9
    assert [(r[0], r[1]) for r in window[1:]] == [(k, p) for k in ("R_L", "B_L") for p in ("50%", "99%")]
    assert [r[0] for r in risk_tv[1:]] == ["50%", "99%"]
    assert agree[0][-1] == r"agrees (\|z\| < 3)" and len(agree) == 1 + 2 * 4
    assert [r[0] for r in enclosure[1:]] == list(ACTIONS) and len(check) == 3 and len(finite) == 5
    assert len(cells) == 1 + 9 and cells[0][:3] == ["document", "action", "D̄"]


def test_render_formats_the_numbers(renderer, synthetic):
    cells = synthetic["cells"].sort("document", "retention", "action")
    first = cells.row(0, named=True)
    row = tables_of(renderer.cells_section(synthetic["cells"]))[0][1]
    assert row[:2] == [first["document"], first["action"]]
    assert row[2] == f"{first['swrb_mean_D']:.3g}" and row[7] == f"{first['variance_ratio_R_H']:.3g}"
    assert row[-1] == f"{first['z_R_H']:+.2f}" and row[-1][0] in "+-"
    # the zero-variance cells of snapkv_99 (complete never diverged in document 0) are counted
    zero = synthetic["summaries"]["retention_R_H"].filter(pl.col("retention") == 0.99)["complete_zero_variance_cells"]
    assert zero.item() >= 1
    # intervals est [lo, hi] to 3 significant digits; none as –, infinity as ∞
    summary = {
        "variance_ratio_median": 1234.5678,
        "variance_ratio_median_lo": 0.0123456,
        "variance_ratio_median_hi": float("inf"),
        "variance_ratio_min": float("nan"),
        "variance_ratio_max": 305.4,
    }
    assert renderer.MEDIAN(summary) == "1.23e+03 [0.0123, ∞]"
    assert renderer.spread(summary) == "––305"  # no smallest ratio (–), then the dash of the range
    assert [renderer.number(v) for v in (None, float("nan"), float("-inf"), 7.0812e-05, 3, "x")] == [
        "–",
        "–",
        "∞",
        "7.08e-05",
        "3",
        "x",
    ]
    assert renderer.percent(0.999) == "99.9%" and renderer.percent(0.5) == "50%"
    enclosure = tables_of(renderer.enclosure_section(synthetic["enclosures"], 0.05, 2))[0]
    e = synthetic["enclosures"].row(0, named=True)
    assert enclosure[1][4] == f"[{e['enclosure_lower']:.3f}, {e['enclosure_upper']:.3f}]"
    assert enclosure[1][7] in ("yes", "no")
    assert "_No batch with `M_path`._" in renderer.variance_check_section(synthetic["variance_check"].clear())
