"""Finite-state kernel pairs: the system file format and :class:`FiniteSystem`, its dense tables.

A finite-state system is a reference kernel ``P(·|h)`` and an intervention kernel ``Q(·|h)`` over a vocabulary of
``V`` tokens, given at every history ``h`` of length 0..H−1 (arXiv 2609.16617, §3–4), optionally with one absorbing
``eos`` token. The system file (JSON) format: docs/internals.md#finite-state. The exact enumeration is
:mod:`kvdiv.finite.exact`, the Monte Carlo samplers :mod:`kvdiv.finite.sampling`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvdiv.estimands import tv

ROW_SUM_TOL = 1e-9
#: Most histories a system file may describe (checked from V and H before anything is counted or allocated).
MAX_HISTORIES = 5_000_000
#: Most values (histories × vocabulary) one kernel table may hold: 160 MB of float64 per table (two per system).
MAX_TABLE_VALUES = 20_000_000
_HISTORY_KEY = re.compile(r"(0|[1-9][0-9]*)(,(0|[1-9][0-9]*))*")


def history_key(history: tuple[int, ...] | list[int]) -> str:
    """The file key of a history: comma-joined token ids ("" for the empty history)."""
    return ",".join(str(int(t)) for t in history)


def _parse_key(key: str, vocab: int, where: str) -> tuple[int, ...]:
    if key == "":
        return ()
    if not _HISTORY_KEY.fullmatch(key):
        raise ValueError(
            f"{where}: history key {key!r} is not comma-joined token ids in canonical form (e.g. '0,2': no spaces, "
            "signs or leading zeros)"
        )
    tokens = tuple(int(part) for part in key.split(","))
    if any(t < 0 or t >= vocab for t in tokens):
        raise ValueError(f"{where}: history {key!r} has a token outside 0..{vocab - 1}")
    return tokens


@dataclass(frozen=True, eq=False)
class FiniteSystem:
    """A kernel pair (P, Q) over V tokens and horizon H, as dense tables for Numba kernels.

    Histories are enumerated breadth-first: the history (h_1..h_d) has node id
    ``offset[d] + Σ_i h_i V^{d−i}``, so the nodes of depth d are contiguous and the children of
    local index i at depth d are local indices ``V·i + z`` at depth d + 1.

    Attributes
    ----------
    vocab, horizon : V and H.
    eos : the absorbing token, or None.
    reference, intervention : float64 [n_nodes, V], P(·|h) and Q(·|h) by node id (post-EOS
        histories already hold the point mass on ``eos``).
    child : int64 [n_nodes, V], node id of h + (z,), −1 at depth H − 1.
    depth : int64 [n_nodes], the history length of each node.
    """

    vocab: int
    horizon: int
    reference: np.ndarray
    intervention: np.ndarray
    eos: int | None = None
    name: str = ""
    child: np.ndarray = field(init=False, repr=False)
    depth: np.ndarray = field(init=False, repr=False)
    offset: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        V, H = int(self.vocab), int(self.horizon)
        if V < 1 or H < 1:
            raise ValueError(f"system {self.name!r}: vocab and horizon must be >= 1, got {V}, {H}")
        offset = np.array([(V**d - 1) // (V - 1) if V > 1 else d for d in range(H + 1)], dtype=np.int64)
        n = int(offset[H])
        for label in ("reference", "intervention"):
            table = np.asarray(getattr(self, label), dtype=np.float64)
            if table.shape != (n, V):
                raise ValueError(f"system {self.name!r}: {label} table has shape {table.shape}, expected {(n, V)}")
            object.__setattr__(self, label, np.ascontiguousarray(table))
        if self.eos is not None and not 0 <= int(self.eos) < V:
            raise ValueError(f"system {self.name!r}: eos {self.eos} outside 0..{V - 1}")
        depth = np.empty(n, dtype=np.int64)
        child = np.full((n, V), -1, dtype=np.int64)
        for d in range(H):
            depth[offset[d] : offset[d + 1]] = d
            if d + 1 < H:
                local = np.arange(V**d, dtype=np.int64)[:, None] * V + np.arange(V, dtype=np.int64)[None, :]
                child[offset[d] : offset[d + 1]] = offset[d + 1] + local
        object.__setattr__(self, "child", child)
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "offset", offset)

    @property
    def n_nodes(self) -> int:
        """Number of histories of length 0..H−1."""
        return int(self.offset[self.horizon])

    def node(self, history: tuple[int, ...] | list[int]) -> int:
        """Node id of a history."""
        local = 0
        for t in history:
            local = local * self.vocab + int(t)
        return int(self.offset[len(history)]) + local

    def history(self, node: int) -> tuple[int, ...]:
        """The history of a node id."""
        d = int(self.depth[node])
        local = int(node - self.offset[d])
        tokens = []
        for _ in range(d):
            local, t = divmod(local, self.vocab)
            tokens.append(t)
        return tuple(reversed(tokens))

    def level(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(P, Q) rows of the V^d histories of depth d, in local order."""
        sl = slice(int(self.offset[d]), int(self.offset[d + 1]))
        return self.reference[sl], self.intervention[sl]

    def fixed_tv(self) -> np.ndarray:
        """TV(P(·|h), Q(·|h)) at every node (both kernels at the same history)."""
        return tv(self.reference, self.intervention)

    def to_dict(self) -> dict:
        """The system-file representation (see the module docstring)."""
        out: dict = {"vocab": self.vocab, "horizon": self.horizon}
        if self.eos is not None:
            out["eos"] = int(self.eos)
        for label, table in (("reference", self.reference), ("intervention", self.intervention)):
            rows = {}
            for node in range(self.n_nodes):
                hist = self.history(node)
                if self.eos is not None and self.eos in hist:
                    continue
                rows[history_key(hist)] = [float(v) for v in table[node]]
            out[label] = rows
        return out


