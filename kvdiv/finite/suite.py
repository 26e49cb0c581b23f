"""The suite of enumerable kernel pairs of the finite-state study (arXiv 2609.16617, §4.4, Figure 4).

The product of the config's design factors — (vocabulary, horizon) shapes × perturbation strengths × perturbation
kinds (``persistent``, ``history_dependent``) × EOS (without/with) — 24 systems by default, each generated from its
own seed ``derive_seed(seed, name)``: P(·|h) Dirichlet per history, Q(·|h) moving mass s_h onto P's least likely
token so that the fixed-history TV is exactly s_h. The construction: docs/estimators.md#the-finite-state-suite.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from kvdiv.finite.system import FiniteSystem, absorb_eos
from kvdiv.seeds import derive_rng

KINDS = ("persistent", "history_dependent")

DEFAULTS = {
    "seed": 4,
    "shapes": [{"vocab": 2, "horizon": 8}, {"vocab": 3, "horizon": 6}, {"vocab": 4, "horizon": 5}],
    "strengths": [0.01, 0.04],
    "kinds": list(KINDS),
    "eos": [False, True],
    "concentration": 1.0,
    "eos_probability": 0.1,
}


@dataclass(frozen=True)
class SystemSpec:
    """One suite member: its design factors and name (a path component)."""

    vocab: int
    horizon: int
    strength: float
    kind: str
    eos: bool

    @property
    def name(self) -> str:
        """e.g. ``v3h6-s0.01-persistent-eos``."""
        return f"v{self.vocab}h{self.horizon}-s{self.strength:g}-{self.kind}-{'eos' if self.eos else 'noeos'}"


def suite_specs(params: dict) -> list[SystemSpec]:
    """The suite's members from the ``finite_state`` config section (defaults filled from DEFAULTS)."""
    cfg = {**DEFAULTS, **params}
    specs = []
    for shape, strength, kind, eos in itertools.product(cfg["shapes"], cfg["strengths"], cfg["kinds"], cfg["eos"]):
        if kind not in KINDS:
            raise ValueError(f"finite_state.kinds: unknown perturbation kind {kind!r} (expected one of {KINDS})")
        if not 0 < float(strength) <= 0.5:
            raise ValueError(f"finite_state.strengths: {strength!r} outside (0, 0.5]")
        V, H = int(shape["vocab"]), int(shape["horizon"])
        if V < 2 or H < 2:
            raise ValueError(f"finite_state.shapes: vocab and horizon must be >= 2, got {shape!r}")
        specs.append(SystemSpec(V, H, float(strength), str(kind), bool(eos)))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError("finite_state: the design factors repeat a system (duplicate shapes, strengths or kinds)")
    return specs


def build_system(spec: SystemSpec, seed: int, concentration: float = 1.0, eos_probability: float = 0.1) -> FiniteSystem:
    """Generate one suite member deterministically from ``derive_seed(seed, spec.name)``."""
    if concentration <= 0:
        raise ValueError(f"finite_state.concentration must be > 0, got {concentration}")
    if spec.eos and not 0 < eos_probability < 1:
        raise ValueError(f"finite_state.eos_probability must lie in (0, 1), got {eos_probability}")
    rng = derive_rng(int(seed), spec.name)
    V, H = spec.vocab, spec.horizon
    n = sum(V**d for d in range(H))
    if spec.eos:
        eos = V - 1
        reference = np.zeros((n, V))
        if V > 2:
            reference[:, :eos] = (1 - eos_probability) * rng.dirichlet(np.full(V - 1, concentration), size=n)
        else:
            reference[:, 0] = 1 - eos_probability
        reference[:, eos] = eos_probability
    else:
        eos = None
        reference = rng.dirichlet(np.full(V, concentration), size=n)
    if spec.kind == "persistent":
        tv = np.full(n, spec.strength)
    else:
        tv = spec.strength * 2.0 * rng.uniform(size=n)
    k = reference.argmin(axis=1)
    room = 1.0 - reference[np.arange(n), k]
    lam = np.minimum(1.0, tv / room)
    intervention = (1.0 - lam)[:, None] * reference
    intervention[np.arange(n), k] += lam
    intervention /= intervention.sum(axis=1, keepdims=True)
    if eos is not None:
        reference = absorb_eos(reference, V, H, eos)
        intervention = absorb_eos(intervention, V, H, eos)
    return FiniteSystem(V, H, reference, intervention, eos=eos, name=spec.name)


def build_suite(params: dict) -> list[FiniteSystem]:
    """All suite members from the ``finite_state`` config section, in design order."""
    cfg = {**DEFAULTS, **params}
    return [
        build_system(spec, int(cfg["seed"]), float(cfg["concentration"]), float(cfg["eos_probability"]))
        for spec in suite_specs(cfg)
    ]
