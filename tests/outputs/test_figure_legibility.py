"""Every figure kvdiv draws is legible at page width (issue 38, item 4).

Each figure of the registry (:mod:`kvdiv.results.registry`, so a figure added there is checked here without
touching this file) and Figure 4 (rule ``finite_figure4``) is drawn from synthetic inputs with many actions (12),
contrasts (10), strata (3) and two models, at the schema's default dpi, and checked with matplotlib's renderer:

- the PNG is at most 2400 px wide, and would be at the schema's highest ``plotting.dpi``;
- no two drawn texts (tick labels, axis labels, titles, legend texts, annotations) overlap;
- no legend overlaps the data area of any axes (legends sit outside the data);
- every drawn text and legend lies inside the figure;
- no linear axis runs beyond ±1.25·max(100, H): everything kvdiv draws on one is a percentage or a gap in percentage
  points (|x| ≤ 100), a step or depth (≤ H) or a TV (≤ 1), so a wider axis is a share of a gap near 0 blown up.

Text extents are axis-aligned bounding boxes (a rotated label is judged by its box: conservative).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
import yaml
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox
from PIL import Image

from kvdiv.analysis import inputs
from kvdiv.metrics import compute_metrics
from kvdiv.results.figure4 import plot_figure4
from kvdiv.results.leaderboard import describe_actions
from kvdiv.results.registry import get_result, names, plot_result
from support.synthetic_cube import simulate_cube

REPO = Path(__file__).resolve().parents[2]
DPI_SCHEMA = yaml.safe_load((REPO / "kvdiv/data/schema.yaml").read_text())["properties"]["plotting"]["properties"][
    "dpi"
]
MAX_PX = 2400
HORIZON = 64
STRATA = ("ruler_256", "helmet_256", "ruler_512")
MODELS = ("smollm2", "qwen25_7b_instruct")

#: Action → (hazard e of the synthetic cube, press spec of the leaderboard). Two actions share a hazard, so one
#: contrast has a gap near 0 (its shares are not identified), as in the recorded decoding and probabilistic runs.
ACTIONS = {
    "snapkv_half": (0.05, {"press": "SnapKVPress", "compression_ratio": 0.5}),
    "snapkv_512": (0.08, {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 512}),
    "recent_half": (0.12, {"press": "StreamingLLMPress", "compression_ratio": 0.5}),
    "snapkv_90": (0.01, {"press": "SnapKVPress", "compression_ratio": 0.1}),
    "recent_90": (0.03, {"press": "StreamingLLMPress", "compression_ratio": 0.1}),
    "pminh_half_g": (0.05, {"press": "ProbabilisticPress", "compression_ratio": 0.5}),
    "pminh_half_g_corr": (0.05, {"press": "ProbabilisticPress", "compression_ratio": 0.5, "correction": True}),
    "pminh_half_ph": (0.04, {"press": "ProbabilisticPress", "compression_ratio": 0.5}),
    "pminh_half_ph_corr": (0.035, {"press": "ProbabilisticPress", "compression_ratio": 0.5, "correction": True}),
    "dec_512_32": (
        0.02,
        {
            "press": "DecodingPress",
            "base_press": {"press": "SnapKVPress"},
            "target_size": 512,
            "compression_interval": 32,
        },
    ),
    "dec_256_128": (
        0.025,
        {
            "press": "DecodingPress",
            "base_press": {"press": "SnapKVPress"},
            "target_size": 256,
            "compression_interval": 128,
        },
    ),
    "snapkv_half_dec_512": (
        0.045,
        {
            "press": "PrefillDecodingPress",
            "prefilling_press": {"press": "SnapKVPress", "compression_ratio": 0.5},
            "decoding_press": {"press": "DecodingPress", "base_press": {"press": "SnapKVPress"}, "target_size": 512},
        },
    ),
}
CONTRASTS = [
    ["snapkv_512", "snapkv_half"],
    ["recent_half", "snapkv_half"],
    ["recent_90", "snapkv_90"],
    ["pminh_half_g", "snapkv_half"],
    ["pminh_half_g_corr", "pminh_half_g"],
    ["pminh_half_ph", "snapkv_half"],
    ["pminh_half_ph_corr", "pminh_half_ph"],
    ["dec_512_32", "snapkv_half"],
    ["dec_256_128", "dec_512_32"],
    ["snapkv_half_dec_512", "dec_512_32"],
]
SETTINGS = {
    "n_boot": 20,
    "seed": 1,
    "confidence": 0.95,
    "contrasts": CONTRASTS,
    "cohort_max_tau": 16,
    "early": [1, 8],
    "late": [33, 48],
    "steps": [8, 32],
}
FIGURES = [name for name in names() if get_result(name).plot is not None]


def synthetic_metrics() -> inputs.Metrics:
    """Two models' metrics of one synthetic study (answers scored at random, so accuracy is drawn too)."""
    parts = []
    for k, model in enumerate(MODELS):
        rng = np.random.default_rng(k)
        hazards = {a: np.clip(e * rng.uniform(0.8, 1.25, 12), 0.0, 1.0) for a, (e, _) in ACTIONS.items()}
        ds = simulate_cube(hazards, 12, 2, HORIZON, seed=10 + k, strata=STRATA, eos_hazard=0.01, model=model)
        parts.append(compute_metrics(ds, window=16))
    rep = pl.concat([p["replicates"] for p in parts])
    correct_y = np.random.default_rng(5).choice([0.0, 1.0], size=rep.height)
    rep = rep.with_columns(
        pl.Series("correct_x", np.ones(rep.height)),
        pl.Series("correct_y", correct_y),
        pl.Series("answer_changed", correct_y != 1.0),
        pl.lit(None, dtype=pl.Int32).alias("answer_end"),
        pl.lit(None, dtype=pl.Boolean).alias("diverged_before_answer"),
    )
    return inputs.Metrics(
        rep, pl.concat([p["profiles_aligned"] for p in parts]), pl.concat([p["profiles_clock"] for p in parts])
    )


