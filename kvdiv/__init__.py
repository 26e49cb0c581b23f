"""kvdiv: divergence timing and cumulative disagreement under KV-cache eviction.

Reproduces arXiv 2609.16617 (Luo & Yu, "Divergence Timing and Cumulative Disagreement under KV-Cache
Eviction") as a library plus a Snakemake workflow. One package per pipeline stage: :mod:`kvdiv.documents`,
:mod:`kvdiv.llm`, :mod:`kvdiv.trajectories`, :mod:`kvdiv.metrics`, :mod:`kvdiv.finite`, :mod:`kvdiv.analysis`,
:mod:`kvdiv.outputs`, :mod:`kvdiv.show`; shared by all: :mod:`kvdiv.layout`, :mod:`kvdiv.names`,
:mod:`kvdiv.estimands`, :mod:`kvdiv.seeds`, :mod:`kvdiv.io`, :mod:`kvdiv.joblog`, :mod:`kvdiv.codehash`,
:mod:`kvdiv.cli` and :mod:`kvdiv.testing`. The package map: docs/internals.md#the-packages.
"""

__version__ = "0.1.0"
