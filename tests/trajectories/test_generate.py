"""Coupled generation over explicit toy kernels (support.toy_kernels.ToyKernelSession): exact checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from kvdiv.trajectories.generate import generate
from support.toy_kernels import ToyKernelSession, constant_kernel, history_kernel, mixture_kernel
from kvdiv.settings import generation

V = 4
EOS = 3
REF = history_kernel(V, seed=11)
ALT = history_kernel(V, seed=12)
KERNELS = {"weak": mixture_kernel(REF, ALT, 0.2), "strong": mixture_kernel(REF, ALT, 0.8), "same": REF}


def session(**kw) -> ToyKernelSession:
    return ToyKernelSession(REF, KERNELS, eos_token_ids=[EOS], **kw)


def tv(p, q) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def law(kernel, history, eos=EOS):
    if eos in history:
        out = np.zeros(V)
        out[eos] = 1.0
        return out
    return kernel(tuple(history))


def two_token_law(kernel):
    return np.array([kernel(())[a] * law(kernel, (a,))[b] for a in range(V) for b in range(V)])


def two_token_pvalue(tokens: np.ndarray, expected: np.ndarray) -> float:
    cells = tokens[:, 0] * V + tokens[:, 1]
    counts = np.bincount(cells, minlength=V * V)
    keep = expected > 0
    assert counts[~keep].sum() == 0
    return stats.chisquare(counts[keep], expected[keep] * len(cells)).pvalue


def test_marginals_first_two_tokens():
    """x ~ P and y ~ Q over the first two tokens (chi-square at a fixed seed), evicting from step 1."""
    s = session(evict_first_step=True)
    out = generate(
        s,
        ["strong"],
        generation(master_seed=1, study_seed=2, horizon=2, replicates=4000),
        eos_token_ids=[EOS],
        progress=False,
        document_id="doc",
    )
    t = out["strong"]
    assert two_token_pvalue(t.x, two_token_law(REF)) > 1e-3
    assert two_token_pvalue(t.y, two_token_law(KERNELS["strong"])) > 1e-3


@pytest.mark.parametrize("mode", ["complete", "swrb"])
def test_recorded_tv_matches_the_kernels(mode):
    """tv = TV(P(x_<t), Q(y_<t)), fixed_tv = TV(P(x_<t), Q(x_<t)); δ_1 = 0 by default; EOS absorbing."""
    s = session()
    out = generate(
        s,
        list(KERNELS),
        generation(master_seed=3, study_seed=4, horizon=7, replicates=6, mode=mode),
        eos_token_ids=[EOS],
        progress=False,
        document_id="d",
    )
    assert s.alive == 0
    for name, t in out.items():
        q = KERNELS[name]
        assert np.all(t.tv[:, 0] == 0) and np.array_equal(t.match, t.x == t.y)
        for r in range(6):
            x, y = t.x[r].tolist(), t.y[r].tolist()
            for i in range(1, 7):
                assert t.tv[r, i] == pytest.approx(tv(law(REF, x[:i]), law(q, y[:i])), abs=1e-6)
                assert t.fixed_tv[r, i] == pytest.approx(tv(law(REF, x[:i]), law(q, x[:i])), abs=1e-6)
            for seq, flags in ((x, t.eos_x[r]), (y, t.eos_y[r])):
                first = seq.index(EOS) if EOS in seq else 7
                assert all(tok == EOS for tok in seq[first:])
                assert flags.tolist() == [i >= first for i in range(7)]
            mism = np.flatnonzero(~t.match[r])
            if len(mism):
                assert t.tv[r, mism[0]] > 0  # the first mismatch happens where δ > 0
                assert x[: mism[0]] == y[: mism[0]]
        if name == "same":
            assert np.all(t.tv == 0) and np.all(t.match) and np.all(t.fixed_tv == 0)


@pytest.mark.parametrize("reference_chain", ["per_action", "shared"])
def test_one_batched_step_per_step_with_two_then_three_rows(reference_chain):
    """per_action: 2 rows per pair (P at x, Q at y), 3 after divergence; shared: 1 row per replicate's reference
    chain, 1 per pair (Q at y), 2 after divergence."""
    s = session()
    H, R = 9, 5
    out = generate(
        s,
        list(KERNELS),
        generation(master_seed=5, study_seed=6, horizon=H, replicates=R, reference_chain=reference_chain),
        eos_token_ids=[EOS],
        progress=False,
        document_id="d",
    )
    assert s.step_calls == H - 1
    per_pair = 1 if reference_chain == "shared" else 2
    expected = R * (H - 1) if reference_chain == "shared" else 0
    for t in out.values():
        diverged_by = np.logical_or.accumulate(~t.match, axis=1)  # diverged at some step ≤ t
        expected += int(np.sum(np.where(diverged_by[:, : H - 1], per_pair + 1, per_pair)))
    assert s.step_rows == expected
    assert sum(t.rows for t in out.values()) == pytest.approx(expected)


def test_history_independent_perturbation_has_known_mismatch_rate():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    other = np.array([0.0, 0.2, 0.3, 0.5])
    eps = 0.4
    q = (1 - eps) * p + eps * other
    delta = tv(p, q)
    s = ToyKernelSession(constant_kernel(p), {"q": constant_kernel(q)})
    H, R = 6, 3000
    t = generate(
        s,
        ["q"],
        generation(master_seed=7, study_seed=8, horizon=H, replicates=R),
        eos_token_ids=[],
        progress=False,
        document_id="d",
    )["q"]
    assert np.all(t.tv[:, 0] == 0) and np.allclose(t.tv[:, 1:], delta) and np.allclose(t.fixed_tv[:, 1:], delta)
    rate = np.mean(~t.match[:, 1:])
    se = np.sqrt(delta * (1 - delta) / (R * (H - 1)))
    assert abs(rate - delta) < 4 * se
    assert np.all(t.match[:, 0])


@pytest.mark.parametrize(
    "mode, reference_chain", [("complete", "shared"), ("complete", "per_action"), ("swrb", "shared")]
)
def test_seeds_isolate_actions_and_replicates(mode, reference_chain):
    """A pair's values depend on its own streams only: adding an action or replicates changes nothing of it."""
    kw = dict(document_id="doc-a", eos_token_ids=[EOS], progress=False)

    def settings(replicates):
        return generation(
            master_seed=9, study_seed=10, horizon=6, replicates=replicates, mode=mode, reference_chain=reference_chain
        )

    both = generate(session(), ["weak", "strong"], settings(4), **kw)
    alone = generate(session(), ["strong"], settings(2), **kw)
    again = generate(session(), ["weak", "strong"], settings(4), **kw)
    for name in ("x", "y", "tv", "fixed_tv", "match"):
        assert np.array_equal(getattr(both["strong"], name)[:2], getattr(alone["strong"], name))
        assert np.array_equal(getattr(both["weak"], name), getattr(again["weak"], name))
    other = generate(session(), ["strong"], settings(2), **{**kw, "document_id": "doc-b"})
    assert not np.array_equal(other["strong"].x, alone["strong"].x)


