"""kvdiv from Python: ``kvdiv.compare(model, tokenizer, prompts, actions={...})`` for notebooks and scripts.

It runs exactly what one trajectory job of the workflow runs (:func:`kvdiv.trajectories.job.run_documents`: each
prompt rendered with the tokenizer's chat template, prefilled once, every action coupled to the full-cache reference
chain with the seeds (``seed``, ``study_seed``, prompt id, action, replicate)), writes the per-prompt stores and the
cube as the workflow's rules do (:func:`kvdiv.trajectories.store.build_cube`) in a temporary directory, and hands
back a :class:`Comparison`: the cube as an ``xarray.Dataset``, a per-action summary computed by the workflow's own
metrics and leaderboard code (:mod:`kvdiv.metrics`, :func:`kvdiv.analysis.leaderboard.leaderboard_table`), the
side-by-side view of :mod:`kvdiv.show`, and ``to_zarr``. Same model, prompt, actions and seeds → the same arrays as the
workflow (tests/test_compare.py compares them array for array). Reference: docs/python-api.md.
"""

from __future__ import annotations

import inspect
import shutil
import sys
import tempfile
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvdiv.settings import generation

#: The study name of a comparison's cube (the workflow's cubes carry their study's name).
STUDY = "compare"


def _prompt_id(i: int) -> str:
    return f"prompt-{i:04d}"


def _documents(prompts: Sequence[Any], ids: Sequence[str] | None, tokenizer: Any) -> list[dict[str, Any]]:
    """Each prompt as the trajectory job's document record: a string is a user message (rendered with the chat
    template, as the workflow renders documents), a mapping a documents-JSONL record, a sequence of ints token ids."""
    if isinstance(prompts, (str, Mapping)) or (prompts and isinstance(prompts[0], (int, np.integer))):
        prompts = [prompts]
    if not prompts:
        raise ValueError("compare: no prompts")
    if ids is not None and len(ids) != len(prompts):
        raise ValueError(f"compare: {len(ids)} ids for {len(prompts)} prompts")
    out = []
    for i, prompt in enumerate(prompts):
        doc_id = str(ids[i]) if ids is not None else _prompt_id(i)
        if isinstance(prompt, str):
            if not prompt.strip():
                raise ValueError(f"compare: prompt {i} is empty (a user message of whitespace only)")
            record: dict[str, Any] = {"prompt": prompt, "answer_prefix": "", "rendered": False}
        elif isinstance(prompt, Mapping):
            if "prompt" not in prompt and "prompt_ids" not in prompt:
                raise ValueError(f"compare: prompt {i} is a mapping without 'prompt' (a documents-JSONL record)")
            record = dict(prompt)
        else:
            try:
                record = {"prompt_ids": [int(t) for t in prompt]}
            except (TypeError, ValueError):
                raise ValueError(
                    f"compare: prompt {i} is a {type(prompt).__name__}, not a string, a documents-JSONL record or a "
                    "list of token ids"
                ) from None
            if len(record["prompt_ids"]) < 2:
                raise ValueError(
                    f"compare: prompt {i} has {len(record['prompt_ids'])} token id(s); at least 2 are needed"
                )
        if "prompt_ids" not in record and tokenizer is None:
            raise ValueError(f"compare: prompt {i} is text, which needs a tokenizer (tokenizer=None takes token ids)")
        record["id"] = str(record.get("id", doc_id)) if ids is None else doc_id
        out.append(record)
    return out


def _loaded(
    model: Any, tokenizer: Any, name: str, chat_template: bool, eos_token_ids: Sequence[int] | None, prepack: bool
) -> Any:
    """The :class:`kvdiv.models.loading.LoadedModel` of an in-memory model (no weight hash: not read from files)."""
    import torch

    from kvdiv.models.loading import LoadedModel
    from kvdiv.models.model_files import max_context
    from kvdiv.models.prepacked import is_prepacked, linear_kernel, prepack_linears
    from kvdiv.models.tokenization import eos_token_ids as model_eos, uses_chat_template

    model.eval()
    device = next(model.parameters()).device
    if prepack and device.type == "cpu" and not is_prepacked(model):
        prepack_linears(model)  # as the workflow's load_model (spec prepack: true, the default)
    if eos_token_ids is None:
        if tokenizer is None:
            raise ValueError("compare: tokenizer=None needs eos_token_ids (the tokenizer names the end of turn)")
        eos_token_ids = model_eos(model, tokenizer)
    use_template = tokenizer is not None and uses_chat_template(tokenizer, {"chat_template": chat_template})
    config_max = (
        max_context(model.config, tokenizer, {})
        if tokenizer is not None
        else int(model.config.get_text_config().max_position_embeddings)
    )
    return LoadedModel(
        name=name,
        spec={"source": "in_memory", "chat_template": chat_template},
        model=model,
        tokenizer=tokenizer,
        eos_token_ids=[int(t) for t in eos_token_ids],
        chat_template=use_template,
        device=torch.device(device),
        weight_hash="in-memory (not hashed)",
        max_context=config_max,
        linear_kernel=linear_kernel(model),
    )


