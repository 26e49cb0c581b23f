"""A trajectory job imports only what it uses: no Hugging Face ``datasets`` through kvpress's press modules
unless a press calls it (kvdiv.kernel.presses.lazy_datasets)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_fresh(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_the_job_path_does_not_import_datasets():
    """What workflow_scripts/trajectories.py imports, plus building the default config's presses (SnapKV,
    StreamingLLM, kvdiv's ProbabilisticPress) and every press class kvpress exports, leaves ``datasets`` out."""
    out = run_fresh("""
        import sys
        import kvdiv.documents, kvdiv.joblog, kvdiv.models.loading, kvdiv.trajectories.job, kvdiv.kernel.session
        from kvdiv.kernel.presses.registry import build_press, press_classes
        assert len(press_classes()) > 30 and "DuoAttentionPress" in press_classes()
        for spec in ({"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64},
                     {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
                     {"press": "ProbabilisticPress", "compression_ratio": 0.5}):
            build_press(spec)
        print("datasets" in sys.modules, "kvpress" in sys.modules)
    """)
    assert out.split() == ["False", "True"]


def test_a_press_that_calls_datasets_gets_the_real_module():
    """The placeholder kvpress's calibrating presses hold forwards to the real ``datasets.load_dataset``."""
    out = run_fresh("""
        import sys
        import kvdiv.kernel.presses.registry
        from kvpress.presses import duo_attention_press
        assert "datasets" not in sys.modules
        import datasets  # the real module (the placeholder is gone from sys.modules)
        assert hasattr(datasets, "Dataset") and not getattr(datasets, "__kvdiv_placeholder__", False)
        datasets.load_dataset = lambda *args, **kwargs: ("real", args, kwargs)
        print(duo_attention_press.load_dataset("kmfoda/booksum", split="train"))
    """)
    assert out.strip() == "('real', ('kmfoda/booksum',), {'split': 'train'})"


def test_kvpress_imports_without_datasets_and_a_press_that_needs_it_says_so():
    """Where ``datasets`` is missing (here: an import hook refuses it), kvpress still imports through kvdiv, and a
    calibrating press's load_dataset raises an ImportError that names the package."""
    out = run_fresh("""
        import sys

        class NoDatasets:
            def find_spec(self, name, path=None, target=None):
                if name == "datasets" or name.startswith("datasets."):
                    raise ModuleNotFoundError("No module named 'datasets'")
                return None

        sys.meta_path.insert(0, NoDatasets())
        import kvdiv.kernel.presses.registry  # imports kvpress
        from kvpress.presses import duo_attention_press
        try:
            duo_attention_press.load_dataset("kmfoda/booksum")
        except ImportError as err:
            print("refused:", err)
    """)
    assert out.startswith("refused: a kvpress press needs Hugging Face `datasets`") and "pip install datasets" in out
