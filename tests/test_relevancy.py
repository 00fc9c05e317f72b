"""Relevancy screening (Kerg et al. 2020): the screening rule on hand-made attention, the memory
bound, gradient flow to relevant / evicted states, the parallel plug-in, and the three models."""
from __future__ import annotations

import pytest
import torch

from induce.models.common.relevancy import FullMemory, RelevancyMemory, gather_relevant, relevant_indices
from induce.models.relmem.model import MODELS

D = 4
torch.set_num_threads(1)  # tiny tensors: more threads only add contention on shared CI cores


def _weights(memory: RelevancyMemory, received: list[dict[int, float]]) -> torch.Tensor:
    """Slot weights ``[B, nu + rho]`` giving example ``b`` attention ``received[b][step]`` on the
    slot holding that step (hand-made attention, independent of the slot layout)."""
    times = memory.slot_times
    weights = torch.zeros(times.shape)
    for b, per_step in enumerate(received):
        for step, w in per_step.items():
            (slot,) = (times[b] == step).nonzero().flatten().tolist()
            weights[b, slot] = w
    return weights


# Hand-made attention for nu = 2, rho = 2 (dyadic numbers: sums are exact). Entry t maps the steps in
# the buffer after push t to the attention they receive at step t.
#   example 0: beta = [1.25, 0.625, 1.0, 0.75, 1.0, 0.5, ...]
#     t=2: 0 leaves (1.25), R has room            -> R = {0}
#     t=3: 1 leaves (0.625), R has room           -> R = {0, 1}
#     t=4: 2 leaves (1.0) > min 0.625 (state 1)   -> 2 replaces 1: R = {0, 2}
#     t=5: 3 leaves (0.75) < min 1.0               -> rejected
#     t=6: 4 leaves (1.0) == min 1.0              -> tie keeps the incumbent
#     t=7: 5 leaves (0.5)                          -> rejected
#   example 1: every state gets 1.0 as the newest and 0 after -> all ties -> R = {0, 1} forever.
ATTENTION_0 = [
    {0: 1.0},
    {0: 0.25, 1: 0.5},
    {1: 0.125, 2: 0.5},
    {2: 0.5, 3: 0.25},
    {3: 0.5, 4: 0.125},
    {4: 0.875, 5: 0.0},
    {5: 0.5, 6: 0.25},
    {6: 0.0, 7: 0.0},
]
ATTENTION_1 = [{t: 1.0} for t in range(8)]
# Relevant-set slot contents after the push of step t (slot order: the first empty / least relevant
# slot is filled; -1 = empty).
EXPECTED_0 = [[-1, -1], [-1, -1], [0, -1], [0, 1], [0, 2], [0, 2], [0, 2], [0, 2]]
EXPECTED_1 = [[-1, -1], [-1, -1], [0, -1], [0, 1], [0, 1], [0, 1], [0, 1], [0, 1]]
BETA_0 = [1.25, 0.625, 1.0, 0.75, 1.0, 0.5, 0.25, 0.0]


def test_screening_rule_on_hand_made_attention():
    memory = RelevancyMemory(nu=2, rho=2, dim=D)
    memory.reset(2)
    for t in range(8):
        memory.push(torch.randn(2, D))
        assert memory.relevant_times.tolist() == [EXPECTED_0[t], EXPECTED_1[t]], f"step {t}"
        assert memory.buffer_times[0].tolist() == [t - 1, t]
        memory.record_attention(_weights(memory, [ATTENTION_0[t], ATTENTION_1[t]]))
    # Frozen relevance of the members = their beta when they left the buffer.
    assert memory.relevant_relevance[0].tolist() == [BETA_0[0], BETA_0[2]]


