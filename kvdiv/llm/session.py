"""Kernel pairs (P, Q) from a real LLM: one prefill, every action's evicted cache, batched decoding.

P is the model with the full prompt cache ("reference"); an action's Q is the same model with the prompt cache
evicted once after prefill by the action's press (persistent eviction), and for a decoding press cut again along each
chain's own history while it generates (:mod:`kvdiv.llm.decoding`). One prefill serves all actions (hooks run
each press on a private capture cache; the reference cache is never mutated); :meth:`KernelSession.step` advances
several chains with different caches in ONE batched forward, with the attention of
:mod:`kvdiv.llm.decode_attention`. What is supported and how: docs/internals.md#kernel-pairs; the kernels'
mathematics (positions, step 1, ``evict_first_step``): docs/estimators.md#kernel-pairs-from-a-model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import torch
from transformers import DynamicCache

from kvdiv.llm.decode_attention import ATTN_IMPLEMENTATION, DecodePart, DecodePlan, SlotCache, planned
from kvdiv.llm.decoding import ChainState, HiddenCapture, match_rows, run_decoding_hooks
from kvdiv.llm.prepacked import min_rows
from kvdiv.llm.presses.logit_bias import clear_logit_bias
from kvdiv.llm.presses.probabilistic_press import ProbabilisticPress, shared_proposals
from kvdiv.llm.presses.registry import build_press, decoding_press

# kvpress after kvdiv.llm.decode_attention (which imports it behind the lazy `datasets` placeholder)
from kvpress import BasePress  # noqa: E402,I001

REFERENCE = "reference"


class _CaptureLayer:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys = keys
        self.values = values


class _CaptureCache:
    """A private stand-in for the prefill cache handed to a press's ``forward_hook``: the press reads the
    reference layer's keys/values from it and writes its compressed ones back into it."""

    def __init__(self, n_layers: int):
        self.layers: list[_CaptureLayer | None] = [None] * n_layers


