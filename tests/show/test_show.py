"""``kvdiv show``: decoded pairs side by side (terminal and HTML), on hand-made arrays, on stores of a tiny random
model (complete and swrb mode, per-document stores and a cube) and on a SmolLM2 store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from kvdiv.cli import main
from kvdiv.trajectories.job import run_document
from kvdiv.models.tokenization import bytes_tokenizer
from kvdiv.show import (
    divergence_picks,
    gallery,
    load_pair,
    pair_view,
    render_html,
    render_terminal,
    token_texts,
    use_color,
)
from kvdiv.show.terminal import SHADES, delta_level
from kvdiv.show.view import PairHeader, first_divergence
from kvdiv.trajectories.store import build_cube, read_document_store
from kvdiv.settings import generation

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
EOS = 2  # the byte tokenizer's <|im_end|>


# --------------------------------------------------------------------------------------------
# Hand-made pairs over the byte tokenizer
# --------------------------------------------------------------------------------------------


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def header(**kw) -> PairHeader:
    base = dict(
        store="s.zarr",
        kind="document",
        model="tiny",
        mode="complete",
        action="evict",
        replicate=0,
        replicates=1,
        document="doc-0",
        info={"task": "niah", "answers": ["4812"]},
    )
    return PairHeader(**{**base, **kw})


def columns(out: str) -> str:
    """The side-by-side rows of a terminal rendering (without the summary and legend)."""
    return "\n".join(line for line in out.splitlines() if " │ " in line)


def hand_pair(tokenizer, **header_kw):
    """x = "Hi é!" then EOS at step 7 and 2 absorbed steps; y = "Hi you!!" then EOS at step 9; τ = 4."""
    x = ids_of(tokenizer, "Hi é!") + [EOS, EOS, EOS]
    y = ids_of(tokenizer, "Hi you!!") + [EOS]
    assert len(x) == len(y) == 9
    tv = np.array([0, 0.004, 0, 0.3, 0.6, 0.6, 0.6, 0.6, 0.6])
    x, y = np.array(x), np.array(y)
    arrays = {
        "x": x,
        "y": y,
        "tv": tv,
        "fixed_tv": tv,
        "match": x == y,
        "eos_x": np.cumsum(x == EOS) > 0,
        "eos_y": np.cumsum(y == EOS) > 0,
    }
    return arrays, pair_view(arrays, tokenizer, header(**header_kw))


def test_token_texts_join_to_the_decode_and_wait_for_a_complete_character():
    tok = bytes_tokenizer()
    ids = ids_of(tok, "é<b>\n日") + [EOS]
    texts = token_texts(tok, ids)
    assert "".join(texts) == tok.decode(ids) == "é<b>\n日<|im_end|>"
    assert texts == ["", "é", "<", "b", ">", "\n", "", "", "日", "<|im_end|>"]  # é: 2 bytes, 日: 3 bytes


def test_pair_view_marks_tau_eos_and_absorbed_steps():
    tok = bytes_tokenizer()
    arrays, view = hand_pair(tok)
    assert view.tau == 4 and view.branch_start is None and view.horizon == 9
    assert view.x.text == tok.decode(arrays["x"].tolist()) and view.y.text == tok.decode(arrays["y"].tolist())
    assert [t.text for t in view.x.tokens][:6] == ["H", "i", " ", "", "é", "!"]
    assert view.x.eos_step == 7 and view.x.absorbed == 2 and [t.step for t in view.x.tokens if t.absorbed] == [8, 9]
    assert view.y.eos_step == 9 and view.y.absorbed == 0 and view.y.tokens[-1].eos
    same = pair_view({**arrays, "y": arrays["x"], "match": np.ones(9, bool), "eos_y": arrays["eos_x"]}, tok, header())
    assert same.tau is None


def test_ids_beyond_the_tokenizer_are_marked_not_fatal():
    """Models with padding rows in their vocabulary can emit ids the tokenizer lacks: decode drops them."""
    tok = bytes_tokenizer()
    arrays, _ = hand_pair(tok)
    x = arrays["x"].copy()
    x[1] = len(tok) + 7
    view = pair_view({**arrays, "x": x, "match": x == arrays["y"]}, tok, header())
    assert view.x.text == tok.decode(x.tolist()) == "H é!" + "<|im_end|>" * 3
    assert not view.x.tokens[1].known and view.x.tokens[1].text == "" and view.tau == 2
    assert view.header.notes and "1 token ids beyond the tokenizer's 259 tokens" in view.header.notes[0]
    out = render_terminal(view, width=80)
    assert f"H[τ][id {len(tok) + 7}] é!" in out
    assert f"id {len(tok) + 7}" in render_html(view)
    with pytest.raises(ValueError, match=r"s.zarr: action 'evict', replicate 0: y holds the negative token id -3"):
        pair_view({**arrays, "y": np.full(9, -3)}, tok, header())


def test_terminal_plain_and_ansi():
    tok = bytes_tokenizer()
    _, view = hand_pair(tok)
    plain = render_terminal(view, color=False, width=80)
    assert "\x1b" not in plain
    assert "Hi [τ]é![EOS][+2 absorbed]" in plain and "Hi [τ]you!![EOS]" in plain
    assert "first divergence: τ = 4" in plain and "answers: 4812" in plain and "task niah" in plain
    assert "x EOS at step 7 (2 absorbed steps after it); y EOS at step 9" in plain
    spark = next(line for line in plain.splitlines() if line.startswith("   1  "))
    assert spark == "   1  ·▁·▄█████"  # δ_t / max δ_t in eighths, · for 0
    colored = render_terminal(view, color=True, width=80)
    assert "\x1b[" in colored
    # colour adds SGR codes and the shading legend, nothing else
    assert ANSI.sub("", colored).startswith(plain)
    assert ANSI.sub("", colored)[len(plain) :].startswith("\nδ_t shading")
    # y's token at step 4 ("y", δ = 0.3) and x's at step 2 ("i", δ = 0.004) carry their level's background
    assert delta_level(0.3) == 4 and delta_level(0.004) == 1 and delta_level(0) == 0 and delta_level(1) == 5
    assert f"\x1b[38;5;16;48;5;{SHADES[3]}my\x1b[0m" in colored
    assert f"\x1b[38;5;16;48;5;{SHADES[0]}mi\x1b[0m" in colored


def test_terminal_swrb_branch_start():
    tok = bytes_tokenizer()
    arrays, _ = hand_pair(tok)
    view = pair_view({**arrays, "branch_start": np.int32(4)}, tok, header(mode="swrb"))
    plain = render_terminal(view, width=80)
    assert "Hi [J][τ]é!" in plain and "Hi [J][τ]you!!" in plain
    assert "swrb: branch start J = 4; steps before J are the common overlap path" in plain
    none = pair_view(
        {**arrays, "y": arrays["x"], "match": np.ones(9, bool), "eos_y": arrays["eos_x"], "branch_start": np.int32(0)},
        tok,
        header(mode="swrb"),
    )
    out = render_terminal(none, width=80)
    assert "J = 0: the overlap path never diverges" in out and "[J]" not in columns(out) and "[τ]" not in columns(out)


def test_terminal_escapes_control_characters_and_wraps_columns():
    tok = bytes_tokenizer()
    x = np.array(ids_of(tok, "\x1b[31mred\u202e" + "w" * 60))
    arrays = {"x": x, "y": x, "tv": np.zeros(x.size), "eos_x": np.zeros(x.size, bool), "eos_y": np.zeros(x.size, bool)}
    out = render_terminal(pair_view(arrays, tok, header()), color=False, width=60)
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[31mred\\u202e" in out
    rows = [line for line in out.splitlines() if " │ " in line]
    assert len(rows) > 3 and all(len(line) <= 60 for line in rows)
    assert {line.index(" │ ") for line in rows} == {(60 - 3) // 2}  # the columns stay aligned


def test_use_color():
    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    assert use_color(Stream(True), "auto", {}) and not use_color(Stream(False), "auto", {})
    assert not use_color(Stream(True), "auto", {"NO_COLOR": "1"}) and use_color(Stream(True), "auto", {"NO_COLOR": ""})
    assert not use_color(Stream(True), "auto", {"TERM": "dumb"})
    assert use_color(Stream(False), "always", {"NO_COLOR": "1"}) and not use_color(Stream(True), "never", {})
    with pytest.raises(ValueError, match="auto, always or never"):
        use_color(Stream(True), "sometimes", {})


class PageParser(HTMLParser):
    """Every tag with its attributes, the text, and the CSS of <style> elements."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.data: list[str] = []
        self.css: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        (self.css if self._in_style else self.data).append(data)


