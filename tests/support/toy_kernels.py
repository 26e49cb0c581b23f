"""A table-driven stand-in for :class:`kvdiv.kernel.session.KernelSession` over explicit small kernels.

The kernels are plain functions of the generated history (a tuple of token ids) returning a law
over a small vocabulary, so generation, coupling and estimators can be tested exactly and fast
without a language model. The API (``initial_probs``, ``new_chain``, ``fork``, ``step``,
``release``, EOS absorption) follows docs/internals.md "Kernel pairs".
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

Kernel = Callable[[tuple[int, ...]], np.ndarray]


class ToyKernelSession:
    """Kernel pairs given as functions of the generated history.

    Parameters
    ----------
    reference : Kernel
        P(·|h): the full-cache kernel.
    interventions : mapping action name → Kernel
        Q(·|h) per action.
    eos_token_ids : sequence of int
        Tokens that end a chain; afterwards its law is the point mass on ``eos_token_ids[0]``.
    evict_first_step : bool
        If False (the default, as deployed) every cache's first law is the reference's.
    max_chains : int
        The most chains alive at once (a ``RuntimeError`` beyond it, as a real session).
    prompt_length : int
        Reported prompt length (the toy has no prompt tokens of its own).
    """

    def __init__(
        self,
        reference: Kernel,
        interventions: Mapping[str, Kernel],
        eos_token_ids: Sequence[int] = (),
        evict_first_step: bool = False,
        max_chains: int = 1 << 16,
        prompt_length: int = 0,
    ) -> None:
        self.kernels: dict[str, Kernel] = {"reference": reference, **interventions}
        self.eos_token_ids = list(eos_token_ids)
        self.evict_first_step = evict_first_step
        self.max_chains = max_chains
        self.prompt_length = prompt_length
        self._chains: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._next_id = 0
        self.step_calls = 0
        self.step_rows = 0

    def _law(self, cache: str, history: tuple[int, ...]) -> np.ndarray:
        if self.eos_token_ids and any(t in self.eos_token_ids for t in history):
            law = np.zeros_like(np.asarray(self.kernels["reference"](()), dtype=np.float64))
            law[self.eos_token_ids[0]] = 1.0
            return law
        return np.asarray(self.kernels[cache](history), dtype=np.float64)

    def initial_probs(self, cache: str) -> np.ndarray:
        """Law of the first generated token under ``cache`` ("reference" or an action name)."""
        if cache not in self.kernels:
            raise KeyError(f"unknown cache {cache!r}; known: {sorted(self.kernels)}")
        return self._law(cache if self.evict_first_step else "reference", ())

    def _add(self, cache: str, history: tuple[int, ...]) -> int:
        if len(self._chains) >= self.max_chains:
            raise RuntimeError(f"more than max_chains={self.max_chains} chains alive")
        cid = self._next_id
        self._next_id += 1
        self._chains[cid] = (cache, history)
        return cid

    def new_chain(self, cache: str) -> int:
        """A chain whose history is the prompt only."""
        if cache not in self.kernels:
            raise KeyError(f"unknown cache {cache!r}; known: {sorted(self.kernels)}")
        return self._add(cache, ())

    def fork(self, chain: int) -> int:
        """An independent copy of ``chain``."""
        return self._add(*self._chains[chain])

    def history(self, chain: int) -> tuple[int, ...]:
        """Generated tokens of ``chain`` (toy only)."""
        return self._chains[chain][1]

    def step(self, chains: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens[i]`` to ``chains[i]``; return the next-token laws [n, V] (one 'forward')."""
        if len(chains) != len(tokens):
            raise ValueError("chains and tokens differ in length")
        if len(set(chains)) != len(chains):
            raise ValueError("a chain appears twice in one step")
        self.step_calls += 1
        self.step_rows += len(chains)
        out = []
        for c, tok in zip(chains, tokens):
            cache, hist = self._chains[c]
            hist = hist + (int(tok),)
            self._chains[c] = (cache, hist)
            out.append(self._law(cache, hist))
        return np.stack(out) if out else np.zeros((0, len(self.initial_probs("reference"))))

    def release(self, chains: Sequence[int]) -> None:
        """Free chain slots."""
        for c in chains:
            del self._chains[c]

    @property
    def alive(self) -> int:
        """Number of chains alive."""
        return len(self._chains)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax of a 1-D array."""
    z = np.exp(logits - logits.max())
    return z / z.sum()


def history_kernel(vocab: int, seed: int, sharpness: float = 1.5) -> Kernel:
    """A history-dependent kernel: logits are a fixed random function of (last token, length)."""
    table = np.random.default_rng(seed).normal(size=(vocab + 1, 8, vocab)) * sharpness

    def kernel(history: tuple[int, ...]) -> np.ndarray:
        last = history[-1] if history else vocab
        return softmax(table[last, len(history) % 8])

    return kernel


def mixture_kernel(base: Kernel, other: Kernel, eps: float) -> Kernel:
    """(1 − eps)·base + eps·other, history by history."""

    def kernel(history: tuple[int, ...]) -> np.ndarray:
        return (1.0 - eps) * base(history) + eps * other(history)

    return kernel


def constant_kernel(law: Sequence[float]) -> Kernel:
    """A history-independent kernel."""
    law = np.asarray(law, dtype=np.float64)
    law = law / law.sum()
    return lambda history: law
