"""Zarr v3 trajectory stores: one per (study, model, document), and the cube per (study, model).

This module is the only reader and writer of both (synthetic cubes for tests are written through :func:`write_cube`
too). Every store is written atomically (:func:`kvdiv.io.atomic_path`), with every chunk on disk, and sealed with the
sha256 of each array and one of all attributes (:func:`seal_store`); :func:`verify_store` (run by every reader) raises
:class:`CorruptStoreError` naming the store and the array. The layout and the integrity contract, written once:
docs/internals.md#trajectory-stores and #cube.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
import zarr

from kvdiv.io import atomic_path

if TYPE_CHECKING:
    from kvdiv.trajectories.base import ActionTrajectories

#: Arrays of shape (replicate, step) in every store, with their dtypes.
STEP_ARRAYS = {
    "x": np.int32,
    "y": np.int32,
    "tv": np.float32,
    "fixed_tv": np.float32,
    "match": np.bool_,
    "eos_x": np.bool_,
    "eos_y": np.bool_,
}
#: Extra (replicate, step) array in swrb mode.
SWRB_STEP_ARRAYS = {"overlap_tv": np.float32}
#: The prompt token ids a trajectory job fed (root array of a per-document store) and their dimension.
PROMPT_IDS, PROMPT_DIM = "prompt_ids", "prompt_token"
#: Document metadata carried as cube coordinates on dim ``document``.
DOCUMENT_COORDS = ("family", "task", "target_length", "stratum", "prompt_tokens")
#: Root attribute of every store: {array path: sha256 of its values} (see :func:`seal_store`).
CHECKSUMS_ATTR = "checksums"
#: The entry of ``checksums`` covering the attributes of the store's root (all but ``checksums``), groups and arrays
#: (no array path starts with '.').
ATTRS_CHECKSUM = ".attributes"


class CorruptStoreError(ValueError):
    """A store that is incomplete or corrupt (the message names the store and the array)."""


def array_digest(values: np.ndarray) -> str:
    """sha256 of an array's shape, dtype and values (strings by their text), as hex."""
    values = np.asarray(values)
    digest = hashlib.sha256(repr(values.shape).encode())
    if values.dtype.kind in "OUT":  # variable-length strings: the text, not the in-memory layout
        digest.update(b"str")
        digest.update(json.dumps([str(v) for v in values.reshape(-1)]).encode())
    else:
        digest.update(values.dtype.str.encode())
        digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()


#: Steps per chunk of the per-step arrays (per-document stores and cubes): a window of steps of a long horizon
#: (H = 1024) reads a quarter of it.
STEP_CHUNK = 256


@contextlib.contextmanager
def writing_every_chunk() -> Iterator[None]:
    """Zarr writes chunks that hold only the fill value too (a missing chunk is then always an error)."""
    with zarr.config.set({"array.write_empty_chunks": True}):
        yield


def _store_arrays(root: zarr.Group) -> dict[str, zarr.Array]:
    """Every array of a store, at any depth, by path (``"snapkv_half/tv"``, ``"document"``)."""
    with warnings.catch_warnings():  # Snakemake's .snakemake_timestamp inside a directory() output
        warnings.filterwarnings("ignore", message=".*is not recognized as a component of a Zarr hierarchy")
        return {name: obj for name, obj in root.members(max_depth=None) if isinstance(obj, zarr.Array)}


def _check_chunks(path: Path, name: str, array: zarr.Array) -> None:
    present, expected = array.nchunks_initialized, array.nchunks
    if present != expected:
        raise CorruptStoreError(
            f"{path}: array {name!r} has {present} of its {expected} chunks: the store is incomplete"
        )


