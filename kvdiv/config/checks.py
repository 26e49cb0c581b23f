"""The whole workflow config checked when the workflow starts, whatever it plans (:func:`kvdiv.config.load`, and
rules/common.smk, call :func:`check_config` after the schema has filled its defaults).

Every check runs at start-up (a check in an input function would run only when its job is planned) and raises a
:class:`ConfigError` naming the key (and file, line or value): duplicate YAML keys in every config file read,
references between sections, files on disk (model sources, documents), values against their meaning (windows within
horizons, array sizes), and config shapes that would fail inside Snakemake (colliding rule names, plans too large).
docs/configuration.md lists what is validated.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


from kvdiv.config.files import ConfigError
from kvdiv.config.plan import _studies, study_models, study_strata, trajectory_batches, trajectory_rule_name


#: Most documents one config may plan (all studies): Snakemake's planning grows with its jobs (the smoke config with
#: 4000 documents: 56 s of CPU to plan, 42 s since the document-id lookups are linear; 8000: 169 s, 112 s),
#: so a larger design is refused at once rather than planned for minutes. The paper's design plans 576.
MAX_PLANNED_DOCUMENTS = 4000
#: Most trajectory rules (study × model × document block) one config may define: each is a Snakemake rule.
MAX_TRAJECTORY_RULES = 5000
#: Most values one (replicate, step) array of a per-document store may hold (float32: 400 MB).
MAX_STEP_ARRAY = 10**8
#: Most histories an exact finite-state enumeration may visit (vocab ** (2 horizon) pairs of paths).
MAX_FINITE_PATHS = 10**7


def check_config(config: Mapping, given: Mapping | None = None, *, basedir: str | Path = ".") -> None:
    """Every start-up check of a schema-validated ``config`` (defaults filled). ``given`` is the config as the user
    wrote it (before the defaults): keys checked only when given explicitly (``analysis.contrasts``). Relative
    paths are read from ``basedir`` (the working directory)."""
    given = config if given is None else given
    check_shapes(config, given)
    check_study_seeds(config)
    check_references(config, given)
    check_model_sources(config, basedir)
    check_documents(config, basedir)
    check_windows(config, given)
    check_sizes(config)
    check_decoding_actions(config)
    check_plan(config)
    from kvdiv.config.entries import check_entries  # lists of names: once each, within limits, contrasts that apply

    check_entries(config, given)


def check_shapes(config: Mapping, given: Mapping | None = None) -> None:
    """Sections the rest of the workflow needs non-empty (an empty one would fail inside Snakemake with an
    IndexError or ``max() arg is an empty sequence``); ``analysis.studies`` only when written empty (its default
    holds the results whose default study the config has: none, for a config of its own studies)."""
    for study, spec in (config.get("studies") or {}).items():
        if "models" in spec and not spec["models"]:
            raise ConfigError(f"studies.{study}.models is empty: leave it out (all models) or name at least one model")
        for i, stratum in enumerate(spec["strata"]):
            if "tasks" in stratum and not stratum["tasks"]:
                raise ConfigError(f"studies.{study}.strata[{i}].tasks is empty: leave it out (all tasks of the family)")
    analysis = config.get("analysis") or {}
    if "blocks" in analysis and not analysis["blocks"]:
        raise ConfigError("analysis.blocks is empty: give at least one position block [first, last]")
    if "studies" in ((given or {}).get("analysis") or {}) and not (analysis.get("studies") or {}):
        raise ConfigError("analysis.studies is empty: name the study of at least one figure or table")


def check_study_seeds(config: Mapping) -> None:
    """Two studies with one seed would get the same documents; the design needs independent sets."""
    seen: dict[int, str] = {}
    for study, spec in _studies(config).items():
        other = seen.setdefault(spec["seed"], study)
        if other != study:
            raise ConfigError(
                f"studies {other!r} and {study!r} share seed {spec['seed']}: their document sets would coincide; "
                "give each study its own seed"
            )


def _unknown(names: Iterable[str], known: Mapping) -> list[str]:
    return [name for name in names if name not in known]


def check_references(config: Mapping, given: Mapping) -> None:
    """Every name one section uses of another is configured (the error names the key and what is configured)."""
    models, actions, studies = config["models"], config.get("actions") or {}, config.get("studies") or {}
    for study, spec in studies.items():
        for key, known in (("actions", actions), ("models", models)):
            unknown = _unknown(spec.get(key) or [], known)
            if unknown:
                raise ConfigError(
                    f"studies.{study}.{key}: {', '.join(map(repr, unknown))} not configured "
                    f"(configured {key}: {', '.join(known) or 'none'})"
                )
        strata = study_strata(config, study)
        if len(set(strata)) != len(strata):
            raise ConfigError(f"studies.{study}.strata: a stratum appears twice ({', '.join(strata)})")
        reference = spec.get("reference_tokenizer")
        if reference is not None and reference not in models:
            raise ConfigError(
                f"studies.{study}.reference_tokenizer: {reference!r} is not a configured model "
                f"(models: {', '.join(models)})"
            )
    for model, spec in models.items():
        tokenizer = spec.get("tokenizer")
        if tokenizer is None:
            continue
        if spec["source"] != "random":
            raise ConfigError(f"models.{model}.tokenizer applies to source random only (source is {spec['source']!r})")
        if tokenizer != "bytes" and (tokenizer not in models or tokenizer == model):
            raise ConfigError(
                f"models.{model}.tokenizer: {tokenizer!r} is neither 'bytes' nor another configured model "
                f"(models: {', '.join(models)})"
            )
    for model in models:  # a -> b -> a: resolve_model would wait on itself (CyclicGraphException)
        chain = [model]
        while models[chain[-1]].get("tokenizer") not in (None, "bytes") and models[chain[-1]]["tokenizer"] in models:
            chain.append(models[chain[-1]]["tokenizer"])
            if chain[-1] in chain[:-1]:
                raise ConfigError(f"models.{model}.tokenizer: the tokenizers form a cycle ({' -> '.join(chain)})")
    given_analysis = given.get("analysis") or {}
    analysis = config["analysis"]
    from kvdiv.analysis.inputs import contrast_pairs
    from kvdiv.results.registry import studied  # the registry: every result a study can feed

    for item in analysis["studies"]:
        if item not in studied():
            raise ConfigError(f"analysis.studies.{item}: not a result of kvdiv (results: {', '.join(studied())})")
    for item, study in analysis["studies"].items():
        if study not in studies:
            configured = ", ".join(studies) or "none"
            raise ConfigError(f"analysis.studies.{item}: {study!r} is not a configured study (studies: {configured})")
    for key in ("contrasts", "table3_contrast"):
        if key not in given_analysis:
            continue  # the defaults name the paper's actions; each item uses those its study has
        pairs = analysis[key] if key == "contrasts" else contrast_pairs(analysis[key])
        for i, pair in enumerate(pairs):
            where = f"analysis.{key}" if key != "contrasts" and len(pairs) == 1 else f"analysis.{key}[{i}]"
            unknown = _unknown(pair, actions)
            if unknown:
                raise ConfigError(
                    f"{where} = {list(pair)}: {', '.join(map(repr, unknown))} not a configured action "
                    f"(actions: {', '.join(actions)}); a contrast of unknown actions would be dropped from every figure"
                )
            if pair[0] == pair[1]:
                raise ConfigError(f"{where} = {list(pair)} contrasts an action with itself")
            if not any(s in studies and set(pair) <= set(studies[s]["actions"]) for s in analysis["studies"].values()):
                raise ConfigError(
                    f"{where} = {list(pair)}: no study of analysis.studies runs both actions, so no figure or table "
                    "would show it"
                )
    for action in analysis.get("paper_actions") or {}:
        if action not in actions:
            raise ConfigError(
                f"analysis.paper_actions.{action}: not a configured action (actions: {', '.join(actions) or 'none'})"
            )
    leaderboard = config.get("leaderboard")
    if leaderboard is not None and leaderboard["study"] not in studies:
        raise ConfigError(
            f"leaderboard.study = {leaderboard['study']!r} is not a configured study (studies: {', '.join(studies)})"
        )


def check_model_sources(config: Mapping, basedir: str | Path = ".") -> None:
    """A ``local`` model's directory and a ``gguf`` model's file exist (an error naming the missing path), so a
    changed source never leaves the jobs on the weights resolved from the old one."""
    base = Path(basedir)
    for model, spec in config["models"].items():
        source = spec["source"]
        if source not in ("local", "gguf"):
            continue
        if not spec.get("path"):
            raise ConfigError(f"models.{model}.path is required with source {source}")
        path = base / Path(spec["path"]).expanduser()
        if source == "local":
            if not path.is_dir():
                raise ConfigError(f"models.{model}.path: local model directory {spec['path']} does not exist")
            continue
        if path.is_dir():
            if not spec.get("gguf_file"):
                raise ConfigError(f"models.{model}.path: {spec['path']} is a directory; name the file in gguf_file")
            path = path / spec["gguf_file"]
        if not path.is_file():
            raise ConfigError(f"models.{model}.path: GGUF file {path} does not exist")


#: The placeholders a documents path (or dataset name) may hold, filled per stratum.
DOCUMENT_FIELDS = ("stratum", "family", "length")


def check_placeholders(where: str, text: str) -> None:
    """``text`` uses only the placeholders of :data:`DOCUMENT_FIELDS` (``{{`` and ``}}`` for braces)."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as err:
        raise ConfigError(f"{where} = {text!r}: {err} (write {{{{ and }}}} for literal braces)") from None
    bad = [name for name in fields if name not in DOCUMENT_FIELDS]
    if bad:
        raise ConfigError(
            f"{where} = {text!r}: unknown placeholder {{{bad[0]}}} (filled per stratum: "
            f"{', '.join('{' + f + '}' for f in DOCUMENT_FIELDS)})"
        )


