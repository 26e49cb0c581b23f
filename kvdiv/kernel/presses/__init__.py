"""Eviction actions: a config entry ``{press: <name>, **arguments}`` → a press (kvpress's, or kvdiv's own).

Modules: :mod:`~kvdiv.kernel.presses.registry` (every nameable press, argument checks, :func:`build_press
<kvdiv.kernel.presses.registry.build_press>`, provenance records) and one module per kvdiv press, as kvpress
keeps them: :mod:`~kvdiv.kernel.presses.probabilistic_press` (probabilistic eviction with decode-time correction,
arXiv 2608.28293; its parts :mod:`~kvdiv.kernel.presses.proposals`, :mod:`~kvdiv.kernel.presses.multinomial_design`,
:mod:`~kvdiv.kernel.presses.pips_design`); :mod:`~kvdiv.kernel.presses.protocol` (what the session asks of a press).
Adding a press: see ``KVDIV_PRESSES`` in the registry.
"""

from kvdiv.kernel.presses.lazy_datasets import import_kvpress

import_kvpress()  # before any press module imports kvpress: no `datasets` unless a press uses it