def compare(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any] | str,
    actions: Mapping[str, Any],
    *,
    horizon: int | None = None,
    replicates: int | None = None,
    seed: int = 0,
    study_seed: int = 0,
    ids: Sequence[str] | None = None,
    temperature: float | None = None,
    mode: str | None = None,
    evict_first_step: bool | None = None,
    tv_atol: float | None = None,
    reference_chain: str | None = None,
    compress: str | None = None,
    chat_template: bool = True,
    eos_token_ids: Sequence[int] | None = None,
    name: str | None = None,
    prepack: bool = True,
    progress: bool = True,
) -> "Comparison":
    """Couple every action's generations to the full-cache model's on each prompt (the workflow's trajectory job).

    Parameters
    ----------
    model : a loaded transformers causal LM (any device and dtype; kvpress-supported architecture).
    tokenizer : its tokenizer, or None when every prompt is token ids (then give ``eos_token_ids``).
    prompts : a string (a user message, rendered with the tokenizer's chat template as the workflow renders a
        document), a list of token ids, a documents-JSONL record, or a list of these.
    actions : name → a kvpress press instance (yours, kvpress's or kvdiv's) or a config spec ``{press: ..., ...}``.
    horizon, replicates, temperature, mode, evict_first_step, tv_atol, reference_chain, compress : as a study's keys,
        and None (not given) is a study's default (kvdiv/data/schema.yaml: the workflow's); ``compress="context"``
        keeps each prompt's question (its last paragraph, or a record's ``question``) out of compression, as
        kvpress's pipeline.
    seed, study_seed : the master and study seeds; replicate r of action a on prompt i samples from
        ``derive_rng(seed, study_seed, ids[i], a, r)``, exactly as the workflow's trajectory job.
    ids : the prompts' ids (default ``prompt-0000``, ...; a record's own ``id``): part of the seeds.
    prepack : pack a CPU float32 model's Linear layers in place as the workflow does (same bits as its jobs).

    Returns
    -------
    Comparison
    """
    from kvdiv.trajectories.job import run_documents
    from kvdiv.trajectories.store import build_cube, open_cube

    if not actions:
        raise ValueError("compare: no actions")
    given = dict(
        horizon=horizon,
        replicates=replicates,
        temperature=temperature,
        mode=mode,
        evict_first_step=evict_first_step,
        tv_atol=tv_atol,
        reference_chain=reference_chain,
        compress=compress,
    )
    settings = generation(
        master_seed=seed, study_seed=study_seed, **{key: value for key, value in given.items() if value is not None}
    )
    documents = _documents(prompts, ids, tokenizer)
    name = name or (Path(str(getattr(model.config, "_name_or_path", "") or "model")).name or "model")
    loaded = _loaded(model, tokenizer, name, chat_template, eos_token_ids, prepack)
    tmp = tempfile.TemporaryDirectory(prefix="kvdiv-compare-")
    root = Path(tmp.name)
    outs = [root / "trajectories" / f"{i:04d}.zarr" for i in range(len(documents))]
    run_documents(loaded, documents, dict(actions), outs, settings, progress=progress)
    cube = build_cube(STUDY, name, outs, root / "cube.zarr")
    dataset = open_cube(cube).load()
    return Comparison(dataset=dataset, tokenizer=tokenizer, cube=cube, stores=outs, seed=seed, _tmp=tmp)


@dataclass
class PairDisplay:
    """One pair of continuations (x: full cache, y: evicted): ``_repr_html_`` in Jupyter, text elsewhere."""

    view: Any

    def _repr_html_(self) -> str:
        from kvdiv.show.html import pair_html

        return pair_html(self.view)

    def __str__(self) -> str:
        from kvdiv.show.terminal import render_terminal

        return render_terminal(self.view, color=False)

    __repr__ = __str__


