"""The recurrent models' kernels, one module per tier: cumax, the ON-LSTM cell step, PRPN's stick-breaking
gates, linear-recurrence scans and PaLM's span representations and span attention.

``reference`` (loops that follow the definitions, the tests' ground truth), ``torch_impl`` (vectorised
PyTorch, the CPU default) and the Triton tier, ``triton_impl`` (cumax, cell, gates, scans) with PaLM's span
kernels in ``triton_span``. The public functions, their conventions and the tier each call runs on are
in :mod:`induce.kernels`.
"""