def _swrb_branch_law(q_kernel, H):
    """Exact P(J = j) = E_u[w_j / D] (J = 0 when D = 0) by enumerating overlap paths."""
    out = np.zeros(H + 1)
    for path in itertools.product(range(V), repeat=H):
        prob, surv, w = 1.0, 1.0, []
        for t in range(H):
            p, q = law(REF, path[:t]), law(q_kernel, path[:t])
            m = np.minimum(p, q)
            d = 1.0 - m.sum()
            prob *= m[path[t]] / m.sum()
            w.append(surv * d)
            surv *= 1.0 - d
        D = sum(w)
        if prob == 0:
            continue
        if D == 0:
            out[0] += prob
        else:
            out[1:] += prob * np.array(w) / D
    return out


def test_swrb_branch_point_law_and_risk():
    """J ~ E_u[w_j/D] exactly (reservoir choice), and E[Z_R] = E[M] (complete mode) within SEs."""
    H, R = 3, 4000
    q = KERNELS["weak"]
    t = generate(
        session(evict_first_step=True),
        ["weak"],
        generation(master_seed=1, study_seed=1, horizon=H, replicates=R, mode="swrb"),
        eos_token_ids=[EOS],
        progress=False,
        document_id="j",
    )["weak"]
    expected = _swrb_branch_law(q, H)
    counts = np.bincount(t.branch_start, minlength=H + 1)
    keep = expected > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], expected[keep] * R).pvalue > 1e-3
    # risk: Z_R = D (1 + Σ_{t>J} δ_t) / H  against the complete-mode M = mean mismatch
    h = t.overlap_tv.astype(np.float64)
    D = 1.0 - np.prod(1.0 - h, axis=1)
    J = t.branch_start
    after = np.array([t.tv[r, J[r] :].sum() if J[r] else 0.0 for r in range(R)])
    z = np.where(J > 0, D * (1.0 + after) / H, 0.0)
    c = generate(
        session(evict_first_step=True),
        ["weak"],
        generation(master_seed=1, study_seed=2, horizon=H, replicates=R),
        eos_token_ids=[EOS],
        progress=False,
        document_id="j",
    )["weak"]
    m = np.mean(~c.match, axis=1)
    se = np.sqrt(z.var() / R + m.var() / R)
    assert abs(z.mean() - m.mean()) < 4 * se
    assert z.var() < m.var()  # SWRB integrates out the full-agreement event


