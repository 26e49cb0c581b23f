"""The kernel pair (P, Q) of one prompt served by a loaded model under eviction presses.

Modules: :mod:`~kvdiv.kernel.session` (:class:`~kvdiv.kernel.session.KernelSession`: one prefill, every action's
cache, chains, forks, batched steps), :mod:`~kvdiv.kernel.prefill` (every action's cache from one prefill),
:mod:`~kvdiv.kernel.chain_slots` (K/V slot buffers), :mod:`~kvdiv.kernel.batched_step` (one forward for many chains),
:mod:`~kvdiv.kernel.decode_attention` (attention over slot buffers), :mod:`~kvdiv.kernel.decoding` (compression while
generating) and :mod:`~kvdiv.kernel.presses` (actions → presses: kvpress's and kvdiv's own).
"""
