"""kvdiv.results: one module per result and one registry line. The registry agrees with the config schema and the
builders' signatures; a result added the way CONTRIBUTING.md says (its module, its name in NAMES) is built, drawn,
written and reported by the generic machinery without touching anything else; each result's jobs hash only its own
module."""

from __future__ import annotations

import inspect
import sys
import types
from pathlib import Path

import polars as pl
import pytest
import yaml

from kvdiv.analysis.inputs import Metrics
from kvdiv.codehash import code_hash
from kvdiv.config.checks import WINDOW_SETTINGS
from kvdiv.io import write_parquet
from kvdiv.metrics import compute_metrics
from kvdiv.outputs.tables import write_table
from kvdiv.results import registry
from kvdiv.results.base import Plot, Result, Table
from kvdiv.results.registry import get_result, plot_result, write_result_table
from kvdiv.results.report import build_report, paper_values
from support.synthetic_cube import simulate_cube

REPO = Path(__file__).resolve().parents[2]
SETTING = {"models": {"tiny": "random"}, "studies": {}, "figure_studies": {"toy": "st"}, "bootstrap": 10}

#: A result written as a contributor would write one: its own module (a builder of its own here, normally one of
#: kvdiv.analysis), declaring its tables, plot, display, caption and section.
TOY_MODULE = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl
from kvdiv.results.base import Plot, Result, Table


def mean_risk(metrics, n_boot, seed, confidence, window):
    rep = metrics.replicates
    return rep.group_by("action").agg(pl.col("mismatch").mean().alias("risk")).sort("action").with_columns(
        pl.lit(window[1]).alias("last")
    )


def draw(frames, pdf, png, *, dpi, window):
    fig, ax = plt.subplots(figsize=(4, 3))
    numbers = frames["numbers"]
    ax.bar(numbers["action"].to_list(), numbers["risk"].to_list())
    ax.set_title(f"risk (window {window})")
    fig.savefig(pdf)
    fig.savefig(png, dpi=dpi)
    plt.close(fig)


def section(frames, setting, paper, context):
    return [context.heading(), "", f"actions: {frames['numbers'].height}; paper keys: {sorted(paper)}", ""]


