"""Documents: offline RULER- and HELMET-style long-context prompts at token-exact lengths.

Modules: :mod:`~kvdiv.documents.vocabulary` (word material), :mod:`~kvdiv.documents.needles`,
:mod:`~kvdiv.documents.variable_tracking`, :mod:`~kvdiv.documents.word_frequency`, :mod:`~kvdiv.documents.json_kv`,
:mod:`~kvdiv.documents.record_recall`, :mod:`~kvdiv.documents.story`, :mod:`~kvdiv.documents.register`,
:mod:`~kvdiv.documents.passage` (the task generators; :mod:`~kvdiv.documents.base`: what they share, the item count of
long answers), :mod:`~kvdiv.documents.registry` (tasks by name and family), :mod:`~kvdiv.documents.length`
(token-budget search), :mod:`~kvdiv.documents.generate` (documents and JSONL files), :mod:`~kvdiv.documents.render` (a
document's message → the prompt one model is fed), :mod:`~kvdiv.documents.scoring` (RULER / HELMET metrics, the
recalls of long answers) and :mod:`~kvdiv.documents.loaders` (the real RULER / HELMET data, when a user has it).
"""

from kvdiv.documents.generate import Document, document_seed, generate_prompt, generate_stratum, read_jsonl, write_jsonl
from kvdiv.documents.length import LengthError, count_tokens, tolerance
from kvdiv.documents.registry import FAMILY_TASKS, TASKS, family_tasks, get_task
from kvdiv.documents.render import prompt_token_ids, render_prompt
from kvdiv.documents.scoring import score, string_match_all, string_match_part, substring_exact_match
from kvdiv.layout import parse_stratum, stratum_name

__all__ = [
    "Document",
    "FAMILY_TASKS",
    "LengthError",
    "TASKS",
    "count_tokens",
    "document_seed",
    "family_tasks",
    "generate_prompt",
    "generate_stratum",
    "get_task",
    "parse_stratum",
    "prompt_token_ids",
    "read_jsonl",
    "render_prompt",
    "score",
    "stratum_name",
    "string_match_all",
    "string_match_part",
    "substring_exact_match",
    "tolerance",
    "write_jsonl",
]