def attributes_digest(root: zarr.Group) -> str:
    """sha256 of every attribute of a store (root but ``checksums``, each group and array, by path), as hex: an
    edited ``horizon`` or ``actions`` attribute fails verification like an edited array."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not recognized as a component of a Zarr hierarchy")
        members = dict(root.members(max_depth=None))
    attrs = {"": {k: v for k, v in root.attrs.items() if k != CHECKSUMS_ATTR}}
    attrs.update({name: dict(obj.attrs) for name, obj in members.items() if obj.attrs})
    return hashlib.sha256(json.dumps(attrs, sort_keys=True, default=str).encode()).hexdigest()


def seal_store(path: str | Path) -> dict[str, str]:
    """Record the checksum of every array of the store at ``path`` and of its attributes (root attribute
    ``checksums``, :data:`ATTRS_CHECKSUM`) after checking that each array has all its chunks, and consolidate its
    metadata. Returns the checksums."""
    path = Path(path)
    root = zarr.open_group(str(path), mode="r+", zarr_format=3, use_consolidated=False)
    checksums = {}
    for name, array in sorted(_store_arrays(root).items()):
        _check_chunks(path, name, array)
        checksums[name] = array_digest(array[...])
    checksums[ATTRS_CHECKSUM] = attributes_digest(root)
    root.attrs[CHECKSUMS_ATTR] = checksums
    _consolidate(path)
    return checksums


def read_store_arrays(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Root attributes and every array (by path) of a sealed store, verified.

    Raises
    ------
    CorruptStoreError
        Naming the store and the array: no checksums recorded, an array missing or not recorded, a chunk
        missing, a chunk that does not decode, or values that do not match their checksum.
    """
    path = Path(path)
    _open_ro(path)  # a clear error when it is no zarr v3 store
    root = _open_group(path, use_consolidated=False)  # what is on disk
    attrs = dict(root.attrs)
    recorded = attrs.get(CHECKSUMS_ATTR)
    if not isinstance(recorded, Mapping) or not recorded:
        raise CorruptStoreError(
            f"{path}: no '{CHECKSUMS_ATTR}' attribute, so the store cannot be verified (rebuild it)"
        )
    attrs_digest = recorded.get(ATTRS_CHECKSUM)
    recorded = {name: digest for name, digest in recorded.items() if name != ATTRS_CHECKSUM}
    arrays = _store_arrays(root)
    lost = sorted(set(recorded) - set(arrays))
    if lost:
        raise CorruptStoreError(f"{path}: array {lost[0]!r} is missing ({len(lost)} recorded arrays missing)")
    unknown = sorted(set(arrays) - set(recorded))
    if unknown:
        raise CorruptStoreError(f"{path}: array {unknown[0]!r} has no recorded checksum")
    data = {}
    for name in sorted(recorded):
        array = arrays[name]
        _check_chunks(path, name, array)
        try:
            values = array[...]
        except Exception as err:  # codec errors (a truncated zstd frame, ...) name no file
            raise CorruptStoreError(f"{path}: array {name!r} cannot be read ({type(err).__name__}: {err})") from err
        if array_digest(values) != recorded[name]:
            raise CorruptStoreError(f"{path}: array {name!r} does not match its checksum (corrupt chunk data)")
        data[name] = values
    if attrs_digest != attributes_digest(root):
        what = (
            "has no checksum of its attributes (sealed by an older kvdiv: rebuild it)"
            if attrs_digest is None
            else "has attributes that do not match their checksum (an edited attribute)"
        )
        raise CorruptStoreError(f"{path}: the store {what}")
    return attrs, data


def verify_store(path: str | Path) -> None:
    """Raise :class:`CorruptStoreError` naming the store and array unless the store is complete and intact."""
    read_store_arrays(path)


