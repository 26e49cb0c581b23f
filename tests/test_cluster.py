"""kvdiv.cluster: a trajectory job on a GPU asks for one; on a CPU it asks for no GPU and no GPU partition."""

from kvdiv.cluster import GPU_RESOURCES, trajectory_resources

GIVEN = {
    "slurm_partition": "gpu",
    "gpu": 1,
    "gpu_model": "a100",
    "gres": "gpu:a100:1",
    "cpus_per_gpu": 4,
    "mem_mb": 64000,
    "cpus_per_task": 4,
    "runtime": 120,
}


def test_gpu_model_keeps_everything_and_asks_one_gpu():
    assert trajectory_resources(GIVEN, on_gpu=True) == GIVEN
    assert trajectory_resources({"mem_mb": 1000}, on_gpu=True) == {"mem_mb": 1000, "gpu": 1}


def test_cpu_model_drops_gpu_resources_and_the_partition():
    resources = trajectory_resources(GIVEN, on_gpu=False)
    assert resources == {"mem_mb": 64000, "cpus_per_task": 4, "runtime": 120, "gpu": 0}
    assert not set(GPU_RESOURCES) - {"gpu"} & set(resources)
    assert trajectory_resources({}, on_gpu=False) == {"gpu": 0}
