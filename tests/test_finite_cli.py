"""``kvdiv finite exact|sample|suite``: JSON output and errors."""

from __future__ import annotations

import json

import pytest
from finite_helpers import random_system

from kvdiv.cli import main
from kvdiv.finite import enumerate_exact, load_system, save_system
from kvdiv.finite_suite import suite_specs

EXACT_KEYS = ["R_H", "O_H", "Pi_H", "E_H", "C_H", "P_diverge"]


@pytest.fixture()
def system_file(tmp_path):
    system = random_system(3, 4, seed=31, mix=0.2, eos=2)
    path = tmp_path / "system.json"
    save_system(system, path)
    return path


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_exact_prints_one_json_object(capsys, system_file):
    code, out, _ = run_cli(capsys, "finite", "exact", str(system_file))
    assert code == 0
    data = json.loads(out)
    assert list(data) == EXACT_KEYS
    exact = enumerate_exact(load_system(system_file))
    assert data["R_H"] == pytest.approx(exact.risk, abs=1e-15)
    assert data["R_H"] == pytest.approx(data["O_H"] + data["Pi_H"], abs=1e-14)

    code, out, _ = run_cli(capsys, "finite", "exact", str(system_file), "--window", "1")
    data = json.loads(out)
    assert list(data) == EXACT_KEYS + ["R_L", "B_L"]
    assert data["R_L"] == pytest.approx(exact.risk_window(1))
    assert data["B_L"] == pytest.approx(exact.capacity(1))


@pytest.mark.parametrize("method", ["naive", "swrb"])
def test_sample_prints_estimates(capsys, system_file, method):
    argv = ["finite", "sample", str(system_file), "--method", method, "--replicates", "4000", "--seed", "5"]
    code, out, _ = run_cli(capsys, *argv, "--window", "2")
    assert code == 0
    data = json.loads(out)
    for part in ("estimate", "stderr", "variance"):
        assert set(EXACT_KEYS + ["R_L", "B_L"]) <= set(data[part])
    horizon = 4
    if method == "naive":
        assert data["pair_evaluations"] == horizon
    else:
        assert horizon <= data["pair_evaluations"] <= 2 * horizon - 1
    exact = enumerate_exact(load_system(system_file))
    assert abs(data["estimate"]["R_H"] - exact.risk) <= 4.5 * data["stderr"]["R_H"]
    assert data["enclosure"]["lower"] <= data["enclosure"]["upper"]
    # same seed, same output; no window, no window keys
    _, again, _ = run_cli(capsys, *argv, "--window", "2")
    assert json.loads(again)["estimate"] == data["estimate"]
    _, plain, _ = run_cli(capsys, *argv)
    assert "R_L" not in json.loads(plain)["estimate"]


def test_malformed_file_is_a_clean_error(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"vocab": 2, "horizon": 1, "reference": {"": [0.5, 0.6]}, "intervention": {"": [0.5, 0.5]}}))
    code, out, err = run_cli(capsys, "finite", "exact", str(path))
    assert code == 2 and out == ""
    assert "bad.json" in err and "''" in err and "sums to" in err


def test_suite_writes_every_system(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "finite", "suite", str(tmp_path / "suite"))
    assert code == 0
    files = sorted((tmp_path / "suite").glob("*.json"))
    assert len(files) == 24 == len(out.splitlines())
    assert {f.stem for f in files} == {s.name for s in suite_specs({})}
    exact = enumerate_exact(load_system(files[0]))
    assert 0 < exact.p_diverge < 1
