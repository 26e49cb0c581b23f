"""``results/report.md``: every headline number of arXiv 2609.16617 §5 beside the paper's reported value.

Our numbers come from the analysis tables of :mod:`kvdiv.analysis` (bootstrap intervals over documents; the
sections follow its registry of items, :mod:`kvdiv.analysis.items`); the paper's values and setting come from
``kvdiv/data/paper_reported_values.yaml`` (shipped with the package), the only copy kvdiv keeps. Each row says
which of our models and how many documents produced it, and the report opens with where this run's
setting differs from the paper's (models, lengths, document counts, horizon, replicates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from kvdiv.analysis.blocks import block_pattern_counts
from kvdiv.analysis.claims import (
    NOT_IDENTIFIED,
    RULES,
    claims_markdown,
    claims_table,
    verdict_counts,
)
from kvdiv.analysis.inputs import POOLED, contrast_name, first_row, lookup
from kvdiv.analysis.items import ANALYSED, ITEMS
from kvdiv.analysis.verdicts import RULE, contrast_verdicts
from kvdiv.io import atomic_path, read_parquet
from kvdiv.layout import parse_stratum
from kvdiv.outputs.tables import interval, pp

#: The paper's reported values and setting, shipped with the package (the only copy kvdiv keeps).
PAPER_VALUES = "data/paper_reported_values.yaml"


def paper_values() -> dict:
    """The paper's reported values (package data :data:`PAPER_VALUES`)."""
    return yaml.safe_load(resources.files("kvdiv").joinpath(PAPER_VALUES).read_text(encoding="utf-8"))


def _ci(row: Mapping | None, digits: int = 2, key: str = "estimate") -> str:
    if row is None:
        return "–"
    return interval(row[key], row["lower"], row["upper"], digits)


_MISSING = object()


def _paper(values: Mapping, *path: str) -> str:
    node = lookup(values, path, _MISSING)
    if node is _MISSING:
        return "–"
    if isinstance(node, list):
        return "[" + ", ".join(str(v) for v in node) + "]"
    return str(node)


def _num(row: Mapping, digits: int = 2) -> str:
    """``est [lo, hi]`` without scaling; ``–`` for missing values."""
    f = lambda v: "–" if v is None or v != v else f"{round(v, digits) + 0.0:.{digits}f}"  # noqa: E731
    return f"{f(row['estimate'])} [{f(row['lower'])}, {f(row['upper'])}]"


def _count(values: pl.Series, threshold: float) -> str:
    """``k of n`` cells above ``threshold`` among cells with an estimate (NaN cells are named, not counted)."""
    v = values.cast(pl.Float64).to_numpy()
    finite = np.isfinite(v)
    text = f"{int((v[finite] > threshold).sum())} of {int(finite.sum())}"
    missing = int((~finite).sum())
    return text + (f" ({missing} without data)" if missing else "")


def _paper_item(values: Mapping, index: int, *path: str) -> str:
    node = lookup(values, path, _MISSING)
    return str(node[index]) if isinstance(node, list) and index < len(node) else "–"


def _share(row: Mapping | None, digits: int = 1) -> str:
    """A share of a gap: "not identified" when the gap's interval contains 0 (``identified`` of
    :mod:`kvdiv.analysis.decomposition`), else its interval, flagged when the interval excludes the estimate."""
    if row is None:
        return "–"
    if row.get("identified") is False:
        return NOT_IDENTIFIED
    text = _ci(row, digits)
    if row.get("contains_estimate") is False:
        text += " ⚠ interval excludes its estimate"
    return text