RESULT = Result(
    name="toy",
    kind="figure",
    label="Toy",
    title="Toy: a result added in a test",
    tables={"numbers": Table(mean_risk, {"window": "early"})},
    plot=Plot(draw, {"window": "early"}),
    section=section,
    paper=("prediction",),
    study="st",
)
"""


@pytest.fixture
def toy(monkeypatch):
    """The toy result registered as CONTRIBUTING.md says: its module, and its name added to registry.NAMES."""
    module = types.ModuleType("kvdiv.results.toy")
    exec(compile(TOY_MODULE, "kvdiv/results/toy.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "kvdiv.results.toy", module)
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "toy"))
    return module


def test_a_result_added_by_its_module_and_one_registry_line_is_built_drawn_and_reported(toy, tmp_path):
    ds = simulate_cube({"a": 0.05, "b": 0.2}, 6, 2, 16, seed=3, study="st", model="tiny")
    t = compute_metrics(ds, window=4)
    metrics = Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])
    result = get_result("toy")
    assert registry.default_studies()["toy"] == "st" and "toy" in registry.studied()
    assert result.table_settings("numbers", {"early": [1, 8]}) == {"window": [1, 8]}
    numbers = result.build(metrics, n_boot=10, seed=1, confidence=0.95, window=[1, 8])["numbers"]
    assert numbers["action"].to_list() == ["a", "b"] and numbers["last"].to_list() == [8, 8]
    plot_result("toy", {"numbers": numbers}, tmp_path / "toy.pdf", tmp_path / "toy.png", dpi=40, window=[1, 8])
    assert (tmp_path / "toy.png").stat().st_size > 0 and (tmp_path / "toy.pdf").stat().st_size > 0
    write_parquet(numbers, tmp_path / "numbers.parquet")
    text = build_report(
        {"toy": {"numbers": tmp_path / "numbers.parquet"}},
        {},
        {"toy": tmp_path / "toy.png"},
        SETTING,
        tmp_path / "r.md",
    )
    assert "## Toy: a result added in a test (st)\n\nactions: 2; paper keys: ['prediction']\n" in text
    assert "## Toy" not in build_report({}, {}, {}, SETTING, tmp_path / "r2.md")  # not built: no section


def test_the_registry_agrees_with_the_schema_and_the_builders():
    schema = yaml.safe_load((REPO / "kvdiv/data/schema.yaml").read_text())
    analysis = schema["properties"]["analysis"]["properties"]
    assert "default" not in analysis["studies"]  # the registry fills it (kvdiv.config.files.fill_result_defaults)
    assert set(registry.studied()) == set(registry.NAMES) - {"leaderboard"}
    # the default feeds the paper's results; the probabilistic study is opt-in (config/probabilistic.yaml)
    assert set(registry.default_studies()) == set(registry.studied()) - {"probabilistic"}
    sections = {"analysis": analysis, "leaderboard": schema["properties"]["leaderboard"]["properties"]}
    for result in registry.results():
        assert result.title.startswith(result.label)
        keys = result.window_keys()
        assert keys <= set(sections[result.config]), f"{result.name}: settings {keys - set(sections[result.config])}"
        for table, spec in result.tables.items():
            params = inspect.signature(spec.build).parameters
            for arg in ("n_boot", "seed", "confidence", *spec.settings, *spec.fixed):
                assert arg in params, f"{result.name}/{table}: {spec.build.__name__} takes no {arg!r}"
        if result.plot is not None:
            params = inspect.signature(result.plot.draw).parameters
            assert {"dpi", *result.plot.settings} <= set(params), result.name
    assert set(registry.names("figure")) == {"figure5", "figure6", "figure7", "probabilistic", "endings"}
    assert set(registry.names("table")) == {"table2", "table3", "accuracy"} and registry.names("section") == ("swrb",)
    assert all(r.caption and list(r.tables) == ["numbers"] for r in registry.results(("table", "leaderboard")))
    assert set(WINDOW_SETTINGS) <= set(analysis)


def test_settings_come_from_the_result_and_its_config_section():
    analysis = {
        "contrasts": [["a", "b"]],
        "table3_contrast": ["a", "b"],
        "short_window": [1, 4],
        "folds": 3,
        "ridge_alpha": 0.5,
        "criterion_pp": 2.0,
        "blocks": [[1, 2]],
        "cohort_max_tau": 8,
        "early": [1, 2],
        "late": [3, 4],
    }
    assert get_result("figure5").table_settings("survival", analysis) == {}
    late_early = get_result("figure7").table_settings("late_minus_early", analysis)
    assert late_early == {"cohort_max_tau": 8, "early": [1, 2], "late": [3, 4]}
    assert get_result("table3").table_settings("numbers", analysis)["criterion"] == pytest.approx(0.02)  # pp -> share
    # only Figure 6's plot takes the depth windows: changing them reruns its figure job, no other figure's
    assert get_result("figure6").plot_settings(analysis) == {"early": [1, 2], "late": [3, 4], "cohort_max_tau": 8}
    assert all(get_result(n).plot_settings(analysis) == {} for n in ("figure5", "figure7", "probabilistic"))
    assert {n for n in registry.NAMES if "early" in get_result(n).window_keys()} == {"figure6", "figure7"}


def test_plot_result_takes_exactly_the_settings_a_plot_declares(monkeypatch, tmp_path):
    seen = {}
    figure = Result(
        "figure6",
        "figure",
        "Figure 6",
        "Figure 6: x",
        {"t": Table(lambda metrics, n_boot, seed, confidence: pl.DataFrame())},
        plot=Plot(lambda frames, pdf, png, **kw: seen.update(kw), {"early": "early"}),
    )
    monkeypatch.setitem(sys.modules, "kvdiv.results.figure6", types.SimpleNamespace(RESULT=figure))
    plot_result("figure6", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50, early=[1, 2])
    assert seen == {"dpi": 50, "early": [1, 2]}
    with pytest.raises(TypeError, match=r"settings \['late'\] not declared"):
        plot_result("figure6", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50, early=[1, 2], late=[3, 4])
    with pytest.raises(TypeError, match=r"\['early'\] missing"):
        plot_result("figure6", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50)
    with pytest.raises(KeyError, match="swrb.*no figure"):
        plot_result("swrb", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50)


def test_results_are_reported_in_registry_order_with_their_own_paper_keys(tmp_path):
    keys = set(paper_values())
    assert all(set(r.paper) <= keys for r in registry.results())
    text = build_report({"accuracy": {}, "swrb": {}}, {}, {}, SETTING, tmp_path / "report.md")
    assert text.index("## Accuracy") < text.index("## SWRB")
    assert "_The accuracy table was not built._" in text and "paper: llama | paper: qwen" not in text


def test_the_one_table_writer_writes_csv_and_markdown_with_or_without_latex(tmp_path):
    numbers = pl.DataFrame({"a": [1, 2]})
    write_table(numbers, numbers, (tmp_path / "t.csv", tmp_path / "t.md"), "Caption.")
    assert (tmp_path / "t.md").read_text() == "Caption.\n\n| a |\n|---|\n| 1 |\n| 2 |\n"
    assert not (tmp_path / "t.tex").exists()
    with pytest.raises(ValueError, match="needs a label"):
        write_table(numbers, numbers, (tmp_path / "u.csv", tmp_path / "u.md", tmp_path / "u.tex"), "Caption.")
    with pytest.raises(ValueError, match="got 1 paths"):
        write_table(numbers, numbers, (tmp_path / "v.csv",), "Caption.")
    with pytest.raises(KeyError, match="'figure5' has no table"):
        write_result_table("figure5", numbers, (tmp_path / "w.csv", tmp_path / "w.md"))


def test_a_malformed_result_is_refused():
    table = {"t": Table(lambda metrics, n_boot, seed, confidence: pl.DataFrame())}
    with pytest.raises(ValueError, match="kind 'chart'"):
        Result("x", "chart", "X", "X: x", table)
    with pytest.raises(ValueError, match="a figure without a plot"):
        Result("x", "figure", "X", "X: x", table)
    with pytest.raises(ValueError, match="needs a `numbers` table and a display frame"):
        Result("x", "table", "X", "X: x", table)
    with pytest.raises(KeyError, match="unknown result 'figure8'.*figure5"):
        get_result("figure8")
    with pytest.raises(TypeError, match="needs the setting 'contrasts'"):
        get_result("figure5").build_table("decomposition", None, n_boot=1, seed=1, confidence=0.9)


def test_each_results_jobs_hash_only_their_own_module(tmp_path):
    """The registry imports result modules by name: a job's code covers its script and its own result's module, so
    editing Table 3's module changes Table 3's code hash and no other result's (results that import another's
    drawing helpers, as Figure 7 imports Figure 5's, hash it too); the report's covers every result."""
    import shutil

    package = tmp_path / "kvdiv"
    shutil.copytree(REPO / "kvdiv", package, ignore=shutil.ignore_patterns("__pycache__"))
    script = REPO / "workflow_scripts" / "figure.py"

    def hashes() -> dict[str, str]:
        own = {name: code_hash(script, *registry.result_modules(name), package_dir=package) for name in registry.NAMES}
        return own | {"report": code_hash(script, *registry.result_modules(), package_dir=package)}

    before = hashes()
    (package / "results" / "table3.py").write_text((package / "results" / "table3.py").read_text() + "\n# edited\n")
    after = hashes()
    assert {name for name in before if before[name] != after[name]} == {"table3", "report"}
