"""kvdiv: divergence timing and cumulative disagreement under KV-cache eviction.

Reproduces arXiv 2609.16617 (Luo & Yu, "Divergence Timing and Cumulative Disagreement under
KV-Cache Eviction") as a library plus a Snakemake workflow.
"""

__version__ = "0.1.0"
