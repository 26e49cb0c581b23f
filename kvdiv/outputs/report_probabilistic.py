"""The report section of the probabilistic-eviction study (analysis item ``probabilistic``, config/probabilistic.yaml):
entry into divergence per action and the gap of each contrast split into exposure and branch mismatch."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from kvdiv.analysis.inputs import POOLED

INTRO = (
    "Does decode-time correction delay divergence? Each ProbabilisticPress action samples the prompt entries it "
    "keeps from its proposal (π_min: last-query attention × ‖v‖; π_min-h: the same over the prompt's recent queries "
    "under a harmonic prior) and, with correction, adds log(c_i/(m·π_i)) to each kept entry's attention logit at "
    "every decode step. The eviction draw is random per document (seeded from the master seed, study, document and "
    "action) and recorded in each store's `press_seeds`; the gap of a contrast a − b is the pooled mismatch risk "
    "R_H of a minus that of b, split as in Figure 5 (exposure = entering divergence earlier or more often, branch "
    "mismatch = disagreeing more once diverged). A negative gap against SnapKV means the probabilistic action "
    "keeps the full-cache continuation longer or closer."
)


def _ci(row: Mapping | None, digits: int = 2, scale: float = 100.0) -> str:
    """``est [lo, hi]`` times ``scale`` (percent / pp by default); ``–`` where a value is missing or NaN."""
    if row is None:
        return "–"
    f = lambda v: "–" if v is None or v != v else f"{scale * v + 0.0:.{digits}f}"  # noqa: E731
    return f"{f(row['estimate'])} [{f(row['lower'])}, {f(row['upper'])}]"


def _one(frame: pl.DataFrame, **eq: object) -> dict | None:
    sub = frame
    for k, v in eq.items():
        sub = sub.filter(pl.col(k) == v)
    return sub.row(0, named=True) if sub.height else None


def probabilistic_section(frames: Mapping[str, pl.DataFrame], title: str, figure: str) -> list[str]:
    """Markdown lines of the section: heading, what the study asks, the figure, and two tables (pooled over strata,
    95% cluster-bootstrap intervals): per action, divergence by H and mean τ among diverged; per contrast, the
    mismatch gap and its exposure share."""
    parts = [f"## {title}", "", INTRO, "", f"![probabilistic eviction]({figure})", ""]
    entry, dec = frames.get("entry"), frames.get("decomposition")
    if entry is None or not entry.height:
        return parts + ["_No rows: the analysis tables are empty._", ""]
    parts += ["| action | model | documents | diverged by H (%) | mean τ among diverged |", "|---|---|---|---|---|"]
    for model in sorted(entry["model"].unique().to_list()):
        for action in list(dict.fromkeys(entry.filter(pl.col("model") == model)["action"].to_list())):
            d = _one(entry, model=model, stratum=POOLED, action=action, statistic="diverged")
            t = _one(entry, model=model, stratum=POOLED, action=action, statistic="mean_tau_diverged")
            n = (d or t or {}).get("n_documents", "–")
            parts.append(f"| {action} | {model} | {n} | {_ci(d)} | {_ci(t, 1, 1.0)} |")
    parts.append("")
    if dec is not None and dec.height:
        parts += ["| contrast | model | documents | mismatch gap (pp) | exposure share of gap (%) |",
                  "|---|---|---|---|---|"]
        for model in sorted(dec["model"].unique().to_list()):
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                g = _one(dec, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
                s = _one(dec, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
                n = (g or {}).get("n_documents", "–")
                parts.append(f"| {contrast} | {model} | {n} | {_ci(g)} | {_ci(s, 1)} |")
        parts.append("")
    return parts
