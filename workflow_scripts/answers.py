"""Snakemake script of rule answers: a cube + its study's documents -> every continuation scored
(kvdiv.trajectories.answers.write_answers)."""

from kvdiv.joblog import job_log
from kvdiv.trajectories.answers import write_answers

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    write_answers(
        snakemake.input.cube,
        list(snakemake.input.documents),
        snakemake.output.answers,
        model=snakemake.wildcards.model,
        spec=dict(snakemake.params.spec),
        models_dir=snakemake.params.models_dir,
    )
