"""The values a run leaves to itself (``null``: automatic) are filled in once, by
:func:`induce.training.setup.fill_in_runtime`, before the model is built, and the run's ``config.yaml`` records
them."""
from __future__ import annotations

import pytest
import torch
from rich.console import Console

from induce.config import DEFAULT_THREADS, FILLED_IN_BY_THE_RUN, load_config, load_config_file
from induce.models.registry import get_model_class
from induce.training.ddp import DistContext
from induce.training.setup import fill_in_runtime

from helpers import STANDIN, make_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=40, valid=5, test=5)


def test_fill_in_runtime_resolves_every_automatic_value(corpus, tmp_path):
    config = load_config(STANDIN, overrides=[f"data.corpus={corpus}"])
    assert config.train.threads is None and config.data.bptt_bucket is None
    filled, opened, graphs = fill_in_runtime(config, DistContext(), get_model_class(STANDIN), corpora_dir=tmp_path,
                                             console=Console(quiet=True))
    assert filled.train.threads == DEFAULT_THREADS == torch.get_num_threads()
    assert filled.data.bptt_bucket == 0 and graphs is False  # no CUDA: no captured steps, no bucket
    assert filled.data.corpus == str(corpus) and opened.path == corpus
    # given values stay as they are, and so does what each machine decides again (device, kernels, graphs)
    given = load_config(STANDIN, overrides=[f"data.corpus={corpus}", "train.threads=1", "data.bptt_bucket=5"])
    again, _, _ = fill_in_runtime(given, DistContext(), get_model_class(STANDIN), corpora_dir=tmp_path,
                                  console=Console(quiet=True))
    assert again == given and again.train.device == "auto" and again.train.cuda_graphs == "auto"
    assert set(FILLED_IN_BY_THE_RUN) == {"train.threads", "data.corpus", "data.bptt_bucket"}


def test_the_runs_config_yaml_records_the_filled_in_values(corpus, tmp_path):
    from induce.training import train

    config = load_config(STANDIN, overrides=[f"data.corpus={corpus}", "data.batch_size=4", "data.bptt=8",
                                             "train.epochs=1", "train.max_steps=2", "train.dev_f1=false",
                                             "optim.asgd=never"])
    train(config, tmp_path / "run", console=Console(quiet=True), progress=False)
    saved = load_config_file(tmp_path / "run" / "config.yaml")
    assert saved.train.threads == DEFAULT_THREADS and saved.data.bptt_bucket == 0
    assert saved.data.corpus == str(corpus)
