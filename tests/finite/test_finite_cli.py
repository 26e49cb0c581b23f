"""``kvdiv finite exact|sample|suite``: JSON output and errors."""

from __future__ import annotations

import json

import pytest
from finite_helpers import random_system

from kvdiv.cli import main
from kvdiv.finite.exact import enumerate_exact
from kvdiv.finite.suite import suite_specs
from kvdiv.finite.system import load_system, save_system

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
    path.write_text(
        json.dumps({"vocab": 2, "horizon": 1, "reference": {"": [0.5, 0.6]}, "intervention": {"": [0.5, 0.5]}})
    )
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


# ------------------------------------------------------------------------- hostile system files


def two_step_file(tmp_path, reference: dict | None = None, raw: str | None = None, **top):
    """A V = 2, H = 2 system file (every history present), with ``reference`` rows replaced."""
    rows = {"": [0.5, 0.5], "0": [0.5, 0.5], "1": [0.25, 0.75]}
    data = {"vocab": 2, "horizon": 2, "reference": {**rows, **(reference or {})}, "intervention": rows, **top}
    path = tmp_path / "system.json"
    path.write_text(raw if raw is not None else json.dumps(data))
    return path


def test_huge_horizon_is_refused_before_counting(capsys, tmp_path):
    """V = 2, H = 10^9 has ~2^(10^9) histories: refused at once, not after counting them (which would hang)."""
    import subprocess
    import sys

    path = two_step_file(tmp_path, horizon=10**9)
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "kvdiv.cli", "finite", "exact", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=repo,
    )
    assert proc.returncode == 2 and "too many to enumerate" in proc.stderr and proc.stderr.count("\n") == 1
    path = two_step_file(tmp_path, vocab=1, horizon=10**12)
    code, _, err = run_cli(capsys, "finite", "exact", str(path))
    assert code == 2 and "too many to enumerate" in err


@pytest.mark.parametrize("key", ["0, 1", "00", "-0", "+1", " 1", "1,", "0x1"])
def test_history_keys_must_be_canonical(capsys, tmp_path, key):
    """A non-canonical key would silently overwrite the row of the history it parses to."""
    path = two_step_file(tmp_path, {key: [0.9, 0.1]})
    code, _, err = run_cli(capsys, "finite", "exact", str(path))
    assert code == 2 and f"history key {key!r}" in err and "canonical" in err


def test_a_key_given_twice_is_refused(capsys, tmp_path):
    text = json.dumps({"vocab": 1, "horizon": 1, "reference": {"": [1.0]}, "intervention": {"": [1.0]}})
    path = two_step_file(tmp_path, raw=text.replace('{"": [1.0]}}', '{"": [1.0], "": [1.0]}}'))
    code, _, err = run_cli(capsys, "finite", "exact", str(path))
    assert code == 2 and "key '' appears twice" in err


@pytest.mark.parametrize("row", [["0.5", "0.5"], [True, False], [0.5, None]])
def test_probabilities_must_be_numbers(capsys, tmp_path, row):
    path = two_step_file(tmp_path, {"0": row})
    code, _, err = run_cli(capsys, "finite", "exact", str(path))
    assert code == 2 and "history '0' has an entry" in err and "not a number" in err