def check_documents(config: Mapping, basedir: str | Path = ".") -> None:
    """Each study's ``documents`` section: ``rendered`` declared for source jsonl, placeholders known, every file
    it reads present (per stratum), and a jsonl file's records complete (one line naming file, line and field)."""
    from kvdiv.documents.loaders import source_file

    for study, spec in _studies(config).items():
        source = spec["documents"]
        kind = source.get("source", "synthetic")
        where = f"studies.{study}.documents"
        if kind == "jsonl" and "rendered" not in source:
            raise ConfigError(
                f"{where}.rendered is required with source jsonl: true if each record's prompt is already the final "
                "chat-templated text, false if it is the user message each model renders itself"
            )
        if kind == "synthetic":
            if source.get("rendered"):
                raise ConfigError(f"{where}.rendered: true does not apply to source synthetic")
            continue
        if kind == "jsonl" and not source.get("path"):
            raise ConfigError(f"{where}.path is required with source jsonl")
        if kind in ("ruler", "helmet") and not (source.get("path") or source.get("dataset")):
            raise ConfigError(f"{where}: source {kind} needs path (a JSONL file) or dataset (a datasets id)")
        for key in ("path", "dataset", "dataset_config"):
            if source.get(key) is not None:
                if kind == "jsonl" and key == "path":
                    continue  # one file for all strata: no placeholders
                check_placeholders(f"{where}.{key}", str(source[key]))
        for stratum in study_strata(config, study):
            path = source_file(source, stratum=stratum)
            if path is None:
                continue
            full = Path(basedir) / path
            if full.is_dir():
                raise ConfigError(f"{where}.path: {path} is a directory, not a JSONL file")
            if not full.is_file():
                raise ConfigError(
                    f"{where}.path: {path} does not exist" + (f" (stratum {stratum})" if kind != "jsonl" else "")
                )
        if kind == "jsonl":
            from kvdiv.documents.loaders import check_own_documents

            try:
                check_own_documents(
                    Path(basedir) / source["path"],
                    strata=study_strata(config, study),
                    n_documents=spec["documents_per_stratum"],
                    rendered=source["rendered"],
                )
            except ValueError as err:
                raise ConfigError(f"{where}: {err}") from None


