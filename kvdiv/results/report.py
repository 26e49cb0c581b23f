"""``results/report.md``: every headline number of arXiv 2609.16617 §5 beside the paper's reported value.

Our numbers come from the analysis tables of :mod:`kvdiv.analysis` (bootstrap intervals over documents); after the
claims and the comparison of settings, the report walks the registry of results (:mod:`kvdiv.results.registry`),
one section per result built, each written by the result's own module. The paper's values and setting come from
``kvdiv/data/paper_reported_values.yaml`` (shipped with the package), the only copy kvdiv keeps. Each row says
which of our models and how many documents produced it, and the report opens with where this run's
setting differs from the paper's (models, lengths, document counts, horizon, replicates).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import polars as pl
import yaml

from kvdiv.environment import describe as describe_environment
from kvdiv.results.claim_sources import Inputs
from kvdiv.analysis.verdicts import TOO_FEW, min_documents
from kvdiv.results.claims import claims_markdown, claims_table, verdict_counts
from kvdiv.analysis.inputs import contrast_name
from kvdiv.io import atomic_path, read_parquet
from kvdiv.layout import parse_stratum
from kvdiv.outputs.report_cells import SectionContext, read_text, relative
from kvdiv.results.registry import read_numbers, results

#: The paper's reported values and setting, shipped with the package (the only copy kvdiv keeps).
PAPER_VALUES = "data/paper_reported_values.yaml"
#: Kinds of item whose analysis tables are Parquet files (rule ``analysis``); a ``table`` item's are its numbers CSV.
PARQUET_KINDS = ("figure", "section")


def paper_values() -> dict:
    """The paper's reported values (package data :data:`PAPER_VALUES`)."""
    return yaml.safe_load(resources.files("kvdiv").joinpath(PAPER_VALUES).read_text(encoding="utf-8"))


def _paper_actions(study: str, setting: Mapping, paper: Mapping) -> str:
    """The paper's actions of the study a run's ``study`` stands for (the one feeding Figure 7 is its 90 % study, the
    one feeding Figure 5 its 50 % study); all of them for any other study."""
    parts = dict(part.split(": ", 1) for part in str(paper["actions"]).split("; ") if ": " in part)
    figures = setting.get("figure_studies") or {}
    if study == figures.get("figure7") and "90%" in parts:
        return parts["90%"]
    if study == figures.get("figure5") and "50%" in parts:
        return parts["50%"]
    return str(paper["actions"])


def _setting_section(setting: Mapping, paper: Mapping) -> str:
    lines = ["## This run versus the paper's setting", ""]
    lines.append("| | this run | paper |")
    lines.append("|---|---|---|")
    models = ", ".join(f"{name} ({spec})" for name, spec in setting.get("models", {}).items())
    lines.append(f"| models | {models} | {paper['models']} |")
    for study, spec in setting.get("studies", {}).items():
        strata = ", ".join(spec.get("strata", []))
        lines.append(
            f"| {study}: documents | {spec.get('documents', '?')} "
            f"({spec.get('documents_per_stratum', '?')} per stratum) | "
            f"{paper['documents']} ({paper['documents_per_stratum']} per stratum) |"
        )
        lines.append(f"| {study}: strata | {strata} | {paper['strata']} |")
        lines.append(
            f"| {study}: horizon H, replicates | {spec.get('horizon', '?')}, {spec.get('replicates', '?')} | "
            f"{paper['horizon']}, – |"
        )
        lines.append(
            f"| {study}: actions | {', '.join(spec.get('actions', []))} | {_paper_actions(study, setting, paper)} |"
        )
    if setting.get("environment"):
        lines.append(
            f"| environment (the workflow's driver; each trajectory store records its own job's) | "
            f"{describe_environment(setting['environment'])} | – |"
        )
    lines.append("")
    diffs = []
    model_names = set(setting.get("models", {}))
    if model_names != set(paper["model_keys"]):
        diffs.append(
            f"the models are {', '.join(sorted(model_names))}, not the paper's Llama-3.1-8B-Instruct and "
            "Qwen2.5-7B-Instruct, so every number below describes a different model; the paper's columns are a "
            "reference for direction and magnitude, not a target to match"
        )
    for study, spec in setting.get("studies", {}).items():
        if spec.get("documents") != paper["documents"]:
            diffs.append(
                f"{study} uses {spec.get('documents')} documents, not {paper['documents']}: intervals are wider "
                "and per-stratum cells hold few documents"
            )
        if spec.get("horizon") != paper["horizon"]:
            diffs.append(
                f"{study} uses H = {spec.get('horizon')}, not {paper['horizon']}: position blocks and depth windows "
                "are set within it"
            )
        diffs.append(
            f"{study}'s prompt lengths are "
            f"{', '.join(str(n) for n in sorted({parse_stratum(s)[1] for s in spec.get('strata', [])}))} "
            "tokens (synthetic RULER/HELMET-style documents generated offline), not the paper's benchmark documents"
        )
    for ours, theirs in (setting.get("paper_actions") or {}).items():
        diffs.append(
            f"{ours} is compared with the paper's {theirs} values (`analysis.paper_actions`): the paper's name has "
            f"more than one reading, and this run runs {ours} beside {theirs}"
        )
    if diffs:
        lines.append("**Where this run differs from the paper:**")
        lines.append("")
        lines += [f"- {d}." for d in diffs]
        lines.append("")
    return "\n".join(lines)


