"""The test-only stand-in model (``tests/helpers.py``) itself."""
import torch

from helpers import TinyLSTM


def test_standin_forward_shapes():
    model = TinyLSTM(11)
    tokens = torch.randint(0, 11, (3, 5))
    out = model(tokens, model.init_state(3))
    assert out.hidden.shape == (3, 5, 8)
    assert model.logits(out.hidden).shape == (3, 5, 11)
    assert out.structure["distances"].shape == (3, 5)
