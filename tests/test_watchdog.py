"""Hangs in the user's code end with an error naming it (issue 39, item 4): a press file whose import never returns
stops the start-up check (kvdiv.config.action_check) within ``time_budget.press_import``, naming the file; a press
whose ``score()`` never returns ends the trajectory job within ``time_budget.trajectory_job``, naming the press, the
action and the document (kvdiv.watchdog)."""

from __future__ import annotations

import time

import pytest

from kvdiv.config.action_check import check_in_subprocess
from kvdiv.config.files import ConfigError
from kvdiv.kernel.presses.registry import USER_PRESSES, load_press_modules
from kvdiv.trajectories.job import run_documents
from kvdiv.settings import generation
from kvdiv.watchdog import BudgetExceeded, describe, doing, now, time_budget
from support.job_documents import record

HANGING_SCORE = """
import time
from dataclasses import dataclass

from kvpress import ScorerPress


@dataclass
class StuckPress(ScorerPress):
    compression_ratio: float = 0.0

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        time.sleep(10**6)
"""


def test_doing_nests_and_restores():
    with doing(document="d1", phase="prefill"):
        with doing(action="a", press="KnormPress", layer=1):
            assert describe(now()) == "press KnormPress of action 'a' (layer 1) on document 'd1' (prefill)"
        assert now() == {"document": "d1", "phase": "prefill"}
    assert now() == {}


def test_a_block_past_its_budget_raises_naming_what_it_was_doing(tmp_path):
    cleaned = []
    start = time.perf_counter()
    with pytest.raises(BudgetExceeded, match=r"job x ran past its wall-time budget of 0\.5 s \(k\) while running "):
        with time_budget(0.5, "job x", "k"):
            try:
                with doing(action="a", document="d"):
                    time.sleep(60)
            finally:
                cleaned.append(True)
    assert cleaned == [True] and time.perf_counter() - start < 10
    with time_budget(None, "job x", "k"):  # no budget
        pass


def test_a_score_that_never_returns_ends_the_job_naming_press_action_document(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setattr("kvdiv.kernel.presses.registry.USER_PRESSES", dict(USER_PRESSES))
    (tmp_path / "stuck.py").write_text(HANGING_SCORE)
    stuck = load_press_modules([tmp_path / "stuck.py"])["StuckPress"]
    actions = {"knorm": {"press": "KnormPress", "compression_ratio": 0.5}, "mine": stuck(compression_ratio=0.5)}
    with pytest.raises(BudgetExceeded) as err:
        with time_budget(3, "trajectory job t", "time_budget.trajectory_job"):
            run_documents(tiny_llama, [record(0)], actions, [tmp_path / "s.zarr"], generation(horizon=4, replicates=1))
    message = str(err.value)
    assert "time_budget.trajectory_job" in message and "press StuckPress of action 'mine'" in message, message
    assert "on document 'st-ruler_64-0000' (prefill)" in message, message
    assert not (tmp_path / "s.zarr").exists()


def test_a_press_file_whose_import_never_returns_is_named_at_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(10**6)\n")
    (tmp_path / "exits.py").write_text("raise SystemExit(3)\n")
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"press_modules: importing 'hangs\.py' did not finish within 2 s"):
        check_in_subprocess({}, ["hangs.py"], 2)
    assert time.perf_counter() - start < 120
    with pytest.raises(ConfigError, match=r"press_modules: importing 'exits\.py': SystemExit: 3"):
        check_in_subprocess({}, ["exits.py"], 60)
