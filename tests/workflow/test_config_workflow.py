"""The start-up checks through Snakemake itself: a bad config is refused when the workflow starts, whatever is
planned. Each dry run asks for one resolved model only (what a complete run leaves nothing to do for), so a check
that lived in an input function of a job not planned would let it pass ("Nothing to be done", exit 0).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from support.checkout import checkout_ignore

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
IGNORE = checkout_ignore(REPO)
TARGET = "results/smoke/models/tiny/provenance.json"  # config/smoke.yaml's output root

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return Path(shutil.copytree(REPO, tmp_path_factory.mktemp("cfg") / "wf", ignore=IGNORE))


def dry_run(work: Path, configfile: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", f"--configfile={configfile}", TARGET],
        check=False,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )


def variant(work: Path, name: str, edit) -> str:
    config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    config["results_owner"] = "config-tests"  # every variant edits one experiment (kvdiv.config.roots)
    edit(config)
    (work / name).write_text(yaml.safe_dump(config, sort_keys=False))
    return name


def test_the_target_plans_without_edits(work):
    proc = dry_run(work, variant(work, "ok.yaml", lambda c: None))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_duplicate_key_in_a_configfile_is_refused(work):
    text = (
        (REPO / "config/smoke.yaml")
        .read_text()
        .replace(
            "  recent_90: {press: StreamingLLMPress, compression_ratio: 0.1, n_sink: 0}\n",
            "  recent_90: {press: StreamingLLMPress, compression_ratio: 0.1, n_sink: 0}\n"
            "  snapkv_half: {press: SnapKVPress, compression_ratio: 0.9, window_size: 64}\n",
        )
    )
    (work / "dup.yaml").write_text(text)
    line = text.splitlines().index("  snapkv_half: {press: SnapKVPress, compression_ratio: 0.9, window_size: 64}") + 1
    proc = dry_run(work, "dup.yaml")
    assert proc.returncode != 0
    assert f"dup.yaml:{line}: duplicate key 'snapkv_half'" in proc.stdout + proc.stderr


# One case per kind of check, whatever is planned (a reference, a documents file, a press, the schema, names,
# planning cost); the other cases run in-process on the same functions (tests/test_config.py).
@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["analysis"].update(studies={"figure5": "nosuch"}),
            "analysis.studies.figure5: 'nosuch' is not a configured study",
        ),
        (
            lambda c: c["studies"]["retention50"].update(
                documents={"source": "jsonl", "path": "gone.jsonl", "rendered": False}
            ),
            "studies.retention50.documents.path: gone.jsonl does not exist",
        ),
        (lambda c: c["actions"].update(snapkv_90={"press": "ThinKPress"}), "ThinKPress cannot run in kvdiv"),
        (  # issue 41: SnapKV-512 at 50 % of a 704-token stratum keeps only window positions
            lambda c: (  # (config/smoke.yaml's snapkv_512 is the window reading, allowed degenerate there)
                c["actions"]["snapkv_512"].pop("allow_degenerate")
                and c["studies"]["retention50"].update(strata=[{"family": "ruler", "length": 704}])
            ),
            "studies.retention50: action 'snapkv_512' at stratum ruler_704 (704 entries compressed): SnapKVPress keeps "
            "352 entries, and 512 are pinned by its observation window of 512",
        ),
        (lambda c: c["analysis"].update(bootsrap=10), "'bootsrap' was unexpected"),
        (lambda c: c["studies"].update({"a" * 64: c["studies"].pop("retention90")}), "repeated 64 times"),
        (
            lambda c: c["studies"]["retention50"].update(documents_per_stratum=100000),
            "the config plans 200004 documents",
        ),
    ],
)
def test_bad_config_is_refused_at_start_up_whatever_is_planned(work, edit, message):
    proc = dry_run(work, variant(work, "bad.yaml", edit))
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert message in out, out[-3000:]
    assert "PeriodicWildcardError" not in out
