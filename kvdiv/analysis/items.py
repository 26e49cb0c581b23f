"""The registry of analysis items: every figure, table and report section the workflow builds, and the leaderboard.

An item (``figure5`` ... ``table3``, ``probabilistic``, ``accuracy``, ``swrb``: the keys of ``analysis.studies`` and
the stems of their output files; ``leaderboard``) has a kind (``figure``, ``table``, ``section``, ``leaderboard``),
a title and caption, and its **tables**, each built by one function of this package from one study's metrics and the
config settings it names (so changing a setting reruns exactly the tables that use it). How each item is drawn,
written and reported: :mod:`kvdiv.outputs.registry`, in this order. Contract: docs/internals.md#analysis-items.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kvdiv.analysis.accuracy import accuracy_table
from kvdiv.analysis.blocks import clock_block_gaps
from kvdiv.analysis.decomposition import eos_shares, gap_decomposition
from kvdiv.analysis.inputs import Metrics
from kvdiv.analysis.leaderboard import leaderboard_table
from kvdiv.analysis.prediction import prediction_table
from kvdiv.analysis.swrb_comparison import swrb_enclosure, swrb_variance
from kvdiv.analysis.profiles import branch_tv_profiles, late_minus_early
from kvdiv.analysis.timing import entry_contrasts, entry_times, survival_curves
from kvdiv.analysis.windows import check_window

#: Config keys in percentage points that builders take as proportions.
PERCENTAGE_POINTS = ("criterion_pp",)


@dataclass(frozen=True)
class AnalysisTable:
    """One frame of an item: ``build(metrics, n_boot=, seed=, confidence=, **settings, **fixed)``."""

    build: Callable[..., pl.DataFrame]
    settings: Mapping[str, str] = field(default_factory=dict)  # builder argument -> `analysis` config key
    fixed: Mapping[str, Any] = field(default_factory=dict)  # builder arguments fixed by the item


@dataclass(frozen=True)
class AnalysisItem:
    """A figure or table of the paper, a report section or the leaderboard: ``name`` (figure5, ...), ``kind``
    (figure, table, section or leaderboard), ``label`` (Figure 5), ``title`` (the heading of its section of
    results/report.md), its ``tables``, ``caption`` (of a table's Markdown/LaTeX) and ``config``, the config
    section whose keys its tables' settings name."""

    name: str
    kind: str
    label: str
    title: str
    tables: Mapping[str, AnalysisTable]
    caption: str = ""
    config: str = "analysis"


CONTRASTS = {"contrasts": "contrasts"}
COHORT = {"cohort_max_tau": "cohort_max_tau"}
LATE_EARLY = {"cohort_max_tau": "cohort_max_tau", "early": "early", "late": "late"}

ITEMS: dict[str, AnalysisItem] = {
    "figure5": AnalysisItem(
        "figure5",
        "figure",
        "Figure 5",
        "Figure 5: entry into divergence and the gap decomposition",
        {
            "decomposition": AnalysisTable(gap_decomposition, CONTRASTS),
            "survival": AnalysisTable(survival_curves),
            "entry": AnalysisTable(entry_times),
            "entry_contrasts": AnalysisTable(entry_contrasts, CONTRASTS),
        },
    ),
    "figure6": AnalysisItem(
        "figure6",
        "figure",
        "Figure 6",
        "Figure 6: branch TV by divergence-aligned depth",
        {
            "profiles": AnalysisTable(branch_tv_profiles, COHORT),
            "late_minus_early": AnalysisTable(late_minus_early, LATE_EARLY),
        },
    ),
    "figure7": AnalysisItem(
        "figure7",
        "figure",
        "Figure 7",
        "Figure 7: the 90% retention study",
        {
            "decomposition": AnalysisTable(gap_decomposition, CONTRASTS, {"by": "family"}),
            "late_minus_early": AnalysisTable(late_minus_early, LATE_EARLY, {"by": "family"}),
            "late_minus_early_strata": AnalysisTable(late_minus_early, LATE_EARLY),
            "eos": AnalysisTable(eos_shares, CONTRASTS, {"by": "family"}),
        },
    ),
    "table2": AnalysisItem(
        "table2",
        "table",
        "Table 2",
        "Table 2: generation-clock gaps by position block",
        {"numbers": AnalysisTable(clock_block_gaps, {"contrasts": "contrasts", "blocks": "blocks"})},
        caption="Table 2: generation-clock mismatch gaps (pp) by position block, per model × task family × length "
        "(pooled rows: all), with 95% cluster-bootstrap intervals over documents.",
    ),
    "table3": AnalysisItem(
        "table3",
        "table",
        "Table 3",
        "Table 3: early and fixed-history prediction of the full-horizon gap",
        {
            "numbers": AnalysisTable(
                prediction_table,
                {
                    "contrast": "table3_contrast",
                    "short_window": "short_window",
                    "folds": "folds",
                    "ridge_alpha": "ridge_alpha",
                    "criterion": "criterion_pp",
                },
            )
        },
        caption="Table 3: do generation positions 1–32 (observed mismatch gap, fixed-history TV gap) recover the "
        "full-horizon population-average gap within ±2 pp? Document-level MAE/RMSE of the predictions.",
    ),
    "probabilistic": AnalysisItem(
        "probabilistic",
        "figure",
        "Probabilistic eviction",
        "Probabilistic eviction: does decode-time correction delay divergence?",
        {
            "decomposition": AnalysisTable(gap_decomposition, CONTRASTS),
            "survival": AnalysisTable(survival_curves),
            "entry": AnalysisTable(entry_times),
        },
    ),
    "accuracy": AnalysisItem(
        "accuracy",
        "table",
        "Accuracy",
        "Accuracy: does divergence change the answer?",
        {"numbers": AnalysisTable(accuracy_table)},
        caption="Task accuracy (%) of the full-cache continuation x and the evicted one y (the document's own scorer: "
        "RULER string-match, HELMET SubEM), the share of pairs whose score changed, and the accuracy of y when the "
        "chains diverged at or before the end of x's first answer span (early) or after it (late), per model × stratum "
        "× action, with 95% cluster-bootstrap intervals over documents.",
    ),
    "swrb": AnalysisItem(
        "swrb",
        "section",
        "SWRB",
        "SWRB: residual-branch estimation on the LLM study — variance–cost and the enclosure of R_H",
        {
            "variance": AnalysisTable(swrb_variance),
            "enclosure": AnalysisTable(swrb_enclosure),
        },
    ),
    "leaderboard": AnalysisItem(
        "leaderboard",
        "leaderboard",
        "Divergence leaderboard",
        "Divergence leaderboard: which action keeps the full-cache continuation longest?",
        {"numbers": AnalysisTable(leaderboard_table, {"steps": "steps"})},
        caption="Divergence leaderboard: every action ranked by R_H (the mean share of the H steps at which the "
        "evicted continuation y differs from the full-cache one x; lowest first), with the divergence fraction "
        "P(τ ≤ h) by "
        "step, the mean first-divergence step among diverged pairs, the exposure E_H, the post-divergence mismatch "
        "rate C = Π_H/E_H and the task accuracy of y and x (the document's own scorer), with 95% cluster-bootstrap "
        "intervals over documents.",
        config="leaderboard",
    ),
}

#: Figure items (rule ``analysis`` and rule ``figure``), table items (rule ``table``) and report sections (rule
#: ``analysis`` only), in order; ``ANALYSED``: the items whose tables rule ``analysis`` writes; ``STUDIED``: the
#: items ``analysis.studies`` may name (all but the leaderboard, which its own config section configures).
FIGURES = tuple(name for name, item in ITEMS.items() if item.kind == "figure")
TABLES = tuple(name for name, item in ITEMS.items() if item.kind == "table")
SECTIONS = tuple(name for name, item in ITEMS.items() if item.kind == "section")
ANALYSED = FIGURES + SECTIONS
STUDIED = tuple(name for name, item in ITEMS.items() if item.kind in ("figure", "table", "section"))


def get_item(name: str) -> AnalysisItem:
    """The item called ``name`` (a ``KeyError`` listing the items otherwise)."""
    if name not in ITEMS:
        raise KeyError(f"unknown analysis item {name!r}; items: {', '.join(ITEMS)}")
    return ITEMS[name]


def table_settings(item: str, table: str, analysis: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (builder argument → value) one table of ``item`` takes from its config section ``analysis``
    (the item's ``config``: the ``analysis`` section, or ``leaderboard`` for the leaderboard)."""
    spec = get_item(item).tables[table]
    return {
        arg: analysis[key] / 100 if key in PERCENTAGE_POINTS else analysis[key] for arg, key in spec.settings.items()
    }


def build_table(
    item: str, table: str, metrics: Metrics, *, n_boot: int, seed: int, confidence: float, **settings: Any
) -> pl.DataFrame:
    """One table of ``item``: its builder called with the bootstrap settings, the table's own settings (taken from
    ``settings`` by argument name; others are ignored) and the item's fixed arguments."""
    spec = get_item(item).tables[table]
    own = {arg: settings[arg] for arg in spec.settings}
    return spec.build(metrics, n_boot=n_boot, seed=seed, confidence=confidence, **own, **dict(spec.fixed))


def build_item(item: str, metrics: Metrics, **kwargs: Any) -> dict[str, pl.DataFrame]:
    """Every table of ``item`` (the arguments of :func:`build_table`), by table name."""
    return {table: build_table(item, table, metrics, **kwargs) for table in get_item(item).tables}


#: Window settings of the ``analysis`` section and the bound of each against its study's horizon H: generation
#: positions t ≤ H (offset 0), divergence-aligned depths ℓ = t − τ ≤ H − 1 (offset 1).
WINDOW_SETTINGS = {"blocks": 0, "short_window": 0, "early": 1, "late": 1}


def window_items(key: str) -> list[str]:
    """The items with a table that uses the window setting ``key``."""
    return [name for name, item in ITEMS.items() if any(key in t.settings.values() for t in item.tables.values())]


def check_analysis_windows(analysis: Mapping, horizons: Mapping[str, int]) -> None:
    """Check the window settings of the ``analysis`` config section against the horizon of the study that feeds
    each item using them (``horizons``: item → H, for the items whose study is configured). Called by the workflow
    when it starts."""
    for key, below in WINDOW_SETTINGS.items():
        if key not in analysis:
            continue
        windows = analysis[key] if key == "blocks" else [analysis[key]]
        if key == "blocks" and not windows:
            raise ValueError("analysis.blocks is empty")
        for item in window_items(key):
            if item not in horizons:
                continue
            what = "positions t <= H" if below == 0 else "depths <= H - 1"
            context = f"{item} uses a study with H = {horizons[item]}: {what}"
            for i, window in enumerate(windows):
                name = f"analysis.{key}[{i}]" if key == "blocks" else f"analysis.{key}"
                check_window(name, window, horizons[item] - below, context)
