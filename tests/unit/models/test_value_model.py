"""ValueModel: alignment of values with log-probs, reward scores, save/load."""

from __future__ import annotations

import pytest
import torch

from rlxf.models.value_model import HEAD_FILE, ValueModel, sequence_scores, sequence_values


@pytest.fixture(scope="module")
def critic(nano_model_dir):
    m = ValueModel.from_pretrained(nano_model_dir, device="cpu")
    with torch.no_grad():
        torch.manual_seed(0)
        m.value_head.weight.normal_(0, 1.0)
        m.value_head.bias.fill_(0.25)
    return m


def test_new_head_is_zero(nano_model_dir):
    m = ValueModel.from_pretrained(nano_model_dir)
    v = sequence_values(m, [[1, 2]], [[3, 4, 5]])
    assert v.shape == (1, 3) and (v == 0).all()
    assert sum(p.numel() for p in m.value_head.parameters()) == 65  # hidden 64 + bias


def test_values_read_before_each_token(critic):
    prompts, responses = [[1, 2, 3], [7]], [[4, 5], [8, 9, 10]]
    with torch.no_grad():
        packed = sequence_values(critic, prompts, responses)
        padded = sequence_values(critic, prompts, responses, packed=False)
        full0 = critic(torch.tensor([[1, 2, 3, 4, 5]]))[0]
        full1 = critic(torch.tensor([[7, 8, 9, 10]]))[0]
    assert packed.shape == (2, 3)
    # V(s_t) for a_t is read at position P-1+t: positions 2,3 of seq 0 and 0,1,2 of seq 1.
    torch.testing.assert_close(packed[0, :2], full0[2:4], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[1], full1[0:3], rtol=1e-5, atol=1e-5)
    assert packed[0, 2] == 0
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(packed[1, 0], packed[1, 1])


def test_scores_are_the_value_after_the_last_token(critic):
    with torch.no_grad():
        scores = sequence_scores(critic, [[1, 2, 3], [7]], [[4, 5], [8, 9, 10]])
        full0 = critic(torch.tensor([[1, 2, 3, 4, 5]]))[0, -1]
        full1 = critic(torch.tensor([[7, 8, 9, 10]]))[0, -1]
    torch.testing.assert_close(scores, torch.stack([full0, full1]), rtol=1e-5, atol=1e-5)


def test_save_load_round_trip(critic, tmp_path):
    from transformers import AutoModel

    out = critic.save_pretrained(tmp_path / "critic")
    assert (out / HEAD_FILE).is_file()
    back = ValueModel.from_pretrained(out)
    ids = torch.tensor([[1, 5, 9, 13]])
    with torch.no_grad():
        torch.testing.assert_close(back(ids), critic(ids), rtol=0, atol=0)
    AutoModel.from_pretrained(out)  # the trunk is a plain HF model


def test_wrong_head_shape_is_reported(critic, tmp_path):
    from safetensors.torch import save_file

    out = critic.save_pretrained(tmp_path / "bad")
    save_file({"weight": torch.zeros(1, 3), "bias": torch.zeros(1)}, str(out / HEAD_FILE))
    with pytest.raises(ValueError, match="expected"):
        ValueModel.from_pretrained(out)


def test_value_gradients_reach_trunk_and_head(critic):
    critic.zero_grad()
    sequence_values(critic, [[1, 2]], [[3, 4]]).sum().backward()
    assert critic.value_head.weight.grad.abs().sum() > 0
    assert critic.trunk.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0
    critic.zero_grad()