class _Table:
    """Rows: quantity | our model | documents | ours | paper llama | paper qwen."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []

    def add(self, quantity: str, model: str, n_docs: object, ours: str, llama: str = "–", qwen: str = "–") -> None:
        self.rows.append((quantity, model, str(n_docs), ours, llama, qwen))

    def markdown(self) -> str:
        head = "| quantity | our model | documents | ours (95% CI) | paper: llama | paper: qwen |\n|---|---|---|---|---|---|\n"
        return head + "".join("| " + " | ".join(r) + " |\n" for r in self.rows) if self.rows else "_No rows: the analysis tables are empty._\n"


def _setting_section(setting: Mapping, paper: Mapping) -> str:
    lines = ["## This run versus the paper's setting", ""]
    lines.append("| | this run | paper |")
    lines.append("|---|---|---|")
    models = ", ".join(f"{name} ({spec})" for name, spec in setting.get("models", {}).items())
    lines.append(f"| models | {models} | {paper['models']} |")
    for study, spec in setting.get("studies", {}).items():
        strata = ", ".join(spec.get("strata", []))
        lines.append(f"| {study}: documents | {spec.get('documents', '?')} ({spec.get('documents_per_stratum', '?')} per stratum) | "
                     f"{paper['documents']} ({paper['documents_per_stratum']} per stratum) |")
        lines.append(f"| {study}: strata | {strata} | {paper['strata']} |")
        lines.append(f"| {study}: horizon H, replicates | {spec.get('horizon', '?')}, {spec.get('replicates', '?')} | {paper['horizon']}, – |")
        lines.append(f"| {study}: actions | {', '.join(spec.get('actions', []))} | {paper['actions']} |")
    lines.append("")
    diffs = []
    model_names = set(setting.get("models", {}))
    if model_names != set(paper["model_keys"]):
        diffs.append(f"the models are {', '.join(sorted(model_names))}, not the paper's Llama-3.1-8B-Instruct and "
                     "Qwen2.5-7B-Instruct, so every number below describes a different model; the paper's columns are a "
                     "reference for direction and magnitude, not a target to match")
    for study, spec in setting.get("studies", {}).items():
        if spec.get("documents") != paper["documents"]:
            diffs.append(f"{study} uses {spec.get('documents')} documents, not {paper['documents']}: intervals are wider "
                         "and per-stratum cells hold few documents")
        if spec.get("horizon") != paper["horizon"]:
            diffs.append(f"{study} uses H = {spec.get('horizon')}, not {paper['horizon']}: position blocks and depth windows are set within it")
        diffs.append(f"{study}'s prompt lengths are {', '.join(str(n) for n in sorted({parse_stratum(s)[1] for s in spec.get('strata', [])}))} "
                     "tokens (synthetic RULER/HELMET-style documents generated offline), not the paper's benchmark documents")
    if diffs:
        lines.append("**Where this run differs from the paper:**")
        lines.append("")
        lines += [f"- {d}." for d in diffs]
        lines.append("")
    return "\n".join(lines)


def build_report(analysis: Mapping[str, Mapping[str, str | Path]], tables_md: Mapping[str, str | Path],
                 figures: Mapping[str, str | Path], setting: Mapping, out: str | Path,
                 claims_out: Mapping[str, str | Path] | None = None) -> str:
    """Write ``results/report.md`` (and, with ``claims_out`` = ``{"csv": path, "md": path}``, the claims table).

    Parameters
    ----------
    analysis
        ``{"figure5": {"decomposition": path, ...}, "figure6": {...}, "figure7": {...}, "swrb": {...}}`` (Parquet,
        every item of :data:`kvdiv.analysis.items.ANALYSED`), plus ``"table2"``/``"table3"`` → ``{"numbers": csv path}``.
    tables_md
        ``{"table2": path, "table3": path}`` Markdown tables to embed.
    figures
        ``{"figure5": png path, ...}`` written into the report as paths relative to its folder.
    setting
        What ran: ``models`` (name → short description), ``studies`` (name → documents,
        documents_per_stratum, strata, horizon, replicates, actions, mode), ``figure_studies`` (item → study),
        ``contrasts``, ``cohort_max_tau``, ``early``, ``late``, ``bootstrap``, ``confidence``.
    claims_out
        Where to write the claims table (:func:`kvdiv.analysis.claims.claims_table`) as CSV and Markdown.
    """
    paper = paper_values()
    out = Path(out)
    frames = {item: {name: read_parquet(p) for name, p in parts.items()} for item, parts in analysis.items()
              if item in ANALYSED}
    study_of = setting.get("figure_studies", {})
    built = set(analysis)  # the items this run built (the workflow passes those named in analysis.studies)
    parts: list[str] = [
        "# kvdiv report: divergence timing and cumulative disagreement under KV-cache eviction",
        "",
        "Reproduction of arXiv 2609.16617 §5 by kvdiv. Every interval is a percentile interval of a cluster "
        f"bootstrap over documents ({setting.get('bootstrap', '?')} resamples, {100 * setting.get('confidence', 0.95):.0f}%). "
        "Percentages are in percent, differences in percentage points (pp). The paper's values are those it "
        "reports for its two models; where a row names one of our models, the paper columns show the paper's "
        "value for the same quantity on its models.",
        "",
    ]
    t2_numbers = analysis.get("table2", {}).get("numbers")
    t3_numbers = analysis.get("table3", {}).get("numbers")
    claims = claims_table(
        frames,
        pl.read_csv(t2_numbers, schema_overrides={"length": pl.Utf8}) if t2_numbers else None,
        pl.read_csv(t3_numbers) if t3_numbers else None,
        paper,
    )
    parts += _claims_section(claims, setting)
    if claims_out:
        _write_claims(claims, claims_out)
    parts.append(_setting_section(setting, paper["setting"]))

    # ---------------------------------------------------------------- Figure 5 / §5.2
    f5 = frames.get("figure5", {})
    t = _Table()
    p50 = paper.get("retention50", {})
    if f5:
        entry, dec = f5["entry"], f5["decomposition"]
        for model in sorted(entry["model"].unique().to_list()):
            for action in sorted(entry["action"].unique().to_list()):
                r = first_row(entry, model=model, stratum=POOLED, action=action, statistic="mean_tau_diverged")
                if r:
                    t.add(f"mean first-divergence step among diverged, {action}", model, r["n_documents"],
                          _num(r),
                          _paper(p50, "mean_first_divergence_step_among_diverged", "llama", action),
                          _paper(p50, "mean_first_divergence_step_among_diverged", "qwen", action))
                r = first_row(entry, model=model, stratum=POOLED, action=action, statistic="diverged")
                if r:
                    t.add(f"diverged by step H (%), {action}", model, r["n_documents"], _ci(r),
                          _paper(p50, "diverged_by_step_128_percent", "llama", action),
                          _paper(p50, "diverged_by_step_128_percent", "qwen", action))
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                key = contrast.replace(" − ", "_minus_")
                r = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
                g = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
                if g:
                    t.add(f"mismatch gap (pp), {contrast}", model, g["n_documents"], _ci(g))
                if r:
                    t.add(f"exposure share of gap (%), {contrast}", model, r["n_documents"], _share(r),
                          _paper(p50, "exposure_share_of_gap_percent", key, "llama"),
                          _paper(p50, "exposure_share_of_gap_percent", key, "qwen"))
            cells = dec.filter((pl.col("model") == model) & (pl.col("stratum") != POOLED) & (pl.col("statistic") == "exposure_share"))
            if cells.height:
                ok = cells.filter(pl.col("identified")) if "identified" in cells.columns else cells
                unidentified = cells.height - ok.height
                t.add("decompositions with exposure majority (stratum × contrast)", model, "–",
                      _count(ok["estimate"], 0.5) + (f" ({unidentified} not identified: gap indistinguishable from 0)"
                                                     if unidentified else ""),
                      _paper(p50, "decompositions_with_exposure_majority"), "")
            rates = dec.filter((pl.col("model") == model) & (pl.col("stratum") != POOLED)
                               & pl.col("statistic").is_in(["rate_a", "rate_b"]))["estimate"].drop_nans()
            if rates.len():
                t.add("post-divergence mismatch rate C, range over cells (%)", model, "–",
                      f"[{pp(rates.min())}, {pp(rates.max())}]", _paper(p50, "post_divergence_mismatch_percent_range"), "")
    if "figure5" in built:
        parts += [f"## {ITEMS['figure5'].title} ({study_of.get('figure5', '?')})", "",
                  "Exposure share = (ΔO + ΔE·C̄)/ΔR, branch-mismatch share = Ē·ΔC/ΔR (midpoint split of Π = E·C; the two "
                  "shares sum to 1 and do not depend on the order of the two actions).", "",
                  f"![{ITEMS['figure5'].label}]({_rel(figures.get('figure5'), out)})", "", t.markdown()]

    # ---------------------------------------------------------------- Figure 6 / §5.3
    f6 = frames.get("figure6", {})
    t = _Table()
    ref_action = _reference_action(setting.get("contrasts", []), f6.get("late_minus_early"))
    if f6:
        lme = f6["late_minus_early"]
        for model in sorted(lme["model"].unique().to_list()):
            for which in ("early", "late"):
                r = first_row(lme, model=model, stratum=POOLED, action=ref_action, statistic=which)
                if r:
                    t.add(f"branch TV, τ ≤ {setting.get('cohort_max_tau', 64)}, {ref_action}, {which} window (%)", model,
                          r["n_documents"], _ci(r),
                          _paper(p50, "branch_tv_snapkv_half_tau_le_64_percent", "llama", which),
                          _paper(p50, "branch_tv_snapkv_half_tau_le_64_percent", "qwen", which))
            cells = lme.filter((pl.col("model") == model) & (pl.col("stratum") != POOLED) & (pl.col("statistic") == "late_minus_early"))
            if cells.height:
                t.add("late − early branch TV positive (stratum × action)", model, "–",
                      _count(cells["estimate"], 0.0), _paper(p50, "late_minus_early_positive"), "")
    if "figure6" in built:
        parts += [f"## {ITEMS['figure6'].title} ({study_of.get('figure6', '?')})", "",
                  f"Early window: depths {setting.get('early')}; late window: depths {setting.get('late')}; "
                  f"cohort τ ≤ {setting.get('cohort_max_tau')}.", "",
                  f"![{ITEMS['figure6'].label}]({_rel(figures.get('figure6'), out)})", "", t.markdown()]

    # ---------------------------------------------------------------- Figure 7 / §5.4–5.5
    f7 = frames.get("figure7", {})
    t = _Table()
    p90 = paper.get("retention90", {})
    if f7:
        dec, lme, eos = f7["decomposition"], f7["late_minus_early"], f7["eos"]
        for model in sorted(dec["model"].unique().to_list()):
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                g = first_row(dec, model=model, family=POOLED, contrast=contrast, statistic="gap")
                r = first_row(dec, model=model, family=POOLED, contrast=contrast, statistic="exposure_share")
                if g:
                    t.add(f"mismatch gap (pp), {contrast}", model, g["n_documents"], _ci(g),
                          _paper(p90, "mismatch_gap_pp", "llama"), _paper(p90, "mismatch_gap_pp", "qwen"))
                if r:
                    t.add(f"exposure share of gap (%), {contrast}", model, r["n_documents"], _share(r),
                          _paper(p90, "exposure_share_of_gap_percent", "llama"), _paper(p90, "exposure_share_of_gap_percent", "qwen"))
                for fam in sorted(set(eos.filter(pl.col("model") == model)["family"].to_list())):
                    e = first_row(eos, model=model, family=fam, contrast=contrast, statistic="eos_share")
                    if e:
                        t.add(f"EOS share of gap (%), {fam}, {contrast}", model, e["n_documents"], _share(e, 2),
                              _paper(p90, "eos_share_percent", "llama", fam) if fam != POOLED else "–",
                              _paper(p90, "eos_share_percent", "qwen") if fam == POOLED else "–")
            pooled = lme.filter((pl.col("model") == model) & (pl.col("family") == POOLED))
            main = pooled.filter(pl.col("statistic") == "late_minus_early")
            for r in main.iter_rows(named=True):
                t.add(f"late − early branch TV (pp), {r['action']}", model, r["n_documents"], _ci(r),
                      _paper(p90, "late_minus_early_branch_tv_pp_range"), "")
                s = first_row(pooled, action=r["action"], statistic="late_minus_early_strict_pre_eos")
                if s:
                    t.add(f"strict pre-EOS late − early (pp), {r['action']}", model, s["n_documents"], _ci(s),
                          _paper(p90, "strict_pre_eos_late_minus_early_pp", "llama"),
                          _paper(p90, "strict_pre_eos_late_minus_early_pp", "qwen"))
            if main.height:
                t.add("prespecified late − early intervals above zero (action)", model, "–",
                      _count(main["lower"], 0.0),
                      _paper(p90, "prespecified_branch_tv_intervals_above_zero"), "")
            strata = f7.get("late_minus_early_strata")
            if strata is not None and strata.height:
                cells = strata.filter((pl.col("model") == model) & (pl.col("stratum") != POOLED)
                                      & (pl.col("statistic") == "late_minus_early"))
                if cells.height:
                    t.add("late − early branch TV positive (stratum × action)", model, "–",
                          _count(cells["estimate"], 0.0),
                          _paper(p90, "late_minus_early_positive_strata"), "")
    if "figure7" in built:
        parts += [f"## {ITEMS['figure7'].title} ({study_of.get('figure7', '?')})", "",
                  f"![{ITEMS['figure7'].label}]({_rel(figures.get('figure7'), out)})", "", t.markdown()]

    # ---------------------------------------------------------------- Tables 2 and 3
    t2_path = analysis.get("table2", {}).get("numbers")
    t = _Table()
    if t2_path:
        t2 = pl.read_csv(t2_path, schema_overrides={"length": pl.Utf8})
        blocks = list(dict.fromkeys(t2["block"].to_list()))
        words = {"fall": ("falls across later blocks", "below"), "rise": ("rises across later blocks", "above")}
        for r in block_pattern_counts(t2).iter_rows(named=True):
            verb, side = words[r["direction"]]
            missing = f" ({r['missing']} without data)" if r["missing"] else ""
            t.add(f"{r['family'].upper()} model–length comparisons whose gap {verb} (gap at positions {r['last_block']} "
                  f"{side} positions {r['first_block']}; point estimates), {r['contrast']}", r["models"], r["n_documents"],
                  f"{r['hits']} of {r['comparisons']}{missing}",
                  *(_paper(p90, "table2_pattern_comparisons", m) for m in ("llama", "qwen")))
        for r in t2.filter(pl.col("stratum") == POOLED).iter_rows(named=True):
            k = blocks.index(r["block"])
            t.add(f"pooled generation-clock gap (pp), positions {r['block']}, {r['contrast']}", r["model"], r["n_documents"],
                  _ci(r, key="gap"),
                  *(_paper_item(p90, k, "table2_pooled_generation_clock_gap_pp", m) for m in ("llama", "qwen")))
    if "table2" in built:
        parts += [f"## {ITEMS['table2'].title} ({study_of.get('table2', '?')})", "",
                  f"Paper: {_paper(p90, 'table2_pattern')}.", "",
                  "Pattern check on our data: a comparison is one model × length of a task family for one contrast (the "
                  "per-stratum rows); its gap *falls across later blocks* when the point estimate at the last block is "
                  "strictly below the one at the first block, and *rises* when strictly above (middle blocks need not be "
                  "monotone; intervals are not used).", "", t.markdown(), "", _read(tables_md.get("table2"))]

    t3_path = analysis.get("table3", {}).get("numbers")
    t = _Table()
    pp3 = paper.get("prediction", {})
    if t3_path:
        t3 = pl.read_csv(t3_path)
        for r in t3.iter_rows(named=True):
            llama = qwen = "–"
            if r["predictor"] == "short_window" and r["method"] == "raw":
                llama, qwen = (_paper(pp3, "short_window_document_mae_pp", m) for m in ("llama", "qwen"))
            elif r["predictor"] == "fixed_history":
                llama, qwen = (_paper(pp3, "fixed_history_mae_rmse_pp", m) for m in ("llama", "qwen"))
            t.add(f"{r['predictor']}/{r['method']}: document MAE / RMSE (pp)", r["model"], r["n_documents"],
                  f"{pp(r['mae'])} / {pp(r['rmse'])}", llama, qwen)
            within = "yes" if r["interval_within"] else ("point only" if r["point_within"] else "no")
            t.add(f"{r['predictor']}/{r['method']}: population gap recovered within ±2 pp", r["model"], r["n_documents"],
                  f"{within}: {_ci(r, key='difference')}")
    if "table3" in built:
        parts += [f"## {ITEMS['table3'].title} ({study_of.get('table3', '?')})", "",
                  "Predictors use generation positions 1–32 only; calibrated methods (cell_mean, ridge) are fitted "
                  "out-of-fold over documents (see kvdiv.analysis). A predictor recovers the gap when the interval of "
                  f"predicted − full lies inside ±{_paper(pp3, 'criterion_pp')} pp. Paper: {_paper(pp3, 'short_window')}.",
                  "", t.markdown(), "", _read(tables_md.get("table3"))]

    # ---------------------------------------------------------------- the probabilistic-eviction study (issue 13)
    if "probabilistic" in frames:  # built: the workflow passed its tables
        directions = {contrast_name(a, b): d for a, b, d in setting.get("directions", [])}
        parts += [""] + _probabilistic_section(
            frames["probabilistic"], f"{ITEMS['probabilistic'].title} ({study_of.get('probabilistic', '?')})",
            _rel(figures.get("probabilistic"), out), directions)

    if "accuracy" in built:
        parts += _accuracy_section(analysis.get("accuracy", {}).get("numbers"), tables_md.get("accuracy"),
                                   study_of.get("accuracy", "?"))

    if "swrb" in built:
        parts += _swrb_section(frames.get("swrb", {}), study_of.get("swrb"), setting, paper.get("finite_state", {}))

    text = "\n".join(parts) + "\n"
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return text


def _claims_section(claims: pl.DataFrame, setting: Mapping) -> list[str]:
    """The report's first section: one row per (claim, model, subject) with its verdict and the rule behind it."""
    counts = verdict_counts(claims)
    docs = [spec.get("documents") for spec in setting.get("studies", {}).values() if spec.get("documents")]
    lines = [
        "## Claims", "",
        "Each headline claim of the paper, tested on this run's data (kvdiv.analysis.claims, docs/claims.md). Our "
        "estimate is a pooled point estimate with its 95% cluster-bootstrap percentile interval over documents; the "
        "paper's value is for its own models (Llama-3.1-8B, Qwen2.5-7B), so a verdict says whether *our* model shows "
        "the paper's pattern. Verdict rules, on our interval:", "",
        *[f"- **{name}**: {text}." for name, text in RULES.items()],
        "",
        f"A share whose gap's interval contains 0 is *{NOT_IDENTIFIED}* and inconclusive; an interval that excludes "
        "its own point estimate is flagged.", "",
    ]
    if claims.height:
        total = claims.height
        summary = ", ".join(f"{counts[v]} {v}" for v in ("consistent", "contradicted", "inconclusive"))
        lines.append(f"Verdicts: {summary} (of {total} rows).")
        if counts["inconclusive"] > total / 2:
            counts_text = ", ".join(str(d) for d in docs) or "these"
            lines[-1] += (f" Most verdicts are inconclusive: with {counts_text} documents per study the intervals are "
                          "too wide to decide; the paper's design has 288 per study.")
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
            Path(tmp).write_text("Claims of arXiv 2609.16617 §5 with a verdict each (docs/claims.md).\n\n"
                                 + claims_markdown(claims), encoding="utf-8")


