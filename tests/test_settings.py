"""kvdiv.config's typed settings: checked once, defaults only in the schema, a library call couples as the workflow."""

from __future__ import annotations

import copy
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvdiv.config import files, loading
from kvdiv.settings import generation, schema
from kvdiv.settings import STUDY_KEYS, DocumentRequest, Generation, Runtime
from support.toy_kernels import ToyKernelSession, history_kernel, mixture_kernel
from kvdiv.trajectories.generate import generate, generate_documents
from kvdiv.trajectories.job import run_documents

REPO = Path(__file__).resolve().parents[1]
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())


def _validated(config: dict) -> dict:
    config = copy.deepcopy(config)
    files.validate(config)
    return config


def test_library_defaults_are_the_schema_defaults():
    """generation() with nothing given is a study's settings with every key left to the schema."""
    config = _validated(SMOKE)
    study = next(iter(config["studies"]))
    for key in STUDY_KEYS:  # a study that gives none of them
        config["studies"][study].pop(key, None)
    files.validate(config)
    from_workflow = Generation.from_study(config, study)
    assert generation(master_seed=from_workflow.master_seed, study_seed=from_workflow.study_seed) == from_workflow
    properties = schema()["properties"]["studies"]["additionalProperties"]["properties"]
    assert generation().tv_atol == properties["tv_atol"]["default"] == 1e-6


def test_no_second_default_in_the_library():
    """No library signature carries its own horizon or tv_atol default (the schema's are the only ones)."""
    pattern = re.compile(r"\b(horizon: int|tv_atol: float) = ")
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in (REPO / "kvdiv").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
    import kvdiv.compare  # noqa: F401  (the package attribute is then the callable module, as users see it)

    from kvdiv.kernel.session import KernelSession

    # one way in: each entry point takes the Generation, required, and no setting as a keyword of its own
    for function in (generate, generate_documents, run_documents, KernelSession):
        parameters = inspect.signature(function).parameters
        assert parameters["generation"].default is inspect.Parameter.empty, function.__name__
        assert not {"horizon", "tv_atol", "temperature", "replicates"} & set(parameters), function.__name__
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()), function.__name__
    assert inspect.signature(kvdiv.compare).parameters["tv_atol"].default is None


def test_a_library_call_couples_as_the_workflow():
    """generation() (the schema's defaults, as kvdiv.compare builds one) gives what the workflow's Generation of a
    default study gives, value for value; tv_atol = 0 (exact) differs where a δ is below the default tolerance; the
    library's entry points take the Generation only (no second way in)."""
    eos = 0
    ref = history_kernel(4, seed=3)
    close = mixture_kernel(ref, history_kernel(4, seed=4), 1e-8)  # δ ≈ 1e-8: below the default tolerance
    kernels = {"a": mixture_kernel(ref, history_kernel(4, seed=4), 0.5), "b": close}
    s_workflow, s_library, s_exact = (
        ToyKernelSession(ref, kernels, eos_token_ids=[eos], evict_first_step=True) for _ in range(3)
    )
    config = _validated(SMOKE)
    study = next(iter(config["studies"]))
    g = Generation.from_study(config, study).replace(horizon=6, replicates=3, master_seed=1, study_seed=2)
    kwargs = dict(document_id="doc", eos_token_ids=[eos], progress=False)
    a = generate(s_workflow, ["a", "b"], g, **kwargs)
    b = generate(s_library, ["a", "b"], generation(horizon=6, replicates=3, master_seed=1, study_seed=2), **kwargs)
    for action in ("a", "b"):
        for name in ("x", "y", "tv", "fixed_tv"):
            np.testing.assert_array_equal(getattr(a[action], name), getattr(b[action], name))
    assert np.all(a["b"].tv == 0) and np.any(a["a"].tv > 0)
    exact = generate(s_exact, ["a", "b"], g.replace(tv_atol=0.0), **kwargs)
    assert np.any(exact["b"].tv > 0)  # exact coupling: the tiny δ counts
    with pytest.raises(TypeError, match="unexpected keyword argument 'horizon'"):
        generate(s_library, ["a"], g, horizon=6, **kwargs)
    with pytest.raises(TypeError, match="unknown generation setting.*horizn"):
        generation(horizn=6)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"horizon": 0}, "horizon must be an integer >= 1"),
        ({"horizon": 2.5}, "horizon must be an integer"),
        ({"replicates": True}, "replicates must be an integer"),
        ({"temperature": 0.0}, "temperature must be a finite number > 0"),
        ({"temperature": float("nan")}, "temperature must be a finite number"),
        ({"mode": "full"}, "mode must be one of complete, swrb"),
        ({"evict_first_step": 1}, "evict_first_step must be true or false"),
        ({"tv_atol": 0.9}, r"tv_atol must be a number in \[0, 0.001\]"),
        ({"tv_atol": -1e-9}, "tv_atol must be a number"),
        ({"reference_chain": "one"}, "reference_chain must be one of shared, per_action"),
        ({"compress": "all"}, "compress must be one of prompt, context"),
        ({"master_seed": "7"}, "master_seed must be an integer"),
    ],
)
def test_generation_refuses_values_against_their_meaning(change, message):
    with pytest.raises(ValueError, match=message):
        generation(**change)


