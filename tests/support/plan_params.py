"""Run as a script in a checkout: plan each config given (Snakemake's API, nothing executed) and print, as JSON,
every (rule, param, type) whose value Snakemake cannot record between runs (its persistence stores only builtin
values' reprs: a change of any other param would rerun nothing)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.persistence import UNREPRESENTABLE
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings


def unrecorded_params(repo: Path, configfile: Path) -> list[list[str]]:
    with SnakemakeApi(OutputSettings()) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=2),
            config_settings=ConfigSettings(configfiles=[configfile]),
            storage_settings=StorageSettings(),
            snakefile=repo / "Snakefile",
            workdir=repo,
        )
        workflow = workflow_api.dag(DAGSettings()).workflow_api._workflow
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        found = set()
        for job in workflow.dag.jobs:
            for name, value in job.params.items():
                if workflow.persistence._serialize_param(value) is UNREPRESENTABLE:
                    found.add((job.rule.name, name, type(value).__name__))
        return sorted(map(list, found))


if __name__ == "__main__":
    repo = Path(sys.argv[1]).resolve()
    print(json.dumps({config: unrecorded_params(repo, repo / config) for config in sys.argv[2:]}))