def test_swrb_path_structure():
    s = session()
    t = generate(
        s,
        ["strong", "same"],
        generation(master_seed=2, study_seed=3, horizon=8, replicates=20, mode="swrb"),
        eos_token_ids=[EOS],
        progress=False,
        document_id="d",
    )
    assert s.alive == 0
    assert np.all(t["same"].branch_start == 0) and np.all(t["same"].match)
    st = t["strong"]
    for r in range(20):
        j = st.branch_start[r]
        if j == 0:
            assert np.all(st.match[r])
            continue
        assert np.all(st.match[r, : j - 1]) and not st.match[r, j - 1]
        assert st.overlap_tv[r, j - 1] > 0 and st.tv[r, j - 1] == st.overlap_tv[r, j - 1]
        assert np.array_equal(st.tv[r, :j], st.overlap_tv[r, :j])


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        generation(horizon=2, replicates=1, mode="naive")
    g = generation(horizon=2, replicates=1)
    with pytest.raises(KeyError):
        generate(session(), ["nope"], g, document_id="d", eos_token_ids=[], progress=False)
    with pytest.raises(TypeError, match="generation must be a kvdiv.settings.Generation, got dict"):
        generate(session(), ["weak"], {"horizon": 2}, document_id="d", eos_token_ids=[], progress=False)
    with pytest.raises(TypeError, match="unexpected keyword argument 'horizon'"):  # one way in: the Generation
        generate(session(), ["weak"], g, horizon=2, document_id="d", eos_token_ids=[], progress=False)


# --- several EOS ids are one event ----------------------------------------------------------------------------


def _point(v: int, **mass: float) -> np.ndarray:
    law = np.zeros(v)
    for token, p in mass.items():
        law[int(token[1:])] = p
    return law


@pytest.mark.parametrize("mode", ["complete", "swrb"])
def test_eos_ids_fold_onto_the_absorbing_id(mode):
    """EOS ids {3, 4} (3 absorbing): P ends with 3 and Q with 4 at step 2 ⇒ the pair matches at step 2 and δ_2,
    the fixed-history TV and the overlap hazard count no EOS-id difference."""
    v = 6
    start = _point(v, t0=1.0)  # step 1 (δ_1 = 0): both chains emit token 0

    def p(h):
        return start if not h else _point(v, t3=1.0)

    def q(h):
        return start if not h else _point(v, t4=1.0)

    toy = ToyKernelSession(p, {"a": q}, eos_token_ids=[3, 4])
    out = generate(
        toy,
        ["a"],
        generation(master_seed=1, study_seed=2, horizon=4, replicates=50, mode=mode),
        eos_token_ids=[3, 4],
        progress=False,
        document_id="d",
    )["a"]
    assert np.all(out.match) and np.all(out.x[:, 1:] == 3) and np.all(out.y == out.x)
    assert np.all(out.tv == 0) and np.all(out.fixed_tv == 0)
    assert np.all(out.eos_x[:, 1:]) and np.all(out.eos_y[:, 1:]) and not np.any(out.eos_x[:, 0])
    if mode == "swrb":
        assert np.all(out.overlap_tv == 0) and np.all(out.branch_start == 0)


def test_eos_folding_keeps_real_differences():
    """Folding moves mass between end ids only: P = {1: .5, 3: .2, 4: .3} and Q = {1: .5, 4: .5} are the same law
    (δ_2 = 0), Q' = {1: .7, 4: .3} differs from P by its EOS mass, δ_2 = 0.2, and no chain ever emits id 4."""
    v = 6
    start = _point(v, t0=1.0)
    kernels = {
        "same": lambda h: start if not h else _point(v, t1=0.5, t4=0.5),
        "less_eos": lambda h: start if not h else _point(v, t1=0.7, t4=0.3),
    }
    toy = ToyKernelSession(
        lambda h: start if not h else _point(v, t1=0.5, t3=0.2, t4=0.3), kernels, eos_token_ids=[3, 4]
    )
    out = generate(
        toy,
        list(kernels),
        generation(master_seed=1, study_seed=2, horizon=3, replicates=400),
        eos_token_ids=[3, 4],
        progress=False,
        document_id="d",
    )
    assert np.all(out["same"].match) and np.all(out["same"].tv == 0)
    t = out["less_eos"]
    np.testing.assert_allclose(t.tv[:, 1], 0.2, atol=1e-7)
    np.testing.assert_allclose(t.fixed_tv[:, 1], 0.2, atol=1e-7)
    for traj in out.values():
        assert not np.any(traj.x == 4) and not np.any(traj.y == 4)
    # δ_2 = 0.2 is P(x_2 ≠ y_2): every mismatch is EOS (3) against a continuation (1)
    mism = ~t.match[:, 1]
    assert abs(mism.mean() - 0.2) < 4 * np.sqrt(0.2 * 0.8 / mism.size)
    assert np.all(t.x[mism, 1] == 3) and np.all(t.y[mism, 1] == 1)