def assert_self_contained(page: str) -> PageParser:
    """No scripts, no external resources of any kind, no event handlers (the page loads nothing)."""
    parser = PageParser()
    parser.feed(page)
    parser.close()
    assert page.startswith("<!DOCTYPE html>")
    tags = {t for t, _ in parser.tags}
    assert not tags & {
        "script",
        "link",
        "iframe",
        "frame",
        "object",
        "embed",
        "img",
        "image",
        "audio",
        "video",
        "source",
        "base",
        "form",
        "use",
        "a",
        "foreignobject",
    }, tags
    for tag, attrs in parser.tags:
        for name, value in attrs.items():
            assert name not in {
                "src",
                "href",
                "xlink:href",
                "srcset",
                "action",
                "formaction",
                "poster",
                "background",
                "data",
                "ping",
            }, (tag, name, value)
            assert not name.startswith("on"), (tag, name)
            assert "url(" not in (value or "").lower(), (tag, name, value)
        if tag == "meta" and "http-equiv" in attrs:
            assert attrs["http-equiv"].lower() == "content-security-policy"
            assert "default-src 'none'" in attrs["content"]
    css = "".join(parser.css).lower()
    assert "url(" not in css and "@import" not in css and "@font-face" not in css
    return parser


def test_html_is_self_contained_and_escapes_hostile_text():
    tok = bytes_tokenizer()
    tok.add_tokens(["<script>", "</script>"])
    script, end = tok.convert_tokens_to_ids(["<script>", "</script>"])
    x = np.array([script] + ids_of(tok, "alert(1)") + [end] + ids_of(tok, '" onload="x') + [EOS, EOS])
    y = x.copy()
    y[15] = ids_of(tok, "Z")[0]  # τ = 16, in the attribute-breaking text
    arrays = {
        "x": x,
        "y": y,
        "tv": np.full(x.size, 0.2),
        "match": x == y,
        "eos_x": np.cumsum(x == EOS) > 0,
        "eos_y": np.cumsum(y == EOS) > 0,
    }
    hostile = header(
        info={"task": "<b>t</b>", "answers": ["</p><script>alert(2)</script>"]},
        action="<i>a</i>",
        document="<img src=http://x/>",
    )
    view = pair_view(arrays, tok, hostile)
    assert view.x.tokens[0].text == "<script>" and view.tau == 16
    page = render_html(view)
    parser = assert_self_contained(page)
    assert "<script>" not in page and "&lt;script&gt;" in page
    text = "".join(parser.data)
    assert "<script>alert(1)</script>" in text  # shown as text, not run
    assert "</p><script>alert(2)</script>" in text and "<img src=http://x/>" in text
    assert not [t for t, _ in parser.tags if t in ("b", "i")]
    tau_spans = [a for t, a in parser.tags if t == "span" and a.get("class") == "mk tau"]
    assert len(tau_spans) == 3  # legend, x, y
    assert len([a for t, a in parser.tags if t == "span" and a.get("class") == "mk eos"]) == 3  # legend, x, y


