"""kvdiv.analysis.items, the one registry of figures and tables: it agrees with the config schema, the builders'
signatures and the outputs that draw and write its items."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from kvdiv.analysis import items
from kvdiv.outputs.registry import RESULTS

REPO = Path(__file__).resolve().parents[2]


def test_items_are_the_keys_of_analysis_studies():
    """The schema leaves analysis.studies' keys to the registry (start-up checks them against items.STUDIED)."""
    schema = yaml.safe_load((REPO / "kvdiv/data/schema.yaml").read_text())
    studies = schema["properties"]["analysis"]["properties"]["studies"]
    assert "properties" not in studies and studies["additionalProperties"] == {"type": "string"}
    assert set(items.STUDIED) == set(items.ITEMS) - {"leaderboard"}
    # the default builds the paper's five items; the probabilistic study is opt-in (config/probabilistic.yaml)
    assert set(studies["default"]) == set(items.STUDIED) - {"probabilistic"}
    # the leaderboard's settings are keys of its own config section
    leaderboard = schema["properties"]["leaderboard"]["properties"]
    assert set(items.get_item("leaderboard").tables["numbers"].settings.values()) <= set(leaderboard)


def test_every_table_builder_takes_its_settings_and_the_bootstrap_arguments():
    for name, item in items.ITEMS.items():
        assert (
            item.tables
            and item.title.startswith(item.label)
            and item.kind in ("figure", "table", "section", "leaderboard")
        )
        for table, spec in item.tables.items():
            params = inspect.signature(spec.build).parameters
            for arg in ("n_boot", "seed", "confidence", *spec.settings, *spec.fixed):
                assert arg in params, f"{name}/{table}: {spec.build.__name__} takes no {arg!r}"


def test_outputs_draw_and_write_exactly_the_items():
    """kvdiv.outputs.registry has one result per item, in the same order, each with the outputs of its kind."""
    assert list(RESULTS) == list(items.ITEMS) and all(RESULTS[n].item is items.ITEMS[n] for n in items.ITEMS)
    plotted = {n for n, r in RESULTS.items() if r.plot} - {"leaderboard"}
    displayed = {n for n, r in RESULTS.items() if r.display} - {"leaderboard"}
    assert plotted == set(items.FIGURES) and displayed == set(items.TABLES)
    assert {n for n, r in RESULTS.items() if r.section} == set(items.STUDIED)
    assert items.SECTIONS == ("swrb",) and items.ANALYSED == items.FIGURES + items.SECTIONS
    assert set(items.FIGURES) | set(items.TABLES) | set(items.SECTIONS) | {"leaderboard"} == set(items.ITEMS)
    tabled = (*items.TABLES, "leaderboard")
    assert all(items.ITEMS[t].caption and list(items.ITEMS[t].tables) == ["numbers"] for t in tabled)


def test_table_settings_come_from_the_config_section():
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
    assert items.table_settings("figure5", "survival", analysis) == {}
    assert items.table_settings("figure7", "late_minus_early", analysis) == {
        "cohort_max_tau": 8,
        "early": [1, 2],
        "late": [3, 4],
    }
    assert items.table_settings("table3", "numbers", analysis)["criterion"] == pytest.approx(0.02)  # pp -> proportion
    assert items.window_items("early") == ["figure6", "figure7"] and items.window_items("blocks") == ["table2"]


def test_unknown_item_names_the_items():
    with pytest.raises(KeyError, match="figure5"):
        items.get_item("figure8")