def check_windows(config: Mapping, given: Mapping | None = None) -> None:
    """Analysis windows and depths within the horizons they index: the blocks, early, late and short windows of
    result that reads them (:func:`check_result_windows`); ``analysis.window`` (a depth L ≤ H − 1 of every
    study, whose metrics all use it); ``analysis.cohort_max_tau`` (a step ≤ H of the items' studies); the
    leaderboard's ``steps`` (≤ H of its study); ``finite_state.window`` (≤ H − 1 of every shape). The depths
    ``analysis.window``, ``cohort_max_tau`` and ``finite_state.window`` are checked when ``given`` (the config as
    written) sets them: a default deeper than a short test study's horizon only saturates (R_L = R_H)."""
    from kvdiv.analysis.verdicts import check_directions

    given = config if given is None else given
    given_analysis, given_finite = given.get("analysis") or {}, given.get("finite_state") or {}

    studies, analysis = _studies(config), config["analysis"]
    horizons = {item: studies[study]["horizon"] for item, study in analysis["studies"].items() if study in studies}
    try:
        check_result_windows(analysis, horizons)
        check_directions(analysis.get("directions") or [], analysis.get("contrasts") or [])
    except ValueError as err:
        raise ConfigError(str(err)) from None
    for study, spec in studies.items():
        deepest = max(spec["horizon"] - 1, 1)
        if "window" in given_analysis and analysis["window"] > deepest:
            raise ConfigError(
                f"analysis.window = {analysis['window']} is deeper than study {study!r} can reach: divergence-aligned "
                f"depths are <= H - 1 = {deepest} (H = studies.{study}.horizon = {spec['horizon']})"
            )
    for item, horizon in horizons.items():
        if "cohort_max_tau" in given_analysis and analysis["cohort_max_tau"] > horizon:
            raise ConfigError(
                f"analysis.cohort_max_tau = {analysis['cohort_max_tau']} is past the horizon H = {horizon} "
                f"of the study "
                f"feeding {item} (studies.{analysis['studies'][item]}.horizon): first-divergence steps are <= H"
            )
    leaderboard = config.get("leaderboard")
    if leaderboard is not None and leaderboard["study"] in studies:
        horizon = studies[leaderboard["study"]]["horizon"]
        late = [h for h in leaderboard.get("steps") or [] if h > horizon]
        if late:
            raise ConfigError(
                f"leaderboard.steps: {late[0]} is past the horizon H = {horizon} of study {leaderboard['study']!r}"
            )
    finite = config.get("finite_state") or {}
    for i, shape in enumerate(finite.get("shapes") or []):
        if "window" in given_finite and finite["window"] > shape["horizon"] - 1:
            raise ConfigError(
                f"finite_state.window = {finite['window']} is deeper than finite_state.shapes[{i}] (horizon "
                f"{shape['horizon']}) can reach: depths are <= horizon - 1"
            )


