"""Compare two ``results/`` trees of kvdiv runs: what must be identical is, and what may differ is named.

    python tests/workflow/results_diff.py BEFORE/results AFTER/results [--strict-figures]

Strict (any difference fails):
- every Zarr store (per-document stores and cubes, ``*.zarr``): the same arrays, each with the same dtype, shape
  and values (read and verified with :func:`kvdiv.trajectories.store.read_store_arrays`), and the same root
  attributes except the run's wall times (``wall_time_s``, ``wall_time_total_s``, ``prefill_s``) and ``checksums``
  (digests of the values compared);
- every other file byte for byte: Parquet and their ``.sha256``, tables (CSV, Markdown, LaTeX), ``report.md``,
  documents (JSONL, JSON), finite-state system files, model weights and tokenizer files; a Parquet file whose
  bytes differ passes only if its frames are equal but for wall-time columns (``wall_s`` of
  ``finite_state/estimates.parquet``: the samplers' run time), and that is reported;
- the same set of those files on both sides.

Reported, not failed: files whose bytes record when or how long a run took (``provenance.json``'s ``resolved_at``, job
benchmarks ``benchmarks/**.tsv`` and job logs ``logs/**.log`` under any config's root), figures (PNG byte for byte, PDF
byte for byte but for matplotlib's ``/CreationDate``; listed when they differ, failed with ``--strict-figures``), and
Snakemake's ``.snakemake_timestamp``.

Skipped: the trajectory jobs' cache (``cache/`` under any config's root: kvdiv.trajectories.reuse), which no rule
outputs and which holds whatever earlier configs computed; its count is reported.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: Store attributes that record how long a run took, and the checksums of the values (compared themselves).
IGNORED_ATTRS = ("wall_time_s", "wall_time_total_s", "prefill_s", "checksums")
FIGURE_SUFFIXES = (".png", ".pdf")
#: Parquet columns that record how long a computation took (finite_state/estimates.parquet: each sampler's run).
WALL_TIME_COLUMNS = ("wall_s",)


@dataclass
class Comparison:
    """What was compared and what differed."""

    stores: int = 0
    arrays: int = 0
    files: int = 0
    figures: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        head = (
            f"{self.stores} stores ({self.arrays} arrays) value for value, {self.files} files byte for byte, "
            f"{self.figures} figures: " + ("identical" if self.identical else f"{len(self.failures)} DIFFERENCES")
        )
        return "\n".join([head, *(f"  DIFF {f}" for f in self.failures), *(f"  note {n}" for n in self.notes)])


def _cached(rel: str) -> bool:
    """Whether a path of a results tree lies in a config root's trajectory cache (not an output)."""
    return re.search(r"(^|/)cache/trajectories/", rel) is not None


def _stores(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.zarr")
        if p.is_dir() and (p / "zarr.json").is_file() and not _cached(str(p.relative_to(root)))
    )


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def compare_stores(a: Path, b: Path, rel: str, out: Comparison) -> None:
    """Arrays value for value and attributes but wall times of the stores ``a`` and ``b``."""
    from kvdiv.trajectories.store import read_store_arrays

    attrs_a, arrays_a = read_store_arrays(a)
    attrs_b, arrays_b = read_store_arrays(b)
    out.stores += 1
    if arrays_a.keys() != arrays_b.keys():
        out.failures.append(f"{rel}: arrays {sorted(set(arrays_a) ^ set(arrays_b))} on one side only")
    for name in sorted(arrays_a.keys() & arrays_b.keys()):
        out.arrays += 1
        if not _same_array(arrays_a[name], arrays_b[name]):
            out.failures.append(
                f"{rel}: array {name!r} differs ({arrays_a[name].dtype}{arrays_a[name].shape} vs "
                f"{arrays_b[name].dtype}{arrays_b[name].shape})"
            )
    keys = (attrs_a.keys() | attrs_b.keys()) - set(IGNORED_ATTRS)
    differing = sorted(k for k in keys if attrs_a.get(k) != attrs_b.get(k))
    if differing:
        out.failures.append(f"{rel}: attributes {differing} differ")


