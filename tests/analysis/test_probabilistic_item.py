"""The probabilistic-eviction study's analysis item (issue 13): its survival panels group each action with its
reference, its figure and report section come from the same builders as Figures 5–7, and a config that names
only this item builds only it (snakemake dry run of config/probabilistic.yaml)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from kvdiv.analysis import inputs
from kvdiv.results.registry import get_result
from kvdiv.analysis.inputs import POOLED
from kvdiv.io import write_parquet
from kvdiv.metrics import compute_metrics
from kvdiv.results.probabilistic import plot_probabilistic, reference_groups
from kvdiv.results.report import build_report
from support.synthetic_cube import simulate_cube
from support.checkout import checkout_ignore

REPO = Path(__file__).resolve().parents[2]
STRATA = ("ruler_256", "helmet_256")
CONTRASTS = [["pmin_half", "snapkv_half"], ["pmin_half_corr", "snapkv_half"], ["pmin_half_corr", "pmin_half"]]


def test_reference_groups_follow_chains_and_keep_every_action_once():
    contrasts = [f"{a} − {b}" for a, b in CONTRASTS] + ["p90 − s90", "p90_corr − p90"]
    groups = reference_groups(contrasts, ["snapkv_half", "pmin_half", "pmin_half_corr", "p90", "s90", "lonely"])
    assert groups == {
        "snapkv_half": ["snapkv_half", "pmin_half", "pmin_half_corr"],
        "s90": ["s90", "p90", "p90_corr"],
        "lonely": ["lonely"],
    }
    # a cycle of contrasts terminates and still draws each action once
    cyc = reference_groups(["a − b", "b − a"], ["a", "b"])
    assert sorted(x for g in cyc.values() for x in g) == ["a", "b"]


@pytest.fixture(scope="module")
def study():
    e = {"snapkv_half": 0.05, "pmin_half": 0.02, "pmin_half_corr": 0.01}
    ds = simulate_cube(
        e, n_documents=12, replicates=3, horizon=64, seed=11, strata=STRATA, study="probabilistic", model="tiny"
    )
    t = compute_metrics(ds, window=16)
    return inputs.Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])


def test_item_figure_and_report_section(study, tmp_path):
    frames = get_result("probabilistic").build(study, n_boot=50, seed=3, confidence=0.95, contrasts=CONTRASTS)
    assert set(frames) == {"decomposition", "survival", "entry"}
    # the same builders as Figure 5: identical tables
    f5 = get_result("figure5").build(study, n_boot=50, seed=3, confidence=0.95, contrasts=CONTRASTS)
    for name in frames:
        assert frames[name].equals(f5[name])
    # a smaller TV enters divergence later: survival at H ordered as the TVs are
    surv = frames["survival"].filter(pl.col("step") == 64)
    s = dict(zip(surv["action"].to_list(), surv["survival"].to_list()))
    assert s["pmin_half_corr"] > s["pmin_half"] > s["snapkv_half"]

    paths = {name: tmp_path / "analysis" / f"{name}.parquet" for name in frames}
    for name, frame in frames.items():
        write_parquet(frame, paths[name])
    png = tmp_path / "figures" / "probabilistic.png"
    plot_probabilistic(frames, tmp_path / "figures" / "probabilistic.pdf", png, dpi=50)
    assert png.read_bytes()[:4] == b"\x89PNG"

    setting = {
        "models": {"tiny": "random"},
        "studies": {},
        "figure_studies": {"probabilistic": "probabilistic"},
        "contrasts": CONTRASTS,
        "bootstrap": 50,
        "confidence": 0.95,
    }
    text = build_report({"probabilistic": paths}, {}, {"probabilistic": png}, setting, tmp_path / "report.md")
    headings = re.findall(r"^## (.*)$", text, flags=re.M)
    assert [h for h in headings if h.startswith(("Figure", "Table"))] == []  # only the configured item
    assert any(h.startswith("Probabilistic eviction: does decode-time correction delay divergence?") for h in headings)
    assert "![probabilistic eviction](figures/probabilistic.png)" in text
    entry, dec = frames["entry"], frames["decomposition"]
    for action in ("snapkv_half", "pmin_half", "pmin_half_corr"):
        d = entry.filter(
            (pl.col("action") == action) & (pl.col("stratum") == POOLED) & (pl.col("statistic") == "diverged")
        ).row(0, named=True)
        t = entry.filter(
            (pl.col("action") == action) & (pl.col("stratum") == POOLED) & (pl.col("statistic") == "mean_tau_diverged")
        ).row(0, named=True)
        cell = f"{100 * d['estimate']:.2f} [{100 * d['lower']:.2f}, {100 * d['upper']:.2f}]"
        assert f"| {action} | tiny | 12 | {cell} | {t['estimate']:.1f} [" in text
    g = dec.filter(
        (pl.col("contrast") == "pmin_half_corr − pmin_half")
        & (pl.col("stratum") == POOLED)
        & (pl.col("statistic") == "gap")
    ).row(0, named=True)
    assert g["estimate"] < 0  # smaller TV, smaller mismatch risk
    assert f"| pmin_half_corr − pmin_half | tiny | 12 | {100 * g['estimate']:.2f} [" in text


def test_report_has_the_sections_of_the_items_built(study, tmp_path):
    """The report's sections are the items whose data the workflow passes (those named in analysis.studies): a
    run of the paper's items has no probabilistic section."""
    frames = get_result("figure5").build(study, n_boot=20, seed=3, confidence=0.95, contrasts=CONTRASTS)
    paths = {}
    for name, frame in frames.items():
        paths[name] = tmp_path / f"{name}.parquet"
        write_parquet(frame, paths[name])
    setting = {
        "models": {"tiny": "random"},
        "studies": {},
        "figure_studies": {"figure5": "x"},
        "bootstrap": 20,
        "confidence": 0.95,
    }
    text = build_report({"figure5": paths}, {}, {}, setting, tmp_path / "report.md")
    assert "Probabilistic eviction" not in text and "## Figure 5" in text and "## Figure 6" not in text
    assert "## Table 2" not in text


