"""Zarr v3 trajectory stores, the cube, and `kvdiv inspect`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from kvdiv.cli import main as cli_main
from kvdiv.trajectories.generate import generate
from kvdiv.trajectories.store import (
    build_cube,
    cube_coords,
    open_cube,
    read_cube_action,
    read_document_store,
    write_document_store,
)
from kvdiv.trajectories.summary import summarize
from support.toy_kernels import ToyKernelSession, history_kernel, mixture_kernel
from kvdiv.settings import generation

V, EOS, H, R = 5, 4, 6, 3
REF = history_kernel(V, seed=1)
KERNELS = {"a": mixture_kernel(REF, history_kernel(V, seed=2), 0.5), "b": REF}


def doc_store(tmp: Path, i: int, mode: str = "complete", actions=("a", "b")) -> Path:
    s = ToyKernelSession(REF, KERNELS, eos_token_ids=[EOS])
    out = generate(
        s,
        list(actions),
        generation(master_seed=1, study_seed=2, horizon=H, replicates=R, mode=mode),
        eos_token_ids=[EOS],
        progress=False,
        document_id=f"d{i}",
    )
    doc = {
        "id": f"st-ruler_16-{i:04d}",
        "family": "ruler",
        "task": f"task{i % 2}",
        "stratum": "ruler_16",
        "target_length": 16,
    }
    attrs = {
        "kvdiv_version": "0",
        "model": "toy",
        "model_spec": {},
        "weight_hash": "h",
        "document": doc,
        "actions": {a: {"press": "P"} for a in actions},
        "horizon": H,
        "temperature": 1.0,
        "seed": [1, 2],
        "mode": mode,
        "evict_first_step": False,
        "prompt_tokens": np.int64(10 + i),
    }
    return write_document_store(tmp / f"{doc['id']}.zarr", out, attrs), out


@pytest.mark.parametrize("mode", ["complete", "swrb"])
def test_document_store_round_trip_and_xarray(tmp_path, mode):
    path, out = doc_store(tmp_path, 0, mode)
    attrs, data = read_document_store(path)
    assert attrs["prompt_tokens"] == 10 and attrs["mode"] == mode and set(attrs["wall_time_s"]) == {"a", "b"}
    for a, t in out.items():
        for name in ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y"):
            assert np.array_equal(data[a][name], getattr(t, name))
        ds = xr.open_zarr(path, group=a)
        assert ds["tv"].dims == ("replicate", "step") and ds["x"].dtype == np.int32 and ds["match"].dtype == bool
        if mode == "swrb":
            assert ds["branch_start"].dims == ("replicate",)
            assert np.array_equal(ds["overlap_tv"].values, t.overlap_tv)
        else:
            assert "overlap_tv" not in ds
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_same_seed_gives_byte_identical_arrays(tmp_path):
    (tmp_path / "1").mkdir(), (tmp_path / "2").mkdir()
    p1, _ = doc_store(tmp_path / "1", 3)
    p2, _ = doc_store(tmp_path / "2", 3)
    files = sorted(f.relative_to(p1) for f in p1.rglob("*") if f.is_file() and f.parent != p1)  # root: wall time
    assert len(files) > 14
    for rel in files:
        assert (p1 / rel).read_bytes() == (p2 / rel).read_bytes(), rel


def test_failed_write_leaves_nothing_at_the_final_path(tmp_path):
    _, out = doc_store(tmp_path, 0)
    out["b"].x = None  # fails mid-write, after action "a" is written
    final = tmp_path / "broken.zarr"
    with pytest.raises(AttributeError):
        write_document_store(final, out, {"actions": {"a": {}, "b": {}}})
    assert not final.exists() and not any(p.name.startswith(".broken") for p in tmp_path.iterdir())


@pytest.mark.parametrize("mode", ["complete", "swrb"])
def test_cube(tmp_path, mode):
    stores, outs = zip(*(doc_store(tmp_path, i, mode) for i in range(3)))
    cube = build_cube("st", "toy", list(stores), tmp_path / "cube.zarr")
    ds = open_cube(cube)
    assert ds["tv"].dims == ("document", "action", "replicate", "step")
    assert ds.sizes == {"document": 3, "action": 2, "replicate": R, "step": H}
    assert list(ds["document"].values) == [f"st-ruler_16-{i:04d}" for i in range(3)]
    assert list(ds["step"].values) == list(range(1, H + 1))
    assert list(ds["prompt_tokens"].values) == [10, 11, 12] and list(ds["task"].values) == ["task0", "task1", "task0"]
    assert ds.attrs["study"] == "st" and ds.attrs["horizon"] == H
    for i, out in enumerate(outs):
        assert np.array_equal(ds["y"].sel(action="a").values[i], out["a"].y)
    plain = xr.open_zarr(cube)  # coordinates also without the helper
    assert "stratum" in plain.coords and plain["x"].encoding["chunks"] == (3, 1, R, H)
    b = read_cube_action(cube, "b")
    assert b["x"].shape == (3, R, H) and np.array_equal(b["tv"][1], outs[1]["b"].tv)
    if mode == "swrb":
        assert b["branch_start"].shape == (3, R)
    assert list(cube_coords(cube)["action"]) == ["a", "b"]
    with pytest.raises(KeyError, match="not in cube"):
        read_cube_action(cube, "zzz")


def test_long_horizons_are_chunked_along_steps(tmp_path, monkeypatch):
    """Steps are chunked (STEP_CHUNK; 4 here for H = 6): the store and the cube hold two step chunks per array and
    read back whole, and a window of the first steps reads only the first chunk of one action."""
    import kvdiv.trajectories.store as store

    monkeypatch.setattr(store, "STEP_CHUNK", 4)
    stores, outs = zip(*(doc_store(tmp_path, i) for i in range(2)))
    assert xr.open_zarr(stores[0], group="a")["tv"].encoding["chunks"] == (R, 4)
    _, data = read_document_store(stores[0])
    assert np.array_equal(data["a"]["tv"], outs[0]["a"].tv)
    cube = build_cube("st", "toy", list(stores), tmp_path / "cube.zarr")
    plain = xr.open_zarr(cube)
    assert plain["tv"].encoding["chunks"] == (2, 1, R, 4)
    assert np.array_equal(read_cube_action(cube, "a")["tv"][1], outs[1]["a"].tv)
    (cube / "tv/c/0/1/0/1").write_bytes(b"not a chunk")  # action "b", steps 5-6: garbage
    tv_b = xr.open_zarr(cube)["tv"].sel(action="b")
    assert np.array_equal(tv_b.isel(step=slice(0, 4)).values, np.stack([o["b"].tv[:, :4] for o in outs]))
    with pytest.raises(Exception):  # the garbage chunk is read only for steps 5-6
        tv_b.isel(step=slice(4, 6)).values


def test_cube_rejects_mismatched_stores(tmp_path):
    (tmp_path / "x").mkdir()
    s1, _ = doc_store(tmp_path, 0)
    s2, _ = doc_store(tmp_path / "x", 1, actions=("b", "a"))
    with pytest.raises(ValueError, match="actions"):
        build_cube("st", "toy", [s1, s2], tmp_path / "cube.zarr")
    with pytest.raises(ValueError, match="model"):
        build_cube("st", "other", [s1], tmp_path / "cube.zarr")
    assert not (tmp_path / "cube.zarr").exists()


def test_inspect(tmp_path, capsys):
    stores, outs = zip(*(doc_store(tmp_path, i) for i in range(2)))
    cube = build_cube("st", "toy", list(stores), tmp_path / "cube.zarr")
    s = summarize(cube)
    match = np.stack([o["a"].match for o in outs])
    diverged = ~match.all(axis=2)
    tau = np.argmax(~match, axis=2) + 1
    a = s["actions"]["a"]
    assert a["replicates"] == 2 * R and a["divergence_fraction"] == pytest.approx(diverged.mean())
    assert a["mean_tau"] == pytest.approx(tau[diverged].mean())
    assert a["mean_tv"] == pytest.approx(np.mean([o["a"].tv for o in outs]))
    assert a["eos_rate_x"] == pytest.approx(np.mean([o["a"].eos_x[:, -1] for o in outs]))
    assert s["actions"]["b"]["divergence_fraction"] == 0 and s["actions"]["b"]["mean_tau"] is None
    assert cli_main(["inspect", str(cube), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == s["documents"]
    assert cli_main(["inspect", str(stores[0])]) == 0
    text = capsys.readouterr().out
    assert "document store" in text and "mean tau" in text and "study st" in text
    assert cli_main(["inspect", str(stores[0]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["study"] == "st" == summarize(cube)["study"]  # was null
    assert cli_main(["inspect", str(tmp_path / "missing.zarr")]) == 2


def test_inspect_imports_no_llm_library(tmp_path):
    """`kvdiv inspect` reads Zarr with NumPy: neither torch nor transformers is imported (seconds of start-up)."""
    store, _ = doc_store(tmp_path, 0)
    code = (
        "import sys\nfrom kvdiv.cli import main\nassert main(['inspect', sys.argv[1], '--json']) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers', 'kvpress', 'matplotlib') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    assert proc.returncode == 0, proc.stderr
    summary, imported = _json_and_last_line(proc.stdout)
    assert summary["actions"]["a"]["replicates"] == R and imported == "[]"


def _json_and_last_line(text: str) -> tuple[dict, str]:
    """The JSON printed before the last line, and the last line."""
    body, last = text.rstrip("\n").rsplit("\n", 1)
    return json.loads(body), last


# ------------------------------------------------------------------------- integrity: nothing silent


def chunk_files(store: Path, array: str) -> list[Path]:
    return sorted(p for p in (store / array / "c").rglob("*") if p.is_file())


def test_every_chunk_is_written_even_all_fill_values(tmp_path):
    """Action "b" evicts nothing: its tv is all 0.0 (the fill value); its chunk must still be on disk."""
    path, out = doc_store(tmp_path, 0)
    assert not out["b"].tv.any()
    for action in ("a", "b"):
        for name in ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y"):
            assert len(chunk_files(path, f"{action}/{name}")) == 1, f"{action}/{name}"


@pytest.mark.parametrize("array", ["b/tv", "a/match", "a/eos_x"])
def test_deleted_chunk_is_an_error_naming_store_and_array(tmp_path, array, capsys):
    path, _ = doc_store(tmp_path, 0)
    (chunk,) = chunk_files(path, array)
    chunk.unlink()
    for read in (read_document_store, summarize):
        with pytest.raises(ValueError, match=f"{path}.*array '{array}'.*chunks"):
            read(path)
    with pytest.raises(ValueError, match=f"array '{array}'"):
        build_cube("st", "toy", [path], tmp_path / "cube.zarr")
    assert not (tmp_path / "cube.zarr").exists()
    assert cli_main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and array in err


def test_truncated_chunk_is_an_error_naming_store_and_array(tmp_path):
    path, _ = doc_store(tmp_path, 0)
    (chunk,) = chunk_files(path, "a/tv")
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"{path}: array 'a/tv'"):
        read_document_store(path)


def test_altered_values_do_not_match_their_checksum(tmp_path):
    """Valid chunk bytes with other values (what flipped bits that still decode look like)."""
    import zarr

    path, _ = doc_store(tmp_path, 0)
    zarr.open_array(str(path / "a/tv"), mode="r+")[0, 1] = 0.5
    with pytest.raises(ValueError, match=f"{path}: array 'a/tv' does not match its checksum"):
        read_document_store(path)


def test_a_corrupt_cube_is_an_error_for_inspect_and_metrics(tmp_path):
    from kvdiv.metrics import write_metrics

    stores, _ = zip(*(doc_store(tmp_path, i) for i in range(2)))
    cube = build_cube("st", "toy", list(stores), tmp_path / "cube.zarr")
    (cube / "tv/c/0/1/0/0").unlink()  # action "b" (chunks: one per action)
    for read in (summarize, open_cube, lambda p: read_cube_action(p, "a")):
        with pytest.raises(ValueError, match=f"{cube}: array 'tv'"):
            read(cube)
    with pytest.raises(ValueError, match=f"{cube}: array 'tv'"):
        write_metrics(cube, tmp_path / "metrics", window=2)
    assert not (tmp_path / "metrics").exists()


def test_verification_covers_every_array_a_store_has(tmp_path):
    """Arrays beyond the documented ones (e.g. a later ``prompt_ids``) are sealed and verified alike."""
    import zarr

    from kvdiv.trajectories.store import seal_store, verify_store, writing_every_chunk

    path, _ = doc_store(tmp_path, 0)
    with writing_every_chunk():
        zarr.open_group(str(path), mode="r+").create_array("prompt_ids", data=np.zeros(7, np.int32), chunks=(7,))
    with pytest.raises(ValueError, match="array 'prompt_ids' has no recorded checksum"):
        verify_store(path)
    seal_store(path)
    verify_store(path)
    zarr.open_array(str(path / "prompt_ids"), mode="r+")[3] = 1
    with pytest.raises(ValueError, match="array 'prompt_ids' does not match its checksum"):
        verify_store(path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda attrs: attrs.update(horizon=9999),
        lambda attrs: attrs.update(actions={"a": {"press": "P"}}),  # an action "vanishes" from the attributes
        lambda attrs: attrs["document"].update(task="other"),
    ],
)
def test_an_edited_attribute_fails_verification(tmp_path, edit):
    """The checksums cover the attributes too: an edited ``horizon`` or ``actions`` attribute of a per-document
    store, or one of a cube built from it, is a CorruptStoreError naming the store, not H = 9999 over 8-step arrays."""
    import zarr

    from kvdiv.trajectories.store import CorruptStoreError, read_document_store, verify_store

    path, _ = doc_store(tmp_path, 0)
    cube = build_cube("st", "toy", [path], tmp_path / "cube.zarr")
    for store in (path, cube):
        verify_store(store)
        root = zarr.open_group(str(store), mode="r+", zarr_format=3, use_consolidated=False)
        attrs = dict(root.attrs)
        attrs.setdefault("document", {"task": "t"})
        attrs.setdefault("actions", {})
        edit(attrs)
        root.attrs.put(attrs)
        with pytest.raises(
            CorruptStoreError, match=f"{store}: the store has attributes that do not match their checksum"
        ):
            verify_store(store)
    with pytest.raises(CorruptStoreError):
        read_document_store(path)
