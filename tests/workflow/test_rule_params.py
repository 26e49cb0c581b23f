"""Every rule param of every shipped config is a value Snakemake records between runs (a param it cannot record,
such as a dataclass, would change without rerunning its job: a stale result)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.checkout import checkout_ignore

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.workflow
def test_every_rule_param_of_the_shipped_configs_is_recorded(tmp_path):
    work = tmp_path / "repo"
    shutil.copytree(REPO, work, ignore=checkout_ignore(REPO))
    configs = sorted(str(p.relative_to(work)) for p in (work / "config").glob("*.yaml"))
    script = REPO / "tests/support/plan_params.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(work), *configs],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(found) == set(configs) and len(configs) >= 5, found
    assert all(not params for params in found.values()), found