@dataclass
class _Prefix:
    """A cache's prompt part: per layer keys/values [kv_heads, length, head_dim] and logit bias."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    bias: list[torch.Tensor]  # [kv_heads, length]
    length: int
    position: int  # RoPE position of the next token


@dataclass
class _Chain:
    slot: int
    cache: str
    length: int
    position: int
    done: bool
    decode: ChainState | None = None  # an action with decode-time compression: its per-chain state


def _language_model(model):
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


def _attention_layers(model) -> list[torch.nn.Module]:
    return [layer.self_attn for layer in _language_model(model).layers]


class KernelSession:
    """Kernel pairs of one (model, prompt) for a set of actions; see docs/internals.md "Kernel pairs".

    Parameters
    ----------
    loaded : LoadedModel
        Anything with ``.model`` (a kvpress-supported causal LM in eval mode) and ``.eos_token_ids``.
    prompt_ids : LongTensor [n] or [1, n]
        The prompt's token ids.
    actions : mapping name → action spec or press instance
        ``{press: <name>, **arguments}`` (see :mod:`kvdiv.llm.presses.registry`), or a kvpress press instance (a copy
        is used); "reference" is reserved.
    temperature : float
        Next-token laws are softmax(logits / temperature) in float64.
    evict_first_step : bool
        Evaluate Q at step 1 through the evicted cache (see the module docstring).
    max_chains : int, optional
        Initial number of chain slots (default 2 × (number of caches) + 1); grows on demand.
    horizon : int
        H, the tokens each chain will generate: the initial room per chain (H + 1 slots beyond the longest
        prompt cache and the one of ``evict_first_step``); grows on demand.
    seed_parts : sequence, optional
        (master seed, study seed, document id): random presses (ProbabilisticPress) draw from these and
        the action's name (:meth:`press_seeds` reports the seeds); None keeps each press's own ``seed``.
    compressed_length : int, optional
        ``compress: context`` (kvpress's pipeline): the presses see and compress only the first
        ``compressed_length`` prompt tokens (the context); the rest (the question and answer prefix) is then fed
        token by token through every cache, uncompressed, so Q at step 1 already reads the evicted context.
        None: the whole prompt is compressed (``compress: prompt``).
    """

    def __init__(
        self,
        loaded: Any,
        prompt_ids: torch.Tensor,
        actions: Mapping[str, Mapping[str, Any]],
        temperature: float = 1.0,
        evict_first_step: bool = False,
        max_chains: int | None = None,
        horizon: int = 128,
        seed_parts: Sequence[int | str] | None = None,
        compressed_length: int | None = None,
    ):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if REFERENCE in actions:
            raise ValueError(f"action name {REFERENCE!r} is reserved for the full-cache kernel")
        self.model = loaded.model
        self.eos_token_ids = [int(t) for t in loaded.eos_token_ids]
        if not self.eos_token_ids:
            raise ValueError("loaded.eos_token_ids is empty")
        self.temperature = float(temperature)
        self.evict_first_step = bool(evict_first_step)
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).to(self.device)
        if ids.numel() < 2:
            raise ValueError("the prompt needs at least 2 tokens")
        self.prompt_ids = ids
        self.prompt_length = int(ids.numel())
        self.actions = {name: spec if isinstance(spec, BasePress) else dict(spec) for name, spec in actions.items()}
        # a press instance (kvdiv.compare) is copied: presses keep per-prefill state, one copy per session
        self.presses = {name: copy.deepcopy(spec) if isinstance(spec, BasePress) else build_press(spec, name=name)
                        for name, spec in self.actions.items()}
        if seed_parts is not None:
            for name, press in self.presses.items():
                if isinstance(press, ProbabilisticPress):
                    press.set_document(*seed_parts, action=name)
        self._attn = _attention_layers(self.model)
        self.n_layers = len(self._attn)
        # actions that compress during decoding too (kvpress's DecodingPress, PrefillDecodingPress): their part that does
        self._decoding = {name: part for name, press in self.presses.items()
                          if (part := decoding_press(press)) is not None}
        if getattr(self.model.config.get_text_config(), "attn_logit_softcapping", None) is not None:
            raise NotImplementedError(f"{type(self.model).__name__}: kvdiv decoding does not support attention softcapping")
        # sliding-window layers are supported while every position stays inside the window (then the
        # window never masks anything); step() raises beyond it
        windows = [a.sliding_window for a in self._attn if getattr(a, "sliding_window", None) is not None]
        self._window = min(windows) if windows else None
        self._eos_set = set(self.eos_token_ids)
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        # the absorbing law of a chain that has emitted EOS: the point mass on eos_token_ids[0]
        self._eos_law = torch.zeros(self.vocab_size, dtype=torch.float64)
        self._eos_law[self.eos_token_ids[0]] = 1.0
        # every config object whose attention implementation a decode step switches to kvdiv's
        self._configs = {id(m.config): m.config for m in self.model.modules() if hasattr(m, "config")}
        self._kept_cache: dict[str, list[torch.Tensor | None]] = {}
        self._in_prompt = False
        self._kept_lengths: dict[str, list[int]] = {}

        n_ids = int(ids.numel())
        if compressed_length is not None and not 1 <= int(compressed_length) < n_ids:
            raise ValueError(f"compressed_length {compressed_length} must lie in 1..{n_ids - 1} (prompt of {n_ids} tokens)")
        if compressed_length is not None:
            self._compressed = int(compressed_length)
        else:
            self._compressed = n_ids - 1 if self.evict_first_step else n_ids
        self.compressed_length = self._compressed
        self._prefixes, logits = self._prefill(ids[: self._compressed])
        self.kv_heads = self._prefixes[REFERENCE].keys[0].shape[0]
        self.head_dim = self._prefixes[REFERENCE].keys[0].shape[-1]

        n_caches = 1 + len(self.presses)
        self._capacity = 0
        self._n_slots = 0
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._bias: list[torch.Tensor] = []
        self._free: list[int] = []
        self._chains: dict[int, _Chain] = {}
        self._next_id = 0
        longest = max(p.length for p in self._prefixes.values())
        self._grow(max_chains or 2 * n_caches + 1, longest + 1 + max(int(horizon) + 1, 1))

        if self._compressed == n_ids:
            law = self._law(logits)
            self._initial = {name: law for name in self._prefixes}
        else:
            self._initial = self._feed_prompt_tail(ids[self._compressed:])

    # ------------------------------------------------------------------ prefill
    @torch.no_grad()
    def _prefill(self, prefill_ids: torch.Tensor) -> tuple[dict[str, _Prefix], torch.Tensor]:
        model = self.model
        lm = _language_model(model)
        captures = {name: _CaptureCache(self.n_layers) for name in self.presses}
        masked: dict[str, dict[int, Any]] = {name: {} for name in self.presses}
        for press in self.presses.values():
            press.post_init_from_model(model)
        for attn in self._attn:
            attn.rotary_emb = lm.rotary_emb  # as kvpress's BasePress.__call__ does

        def hook(module, args, kwargs, output):
            cache = kwargs["past_key_values"]
            layer = module.layer_idx
            keys, values = cache.layers[layer].keys, cache.layers[layer].values
            for name, press in self.presses.items():
                capture = captures[name]
                capture.layers[layer] = _CaptureLayer(keys, values)
                module.masked_key_indices = None
                press_kwargs = dict(kwargs)
                press_kwargs["past_key_values"] = capture
                press.forward_hook(module, args, press_kwargs, output)
                if getattr(module, "masked_key_indices", None) is not None:
                    masked[name][layer] = module.masked_key_indices
                module.masked_key_indices = None
                clear_logit_bias(module)  # the session applies a press's correction itself (attention_bias)
            return output

        handles = [attn.register_forward_hook(hook, with_kwargs=True) for attn in self._attn]
        cache = DynamicCache(config=model.config)
        try:
            with shared_proposals():  # actions sharing an attention proposal compute it once per layer
                out = model(input_ids=prefill_ids[None], past_key_values=cache, use_cache=True, logits_to_keep=1)
        finally:
            for h in handles:
                h.remove()
            for attn in self._attn:  # a press may mask other layers than its hook's (global budgets)
                attn.masked_key_indices = None
                clear_logit_bias(attn)
        logits = out.logits[0, -1]
        n = int(prefill_ids.numel())
        ref = _Prefix(
            keys=[layer.keys[0] for layer in cache.layers],
            values=[layer.values[0] for layer in cache.layers],
            bias=[torch.zeros(layer.keys.shape[1], n, dtype=torch.float32, device=self.device) for layer in cache.layers],
            length=n,
            position=n,
        )
        prefixes = {REFERENCE: ref}
        for name, press in self.presses.items():
            keys, values, bias = [], [], []
            for layer in range(self.n_layers):
                cl = captures[name].layers[layer]
                if cl is None:
                    raise RuntimeError(f"action {name!r}: layer {layer} was not captured during prefill")
                k, v = cl.keys[0], cl.values[0]
                b = torch.zeros(k.shape[0], k.shape[1], dtype=torch.float32, device=self.device)
                if layer in masked[name]:
                    batch_idx, head_idx, seq_idx = masked[name][layer]
                    sel = batch_idx == 0
                    b[head_idx[sel].to(self.device), seq_idx[sel].to(self.device)] = float("-inf")
                if isinstance(press, ProbabilisticPress):
                    hb = press.attention_bias(layer)
                    if hb is not None:
                        b = b + hb[0].to(torch.float32)
                keys.append(k)
                values.append(v)
                bias.append(b)
            # presses that keep different numbers of entries per layer (PyramidKV): pad the shorter
            # layers with zero keys/values whose −inf bias gives them exactly zero attention weight
            longest = max(k.shape[1] for k in keys)
            for layer in range(self.n_layers):
                pad = longest - keys[layer].shape[1]
                if pad:
                    keys[layer] = torch.nn.functional.pad(keys[layer], (0, 0, 0, pad))
                    values[layer] = torch.nn.functional.pad(values[layer], (0, 0, 0, pad))
                    bias[layer] = torch.nn.functional.pad(bias[layer], (0, pad), value=float("-inf"))
            prefixes[name] = _Prefix(keys, values, bias, length=longest, position=n)
            self._kept_lengths[name] = [int(cl.keys.shape[2]) for cl in captures[name].layers]
        return prefixes, logits

    @torch.no_grad()
    def _feed_prompt_tail(self, tail: torch.Tensor) -> dict[str, torch.Tensor]:
        """evict_first_step (the last prompt token) or compress: context (the question and answer prefix): feed the
        tail through every cache, one token per batched step; extend each prefix by it."""
        names = list(self._prefixes)
        chains = [self.new_chain(name) for name in names]
        token = int(tail[-1])
        if token in self._eos_set:
            raise ValueError("the prompt ends with an EOS token")
        self._in_prompt = True  # prompt tokens are never absorbing (a chat template's end of turn may be an EOS id)
        try:
            for t in tail[:-1].tolist():
                self.step(chains, [int(t)] * len(chains))
        finally:
            self._in_prompt = False
        laws = self.step(chains, [token] * len(chains))
        initial = {}
        for i, (name, c) in enumerate(zip(names, chains)):
            ch = self._chains[c]
            L = ch.length
            self._prefixes[name] = _Prefix(
                keys=[k[ch.slot, :, :L].clone() for k in self._keys],
                values=[v[ch.slot, :, :L].clone() for v in self._values],
                bias=[b[ch.slot, :, :L].clone() for b in self._bias],
                length=L,
                position=ch.position,
            )
            initial[name] = laws[i]
        self.release(chains)
        if token in self._eos_set:
            raise ValueError("the prompt ends with an EOS token")
        return initial

    # ------------------------------------------------------------------ slots
    def _grow(self, n_slots: int, capacity: int) -> None:
        n_slots, capacity = max(n_slots, self._n_slots), max(capacity, self._capacity)
        if n_slots == self._n_slots and capacity == self._capacity:
            return
        shape = (n_slots, self.kv_heads, capacity, self.head_dim)
        for layer in range(self.n_layers):
            k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            b = torch.full(shape[:3], float("-inf"), dtype=torch.float32, device=self.device)
            if self._n_slots:
                k[: self._n_slots, :, : self._capacity] = self._keys[layer]
                v[: self._n_slots, :, : self._capacity] = self._values[layer]
                b[: self._n_slots, :, : self._capacity] = self._bias[layer]
                self._keys[layer], self._values[layer], self._bias[layer] = k, v, b
            else:
                self._keys.append(k)
                self._values.append(v)
                self._bias.append(b)
        self._free = sorted(set(self._free) | set(range(self._n_slots, n_slots)))
        self._n_slots, self._capacity = n_slots, capacity

    def _take_slot(self) -> int:
        if not self._free:
            self._grow(2 * self._n_slots, self._capacity)
        return self._free.pop(0)

    def _register(self, chain: _Chain) -> int:
        cid = self._next_id
        self._next_id += 1
        self._chains[cid] = chain
        return cid

    def _chain(self, c: int) -> _Chain:
        if c not in self._chains:
            raise KeyError(f"unknown or released chain {c}")
        return self._chains[c]

    # ------------------------------------------------------------------ public API
    @property
    def caches(self) -> list[str]:
        """Cache names: "reference" then the actions."""
        return list(self._prefixes)

    def press_seeds(self) -> dict[str, dict[str, Any]]:
        """Per random (ProbabilisticPress) action: its ``seed``, the document's ``draw_seed`` and the
        ``layer_seeds`` of its samples (the store's ``press_seeds`` attribute)."""
        return {
            name: {"seed": press.seed, "draw_seed": press.draw_seed,
                   "layer_seeds": [press.layer_seed(layer) for layer in range(self.n_layers)]}
            for name, press in self.presses.items()
            if isinstance(press, ProbabilisticPress)
        }

    def initial_probs(self, cache: str = REFERENCE) -> torch.Tensor:
        """[V] float64: the next-token law right after the prompt under ``cache``."""
        if cache not in self._initial:
            raise KeyError(f"unknown cache {cache!r}; caches: {', '.join(self._initial)}")
        return self._initial[cache].clone()

    @torch.no_grad()
    def new_chain(self, cache: str = REFERENCE) -> int:
        """A new chain whose history is the prompt only, decoding with ``cache``."""
        if cache not in self._prefixes:
            raise KeyError(f"unknown cache {cache!r}; caches: {', '.join(self._prefixes)}")
        prefix = self._prefixes[cache]
        slot = self._take_slot()
        L = prefix.length
        for layer in range(self.n_layers):
            self._keys[layer][slot, :, :L] = prefix.keys[layer]
            self._values[layer][slot, :, :L] = prefix.values[layer]
            self._bias[layer][slot].fill_(float("-inf"))
            self._bias[layer][slot, :, :L] = prefix.bias[layer]
        state = ChainState() if cache in self._decoding else None
        return self._register(_Chain(slot, cache, L, prefix.position, False, state))

    @torch.no_grad()
    def fork(self, c: int) -> int:
        """An independent copy of chain ``c`` (same cache and generated history)."""
        src = self._chain(c)
        slot = self._take_slot()
        L = src.length
        for layer in range(self.n_layers):
            self._keys[layer][slot, :, :L] = self._keys[layer][src.slot, :, :L]
            self._values[layer][slot, :, :L] = self._values[layer][src.slot, :, :L]
            self._bias[layer][slot] = self._bias[layer][src.slot]
        state = None if src.decode is None else src.decode.copy()
        return self._register(_Chain(slot, src.cache, L, src.position, src.done, state))

    def release(self, chains: Iterable[int]) -> None:
        """Free the slots of ``chains``."""
        for c in chains:
            ch = self._chains.pop(c, None)
            if ch is not None:
                self._free.append(ch.slot)
        self._free.sort()

    def chain_cache(self, c: int) -> str:
        """The cache name chain ``c`` decodes with."""
        return self._chain(c).cache

    def generated_length(self, c: int) -> int:
        """Number of tokens appended to chain ``c`` (its RoPE position minus the prompt length)."""
        return self._chain(c).position - self.prompt_length

    def is_done(self, c: int) -> bool:
        """Whether chain ``c`` has emitted an EOS token."""
        return self._chain(c).done

    def cache_length(self, c: int) -> int:
        """Entries in chain ``c``'s cache (its longest layer): the prompt cache plus what it appended, less what
        decode-time compression removed."""
        return self._chain(c).length

    def compressions(self, c: int) -> int:
        """How many times decode-time compression has cut chain ``c``'s cache (0 for a prefill-only action)."""
        state = self._chain(c).decode
        return 0 if state is None else state.compressions

    def _law(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.to(torch.float64) / self.temperature, dim=-1).cpu()

    def step(self, chains: Sequence[int], tokens: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Append ``tokens[i]`` to ``chains[i]`` (one batched forward); return their next-token laws.

        Returns [len(chains), V] float64 (CPU). EOS is absorbing: a chain that has emitted any of
        ``eos_token_ids`` gets the point mass on ``eos_token_ids[0]`` and is not run through the model.
        """
        return step_sessions([(self, chains, tokens)])[0]

    @staticmethod
    def step_together(requests: Sequence[tuple["KernelSession", Sequence[int], Sequence[int]]]) -> list[torch.Tensor]:
        """One step of several sessions of one model in one forward (:func:`step_sessions`)."""
        return step_sessions(requests)

    def _prepare(self, chains: Sequence[int], tokens: Sequence[int] | torch.Tensor) -> "_StepPart":
        """Check a step's chains and tokens, absorb EOS, grow the buffers if needed and plan the attention runs."""
        tokens = [int(t) for t in (tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens)]
        if len(tokens) != len(chains):
            raise ValueError(f"{len(chains)} chains but {len(tokens)} tokens")
        if len(set(chains)) != len(chains):
            raise ValueError("a chain appears twice in one step")
        vocab = self.vocab_size
        out = torch.empty(len(chains), vocab, dtype=torch.float64)
        active: list[tuple[int, int, _Chain, int]] = []  # (slot, row in out, chain, token)
        for i, (c, t) in enumerate(zip(chains, tokens)):
            ch = self._chain(c)
            if not 0 <= t < vocab:
                raise ValueError(f"token {t} outside the vocabulary [0, {vocab})")
            if ch.done or (t in self._eos_set and not self._in_prompt):
                ch.done = True
                out[i] = self._eos_law
            else:
                active.append((ch.slot, i, ch, t))
        part = _StepPart(self, out, active, [])
        if not active:
            return part
        if self._window is not None and max(ch.position for _, _, ch, _ in active) >= self._window:
            raise NotImplementedError(
                f"position {max(ch.position for _, _, ch, _ in active)} reaches the model's sliding window "
                f"({self._window}); kvdiv decoding supports sliding-window layers only inside the window"
            )
        if max(ch.length for _, _, ch, _ in active) >= self._capacity:
            self._grow(self._n_slots, self._capacity + 128)
        active.sort(key=lambda a: a[0])
        slots = [a[0] for a in active]
        # runs of consecutive slots whose cache lengths are alike (within ~20 %): one attention call each
        # on buffer views, little padding (a 50 % evicted chain next to a reference chain starts a new run)
        lengths = [a[2].length for a in active]
        start = 0
        for j in range(1, len(active) + 1):
            if (
                j == len(active)
                or slots[j] != slots[j - 1] + 1
                or abs(lengths[j] - lengths[start]) > 0.2 * lengths[start] + 32
            ):
                part.runs.append((start, j, slots[start], slots[j - 1] + 1, max(lengths[start:j]) + 1))
                start = j
        part.slots = torch.tensor(slots, dtype=torch.long, device=self.device)
        part.lengths = torch.tensor(lengths, dtype=torch.long, device=self.device)
        for b in self._bias:
            b[part.slots, :, part.lengths] = 0
        return part


    def _compress_during_decoding(self, part: "_StepPart", row0: int, inputs: dict) -> None:
        """After a decode forward: run each decoding action's hook for its chains (:mod:`kvdiv.llm.decoding`)."""
        for r, (slot, _, ch, _) in enumerate(part.active):
            if ch.decode is None:
                continue
            length = run_decoding_hooks(self._decoding[ch.cache], ch.decode, self._attn, inputs, row0 + r,
                                        ch.position - 1, self._keys, self._values, self._bias, slot, ch.length,
                                        ch.cache)
            if length is not None:
                ch.length = length

    def kept_indices(self, action: str) -> list[torch.Tensor | None]:
        """Per layer, LongTensor [kv_heads, kept] of the prompt positions the action's cache keeps.

        Recovered by matching the action's keys against the reference keys (exact equality); entries are
        in the cache's own order (kvpress's top-k order for scorer presses). Head-wise presses that mask
        entries instead of dropping them report per head the unmasked positions, padded with −1. A layer
        whose keys the press transformed (not a subset of the reference keys) reports None.
        """
        if action not in self.presses:
            raise KeyError(f"unknown action {action!r}; actions: {', '.join(self.presses)}")
        if action in self._kept_cache:
            return self._kept_cache[action]
        press = self.presses[action]
        ref, act = self._prefixes[REFERENCE], self._prefixes[action]
        n = self._compressed
        out: list[torch.Tensor | None] = []
        for layer in range(self.n_layers):
            k_ref = ref.keys[layer][:, :n]
            k_act = act.keys[layer][:, : self._kept_lengths[action][layer]]
            if isinstance(press, ProbabilisticPress) and layer in press.kept_indices:
                idx = press.kept_indices[layer][0].to(k_ref.device)
            else:
                idx = match_rows(k_ref, k_act)
            if idx is not None:
                bias = act.bias[layer][:, : idx.shape[1]]
                masked = torch.isinf(bias) & (bias < 0)
                if masked.any():
                    idx = torch.stack(
                        [torch.cat([h[~m], torch.full((int(m.sum()),), -1, dtype=h.dtype, device=h.device)])
                         for h, m in zip(idx, masked)]
                    )
            out.append(idx)
        self._kept_cache[action] = out
        return out


@dataclass
class _StepPart:
    """One session's rows of a (possibly shared) decode step: ``out`` [chains, V] laws (EOS rows filled),
    ``active`` (slot, row in out, chain, token) of the rows run through the model, sorted by slot."""

    session: KernelSession
    out: torch.Tensor
    active: list[tuple[int, int, _Chain, int]]
    runs: list[tuple[int, int, int, int, int]]
    slots: torch.Tensor | None = None
    lengths: torch.Tensor | None = None


@torch.no_grad()
def step_sessions(
    requests: Sequence[tuple[KernelSession, Sequence[int], Sequence[int] | torch.Tensor]],
) -> list[torch.Tensor]:
    """One decode step of several sessions of ONE model (e.g. one per document) in one batched forward.

    ``requests`` are (session, chains, tokens) as for :meth:`KernelSession.step`; returns each request's
    [len(chains), V] float64 laws. The sessions keep their own buffers, slots and attention runs
    (:class:`kvdiv.llm.decode_attention.DecodePart`), so a session's attention is computed exactly as in a step
    of its own; only the model's dense layers see the rows of all sessions together.
    """
    if not requests:
        return []
    model = requests[0][0].model
    if any(session.model is not model for session, _, _ in requests):
        raise ValueError("step_sessions: every session must decode with the same model object")
    if len({id(session) for session, _, _ in requests}) != len(requests):
        raise ValueError("step_sessions: a session appears twice in one step")
    parts = [session._prepare(chains, tokens) for session, chains, tokens in requests]
    running = [p for p in parts if p.active]
    if not running:
        return [p.out for p in parts]
    plan = DecodePlan(parts=[])
    ids, positions, row = [], [], 0
    for p in running:
        s = p.session
        plan.parts.append(DecodePart(row, row + len(p.active), s._keys, s._values, s._bias, p.slots, p.lengths, p.runs))
        row += len(p.active)
        ids.extend([a[3]] for a in p.active)
        positions.extend([a[2].position] for a in p.active)
    first = running[0].session
    dev = first.device
    # rows whose cache compresses during decoding: their attention inputs are captured for the press's hook
    decoding = {id(p) for p in running if p.session._decoding and not p.session._in_prompt
                and any(a[2].decode is not None for a in p.active)}
    pad = _padding_rows(row, model, dev)
    if pad:
        plan.parts.append(_padding_part(first, row, pad))
        ids.extend([[0]] * pad)
        positions.extend([[0]] * pad)
        row += pad
    pos_t = torch.tensor(positions, dtype=torch.long, device=dev)
    ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
    dummy_mask = torch.zeros(row, 1, 1, 1, dtype=first.dtype, device=dev)
    configs = first._configs
    saved = {k: cfg._attn_implementation for k, cfg in configs.items()}
    capture = HiddenCapture(first._attn if decoding else [])
    with planned(plan), capture:
        try:
            for cfg in configs.values():
                cfg._attn_implementation = ATTN_IMPLEMENTATION
            logits = model(
                input_ids=ids_t,
                position_ids=pos_t,
                past_key_values=SlotCache(plan),
                attention_mask=dummy_mask,
                cache_position=pos_t[0],
                use_cache=True,
            ).logits[:, -1]
        finally:
            for k, cfg in configs.items():
                cfg._attn_implementation = saved[k]
    for p, dp in zip(running, plan.parts):  # (the padding part, if any, comes last and is dropped)
        laws = p.session._law(logits[dp.row0 : dp.row1])
        for r, (_, i, ch, _) in enumerate(p.active):
            ch.length += 1
            ch.position += 1
            p.out[i] = laws[r]
        if id(p) in decoding:
            p.session._compress_during_decoding(p, dp.row0, capture.inputs)
    return [p.out for p in parts]


def _padding_rows(rows: int, model: torch.nn.Module, device: torch.device) -> int:
    """Rows to add to a CPU step of ``rows`` rows so that each row's bits do not depend on how many other rows (actions,
    replicates, documents) share its forward: CPU matrix products change kernels at small row counts (torch 2.13's
    sgemm for 1–3 rows at 1 thread and also 5–7 and 9–11 at 2; packed oneDNN weights for 1 row), so the minimum is
    measured for the model's Linear layers (:func:`kvdiv.llm.prepacked.min_rows`). 0 on accelerators."""
    if device.type != "cpu":
        return 0
    return max(min_rows(model) - rows, 0)


def _padding_part(session: KernelSession, row0: int, n: int) -> DecodePart:
    """``n`` throwaway rows (token 0 at position 0) attending to their own key only, in private one-entry buffers."""
    shape = (n, session.kv_heads, 1, session.head_dim)
    keys = [torch.zeros(shape, dtype=session.dtype, device=session.device) for _ in range(session.n_layers)]
    values = [torch.zeros(shape, dtype=session.dtype, device=session.device) for _ in range(session.n_layers)]
    bias = [torch.zeros(shape[:3], dtype=torch.float32, device=session.device) for _ in range(session.n_layers)]
    slots = torch.arange(n, device=session.device)
    return DecodePart(row0, row0 + n, keys, values, bias, slots, torch.zeros_like(slots), [(0, n, 0, n, 1)])


__all__ = ["KernelSession", "REFERENCE", "step_sessions"]
