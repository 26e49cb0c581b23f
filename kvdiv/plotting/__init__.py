"""Figures: one module per figure, sharing one style (:mod:`kvdiv.plotting.style`)."""