def _contains_token(vocab: int, horizon: int, token: int) -> np.ndarray:
    """Boolean per node: does the history contain ``token``."""
    out = []
    contains = np.zeros(1, dtype=bool)  # depth 0: the empty history
    for _ in range(horizon):
        out.append(contains)
        # children of depth-d nodes: contain the token if the parent does or the new token is it
        contains = (contains[:, None] | (np.arange(vocab) == token)[None, :]).reshape(-1)
    return np.concatenate(out)


def absorb_eos(table: np.ndarray, vocab: int, horizon: int, eos: int) -> np.ndarray:
    """Replace the rows of histories containing ``eos`` by the point mass on ``eos`` (a copy)."""
    table = np.array(table, dtype=np.float64, copy=True)
    table[_contains_token(vocab, horizon, eos)] = np.eye(vocab)[eos]
    return table


def count_histories(vocab: int, horizon: int) -> int | None:
    """Σ_{d<H} V^d, the number of histories of length 0..H−1, or None when it exceeds :data:`MAX_HISTORIES`
    (decided in at most log_V(MAX_HISTORIES) + 1 steps, whatever H)."""
    if vocab == 1:
        return horizon if horizon <= MAX_HISTORIES else None
    total, level = 0, 1
    for _ in range(horizon):
        total += level
        if total > MAX_HISTORIES:
            return None
        level *= vocab
    return total


