"""Snakemake script of rule `cube`: a (study, model)'s per-document stores -> one cube store."""

import logging
import sys

from kvdiv.store import build_cube

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")

wc = snakemake.wildcards  # noqa: F821
logging.info("building the cube of %s/%s from %d stores", wc.study, wc.model, len(snakemake.input.stores))  # noqa: F821
build_cube(wc.study, wc.model, list(snakemake.input.stores), snakemake.output[0])  # noqa: F821
logging.info("wrote %s", snakemake.output[0])  # noqa: F821
