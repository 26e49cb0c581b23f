"""kvdiv: divergence timing and cumulative disagreement under KV-cache eviction.

Reproduces arXiv 2609.16617 (Luo & Yu, "Divergence Timing and Cumulative Disagreement under KV-Cache
Eviction") as a library plus a Snakemake workflow. One package per pipeline stage:

- :mod:`kvdiv.documents` — offline RULER/HELMET-style prompts at token-exact lengths, and their rendering;
- :mod:`kvdiv.llm` — models (sources, loading, tokenizers), eviction presses, the kernel session P/Q;
- :mod:`kvdiv.trajectories` — the coupled samplers (complete, swrb), the trajectory job (a batch of documents), stores and cubes;
- :mod:`kvdiv.metrics` — per-replicate metrics and profiles over a cube;
- :mod:`kvdiv.finite` — the finite-state study (exact enumeration, naive and SWRB samplers, Figure 4's suite);
- :mod:`kvdiv.analysis` — the cluster-bootstrap analysis behind Figures 5–7 and Tables 2–3 (a registry of items);
- :mod:`kvdiv.outputs` — figures, tables and the report;
- :mod:`kvdiv.show` — a pair of continuations decoded side by side (terminal, HTML, a gallery per action);
- :mod:`kvdiv.compare` — ``kvdiv.compare(model, tokenizer, prompts, actions)``: the trajectory job from Python
  (docs/python-api.md).

Shared by all: :mod:`kvdiv.layout` (result paths, stratum names, document ids), :mod:`kvdiv.names` (which names
are allowed), :mod:`kvdiv.estimands` (TV, the SWRB estimators, the enclosure of R_H and the variance–cost aggregates, written once), :mod:`kvdiv.seeds`, :mod:`kvdiv.io`
(atomic writes, checksummed Parquet), :mod:`kvdiv.joblog` (workflow job logs), :mod:`kvdiv.codehash` (each rule's
code hash), :mod:`kvdiv.cli` (the ``kvdiv`` command) and :mod:`kvdiv.testing` (toy kernels for tests).
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``kvdiv.compare`` on first use (docs/python-api.md). Imported with importlib, not an import statement:
    kvdiv.codehash counts a package's imports in the code of every rule below it."""
    if name == "compare":
        import importlib

        return importlib.import_module("kvdiv.compare").compare
    raise AttributeError(f"module 'kvdiv' has no attribute {name!r}")
