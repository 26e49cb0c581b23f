"""Snakemake script of rule gallery: a (study, model)'s cube -> its gallery page (kvdiv.show.gallery.write_gallery)."""

import logging

from kvdiv.joblog import job_log
from kvdiv.show.gallery import write_gallery

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    write_gallery(snakemake.input.cube, snakemake.output.html, models_dir=snakemake.params.models_dir)
    logging.info("wrote %s", snakemake.output.html)