@pytest.mark.workflow
def test_probabilistic_config_builds_only_its_item(tmp_path):
    ignore = checkout_ignore(REPO)
    work = Path(shutil.copytree(REPO, tmp_path / "wf", ignore=ignore))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--quiet",
            "rules",
            "--cores",
            "1",
            "--configfile",
            "config/probabilistic.yaml",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    config = yaml.safe_load((work / "config/probabilistic.yaml").read_text())
    n_docs = config["studies"]["probabilistic"]["documents_per_stratum"] * len(
        config["studies"]["probabilistic"]["strata"]
    )
    counts: dict[str, int] = {}
    for rule, count in re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M):  # (the table may be printed twice)
        counts[rule] = int(count)
    batches = sum(count for rule, count in counts.items() if rule.startswith("trajectories_"))
    schema = yaml.safe_load((work / "kvdiv/data/schema.yaml").read_text())
    spec = config["models"]["smollm2"]
    size = (
        spec.get("documents_per_job")
        or schema["properties"]["models"]["additionalProperties"]["properties"]["documents_per_job"]["default"]
    )
    per_stratum = config["studies"]["probabilistic"]["documents_per_stratum"]
    # documents in blocks of the reference tokenizer model's documents_per_job, as the trajectory jobs
    assert int(counts["document"]) == len(config["studies"]["probabilistic"]["strata"]) * -(-per_stratum // size)
    assert n_docs == len(config["studies"]["probabilistic"]["strata"]) * per_stratum
    assert batches == len(config["studies"]["probabilistic"]["strata"]) * -(-per_stratum // size)  # blocks of `size`
    assert int(counts["analysis"]) == len(get_result("probabilistic").tables)
    # the accuracy table of the same study (analysis.studies.accuracy), no paper figure or table
    assert int(counts["figure"]) == 1 and int(counts["table"]) == 1 and int(counts["report_md"]) == 1


def test_survival_panels_keep_their_height_whatever_their_legends(tmp_path, monkeypatch):
    """A row of survival panels is as tall as the others whatever its legend's length: a row holding one action's
    panel beside a row of a four-action group (the recorded run's last row had been squashed to a seventh of the
    first, its rows sized by their legends' lengths alone)."""
    from kvdiv.results import probabilistic

    tv = {"a0": 0.05, "a1": 0.03, "a2": 0.02, "a3": 0.01, "b": 0.04, "c": 0.02, "d": 0.03}
    ds = simulate_cube(tv, n_documents=6, replicates=1, horizon=32, seed=5, strata=STRATA, study="p", model="tiny")
    t = compute_metrics(ds, window=8)
    metrics = inputs.Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])
    contrasts = [["a1", "a0"], ["a2", "a0"], ["a3", "a0"]]
    frames = get_result("probabilistic").build(metrics, n_boot=20, seed=1, confidence=0.95, contrasts=contrasts)
    groups = reference_groups([f"{a} − {b}" for a, b in contrasts], sorted(tv))
    assert [len(g) for g in groups.values()] == [4, 1, 1, 1]  # rows of three: legends of 4 entries, then of 1
    figures = []
    monkeypatch.setattr(probabilistic, "save_figure", lambda fig, *a, **k: figures.append(fig))
    plot_probabilistic(frames, tmp_path / "p.pdf", tmp_path / "p.png", dpi=50)
    (fig,) = figures
    fig.canvas.draw()
    heights = [ax.get_position().height for ax in fig.get_axes() if ax.get_title().startswith("survival vs")]
    assert len(heights) >= 4  # two rows of panels
    assert min(heights) > 0.8 * max(heights), heights
