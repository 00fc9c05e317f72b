"""``induce reproduce``: the whole pipeline from treebank to report, resumable step by step.

* :mod:`.profiles` — what a profile asks for (``configs/<profile>/``) and the run configs it builds;
* :mod:`.subset` — the subset corpus of small profiles;
* :mod:`.pipeline` — the plan: which steps, in which order, their records, chunks and the report at the end;
* :mod:`.steps` — what each step does (prepare, train, untrained models, baselines, evaluate) and when it
  is skipped or resumed;
* :mod:`.jobs` / :mod:`.worker` — ``--jobs N``: independent runs in N processes at once (the parent's
  scheduler and its executors, and the child process of one unit);
* :mod:`.slurm` — ``--executor slurm``: each unit a job of a SLURM cluster (submitit), requeued at its time limit;
* :mod:`.results` — ``results.json``: what the steps wrote, gathered and summarised over seeds;
* :mod:`induce.report.drawing` — the report's figures from the runs;
* :mod:`induce.report` / :mod:`induce.report.findings` — ``REPORT.md`` and the sentences it generates
  from the results.
"""
from .pipeline import (
    ReproduceOptions,
    Reproduction,
    StepRecord,
    check_out_folder,
    reproduce,
)
from .profiles import PROFILE_FILE, Profile, build_run_config, list_profiles, load_profile, resolve_profile_name
from .results import LENGTHS, SCORE_SETS, collect_results, mean_std, read_history, summarise
from .steps import EVAL_VERSION, RUN_STAMP
from .subset import subset_corpus

__all__ = [
    "EVAL_VERSION", "LENGTHS", "PROFILE_FILE", "RUN_STAMP", "SCORE_SETS", "Profile", "ReproduceOptions",
    "Reproduction", "StepRecord", "build_run_config", "check_out_folder", "collect_results", "list_profiles",
    "load_profile", "mean_std", "read_history", "reproduce", "resolve_profile_name", "subset_corpus", "summarise",
]