def _volatile(rel: str) -> str | None:
    """Why a file's bytes may differ between two identical runs (None: they may not)."""
    name = rel.rsplit("/", 1)[-1]
    if name == ".snakemake_timestamp":
        return "Snakemake's directory timestamp"
    parents = rel.split("/")[:-1]  # under the default root or a config's own (smoke/benchmarks/..., smoke/logs/...)
    if "benchmarks" in parents and rel.endswith(".tsv"):
        return "job benchmark (wall time, memory; named after its rule)"
    if "logs" in parents and rel.endswith(".log"):
        return "job log (times, paths and progress of the run that wrote it)"
    if name == "provenance.json":
        return "model provenance (resolved_at)"
    return None


def compare_results(a: str | Path, b: str | Path, strict_figures: bool = False) -> Comparison:
    """Compare the results trees ``a`` and ``b`` (module docstring)."""
    a, b = Path(a), Path(b)
    out = Comparison()
    stores_a = {str(p.relative_to(a)) for p in _stores(a)}
    stores_b = {str(p.relative_to(b)) for p in _stores(b)}
    for rel in sorted(stores_a ^ stores_b):
        out.failures.append(f"{rel}: store on one side only")
    for rel in sorted(stores_a & stores_b):
        compare_stores(a / rel, b / rel, rel, out)

    def files(root: Path, stores: set[str]) -> set[str]:
        return {
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file()
            and not _cached(str(p.relative_to(root)))
            and not any(str(p.relative_to(root)).startswith(s + "/") for s in stores)
        }

    files_a, files_b = files(a, stores_a), files(b, stores_b)
    for side, root in (("before", a), ("after", b)):
        cached = [p for p in root.rglob("*.zarr") if _cached(str(p.relative_to(root)))]
        if cached:
            out.notes.append(f"{side}: {len(cached)} trajectory cache pieces not compared (cache/: not an output)")
    for rel in sorted(files_a ^ files_b):
        why = _volatile(rel)
        (out.notes if why else out.failures).append(
            f"{rel}: only in {'before' if rel in files_a else 'after'}" + (f" ({why})" if why else "")
        )
    for rel in sorted(files_a & files_b):
        same = (a / rel).read_bytes() == (b / rel).read_bytes()
        why = _volatile(rel)
        if rel.endswith(FIGURE_SUFFIXES):
            out.figures += 1
            if not same and rel.endswith(".pdf") and _without_creation_date(a / rel) == _without_creation_date(b / rel):
                out.notes.append(f"{rel}: differs only in the PDF's /CreationDate")
            elif not same:
                (out.failures if strict_figures else out.notes).append(f"{rel}: figure bytes differ")
        elif why:
            if not same:
                out.notes.append(f"{rel}: differs ({why})")
                if rel.endswith("provenance.json"):
                    pa, pb = (json.loads((r / rel).read_text()) for r in (a, b))
                    other = sorted(k for k in pa.keys() | pb.keys() if pa.get(k) != pb.get(k) and k != "resolved_at")
                    if other:
                        out.failures.append(f"{rel}: provenance keys {other} differ")
        else:
            out.files += 1
            if not same and not _same_but_wall_times(a / rel, b / rel, rel, out):
                out.failures.append(f"{rel}: bytes differ")
    return out


def _without_creation_date(path: Path) -> bytes:
    """A PDF's bytes without its ``/CreationDate`` (matplotlib writes the time of saving)."""
    return re.sub(rb"/CreationDate \(D:[^)]*\)", b"", path.read_bytes())


def _same_but_wall_times(a: Path, b: Path, rel: str, out: Comparison) -> bool:
    """Whether two Parquet files (or their checksum files) hold the same frame but for the wall-time columns."""
    import polars as pl

    table = rel.removesuffix(".sha256")
    if not table.endswith(".parquet"):
        return False
    fa, fb = pl.read_parquet(a.parent / Path(table).name), pl.read_parquet(b.parent / Path(table).name)
    timed = [c for c in WALL_TIME_COLUMNS if c in fa.columns]
    if not timed or fa.columns != fb.columns or fa.schema != fb.schema or not fa.drop(timed).equals(fb.drop(timed)):
        return False
    out.notes.append(f"{rel}: differs only in the wall-time column(s) {timed}; every other column is equal")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--strict-figures", action="store_true", help="figures must be byte-identical too")
    args = parser.parse_args(argv)
    result = compare_results(args.before, args.after, args.strict_figures)
    print(result.summary())
    return 0 if result.identical else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's kvdiv
    sys.exit(main())