def system_from_dict(data: dict, source: str = "<dict>") -> FiniteSystem:
    """Validate a parsed system file and build the :class:`FiniteSystem`.

    Raises
    ------
    ValueError
        Naming the file (``source``) and the offending key or history: missing or malformed
        ``vocab``/``horizon``/``eos``, a missing or unexpected history, a row of the wrong length,
        a negative or non-finite entry, or a row that does not sum to 1 within 1e-9.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a system file holds one JSON object")
    for key in ("vocab", "horizon", "reference", "intervention"):
        if key not in data:
            raise ValueError(f"{source}: missing key {key!r}")
    unknown = set(data) - {"vocab", "horizon", "eos", "reference", "intervention", "name"}
    if unknown:
        raise ValueError(f"{source}: unknown keys {sorted(unknown)}")
    V, H = data["vocab"], data["horizon"]
    for key, value in (("vocab", V), ("horizon", H)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{source}: {key!r} must be a positive integer, got {value!r}")
    eos = data.get("eos")
    if eos is not None and (not isinstance(eos, int) or isinstance(eos, bool) or not 0 <= eos < V):
        raise ValueError(f"{source}: 'eos' must be a token id in 0..{V - 1}, got {eos!r}")
    n_nodes = count_histories(V, H)
    if n_nodes is None:
        raise ValueError(
            f"{source}: vocab {V} and horizon {H} give more than {MAX_HISTORIES} histories, too many to enumerate"
        )
    if n_nodes * V > MAX_TABLE_VALUES:
        raise ValueError(
            f"{source}: vocab {V} and horizon {H} give {n_nodes} histories × {V} tokens = {n_nodes * V:.3g} values per "
            f"kernel table, more than {MAX_TABLE_VALUES:.0e} (kvdiv.finite.system.MAX_TABLE_VALUES): too large a "
            "system to hold"
        )
    tables = {}
    for label in ("reference", "intervention"):
        rows = data[label]
        where = f"{source}: {label}"
        if not isinstance(rows, dict):
            raise ValueError(f"{where} must map history keys to distributions")
        table = np.full((n_nodes, V), np.nan)
        seen = np.zeros(n_nodes, dtype=bool)
        offsets = [sum(V**k for k in range(d)) for d in range(H + 1)]
        for key, row in rows.items():
            hist = _parse_key(key, V, where)
            if len(hist) >= H:
                raise ValueError(f"{where}: history {key!r} has length {len(hist)}; histories stop at H-1 = {H - 1}")
            if not isinstance(row, list) or len(row) != V:
                got = len(row) if isinstance(row, list) else type(row).__name__
                raise ValueError(f"{where}: history {key!r} has {got} entries, expected vocab = {V}")
            bad = [v for v in row if isinstance(v, bool) or not isinstance(v, (int, float))]
            if bad:
                raise ValueError(f"{where}: history {key!r} has an entry {bad[0]!r} that is not a number")
            arr = np.asarray(row, dtype=np.float64)
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{where}: history {key!r} has non-finite entries")
            if np.any(arr < 0):
                raise ValueError(f"{where}: history {key!r} has a negative entry ({arr.min()!r})")
            if abs(arr.sum() - 1.0) > ROW_SUM_TOL:
                raise ValueError(f"{where}: history {key!r} sums to {arr.sum()!r}, not 1 (tolerance {ROW_SUM_TOL})")
            local = 0
            for t in hist:
                local = local * V + t
            node = offsets[len(hist)] + local
            table[node] = arr
            seen[node] = True
        if eos is not None:
            table = absorb_eos(np.where(seen[:, None], table, 0.0), V, H, eos)
            seen |= _contains_token(V, H, eos)
        if not seen.all():
            missing = int(np.flatnonzero(~seen)[0])
            hist = FiniteSystem(V, H, np.zeros((n_nodes, V)), np.zeros((n_nodes, V))).history(missing)
            raise ValueError(
                f"{where}: missing history {history_key(hist)!r} ({int((~seen).sum())} of {n_nodes} histories missing)"
            )
        tables[label] = table
    return FiniteSystem(V, H, tables["reference"], tables["intervention"], eos=eos, name=str(data.get("name", "")))


def _unique_keys(path: Path):
    """A json ``object_pairs_hook`` refusing a key given twice (the later would silently win)."""

    def hook(pairs: list[tuple[str, object]]) -> dict:
        out: dict = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"{path}: key {key!r} appears twice in one object")
            out[key] = value
        return out

    return hook


def load_system(path: str | Path) -> FiniteSystem:
    """Read and validate a finite-state system file (see the module docstring)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 (byte at offset {err.start})") from None
    system = system_from_dict(data, source=str(path))
    if not system.name:
        object.__setattr__(system, "name", path.stem)
    return system


def save_system(system: FiniteSystem, path: str | Path) -> None:
    """Write a system file atomically."""
    from kvdiv.io import atomic_path

    data = system.to_dict()
    if system.name:
        data = {"name": system.name, **data}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
