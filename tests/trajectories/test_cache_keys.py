"""The trajectory cache's key covers everything a result depends on (issue 39, item 1): editing one line of an own
press file, or of a module of the user's that the file imports, changes the trajectory jobs' code hash (their
``code`` param, part of every cached piece's key), so a rerun computes with the edited press and equals a fresh run
instead of reusing the pieces of the old one. Through snakemake: tests/workflow/test_press_modules_workflow.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import yaml

from kvdiv.config import load
from kvdiv.config.lookups import Lookups
from kvdiv.kernel.presses.press_files import own_modules, press_files_hash
from kvdiv.kernel.presses.registry import USER_PRESSES, load_press_modules
from kvdiv.layout import Layout
from kvdiv.settings import generation
from kvdiv.trajectories.job import run_documents
from kvdiv.trajectories.reuse import TrajectoryCache, piece_key
from kvdiv.trajectories.store import read_document_store
from support.job_documents import record

PRESS = """
from dataclasses import dataclass

from kvpress import ScorerPress
{imports}

@dataclass
class EditedPress(ScorerPress):
    compression_ratio: float = 0.0

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return {sign}keys.norm(dim=-1)
"""
CONFIG = {
    "press_modules": ["presses/mine.py"],
    "models": {"tiny": {"source": "random", "architecture": "llama", "tokenizer": "bytes", "device": "cpu"}},
    "actions": {
        "mine": {"press": "EditedPress", "compression_ratio": 0.5},
        "knorm": {"press": "KnormPress", "compression_ratio": 0.5},
    },
    "studies": {
        "own": {
            "seed": 1,
            "actions": ["mine"],
            "documents_per_stratum": 1,
            "strata": [{"family": "ruler", "length": 512}],
        },
        "plain": {
            "seed": 2,
            "actions": ["knorm"],
            "documents_per_stratum": 1,
            "strata": [{"family": "ruler", "length": 512}],
        },
    },
    "analysis": {"studies": {"accuracy": "own"}},
}


@pytest.fixture
def user_presses(monkeypatch):
    monkeypatch.setattr("kvdiv.kernel.presses.registry.USER_PRESSES", dict(USER_PRESSES))
    import kvdiv.kernel.presses.registry as registry

    return registry.USER_PRESSES


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A working directory with the config and presses/mine.py (importing presses/helper.py); returns a function
    giving the study's trajectory code hash of the files as they are now (a fresh planning)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "presses").mkdir()
    (tmp_path / "presses/helper.py").write_text("SCALE = 1.0\n")
    (tmp_path / "presses/mine.py").write_text(PRESS.format(imports="from helper import SCALE", sign=""))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CONFIG))

    def code(study: str = "own") -> str:
        config = load(tmp_path / "c.yaml", basedir=tmp_path)
        from pathlib import Path

        return Lookups(config, Path(__file__).resolve().parents[2], Layout(config["results"])).trajectory_code(study)

    return code


def test_one_edited_line_of_a_press_file_or_of_its_own_module_changes_the_code(project, tmp_path):
    before, plain = project(), project("plain")
    mine = tmp_path / "presses/mine.py"
    mine.write_text(mine.read_text().replace("keys.norm(dim=-1)", "keys.norm(dim=-1) * 2"))
    edited = project()
    assert edited != before and project("plain") == plain  # a study not naming the press keeps its code
    (tmp_path / "presses/helper.py").write_text("SCALE = 2.0\n")
    assert project() != edited
    assert [p.name for p in own_modules(mine, [tmp_path])] == ["helper.py"]


def test_own_modules_follow_imports_but_not_kvdiv_nor_installed_packages(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("from .inner import X\n")
    (tmp_path / "pkg/inner.py").write_text("import deep\nX = 1\n")
    (tmp_path / "deep.py").write_text("import numpy\n")
    (tmp_path / "kvdiv.py").write_text("")  # shadowing names: kvdiv's modules are the code hash's
    main = tmp_path / "p.py"
    main.write_text("import torch\nimport kvdiv.io\nfrom pkg import X\n")
    assert {p.relative_to(tmp_path).as_posix() for p in own_modules(main, [tmp_path])} == {
        "pkg/__init__.py",
        "pkg/inner.py",
        "deep.py",
    }
    before = press_files_hash([main], [tmp_path])
    (tmp_path / "deep.py").write_text("import numpy  # edited\n")
    assert press_files_hash([main], [tmp_path]) != before


def test_the_piece_key_names_the_kernel_packages_versions():
    from kvdiv.trajectories import reuse

    key = dict(document={}, prompt_ids=[1, 2], model={}, generation={}, action={}, code="c")
    assert set(reuse.software()) == {"torch", "transformers", "kvpress", "numpy"}
    assert piece_key(**key) != piece_key(**{**key, "code": "d"})


def _import_edited(path, user_presses, monkeypatch):
    """The press class of ``path`` as the file is now (a trajectory job is a fresh process; here the module loaded
    before is forgotten)."""
    for name in [n for n in sys.modules if n.startswith("kvdiv_press_modules.mine_")]:
        monkeypatch.delitem(sys.modules, name)
    user_presses.pop("EditedPress", None)
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.delitem(sys.modules, "helper", raising=False)
    return load_press_modules([path])["EditedPress"]


def test_a_rerun_after_an_edit_equals_a_fresh_run(tiny_llama, project, tmp_path, user_presses, monkeypatch):
    """Run with the cache, edit one line of the press (keep the smallest norms instead of the largest), rerun with
    the cache as the workflow would (new code hash): the stores equal a fresh run's of the edited press, and differ
    from the pre-edit ones. With a key blind to the file's bytes the rerun reused the stale pieces."""
    settings = generation(master_seed=3, study_seed=2, horizon=8, replicates=2, temperature=2.0)
    docs = [record(0), record(1)]
    mine = tmp_path / "presses/mine.py"
    cache = TrajectoryCache(tmp_path / "cache")

    def run(code, out, use_cache=True):
        press = _import_edited(mine, user_presses, monkeypatch)
        actions = {"mine": press(compression_ratio=0.5)}
        outs = [tmp_path / f"{out}{d}.zarr" for d in range(len(docs))]
        cached = cache if use_cache else None
        return run_documents(tiny_llama, docs, actions, outs, settings, progress=False, cache=cached, code=code)

    first = run(project(), "first")
    mine.write_text(mine.read_text().replace("return keys.norm", "return -keys.norm"))
    rerun = run(project(), "rerun")
    fresh = run("", "fresh", use_cache=False)
    for a, b, old in zip(rerun, fresh, first):
        ya, yb, yold = (read_document_store(p)[1]["mine"]["tv"] for p in (a, b, old))
        np.testing.assert_array_equal(ya, yb)
        assert not np.array_equal(ya, yold)
