"""The HF reference engine samples from softmax(z / T) alone, whatever the saved generation config says."""

from __future__ import annotations

import pytest
import torch

from rlxf.rollout import SamplingParams, build_engine


@pytest.fixture(scope="module")
def nano(tokenizer_for_tests):
    from rlxf.models.factory import build_model

    return build_model("nano", tokenizer_for_tests, seed=0).eval()


def greedy_by_hand(model, prompt, steps):
    ids, lps = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            ids.append(int(logp.argmax()))
            lps.append(float(logp[ids[-1]]))
    return ids[len(prompt):], lps


def test_generation_config_sampling_knobs_do_not_reach_generate(nano, tokenizer_for_tests):
    import copy

    prompt = [5, 6, 7]
    tokens, lps = greedy_by_hand(nano, prompt, 4)
    # a saved generation_config.json may carry these (Qwen2.5-Instruct: repetition_penalty=1.05);
    # the reported log-probs and the native engine ignore them, so sampling must too
    model = copy.deepcopy(nano)
    model.generation_config.suppress_tokens = [tokens[0]]
    model.generation_config.repetition_penalty = 5.0
    model.generation_config.min_new_tokens = 2
    engine = build_engine("hf", model, tokenizer_for_tests)
    got = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True))[0][0]
    assert got.response_ids == tokens
    assert max(abs(a - b) for a, b in zip(got.logprobs, lps, strict=True)) < 1e-4
    assert engine.eos_ids == build_engine("hf", nano, tokenizer_for_tests).eos_ids  # the stop ids are kept


def test_update_weights_refuses_a_tensor_of_another_shape(nano, tokenizer_for_tests):
    engine = build_engine("hf", nano, tokenizer_for_tests)
    norm = nano.model.norm.weight.detach()  # (64,): copy_ would broadcast it over every embedding row
    with pytest.raises(ValueError, match=r"model\.embed_tokens\.weight has shape \(64,\), the engine's copy \(4096, 64\)"):
        engine.update_weights([("model.embed_tokens.weight", norm)], version=1)


@pytest.mark.parametrize("bad", ["shape", "name"])
def test_a_refused_weight_update_leaves_every_weight_as_it_was(nano, tokenizer_for_tests, bad):
    engine = build_engine("hf", nano, tokenizer_for_tests)
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    tensors = [(k, torch.zeros_like(v)) for k, v in nano.state_dict().items()]
    tensors.append(("model.norm.weight", torch.zeros(3)) if bad == "shape" else ("lora_A.weight", torch.zeros(3)))
    with pytest.raises((ValueError, KeyError)):
        engine.update_weights(tensors, version=1)
    assert all(torch.equal(v, before[k]) for k, v in engine.model.state_dict().items()) and engine.policy_version == 0
