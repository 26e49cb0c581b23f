"""Finite-state kernel pairs and their exact analysis under the overlap–residual maximal coupling.

A finite-state system is a reference kernel ``P(·|h)`` and an intervention kernel ``Q(·|h)`` over a
vocabulary of ``V`` tokens, given at every history ``h`` of length 0..H−1 (arXiv 2609.16617, §3–4).
Optionally one token ``eos`` is absorbing: after a chain emits it, its kernel is the point mass on it.

**System file** (JSON)::

    {"vocab": V, "horizon": H, "eos": id (optional),
     "reference":    {"": [p_0..p_{V-1}], "0": [...], "0,2": [...], ...},
     "intervention": {...}}

Keys are histories written as comma-joined token ids in canonical form (decimal, no sign, no leading
zeros, no spaces: ``"0,12"``, never ``"0, 12"``, ``"00"`` or ``"-0"``), so one history has exactly one key;
every history of length 0..H−1 must be present, except histories that continue past an ``eos`` token
(absorbed: if given they are checked as distributions and then replaced by the point mass on ``eos``).
Probabilities are JSON numbers (a string or a boolean is an error), and a key may appear once.

**Coupling.** At step t with histories (x_<t, y_<t): p = P(·|x_<t), q = Q(·|y_<t),
δ_t = TV(p, q) = ½‖p − q‖₁ (``tv``), overlap m = min(p, q). With probability 1 − δ_t draw
z ~ m/(1 − δ_t) and set x_t = y_t = z; otherwise x_t ~ (p − q)⁺/δ_t, y_t ~ (q − p)⁺/δ_t independently.
Each chain keeps its own law (x ~ P, y ~ Q) and P(x_t ≠ y_t | past) = δ_t.

**Decomposition.** M = (1/H) Σ_t 1{x_t ≠ y_t}, risk R_H = E[M], τ = first t with x_t ≠ y_t (``tau``):

- occurrence  O_H = P(τ ≤ H)/H
- exposure    E_H = E[(H − τ)/H ; τ ≤ H]
- occupation  Π_H = E[(1/H) Σ_{t>τ} 1{x_t ≠ y_t} ; τ ≤ H],  mismatch rate C_H = Π_H/E_H
- identity    R_H = O_H + Π_H.

**Window.** Depth-L profile π_j(ℓ) = P(x_{j+ℓ} ≠ y_{j+ℓ} | τ = j), 1 ≤ ℓ ≤ L;
R_L = O_H + (1/H) Σ_j P(τ=j) Σ_{ℓ=1}^{min(L, H−j)} π_j(ℓ)  (``risk_window``),
B_L = (1/H) Σ_j P(τ=j) max(0, H − j − L)  (``capacity``). Every risk in [R_L, R_L + B_L] is
compatible with the profile; the midpoint R_L + B_L/2 is minimax with error B_L/2.

Exact values come from enumerating the coupled process depth by depth: the undiverged mass over
common histories, and the diverged mass over pairs of histories, split by τ.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROW_SUM_TOL = 1e-9
#: Most histories a system file may describe (checked from V and H before anything is counted or allocated).
MAX_HISTORIES = 5_000_000
_HISTORY_KEY = re.compile(r"(0|[1-9][0-9]*)(,(0|[1-9][0-9]*))*")
# Exact enumeration keeps dense pair tables of size (V^d)^2 per depth; refuse what would not fit.
MAX_PAIR_STATES = 1 << 20


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
        return 0.5 * np.abs(self.reference - self.intervention).sum(axis=1)

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
        raise ValueError(f"{source}: vocab {V} and horizon {H} give more than {MAX_HISTORIES} histories, too many to enumerate")
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


# ---------------------------------------------------------------------------------------------
# Exact enumeration


def _pair_tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """TV between every row of p [n, V] and every row of q [n, V]: [n, n]."""
    return 0.5 * np.abs(p[:, None, :] - q[None, :, :]).sum(axis=-1)


def _transition(mass: np.ndarray, p: np.ndarray, q: np.ndarray, tv: np.ndarray) -> np.ndarray:
    """Push diverged pair mass [n, n] at depth d one coupled step: [nV, nV] at depth d + 1.

    K(x, y | i, j) = 1{x = y} min(p_i, q_j)(x) + (p_i − q_j)⁺(x) (q_j − p_i)⁺(y) / δ_ij.
    """
    n, V = p.shape
    pp, qq = p[:, None, :], q[None, :, :]
    scale = np.divide(mass, tv, out=np.zeros_like(mass), where=tv > 0)
    out = (scale[:, :, None, None] * np.maximum(pp - qq, 0.0)[:, :, :, None]) * np.maximum(qq - pp, 0.0)[:, :, None, :]
    diag = np.arange(V)
    out[:, :, diag, diag] += mass[:, :, None] * np.minimum(pp, qq)
    return out.transpose(0, 2, 1, 3).reshape(n * V, n * V)


def _branch_start(a: np.ndarray, p: np.ndarray, q: np.ndarray, tv: np.ndarray) -> np.ndarray:
    """Diverged pair mass [nV, nV] created at one step from undiverged mass a [n] at depth d."""
    n, V = p.shape
    scale = np.divide(a, tv, out=np.zeros_like(a), where=tv > 0)
    res = scale[:, None, None] * np.maximum(p - q, 0.0)[:, :, None] * np.maximum(q - p, 0.0)[:, None, :]
    out = np.zeros((n, V, n, V))
    idx = np.arange(n)
    out[idx, :, idx, :] = res
    return out.reshape(n * V, n * V)


@dataclass(frozen=True)
class ExactResult:
    """Exact laws of the coupled process of one system.

    Attributes
    ----------
    horizon : H.
    p_tau : [H], P(τ = j) at index j − 1.
    joint : [H, H], P(x_t ≠ y_t, τ = j) at [j − 1, t − 1] (zero for t < j; P(τ = j) on the diagonal).
    """

    horizon: int
    p_tau: np.ndarray
    joint: np.ndarray

    @property
    def mismatch(self) -> np.ndarray:
        """P(x_t ≠ y_t) for t = 1..H (the per-step mismatch probability)."""
        return self.joint.sum(axis=0)

    @property
    def p_diverge(self) -> float:
        """P(τ ≤ H)."""
        return float(self.p_tau.sum())

    @property
    def risk(self) -> float:
        """R_H = (1/H) Σ_t P(x_t ≠ y_t)."""
        return float(self.mismatch.sum() / self.horizon)

    @property
    def occurrence(self) -> float:
        """O_H = P(τ ≤ H)/H."""
        return self.p_diverge / self.horizon

    @property
    def exposure(self) -> float:
        """E_H = Σ_j P(τ = j)(H − j)/H."""
        H = self.horizon
        return float((self.p_tau * (H - np.arange(1, H + 1))).sum() / H)

    @property
    def occupation(self) -> float:
        """Π_H = (1/H) Σ_j Σ_{t>j} P(x_t ≠ y_t, τ = j)."""
        return float(np.triu(self.joint, k=1).sum() / self.horizon)

    @property
    def mismatch_rate(self) -> float:
        """C_H = Π_H / E_H (NaN when E_H = 0)."""
        return self.occupation / self.exposure if self.exposure > 0 else math.nan

    def profile(self, window: int) -> np.ndarray:
        """π_j(ℓ) = P(x_{j+ℓ} ≠ y_{j+ℓ} | τ = j): [H, L] with row j − 1, column ℓ − 1.

        NaN where P(τ = j) = 0 or j + ℓ > H.
        """
        H, L = self.horizon, int(window)
        out = np.full((H, L), np.nan)
        for j in range(1, H + 1):
            if self.p_tau[j - 1] <= 0:
                continue
            for ell in range(1, min(L, H - j) + 1):
                out[j - 1, ell - 1] = self.joint[j - 1, j + ell - 1] / self.p_tau[j - 1]
        return out

    def risk_window(self, window: int) -> float:
        """R_L = O_H + (1/H) Σ_j P(τ=j) Σ_{ℓ=1}^{min(L,H−j)} π_j(ℓ)."""
        H, L = self.horizon, _check_window(window)
        inside = sum(self.joint[j - 1, j : min(j + L, H)].sum() for j in range(1, H + 1))
        return self.occurrence + float(inside) / H

    def capacity(self, window: int) -> float:
        """B_L = (1/H) Σ_j P(τ = j) max(0, H − j − L)."""
        H, L = self.horizon, _check_window(window)
        j = np.arange(1, H + 1)
        return float((self.p_tau * np.maximum(0, H - j - L)).sum() / H)

    def midpoint(self, window: int) -> tuple[float, float]:
        """The minimax risk from the depth-L profile, R_L + B_L/2, and its worst-case error B_L/2."""
        b = self.capacity(window)
        return self.risk_window(window) + b / 2, b / 2

    def interval(self, window: int) -> tuple[float, float]:
        """[R_L, R_L + B_L]: the risks compatible with the depth-L profile (sharp)."""
        r = self.risk_window(window)
        return r, r + self.capacity(window)

    def summary(self, window: int | None = None) -> dict[str, float | None]:
        """The keys of ``kvdiv finite exact``: R_H, O_H, Pi_H, E_H, C_H, P_diverge (+ R_L, B_L)."""
        out = {
            "R_H": self.risk,
            "O_H": self.occurrence,
            "Pi_H": self.occupation,
            "E_H": self.exposure,
            "C_H": self.mismatch_rate,
            "P_diverge": self.p_diverge,
        }
        if window is not None:
            out["R_L"] = self.risk_window(window)
            out["B_L"] = self.capacity(window)
        return {k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in out.items()}


def _check_window(window: int) -> int:
    if int(window) < 1:
        raise ValueError(f"window L must be >= 1, got {window}")
    return int(window)


def _check_size(system: FiniteSystem, depth: int) -> None:
    states = system.vocab ** (2 * depth)
    if states > MAX_PAIR_STATES:
        raise ValueError(
            f"system {system.name!r}: exact enumeration needs {states} history pairs at depth {depth} "
            f"(vocab {system.vocab}, horizon {system.horizon}); at most {MAX_PAIR_STATES} are supported"
        )


def enumerate_exact(system: FiniteSystem) -> ExactResult:
    """Exact P(τ = j) and P(x_t ≠ y_t, τ = j) by enumerating the coupled process.

    Undiverged mass a_d over common histories u of depth d obeys a_{d+1}(u, z) = a_d(u) m_u(z), and
    P(τ = d+1) = Σ_u a_d(u) δ_u. The mass diverging at step j starts on pairs (u x, u y) with weight
    a(u)(p − q)⁺(x)(q − p)⁺(y)/δ_u and moves by the coupling kernel; at depth d its mismatch
    probability for step d + 1 is Σ mass · δ(pair).
    """
    H = system.horizon
    _check_size(system, H - 1)
    p_tau = np.zeros(H)
    joint = np.zeros((H, H))
    a = np.ones(1)
    active: list[tuple[int, np.ndarray]] = []  # (j, diverged mass at the current depth)
    for d in range(H):  # histories of length d; the next step is t = d + 1
        p, q = system.level(d)
        tv_same = 0.5 * np.abs(p - q).sum(axis=1)
        p_tau[d] = float((a * tv_same).sum())
        joint[d, d] = p_tau[d]
        if active:
            tv_pair = _pair_tv(p, q)
            for j, mass in active:
                joint[j - 1, d] = float((mass * tv_pair).sum())
        if d + 1 == H:
            break
        active = [(j, _transition(mass, p, q, tv_pair)) for j, mass in active]
        if p_tau[d] > 0:
            active.append((d + 1, _branch_start(a, p, q, tv_same)))
        a = (a[:, None] * np.minimum(p, q)).reshape(-1)
    return ExactResult(horizon=H, p_tau=p_tau, joint=joint)


def coupled_marginals(system: FiniteSystem) -> list[tuple[np.ndarray, np.ndarray]]:
    """Marginal laws of x_{1:d} and y_{1:d} under the coupling, for d = 1..H (by enumeration).

    Entry d − 1 holds two arrays of length V^d over histories in local (base-V) order.
    They equal :func:`path_laws` (x ~ P, y ~ Q): the coupling preserves marginals.
    """
    H = system.horizon
    _check_size(system, H)
    out = []
    a = np.ones(1)
    diverged = np.zeros((1, 1))
    for d in range(H):
        p, q = system.level(d)
        tv_same = 0.5 * np.abs(p - q).sum(axis=1)
        diverged = _transition(diverged, p, q, _pair_tv(p, q)) + _branch_start(a, p, q, tv_same)
        a = (a[:, None] * np.minimum(p, q)).reshape(-1)
        out.append((a + diverged.sum(axis=1), a + diverged.sum(axis=0)))
    return out


def path_laws(system: FiniteSystem) -> list[tuple[np.ndarray, np.ndarray]]:
    """Laws of x_{1:d} ~ P and y_{1:d} ~ Q sampled on their own, for d = 1..H (local order)."""
    out = []
    law_p, law_q = np.ones(1), np.ones(1)
    for d in range(system.horizon):
        p, q = system.level(d)
        law_p = (law_p[:, None] * p).reshape(-1)
        law_q = (law_q[:, None] * q).reshape(-1)
        out.append((law_p, law_q))
    return out


def orders_identified(a: FiniteSystem | ExactResult, b: FiniteSystem | ExactResult, window: int) -> bool:
    """Whether two actions are ordered by their depth-L profiles alone.

    True iff the intervals [R_L, R_L + B_L] of the two do not overlap.
    """
    ea = a if isinstance(a, ExactResult) else enumerate_exact(a)
    eb = b if isinstance(b, ExactResult) else enumerate_exact(b)
    lo_a, hi_a = ea.interval(window)
    lo_b, hi_b = eb.interval(window)
    return hi_a < lo_b or hi_b < lo_a