def test_divergence_picks_exact():
    tau = np.array([[5, 0, 9], [2, 5, 0], [0, 0, 12]])  # (document, replicate); 0 = no divergence
    # diverged, sorted by (τ, document, replicate): (1,0,2) (0,0,5) (1,1,5) (0,2,9) (2,2,12) -> median rank 2
    assert divergence_picks(tau) == {"earliest": (1, 0, 2), "median": (1, 1, 5), "latest": (2, 2, 12)}
    assert divergence_picks(np.zeros((3, 2), int)) == {}
    assert divergence_picks(np.array([[0, 7]])) == {"earliest": (0, 1, 7), "median": (0, 1, 7), "latest": (0, 1, 7)}
    assert first_divergence(np.array([[True, False, False], [True, True, True]])).tolist() == [2, 0]


# --------------------------------------------------------------------------------------------
# Stores of a tiny random model (byte tokenizer)
# --------------------------------------------------------------------------------------------

ACTIONS = {
    "snapkv_90": {"press": "SnapKVPress", "compression_ratio": 0.9, "window_size": 8},
    "recent_90": {"press": "StreamingLLMPress", "compression_ratio": 0.9, "n_sink": 0},
    "keep_all": {"press": "StreamingLLMPress", "compression_ratio": 0.0, "n_sink": 0},
}
H, R = 32, 6  # tiny stores: horizon and replicates
PROMPT = "The key for the blue door is 4812. Remember it. " * 3 + "What is the key for the blue door?"


