"""Snakemake script of rule `cube`: a (study, model)'s per-document stores -> one cube store.

Each store is verified as it is read (kvdiv.trajectories.store.read_store_arrays): an incomplete or corrupt store stops
the job with an error naming the store and the array.
"""

import logging

from kvdiv.joblog import job_log
from kvdiv.trajectories.store import build_cube

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    wc = snakemake.wildcards
    logging.info("building the cube of %s/%s from %d stores", wc.study, wc.model, len(snakemake.input.stores))
    build_cube(wc.study, wc.model, list(snakemake.input.stores), snakemake.output[0])
    logging.info("wrote %s", snakemake.output[0])
