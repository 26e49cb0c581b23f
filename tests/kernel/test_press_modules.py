"""kvdiv.kernel.presses.registry.load_press_modules and kvdiv.kernel.presses.press_files: a user's press file makes its
presses
nameable (validated like kvpress's, wrappable); errors name the file (and class); which files a set of actions uses.
Through the workflow: tests/workflow/test_press_modules_workflow.py."""

from __future__ import annotations

import pytest

from kvdiv.kernel.presses.press_files import press_module_classes, press_module_files
from kvdiv.kernel.presses.registry import USER_PRESSES, build_press, describe, load_press_modules
from kvdiv.settings import generation

PRESS = """
from dataclasses import dataclass

from kvpress import ScorerPress


@dataclass
class {name}(ScorerPress):
    compression_ratio: float = 0.0
    window_size: int = 4

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return -keys.norm(dim=-1)
"""


@pytest.fixture
def user_presses(monkeypatch):
    """USER_PRESSES restored after the test (the registry is process-wide)."""
    monkeypatch.setattr("kvdiv.kernel.presses.registry.USER_PRESSES", dict(USER_PRESSES))
    import kvdiv.kernel.presses.registry as registry

    return registry.USER_PRESSES


def test_own_press_is_nameable_validated_and_wrappable(tmp_path, user_presses):
    path = tmp_path / "mine.py"
    path.write_text(PRESS.format(name="MinePress"))
    assert list(load_press_modules([path])) == ["MinePress"]
    press = build_press({"press": "AdaKVPress", "wraps": {"press": "MinePress", "compression_ratio": 0.5}})
    assert type(press.press).__name__ == "MinePress" and describe({"press": "MinePress"})["press"] == "MinePress"
    with pytest.raises(ValueError, match=r"'window_size' = 0 is out of range"):
        build_press({"press": "MinePress", "window_size": 0})
    with pytest.raises(ValueError, match=r"'window_size' must be an integer"):
        build_press({"press": "MinePress", "window_size": 1.5})
    assert load_press_modules([path]) == {"MinePress": user_presses["MinePress"][0]}  # loaded once, same class


@pytest.mark.parametrize(
    "source, message",
    [
        (PRESS.format(name="SnapKVPress"), r"bad\.py' defines class 'SnapKVPress', which clashes with kvpress's"),
        (PRESS.format(name="ProbabilisticPress"), r"defines class 'ProbabilisticPress', which clashes with kvdiv's"),
        ("import not_a_module_anywhere\n", r"importing '.*bad\.py' failed: ModuleNotFoundError"),
        ("raise RuntimeError('boom')\n", r"importing '.*bad\.py' failed: RuntimeError: boom"),
        (PRESS.format(name="NoDataclass").replace("@dataclass\n", ""), r"press 'NoDataclass' must be a @dataclass"),
        (None, r"no such file '.*bad\.py'"),
    ],
)
def test_bad_files_are_errors_naming_the_file(tmp_path, user_presses, source, message):
    path = tmp_path / "bad.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(ValueError, match=message):
        load_press_modules([path])


def test_two_files_defining_one_class_clash(tmp_path, user_presses):
    (tmp_path / "a.py").write_text(PRESS.format(name="TwicePress"))
    (tmp_path / "b.py").write_text(PRESS.format(name="TwicePress"))
    with pytest.raises(ValueError, match=r"b\.py' defines class 'TwicePress', which '.*a\.py' defines too"):
        load_press_modules([tmp_path / "a.py", tmp_path / "b.py"])


def test_files_an_action_set_uses_are_read_without_running_them(tmp_path):
    (tmp_path / "a.py").write_text("raise SystemExit('not run')\nclass APress: pass\nclass Helper: pass\n")
    (tmp_path / "b.py").write_text("class BPress: pass\n")
    files = [str(tmp_path / "a.py"), str(tmp_path / "b.py")]
    assert press_module_classes(files[0]) == ["APress", "Helper"]
    wrapped = {"x": {"press": "AdaKVPress", "wraps": {"press": "APress"}}}
    assert press_module_files(wrapped, files) == [files[0]]
    assert press_module_files({"y": {"press": "BPress"}, "z": {"press": "KnormPress"}}, files) == [files[1]]
    assert press_module_files({"z": {"press": "KnormPress"}}, files) == []
    (tmp_path / "c.py").write_text("def broken(:\n")
    with pytest.raises(ValueError, match=r"c\.py' is not valid Python"):
        press_module_classes(tmp_path / "c.py")


BAD_SCORES = """
from dataclasses import dataclass

import torch
from kvpress import ScorerPress


@dataclass
class BadScoresPress(ScorerPress):
    compression_ratio: float = 0.0
    kind: str = "nan"

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        scores = -keys.norm(dim=-1)
        if self.kind == "nan" and module.layer_idx == 1:
            scores[0, 0, 3] = float("nan")
        if self.kind == "constant":
            scores = torch.ones_like(scores)
        if self.kind == "short":
            scores = scores[..., :-4]
        return scores
"""


@pytest.mark.parametrize(
    "kind, message",
    [
        ("nan", r"layer 1: score\(\) returned NaN scores \(1 of"),
        ("constant", r"layer 0: score\(\) returned scores all equal \(1\) in KV head 0: torch's tie-break"),
        ("short", r"layer 0: score\(\) returned scores of shape \[1, 2, 44\], not .* = \[1, 2, 48\] \(shorter"),
        ("fine", None),
    ],
)
def test_own_scores_are_checked_on_their_first_call(tmp_path, user_presses, tiny_llama, kind, message):
    """NaN, constant or short scores used to run (kvpress's topk then decided by NaN order or tie-break, and a short
    score row never keeps the last entries); now an error naming the press, its file and the layer, wrapped or not."""
    import torch

    from kvdiv.kernel.session import KernelSession

    path = tmp_path / "bad_scores.py"
    path.write_text(BAD_SCORES)
    load_press_modules([path])
    ids = torch.arange(20, 68)
    for spec in (
        {"press": "BadScoresPress", "compression_ratio": 0.5, "kind": kind},
        {"press": "AdaKVPress", "wraps": {"press": "BadScoresPress", "compression_ratio": 0.5, "kind": kind}},
    ):
        if message is None:
            session = KernelSession(tiny_llama, ids, {"a": spec}, generation(horizon=2))
            assert session._kept_lengths["a"] == [24, 24] or spec["press"] == "AdaKVPress"
            continue
        with pytest.raises(ValueError, match=rf"own press BadScoresPress \({path}\), {message}"):
            KernelSession(tiny_llama, ids, {"a": spec}, generation(horizon=2))
