"""The suite of the finite-state study (kvdiv.finite.suite): deterministic, informative, design checked."""

from __future__ import annotations

import numpy as np
import pytest

from kvdiv.finite.exact import enumerate_exact
from kvdiv.finite.suite import build_suite, suite_specs


def test_suite_is_deterministic_and_informative():
    specs = suite_specs({})
    assert len(specs) == 24
    assert len({s.name for s in specs}) == 24
    a, b = build_suite({}), build_suite({})
    other = build_suite({"seed": 5})
    for x, y, z in zip(a, b, other):
        np.testing.assert_array_equal(x.reference, y.reference)
        np.testing.assert_array_equal(x.intervention, y.intervention)
        if not (x.vocab == 2 and x.eos is not None):  # V = 2 with EOS: the reference is [1 - p_eos, p_eos]
            assert not np.array_equal(x.reference, z.reference)
    for system, spec in zip(a, specs):
        exact = enumerate_exact(system)
        assert 0 < exact.p_diverge < 1
        assert (system.eos is not None) == spec.eos
        live = np.ones(system.n_nodes, dtype=bool)
        if system.eos is not None:  # post-EOS histories are absorbed in both kernels
            live = system.reference[:, system.eos] < 1
        fixed = system.fixed_tv()[live]
        if spec.kind == "persistent":
            np.testing.assert_allclose(fixed, spec.strength, rtol=1e-9)
        else:
            assert fixed.std() > 0.1 * spec.strength
            assert fixed.max() <= 2 * spec.strength + 1e-12  # s_h = s * 2 * Uniform(0, 1)


def test_suite_rejects_bad_design():
    with pytest.raises(ValueError, match="kind"):
        suite_specs({"kinds": ["sometimes"]})
    with pytest.raises(ValueError, match="duplicate"):
        suite_specs({"strengths": [0.01, 0.01]})