def _jsonable(value: Any) -> Any:
    """Attributes round-trip through JSON (numpy scalars become Python numbers)."""
    return json.loads(json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def _open_ro(path: str | Path) -> zarr.Group:
    path = Path(path)
    if not (path / "zarr.json").is_file():
        raise FileNotFoundError(f"{path} is not a zarr v3 store (no zarr.json)")
    return _open_group(path)


def _open_group(path: Path, **kwargs) -> zarr.Group:
    """``zarr.open_group`` read-only; a metadata file that is not JSON is an error naming it (zarr's does not)."""
    try:
        return zarr.open_group(str(path), mode="r", zarr_format=3, **kwargs)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        for meta in sorted(Path(path).rglob("zarr.json")):
            try:
                json.loads(meta.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as bad:
                raise CorruptStoreError(f"{path}: its metadata {meta} is not valid JSON ({bad})") from None
        raise CorruptStoreError(f"{path}: its metadata is not valid JSON ({err})") from None


def write_document_store(
    path: str | Path,
    trajectories: Mapping[str, ActionTrajectories],
    attrs: Mapping[str, Any],
    prompt_ids: Sequence[int] | None = None,
) -> Path:
    """Write one document's trajectories: a group per action, arrays (replicate, step).

    ``attrs`` are the root attributes of docs/internals.md (``kvdiv_version``, ``model``,
    ``model_spec``, ``weight_hash``, ``document``, ``actions``, ``horizon``, ``temperature``,
    ``seed``, ``mode``, ``evict_first_step``, ``prompt_tokens``); ``wall_time_s`` is added from
    the trajectories. ``prompt_ids`` (the ids the job fed) become the root array ``prompt_ids``
    (int32, dimension ``prompt_token``) and ``prompt_tokens`` their count. Written atomically;
    returns the final path.
    """
    path = Path(path)
    root_attrs = dict(attrs)
    root_attrs["wall_time_s"] = {a: float(t.wall_time_s) for a, t in trajectories.items()}
    if prompt_ids is not None:
        if root_attrs.setdefault("prompt_tokens", len(prompt_ids)) != len(prompt_ids):
            raise ValueError(f"{path}: prompt_tokens={root_attrs['prompt_tokens']} but {len(prompt_ids)} prompt ids")
    with atomic_path(path, directory=True) as tmp, writing_every_chunk():
        root = zarr.open_group(str(tmp), mode="w", zarr_format=3)
        root.attrs.update(_jsonable(root_attrs))
        if prompt_ids is not None:
            ids = np.asarray(prompt_ids, dtype=np.int64)
            if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
                raise ValueError(f"{path}: prompt ids outside int32")
            ids = ids.astype(np.int32)
            root.create_array(PROMPT_IDS, data=ids, chunks=(max(ids.size, 1),), dimension_names=[PROMPT_DIM])
        for action, traj in trajectories.items():
            group = root.create_group(action)
            arrays = {name: getattr(traj, name).astype(dtype) for name, dtype in STEP_ARRAYS.items()}
            if traj.overlap_tv is not None:
                arrays["overlap_tv"] = traj.overlap_tv.astype(np.float32)
            for name, data in arrays.items():
                chunks = (data.shape[0], min(data.shape[1], STEP_CHUNK) or 1)
                group.create_array(name, data=data, chunks=chunks, dimension_names=["replicate", "step"])
            if traj.branch_start is not None:
                data = traj.branch_start.astype(np.int32)
                group.create_array("branch_start", data=data, chunks=data.shape, dimension_names=["replicate"])
        seal_store(tmp)
    return path


def _consolidate(path: Path) -> None:
    with warnings.catch_warnings():  # consolidated metadata is a zarr-python extension to v3
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))