@dataclass
class Comparison:
    """The result of :func:`compare`.

    Attributes
    ----------
    dataset : xarray.Dataset
        The workflow's cube schema (docs/internals.md "Cube"): ``x``, ``y``, ``tv``, ``fixed_tv``, ``match``,
        ``eos_x``, ``eos_y`` (+ swrb arrays) with dims (document, action, replicate, step); ``action`` coordinates are
        the names given, ``document`` the prompt ids; the attributes record model, actions, seeds and settings.
    """

    dataset: Any
    tokenizer: Any
    cube: Path
    stores: list[Path]
    seed: int = 0
    _tmp: Any = field(default=None, repr=False)

    @property
    def actions(self) -> list[str]:
        return [str(a) for a in self.dataset["action"].values]

    def metrics(self, window: int = 32) -> dict[str, Any]:
        """The workflow's metric tables of this cube (:func:`kvdiv.metrics.compute_metrics`; ``window``: L)."""
        from kvdiv.metrics import compute_metrics

        return compute_metrics(self.dataset, window=min(window, self.dataset.sizes["step"]))

    def summary(self, *, n_boot: int = 1000, confidence: float = 0.95, steps: Sequence[int] = ()) -> Any:
        """A polars DataFrame, one row per action, by the leaderboard's code
        (:func:`kvdiv.analysis.leaderboard.leaderboard_table`): ``diverged_by_{H}`` = P(τ ≤ H) (and each h of
        ``steps``), ``mean_tau_diverged`` (mean τ among diverged replicates), ``risk`` (R_H), ``exposure`` (E_H),
        ``mismatch_rate`` (C = Π_H/E_H), each with ``_lower``/``_upper``: a cluster bootstrap over the prompts
        (null with a single prompt, where there is nothing to resample)."""
        import polars as pl

        from kvdiv.analysis.inputs import Metrics
        from kvdiv.analysis.leaderboard import leaderboard_table

        tables = self.metrics()
        metrics = Metrics(tables["replicates"], tables["profiles_aligned"], tables["profiles_clock"])
        table = leaderboard_table(metrics, n_boot=n_boot, seed=self.seed, confidence=confidence, steps=list(steps))
        table = table.select(pl.exclude("model", r"^accuracy_.*$"))
        if self.dataset.sizes["document"] < 2:
            table = table.with_columns(
                pl.lit(None, dtype=pl.Float64).alias(c) for c in table.columns if c.endswith(("_lower", "_upper"))
            )
        order = {a: i for i, a in enumerate(self.actions)}
        return table.sort(pl.col("action").replace_strict(order, return_dtype=pl.Int64)).select(
            "action", "rank", "n_documents", pl.exclude("action", "rank", "n_documents")
        )

    def show(self, i: int = 0, action: str | None = None, replicate: int = 0) -> PairDisplay:
        """Prompt ``i``'s pair of continuations under ``action`` (default the first), replicate ``replicate``: the
        view of ``kvdiv show`` (HTML in Jupyter, text in a terminal)."""
        from kvdiv.show.view import load_pair

        if self.tokenizer is None:
            raise ValueError("show: the comparison was made without a tokenizer; nothing can decode its tokens")
        documents = [str(d) for d in self.dataset["document"].values]
        if not 0 <= i < len(documents):
            raise IndexError(f"show: no prompt {i}; the comparison has {len(documents)} (0..{len(documents) - 1})")
        return PairDisplay(
            load_pair(self.cube, action=action, replicate=replicate, document=documents[i], tokenizer=self.tokenizer)
        )

    def to_zarr(self, path: str | Path) -> Path:
        """Write the cube to ``path`` (a kvdiv cube: ``kvdiv.trajectories.store.open_cube``, ``xarray.open_zarr``)."""
        from kvdiv.io import atomic_path

        path = Path(path)
        with atomic_path(path, directory=True) as tmp:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(self.cube, tmp)
        return path


__all__ = ["Comparison", "PairDisplay", "compare"]


class _CallableModule(types.ModuleType):
    """``kvdiv.compare(...)`` calls :func:`compare` also once this module is imported (the package attribute
    ``kvdiv.compare`` is then the module)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Comparison:
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
sys.modules[__name__].__signature__ = inspect.signature(compare)  # help(kvdiv.compare), inspect: compare's own
