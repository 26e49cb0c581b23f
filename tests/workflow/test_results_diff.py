"""tests/workflow/results_diff.py, the before/after comparison of results trees: it finds a changed array value,
a changed byte and a missing file, and lets wall times and job benchmarks differ."""

from __future__ import annotations

import shutil

import polars as pl
import zarr
from results_diff import compare_results

from kvdiv.io import write_parquet
from kvdiv.trajectories.store import seal_store, writing_every_chunk
from support.synthetic_cube import simulate_cube, write_cube


def make_results(root):
    write_cube(
        simulate_cube({"a": 0.1, "b": 0.2}, n_documents=3, replicates=2, horizon=8, seed=1), root / "s/cube/m.zarr"
    )
    write_parquet(pl.DataFrame({"x": [1.0, 2.0]}), root / "s/metrics/m/replicates.parquet")
    (root / "tables").mkdir()
    (root / "tables/table2.md").write_text("| a |\n")
    (root / "benchmarks/metrics/s").mkdir(parents=True)
    (root / "benchmarks/metrics/s/m.tsv").write_text("s\n1.0\n")
    (root / "smoke/logs/metrics/s").mkdir(parents=True)  # a config's own root holds its logs and benchmarks
    (root / "smoke/logs/metrics/s/m.log").write_text("started 12:00\n")
    (root / "smoke/benchmarks/metrics/s").mkdir(parents=True)
    (root / "smoke/benchmarks/metrics/s/m.tsv").write_text("s\n1.0\n")
    return root


def edit_store(path, edit):
    root = zarr.open_group(str(path), mode="r+", zarr_format=3)
    with writing_every_chunk():
        edit(root)
    seal_store(path)  # a consistent store whose values changed: only the comparison can tell


def test_identical_runs_compare_equal_and_wall_times_may_differ(tmp_path):
    a = make_results(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    edit_store(b / "s/cube/m.zarr", lambda root: root.attrs.update(wall_time_total_s=99.0))
    (b / "benchmarks/metrics/s/m.tsv").write_text("s\n2.0\n")
    (b / "smoke/benchmarks/metrics/s/m.tsv").write_text("s\n3.0\n")
    (b / "smoke/logs/metrics/s/m.log").write_text("started 12:01\n")
    result = compare_results(a, b)
    assert result.identical, result.summary()
    assert result.stores == 1 and result.arrays > 10 and result.files == 3  # parquet, its .sha256, table
    assert sum("job benchmark" in n for n in result.notes) == 2 and any("job log" in n for n in result.notes)


def test_a_changed_value_byte_attribute_or_file_is_a_difference(tmp_path):
    a = make_results(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)

    def bump(root):
        tv = root["tv"][...]
        tv[0, 0, 0, 3] = float(tv[0, 0, 0, 3]) + 1e-7
        root["tv"][...] = tv
        root.attrs.update(horizon=9)

    edit_store(b / "s/cube/m.zarr", bump)
    (b / "tables/table2.md").write_text("| b |\n")
    (b / "s/metrics/m/replicates.parquet.sha256").unlink()
    result = compare_results(a, b)
    text = result.summary()
    assert not result.identical
    assert "array 'tv' differs" in text and "attributes ['horizon'] differ" in text
    assert "tables/table2.md: bytes differ" in text and "replicates.parquet.sha256: only in before" in text
