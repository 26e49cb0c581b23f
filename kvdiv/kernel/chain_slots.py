"""A :class:`~kvdiv.kernel.session.KernelSession`'s chains and the slot buffers holding their caches.

A pool (:class:`ChainSlots`) holds, per layer, preallocated K/V buffers [slots, kv_heads, capacity, head_dim] (the
keys stored transposed, ``keys_t`` [slots, kv_heads, head_dim, capacity], for decode attention's logits) and an
additive logit bias [slots, kv_heads, capacity] (−inf where nothing is attended); each live chain (:class:`Chain`)
owns one slot of one pool, takes the lowest free one and grows the buffers on demand. A session has two pools
(:class:`Chains`): ``tail`` — the chains of a cache stored as a bias over the document's one prompt copy
(:mod:`kvdiv.kernel.shared_prompt`) keep only what follows the prompt there — and ``private``, each chain a whole
copy of its cache. The K/V buffers are allocated uninitialised and each slot tracks how far its entries are finite
(:meth:`ChainSlots.ensure_finite`): docs/internals.md#kernel-pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from kvdiv.kernel.decoding import ChainState
from kvdiv.kernel.prefill import Prefix

#: A decode step's attention reads each chain's keys in spans of this many entries (its length + 1 rounded up), so a
#: chain's bits do not depend on which other chains share its attention call (kvdiv.trajectories.reuse relies on it);
#: the buffers' capacity is a multiple of it.
ATTENTION_SPAN = 64


#: The pool of chains reading the shared prompt (their slots hold what follows it) and of chains with a private copy.
TAIL, PRIVATE = "tail", "private"


@dataclass
class Chain:
    """One chain: its slot, the cache it decodes with, the entries in its slot and its RoPE position, whether it
    emitted EOS, its decode-time compression state and its pool (:data:`TAIL` or :data:`PRIVATE`)."""

    slot: int
    cache: str
    length: int
    position: int
    done: bool
    decode: ChainState | None = None  # an action with decode-time compression: its per-chain state
    pool: str = PRIVATE


class ChainSlots:
    """One pool: the slot buffers of ``n_layers`` layers and its free slots."""

    #: What fills new K/V buffers: None leaves them uninitialised; tests set NaN, so that a read of an entry that was
    #: neither written nor zeroed would show in the laws.
    unused_fill: float | None = None
    #: Entries :meth:`ensure_finite` zeroes at least, once it has to zero any (fewer, larger fills).
    FINITE_CHUNK = 256

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.n_layers, self.kv_heads, self.head_dim = n_layers, kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self.capacity = 0
        self.n_slots = 0
        self.keys_t: list[torch.Tensor] = []  # the storage of the keys: [slots, kv_heads, head_dim, capacity]
        self.keys: list[torch.Tensor] = []  # views of it as [slots, kv_heads, capacity, head_dim], as the values
        self.values: list[torch.Tensor] = []
        self.bias: list[torch.Tensor] = []
        self.free: list[int] = []
        self.finite: list[int] = []  # per slot: its entries [0, finite) hold finite keys and values in every layer

    def grow(self, n_slots: int, capacity: int) -> None:
        """Make room for at least ``n_slots`` slots of ``capacity`` entries, keeping every slot's contents."""
        n_slots, capacity = max(n_slots, self.n_slots), max(capacity, self.capacity)
        # a multiple of the span, so that a span capped at the capacity keeps every row of decode attention's products
        # aligned as in any other run (a misaligned row's first logits round differently: issue 39, item 8)
        capacity = -(-capacity // ATTENTION_SPAN) * ATTENTION_SPAN
        if n_slots == self.n_slots and capacity == self.capacity:
            return
        check_memory(self, n_slots, capacity)
        shape = (n_slots, self.kv_heads, capacity, self.head_dim)
        for layer in range(self.n_layers):
            kt, v = self._unwritten((n_slots, self.kv_heads, self.head_dim, capacity)), self._unwritten(shape)
            b = torch.full(shape[:3], float("-inf"), dtype=torch.float32, device=self.device)
            if self.n_slots:
                kt[: self.n_slots, :, :, : self.capacity] = self.keys_t[layer]
                v[: self.n_slots, :, : self.capacity] = self.values[layer]
                b[: self.n_slots, :, : self.capacity] = self.bias[layer]
                self.keys_t[layer], self.values[layer], self.bias[layer] = kt, v, b
                self.keys[layer] = kt.transpose(2, 3)
            else:
                self.keys_t.append(kt)
                self.keys.append(kt.transpose(2, 3))
                self.values.append(v)
                self.bias.append(b)
        self.free = sorted(set(self.free) | set(range(self.n_slots, n_slots)))
        self.finite += [0] * (n_slots - self.n_slots)  # kept slots keep theirs: their entries were copied
        self.n_slots, self.capacity = n_slots, capacity

    def _unwritten(self, shape: tuple[int, ...]) -> torch.Tensor:
        if self.unused_fill is None:
            return torch.empty(shape, dtype=self.dtype, device=self.device)
        return torch.full(shape, self.unused_fill, dtype=self.dtype, device=self.device)

    def ensure_finite(self, slot: int, end: int) -> None:
        """Make ``slot``'s entries up to ``end`` (at most the capacity) finite, zeroing those not yet written."""
        start = self.finite[slot]
        if end <= start:
            return
        stop = min(self.capacity, max(end, start + self.FINITE_CHUNK))
        for layer in range(self.n_layers):
            self.keys_t[layer][slot, :, :, start:stop] = 0
            self.values[layer][slot, :, start:stop] = 0
        self.finite[slot] = stop

    def take(self) -> int:
        """The lowest free slot (the slots double when none is free)."""
        if not self.free:
            self.grow(max(2 * self.n_slots, 1), self.capacity)
        return self.free.pop(0)

    def give_back(self, slot: int) -> None:
        """Free ``slot``."""
        self.free.append(slot)
        self.free.sort()

    def nbytes(self) -> int:
        """Bytes of the buffers (allocated, whether written or not)."""
        return sum(t.numel() * t.element_size() for ts in (self.keys_t, self.values, self.bias) for t in ts)

    def load(self, slot: int, prefix: Prefix) -> None:
        """Write a prompt cache into ``slot``: its keys, values and bias, −inf beyond it."""
        L = prefix.length
        keys_t = prefix.keys_transposed()  # (rows of L entries: writing through the transposed view is strided)
        for layer in range(self.n_layers):
            self.keys_t[layer][slot, :, :, :L] = keys_t[layer]
            self.values[layer][slot, :, :L] = prefix.values[layer]
            self.bias[layer][slot].fill_(float("-inf"))
            self.bias[layer][slot, :, :L] = prefix.bias[layer]
        self.finite[slot] = max(self.finite[slot], L)

    def write(self, slot: int, entries: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
        """Make ``slot`` hold ``entries`` (per layer keys, values [kv_heads, m, head_dim], bias [kv_heads, m]; −inf
        bias past each layer's m). A layer that keeps fewer than the longest (PyramidKV's per-layer budgets) gets
        zeros up to it, so that every layer's entries are finite up to the slot's longest m."""
        longest = max((k.shape[1] for k, _, _ in entries), default=0)
        for layer, (k, v, b) in enumerate(entries):
            m = k.shape[1]
            self.keys[layer][slot, :, :m] = k
            self.values[layer][slot, :, :m] = v
            if m < longest and self.finite[slot] < longest:
                self.keys_t[layer][slot, :, :, m:longest] = 0
                self.values[layer][slot, :, m:longest] = 0
            self.bias[layer][slot].fill_(float("-inf"))
            self.bias[layer][slot, :, :m] = b
        self.finite[slot] = max(self.finite[slot], longest)

    def copy(self, source: int, slot: int, length: int) -> None:
        """Copy slot ``source``'s first ``length`` entries and its whole bias into ``slot``."""
        for layer in range(self.n_layers):
            self.keys_t[layer][slot, :, :, :length] = self.keys_t[layer][source, :, :, :length]
            self.values[layer][slot, :, :length] = self.values[layer][source, :, :length]
            self.bias[layer][slot] = self.bias[layer][source]
        self.finite[slot] = max(self.finite[slot], length)


def attention_runs(slots: Sequence[int], lengths: Sequence[int], capacity: int) -> list[tuple[int, int, int, int, int]]:
    """The attention calls of a decode step: runs ``(row0, row1, slot0, slot1, span)`` of consecutive slots (sorted)
    whose spans are equal, one matmul/softmax/matmul each on buffer views. A chain of ``n`` entries in its slot attends
    over its span, ``n + 1`` rounded up to :data:`ATTENTION_SPAN` entries (at most ``capacity``, a multiple of it;
    −inf bias past its length), whatever chains share its run: its bits do not depend on the other chains (actions,
    replicates)."""
    spans = [min(-(-(n + 1) // ATTENTION_SPAN) * ATTENTION_SPAN, capacity) for n in lengths]
    runs, start = [], 0
    for j in range(1, len(slots) + 1):
        if j == len(slots) or slots[j] != slots[j - 1] + 1 or spans[j] != spans[start]:
            runs.append((start, j, slots[start], slots[j - 1] + 1, spans[start]))
            start = j
    return runs


class Chains:
    """A session's live chains by id (ids are never reused) and its two pools of slots."""

    def __init__(self, pools: dict[str, ChainSlots]):
        self.pools = pools
        self.chains: dict[int, Chain] = {}
        self.next_id = 0

    def register(self, chain: Chain) -> int:
        """A new chain id for ``chain``."""
        cid = self.next_id
        self.next_id += 1
        self.chains[cid] = chain
        return cid

    def chain(self, c: int) -> Chain:
        """Live chain ``c``; KeyError naming it if unknown or released."""
        if c not in self.chains:
            raise KeyError(f"unknown or released chain {c}")
        return self.chains[c]

    def release(self, chains: Iterable[int]) -> None:
        """Free the slots of ``chains`` (unknown ids are ignored)."""
        for c in chains:
            ch = self.chains.pop(c, None)
            if ch is not None:
                self.pools[ch.pool].give_back(ch.slot)


__all__ = [
    "ATTENTION_SPAN",
    "Chain",
    "ChainSlots",
    "Chains",
    "PRIVATE",
    "TAIL",
    "attention_runs",
    "available_bytes",
    "check_memory",
]


def available_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on ``device`` (CUDA: the driver's free memory; CPU: the system's available memory as
    psutil reads it on each platform — Linux's MemAvailable, macOS's free and inactive pages), or None."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:  # psutil raises NotImplementedError (a RuntimeError) on import where it does not support the platform
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError, RuntimeError, AttributeError):
        return None


def check_memory(slots: ChainSlots, n_slots: int, capacity: int) -> None:
    """Refuse, naming the sizes, slot buffers that cannot fit in the memory free now (instead of ``Allocation
    failed`` or the kernel's OOM killer): per layer the keys and values [slots, kv_heads, capacity, head_dim] and the
    float32 bias [slots, kv_heads, capacity], the old buffers still held while copied."""
    item = torch.empty((), dtype=slots.dtype).element_size()
    need = slots.n_layers * n_slots * slots.kv_heads * capacity * (2 * slots.head_dim * item + 4)
    free = available_bytes(slots.device)
    if free is not None and need > free:
        raise MemoryError(
            f"the chains of one document need {need / 2**30:.1f} GiB of cache ({n_slots} chains: the reference and "
            f"each action's, times the replicates; {slots.n_layers} layers, {capacity} entries each) and "
            f"{slots.device} has {free / 2**30:.1f} GiB free: run fewer actions per study or fewer replicates, or "
            "fewer documents per batch (models.*.documents_per_batch)"
        )