@pytest.fixture(scope="module")
def metrics() -> inputs.Metrics:
    return synthetic_metrics()


def figure_data(name: str, metrics: inputs.Metrics):
    """What rule ``figure`` (or ``leaderboard``) hands the plot of result ``name``."""
    frames = get_result(name).build(metrics, **SETTINGS)
    if get_result(name).kind == "leaderboard":
        numbers = frames["numbers"].filter(pl.col("model") == MODELS[0])
        return describe_actions(numbers, {a: spec for a, (_, spec) in ACTIONS.items()})
    return frames


@pytest.fixture
def drawn(monkeypatch):
    """The figures a plot function saves (kept open: ``save_figure`` closes them through ``plt.close``)."""
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    yield figures
    monkeypatch.undo()
    for fig in figures:
        plt.close(fig)


def drawn_texts(fig, monkeypatch) -> list[Text]:
    """The texts matplotlib draws when it renders ``fig`` (visible, non-empty, inside their clip: tick labels
    outside the view limits are not drawn)."""
    seen: list[Text] = []
    original = Text.draw

    def draw(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            seen.append(self)

    with monkeypatch.context() as m:
        m.setattr(Text, "draw", draw)
        fig.canvas.draw()
    return list(dict.fromkeys(seen))


def _overlap(a: Bbox, b: Bbox, tol: float = 0.5) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > tol and min(a.y1, b.y1) - max(a.y0, b.y0) > tol


def _inside(inner: Bbox, outer: Bbox, tol: float = 1.0) -> bool:
    return (
        inner.x0 >= outer.x0 - tol
        and inner.y0 >= outer.y0 - tol
        and inner.x1 <= outer.x1 + tol
        and inner.y1 <= outer.y1 + tol
    )


def _name(t: Text) -> str:
    return repr(t.get_text()[:40])


def legibility_problems(fig, png: Path, dpi: int, monkeypatch) -> list[str]:
    """What makes ``fig`` (saved to ``png`` at ``dpi``) hard to read, one line per problem (module docstring)."""
    problems = []
    width = Image.open(png).size[0]
    if width > MAX_PX:
        problems.append(f"PNG {width} px wide at {dpi} dpi (> {MAX_PX})")
    elif width * DPI_SCHEMA["maximum"] / dpi > MAX_PX + 2:
        problems.append(f"{width * DPI_SCHEMA['maximum'] / dpi:.0f} px wide at the highest dpi {DPI_SCHEMA['maximum']}")
    texts = drawn_texts(fig, monkeypatch)
    renderer = fig.canvas.get_renderer()
    boxes = [(t, t.get_window_extent(renderer)) for t in texts]
    for i, (a, box_a) in enumerate(boxes):
        if not _inside(box_a, fig.bbox):
            problems.append(f"text {_name(a)} outside the figure")
        for b, box_b in boxes[i + 1 :]:
            if _overlap(box_a, box_b):
                problems.append(f"texts {_name(a)} and {_name(b)} overlap")
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    data_axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    for legend in legends:
        assert isinstance(legend, Legend)
        box = legend.get_window_extent(renderer)
        if not _inside(box, fig.bbox):
            problems.append("a legend outside the figure")
        for ax in data_axes:
            if _overlap(box, ax.bbox):
                problems.append(f"a legend ({_name(legend.get_texts()[0])}, ...) over the data of {ax.get_title()!r}")
    bound = 1.25 * max(100, HORIZON)
    for ax in data_axes:
        for axis, lim in (("x", ax.get_xlim()), ("y", ax.get_ylim())):
            scale = ax.get_xscale() if axis == "x" else ax.get_yscale()
            if scale == "linear" and max(abs(v) for v in lim) > bound:
                problems.append(f"{axis} axis of {ax.get_title()!r} runs to {lim[0]:.0f}..{lim[1]:.0f}")
    return problems


@pytest.mark.parametrize("name", FIGURES)
def test_every_registered_figure_is_legible(name, metrics, drawn, monkeypatch, tmp_path):
    dpi = DPI_SCHEMA["default"]
    png = tmp_path / f"{name}.png"
    plot_settings = get_result(name).plot_settings(SETTINGS)
    plot_result(name, figure_data(name, metrics), tmp_path / f"{name}.pdf", png, dpi=dpi, **plot_settings)
    assert len(drawn) == 1 and (tmp_path / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
    problems = legibility_problems(drawn[0], png, dpi, monkeypatch)
    assert not problems, f"{name}: {len(problems)} problems:\n" + "\n".join(problems[:25])


def test_figure4_is_legible(drawn, monkeypatch, tmp_path):
    rng = np.random.default_rng(3)
    shapes = [(2, 8), (3, 6), (4, 5), (5, 4), (8, 3)]
    rows = [
        {
            "vocab": v,
            "horizon": h,
            "eos": bool(k % 2),
            "kind": ("persistent", "history_dependent")[k // 2 % 2],
            "P_diverge": float(rng.uniform(0.02, 0.4)),
            "variance_ratio": float(rng.uniform(10, 300)),
            "evaluation_ratio": float(rng.uniform(1.2, 1.7)),
            "advantage": float(rng.uniform(8, 200)),
        }
        for v, h in shapes
        for k in range(5)
    ]
    paper = pl.DataFrame(
        {
            "quantity": [
                "systems",
                "variance ratio naive/SWRB, min",
                "variance ratio naive/SWRB, median",
                "variance ratio naive/SWRB, max",
                "kernel-pair evaluations SWRB/naive (mean)",
                "variance-cost advantage (ratio of means)",
            ],
            "paper": [24.0, 11.1, 52.7, 289.0, 1.37, 20.0],
            "ours": [25.0, 10.2, 60.1, 297.3, 1.45, 18.2],
        }
    )
    dpi = DPI_SCHEMA["default"]
    plot_figure4(pl.DataFrame(rows), paper, tmp_path / "figure4.pdf", tmp_path / "figure4.png", dpi=dpi)
    problems = legibility_problems(drawn[0], tmp_path / "figure4.png", dpi, monkeypatch)
    assert not problems, "figure4:\n" + "\n".join(problems[:25])


def test_the_leaderboard_key_names_exactly_the_colours_drawn(metrics, drawn, tmp_path):
    """The leaderboard's legend comes from the constants its markers are drawn with: every colour drawn is keyed with
    its meaning, nothing keyed is missing from the markers (its title said "blue: retention ≥ 75%, red: below" over
    grey decoding rows and no blue one)."""
    from matplotlib.colors import to_hex

    from kvdiv.results.leaderboard import RETENTION_CLASSES

    table = figure_data("leaderboard", metrics)
    plot_result("leaderboard", table, tmp_path / "l.pdf", tmp_path / "l.png", dpi=50)
    fig = drawn[0]
    markers = {to_hex(c) for ax in fig.axes for coll in ax.collections for c in coll.get_facecolors()}
    keyed = {to_hex(h.get_color()) for legend in fig.legends for h in legend.legend_handles}
    assert markers == keyed == {c for c, _, _ in RETENTION_CLASSES.values()}  # the synthetic study has all three
    meanings = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert meanings == {meaning for _, _, meaning in RETENTION_CLASSES.values()}
    assert not any(w in fig.get_suptitle() for w in ("blue", "red", "grey"))
    plt.close(fig)
    drawn.clear()
    plot_result(
        "leaderboard", table.filter(pl.col("retention") >= 0.75), tmp_path / "b.pdf", tmp_path / "b.png", dpi=50
    )
    assert [t.get_text() for t in drawn[0].legends[0].get_texts()] == [RETENTION_CLASSES["high"][2]]