def _accuracy_section(numbers: str | Path | None, markdown: str | Path | None, study: str) -> list[str]:
    """The report's section "Does divergence change the answer?" (item ``accuracy``): pooled accuracy of x and y, the
    share of changed answers and y's accuracy after early and late divergence, per model × action, then the table."""
    item = ITEMS["accuracy"]
    lines = [f"## {item.title} ({study})", "",
             "Every stored continuation scored with its document's own scorer (RULER string-match all, HELMET SubEM): "
             "x is the full-cache continuation, y the evicted one. *Early* divergence: τ at or before the step that "
             "ends x's first gold-answer span (y had not copied it yet); *late*: after it (y's prefix already holds "
             "x's first answer). Percent, with 95% cluster-bootstrap intervals over documents.", ""]
    if not numbers:
        return lines + ["_The accuracy table was not built._", ""]
    acc = pl.read_csv(numbers)
    rows = ["| model | action | documents | accuracy x | accuracy y | answer changed | accuracy y, early | accuracy y, late |",
            "|---|---|---|---|---|---|---|---|"]
    pooled = acc.filter(pl.col("stratum") == POOLED)
    for (model, action), sub in sorted(pooled.group_by(["model", "action"]), key=lambda kv: kv[0]):
        get = {r["statistic"]: r for r in sub.iter_rows(named=True)}
        cells = [_ci(get.get(k), 1) for k in ("accuracy_x", "accuracy_y", "answer_changed", "accuracy_y_early",
                                               "accuracy_y_late")]
        rows.append(f"| {model} | {action} | {sub['n_documents'][0]} | " + " | ".join(cells) + " |")
    if len(rows) == 2:
        rows = ["_No rows: no document of the study has gold answers._"]
    return lines + rows + ["", "Per stratum:", "", _read(markdown), ""]


