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
