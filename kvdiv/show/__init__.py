"""Showing continuations: one pair of a trajectory store (x: full cache, y: evicted) decoded side by side.

Modules: :mod:`~kvdiv.show.view` (arrays + tokenizer → :class:`PairView`; reading a verified store),
:mod:`~kvdiv.show.terminal` (ANSI or plain text), :mod:`~kvdiv.show.html` (a self-contained page),
:mod:`~kvdiv.show.gallery` (per action the earliest, median and latest divergence on one page); the ``kvdiv show``
sub-command is :mod:`kvdiv.cli.show`.
"""

from kvdiv.show.gallery import divergence_picks, gallery, write_gallery
from kvdiv.show.html import render_html, write_html
from kvdiv.show.terminal import render_terminal, use_color
from kvdiv.show.view import Chain, PairHeader, PairView, Token, load_pair, pair_view, read_store, token_texts

__all__ = [
    "Chain",
    "PairHeader",
    "PairView",
    "Token",
    "divergence_picks",
    "gallery",
    "load_pair",
    "pair_view",
    "read_store",
    "render_html",
    "render_terminal",
    "token_texts",
    "use_color",
    "write_gallery",
    "write_html",
]
