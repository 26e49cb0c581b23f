"""The report's section SWRB (item ``swrb``, tables of :mod:`kvdiv.analysis.swrb_comparison`): the measured
variance–cost of residual-branch estimation on an LLM study beside the paper's finite-system figures, and the
(1 − α) enclosure of R_H per action from sampled profiles (paper §4.3).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from kvdiv.analysis.inputs import POOLED
from kvdiv.outputs.report_cells import SectionContext, paper_value, ratio_ci
from kvdiv.outputs.tables import interval, pp
from kvdiv.analysis.swrb_comparison import swrb_enclosure, swrb_variance
from kvdiv.results.base import Result, Table


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The SWRB section (item ``swrb``): the measured variance–cost of residual-branch estimation on the study beside
    the paper's finite-system figures (``finite_state``), and the (1 − α) enclosure of R_H per action (§4.3)."""
    study, finite = context.study, paper.get("finite_state", {})
    mode = setting.get("studies", {}).get(study, {}).get("mode", "?")
    parts = [f"## {context.item.title} ({study or '?'}, mode {mode})", ""]
    variance = frames.get("variance")
    head = (
        "| quantity | model | action | documents | ours (95% CI) | paper: 24 finite systems |\n"
        "|---|---|---|---|---|---|\n"
    )
    vr = finite.get("variance_ratio_naive_over_swrb", {})
    paper_of = {
        "variance_ratio_median": paper_value(vr, "median"),
        "variance_ratio_min": paper_value(vr, "min"),
        "variance_ratio_max": paper_value(vr, "max"),
        "evaluation_ratio_mean": paper_value(finite, "mean_pair_evaluations_ratio"),
        "advantage_ratio_of_means": paper_value(finite, "variance_cost_advantage_ratio_of_means"),
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
            rows.append(
                f"| {label} | {r['model']} | {r['action']} (mean D {r['mean_D']:.3f}) | {r['n_documents']} | "
                f"{ratio_ci(r)} | {paper_of.get(r['statistic'], '–') if r['action'] == POOLED else '–'} |\n"
            )
        parts += [
            "Per (document, action) cell of the study, Var(Z_R) is the variance of the SWRB estimator over the cell's "
            "replicates and Var(M) that of the complete coupling's mismatch rate M, estimated from the same swrb draws "
            "(E[M²] = E[D·M²] along the sampled branch path; kvdiv.analysis.swrb_comparison). Costs are kernel-pair "
            "evaluations as the paper counts them (H per complete sample, H + (H − J) per SWRB sample). Aggregates "
            "as the paper's Figure 4 (cells in place of finite systems); the paper column is its 24-system suite, "
            "set beside ours for direction and magnitude (different systems entirely). Intervals: cluster bootstrap "
            "over documents. A cell whose swrb replicates never branched has no ratio (left out of min/median/max).",
            "",
            head + "".join(rows),
        ]
    else:
        parts += [
            f"The study {study or '?'} runs in mode {mode}: its rows hold no SWRB draws, so the variance–cost of "
            'residual-branch estimation is not measured here (run a study with `mode: swrb`; README, "When to choose '
            "`mode: swrb`\"). The paper's finite-system figures, for reference: variance ratio naive/SWRB "
            f"{paper_value(vr, 'min')}–{paper_value(vr, 'max')} (median {paper_value(vr, 'median')}), "
            "kernel-pair evaluations ×"
            f"{paper_value(finite, 'mean_pair_evaluations_ratio')}, variance–cost advantage "
            f"{paper_value(finite, 'variance_cost_advantage_ratio_of_means')} (ratio of means).",
            "",
        ]
    enclosure = frames.get("enclosure")
    if enclosure is not None and enclosure.height:
        r0 = enclosure.row(0, named=True)
        window, alpha = r0.get("window"), r0["alpha"]
        lines = [
            "| action | model | documents | R_L (%) | B_L (%) | enclosure of R_H (%) | R_H estimate (%) (95% CI) | "
            "estimate inside |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in enclosure.sort("model", "action").iter_rows(named=True):
            lines.append(
                f"| {r['action']} | {r['model']} | {r['n_documents']} | {pp(r['R_L'])} | {pp(r['B_L'])} | "
                f"[{pp(r['enclosure_lower'])}, {pp(r['enclosure_upper'])}] | "
                f"{interval(r['R_H'], r['R_H_lower'], r['R_H_upper'])} | {'yes' if r['R_H_inside'] else '**no**'} |"
            )
        parts += [
            f"**Enclosure of R_H from sampled profiles** (paper §4.3): with window L = {window}, per action "
            f"[LCB(Z_L), UCB(Z_L + W_L)], each one-sided at α/2 = {alpha / 2:g} over per-document means, holds the "
            f"document-average R_H with probability at least {1 - alpha:g} (R_L ≤ R_H ≤ R_L + B_L). In mode swrb Z_L "
            "and W_L are the SWRB window and capacity estimators; in mode complete the coupled sample's window "
            "mismatch M_L and tail capacity, unbiased for the same R_L and B_L. Its width is what a depth-L window "
            "leaves unobserved (B_L) plus sampling error; the full-horizon estimate beside it is not needed for it.",
            "",
            "\n".join(lines),
            "",
        ]
    return parts


RESULT = Result(
    name="swrb",
    kind="section",
    label="SWRB",
    title="SWRB: residual-branch estimation on the LLM study — variance–cost and the enclosure of R_H",
    tables={"variance": Table(swrb_variance), "enclosure": Table(swrb_enclosure)},
    section=section,
    paper=("finite_state",),
    study="retention50",
)
