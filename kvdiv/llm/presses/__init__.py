"""Eviction actions: a config entry ``{press: <name>, **arguments}`` → a press (kvpress's, or kvdiv's own).

Modules: :mod:`~kvdiv.llm.presses.registry` (every nameable press, argument checks, :func:`build_press
<kvdiv.llm.presses.registry.build_press>`, provenance records) and one module per kvdiv press, as kvpress
keeps them: :mod:`~kvdiv.llm.presses.probabilistic_press` (probabilistic eviction with decode-time correction,
arXiv 2608.28293; its parts :mod:`~kvdiv.llm.presses.proposals`, :mod:`~kvdiv.llm.presses.multinomial_design`,
:mod:`~kvdiv.llm.presses.pips_design`); :mod:`~kvdiv.llm.presses.protocol` (what the session asks of a press).
Adding a press: see ``KVDIV_PRESSES`` in the registry.
"""

from kvdiv.llm.presses.lazy_datasets import import_kvpress

import_kvpress()  # before any press module imports kvpress: no `datasets` unless a press uses it
