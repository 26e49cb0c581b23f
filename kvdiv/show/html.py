"""The HTML rendering of a :class:`~kvdiv.show.view.PairView`: one self-contained page.

Self-contained: inline CSS only, no scripts, no links, images or fonts from anywhere, and a
Content-Security-Policy that forbids loading anything, so the page opens offline exactly as written. Every
decoded token and every document field is escaped (:func:`html.escape` after
:func:`kvdiv.show.terminal.printable`), so a continuation that decodes to ``<script>`` is shown, never run.
Tokens are shaded by δ_t (red, opacity growing with √δ_t; the step, id and δ_t in the tooltip); ``τ``,
``J``, ``EOS`` and ``+k absorbed`` are marked as in the terminal; an inline SVG draws δ_t by step and a
collapsible table lists every step.
"""

from __future__ import annotations

import html
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from kvdiv.show.terminal import NEWLINE_MARK, STYLES, printable, summary_lines
from kvdiv.show.view import Chain, PairView

#: Forbids every fetch (scripts, styles from files, images, fonts, frames); inline styles only.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"
SHADE_RGB = (214, 39, 40)
#: The generator of every page kvdiv writes: `kvdiv show --html` replaces an existing file only if it says this.
GENERATOR = "kvdiv show"

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #222; }
h1 { font-size: 1.2em; } h2 { font-size: 1.1em; margin-top: 2em; } h3 { font-size: 1em; margin: .3em 0; }
.summary p { margin: .15em 0; } .summary .tau { color: #a0208a; font-weight: 600; }
.summary .branch { color: #087f8c; font-weight: 600; } .summary .dim { color: #777; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; margin: .8em 0; }
.chain { border: 1px solid #ccc; border-radius: 4px; padding: .5em .7em; min-width: 0; }
.text { font-family: ui-monospace, monospace; font-size: .9em; white-space: pre-wrap; overflow-wrap: anywhere; \
line-height: 1.5; }
.tok { border-radius: 2px; }
.mk { font-family: system-ui, sans-serif; font-size: .75em; font-weight: 700; padding: 0 .25em; margin: 0 .1em;
      border-radius: 3px; vertical-align: .1em; }
.mk.tau { background: #a0208a; color: #fff; } .mk.branch { background: #087f8c; color: #fff; }
.mk.eos { background: #333; color: #fff; } .mk.absorbed, .mk.unknown { background: #ddd; color: #555; \
font-weight: 400; }
.nl { color: #aaa; }
.end { color: #666; font-size: .85em; margin: .4em 0 0; }
.legend { font-size: .85em; color: #444; } .legend .sw { display: inline-block; padding: 0 .4em; margin: 0 .15em; }
svg.profile { display: block; margin: .5em 0; } svg .bar { fill: #d62728; } svg .axis { stroke: #999; stroke-width: 1; }
svg .tau { stroke: #a0208a; stroke-width: 1.5; } svg .branch { stroke: #087f8c; stroke-width: 1.5; \
stroke-dasharray: 3 2; }
svg text { font-size: 10px; fill: #555; font-family: system-ui, sans-serif; }
table.steps { border-collapse: collapse; font-size: .85em; } table.steps td, table.steps th { border: 1px solid #ddd; \
padding: 1px 6px; }
table.steps td.code { font-family: ui-monospace, monospace; white-space: pre; }
table.steps tr.diverged td { background: #fbeff9; }
details { margin: .5em 0; }
"""


def esc(text: Any) -> str:
    """Text for HTML: control characters shown escaped, then ``& < > " '`` escaped."""
    return html.escape(printable(str(text)), quote=True)


def shade(tv: float) -> str:
    """The inline background of a token at δ_t (none at δ_t = 0)."""
    if not tv > 0:
        return ""
    alpha = 0.12 + 0.78 * min(1.0, float(tv)) ** 0.5
    return f"background-color: rgba({SHADE_RGB[0]}, {SHADE_RGB[1]}, {SHADE_RGB[2]}, {alpha:.3f})"


def _marker(kind: str, text: str, title: str) -> str:
    return f'<span class="mk {kind}" title="{esc(title)}">{esc(text)}</span>'


def chain_html(view: PairView, chain: Chain) -> str:
    """One chain's tokens as spans (shaded by δ_t) with the τ, J, EOS and absorbed markers."""
    parts = []
    for tok in chain.tokens:
        if tok.absorbed:
            continue
        if view.branch_start and tok.step == view.branch_start:
            parts.append(
                _marker("branch", "J", f"branch start J = {tok.step}: steps before it are the common overlap path")
            )
        if view.tau and tok.step == view.tau:
            parts.append(_marker("tau", "τ", f"first divergence τ = {tok.step}"))
        tv = float(view.tv[tok.step - 1])
        title = f"t = {tok.step} · id {tok.id} · δ_t = {tv:.4g}"
        if tok.eos:
            parts.append(_marker("eos", "EOS", f"{title} · {tok.text}"))
            continue
        if not tok.known:
            parts.append(_marker("unknown", f"id {tok.id}", f"{title} · beyond the tokenizer"))
            continue
        body = esc(tok.text).replace("\n", f'<span class="nl">{NEWLINE_MARK}</span>\n')
        style = shade(tv)
        style_attr = f' style="{style}"' if style else ""
        parts.append(f'<span class="tok"{style_attr} title="{esc(title)}">{body}</span>')
    if chain.absorbed:
        parts.append(
            _marker("absorbed", f"+{chain.absorbed} absorbed", "steps after EOS: the chain repeats the absorbing EOS")
        )
    end = (
        f"EOS at step {chain.eos_step}" + (f"; {chain.absorbed} absorbed steps after it" if chain.absorbed else "")
        if chain.eos_step
        else "no EOS within H"
    )
    return (
        f'<section class="chain"><h3>{esc(chain.name)} · {esc(chain.label)}</h3>'
        f'<div class="text">{"".join(parts)}</div><p class="end">{esc(end)}</p></section>'
    )


def profile_svg(view: PairView, height: int = 64) -> str:
    """δ_t by step as bars (scaled to the largest δ_t), τ and J as vertical lines."""
    n = view.horizon
    bar = max(2, min(10, 900 // max(n, 1)))
    top = float(view.tv.max()) if n else 0.0
    plot = height - 14
    shapes = [f'<line class="axis" x1="0" y1="{plot}" x2="{n * bar}" y2="{plot}"/>']
    for t, v in enumerate(view.tv, start=1):
        h = 0.0 if top <= 0 else plot * float(v) / top
        shapes.append(
            f'<rect class="bar" x="{(t - 1) * bar}" y="{plot - h:.2f}" width="{max(1, bar - 1)}" height="{h:.2f}">'
            f"<title>t = {t} · δ_t = {float(v):.4g}</title></rect>"
        )
    for step, kind in ((view.branch_start, "branch"), (view.tau, "tau")):
        if step:
            x = (step - 0.5) * bar
            shapes.append(f'<line class="{kind}" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{plot}"/>')
    shapes.append(
        f'<text x="0" y="{height - 2}">1</text><text x="{n * bar}" y="{height - 2}" text-anchor="end">{n}</text>'
    )
    label = f"δ_t by step, max {top:.4g}"
    return (
        f'<svg class="profile" width="{n * bar + 2}" height="{height}" role="img" aria-label="{esc(label)}">'
        f"<title>{esc(label)}</title>{''.join(shapes)}</svg>"
    )


def steps_table(view: PairView) -> str:
    """Every step: x and y tokens, δ_t, the fixed-history TV (and the overlap hazard in swrb mode)."""
    cols = ["t", "x", "y", "δ_t"] + (["fixed-history TV"] if view.fixed_tv is not None else [])
    cols += ["overlap hazard"] if view.overlap_tv is not None else []
    cols.append("marks")
    rows = []
    for i, (a, b) in enumerate(zip(view.x.tokens, view.y.tokens)):
        t = i + 1
        marks = [
            m
            for m, on in (
                ("J", t == view.branch_start),
                ("τ", t == view.tau),
                ("x EOS", a.eos),
                ("y EOS", b.eos),
                ("x absorbed", a.absorbed),
                ("y absorbed", b.absorbed),
            )
            if on
        ]
        cells = [
            str(t),
            f'<td class="code">{esc(repr(a.text))}</td>',
            f'<td class="code">{esc(repr(b.text))}</td>',
            f"{view.tv[i]:.4g}",
        ]
        if view.fixed_tv is not None:
            cells.append(f"{view.fixed_tv[i]:.4g}")
        if view.overlap_tv is not None:
            cells.append(f"{view.overlap_tv[i]:.4g}")
        cells.append(esc(", ".join(marks)))
        cls = ' class="diverged"' if a.id != b.id else ""
        rows.append(f"<tr{cls}>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    return (
        f'<details><summary>every step</summary><table class="steps"><tr>{head}</tr>{"".join(rows)}</table></details>'
    )


def legend_html(swrb: bool = False) -> str:
    """The markers (J in swrb mode) and the δ_t shading."""
    swatches = "".join(f'<span class="sw" style="{shade(v)}">{v:g}</span>' for v in (0.001, 0.01, 0.05, 0.2, 0.5, 1.0))
    branch = f"{_marker('branch', 'J', 'branch start')} swrb branch start " if swrb else ""
    return (
        f'<p class="legend">{_marker("tau", "τ", "first divergence")} first divergence '
        f"{branch}{_marker('eos', 'EOS', 'end of sequence')} end of "
        f"sequence {_marker('absorbed', '+k absorbed', 'steps after EOS')} steps after EOS · "
        f'<span class="nl">{NEWLINE_MARK}</span> newline · δ_t shading: {swatches}</p>'
    )


def pair_html(view: PairView, *, summary: bool = True, steps: bool = True) -> str:
    """A pair as an HTML fragment: the summary, x and y side by side, the δ_t profile and the step table."""
    parts = []
    if summary:
        lines = summary_lines(view)[1:]  # the store line is the page's title
        parts.append(
            '<div class="summary">'
            + "".join(
                f'<p class="{style_class(style)}">{esc(text)}</p>' if style_class(style) else f"<p>{esc(text)}</p>"
                for text, style in lines
            )
            + "</div>"
        )
    parts.append(f'<div class="pair">{chain_html(view, view.x)}{chain_html(view, view.y)}</div>')
    parts.append(profile_svg(view))
    if steps:
        parts.append(steps_table(view))
    return "".join(parts)


def style_class(sgr: str) -> str:
    """The CSS class of a terminal style (:data:`kvdiv.show.terminal.STYLES`)."""
    for name, code in STYLES.items():
        if code == sgr and sgr:
            return name
    return ""


def html_page(title: str, body: Iterable[str] | str) -> str:
    """A complete self-contained page (inline CSS, a CSP that loads nothing)."""
    body = body if isinstance(body, str) else "".join(body)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="generator" content="{GENERATOR}">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def render_html(view: PairView) -> str:
    """The page of one pair."""
    h = view.header
    title = f"kvdiv show: {h.document} · {h.action} · replicate {h.replicate}"
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="legend">{esc(h.store)}</p>',
        legend_html(view.branch_start is not None),
        pair_html(view),
    ]
    return html_page(title, body)


def is_kvdiv_html(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is a page kvdiv wrote (its head names :data:`GENERATOR`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.startswith("<!DOCTYPE html>") and f'<meta name="generator" content="{GENERATOR}">' in head


def _protected_tree(path: Path) -> Path | None:
    """The zarr store or workflow results tree ``path`` lies in (itself or an ancestor), if any."""
    from kvdiv.layout import RESULTS

    for parent in [path, *path.parents]:
        if parent.name.endswith(".zarr") or (parent / "zarr.json").is_file() or (parent / ".zgroup").is_file():
            return parent
        if (
            parent.name == Path(RESULTS).name
            or (parent / "models").is_dir()
            and any((parent / "models").glob("*/provenance.json"))
        ):
            return parent
    return None


def check_html_target(path: str | os.PathLike, force: bool = False) -> Path:
    """The path ``kvdiv show --html`` may write, or ``ValueError`` naming it: never an empty path, never inside a
    zarr store or a results tree (the workflow's outputs), and an existing file only if it is an earlier kvdiv
    page (or, with ``force``, any regular file); never a directory, a symbolic link, a device, a pipe or a socket."""
    if not str(path).strip():
        raise ValueError("--html needs a file path (got an empty one)")
    path = Path(path)
    tree = _protected_tree(path.resolve())
    if tree is not None:
        kind = "zarr store" if tree.name.endswith(".zarr") or (tree / "zarr.json").is_file() else "results tree"
        raise ValueError(f"--html {path}: refusing to write inside the {kind} {tree} (write the page elsewhere)")
    if path.is_symlink():
        raise ValueError(f"--html {path} is a symbolic link; refusing to replace it or its target (even with --force)")
    if path.is_dir():
        raise ValueError(f"--html {path} is a directory; give a file name such as {path / 'pair.html'}")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(
            f"--html {path} is not a regular file (a device, pipe or socket); refusing to replace it (even with "
            "--force, which replaces only regular files)"
        )
    if path.exists() and not force and not is_kvdiv_html(path):
        raise ValueError(
            f"--html {path} exists and is not a page kvdiv wrote; refusing to replace it (--force replaces it)"
        )
    if not path.parent.is_dir():
        raise ValueError(f"--html {path}: its directory {path.parent} does not exist")
    return path


def write_html(path: str | os.PathLike, page: str) -> Path:
    """Write ``page`` to ``path`` atomically (:func:`kvdiv.io.atomic_path`); returns the path."""
    from kvdiv.io import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
