"""The task registry: every synthetic task by name, and the tasks of each family.

Adding a task: write a builder ``(rng, target_length) -> Instance`` (see :mod:`kvdiv.documents.base`)
and register it in :data:`TASKS` (and in a family's list in :data:`FAMILY_TASKS` to include it in the
default cycle).
"""

from __future__ import annotations

from functools import partial

from kvdiv.documents.base import Task
from kvdiv.documents.json_kv import build_json_kv
from kvdiv.documents.needles import NEEDLE_LIST_TASKS, NEEDLE_TASKS, build_needle_list, build_needle_task
from kvdiv.documents.passage import build_passage_editing
from kvdiv.documents.record_recall import build_record_recall
from kvdiv.documents.register import build_register_listing
from kvdiv.documents.story import build_story_retelling
from kvdiv.documents.variable_tracking import build_variable_tracking, build_variable_tracking_list
from kvdiv.documents.word_frequency import build_common_words, build_common_words_list, build_frequent_words

TASKS: dict[str, Task] = {
    name: Task(name, partial(build_needle_task, cfg), "all", description)
    for name, (cfg, description) in NEEDLE_TASKS.items()
}
TASKS["variable_tracking"] = Task(
    "variable_tracking", build_variable_tracking, "all", "follow a 4-hop chain of VAR assignments in filler text"
)
TASKS["common_words"] = Task("common_words", build_common_words, "all", "the 10 recurring words of a list")
TASKS["frequent_words"] = Task("frequent_words", build_frequent_words, "all", "the 3 most frequent coded words")
TASKS["json_kv"] = Task("json_kv", build_json_kv, "subem", "the value under a UUID key in a JSON object of UUIDs")
TASKS.update(
    {
        name: Task(name, partial(build_needle_list, cfg), "all", description)
        for name, (cfg, description) in NEEDLE_LIST_TASKS.items()
    }
)
TASKS["variable_tracking_list"] = Task(
    "variable_tracking_list",
    build_variable_tracking_list,
    "all",
    "every assignment of a VAR chain, in order (25 hops at 2048 tokens; a distractor chain interleaved)",
)
TASKS["common_words_list"] = Task(
    "common_words_list",
    build_common_words_list,
    "all",
    "every word recurring 2-4 times in a list, with its count (25 at 2048 tokens)",
)
TASKS["story_retelling"] = Task(
    "story_retelling", build_story_retelling, "ordered", "retell every event of a story in order (25 at 2048 tokens)"
)
TASKS["register_listing"] = Task(
    "register_listing",
    build_register_listing,
    "ordered",
    "list every entry of a register with its three fields, in order (25 at 2048 tokens)",
)
TASKS["passage_editing"] = Task(
    "passage_editing",
    build_passage_editing,
    "rouge_l",
    "rewrite a letter in full with a character renamed and a place replaced (25 sentences at 2048 tokens)",
)
TASKS["record_recall"] = Task(
    "record_recall",
    build_record_recall,
    "all",
    "every one of 24 codes of a register, in order: a long answer (decode-time compression)",
)

#: The tasks each family cycles through by default: tasks with complete, enumerated answers that run past H = 128
#: tokens (SmolLM2-135M-Instruct reaches H without EOS in most full-cache chains at 2048 tokens:
#: benchmarks/answer_lengths.md). The short-answer tasks (single needles, json_kv, the classic multi-value and
#: aggregation tasks) and niah_multivalue_list (whose SmolLM2 lists end early more often) stay available through a
#: stratum's ``tasks``.
FAMILY_TASKS: dict[str, tuple[str, ...]] = {
    "ruler": (
        "niah_multikey_list",
        "variable_tracking_list",
        "common_words_list",
    ),
    "helmet": (
        "story_retelling",
        "register_listing",
        "passage_editing",
    ),
}


def get_task(name: str) -> Task:
    """The task called ``name``; an unknown name is an error listing the known ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown document task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None


def family_tasks(family: str, tasks: list[str] | tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The tasks a stratum of ``family`` cycles through (``tasks`` if given, checked against the registry)."""
    if family not in FAMILY_TASKS:
        raise ValueError(f"unknown document family {family!r}; known families: {', '.join(FAMILY_TASKS)}")
    if not tasks:
        return FAMILY_TASKS[family]
    for name in tasks:
        get_task(name)
    return tuple(tasks)
