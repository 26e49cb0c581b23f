"""kvdiv.layout: the documented result paths, stratum names and document ids (docs/internals.md "Paths")."""

from __future__ import annotations

import re

import pytest

from kvdiv import layout
from kvdiv.names import RESERVED


def test_paths_are_the_documented_ones():
    assert layout.model_ready("smollm2") == "results/models/smollm2/provenance.json"
    assert layout.documents_file("s", "ruler_1024") == "results/s/documents/ruler_1024.jsonl"
    assert layout.document_block("s", "ruler_1024", 4, 7) == "results/s/documents/ruler_1024/0004-0007.jsonl"
    assert layout.trajectory_store("s", "m", "d") == "results/s/trajectories/m/d.zarr"
    assert layout.cube("s", "m") == "results/s/cube/m.zarr"
    assert layout.metrics_file("s", "m", "replicates") == "results/s/metrics/m/replicates.parquet"
    assert layout.analysis_table("figure5", "entry") == "results/analysis/figure5/entry.parquet"
    assert (layout.figure("figure6", "png"), layout.table("table2", "tex")) == (
        "results/figures/figure6.png",
        "results/tables/table2.tex",
    )
    assert layout.leaderboard("m", "csv") == "results/leaderboard/m.csv"
    assert layout.answers("s", "m") == "results/s/answers/m.parquet"
    assert layout.gallery("s", "m") == "results/figures/gallery/s/m.html"
    assert (
        layout.finite_system("v2h8") == "results/finite_state/systems/v2h8.json"
        and layout.REPORT == "results/report.md"
    )
    assert layout.log("trajectories", "s/m/d") == "results/logs/trajectories/s/m/d.log"
    assert layout.job_benchmark("cube", "s/m") == "results/benchmarks/cube/s/m.tsv"
    # Snakemake patterns pass through unchanged
    assert layout.cube("{study}", "{model}") == "results/{study}/cube/{model}.zarr"


def test_strata_and_document_ids_round_trip():
    assert layout.stratum_name("ruler", 1024) == "ruler_1024" and layout.parse_stratum("helmet_768") == ("helmet", 768)
    doc = layout.document_id("retention50", "ruler_1024", 7)
    assert doc == "retention50-ruler_1024-0007" and layout.document_index(doc) == 7
    assert layout.document_index(layout.document_id("s", "ruler_8", 12345)) == 12345
    with pytest.raises(ValueError, match="ruler-1024"):
        layout.parse_stratum("ruler-1024")
    with pytest.raises(ValueError, match="index"):
        layout.document_index("s-ruler_8-7")


def test_studies_cannot_take_the_names_of_other_results_entries():
    assert RESERVED["study"] == {entry.lower() for entry in layout.RESULTS_ENTRIES}
    top = {
        path.split("/")[1]
        for path in (
            layout.MODELS_DIR,
            layout.ANALYSIS_DIR,
            layout.FIGURES_DIR,
            layout.TABLES_DIR,
            layout.FINITE_DIR,
            layout.BENCHMARKS_DIR,
            layout.LEADERBOARD_DIR,
            layout.REPORT,
        )
    }
    assert top <= set(layout.RESULTS_ENTRIES)


def test_every_path_of_a_root_lies_under_it():
    """An output root (config key `results`) holds every path of its config, logs and job benchmarks included."""
    paths = layout.Layout("results/smoke")
    built = [
        paths.model_ready("m"),
        paths.document_block("s", "ruler_8", "{first}", "{last}"),
        paths.cube("s", "m"),
        paths.trajectory_store("s", "m", "d"),
        paths.answers("s", "m"),
        paths.metrics_file("s", "m", "replicates"),
        paths.analysis_table("figure5", "entry"),
        paths.figure("figure5", "png"),
        paths.table("table2", "md"),
        paths.gallery("s", "m"),
        paths.leaderboard("m", "md"),
        paths.finite_file("exact.parquet"),
        paths.finite_system("v2h8"),
        paths.report,
        paths.log("cube", "s/m"),
        paths.job_benchmark("cube", "s/m"),
    ]
    assert all(path.startswith("results/smoke/") for path in built), built
    assert (
        paths.document_block("s", "ruler_8", "{first}", "{last}")
        == "results/smoke/s/documents/ruler_8/{first}-{last}.jsonl"
    )
    # the module-level functions are the default root's
    assert layout.cube("s", "m") == layout.Layout().cube("s", "m") == "results/s/cube/m.zarr"


@pytest.mark.parametrize(
    "root, message",
    [
        ("", "non-empty"),
        ("/abs/x", "relative path"),
        ("../x", "'..'"),
        ("results/../x", "'..'"),
        ("./results", "'.'"),
        (".snakemake/x", "'.snakemake'"),
        ("results//x", "''"),
        ("kvdiv", "project's own"),
        ("results/models", "nests"),
        ("results/logs/x", "nests"),
        (3, "non-empty"),
    ],
)
def test_bad_results_roots_are_refused(root, message):
    from kvdiv.names import check_results_root

    with pytest.raises(ValueError, match=re.escape(message)):
        check_results_root(root)


def test_good_results_roots_pass():
    from kvdiv.names import check_results_root

    assert [check_results_root(r) for r in ("results", "results/smoke/", "out-2/a.b")] == [
        "results",
        "results/smoke",
        "out-2/a.b",
    ]
