"""The start-up check of the actions in a process of its own, each step that runs the user's code within a wall-time
budget (config ``time_budget.press_import``): it imports the user's ``press_modules`` files and builds every
action's press (:func:`kvdiv.kernel.presses.registry.validate_action`, ``check_evicts``), then judges every action at
every stratum of its studies (:func:`kvdiv.config.actions.check_degenerate`), so a press file whose import never
returns, or a press whose ``__post_init__`` never does, stops the workflow with an error naming the file or the action
instead of hanging ``snakemake -n`` (docs/security.md). The workflow's own process imports neither kvpress nor the
files.

``python -m kvdiv.config.action_check`` reads ``{"config": ..., "press_modules": [...]}`` (JSON) on stdin and prints
a :data:`STEP` line before each file and action, then :data:`OK` or an :data:`ERROR` line (its message JSON-encoded).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from kvdiv.config.files import ConfigError

STEP, ERROR, OK = "KVDIV-STEP:", "KVDIV-ERROR:", "KVDIV-OK"
#: The step that imports kvpress (installed code: not bounded by the budget, which is for the user's code).
IMPORT_STEP = "importing kvpress (kvdiv.kernel.presses.registry)"
#: The config key of the budget.
KEY = "time_budget.press_import"


def check_in_subprocess(config: Mapping[str, Any], press_modules: Sequence[str], budget_s: float) -> None:
    """Run :func:`main` in a fresh Python process (the working directory and environment of this one), each of its
    steps that runs the user's code (importing one press file, building one action's press) within ``budget_s``
    seconds; its error, or the step it was in when the budget ran out, is a :class:`ConfigError`."""
    request = json.dumps({"config": dict(config), "press_modules": list(press_modules)}, default=str)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvdiv.config.action_check"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[str] = []
    threading.Thread(target=_pump, args=(proc.stdout, lines.put, True), daemon=True).start()
    threading.Thread(target=_pump, args=(proc.stderr, errors.append, False), daemon=True).start()
    try:
        proc.stdin.write(request)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    step, error, ok = None, None, False
    while True:
        try:
            line = lines.get(timeout=budget_s if step is not None and step != IMPORT_STEP else None)
        except queue.Empty:
            proc.kill()
            proc.wait()
            raise ConfigError(
                f"{step} did not finish within {budget_s:g} s ({KEY}): an import or a press that never returns? "
                f"(raise {KEY} if it only needs longer)"
            ) from None
        if line is None:
            break
        if line.startswith(STEP):
            step = line[len(STEP) :].strip()
        elif line.startswith(ERROR):
            error = json.loads(line[len(ERROR) :])
        elif line.strip() == OK:
            ok = True
    code = proc.wait()
    if error is not None:
        raise ConfigError(error)
    if code != 0 or not ok:
        tail = " | ".join("".join(errors).strip().splitlines()[-3:])
        raise ConfigError(
            f"{step or 'the start-up check of the actions'} ended the checking process (exit code {code}): "
            f"{tail or 'no message'}"
        )


def _pump(stream: Any, put: Any, end: bool) -> None:
    """Hand each line of ``stream`` to ``put``, then None if ``end``."""
    for line in stream:
        put(line)
    if end:
        put(None)


_STEPS: list[str] = []


def _step(text: str) -> None:
    _STEPS.append(text)
    print(f"{STEP} {text}", flush=True)


def check(config: Mapping[str, Any], press_modules: Sequence[str]) -> None:
    """Import ``press_modules``, build every action's press, then judge each at each stratum of its studies, printing
    a :data:`STEP` line before each step."""
    actions = config.get("actions") or {}
    _step(IMPORT_STEP)
    from kvdiv.kernel.presses.registry import check_evicts, load_press_modules, validate_action

    for path in press_modules:
        _step(f"press_modules: importing {str(path)!r}")
        load_press_modules([path])  # errors name the file (and the class of a clash)
    for name, spec in actions.items():
        _step(f"actions.{name}: building its press")
        try:
            validate_action(spec, name)  # unknown or unrunnable presses (registry.UNRUNNABLE), bad arguments
            check_evicts(spec, name)  # a press that evicts nothing measures Q = P
        except ValueError as err:
            raise ValueError(f"actions.{name}: {err}") from None
    _step("actions: each judged at each stratum of its studies (kvdiv.config.actions)")
    from kvdiv.config.actions import check_degenerate

    check_degenerate(config)  # every (study, action, stratum): the action is itself (kvdiv.kernel.presses.degenerate)


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        check(request["config"], request["press_modules"])
    except ValueError as err:
        print(f"{ERROR} {json.dumps(str(err))}", flush=True)
        return 1
    except BaseException as err:  # the user's code: SystemExit, KeyboardInterrupt, anything
        step = _STEPS[-1] if _STEPS else "the start-up check of the actions"
        print(f"{ERROR} {json.dumps(f'{step}: {type(err).__name__}: {err}')}", flush=True)
        return 1
    print(OK, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
