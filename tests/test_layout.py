"""kvdiv.layout: the documented result paths, stratum names and document ids (docs/internals.md "Paths")."""

from __future__ import annotations

import pytest

from kvdiv import layout
from kvdiv.names import RESERVED


def test_paths_are_the_documented_ones():
    assert layout.model_ready("smollm2") == "results/models/smollm2/provenance.json"
    assert layout.documents_file("s", "ruler_1024") == "results/s/documents/ruler_1024.jsonl"
    assert layout.document_file("s", "ruler_1024", "s-ruler_1024-0003") == "results/s/documents/ruler_1024/s-ruler_1024-0003.json"
    assert layout.trajectory_store("s", "m", "d") == "results/s/trajectories/m/d.zarr"
    assert layout.cube("s", "m") == "results/s/cube/m.zarr"
    assert layout.metrics_file("s", "m", "replicates") == "results/s/metrics/m/replicates.parquet"
    assert layout.analysis_table("figure5", "entry") == "results/analysis/figure5/entry.parquet"
    assert (layout.figure("figure6", "png"), layout.table("table2", "tex")) == ("results/figures/figure6.png", "results/tables/table2.tex")
    assert layout.leaderboard("m", "csv") == "results/leaderboard/m.csv"
    assert layout.answers("s", "m") == "results/s/answers/m.parquet"
    assert layout.gallery("s", "m") == "results/figures/gallery/s/m.html"
    assert layout.finite_system("v2h8") == "results/finite_state/systems/v2h8.json" and layout.REPORT == "results/report.md"
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
    top = {path.split("/")[1] for path in (layout.MODELS_DIR, layout.ANALYSIS_DIR, layout.FIGURES_DIR, layout.TABLES_DIR,
                                           layout.FINITE_DIR, layout.BENCHMARKS_DIR, layout.LEADERBOARD_DIR, layout.REPORT)}
    assert top <= set(layout.RESULTS_ENTRIES)