def read_document_store(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Root attributes and {action: {array name: numpy array}} of a per-document store, verified
    (:func:`read_store_arrays`); arrays outside the action groups are not returned."""
    attrs, arrays = read_store_arrays(path)
    actions = attrs.get("actions")
    if actions is None:
        raise ValueError(f"{path} has no 'actions' attribute: not a kvdiv per-document store")
    data: dict[str, dict[str, np.ndarray]] = {a: {} for a in actions}
    for name, values in arrays.items():
        action, _, array = name.rpartition("/")
        if action in data:
            data[action][array] = values
    missing = [a for a in actions if not data[a]]
    if missing:
        raise CorruptStoreError(f"{path}: action {missing[0]!r} has no arrays")
    return attrs, data


def read_prompt_ids(path: str | Path) -> np.ndarray:
    """The prompt token ids (int32) a per-document store's job fed its model (the store verified first)."""
    _, arrays = read_store_arrays(path)
    if PROMPT_IDS not in arrays:
        raise KeyError(f"{path} has no {PROMPT_IDS!r} array (written before stores recorded the prompt)")
    return arrays[PROMPT_IDS]


def is_cube(path: str | Path) -> bool:
    """Whether ``path`` is a cube (arrays at the root with a document dimension)."""
    root = _open_ro(path)
    return "tv" in set(root.array_keys())


def build_cube(study: str, model: str, doc_stores: Sequence[str | Path], out: str | Path) -> Path:
    """Concatenate per-document stores into the cube ``out`` with dims (document, action, replicate, step).

    All stores must share actions (same order), replicates, horizon and mode; a mismatch raises a
    ``ValueError`` naming the store. Chunks: :func:`write_cube`.
    """
    if not doc_stores:
        raise ValueError(f"no per-document stores for study {study!r}, model {model!r}")
    first_attrs, _ = read_document_store(doc_stores[0])
    actions = list(first_attrs["actions"])
    keys = ("horizon", "mode", "temperature", "evict_first_step", "reference_chain", "compress")
    doc_ids: list[str] = []
    coords: dict[str, list] = {name: [] for name in DOCUMENT_COORDS}
    stacked: dict[str, list[np.ndarray]] = {}
    wall: dict[str, float] = {a: 0.0 for a in actions}
    total_wall = 0.0
    for store in doc_stores:
        attrs, data = read_document_store(store)
        if list(attrs["actions"]) != actions:
            raise ValueError(f"{store}: actions {list(attrs['actions'])} differ from {actions} of {doc_stores[0]}")
        for key in keys:
            if attrs.get(key) != first_attrs.get(key):
                raise ValueError(f"{store}: {key}={attrs.get(key)!r} differs from {first_attrs.get(key)!r}")
        if attrs.get("model") != model:
            raise ValueError(f"{store}: model {attrs.get('model')!r} is not {model!r}")
        doc = attrs["document"]
        doc_ids.append(str(doc["id"]))
        for name in DOCUMENT_COORDS:
            coords[name].append(attrs["prompt_tokens"] if name == "prompt_tokens" else doc.get(name))
        for a in actions:
            wall[a] += float(attrs.get("wall_time_s", {}).get(a, 0.0))
        total_wall += float(attrs.get("wall_time_total_s", 0.0))
        for name in data[actions[0]]:
            arrays = [data[a][name] for a in actions]
            shapes = {arr.shape for arr in arrays}
            if len(shapes) != 1:
                raise ValueError(f"{store}: array {name!r} has shapes {shapes} across actions")
            stacked.setdefault(name, []).append(np.stack(arrays))
    if len(set(doc_ids)) != len(doc_ids):
        raise ValueError(f"duplicate document ids among the stores: {doc_ids}")
    for name, parts in stacked.items():
        if len({p.shape for p in parts}) != 1:
            raise ValueError(f"array {name!r} differs in shape across documents (replicates or horizon differ)")
    per_document = (
        "document",
        "prompt_tokens",
        "compressed_prompt_tokens",
        "prompt_rendering",
        "press_seeds",
        "effective_retention",
        "press_budget",
        "allow_degenerate",
        "wall_time_s",
        "prefill_s",
        "wall_time_total_s",
        CHECKSUMS_ATTR,
    )
    attrs = {k: v for k, v in first_attrs.items() if k not in per_document}
    attrs.update(study=study, wall_time_s=wall, wall_time_total_s=total_wall)
    data = {name: np.stack(parts) for name, parts in stacked.items()}
    return write_cube(out, data, doc_ids, actions, coords, attrs)


def write_cube(
    out: str | Path,
    data: Mapping[str, np.ndarray],
    documents: Sequence[str],
    actions: Sequence[str],
    document_coords: Mapping[str, Sequence[Any]],
    attrs: Mapping[str, Any],
) -> Path:
    """Write a cube store (docs/internals.md "Cube") atomically and seal it.

    ``data``: name → array (document, action, replicate, step), or (document, action, replicate) for
    ``branch_start``; ``document_coords``: each of :data:`DOCUMENT_COORDS` → one value per document (None: missing).
    Chunks are (n_document, 1, R, min(H, STEP_CHUNK)): one action is read without the others, and the first
    steps of a long horizon without the rest.
    """
    n_doc = len(documents)
    replicates, horizon = data["x"].shape[2:]
    out = Path(out)
    with atomic_path(out, directory=True) as tmp, writing_every_chunk():
        root = zarr.open_group(str(tmp), mode="w", zarr_format=3)
        root.attrs.update(_jsonable(attrs))
        dims4 = ["document", "action", "replicate", "step"]
        for name, values in data.items():
            dims = dims4[: values.ndim]
            chunks = (n_doc, 1) + values.shape[2:3] + tuple(min(n, STEP_CHUNK) or 1 for n in values.shape[3:])
            root.create_array(name, data=values, chunks=chunks, dimension_names=dims)
        _coord(root, "document", np.array(list(documents), dtype=str), "document")
        _coord(root, "action", np.array(actions, dtype=str), "action")
        _coord(root, "replicate", np.arange(replicates, dtype=np.int32), "replicate")
        _coord(root, "step", np.arange(1, horizon + 1, dtype=np.int32), "step")
        for name in DOCUMENT_COORDS:
            values = document_coords[name]
            if name in ("target_length", "prompt_tokens"):
                arr = np.array([-1 if v is None else int(v) for v in values], dtype=np.int64)
            else:
                arr = np.array(["" if v is None else str(v) for v in values], dtype=str)
            _coord(root, name, arr, "document")
        root.attrs["coordinates"] = " ".join(DOCUMENT_COORDS)
        seal_store(tmp)
    return out


def _coord(root: zarr.Group, name: str, values: np.ndarray, dim: str) -> None:
    with warnings.catch_warnings():  # variable-length strings: stable in zarr-python, read by xarray
        warnings.simplefilter("ignore")
        dtype = str if values.dtype.kind == "U" else values.dtype
        arr = root.create_array(name, shape=values.shape, dtype=dtype, chunks=values.shape, dimension_names=[dim])
        arr[...] = values


def open_cube(path: str | Path, *, verify: bool = True):
    """The cube as an :class:`xarray.Dataset` (lazy, dask-free) with its coordinates set, after
    :func:`verify_store` (``verify=False`` skips it): a clear error when it is missing, incomplete or corrupt."""
    import xarray as xr

    if not Path(path).exists():
        raise FileNotFoundError(f"cube store {path} does not exist")
    if verify:
        verify_store(path)
    ds = xr.open_zarr(str(path), consolidated=True, chunks=None)
    names = [c for c in DOCUMENT_COORDS if c in ds.data_vars]
    return ds.set_coords(names)


def read_cube_action(path: str | Path, action: str, *, verify: bool = True) -> dict[str, np.ndarray]:
    """Every array of one action from a cube as numpy: (document, replicate, step) or (document, replicate).

    Reads one chunk per array (the cube is chunked one chunk per action), after :func:`verify_store` of the
    whole cube (``verify=False`` skips it, for a caller that has verified the cube already).
    """
    if verify:
        verify_store(path)
    root = _open_ro(path)
    actions = [str(a) for a in root["action"][...]]
    if action not in actions:
        raise KeyError(f"action {action!r} not in cube {path}; it has {actions}")
    i = actions.index(action)
    return {name: root[name][:, i] for name in root.array_keys() if root[name].ndim >= 3}


def read_attrs(path: str | Path) -> dict[str, Any]:
    """The root attributes of a store or cube (not verified: see :func:`verify_store`)."""
    return dict(_open_ro(path).attrs)


def cube_coords(path: str | Path) -> dict[str, np.ndarray]:
    """The cube's coordinate arrays (document, action, replicate, step and document metadata)."""
    root = _open_ro(path)
    names = ("document", "action", "replicate", "step") + DOCUMENT_COORDS
    return {name: np.asarray(root[name][...]) for name in names if name in set(root.array_keys())}
