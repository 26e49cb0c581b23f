"""The finite-state study (arXiv 2609.16617, §4.4, Figure 4): kernel pairs small enough to enumerate.

Modules: :mod:`~kvdiv.finite.system` (the system file format and :class:`~kvdiv.finite.system.FiniteSystem`),
:mod:`~kvdiv.finite.exact` (exact values by enumerating the coupled process), :mod:`~kvdiv.finite.sampling` (the
naive and SWRB Monte Carlo samplers, Numba), :mod:`~kvdiv.finite.suite` (the 24 systems of the study),
:mod:`~kvdiv.finite.study` (the tables the workflow writes), :mod:`~kvdiv.finite.paper` (the paper's values); ``kvdiv
finite`` is :mod:`kvdiv.cli.finite`.
"""
