"""One engine process, several threads of the trainer (async mode's episodes run in threads of
their own while the trainer's thread sends weights and evaluates): each thread gets its own
answers, the same as when the calls take turns; what ``generate`` waits for is never handed out
by ``ready``; a thread still waiting when the engine is closed is told so."""

from __future__ import annotations

import threading

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlxf.config.rollout import RolloutConfig
from rlxf.rollout.base import GenerationRequest, SamplingParams
from rlxf.rollout.process import EngineLost, EngineProcess, EngineRecipe

SAMPLING = SamplingParams(n=2, max_new_tokens=6, temperature=1.0)


@pytest.fixture
def engine(nano_model_dir):
    model = AutoModelForCausalLM.from_pretrained(nano_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    engine = EngineProcess(EngineRecipe.of(model, tokenizer, RolloutConfig(mode="async"), seed=0),
                           model.named_parameters())
    yield engine
    engine.close()


def _requests(k: int) -> list[GenerationRequest]:
    return [GenerationRequest([1 + k, 2 + i, 3], seed=100 * k + i) for i in range(3)]


def _tokens(groups) -> list[list[list[int]]]:
    return [[list(c.response_ids) for c in group] for group in groups]


def test_threads_get_their_own_answers(engine):
    alone = {k: _tokens(engine.generate(_requests(k), SAMPLING)) for k in range(4)}
    together: dict[int, list] = {}
    errors: list[BaseException] = []

    def call(k: int) -> None:
        try:
            together[k] = _tokens(engine.generate(_requests(k), SAMPLING))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    streamed = engine.submit(GenerationRequest([9, 9], seed=7), SAMPLING)  # the stream's own request
    for t in threads:
        t.start()
    handed_out = []
    while len(handed_out) < 1:   # the trainer's thread reads the stream meanwhile
        handed_out += engine.ready(timeout=5)
    for t in threads:
        t.join(timeout=120)
    assert not errors and together == alone
    assert [rid for rid, _ in handed_out] == [streamed]  # none of the threads' answers
    assert engine.ready(timeout=0) == []
    with torch.no_grad():   # weights sent from the trainer's thread while threads wait
        engine.update_weights([(n, t) for n, t in engine._weights.items()], version=1)
    assert _tokens(engine.generate(_requests(0), SAMPLING)) == alone[0]


def test_a_thread_waiting_when_the_engine_closes_is_told(engine):
    engine.generate(_requests(0), SAMPLING)   # started
    caught: list[BaseException] = []
    started = threading.Event()

    def call() -> None:
        started.set()
        try:   # long enough to be still running at the close
            engine.generate(_requests(1) * 40, SamplingParams(n=8, max_new_tokens=64, ignore_eos=True))
        except BaseException as e:  # noqa: BLE001 - checked below
            caught.append(e)

    thread = threading.Thread(target=call)
    thread.start()
    started.wait()
    engine.close()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], EngineLost) and "closed" in str(caught[0])