def build_report(
    analysis: Mapping[str, Mapping[str, str | Path]],
    tables_md: Mapping[str, str | Path],
    figures: Mapping[str, str | Path],
    setting: Mapping,
    out: str | Path,
    claims_out: Mapping[str, str | Path] | None = None,
) -> str:
    """Write ``results/report.md`` (and, with ``claims_out`` = ``{"csv": path, "md": path}``, the claims table).

    Parameters
    ----------
    analysis
        The items this run built (those named in ``analysis.studies``): ``{"figure5": {"decomposition": path, ...},
        ..., "swrb": {...}}`` (Parquet, the figure and section items), plus ``"table2"`` ... ``→ {"numbers": csv
        path}``.
    tables_md
        ``{"table2": path, ...}`` Markdown tables to embed.
    figures
        ``{"figure5": png path, ...}`` written into the report as paths relative to its folder.
    setting
        What ran: ``models`` (name → short description), ``studies`` (name → documents,
        documents_per_stratum, strata, horizon, replicates, actions, mode), ``figure_studies`` (item → study),
        ``contrasts``, ``directions``, ``cohort_max_tau``, ``early``, ``late``, ``bootstrap``, ``confidence``.
    claims_out
        Where to write the claims table (:func:`kvdiv.results.claims.claims_table`) as CSV and Markdown.
    """
    paper = paper_values()
    out = Path(out)
    kinds = {result.name: result.kind for result in results()}
    frames = {
        item: {name: read_parquet(p) for name, p in parts.items()}
        for item, parts in analysis.items()
        if kinds.get(item) in PARQUET_KINDS
    }
    numbers = {
        item: {"numbers": read_numbers(item, parts["numbers"])}
        for item, parts in analysis.items()
        if kinds.get(item) == "table" and parts.get("numbers")
    }
    parts: list[str] = [
        "# kvdiv report: divergence timing and cumulative disagreement under KV-cache eviction",
        "",
        "Reproduction of arXiv 2609.16617 §5 by kvdiv. Every interval is a percentile interval of a cluster "
        f"bootstrap over documents ({setting.get('bootstrap', '?')} resamples, "
        f"{100 * setting.get('confidence', 0.95):.0f}%). "
        "Percentages are in percent, differences in percentage points (pp). The paper's values are those it "
        "reports for its two models; where a row names one of our models, the paper columns show the paper's "
        "value for the same quantity on its models.",
        "",
    ]
    inputs = Inputs(
        frames,
        {name: parts["numbers"] for name, parts in numbers.items()},
        paper,
        setting.get("paper_actions") or {},
    )
    degenerate = {a: why for study in (setting.get("degenerate") or {}).values() for a, why in study.items()}
    claims = claims_table(inputs, confidence=float(setting.get("confidence", 0.95)), degenerate=degenerate)
    parts += _claims_section(claims, setting)
    if claims_out:
        _write_claims(claims, claims_out)
    parts.append(_setting_section(setting, paper["setting"]))
    parts += result_sections(set(analysis), {**frames, **numbers}, tables_md, figures, setting, paper, out)

    text = "\n".join(parts) + "\n"
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return text


