"""Every snakemake and kvdiv command in README.md and in the config files' headers parses as meant: Snakemake's
``--configfile`` takes several values, so ``--configfile c.yaml TARGET`` swallows the target (the README's
trajectories_smollm2 line crashed with IsADirectoryError). Each command goes through the real argument parser."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INLINE = re.compile(r"`((?:snakemake|kvdiv) [^`]+)`")
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b")
HEADER = re.compile(r"^#.*?\b((?:snakemake|kvdiv) --?\S.*?)(?:\s{2,}|\s*\(|$)", re.M)


def split(line: str) -> list[list[str]]:
    """The snakemake/kvdiv commands of one shell line (comments dropped, `&&` and `;` split)."""
    words = shlex.split(line, comments=True)
    commands, current = [], []
    for word in [*words, "&&"]:
        if word in ("&&", ";", "||", "|"):
            if current and current[0] in ("snakemake", "kvdiv"):
                commands.append(current)
            current = []
        else:
            current.append(word)
    return commands


def fenced_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced code block of a Markdown text (any language)."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def readme_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        for block in fenced_blocks(text):
            for line in block:
                if not line.strip().startswith(("snakemake ", "kvdiv ")):
                    continue  # a directory tree or output, not a command
                found += [(f"{path.name}: {line.strip()}", cmd) for cmd in split(line)]
        for span in INLINE.findall(text):
            if not ("/" in span or " --" in span) or PLACEHOLDER.search(span) or "..." in span or "|" in span:
                continue  # a name in prose or a usage pattern (`kvdiv show STORE`), not a command to run
            found += [(f"{path.name}: `{span}`", cmd) for cmd in split(span)]
    for path in [*sorted((REPO / "config").glob("*.yaml")), *sorted((REPO / "profiles").rglob("*.yaml"))]:
        for match in HEADER.findall(path.read_text()):
            found += [(f"{path.relative_to(REPO)}: {match.strip()}", cmd) for cmd in split(match)]
    return found


COMMANDS = readme_commands()


def test_the_readme_has_commands_to_check():
    names = [cmd[0] for _, cmd in COMMANDS]
    assert names.count("snakemake") >= 8 and names.count("kvdiv") >= 5
    assert any("trajectories_smollm2.yaml" in " ".join(cmd) for _, cmd in COMMANDS)


@pytest.mark.parametrize("where, argv", [c for c in COMMANDS if c[1][0] == "snakemake"], ids=lambda v: str(v)[:90])
def test_snakemake_commands_parse_with_their_targets(where, argv):
    from snakemake.cli import get_argument_parser

    args = get_argument_parser().parse_args(argv[1:])
    for config in args.configfile or []:
        assert Path(config).suffix == ".yaml" and (REPO / config).is_file(), (
            f"{where}: --configfile takes {config} (a target swallowed? write --configfile=FILE or the target first)"
        )
    for target in args.targets or []:
        assert not str(target).endswith(".yaml"), f"{where}: {target} is a config given as a target"
    if args.profile or getattr(args, "workflow_profile", None):
        profile = args.workflow_profile or args.profile
        assert (REPO / profile).is_dir(), f"{where}: no profile {profile}"


@pytest.mark.parametrize("where, argv", [c for c in COMMANDS if c[1][0] == "kvdiv"], ids=lambda v: str(v)[:90])
def test_kvdiv_commands_parse(where, argv):
    from kvdiv.cli import build_parser

    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as err:
        pytest.fail(f"{where}: kvdiv's parser refuses it (exit {err.code})")
    assert callable(args.func)
