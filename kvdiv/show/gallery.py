"""A gallery page of a store: per action, the pairs with the earliest, median and latest first divergence.

Per action, τ of every (document, replicate) pair (:func:`kvdiv.show.view.first_divergence`); among the pairs
that diverge (τ ≤ H), the earliest (smallest τ), the median (the lower median: rank ⌊(n−1)/2⌋ of n) and the
latest (largest τ), ties broken by document, then replicate order. One self-contained HTML page
(:mod:`kvdiv.show.html`) shows them, for the report of ``snakemake --report``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kvdiv.show.html import esc, html_page, legend_html, pair_html, write_html
from kvdiv.show.view import (
    DEFAULT_MODELS_DIR,
    PairView,
    StoreData,
    first_divergence,
    header_for,
    pair_view,
    read_store,
    store_tokenizer,
)

PICKS = ("earliest", "median", "latest")


def divergence_picks(tau: np.ndarray) -> dict[str, tuple[int, int, int]]:
    """{"earliest" | "median" | "latest": (document, replicate, τ)} from τ shaped (document, replicate)
    (0 = no divergence); empty when no pair diverges."""
    tau = np.asarray(tau)
    d, r = np.nonzero(tau > 0)
    if not d.size:
        return {}
    order = np.lexsort((r, d, tau[d, r]))  # by τ, then document, then replicate
    ranks = (order[0], order[(order.size - 1) // 2], order[-1])
    return {label: (int(d[i]), int(r[i]), int(tau[d[i], r[i]])) for label, i in zip(PICKS, ranks)}


def pair_steps(data: StoreData, action: int) -> np.ndarray:
    """τ of every (document, replicate) pair of one action, shaped (document, replicate); 0 = no divergence."""
    if data.kind == "document":
        return first_divergence(np.asarray(data.arrays[data.actions[action]]["match"]))[None, :]
    return first_divergence(np.asarray(data.arrays["match"])[:, action])


@dataclass(frozen=True)
class GallerySection:
    """One action of the gallery: how many pairs diverged, and the picked pairs by label."""

    action: str
    pairs: int
    diverged: int
    picks: dict[str, PairView]
    taus: dict[str, int]


def gallery_sections(
    data: StoreData, tokenizer: Any, *, actions: Sequence[str] | None = None, notes: tuple[str, ...] = ()
) -> list[GallerySection]:
    """The sections of the gallery of ``data`` (every action, or ``actions``)."""
    names = list(actions) if actions is not None else data.actions
    sections = []
    for name in names:
        if name not in data.actions:
            raise KeyError(f"{data.path}: no action {name!r}; its actions: {', '.join(data.actions)}")
        a = data.actions.index(name)
        tau = pair_steps(data, a)
        picks = divergence_picks(tau)
        views = {
            label: pair_view(data.pair_arrays(a, d, r), tokenizer, header_for(data, a, d, r, notes))
            for label, (d, r, _) in picks.items()
        }
        sections.append(
            GallerySection(
                name, int(tau.size), int((tau > 0).sum()), views, {label: t for label, (_, _, t) in picks.items()}
            )
        )
    return sections


def render_gallery(sections: Sequence[GallerySection], *, title: str, store: str, swrb: bool = False) -> str:
    """The gallery page: per action its earliest, median and latest divergence (a pair shown once when
    several labels pick it)."""
    body = [f"<h1>{esc(title)}</h1>", f'<p class="legend">{esc(store)}</p>', legend_html(swrb)]
    for section in sections:
        body.append(f"<h2>{esc(section.action)}</h2>")
        if not section.picks:
            body.append(f"<p>No pair diverged ({section.pairs} pairs: x = y for all H steps).</p>")
            continue
        body.append(
            f"<p>{section.diverged} of {section.pairs} (document, replicate) pairs diverged; τ earliest "
            f"{section.taus['earliest']}, median {section.taus['median']}, latest {section.taus['latest']}.</p>"
        )
        shown: dict[tuple[str, int], list[str]] = {}
        for label, view in section.picks.items():
            shown.setdefault((view.header.document, view.header.replicate), []).append(label)
        for (document, replicate), labels in shown.items():
            view = section.picks[labels[0]]
            body.append(
                f"<h3>{esc(' = '.join(labels))} divergence: τ = {view.tau} · {esc(document)} · "
                f"replicate {replicate}</h3>"
            )
            body.append(pair_html(view, steps=False))
    return html_page(title, body)


def gallery(
    store: str | os.PathLike,
    *,
    models_dir: str | os.PathLike = DEFAULT_MODELS_DIR,
    tokenizer: Any = None,
    actions: Sequence[str] | None = None,
) -> str:
    """The gallery page of a store (a cube, or a per-document store), verified first."""
    data = read_store(store)
    notes: tuple[str, ...] = ()
    if tokenizer is None:
        tokenizer, notes = store_tokenizer(data, models_dir)
    study = data.attrs.get("study")
    title = f"Divergence gallery: {data.attrs.get('model')}" + (f" · {study}" if study else "")
    sections = gallery_sections(data, tokenizer, actions=actions, notes=notes)
    return render_gallery(sections, title=title, store=str(store), swrb=data.attrs.get("mode") == "swrb")


def write_gallery(store: str | os.PathLike, out: str | os.PathLike, **kwargs: Any) -> Path:
    """Write the gallery page of ``store`` to ``out`` atomically (keywords as :func:`gallery`)."""
    return write_html(out, gallery(store, **kwargs))