PROBABILISTIC_INTRO = (
    "Does decode-time correction delay divergence? Each ProbabilisticPress action samples the prompt entries it "
    "keeps from its proposal (π_min: last-query attention × ‖v‖; π_min-h: the same over the prompt's recent queries "
    "under a harmonic prior) and, with correction, adds log(c_i/(m·π_i)) to each kept entry's attention logit at "
    "every decode step. The eviction draw is random per document (seeded from the master seed, study, document and "
    "action) and recorded in each store's `press_seeds`; the gap of a contrast a − b is the pooled mismatch risk "
    "R_H of a minus that of b, split as in Figure 5 (exposure = entering divergence earlier or more often, branch "
    "mismatch = disagreeing more once diverged). A negative gap against SnapKV means the probabilistic action "
    "keeps the full-cache continuation longer or closer."
)


def _probabilistic_section(frames: Mapping[str, pl.DataFrame], title: str, figure: str,
                           directions: Mapping[str, str] | None = None) -> list[str]:
    """The report's section of the probabilistic-eviction study (analysis item ``probabilistic``,
    config/probabilistic.yaml): heading, what the study asks, the figure, and two tables (pooled over strata,
    95% cluster-bootstrap intervals): per action, divergence by H and mean τ among diverged; per contrast, the
    mismatch gap with its interval, its exposure share, the paper's direction (``directions``: contrast name →
    lower/higher, config ``analysis.directions``) and the verdict (:mod:`kvdiv.analysis.verdicts`).
    """
    parts = [f"## {title}", "", PROBABILISTIC_INTRO, "", f"![probabilistic eviction]({figure})", ""]
    entry, dec = frames.get("entry"), frames.get("decomposition")
    if entry is None or not entry.height:
        return parts + ["_No rows: the analysis tables are empty._", ""]
    parts += ["| action | model | documents | diverged by H (%) | mean τ among diverged |", "|---|---|---|---|---|"]
    for model in sorted(entry["model"].unique().to_list()):
        for action in list(dict.fromkeys(entry.filter(pl.col("model") == model)["action"].to_list())):
            d = first_row(entry, model=model, stratum=POOLED, action=action, statistic="diverged")
            t = first_row(entry, model=model, stratum=POOLED, action=action, statistic="mean_tau_diverged")
            n = (d or t or {}).get("n_documents", "–")
            parts.append(f"| {action} | {model} | {n} | {_ci(d)} | {_num(t, 1) if t else '–'} |")
    parts.append("")
    if dec is not None and dec.height:
        verdicts = contrast_verdicts(dec, directions or {})
        claimed = {"lower": "gap < 0", "higher": "gap > 0"}
        parts += [f"Verdict of each contrast against the paper's direction (config `analysis.directions`): {RULE}.",
                  "", "| contrast | model | documents | mismatch gap (pp) | exposure share of gap (%) | paper's direction "
                  "| verdict |", "|---|---|---|---|---|---|---|"]
        for model in sorted(dec["model"].unique().to_list()):
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                g = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
                s = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
                v = first_row(verdicts, model=model, contrast=contrast)
                n = (g or {}).get("n_documents", "–")
                direction = claimed.get((v or {}).get("direction"), "–")
                parts.append(f"| {contrast} | {model} | {n} | {_ci(g)} | {_share(s)} | {direction} | "
                             f"{(v or {}).get('verdict', '–')} |")
        parts.append("")
    return parts


