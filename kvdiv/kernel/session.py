"""Kernel pairs (P, Q) from a real LLM: one prefill, every action's evicted cache, batched decoding.

P is the model with the full prompt cache ("reference"); an action's Q is the same model with the prompt cache
evicted once after prefill by the action's press (persistent eviction), and for a decoding press cut again along each
chain's own history while it generates (:mod:`kvdiv.kernel.decoding`). One prefill serves all actions (hooks run
each press on a private capture cache; the reference cache is never mutated); :meth:`KernelSession.step` advances
several chains with different caches in ONE batched forward, with the attention of
:mod:`kvdiv.kernel.decode_attention`. What is supported and how: docs/internals.md#kernel-pairs; the kernels'
mathematics (positions, step 1, ``evict_first_step``): docs/estimators.md#kernel-pairs-from-a-model.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping, Sequence

import torch

from kvdiv.kernel.attention_switch import model_configs
from kvdiv.kernel.batched_step import step_sessions
from kvdiv.kernel.chain_slots import PRIVATE, TAIL, Chain, Chains, ChainSlots
from kvdiv.kernel.decoding import ChainState, Entries, real_entries, run_decoding_hooks
from kvdiv.kernel.prefill import REFERENCE, Prefix, attention_layers, prefill_caches
from kvdiv.kernel.presses.own_scores import watch_own_scores
from kvdiv.kernel.presses.protocol import SeededPress
from kvdiv.kernel.presses.registry import build_press, decoding_press
from kvdiv.kernel.shared_prompt import SharedPrompt, kept_positions, pack_prompt, packs_prompt, share_prompt
from kvdiv.kernel.step_plan import StepPart, plan_step
from kvdiv.settings import Generation
from kvdiv.watchdog import doing, press_label

#: Where a session keeps its caches (the model spec's ``kv_layout``): ``shared`` (default) the document's prompt K/V
#: once, each action a bias over it where its cache is a subset of the reference's (:mod:`kvdiv.kernel.shared_prompt`),
#: a slot per chain for what follows the prompt; ``slots`` a whole copy of its cache per chain (kvdiv before issue 40:
#: laws differ from ``shared`` by float round-off only).
LAYOUTS = ("shared", "slots")

# kvpress after kvdiv.kernel.decode_attention (which imports it behind the lazy `datasets` placeholder)
from kvpress import BasePress  # noqa: E402,I001


class KernelSession:
    """Kernel pairs of one (model, prompt) for a set of actions; see docs/internals.md "Kernel pairs".

    Parameters
    ----------
    loaded : LoadedModel
        Anything with ``.model`` (a kvpress-supported causal LM in eval mode) and ``.eos_token_ids``; its ``.spec``'s
        ``kv_layout`` (:data:`LAYOUTS`, default ``shared``) says how the caches are kept.
    prompt_ids : LongTensor [n] or [1, n]
        The prompt's token ids.
    actions : mapping name → action spec or press instance
        ``{press: <name>, **arguments}`` (see :mod:`kvdiv.kernel.presses.registry`; ``kept_entries``: the ratio keeping
        that many of the entries compressed), or a kvpress press instance (a copy is used); "reference" is reserved.
        Own presses' scores are checked on every call (:mod:`kvdiv.kernel.presses.own_scores`).
    generation : Generation
        The study's settings (:class:`kvdiv.settings.Generation`): next-token laws are softmax(logits / its
        ``temperature``) in float64; ``evict_first_step`` evaluates Q at step 1 through the evicted cache (module
        docstring); ``horizon`` H is the initial room per chain (H + 1 slots beyond the longest prompt cache and the
        one of ``evict_first_step``; grows on demand); its seeds with ``document_id`` seed random presses.
    document_id : str, optional
        The document's id: random presses (:class:`~kvdiv.kernel.presses.protocol.SeededPress`: ProbabilisticPress,
        or a press of your own) draw from ``generation.seed_parts(document_id)`` and the action's name
        (:meth:`press_seeds` reports the seeds); None keeps each press's own ``seed``.
    max_chains : int, optional
        Initial number of chain slots (default 2 × (number of caches) + 1); grows on demand.
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
        generation: Generation,
        *,
        document_id: str | None = None,
        max_chains: int | None = None,
        compressed_length: int | None = None,
    ):
        if not isinstance(generation, Generation):
            raise TypeError(f"generation must be a kvdiv.settings.Generation, got {type(generation).__name__}")
        if REFERENCE in actions:
            raise ValueError(f"action name {REFERENCE!r} is reserved for the full-cache kernel")
        self.model = loaded.model
        self.eos_token_ids = [int(t) for t in loaded.eos_token_ids]
        if not self.eos_token_ids:
            raise ValueError("loaded.eos_token_ids is empty")
        self.generation = generation
        self.temperature = float(generation.temperature)
        self.evict_first_step = generation.evict_first_step
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).to(self.device)
        if ids.numel() < 2:
            raise ValueError("the prompt needs at least 2 tokens")
        self.prompt_ids = ids
        self.prompt_length = int(ids.numel())
        n_ids = int(ids.numel())
        if compressed_length is not None and not 1 <= int(compressed_length) < n_ids:
            raise ValueError(
                f"compressed_length {compressed_length} must lie in 1..{n_ids - 1} (prompt of {n_ids} tokens)"
            )
        if compressed_length is not None:
            self._compressed = int(compressed_length)
        else:
            self._compressed = n_ids - 1 if self.evict_first_step else n_ids
        self.compressed_length = self._compressed
        self.actions = {name: spec if isinstance(spec, BasePress) else dict(spec) for name, spec in actions.items()}
        # a press instance (kvdiv.compare) is copied: presses keep per-prefill state, one copy per session; a spec's
        # kept_entries becomes the ratio keeping that many of the entries compressed
        self.presses = {
            name: copy.deepcopy(spec)
            if isinstance(spec, BasePress)
            else build_press(spec, name=name, prompt_length=self._compressed)
            for name, spec in self.actions.items()
        }
        watch_own_scores(self.presses)  # own presses' scores checked on every call (NaN, all equal, mis-shaped)
        if document_id is not None:
            for name, press in self.presses.items():
                if isinstance(press, SeededPress):
                    press.set_document(*generation.seed_parts(document_id), action=name)
        self._attn = attention_layers(self.model)
        self.n_layers = len(self._attn)
        # actions that compress during decoding too (kvpress's DecodingPress, PrefillDecodingPress): their part
        # that does
        self._decoding = {
            name: part for name, press in self.presses.items() if (part := decoding_press(press)) is not None
        }
        if getattr(self.model.config.get_text_config(), "attn_logit_softcapping", None) is not None:
            raise NotImplementedError(
                f"{type(self.model).__name__}: kvdiv decoding does not support attention softcapping"
            )
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
        self._configs = model_configs(self.model)
        self._kept_cache: dict[str, list[torch.Tensor | None]] = {}
        self._in_prompt = False
        #: K/V entries (per layer and KV head) its decode steps' attention products have read (benchmarks count it)
        self.kv_entries_read = 0
        self.layout = (getattr(loaded, "spec", None) or {}).get("kv_layout", LAYOUTS[0])
        if self.layout not in LAYOUTS:
            raise ValueError(f"model spec kv_layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")

        self._prefixes, self._kept_lengths, logits = prefill_caches(
            self.model, self._attn, self.presses, ids[: self._compressed], self.device
        )
        self.kv_heads = self._prefixes[REFERENCE].keys[0].shape[0]
        self.head_dim = self._prefixes[REFERENCE].keys[0].shape[-1]
        self._cache_names = list(self._prefixes)
        # the shared prompt (layout "shared"): every cache whose entries are a subset of the reference's (a decoding
        # action's chain moves to a private copy at its first cut: _compress_during_decoding)
        self._prompt: SharedPrompt | None = None
        if self.layout == "shared":
            self._prompt = share_prompt(self._prefixes, self._kept_lengths, self.presses)
            if packs_prompt(self.model, self.dtype, self.device):
                pack_prompt(self._prompt)
        # per shared cache, the prompt tokens fed after the compressed ones (evict_first_step, compress: context)
        self._tails: dict[str, Prefix] = {name: self._empty_tail() for name in self._shared_names()}

        def pool(caches: int, longest: int) -> ChainSlots:
            slots = ChainSlots(self.n_layers, self.kv_heads, self.head_dim, self.dtype, self.device)
            if caches:  # (the chains split over the pools as the caches do; a pool grows on demand)
                room = longest + (n_ids - self._compressed) + 1 + max(int(generation.horizon) + 1, 1)
                slots.grow(-(-(max_chains or 2 * n_caches + 1) * caches // n_caches), room)
            return slots

        n_caches = len(self._cache_names)
        private = [p.length for name, p in self._prefixes.items() if name not in self._tails]
        self._chains = Chains({TAIL: pool(len(self._tails), 0), PRIVATE: pool(len(private), max(private, default=0))})

        if self._compressed == n_ids:
            law = self._law(logits)
            self._initial = {name: law for name in self._cache_names}
        else:
            self._initial = self._feed_prompt_tail(ids[self._compressed :])

    def _shared_names(self) -> list[str]:
        return [] if self._prompt is None else list(self._prompt.index)

    def _empty_tail(self) -> Prefix:
        def empty() -> list[torch.Tensor]:
            return [torch.empty(self.kv_heads, 0, self.head_dim, dtype=self.dtype, device=self.device)] * self.n_layers

        bias = [torch.empty(self.kv_heads, 0, dtype=torch.float32, device=self.device)] * self.n_layers
        return Prefix(empty(), empty(), bias, length=0, position=self._compressed)

    @property
    def _slots(self) -> ChainSlots:
        """The private pool (every chain of the ``slots`` layout)."""
        return self._chains.pools[PRIVATE]

    @torch.no_grad()
    def _feed_prompt_tail(self, tail: torch.Tensor) -> dict[str, torch.Tensor]:
        """evict_first_step (the last prompt token) or compress: context (the question and answer prefix): feed the
        tail through every cache, one token per batched step; extend each prefix by it."""
        names = list(self._cache_names)
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
            ch = self._chain(c)
            slots, L = self._chains.pools[ch.pool], ch.length
            prefix = Prefix(
                keys=[k[ch.slot, :, :L].clone(memory_format=torch.contiguous_format) for k in slots.keys],
                values=[v[ch.slot, :, :L].clone() for v in slots.values],
                bias=[b[ch.slot, :, :L].clone() for b in slots.bias],
                length=L,
                position=ch.position,
            )
            (self._tails if ch.pool == TAIL else self._prefixes)[name] = prefix
            initial[name] = laws[i]
        self.release(chains)
        if token in self._eos_set:
            raise ValueError("the prompt ends with an EOS token")
        return initial

    def _chain(self, c: int) -> Chain:
        return self._chains.chain(c)

    # ------------------------------------------------------------------ public API
    @property
    def caches(self) -> list[str]:
        """Cache names: "reference" then the actions."""
        return list(self._cache_names)

    def prompt_cache(self, cache: str) -> Prefix:
        """Cache ``cache`` before generation as one private copy holds it: per layer its prompt entries in the press's
        own order (then any prompt tokens fed after compression), with their bias (a copy for a shared cache)."""
        if cache not in self._tails:
            return self._prefixes[cache]
        prompt, tail = self._prompt.cache_prefix(cache), self._tails[cache]
        if not tail.length:
            return prompt
        cat = [
            [torch.cat([a, b], dim=1) for a, b in zip(x, y)]
            for x, y in zip((prompt.keys, prompt.values, prompt.bias), (tail.keys, tail.values, tail.bias))
        ]
        return Prefix(*cat, length=prompt.length + tail.length, position=tail.position)

    def memory(self) -> dict[str, int]:
        """Bytes the session holds for its caches: ``prompt`` (the shared prompt copy and biases), ``prefixes`` (private
        caches' prompt copies and the shared caches' fed tails), ``tail_slots`` and ``private_slots`` (the slot
        buffers as allocated)."""

        def size(prefixes) -> int:  # (with the transposed keys a prefix keeps once a chain has loaded it)
            parts = [ts for p in prefixes for ts in (p.keys, p.values, p.bias, p._keys_t or [])]
            return sum(t.numel() * t.element_size() for ts in parts for t in ts)

        return {
            "prompt": 0 if self._prompt is None else self._prompt.nbytes(),
            "prefixes": size(p for n, p in self._prefixes.items() if n not in self._tails) + size(self._tails.values()),
            "tail_slots": self._chains.pools[TAIL].nbytes(),
            "private_slots": self._chains.pools[PRIVATE].nbytes(),
        }

    def press_seeds(self) -> dict[str, dict[str, Any]]:
        """Per random action (its press a :class:`~kvdiv.kernel.presses.protocol.SeededPress`): its ``seed``, the
        document's ``draw_seed`` and the ``layer_seeds`` of its samples (the store's ``press_seeds`` attribute)."""
        return {
            name: {
                "seed": press.seed,
                "draw_seed": press.draw_seed,
                "layer_seeds": [press.layer_seed(layer) for layer in range(self.n_layers)],
            }
            for name, press in self.presses.items()
            if isinstance(press, SeededPress)
        }

    def initial_probs(self, cache: str = REFERENCE) -> torch.Tensor:
        """[V] float64: the next-token law right after the prompt under ``cache``."""
        if cache not in self._initial:
            raise KeyError(f"unknown cache {cache!r}; caches: {', '.join(self._initial)}")
        return self._initial[cache].clone()

    @torch.no_grad()
    def new_chain(self, cache: str = REFERENCE) -> int:
        """A new chain whose history is the prompt only, decoding with ``cache``."""
        if cache not in self._cache_names:
            raise KeyError(f"unknown cache {cache!r}; caches: {', '.join(self._cache_names)}")
        pool = TAIL if cache in self._tails else PRIVATE
        prefix = (self._tails if pool == TAIL else self._prefixes)[cache]
        slots = self._chains.pools[pool]
        slot = slots.take()
        slots.load(slot, prefix)
        state = ChainState() if cache in self._decoding else None
        return self._chains.register(Chain(slot, cache, prefix.length, prefix.position, False, state, pool))

    @torch.no_grad()
    def fork(self, c: int) -> int:
        """An independent copy of chain ``c`` (same cache and generated history)."""
        src = self._chain(c)
        slots = self._chains.pools[src.pool]
        slot = slots.take()
        slots.copy(src.slot, slot, src.length)
        state = None if src.decode is None else src.decode.copy()
        return self._chains.register(Chain(slot, src.cache, src.length, src.position, src.done, state, src.pool))

    def release(self, chains: Iterable[int]) -> None:
        """Free the slots of ``chains``."""
        self._chains.release(chains)

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
        ch = self._chain(c)
        return ch.length + (self._prompt.entries[ch.cache] if ch.pool == TAIL else 0)

    def compressions(self, c: int) -> int:
        """How many times decode-time compression has cut chain ``c``'s cache (0 for a prefill-only action)."""
        state = self._chain(c).decode
        return 0 if state is None else state.compressions

    def _law(self, logits: torch.Tensor) -> torch.Tensor:
        z = logits.to(torch.float64)
        if self.temperature != 1.0:  # (z / 1.0 is z: no pass over [rows, V] for it)
            z = z / self.temperature
        return torch.softmax(z, dim=-1).cpu()

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

    def _prepare(self, chains: Sequence[int], tokens: Sequence[int] | torch.Tensor) -> StepPart:
        """Check a step's chains and tokens, absorb EOS, grow the buffers if needed and plan the attention
        (:func:`kvdiv.kernel.step_plan.plan_step`)."""
        return plan_step(self, chains, tokens)

    def _compress_during_decoding(self, part: StepPart, row0: int, inputs: dict) -> None:
        """After a decode forward: run each decoding action's hook for its chains (:mod:`kvdiv.kernel.decoding`); a
        chain its press cuts holds what it kept in a private slot (a chain reading the shared prompt moves there)."""
        for r, (_, _, ch, _) in enumerate(part.active):
            if ch.decode is None:
                continue
            with doing(action=ch.cache, press=press_label(self._decoding[ch.cache])):  # kvdiv.watchdog
                new = run_decoding_hooks(
                    self._decoding[ch.cache],
                    ch.decode,
                    self._attn,
                    inputs,
                    row0 + r,
                    ch.position - 1,
                    lambda layer, ch=ch: self._chain_entries(ch, layer),
                    ch.cache,
                )
            if new is not None:
                self._keep_private(ch, new)

    def _chain_entries(self, ch: Chain, layer: int) -> Entries:
        """Chain ``ch``'s cache at ``layer`` as a decoding press sees it (:func:`kvdiv.kernel.decoding.real_entries`):
        a private slot's entries, or the shared prompt's entries in its cache's order followed by its tail slot's."""
        slots = self._chains.pools[ch.pool]
        k, v, b = (x[ch.slot, :, : ch.length] for x in (slots.keys[layer], slots.values[layer], slots.bias[layer]))
        if ch.pool == TAIL:
            pk, pv, pb = self._prompt.cache_entries(ch.cache, layer)
            k, v, b = torch.cat([pk, k], 1), torch.cat([pv, v], 1), torch.cat([pb, b], 1)
        return real_entries(k, v, b)

    def _keep_private(self, ch: Chain, entries: list[Entries]) -> None:
        """Write ``entries`` (per layer) into a private slot of chain ``ch`` (its own, or a new one it moves to)."""
        slots = self._chains.pools[PRIVATE]
        m = max(k.shape[1] for k, _, _ in entries)
        if m >= slots.capacity or (ch.pool == TAIL and not slots.free):
            slots.grow(max(slots.n_slots, 1), m + 128)
        if ch.pool == TAIL:
            self._chains.pools[TAIL].give_back(ch.slot)
            ch.slot, ch.pool = slots.take(), PRIVATE
        slots.write(ch.slot, entries)
        ch.length = m

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
        act = None if action in self._tails else self._prefixes[action]
        out = kept_positions(
            self.presses[action],
            self._prefixes[REFERENCE],
            act,
            self._prompt,
            action,
            self._kept_lengths[action],
            self._compressed,
        )
        self._kept_cache[action] = out
        return out


__all__ = ["LAYOUTS", "KernelSession", "REFERENCE", "step_sessions"]
