"""Adversarial checks of the rollout engines: architectures the native engine takes or refuses,
and the sampling options, native vs hf vs the documented semantics (tiny models, tokens only)."""

from __future__ import annotations

import logging
import threading
import types

import numpy as np
import pytest
import torch

from rlxf.rollout import GenerationRequest, SamplingParams, build_engine
from rlxf.rollout.native.engine import NativeEngine
from rlxf.rollout.native.model import UnsupportedModel, model_spec
from rlxf.rollout.sampling import derive_seed


def _qwen(seed=0, **overrides):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    kw = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)
    kw.update(overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(Qwen2Config(**kw)).eval()


def test_qwen2_with_sliding_window_on_but_no_sliding_layer_runs_natively_and_matches_hf():
    # Qwen2 configs with use_sliding_window=true and max_window_layers == num_hidden_layers:
    # transformers slides no layer (a sliding layer 1 with this window moves the logits by ~0.1)
    model = _qwen(use_sliding_window=True, sliding_window=4, max_window_layers=2)
    assert model.config.layer_types == ["full_attention", "full_attention"]
    engine = build_engine("native", model)
    assert isinstance(engine, NativeEngine)
    prompts = [[5, 9, 11, 3, 7, 2, 60, 33, 12, 8], [1, 2, 3]]
    sp = SamplingParams(n=1, temperature=0.0, max_new_tokens=12, ignore_eos=True)
    native = engine.generate(prompts, sp)
    hf = build_engine("hf", model).generate(prompts, sp)
    with torch.no_grad():   # and the plain forward, token by token: the HF reference for each log-prob
        for p, [c] in zip(prompts, native, strict=True):
            seq = torch.tensor([p + c.response_ids])
            logp = torch.log_softmax(model(seq).logits[0, len(p) - 1:-1].float(), -1)
            ref = logp.gather(-1, torch.tensor(c.response_ids)[:, None]).squeeze(-1)
            assert c.response_ids == logp.argmax(-1).tolist()
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)
    for [a], [b] in zip(native, hf, strict=True):
        assert a.response_ids == b.response_ids


def test_a_window_no_sequence_can_exceed_is_full_attention():
    model_spec(_qwen(use_sliding_window=True, sliding_window=64, max_window_layers=0))


def test_a_layer_that_really_slides_is_refused_and_falls_back_to_hf_with_a_log_line(caplog):
    model = _qwen(use_sliding_window=True, sliding_window=4, max_window_layers=1)
    with pytest.raises(UnsupportedModel, match=r"layers \[1\] use sliding-window attention \(sliding_window 4"):
        model_spec(model)
    with caplog.at_level(logging.WARNING, logger="rlxf.rollout.registry"):
        engine = build_engine("native", model)
    assert engine.name == "hf"
    assert "layers [1] use sliding-window attention" in caplog.text and "using 'hf' instead" in caplog.text


@pytest.fixture(scope="module")
def nano(tokenizer_for_tests):
    from rlxf.models.factory import build_model

    return build_model("nano", tokenizer_for_tests, seed=0).eval()


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_a_stop_string_that_begins_in_the_prompt_does_not_end_the_response(nano, tokenizer_for_tests, backend):
    # stop strings are searched in the response's text only; transformers' own stop_strings also
    # see the prompt, and the hf engine then reported a 1-token response as finished by "length"
    tok = tokenizer_for_tests
    prompt = tok.encode("Hello there, how are")
    engine = build_engine(backend, nano, tok)
    plain = SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True)
    free = engine.generate([prompt], plain)[0][0].response_ids
    stop = tok.decode(prompt)[-1] + tok.decode(free[:1])[0]       # prompt's last char + response's first
    assert stop in tok.decode(prompt + free[:1])
    # the documented end: the shortest response prefix whose own text holds the stop string
    end = next((t for t in range(1, len(free) + 1) if stop in tok.decode(free[:t])), None)
    got = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True,
                                                   stop_strings=(stop,)))[0][0]
    if end is None:
        assert (got.response_ids, got.finish_reason) == (free, "length")
    else:
        assert (got.response_ids, got.finish_reason) == (free[:end], "stop_string")
    assert end is None or end > 1


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64, 1.5, "7"])
def test_a_request_seed_outside_the_engines_range_is_refused_where_it_is_made(seed):
    # before: the native engine failed the whole call with numpy's "out of bounds for uint64"
    # (-1, 2**64) while the hf engine took any seed modulo 2**63 (so 2**63 + s sampled as s)
    with pytest.raises(ValueError, match=r"GenerationRequest seed must be an integer in \[0, 2\*\*63\)"):
        GenerationRequest([1, 2], seed=seed)
    assert GenerationRequest([1, 2], seed=np.int64(2**63 - 1)).seed == 2**63 - 1


class _Queue:
    def __init__(self):
        self.items = []

    def put(self, item):
        self.items.append(item)


def test_the_engine_process_seeds_an_unseeded_request_by_its_place_in_the_call():
    # sampling.seed: request i of a call samples with derive_seed(seed, i). The engine process
    # batches whatever is waiting, so the request must carry that seed when it is sent
    from rlxf.rollout.process import EngineProcess

    engine = EngineProcess.__new__(EngineProcess)
    engine._ids, engine._inflight, engine._commands = iter(range(100)), {}, _Queue()
    engine._done, engine._awaited, engine._failed, engine._closed = {}, set(), None, False
    engine._cond = threading.Condition(threading.RLock())
    engine.recipe = types.SimpleNamespace(hf_config=types.SimpleNamespace(vocab_size=100),
                                          rollout=types.SimpleNamespace(backend="native"))
    engine._wait = lambda done, timeout=None: engine._done.update({i: [] for i in engine._inflight})
    sp = SamplingParams(seed=7)
    engine.generate([[1], GenerationRequest([2], seed=5), [3]], sp)
    engine.submit([4], sp)
    sent = [(c[2].prompt_ids, c[2].seed) for c in engine._commands.items]
    assert sent == [([1], derive_seed(7, 0)), ([2], 5), ([3], derive_seed(7, 2)), ([4], derive_seed(7, 0))]
    engine.submit([5], SamplingParams())          # no call-level seed: the engine draws one
    assert engine._commands.items[-1][2].seed is None


def test_a_negative_stop_token_id_is_refused():
    # no token has it: it stopped nothing (and made transformers warn that eos would never stop)
    with pytest.raises(ValueError, match=r"stop_token_ids must be token ids >= 0 \(got \[3, -1\]\)"):
        SamplingParams(stop_token_ids=[3, -1])