def _ratio_ci(row: Mapping | None, digits: int = 3) -> str:
    """``est [lo, hi]`` of a ratio (no scaling; 3 significant digits)."""
    if row is None:
        return "–"
    f = lambda v: "–" if v is None or v != v else ("∞" if v == float("inf") else f"{v:.{digits}g}")  # noqa: E731
    return f"{f(row['estimate'])} [{f(row['lower'])}, {f(row['upper'])}]"


def _swrb_section(frames: Mapping[str, pl.DataFrame], study: str | None, setting: Mapping, finite: Mapping) -> list[str]:
    """The SWRB section (item ``swrb``): the measured variance–cost of residual-branch estimation on the study beside
    the paper's finite-system figures, and the (1 − α) enclosure of R_H per action (paper §4.3)."""
    item = ITEMS["swrb"]
    mode = setting.get("studies", {}).get(study, {}).get("mode", "?")
    parts = [f"## {item.title} ({study or '?'}, mode {mode})", ""]
    variance = frames.get("variance")
    head = "| quantity | model | action | documents | ours (95% CI) | paper: 24 finite systems |\n|---|---|---|---|---|---|\n"
    vr = finite.get("variance_ratio_naive_over_swrb", {})
    paper_of = {
        "variance_ratio_median": _paper(vr, "median"),
        "variance_ratio_min": _paper(vr, "min"),
        "variance_ratio_max": _paper(vr, "max"),
        "evaluation_ratio_mean": _paper(finite, "mean_pair_evaluations_ratio"),
        "advantage_ratio_of_means": _paper(finite, "variance_cost_advantage_ratio_of_means"),
    }
    names = {
        "variance_ratio_median": "variance ratio Var(M)/Var(Z_R), median over (document, action) cells",
        "variance_ratio_min": "variance ratio, smallest cell",
        "variance_ratio_max": "variance ratio, largest cell",
        "variance_ratio_of_means": "pooled variance ratio mean Var(M) / mean Var(Z_R)",
        "evaluation_ratio_mean": "kernel-pair evaluations swrb/complete (mean over cells)",
        "advantage_ratio_of_means": "variance–cost advantage (ratio of means)",
    }
    if variance is not None and variance.height:
        rows = []
        for r in variance.iter_rows(named=True):
            label = f"{names.get(r['statistic'], r['statistic'])}"
            rows.append(f"| {label} | {r['model']} | {r['action']} (mean D {r['mean_D']:.3f}) | {r['n_documents']} | "
                        f"{_ratio_ci(r)} | {paper_of.get(r['statistic'], '–') if r['action'] == POOLED else '–'} |\n")
        parts += [
            "Per (document, action) cell of the study, Var(Z_R) is the variance of the SWRB estimator over the cell's "
            "replicates and Var(M) that of the complete coupling's mismatch rate M, estimated from the same swrb draws "
            "(E[M²] = E[D·M²] along the sampled branch path; kvdiv.analysis.swrb_comparison). Costs are kernel-pair "
            "evaluations as the paper counts them (H per complete sample, H + (H − J) per SWRB sample). Aggregates "
            "as the paper's Figure 4 (cells in place of finite systems); the paper column is its 24-system suite, "
            "set beside ours for direction and magnitude (different systems entirely). Intervals: cluster bootstrap "
            "over documents. A cell whose swrb replicates never branched has no ratio (left out of min/median/max).",
            "", head + "".join(rows),
        ]
    else:
        parts += [
            f"The study {study or '?'} runs in mode {mode}: its rows hold no SWRB draws, so the variance–cost of "
            "residual-branch estimation is not measured here (run a study with `mode: swrb`; README, \"When to choose "
            "`mode: swrb`\"). The paper's finite-system figures, for reference: variance ratio naive/SWRB "
            f"{_paper(vr, 'min')}–{_paper(vr, 'max')} (median {_paper(vr, 'median')}), kernel-pair evaluations ×"
            f"{_paper(finite, 'mean_pair_evaluations_ratio')}, variance–cost advantage "
            f"{_paper(finite, 'variance_cost_advantage_ratio_of_means')} (ratio of means).", "",
        ]
    enclosure = frames.get("enclosure")
    if enclosure is not None and enclosure.height:
        r0 = enclosure.row(0, named=True)
        window, alpha = r0.get("window"), r0["alpha"]
        lines = ["| action | model | documents | R_L (%) | B_L (%) | enclosure of R_H (%) | R_H estimate (%) (95% CI) | "
                 "estimate inside |", "|---|---|---|---|---|---|---|---|"]
        for r in enclosure.sort("model", "action").iter_rows(named=True):
            lines.append(f"| {r['action']} | {r['model']} | {r['n_documents']} | {pp(r['R_L'])} | {pp(r['B_L'])} | "
                         f"[{pp(r['enclosure_lower'])}, {pp(r['enclosure_upper'])}] | "
                         f"{interval(r['R_H'], r['R_H_lower'], r['R_H_upper'])} | {'yes' if r['R_H_inside'] else '**no**'} |")
        parts += [
            f"**Enclosure of R_H from sampled profiles** (paper §4.3): with window L = {window}, per action "
            f"[LCB(Z_L), UCB(Z_L + W_L)], each one-sided at α/2 = {alpha / 2:g} over per-document means, holds the "
            f"document-average R_H with probability at least {1 - alpha:g} (R_L ≤ R_H ≤ R_L + B_L). In mode swrb Z_L "
            "and W_L are the SWRB window and capacity estimators; in mode complete the coupled sample's window "
            "mismatch M_L and tail capacity, unbiased for the same R_L and B_L. Its width is what a depth-L window "
            "leaves unobserved (B_L) plus sampling error; the full-horizon estimate beside it is not needed for it.",
            "", "\n".join(lines), "",
        ]
    return parts


def _reference_action(contrasts: Sequence[Sequence[str]], lme: pl.DataFrame | None) -> str:
    """The action the paper's Figure 6 headline is about: the b side of the first contrast present."""
    present = set(lme["action"].to_list()) if lme is not None and lme.height else set()
    for c in contrasts:
        if c[1] in present:
            return str(c[1])
    return sorted(present)[0] if present else "–"


def _rel(path: str | Path | None, out: Path) -> str:
    if path is None:
        return ""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(out.resolve().parent))
    except ValueError:
        return str(path)


def _read(path: str | Path | None) -> str:
    return Path(path).read_text(encoding="utf-8") if path else ""


__all__ = ["build_report", "paper_values", "contrast_name"]