def test_relevant_set_holds_the_right_states():
    memory = RelevancyMemory(nu=2, rho=2, dim=D)
    memory.reset(2)
    states = [torch.randn(2, D) for _ in range(8)]
    for t in range(8):
        memory.push(states[t])
        memory.record_attention(_weights(memory, [ATTENTION_0[t], ATTENTION_1[t]]))
    for b, expected in ((0, EXPECTED_0[-1]), (1, EXPECTED_1[-1])):
        for slot, step in enumerate(expected):
            assert torch.equal(memory.relevant[b, slot], states[step][b])
        assert torch.equal(memory.buffer[b], torch.stack([states[6][b], states[7][b]]))


def test_parallel_plug_in_matches_hand_derivation():
    beta = torch.tensor([BETA_0, [1.0] * 8])
    index, valid = relevant_indices(beta, nu=2, rho=2)
    got = torch.where(valid, index, torch.full_like(index, -1)).tolist()
    assert got == [EXPECTED_0, EXPECTED_1]


def test_gather_relevant_picks_the_indexed_states_with_gradient():
    beta = torch.tensor([BETA_0])
    index, valid = relevant_indices(beta, nu=2, rho=2)
    states = torch.randn(1, 8, D, requires_grad=True)
    gathered = gather_relevant(states, index, valid)  # [1, 8, 2, D]
    assert gathered.shape == (1, 8, 2, D)
    assert torch.equal(gathered[0, 4, 1], states[0, 2]) and torch.equal(gathered[0, 2, 1], torch.zeros(D))
    gathered.sum().backward()
    # State 0 is in the sets of steps 2..7 (6 steps), state 1 only at step 3, state 3 never.
    torch.testing.assert_close(states.grad[0, :, 0], torch.tensor([6.0, 1.0, 4.0, 0, 0, 0, 0, 0]))


def test_parallel_plug_in_matches_the_module_with_learned_attention():
    torch.manual_seed(3)
    nu, rho, steps, batch = 3, 2, 25, 4
    memory = RelevancyMemory(nu, rho, D)
    with torch.no_grad():  # peaked (far from uniform) attention, so that relevance differs per example
        memory.attention.score.weight.mul_(20.0)
    memory.reset(batch)
    beta = torch.zeros(batch, steps)
    history = []
    for _ in range(steps):
        memory.push(torch.randn(batch, D))
        _, weights = memory.attend(torch.randn(batch, D))
        times = memory.slot_times
        for b in range(batch):
            for slot in range(nu):  # relevance counts only the buffer slots
                if times[b, slot] >= 0:
                    beta[b, times[b, slot]] += weights[b, slot]
        history.append(memory.relevant_times.clone())
    index, valid = relevant_indices(beta, nu, rho)
    expected = torch.stack(history, dim=1)  # [B, T, rho]
    assert torch.equal(torch.where(valid, index, torch.full_like(index, -1)), expected)
    # Learned attention is not all ties: the sets differ between examples somewhere.
    assert not all(torch.equal(expected[0], expected[b]) for b in range(1, batch))


@pytest.mark.parametrize("nu,rho", [(1, 0), (3, 2), (5, 7)])
def test_memory_size_bounded_by_nu_plus_rho(nu, rho):
    torch.manual_seed(0)
    memory = RelevancyMemory(nu, rho, D)
    memory.reset(3)
    for t in range(40):
        memory.push(torch.randn(3, D))
        summary, weights = memory.attend(torch.randn(3, D))
        assert memory.memory().shape == (3, nu + rho, D)
        assert weights.shape == (3, nu + rho) and summary.shape == (3, D)
        occupied = int(memory.slot_valid[0].sum())
        assert occupied == min(t + 1, nu + rho)
        # Attention is a distribution over the occupied slots only.
        torch.testing.assert_close(weights.sum(1), torch.ones(3))
        assert (weights[~memory.slot_valid] == 0).all()
        # Stored steps are distinct and the buffer holds exactly the last nu steps.
        times = memory.slot_times[0][memory.slot_valid[0]].tolist()
        assert len(set(times)) == len(times)
        times = memory.buffer_times[0]
        assert sorted(times[times >= 0].tolist()) == list(range(max(0, t - nu + 1), t + 1))