#: Window settings of the ``analysis`` section and the bound of each against the horizon H of the study feeding a
#: result that reads it: generation positions t ≤ H (offset 0), divergence-aligned depths ℓ = t − τ ≤ H − 1 (offset 1).
WINDOW_SETTINGS = {"blocks": 0, "short_window": 0, "early": 1, "late": 1}


def check_result_windows(analysis: Mapping, horizons: Mapping[str, int]) -> None:
    """The window settings of the ``analysis`` section against the horizon of the study feeding each result that
    reads them (``horizons``: result → H, for the results this config builds)."""
    from kvdiv.analysis.windows import check_window
    from kvdiv.results.registry import get_result

    for key, below in WINDOW_SETTINGS.items():
        if key not in analysis:
            continue
        windows = analysis[key] if key == "blocks" else [analysis[key]]
        for name, horizon in horizons.items():
            if key not in get_result(name).window_keys():
                continue
            what = "positions t <= H" if below == 0 else "depths <= H - 1"
            context = f"{name} uses a study with H = {horizon}: {what}"
            for i, window in enumerate(windows):
                where = f"analysis.{key}[{i}]" if key == "blocks" else f"analysis.{key}"
                check_window(where, window, horizon - below, context)


def check_sizes(config: Mapping) -> None:
    """Arrays the jobs would allocate, bounded where the config alone fixes their size (an ``Allocation failed`` or
    ``array is too big`` inside a job otherwise, naming no key)."""
    for study, spec in _studies(config).items():
        size = spec["horizon"] * spec["replicates"]
        if size > MAX_STEP_ARRAY:
            raise ConfigError(
                f"studies.{study}: horizon × replicates = {spec['horizon']} × {spec['replicates']} = {size:.3g} values "
                f"per array and action, more than {MAX_STEP_ARRAY:.0e} (each store holds several such arrays)"
            )
    finite = config.get("finite_state") or {}
    for i, shape in enumerate(finite.get("shapes") or []):
        paths = shape["vocab"] ** (2 * shape["horizon"])
        if paths > MAX_FINITE_PATHS:
            raise ConfigError(
                f"finite_state.shapes[{i}] = {{vocab: {shape['vocab']}, horizon: {shape['horizon']}}}: "
                f"exact enumeration "
                f"visits vocab^(2 horizon) = {paths:.3g} path pairs, more than {MAX_FINITE_PATHS:.0e}"
            )
    if (
        finite
        and finite["replicates"] * max(s["horizon"] for s in finite.get("shapes") or [{"horizon": 1}]) > MAX_STEP_ARRAY
    ):
        raise ConfigError(
            f"finite_state.replicates = {finite['replicates']}: replicates × horizon exceeds "
            f"{MAX_STEP_ARRAY:.0e} values"
        )