def document(i: int, family: str) -> dict:
    return {
        "id": f"st-{family}_64-{i:04d}",
        "family": family,
        "task": "niah",
        "stratum": f"{family}_64",
        "target_length": 64,
        "prompt": PROMPT + " " * i,
        "answer_prefix": "Answer:",
        "rendered": False,
        "answers": ["4812"],
        "n_tokens": 0,
        "tokenizer": "tiny",
        "seed": i,
    }


@pytest.fixture(scope="module")
def tiny_stores(tiny_llama, tmp_path_factory):
    """{"complete" | "swrb" | "complete_1": per-document store, "cube": cube of the two complete ones}."""
    out = tmp_path_factory.mktemp("show")
    stores = {}
    for key, mode, doc in (
        ("complete", "complete", document(0, "ruler")),
        ("swrb", "swrb", document(0, "ruler")),
        ("complete_1", "complete", document(1, "helmet")),
    ):
        stores[key] = run_document(
            tiny_llama,
            doc,
            ACTIONS,
            out / f"{key}.zarr",
            generation(master_seed=2, study_seed=2, horizon=H, replicates=R, temperature=1.0, mode=mode),
            progress=False,
        )
    stores["cube"] = build_cube("st", tiny_llama.name, [stores["complete"], stores["complete_1"]], out / "cube.zarr")
    return stores


def test_views_of_every_pair_decode_the_stored_ids(tiny_llama, tiny_stores):
    tok = tiny_llama.tokenizer
    models_dir = tiny_llama.path.parent
    ended = 0
    for kind in ("complete", "swrb"):
        _, data = read_document_store(tiny_stores[kind])
        diverged = 0
        for action, arrays in data.items():
            for r in range(R):
                view = load_pair(tiny_stores[kind], action=action, replicate=r, models_dir=models_dir)
                for chain, ids, eos in (
                    (view.x, arrays["x"][r], arrays["eos_x"][r]),
                    (view.y, arrays["y"][r], arrays["eos_y"][r]),
                ):
                    assert chain.text == tok.decode(ids.tolist()) == "".join(t.text for t in chain.tokens)
                    assert chain.ids == ids.tolist()
                    assert chain.eos_step == (int(np.argmax(eos)) + 1 if eos.any() else None)
                mismatch = np.flatnonzero(arrays["x"][r] != arrays["y"][r])
                assert view.tau == (int(mismatch[0]) + 1 if mismatch.size else None)
                np.testing.assert_array_equal(view.tv, arrays["tv"][r])
                if kind == "swrb":
                    assert view.branch_start == int(arrays["branch_start"][r])
                    assert view.tau == (view.branch_start or None)  # the residual draws at J always differ
                plain = columns(render_terminal(view, width=120))
                assert plain.count("[τ]") == (2 if view.tau else 0)
                assert plain.count("[J]") == (2 if view.branch_start else 0)
                assert plain.count("[EOS]") == (view.x.eos_step is not None) + (view.y.eos_step is not None)
                diverged += view.tau is not None
                ended += (view.x.eos_step is not None) + (view.y.eos_step is not None)
                if action == "keep_all":
                    assert view.tau is None and not view.tv.any()
        assert diverged, kind  # 90% eviction makes some evicted chains diverge
    assert ended  # and some chains end within H


