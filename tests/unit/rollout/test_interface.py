"""SamplingParams, request validation, the backend registry, the log-prob gap, lazy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rlxf.config.rollout import RolloutConfig
from rlxf.rollout import BACKENDS, SamplingParams, build_engine, logprob_gap
from rlxf.rollout.base import GenerationRequest, as_requests, validate_prompt


def test_sampling_params_normalise_and_validate():
    sp = SamplingParams(n=4, temperature=0.0, stop_token_ids=[5, 6], stop_strings=["\n\n"])
    assert sp.greedy and sp.stop_token_ids == (5, 6) and sp.stop_strings == ("\n\n",)
    assert hash(sp) == hash(SamplingParams(n=4, temperature=0.0, stop_token_ids=(5, 6), stop_strings=("\n\n",)))
    with pytest.raises(ValueError) as e:
        SamplingParams(n=0, temperature=-1, top_p=0.0, top_k=-2, max_new_tokens=0, stop_strings=[""])
    msg = str(e.value)
    for part in ("n must be", "temperature", "top_p", "top_k", "max_new_tokens", "empty string"):
        assert part in msg


def test_sampling_params_from_the_rollout_config_section():
    cfg = RolloutConfig(n=3, temperature=0.7, top_k=20, max_new_tokens=9, stop_strings=["</a>"],
                        stop_token_ids=[1], seed=5, ignore_eos=True)
    sp = SamplingParams.from_config(cfg, n=1)
    assert (sp.n, sp.temperature, sp.top_k, sp.max_new_tokens) == (1, 0.7, 20, 9)
    assert sp.stop_strings == ("</a>",) and sp.stop_token_ids == (1,) and sp.ignore_eos
    assert sp.seed is None  # rollout.seed seeds the engine, not every call


def test_requests_accept_plain_id_lists_tensors_and_seeded_requests():
    reqs = as_requests([[1, 2], torch.tensor([3, 4]), GenerationRequest([5], seed=9)])
    assert [list(r.prompt_ids) for r in reqs] == [[1, 2], [3, 4], [5]]
    assert [r.seed for r in reqs] == [None, None, 9]


def test_prompt_validation_names_the_problem():
    assert validate_prompt([1, 2], vocab_size=10, context_window=8) is None
    assert "empty prompt" in validate_prompt([], vocab_size=10, context_window=8)
    assert "context window is 8" in validate_prompt(list(range(8)), vocab_size=10, context_window=8)
    assert "outside the vocabulary" in validate_prompt([3, 12], vocab_size=10, context_window=8)


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid backends: native, hf"):
        build_engine("vllm-ish", model=None)
    assert set(BACKENDS) == {"native", "hf"}


def test_logprob_gap_over_masked_tokens():
    engine = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, 0.0, 0.0]])
    trainer = torch.tensor([[-1.1, -2.0, -9.0], [-0.2, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    gap = logprob_gap(engine, trainer, mask)
    # |diff| on masked tokens: 0.1, 0.0, 0.3 -> max 0.3, mean 0.4 / 3
    assert gap["max_abs"].item() == pytest.approx(0.3)
    assert gap["mean_abs"].item() == pytest.approx(0.4 / 3)


def test_importing_rollout_imports_no_backend():
    code = ("import sys, rlxf.rollout; "
            "print(any(m.startswith(('rlxf.rollout.native', 'rlxf.rollout.hf', 'transformers')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
