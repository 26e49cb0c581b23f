"""Trajectories: coupled generation of the reference and every action's chains for each document (several documents
of one model in one forward per step), and their stores.

Modules: :mod:`~kvdiv.trajectories.coupling` (one step of the overlap–residual maximal coupling, EOS folding),
:mod:`~kvdiv.trajectories.base` (the records and bookkeeping both samplers share),
:mod:`~kvdiv.trajectories.complete` (the complete-mode sampler), :mod:`~kvdiv.trajectories.swrb` (the
residual-branch sampler), :mod:`~kvdiv.trajectories.generate` (both modes behind one call),
:mod:`~kvdiv.trajectories.job` (the job the trajectory rules run: a batch of documents, one store each), :mod:`~kvdiv.trajectories.store`
(the only reader and writer of per-document stores and cubes), :mod:`~kvdiv.trajectories.synthetic` (simulated
cubes with known answers, for tests), :mod:`~kvdiv.trajectories.answers` (every stored continuation scored with its
document's scorer: correct_x, correct_y, the end of x's first answer span) and :mod:`~kvdiv.trajectories.cli` (``kvdiv inspect``).
"""
