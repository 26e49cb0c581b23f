"""The terminal rendering of a :class:`~kvdiv.show.view.PairView`: x and y side by side.

Markers are text, so they survive without colour: ``[τ]`` before the first divergence step, ``[J]`` before
the swrb branch start, ``[EOS]`` in place of a chain's EOS token and ``[+k absorbed]`` for the steps after
it. With colour (plain ANSI SGR codes: 256-colour backgrounds, bold, dim, reverse) each token is shaded by
its step's δ_t in the levels of :data:`DELTA_EDGES`. Colour is off when stdout is not a terminal, when
``NO_COLOR`` is set (https://no-color.org) or ``TERM=dumb``, unless asked for. Below the columns a sparkline
draws δ_t by step with τ and J marked. Control and bidirectional-override characters of decoded text are
shown escaped (``\\x1b``), never sent to the terminal.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import unicodedata
from typing import Any, Iterable, Mapping, TextIO

from kvdiv.show.view import Chain, PairView

#: δ_t shading levels: 0 for δ_t = 0, then (0, .01], (.01, .05], (.05, .2], (.2, .5], (.5, 1].
DELTA_EDGES = (0.01, 0.05, 0.2, 0.5)
#: 256-colour backgrounds of levels 1..5 (light yellow to red), with black text.
SHADES = (230, 223, 216, 209, 203)
#: SGR codes of the markers.
STYLES = {"tau": "1;35", "branch": "1;36", "eos": "7", "absorbed": "2", "head": "1", "dim": "2"}
SPARK = "▁▂▃▄▅▆▇█"
NEWLINE_MARK, TAB_MARK = "↵", "⇥"
_UNITS = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|.", re.DOTALL)  # an escape moves as one unit
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def delta_level(tv: float) -> int:
    """The shading level of δ_t: 0 when δ_t = 0, 1..5 by :data:`DELTA_EDGES`."""
    return 0 if not tv > 0 else 1 + bisect.bisect_left(DELTA_EDGES, float(tv))


def printable(text: str) -> str:
    """``text`` safe to show: a tab as ⇥, other control characters (but newlines) and bidirectional
    overrides escaped as ``\\xNN`` / ``\\uNNNN``."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append(TAB_MARK)
        elif code in _BIDI or unicodedata.category(ch) == "Cc":
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def use_color(stream: TextIO, choice: str = "auto", environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour output to ``stream``: ``always``/``never``, or ``auto`` = a terminal without
    ``NO_COLOR`` (set and non-empty) and ``TERM`` not ``dumb``."""
    if choice not in ("auto", "always", "never"):
        raise ValueError(f"color must be auto, always or never, got {choice!r}")
    if choice != "auto":
        return choice == "always"
    environ = os.environ if environ is None else environ
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not environ.get("NO_COLOR") and environ.get("TERM") != "dumb"


def char_width(ch: str) -> int:
    """Terminal columns of one character (wide East Asian 2, combining 0)."""
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def text_width(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def _shade(level: int) -> str:
    return "" if level == 0 else f"38;5;16;48;5;{SHADES[level - 1]}"


Run = tuple[str, str, bool]  # (text, SGR code or "", atomic: never broken across lines)


def chain_runs(view: PairView, chain: Chain) -> list[Run]:
    """The styled text of one chain: tokens shaded by δ_t, markers for J, τ, EOS and the absorbed steps."""
    runs: list[Run] = []
    for tok in chain.tokens:
        if tok.absorbed:
            continue
        if view.branch_start and tok.step == view.branch_start:
            runs.append(("[J]", STYLES["branch"], True))
        if view.tau and tok.step == view.tau:
            runs.append(("[τ]", STYLES["tau"], True))
        if tok.eos:
            runs.append(("[EOS]", STYLES["eos"], True))
            continue
        if not tok.known:
            runs.append((f"[id {tok.id}]", STYLES["dim"], True))
            continue
        text = printable(tok.text).replace("\n", NEWLINE_MARK + "\n")
        runs.append((text, _shade(delta_level(view.tv[tok.step - 1])), False))
    if chain.absorbed:
        runs.append((f"[+{chain.absorbed} absorbed]", STYLES["absorbed"], True))
    return runs


def wrap_runs(runs: Iterable[Run], width: int) -> list[list[tuple[str, str]]]:
    """Lines of at most ``width`` columns, broken after a space where a line has one (a word longer than a line is
    cut); a newline breaks a line; atomic runs (markers) move whole to the next line."""
    lines: list[list[tuple[str, int, str]]] = [[]]  # (unit, columns, style)
    col = 0
    brk = 0  # units of the current line up to its last space: where it may break

    def new_line(carry: list[tuple[str, int, str]]) -> None:
        nonlocal col, brk
        lines.append(carry)
        col = sum(w for _, w, _ in carry)
        brk = 0

    for text, style, atomic in runs:
        units = [text] if atomic else _UNITS.findall(text)
        for unit in units:
            if unit == "\n":
                new_line([])
                continue
            w = text_width(unit)
            if col + w > width and col:
                line = lines[-1]
                if 0 < brk < len(line) and sum(u[1] for u in line[brk:]) + w <= width:
                    carry = line[brk:]
                    del line[brk:]
                    new_line(carry)  # the unfinished word moves down whole
                else:
                    new_line([])
            lines[-1].append((unit, w, style))
            col += w
            if unit == " " and not atomic:
                brk = len(lines[-1])
    out: list[list[tuple[str, str]]] = []
    for line in lines:
        parts: list[tuple[str, str]] = []
        for unit, _, style in line:
            if parts and parts[-1][1] == style:
                parts[-1] = (parts[-1][0] + unit, style)
            else:
                parts.append((unit, style))
        out.append(parts)
    return out


def _paint(text: str, style: str, color: bool) -> str:
    return f"\x1b[{style}m{text}\x1b[0m" if color and style and text else text


def _line(parts: list[tuple[str, str]], width: int, color: bool) -> str:
    text = "".join(_paint(t, s, color) for t, s in parts)
    return text + " " * max(0, width - sum(text_width(t) for t, _ in parts))


def sparkline(tv: Any) -> str:
    """δ_t by step: ``·`` for 0, else ▁..█ scaled to the largest δ_t of the pair."""
    top = max((float(v) for v in tv), default=0.0)
    if top <= 0:
        return "·" * len(tv)
    return "".join("·" if not v > 0 else SPARK[min(7, max(0, math.ceil(8 * float(v) / top) - 1))] for v in tv)


def _spec(spec: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in spec.items())


def summary_lines(view: PairView) -> list[tuple[str, str]]:
    """The lines above the pair as (text, style): store, model, document and task, answers, action, τ, J, EOS."""
    h = view.header
    lines = [(f"kvdiv show  {h.store}", STYLES["head"])]
    run = [f"model {h.model}", f"mode {h.mode}", f"H = {view.horizon}"]
    if h.temperature is not None:
        run.append(f"T = {h.temperature:g}")
    if h.study:
        run.append(f"study {h.study}")
    lines.append(("  ·  ".join(run), ""))
    doc = f"document {h.document}" + (
        f" ({h.document_index + 1} of {h.documents} in the cube)" if h.kind == "cube" else ""
    )
    info = dict(h.info)
    task = [f"task {info.pop('task')}"] if "task" in info else []
    for key, label in (
        ("family", "family"),
        ("stratum", "stratum"),
        ("target_length", "target length"),
        ("prompt_tokens", "prompt tokens"),
    ):
        if key in info:
            task.append(f"{label} {info[key]}")
    lines.append(("  ·  ".join([doc, *task]), ""))
    if info.get("question"):
        lines.append((f"question: {info['question']}", ""))
    if "answers" in info:
        answers = info["answers"] if isinstance(info["answers"], list) else [info["answers"]]
        line = "answers: " + " | ".join(str(a) for a in answers)
        if info.get("answer_prefix"):
            line += f"   (answer prefix {json.dumps(info['answer_prefix'], ensure_ascii=False)})"
        lines.append((line, ""))
    elif h.kind == "cube":
        lines.append(
            ("answers: not in the cube and no documents beside it (the per-document store has them)", STYLES["dim"])
        )
    spec = f" ({_spec(h.action_spec)})" if h.action_spec else ""
    lines.append((f"action {h.action}{spec}  ·  replicate {h.replicate} of {h.replicates}", ""))
    if view.tau:
        lines.append((f"first divergence: τ = {view.tau} (δ_τ = {view.tv[view.tau - 1]:.4g})", STYLES["tau"]))
    else:
        lines.append((f"no divergence: x = y for all H = {view.horizon} steps", STYLES["tau"]))
    if view.branch_start is not None:
        if view.branch_start:
            lines.append(
                (
                    f"swrb: branch start J = {view.branch_start}; steps before J are the common overlap path "
                    "(x = y = u, δ_t its hazards)",
                    STYLES["branch"],
                )
            )
        else:
            lines.append(
                ("swrb: J = 0: the overlap path never diverges (D = 0), so x = y = u for all H steps", STYLES["branch"])
            )
    ends = []
    for chain in (view.x, view.y):
        if chain.eos_step is None:
            ends.append(f"{chain.name} no EOS within H")
        else:
            ends.append(
                f"{chain.name} EOS at step {chain.eos_step}"
                + (f" ({chain.absorbed} absorbed steps after it)" if chain.absorbed else "")
            )
    lines.append(("; ".join(ends), ""))
    lines += [(f"note: {n}", STYLES["dim"]) for n in h.notes]
    return lines


def legend(color: bool, swrb: bool = False) -> str:
    """The markers (``[J]`` in swrb mode), and with colour the δ_t shading levels."""
    branch = "  [J] branch start" if swrb else ""
    text = f"markers: [τ] first divergence{branch}  [EOS] end of sequence  [+k absorbed] steps after EOS  ↵ newline"
    if not color:
        return text
    edges = (0.0, *DELTA_EDGES, 1.0)
    swatches = " ".join(_paint(f" ≤{edges[i + 1]:g} ", _shade(i + 1), True) for i in range(len(SHADES)))
    return f"{text}\nδ_t shading: 0 (none) {swatches}"


def render_terminal(view: PairView, *, color: bool = False, width: int = 100) -> str:
    """x and y side by side in ``width`` columns (at least 40), the summary above and δ_t below."""
    width = max(40, int(width))
    col = (width - 3) // 2
    out = []
    for text, style in summary_lines(view):
        out.append(_paint(printable(text).replace("\n", NEWLINE_MARK), style, color))
    out.append("")
    titles = [f"x · {view.x.label}", f"y · {view.y.label}"]
    out.append(" │ ".join(_line([(printable(t)[:col], STYLES["head"])], col, color) for t in titles).rstrip())
    out.append("─" * col + "─┼─" + "─" * col)
    left, right = (wrap_runs(chain_runs(view, c), col) for c in (view.x, view.y))
    for i in range(max(len(left), len(right))):
        a = _line(left[i] if i < len(left) else [], col, color)
        b = _line(right[i] if i < len(right) else [], col, color)
        out.append(f"{a} │ {b}".rstrip())
    out.append("")
    top = float(view.tv.max()) if view.horizon else 0.0
    out.append(_paint(f"δ_t by step (· = 0, █ = max δ_t = {top:.4g})", STYLES["head"], color))
    spark = sparkline(view.tv)
    marks = [" "] * view.horizon
    if view.branch_start:
        marks[view.branch_start - 1] = "J"
    if view.tau:
        marks[view.tau - 1] = "τ"
    chunk = max(10, width - 6)
    for start in range(0, view.horizon, chunk):
        out.append(f"{start + 1:>4}  {spark[start : start + chunk]}")
        mark = "".join(marks[start : start + chunk]).rstrip()
        if mark:
            out.append("      " + _paint(mark, STYLES["tau"], color))
    out.append("")
    out.append(legend(color, view.branch_start is not None))
    return "\n".join(out)
