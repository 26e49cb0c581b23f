"""kvdiv: divergence timing and cumulative disagreement under KV-cache eviction.

Reproduces arXiv 2609.16617 (Luo & Yu, "Divergence Timing and Cumulative Disagreement under KV-Cache Eviction") as a
library plus a Snakemake workflow. One package per pipeline stage: :mod:`kvdiv.documents`, :mod:`kvdiv.models`,
:mod:`kvdiv.kernel`,
:mod:`kvdiv.trajectories`, :mod:`kvdiv.metrics`, :mod:`kvdiv.finite`, :mod:`kvdiv.analysis`, :mod:`kvdiv.outputs`,
:mod:`kvdiv.show`, :mod:`kvdiv.compare` (the trajectory job from Python: docs/python-api.md); shared by all:
:mod:`kvdiv.layout`, :mod:`kvdiv.names`, :mod:`kvdiv.estimands`, :mod:`kvdiv.seeds`, :mod:`kvdiv.io`,
:mod:`kvdiv.joblog`, :mod:`kvdiv.codehash`, :mod:`kvdiv.watchdog`, :mod:`kvdiv.cli`. The package map:
docs/internals.md#the-packages.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``kvdiv.compare`` on first use (docs/python-api.md). Imported with importlib, not an import statement:
    kvdiv.codehash counts a package's imports in the code of every rule below it."""
    if name == "compare":
        import importlib

        return importlib.import_module("kvdiv.compare").compare
    raise AttributeError(f"module 'kvdiv' has no attribute {name!r}")