def test_swrb_records_its_own_reference_chain():
    g = generation(mode="swrb", reference_chain="shared")
    assert g.effective_reference_chain == "per_action" and not g.shared_reference
    assert generation().shared_reference


def test_runtime_is_not_part_of_a_model():
    model, runtime = Runtime.split({"source": "random", "threads": 2, "documents_per_job": 4, "dtype": "float32"})
    assert model == {"source": "random", "dtype": "float32"} and runtime == Runtime(threads=2, documents_per_job=4)
    with pytest.raises(ValueError, match="documents_per_job must be an integer >= 1"):
        Runtime(threads=1, documents_per_job=0)
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        Runtime(threads=0, documents_per_job=1)


def test_document_request_checks_its_range():
    base = dict(
        study="s",
        stratum="ruler_768",
        first=0,
        count=2,
        master_seed=1,
        study_seed=2,
        model="m",
        model_spec={},
        source={"source": "synthetic"},
        horizon=8,
        tasks=["niah"],
    )
    assert DocumentRequest(**base).tasks == ("niah",)
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        DocumentRequest(**{**base, "count": 0})
    with pytest.raises(ValueError, match="first must be an integer >= 0"):
        DocumentRequest(**{**base, "first": -1})


def test_load_reads_validates_and_checks(tmp_path):
    """kvdiv.config.load: the one loader (the CLI's and the workflow's checks): merged files, defaults, checks."""
    config = loading.load(REPO / "config/smoke.yaml", basedir=REPO)
    assert config["studies"][next(iter(config["studies"]))]["tv_atol"] == 1e-6  # a default filled
    override = tmp_path / "override.yaml"
    override.write_text("analysis:\n  bootstrap: 17\n")
    merged = loading.load(REPO / "config/smoke.yaml", override, basedir=REPO)
    assert (
        merged["analysis"]["bootstrap"] == 17 and merged["analysis"]["confidence"] == config["analysis"]["confidence"]
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("analysis:\n  bootsrap: 7\n")
    with pytest.raises(files.ConfigError, match="bad.yaml.*bootsrap"):
        loading.load(REPO / "config/smoke.yaml", bad, basedir=REPO)
    with pytest.raises(files.ConfigError, match="does not exist"):
        loading.load(tmp_path / "nowhere.yaml")


def test_rule_params_are_values_snakemake_compares():
    """Generation and DocumentRequest travel as rule params: Snakemake records only builtin values' reprs (any other
    object is unrepresentable, and its change would rerun nothing), so both are named tuples whose repr holds every
    field; they are checked on construction, on replace and after a pickle round trip."""
    import pickle

    from snakemake.persistence import UNREPRESENTABLE, PersistenceBase

    from kvdiv.settings import DocumentRequest, generation

    g = generation(horizon=8)
    request = DocumentRequest("s", "ruler_512", 0, 2, 1, 2, "tiny", {"a": 1}, {"kind": "synthetic"}, 8, ["t"])
    for value in (g, request):
        serialized = PersistenceBase._serialize_param_builtin(None, value)
        assert serialized is not UNREPRESENTABLE and serialized == repr(value)
        assert pickle.loads(pickle.dumps(value)) == value and type(pickle.loads(pickle.dumps(value))) is type(value)
    assert repr(g) != repr(g.replace(horizon=9)) and "horizon=8" in repr(g)
    assert request.tasks == ("t",) and request.replace(first=1).first == 1
    with pytest.raises(ValueError, match="horizon"):
        g.replace(horizon=0)
    with pytest.raises(ValueError, match="count"):
        request._replace(count=0)
