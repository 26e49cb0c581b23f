"""kvdiv.codehash: a rule's code hash covers exactly the kvdiv modules its script runs (transitive imports,
packages above them, data files they name), found from the sources, so no rule can miss a module it imports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvdiv.codehash import PACKAGE_DIR, closure, code_files, code_hash, imported_modules

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = REPO_ROOT / "workflow_scripts"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def toy(tmp_path):
    """A small package named kvdiv with a chain a -> b (inside a function) -> pkg.c -> data file, and an unrelated d."""
    pkg = tmp_path / "kvdiv"
    write(pkg / "__init__.py", '"""toy"""\n')
    write(pkg / "a.py", "from kvdiv import b\n")
    write(pkg / "b.py", "def f():\n    from kvdiv.pkg.c import VALUE\n    return VALUE\n")
    write(pkg / "pkg" / "__init__.py", "")
    write(pkg / "pkg" / "c.py", "from . import e\nVALUE = 'data/table.yaml'\n")
    write(pkg / "pkg" / "e.py", "import numpy\n")
    write(pkg / "d.py", "import kvdiv.io_like\n")
    write(pkg / "data" / "table.yaml", "x: 1\n")
    script = write(tmp_path / "scripts" / "job.py", "from kvdiv.a import *\n")
    return pkg, script


def test_closure_follows_function_level_relative_imports_and_packages(toy):
    pkg, script = toy
    assert closure([script], pkg) == ["kvdiv", "kvdiv.a", "kvdiv.b", "kvdiv.pkg", "kvdiv.pkg.c", "kvdiv.pkg.e"]
    assert closure(["kvdiv.d"], pkg) == ["kvdiv", "kvdiv.d"]  # a name that is no kvdiv module is left out
    names = {p.relative_to(pkg).as_posix() for p in code_files([script], pkg)}
    assert "data/table.yaml" in names and "d.py" not in names


def test_editing_a_module_changes_exactly_the_hashes_that_run_it(toy):
    pkg, script = toy
    before = {"job": code_hash(script, package_dir=pkg), "d": code_hash("kvdiv.d", package_dir=pkg)}
    write(pkg / "pkg" / "e.py", "import numpy  # edited\n")
    assert code_hash(script, package_dir=pkg) != before["job"]
    assert code_hash("kvdiv.d", package_dir=pkg) == before["d"]
    job = code_hash(script, package_dir=pkg)
    write(pkg / "data" / "table.yaml", "x: 2\n")  # a data file the closure names
    assert code_hash(script, package_dir=pkg) != job


def test_unknown_module_is_an_error(toy):
    pkg, _ = toy
    with pytest.raises(KeyError, match="kvdiv.nope"):
        closure(["kvdiv.nope"], pkg)


def test_every_rule_hashes_its_own_script():
    """Each rule's `code` param hashes the script the rule runs (a rule cannot hash another's code): script_code() of
    it, or for a result's jobs its script and its own result's module (get_result_code), or for the report its script
    and every result (get_report_code)."""
    rules = 0
    for smk in sorted((REPO_ROOT / "rules").glob("*.smk")):
        for block in re.split(r"(?m)^(?=rule )", smk.read_text())[1:]:
            name = block.split(":", 1)[0].removeprefix("rule ")
            script = re.search(r'script:\s*"\.\./workflow_scripts/([\w.]+)"', block)
            code = re.findall(r"code=(.*),\n", block)
            if script is None:
                continue
            rules += 1
            allowed = [
                f'script_code("{script.group(1)}")',
                f'lambda wildcards: get_result_code("{script.group(1)}", wildcards.item)',
                f'lambda wildcards: get_result_code("{script.group(1)}", "leaderboard")',
            ]
            if script.group(1) == "report.py":
                allowed.append("get_report_code()")
            assert len(code) == 1 and code[0] in allowed, f"rule {name}: code param {code}"
    assert rules >= 10


def test_every_workflow_script_imports_resolve():
    """Every kvdiv import of a workflow script names a module or an attribute of one."""
    for script in sorted(SCRIPTS.glob("*.py")):
        assert closure([script]), script
        assert all(name.startswith("kvdiv") for name in imported_modules(script))


def test_real_package_closure_is_inside_kvdiv():
    files = code_files(sorted(SCRIPTS.glob("*.py")))
    assert all(PACKAGE_DIR in f.parents for f in files)


def rule_closure(script: str) -> set[str]:
    return set(closure([SCRIPTS / script]))


def test_the_rules_closures_follow_the_imports():
    """What hand-kept lists used to miss is in: the figure rule runs kvdiv.analysis (the figures import its names),
    the document rule runs kvdiv.models (tokenizers and chat templates, not the weights' loading); and what a rule does
    not run stays out."""
    figure = set(closure([SCRIPTS / "figure.py", "kvdiv.results.figure5"]))  # the figure job of Figure 5
    assert {"kvdiv.analysis", "kvdiv.analysis.inputs", "kvdiv.results.figure5", "kvdiv.outputs.style"} <= figure
    assert "kvdiv.results.figure6" not in figure
    document = rule_closure("document.py")
    assert {
        "kvdiv.models.model_files",
        "kvdiv.models.tokenization",
        "kvdiv.documents.render",
        "kvdiv.layout",
    } <= document
    assert "kvdiv.models.loading" not in document  # a block loads the tokenizer only, in a process without torch
    trajectories = rule_closure("trajectories.py")
    assert {
        "kvdiv.kernel.session",
        "kvdiv.kernel.decode_attention",
        "kvdiv.kernel.presses.probabilistic_press",
        "kvdiv.trajectories.swrb",
        "kvdiv.estimands",
        "kvdiv.documents.render",
    } <= trajectories
    assert not {
        m
        for m in rule_closure("metrics.py") | rule_closure("cube.py")
        if m.startswith(("kvdiv.models", "kvdiv.kernel", "kvdiv.analysis"))
    }
    # an analysis job hashes its script and its result's builders: no drawing, no report, no other result
    analysis = set(closure([SCRIPTS / "analysis.py", "kvdiv.analysis.decomposition", "kvdiv.analysis.timing"]))
    assert not {
        m
        for m in analysis
        if m.startswith(("kvdiv.models", "kvdiv.kernel", "kvdiv.trajectories", "kvdiv.outputs.style", "kvdiv.results."))
        and m not in ("kvdiv.results.registry", "kvdiv.results.base")
    }
    report = {p.relative_to(PACKAGE_DIR).as_posix() for p in code_files([SCRIPTS / "report.py"])}
    assert "data/paper_reported_values.yaml" in report and "results/report.py" in report
