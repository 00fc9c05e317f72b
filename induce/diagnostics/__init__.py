"""Diagnostics of recurrence vs attention (Kerg et al. 2020), behind ``induce diagnose``.

* :mod:`.tasks` — the synthetic memorisation tasks (Copy, Denoise, Transfer Copy), a minimal masked-loss
  task trainer, and its checkpoints (written and read with :mod:`induce.training.checkpoint`);
* :mod:`.measure` — gradient norms per step and activation memory / time per sequence length, and
  their figures.
"""
