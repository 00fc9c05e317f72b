"""Developer tooling run by the tests and the benchmarks, never by a command of the toolkit.

``compile_check`` (``python3 -m induce.devtools.compile_check``) compiles every Triton kernel variant the
shipped configs can launch for an H100 without a GPU: ``compile_workloads`` says what is driven,
``launch_recorder`` records the launches instead of running them. ``launches`` counts the kernel launches
of a piece of code at dispatch (``bench/models.py``'s launches per training step). ``slurm_cluster``
(``python3 -m induce.devtools.slurm_cluster FOLDER``, as root) starts a one-node SLURM on this machine for the tests
of ``induce reproduce --executor slurm``. This package sits at
the top of the layers (beside the CLI): it drives models, configs and training code.
"""