def test_cube_document_selection(tiny_llama, tiny_stores):
    models_dir = tiny_llama.path.parent
    doc = document(1, "helmet")["id"]
    view = load_pair(tiny_stores["cube"], action="recent_90", replicate=R - 1, document=doc, models_dir=models_dir)
    _, data = read_document_store(tiny_stores["complete_1"])
    assert view.x.ids == data["recent_90"]["x"][R - 1].tolist() and view.y.ids == data["recent_90"]["y"][R - 1].tolist()
    assert view.header.kind == "cube" and view.header.document == doc and view.header.document_index == 1
    assert view.header.info["task"] == "niah" and view.header.info["stratum"] == "helmet_64"
    out = render_terminal(view, width=100)
    assert f"document {doc} (2 of 2 in the cube)" in out and "answers: not in the cube" in out
    first = load_pair(tiny_stores["cube"], models_dir=models_dir)
    assert first.header.document == document(0, "ruler")["id"] and first.header.action == "snapkv_90"


def test_cli_plain_colour_html_and_errors(tiny_llama, tiny_stores, tmp_path, capsys, monkeypatch):
    models_dir = str(tiny_llama.path.parent)
    store = str(tiny_stores["swrb"])
    assert main(["show", store, "--models-dir", models_dir, "--action", "recent_90"]) == 0
    plain = capsys.readouterr().out
    assert "\x1b" not in plain and "mode swrb" in plain and "action recent_90" in plain  # not a terminal: no colour
    assert main(["show", store, "--models-dir", models_dir, "--action", "recent_90", "--color", "always"]) == 0
    colored = capsys.readouterr().out

    def lines(text):  # the colour codes may close after a line's trailing blank (a padded cell): compare line text
        return [line.rstrip() for line in text.rstrip("\n").splitlines()]

    assert "\x1b[" in colored and lines(ANSI.sub("", colored))[: len(lines(plain))] == lines(plain)
    out = tmp_path / "pair.html"
    assert (
        main(
            [
                "show",
                str(tiny_stores["cube"]),
                "--models-dir",
                models_dir,
                "--document",
                document(1, "helmet")["id"],
                "--html",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert_self_contained(out.read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written atomically

    def error(*argv):
        assert main(["show", *argv, "--models-dir", models_dir]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kvdiv: error: ") and err.count("\n") == 1
        return err

    assert f"{store}: no action 'nope'; its actions: snapkv_90, recent_90, keep_all" in error(store, "--action", "nope")
    assert f"{store}: action 'snapkv_90' has no replicate {R}: the store has {R} (0..{R - 1})" in error(
        store, "--replicate", str(R)
    )
    assert "is the store of document 'st-ruler_64-0000', not 'other'" in error(store, "--document", "other")
    cube = str(tiny_stores["cube"])
    assert f"{cube}: no document 'other'; its documents: st-ruler_64-0000, st-helmet_64-0001" in error(
        cube, "--document", "other"
    )
    assert main(["show", store, "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot load the tokenizer of its model '{tiny_llama.name}'" in err and "--models-dir" in err


def test_a_corrupt_store_is_an_error_naming_it(tiny_llama, tiny_stores, tmp_path, capsys):
    import shutil

    store = tmp_path / "broken.zarr"
    shutil.copytree(tiny_stores["complete"], store)
    (store / "recent_90" / "y" / "c" / "0" / "0").unlink()
    assert main(["show", str(store), "--models-dir", str(tiny_llama.path.parent)]) == 2
    assert f"{store}: array 'recent_90/y' has 0 of its 1 chunks" in capsys.readouterr().err


def test_cli_end_to_end_in_a_subprocess(tiny_llama, tiny_stores):
    """The console entry point: stdout is a pipe, so plain text; NO_COLOR does not override --color always."""
    argv = [
        sys.executable,
        "-m",
        "kvdiv.cli",
        "show",
        str(tiny_stores["complete"]),
        "--models-dir",
        str(tiny_llama.path.parent),
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")
    proc = subprocess.run(argv + ["--color", "always"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" in proc.stdout and "x · full cache" in ANSI.sub("", proc.stdout)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "x · full cache" in proc.stdout


def test_gallery_page(tiny_llama, tiny_stores):
    cube = tiny_stores["cube"]
    page = gallery(cube, models_dir=tiny_llama.path.parent)
    parser = assert_self_contained(page)
    headings = [d for d in parser.data if d in ACTIONS]
    assert headings == list(ACTIONS)
    text = "".join(parser.data)
    assert f"No pair diverged ({2 * R} pairs" in text  # keep_all evicts nothing
    _, first = read_document_store(tiny_stores["complete"])
    _, second = read_document_store(tiny_stores["complete_1"])
    for action in ("snapkv_90", "recent_90"):
        tau = first_divergence(np.stack([first[action]["match"], second[action]["match"]]))
        diverged = np.sort(tau[tau > 0])
        assert diverged.size, action
        assert (
            f"{diverged.size} of {2 * R} (document, replicate) pairs diverged; τ earliest {diverged[0]}, "
            f"median {diverged[(diverged.size - 1) // 2]}, latest {diverged[-1]}"
        ) in text


# --------------------------------------------------------------------------------------------
# SmolLM2
# --------------------------------------------------------------------------------------------


def test_token_texts_on_smollm2_multibyte_text(smollm2):
    tok = smollm2.tokenizer
    ids = ids_of(tok, "naïve café — 😀 日本語 ﬁn\n\tend")
    texts = token_texts(tok, ids)
    assert "".join(texts) == tok.decode(ids) and not any("\ufffd" in t for t in texts)
    assert "" in texts  # the emoji (4 bytes) spans byte-level tokens


@pytest.mark.parametrize("mode", ["complete", "swrb"])
def test_smollm2_store(smollm2, tmp_path, mode):
    doc = {
        **document(0, "ruler"),
        "task": "niah_single_noise_number",
        "tokenizer": "smollm2",
        "prompt": "Remember: the special magic number for blue-door is 4812. " * 2
        + "What is the special magic number for blue-door?",
    }
    actions = {"recent_90": {"press": "StreamingLLMPress", "compression_ratio": 0.9, "n_sink": 0}}
    store = run_document(
        smollm2,
        doc,
        actions,
        tmp_path / "smol.zarr",
        generation(master_seed=1, study_seed=2, horizon=8, replicates=1, mode=mode),
        progress=False,
    )
    _, data = read_document_store(store)
    view = load_pair(store, models_dir=REPO / "results" / "models")
    for chain, name in ((view.x, "x"), (view.y, "y")):
        ids = data["recent_90"][name][0].tolist()
        assert chain.text == smollm2.tokenizer.decode(ids) == "".join(t.text for t in chain.tokens)
    mismatch = np.flatnonzero(data["recent_90"]["x"][0] != data["recent_90"]["y"][0])
    assert view.tau == (int(mismatch[0]) + 1 if mismatch.size else None)
    if mode == "swrb":
        assert view.branch_start == int(data["recent_90"]["branch_start"][0])
    plain = render_terminal(view, width=100)
    assert "answers: 4812" in plain and "task niah_single_noise_number" in plain
    assert_self_contained(render_html(view))


def test_gallery_of_a_swrb_store_marks_the_branch_start(tiny_llama, tiny_stores):
    page = gallery(tiny_stores["swrb"], models_dir=tiny_llama.path.parent, actions=["recent_90"])
    parser = assert_self_contained(page)
    branch = [a for t, a in parser.tags if t == "span" and a.get("class") == "mk branch"]
    tau = [a for t, a in parser.tags if t == "span" and a.get("class") == "mk tau"]
    assert len(branch) == len(tau) > 1  # legend + x and y of each pair shown; J = τ in swrb mode
    assert "steps before J are the common overlap path" in "".join(parser.data)


def test_html_never_overwrites_a_store_a_results_tree_or_a_foreign_file(tiny_llama, tiny_stores, tmp_path, capsys):
    """`--html STORE/zarr.json` destroyed a store; `--html results/report.md` replaced the report; `--html ''`
    printed to stdout. Each is refused before anything is read or written, naming the path."""
    import shutil

    models_dir = str(tiny_llama.path.parent)
    store = tmp_path / "copy.zarr"
    shutil.copytree(tiny_stores["complete"], store)
    before = (store / "zarr.json").read_bytes()

    def refused(target, *extra):
        assert main(["show", str(store), "--models-dir", models_dir, "--html", str(target), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("kvdiv: error: --html")
        return captured.err

    assert "inside the zarr store" in refused(store / "zarr.json")
    assert "inside the zarr store" in refused(store / "zarr.json", "--force")
    assert (store / "zarr.json").read_bytes() == before
    report = tmp_path / "results" / "report.md"
    report.parent.mkdir()
    report.write_text("# the report\n")
    assert "inside the results tree" in refused(report, "--force")
    assert report.read_text() == "# the report\n"
    assert "needs a file path" in refused("")
    notes = tmp_path / "notes.html"
    notes.write_text("<p>mine</p>")
    assert "is not a page kvdiv wrote" in refused(notes)
    assert notes.read_text() == "<p>mine</p>"
    assert "is a directory" in refused(tmp_path)
    # an earlier kvdiv page is replaced; a foreign file only with --force
    page = tmp_path / "pair.html"
    for argv in ([str(page)], [str(page)], [str(notes), "--force"]):
        assert main(["show", str(store), "--models-dir", models_dir, "--html", *argv]) == 0
    capsys.readouterr()
    assert notes.read_text().startswith("<!DOCTYPE html>") and page.read_text() == notes.read_text()


def test_terminal_wraps_at_word_boundaries():
    """A line breaks after a space, not inside a word; a word longer than a line is cut; markers move whole."""
    from kvdiv.show.terminal import wrap_runs

    text = "the quick brown fox jumps over the lazy dog"
    lines = ["".join(t for t, _ in line) for line in wrap_runs([(text, "", False)], 12)]
    assert lines == ["the quick ", "brown fox ", "jumps over ", "the lazy dog"]
    assert all(len(line) <= 12 for line in lines) and "".join(lines) == text
    shaded = [("the qu", "1", False), ("ick brown", "2", False), ("[EOS]", "eos", True)]
    lines = wrap_runs(shaded, 8)
    assert ["".join(t for t, _ in line) for line in lines] == ["the ", "quick ", "brown", "[EOS]"]
    assert lines[1] == [("qu", "1"), ("ick ", "2")]  # styles kept across the moved word
    assert ["".join(t for t, _ in line) for line in wrap_runs([("abcdefghijkl mn", "", False)], 5)] == [
        "abcde",
        "fghij",
        "kl mn",
    ]


def test_cube_views_and_galleries_show_question_and_answers_from_the_documents(tiny_llama, tiny_stores, tmp_path):
    """A cube in the workflow's tree: the documents beside it give the question and gold answers (was "answers: not
    in the cube")."""
    import json
    import shutil

    study = tmp_path / "results" / "st"
    shutil.copytree(tiny_stores["cube"], study / "cube" / "tiny.zarr")
    doc = {
        **document(1, "helmet"),
        "prompt": "A long haystack.\n\nWhat is the special magic number?",
        "answers": ["77"],
    }
    (study / "documents" / "helmet_64").mkdir(parents=True)
    (study / "documents" / "helmet_64" / f"{doc['id']}.json").write_text(json.dumps(doc) + "\n")
    view = load_pair(study / "cube" / "tiny.zarr", document=doc["id"], models_dir=tiny_llama.path.parent)
    out = render_terminal(view, width=100)
    assert "question: What is the special magic number?" in out and "answers: 77" in out
    assert "not in the cube" not in out
    page = gallery(study / "cube" / "tiny.zarr", models_dir=tiny_llama.path.parent)
    assert "What is the special magic number?" in page and "answers: 77" in page
    # without documents beside it, the cube still says where the answers are
    bare = render_terminal(load_pair(tiny_stores["cube"], document=doc["id"], models_dir=tiny_llama.path.parent))
    assert "answers: not in the cube" in bare