def result_sections(
    built: set[str],
    frames: Mapping[str, Mapping[str, pl.DataFrame]],
    tables_md: Mapping[str, str | Path],
    figures: Mapping[str, str | Path],
    setting: Mapping,
    paper: Mapping,
    out: Path,
) -> list[str]:
    """The section of every result of the registry (:mod:`kvdiv.results.registry`) that this run ``built`` and that
    has one, in the registry's order (``frames``: result → its tables; ``out``: the report, for relative figure
    paths)."""
    study_of = setting.get("figure_studies", {})
    keys = tuple(paper["setting"]["model_keys"])
    lines: list[str] = []
    for result in results():
        name = result.name
        if name not in built or result.section is None:
            continue
        context = SectionContext(
            result, study_of.get(name), relative(figures.get(name), out), read_text(tables_md.get(name)), keys
        )
        own = {key: paper[key] for key in result.paper if key in paper}
        lines += result.section(frames.get(name, {}), setting, own, context)
    return lines


def _claims_section(claims: pl.DataFrame, setting: Mapping) -> list[str]:
    """The report's first section: one row per (claim, model, subject) with its two verdicts and how sure they are."""
    docs = [spec.get("documents") for spec in setting.get("studies", {}).values() if spec.get("documents")]
    confidence = 100 * float(setting.get("confidence", 0.95))
    lines = [
        "## Claims",
        "",
        "Each headline claim of the paper, tested on this run's data (kvdiv.results.claims; the rules: "
        "docs/claims.md). Our estimate is a pooled point estimate with its "
        f"{confidence:.0f}% cluster-bootstrap percentile interval over documents; the paper's values are for its own "
        "models (Llama-3.1-8B, Qwen2.5-7B). Every claim gets two verdicts by one rulebook:",
        "",
        "- **direction** (the sign of the paper's effect): *consistent* when our interval lies wholly on the paper's "
        "side of the null, *contradicted* when wholly on the other side, else *inconclusive* (an equivalence claim "
        "|d| ≤ c: inside ±c, wholly outside, else inconclusive); **Holm**: the same test at family-wise level "
        f"{100 - confidence:.0f}% over every row (normal approximation, standard error from the interval);",
        "- **magnitude**: our interval (of the size the paper reports: the same quantity, or a share) *inside* "
        "(overlapping), *below* or *above* the paper's value or range over its models, *no paper value*, or *not "
        "identified* (a share of a gap whose interval contains 0);",
        "- **documents needed**, for an inconclusive direction: n · ((z₁₋α/₂ + z₀.₈) · SE / |d|)², the documents at "
        "which the observed between-document variance decides an effect of the observed size d with 80% power.",
        "",
    ]
    if claims.height:
        for column in ("direction", "holm", "magnitude"):
            counts = verdict_counts(claims, column)
            summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            lines.append(f"- {column}: {summary} (of {claims.height} rows)")
        direction = verdict_counts(claims)
        few = direction.get(TOO_FEW, 0)
        if few:
            least = min_documents(confidence / 100)
            lines.append(
                f"- {few} rows are cells of fewer than {least} documents (a stratum's, a cohort's): *too few "
                f"documents*, no verdict whatever their interval — no interval of fewer than {least} documents has "
                f"{confidence:.0f}% coverage (docs/claims.md); their documents needed are at least {least}."
            )
        if direction.get("inconclusive", 0) + few > claims.height / 2:
            counts_text = ", ".join(str(d) for d in docs) or "these"
            lines.append(
                f"- Most direction verdicts are undecided: with {counts_text} documents per study the intervals "
                "are too wide or the cells too small to decide (documents needed: the column); the paper's design "
                "has 288 per study."
            )
        lines.append("")
    lines += [claims_markdown(claims), ""]
    return lines


def _write_claims(claims: pl.DataFrame, out: Mapping[str, str | Path]) -> None:
    """The claims table as CSV and Markdown (written atomically)."""
    if "csv" in out:
        with atomic_path(out["csv"]) as tmp:
            claims.write_csv(tmp)
    if "md" in out:
        with atomic_path(out["md"]) as tmp:
            Path(tmp).write_text(
                "Claims of arXiv 2609.16617 §5, each with a direction and a magnitude verdict (docs/claims.md).\n\n"
                + claims_markdown(claims),
                encoding="utf-8",
            )


__all__ = ["build_report", "paper_values", "contrast_name", "result_sections"]
