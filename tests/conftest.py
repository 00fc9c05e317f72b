"""Shared fixtures. Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny tensors: extra torch threads only add synchronisation (and CI machines are shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: The test files that take longest (CPU seconds on a 2-core machine, longest first): collected first, so
#: that under ``--dist loadfile`` (the Makefile's) each starts while the other worker works through the
#: short files, instead of one of them starting last and running alone at the end of the suite.
LONG_FILES = ("test_triton_compile_h100.py", "test_kernels_triton.py", "test_training_ddp.py", "test_gpu_check.py",
              "test_reproduce_jobs.py", "test_reproduce_slurm.py", "test_run_folder.py", "test_models.py",
              "test_install.py")


def pytest_collection_modifyitems(session, config, items):
    """Move the tests of :data:`LONG_FILES` to the front, in that order (the rest keep theirs)."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))
