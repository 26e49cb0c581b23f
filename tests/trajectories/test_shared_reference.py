"""Shared reference chains (``reference_chain: shared``): one x per (document, replicate), every action's y coupled to
it. Exact checks on a toy system: the step functions' joint law (enumerated over a grid of uniforms that resolves
every breakpoint) is the overlap–residual coupling's; the sampler is those step functions applied along the chains'
own histories; so each pair (x, y_a) has the path law of the per-action construction. Then marginals, 100%
retention, stream isolation, and a seeded check that contrasts between actions are paired (smaller variance)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvdiv.seeds import derive_rng
from support.toy_kernels import ToyKernelSession
from kvdiv.trajectories.coupling import couple, couple_to_reference, reference_draw
from kvdiv.trajectories.generate import generate
from kvdiv.settings import generation

V, H = 3, 3
#: Grid of uniforms: every law below has entries in multiples of 1/6, so every inverse-CDF and acceptance breakpoint
#: is a multiple of 1/k for some k ≤ 6, hence of 1/60; the cell midpoints (i + ½)/60 enumerate each draw exactly.
N = 60
GRID = (np.arange(N) + 0.5) / N
#: Every combination of three grid uniforms, [N^3, 3].
GRID3 = np.stack(np.meshgrid(GRID, GRID, GRID, indexing="ij"), axis=-1).reshape(-1, 3)


def sixths(*entries: int) -> np.ndarray:
    law = np.array(entries, dtype=np.float64) / 6.0
    assert abs(law.sum() - 1.0) < 1e-12
    return law


#: History-dependent toy kernels over V = 3 tokens (laws keyed by (last token, length)), entries in sixths.
P_TABLE = {None: sixths(3, 2, 1), 0: sixths(2, 2, 2), 1: sixths(4, 1, 1), 2: sixths(1, 3, 2)}
QA_TABLE = {None: sixths(1, 2, 3), 0: sixths(2, 3, 1), 1: sixths(3, 1, 2), 2: sixths(0, 3, 3)}
QB_TABLE = {None: sixths(3, 1, 2), 0: sixths(2, 2, 2), 1: sixths(5, 1, 0), 2: sixths(2, 2, 2)}


def table_kernel(table, shift: int = 0):
    def kernel(history: tuple[int, ...]) -> np.ndarray:
        last = history[-1] if history else None
        law = table[last]
        return np.roll(law, shift) if (len(history) % 2 and shift) else law

    return kernel


P = table_kernel(P_TABLE)
KERNELS = {"a": table_kernel(QA_TABLE, shift=1), "b": table_kernel(QB_TABLE), "same": P}


def mixture(base, other, eps: float):
    return lambda history: (1 - eps) * base(history) + eps * other(history)


def step_law_analytic(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The overlap–residual coupling's joint law of (x_t, y_t): min(p, q) on the diagonal, (p − q)⁺ ⊗ (q − p)⁺ / δ."""
    m = np.minimum(p, q)
    rp, rq = p - m, q - m
    delta = rp.sum()
    return np.diag(m) + (np.outer(rp, rq) / delta if delta > 0 else 0.0)