def test_gradients_reach_kept_states_but_not_evicted_ones():
    # nu = 2, rho = 2, hand-made screening:
    #   beta(0) = 1.5 -> R at t=2, kept to the end;
    #   beta(1) = 0.5 -> R at t=3, evicted at t=4 by state 2 (beta 1.0);
    #   beta(3) = 0.75 leaves at t=5 and is rejected (< 1.0).
    received = [{0: 1.0}, {0: 0.5, 1: 0.25}, {1: 0.25, 2: 0.5}, {2: 0.5, 3: 0.5}, {3: 0.25, 4: 0.25}]
    steps, first_loss_step = 12, 8
    torch.manual_seed(0)
    memory = RelevancyMemory(nu=2, rho=2, dim=D)
    memory.reset(1)
    states = [torch.randn(1, D, requires_grad=True) for _ in range(steps)]
    loss = 0.0
    for t in range(steps):
        memory.push(states[t])
        memory.record_attention(_weights(memory, [received[t] if t < len(received) else {}]))
        if t == first_loss_step - 1:
            assert sorted(memory.relevant_times[0].tolist()) == [0, 2]
        if t >= first_loss_step:  # the loss only reads attention of late steps
            summary, _ = memory.attend(torch.randn(1, D))
            loss = loss + summary.pow(2).sum()
    loss.backward()

    def grad_norm(step):
        grad = states[step].grad
        return 0.0 if grad is None else float(grad.norm())

    assert grad_norm(0) > 0  # relevant long after leaving the buffer (t = 2)
    assert grad_norm(2) > 0
    assert grad_norm(1) == 0.0  # evicted from R at t = 4, before any attention of the loss
    assert grad_norm(3) == 0.0  # never admitted
    assert grad_norm(5) == 0.0 and grad_norm(6) == 0.0  # left the buffer at t = 7, 8, not admitted
    assert grad_norm(7) > 0  # still in the buffer at t = 8
    assert grad_norm(steps - 1) > 0  # in the buffer


def test_full_memory_attends_to_everything():
    torch.manual_seed(0)
    memory = FullMemory(D)
    memory.reset(2)
    states = [torch.randn(2, D, requires_grad=True) for _ in range(6)]
    for state in states:
        memory.push(state)
    summary, weights = memory.attend(torch.randn(2, D))
    assert weights.shape == (2, 6)
    torch.testing.assert_close(weights.sum(1), torch.ones(2))
    summary.sum().backward()
    assert all(s.grad is not None and s.grad.norm() > 0 for s in states)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_shapes_causality_and_contract(name):
    cls = MODELS[name]
    torch.manual_seed(0)
    model = cls(10, cls.Config(emb_size=6, hidden_size=8, attention_size=5, nu=3, rho=2))
    assert not model.parser_kind.parses
    tokens = torch.randint(0, 10, (2, 15))
    out = model(tokens, model.init_state(2))
    assert out.hidden.shape == (2, 15, 8) and out.raw_outputs[0].shape == (2, 15, 8)
    assert model.logits(out.hidden).shape == (2, 15, 10)
    # Causal: changing a later token leaves earlier outputs unchanged.
    changed = tokens.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 10
    out2 = model(changed, model.init_state(2))
    torch.testing.assert_close(out.hidden[:, :10], out2.hidden[:, :10])
    assert not torch.allclose(out.hidden[:, 10:], out2.hidden[:, 10:])
    with pytest.raises(NotImplementedError):
        model.parse_structure(tokens, torch.tensor([15, 15]))
    with pytest.raises(ValueError):
        cls.Config(bogus=1)


def test_models_are_registered():
    from induce.models import registry

    for name, cls in MODELS.items():
        assert registry._REGISTRY[name] is cls
