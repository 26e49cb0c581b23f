"""Cluster (SLURM) resources of workflow jobs: what a trajectory batch job asks the scheduler for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Resources of snakemake-executor-plugin-slurm that ask for a GPU (``--gpus``, ``--gres``, ``--cpus-per-gpu``, ...).
GPU_RESOURCES = ("gpu", "gpu_model", "gpu_manufacturer", "gres", "cpus_per_gpu", "tasks_per_gpu")


def trajectory_resources(given: Mapping[str, Any], on_gpu: bool) -> dict[str, Any]:
    """The resources of one trajectory batch job, from those ``given`` for rule ``trajectories`` (a profile's
    set-resources): on a GPU, ``given`` with ``gpu=1``; on a CPU, ``given`` without its GPU resources and without
    its ``slurm_partition`` (a GPU partition, in a GPU profile: the job goes to the default-resources' partition),
    with ``gpu=0``."""
    if on_gpu:
        return {**given, "gpu": 1}
    kept = {name: value for name, value in given.items() if name not in GPU_RESOURCES and name != "slurm_partition"}
    return {**kept, "gpu": 0}