#: Press classes that compress while decoding (kvdiv.kernel.decoding): an action naming one at any depth is checked
#: against its studies' prompts and horizon by :func:`check_decoding_actions`.
DECODING_PRESSES = ("DecodingPress", "CompressionRatioDecodingPress", "PrefillDecodingPress")


def _names_press(spec: Any, names: Iterable[str]) -> bool:
    if isinstance(spec, Mapping):
        return spec.get("press") in names or any(_names_press(v, names) for v in spec.values())
    if isinstance(spec, (list, tuple)):
        return any(_names_press(v, names) for v in spec)
    return False


def check_decoding_actions(config: Mapping) -> None:
    """An action that compresses while decoding must do so within its studies' horizon: its first compression (at
    the end of decode forward ``compression_interval``) must change a law of steps 1..H (interval + 2 ≤ H), and a
    ``DecodingPress``'s ``target_size`` must be below the cache it cuts in some stratum (stratum length + tokens
    generated by its last compression within H), else it measures Q ≡ P. Builds the press (kvpress is imported) only
    for configs that name a decoding press."""
    actions = config.get("actions") or {}
    decoding = [name for name, spec in actions.items() if _names_press(spec, DECODING_PRESSES)]
    if not decoding:
        return
    from kvdiv.kernel.presses.registry import build_press, decoding_press

    for study, spec in _studies(config).items():
        longest = max(s["length"] for s in spec["strata"])
        for name in (a for a in spec["actions"] if a in decoding):
            try:
                part = decoding_press(build_press(actions[name], name))
            except ValueError:
                continue  # the action check names what is wrong with it
            if part is None:
                continue
            interval, horizon = part.compression_interval, spec["horizon"]
            where = f"studies.{study}: action {name!r} ({type(part).__name__})"
            if interval + 2 > horizon:
                raise ConfigError(
                    f"{where} first compresses at the end of decode step compression_interval = {interval}, which "
                    f"changes the law of step {interval + 2} at the earliest, beyond horizon {horizon}: Q ≡ P within "
                    f"the horizon; give a compression_interval of at most {horizon - 2}"
                )
            last = (horizon - 2) // interval * interval  # the last compression that changes a law within H
            target = getattr(part, "target_size", None)
            ratio = "target_compression_ratio" in getattr(part, "__dataclass_fields__", {})
            if not ratio and isinstance(target, int) and target >= longest + last:
                raise ConfigError(
                    f"{where} keeps target_size = {target} entries, at least the longest cache it would cut within "
                    f"horizon {horizon} (longest stratum {longest} + {last} generated tokens): it never evicts "
                    f"anything, Q ≡ P; give a target_size below {longest + last}"
                )


def check_plan(config: Mapping) -> None:
    """The plan Snakemake will build: its size bounded (:data:`MAX_PLANNED_DOCUMENTS`,
    :data:`MAX_TRAJECTORY_RULES`) and every trajectory batch's generated rule name unique."""
    documents = sum(spec["documents_per_stratum"] * len(spec["strata"]) for spec in _studies(config).values())
    if documents > MAX_PLANNED_DOCUMENTS:
        sizes = ", ".join(
            f"studies.{s}: {spec['documents_per_stratum']} × {len(spec['strata'])} strata"
            for s, spec in _studies(config).items()
        )
        raise ConfigError(
            f"documents_per_stratum: the config plans {documents} documents ({sizes}), more than "
            f"{MAX_PLANNED_DOCUMENTS}, the most Snakemake plans in reasonable time (a job per document); split the "
            "design into several configs"
        )
    names: dict[str, tuple[str, str, str]] = {}
    for study in _studies(config):
        for model in study_models(config, study):
            for batch, _ in trajectory_batches(config, study, model):
                name = trajectory_rule_name(study, model, batch)
                other = names.setdefault(name, (study, model, batch))
                if other != (study, model, batch):
                    raise ConfigError(
                        f"study {other[0]!r} with model {other[1]!r} and study {study!r} with model {model!r} give one "
                        f"trajectory rule name {name!r} (batch {batch}): rename a study or a model so that "
                        "'{study}_{model}' differs"
                    )
    if len(names) > MAX_TRAJECTORY_RULES:
        raise ConfigError(
            f"the config defines {len(names)} trajectory rules (study × model × block of documents_per_job documents), "
            f"more than {MAX_TRAJECTORY_RULES}: raise models.*.documents_per_job or models.*.strata_per_job, or plan "
            "fewer documents"
        )
