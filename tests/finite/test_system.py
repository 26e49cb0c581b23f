"""The finite-state system file format (kvdiv.finite.system): round trip and errors naming file and history."""

from __future__ import annotations

import json

import numpy as np
import pytest
from finite_helpers import random_system

from kvdiv.finite.system import history_key, load_system, save_system, system_from_dict


def test_file_roundtrip(tmp_path):
    system = random_system(3, 3, seed=8, eos=1)
    path = tmp_path / "sys.json"
    save_system(system, path)
    loaded = load_system(path)
    np.testing.assert_array_equal(loaded.reference, system.reference)
    np.testing.assert_array_equal(loaded.intervention, system.intervention)
    assert loaded.eos == 1 and loaded.vocab == 3 and loaded.horizon == 3
    assert system.history(system.node((2, 0))) == (2, 0)
    assert history_key((2, 0)) == "2,0"


def _valid_file():
    return {
        "vocab": 2,
        "horizon": 2,
        "reference": {"": [0.5, 0.5], "0": [0.25, 0.75], "1": [1.0, 0.0]},
        "intervention": {"": [0.4, 0.6], "0": [0.25, 0.75], "1": [0.5, 0.5]},
    }


def _break(mutate):
    data = _valid_file()
    mutate(data)
    return data


MALFORMED = {
    "missing history": (lambda d: d["intervention"].pop("1"), ["'1'", "missing"]),
    "row does not sum to 1": (lambda d: d["reference"].__setitem__("0", [0.25, 0.75 + 2e-9]), ["'0'", "sums to"]),
    "negative entry": (lambda d: d["reference"].__setitem__("1", [1.5, -0.5]), ["'1'", "negative"]),
    "wrong length": (lambda d: d["intervention"].__setitem__("", [0.2, 0.3, 0.5]), ["''", "3 entries"]),
    "history too long": (lambda d: d["reference"].__setitem__("0,1", [0.5, 0.5]), ["'0,1'", "length"]),
    "token out of range": (lambda d: d["reference"].__setitem__("2", [0.5, 0.5]), ["'2'", "outside"]),
    "missing key": (lambda d: d.pop("intervention"), ["'intervention'"]),
    "bad eos": (lambda d: d.__setitem__("eos", 5), ["'eos'"]),
    "bad horizon": (lambda d: d.__setitem__("horizon", 0), ["'horizon'"]),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_files_name_the_history_and_file(tmp_path, case):
    mutate, fragments = MALFORMED[case]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(_break(mutate)))
    with pytest.raises(ValueError) as err:
        load_system(path)
    message = str(err.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_valid_file_and_tolerance(tmp_path):
    data = _valid_file()
    data["reference"]["0"] = [0.25, 0.75 + 5e-10]  # within 1e-9
    system = system_from_dict(data)
    assert system.n_nodes == 3
    path = tmp_path / "not.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_system(path)