def step_law_old(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The joint law :func:`couple` realises, enumerated over the uniform grid (3 uniforms)."""
    u = GRID3
    n = len(u)
    x, y, _ = couple(np.repeat(p[None], n, 0), np.repeat(q[None], n, 0), u, tv_atol=0.0)
    return np.bincount(x * V + y, minlength=V * V).reshape(V, V) / n


def step_law_shared(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The joint law of :func:`reference_draw` then :func:`couple_to_reference`, enumerated over the grid
    (1 reference uniform, 2 action uniforms)."""
    u = GRID3
    n = len(u)
    x = reference_draw(np.repeat(p[None], n, 0), u[:, 0])
    y, _ = couple_to_reference(np.repeat(p[None], n, 0), np.repeat(q[None], n, 0), x, u[:, 1:], tv_atol=0.0)
    return np.bincount(x * V + y, minlength=V * V).reshape(V, V) / n


STEP_LAWS: dict = {}


def path_law(step_law, q_kernel) -> dict[tuple[tuple[int, ...], tuple[int, ...]], float]:
    """Joint law of the H-step paths (x, y): the product of step laws at (P(·|x_<t), Q(·|y_<t)), enumerated."""

    def law_at(hx, hy):
        p, q = P(hx), q_kernel(hy)
        key = (step_law, p.tobytes(), q.tobytes())  # the tables hold few distinct laws
        if key not in STEP_LAWS:
            STEP_LAWS[key] = step_law(p, q)
        return STEP_LAWS[key]

    out = {((), ()): 1.0}
    for _ in range(H):
        nxt: dict = {}
        for (hx, hy), prob in out.items():
            joint = law_at(hx, hy)
            for a, b in zip(*np.nonzero(joint)):
                key = (hx + (int(a),), hy + (int(b),))
                nxt[key] = nxt.get(key, 0.0) + prob * joint[a, b]
        out = nxt
    return out


def seq_law(kernel) -> dict[tuple[int, ...], float]:
    out = {}
    for path in itertools.product(range(V), repeat=H):
        prob = 1.0
        for t in range(H):
            prob *= kernel(path[:t])[path[t]]
        if prob > 0:
            out[path] = prob
    return out


LAWS = [(P_TABLE[k], table[j]) for table in (QA_TABLE, QB_TABLE) for k in P_TABLE for j in table]


@pytest.mark.parametrize("p, q", LAWS[::3] + [(sixths(6, 0, 0), sixths(0, 3, 3)), (sixths(3, 2, 1), sixths(3, 2, 1))])
def test_step_law_equals_the_overlap_residual_coupling(p, q):
    """One step: the shared construction's joint law of (x_t, y_t) is the overlap–residual coupling's, exactly
    (grid enumeration; the probabilities are multiples of 1/60^3), including δ = 1 and δ = 0."""
    analytic = step_law_analytic(p, q)
    np.testing.assert_allclose(step_law_old(p, q), analytic, atol=1e-12)
    np.testing.assert_allclose(step_law_shared(p, q), analytic, atol=1e-12)


@pytest.mark.parametrize("action", ["a", "b"])
def test_pair_path_law_and_marginals(action):
    """H steps of history-dependent kernels: each pair (x, y_a) has the per-action construction's path law; x ~ P and
    y ~ Q_a (summing the enumerated joint law)."""
    q = KERNELS[action]
    old, new = path_law(step_law_old, q), path_law(step_law_shared, q)
    assert set(old) == set(new)
    for key in old:
        assert new[key] == pytest.approx(old[key], abs=1e-12)
    assert sum(new.values()) == pytest.approx(1.0, abs=1e-12)
    mx: dict = {}
    my: dict = {}
    for (x, y), prob in new.items():
        mx[x] = mx.get(x, 0.0) + prob
        my[y] = my.get(y, 0.0) + prob
    for marginal, truth in ((mx, seq_law(P)), (my, seq_law(q))):
        assert set(k for k, v in marginal.items() if v > 1e-15) == set(truth)
        for path, prob in truth.items():
            assert marginal[path] == pytest.approx(prob, abs=1e-12)


def test_the_sampler_applies_the_step_functions_along_each_chains_history():
    """run_complete_shared = the step functions with the pair's streams, P at x_<t and Q at y_<t: replaying them from
    the recorded histories reproduces every token; every action of a replicate has the same x (paired)."""
    R, parts = 40, (3, 1, "doc")
    s = ToyKernelSession(P, KERNELS, evict_first_step=True)
    g = generation(horizon=H, replicates=R, master_seed=3, study_seed=1)
    out = generate(s, list(KERNELS), g, document_id="doc", eos_token_ids=[], progress=False)
    assert s.alive == 0
    for r in range(R):
        u_ref = derive_rng(*parts, "reference", r).random(H)
        x_expected = []
        for t in range(H):
            x_expected.append(int(reference_draw(P(tuple(x_expected))[None], u_ref[t : t + 1])[0]))
        for name, q in KERNELS.items():
            t_a = out[name]
            assert t_a.x[r].tolist() == x_expected
            u = derive_rng(*parts, name, r).random((H, 2))
            y = []
            for t in range(H):
                hx = tuple(x_expected[:t])
                yt, delta = couple_to_reference(
                    P(hx)[None], q(tuple(y))[None], [x_expected[t]], u[t : t + 1], tv_atol=0.0
                )
                y.append(int(yt[0]))
                assert t_a.tv[r, t] == pytest.approx(float(delta[0]), abs=1e-6)
            assert t_a.y[r].tolist() == y
    diverged = ~out["a"].match
    assert diverged.any() and (~out["b"].match).any()


def test_full_retention_gives_y_identical_to_x():
    """Q = P (100% retention): δ ≡ 0 and y ≡ x at every step, with or without tv_atol."""
    s = ToyKernelSession(P, KERNELS, evict_first_step=True)
    for atol in (0.0, 1e-6):
        out = generate(
            s,
            list(KERNELS),
            generation(master_seed=1, study_seed=1, horizon=H, replicates=200, tv_atol=atol),
            eos_token_ids=[],
            progress=False,
            document_id="d",
        )
        same = out["same"]
        assert np.array_equal(same.x, same.y) and np.all(same.match) and np.all(same.tv == 0)
        assert np.all(same.fixed_tv == 0)


def test_marginal_first_tokens_match_the_kernels_statistically():
    """Through the sampler (2000 replicates, fixed seed): the frequencies of (x_1, x_2) and (y_1, y_2) per action are
    within 4 standard errors of P's and Q_a's exact two-token laws."""
    R = 2000
    s = ToyKernelSession(P, KERNELS, evict_first_step=True)
    out = generate(
        s,
        ["a", "b"],
        generation(master_seed=7, study_seed=7, horizon=2, replicates=R),
        eos_token_ids=[],
        progress=False,
        document_id="d",
    )
    for name in ("a", "b"):
        for tokens, kernel in ((out[name].x, P), (out[name].y, KERNELS[name])):
            truth = np.array([kernel(())[i] * kernel((i,))[j] for i in range(V) for j in range(V)])
            freq = np.bincount(tokens[:, 0] * V + tokens[:, 1], minlength=V * V) / R
            se = np.sqrt(truth * (1 - truth) / R)
            assert np.all(np.abs(freq - truth) <= 4 * se + 1e-12)


def test_adding_an_action_changes_no_existing_value():
    """Streams per (document, replicate, "reference") and (document, action, replicate): a job with one more action
    (first in the order) gives the same values for the others; per_action streams too."""
    kw = dict(document_id="d", eos_token_ids=[], progress=False)
    for chain in ("shared", "per_action"):
        g = generation(horizon=H, replicates=6, master_seed=2, study_seed=5, reference_chain=chain)
        two = generate(ToyKernelSession(P, KERNELS, evict_first_step=True), ["a", "b"], g, **kw)
        three = generate(ToyKernelSession(P, KERNELS, evict_first_step=True), ["same", "a", "b"], g, **kw)
        for name in ("a", "b"):
            for field in ("x", "y", "tv", "fixed_tv", "match"):
                assert np.array_equal(getattr(two[name], field), getattr(three[name], field)), (chain, name, field)


def test_contrasts_between_actions_are_paired():
    """Two evictions that perturb P the same way (b a milder version of a, as snapkv_512 vs snapkv_half): sharing x
    makes the mismatch rates M_a, M_b of a replicate positively covariant, so Var(M_a − M_b) < Var(M_a) + Var(M_b),
    the per-action contrast's variance. From 4000 replicates at a fixed seed, the shared covariance must exceed 4 of
    its standard errors and the per-action one lie within 4 of 0. (Pairing is not a theorem: actions that perturb P
    in opposite directions can make the covariance negative, docs/claims.md.)"""
    R = 4000
    kernels = {"a": KERNELS["a"], "b": mixture(P, KERNELS["a"], 0.5)}
    kw = dict(document_id="d", eos_token_ids=[], progress=False)
    for chain in ("shared", "per_action"):
        g = generation(horizon=H, replicates=R, master_seed=11, study_seed=3, reference_chain=chain)
        out = generate(ToyKernelSession(P, kernels, evict_first_step=True), ["a", "b"], g, **kw)
        ma = (~out["a"].match).mean(axis=1)
        mb = (~out["b"].match).mean(axis=1)
        prod = (ma - ma.mean()) * (mb - mb.mean())
        cov, se = prod.mean(), prod.std(ddof=1) / np.sqrt(R)
        if chain == "shared":
            assert cov > 4 * se
            assert np.var(ma - mb, ddof=1) < np.var(ma, ddof=1) + np.var(mb, ddof=1)
        else:
            assert abs(cov) < 4 * se
