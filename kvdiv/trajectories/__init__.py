"""Trajectories: coupled generation of the reference and every action's chains for each document, and their stores.

Modules: ``coupling`` (one coupled step, EOS folding), ``base`` (what both samplers share), ``complete`` and
``swrb`` (the two samplers), ``generate`` (both modes behind one call), ``job`` (the job the trajectory rules run: a
batch of documents, one store each), ``checks`` (what a job checks before any prefill: model, actions, prompts),
``reuse`` (the cache of (document, action) results), ``store`` (the only reader and writer of stores and cubes),
``synthetic`` (simulated cubes with known answers, for tests), ``answers`` (every stored continuation scored) and
``summary`` (a store's numbers per action, which ``kvdiv inspect`` prints).
"""
