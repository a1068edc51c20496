"""The native engine end to end on the built-in tiny model: scheduling, seeds, weights, errors."""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch

from rlxf.rollout import GenerationRequest, SamplingParams, build_engine


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer_for_tests):
    from rlxf.models import init_model, load_model

    path = init_model("tiny", tmp_path_factory.mktemp("tiny") / "model", seed=0, tokenizer=tokenizer_for_tests)
    return load_model(path, device="cpu", dtype="float32").eval()


@pytest.fixture(scope="module")
def engine(tiny, tokenizer_for_tests):
    return build_engine("native", tiny, tokenizer_for_tests)


def prompts(k, lo=3, hi=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi, (k,), generator=g).tolist()
    return [torch.randint(10, 4000, (n,), generator=g).tolist() for n in lengths]


def ids(groups):
    return [[c.response_ids for c in group] for group in groups]


def _batch_invariant_kernels() -> bool:
    from rlxf.rollout.native.kernels import OneDNNKernels, select_kernels

    return type(select_kernels(torch.device("cpu"), torch.float32)) is OneDNNKernels


# with torch's F.linear (MKL) a row's last bits depend on the batch size: these hold with oneDNN
batch_invariant = pytest.mark.skipif(not _batch_invariant_kernels(),
                                     reason="oneDNN's linear is not usable in this torch build")


@batch_invariant
def test_seeded_request_samples_the_same_alone_in_a_batch_and_in_any_slot(tiny, tokenizer_for_tests, engine):
    target = GenerationRequest(prompts(1, seed=1)[0], seed=1234)
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, ignore_eos=True)
    alone = engine.generate([target], sp)[0]
    others = [GenerationRequest(p, seed=i) for i, p in enumerate(prompts(4, seed=2))]
    batched = engine.generate(others[:2] + [target] + others[2:], sp)[2]
    two_rows = build_engine("native", tiny, tokenizer_for_tests, max_batch_size=2, threads=1)
    squeezed = two_rows.generate(others + [target], sp)[4]  # other rows, admitted after the rest
    assert [c.response_ids for c in alone] == [c.response_ids for c in batched] == [c.response_ids for c in squeezed]
    # bit for bit: a row's arithmetic does not depend on the batch (see OneDNNKernels, prefill)
    assert [c.logprobs for c in alone] == [c.logprobs for c in batched] == [c.logprobs for c in squeezed]
    assert len({tuple(c.response_ids) for c in alone}) == 3  # the n samples differ from each other
    other_seed = engine.generate([GenerationRequest(target.prompt_ids, seed=99)], sp)[0]
    assert [c.response_ids for c in other_seed] != [c.response_ids for c in alone]


def test_more_requests_than_slots_all_complete_as_if_generated_alone(tiny, tokenizer_for_tests):
    eng = build_engine("native", tiny, tokenizer_for_tests, max_batch_size=3, threads=1)
    ps = prompts(6, seed=3)
    sp = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, ignore_eos=True, seed=7)
    together = eng.generate(ps, sp)
    assert eng.last_stats.max_live == 3
    ref = build_engine("native", tiny, tokenizer_for_tests)
    # request i's seed is derived from (sampling.seed, i): pass it explicitly when alone
    from rlxf.rollout.sampling import derive_seed

    alone = [ref.generate([GenerationRequest(p, seed=derive_seed(7, i))], sp)[0] for i, p in enumerate(ps)]
    assert ids(together) == ids(alone)


def test_a_long_sequence_does_not_hold_finished_slots_idle(tiny, tokenizer_for_tests):
    # Two rows. One request runs 40 tokens; eight short ones (their prompts fill the context
    # window up to 5 tokens) take the other row one after another. With freed rows reused, the
    # whole batch takes the 39 decode steps the long one needs (its first token comes from the
    # prefill) and every one of them decodes 2 rows until the shorts run out (8 x 4 steps);
    # static batches of 2 would take 39 + 4 x 4 steps.
    eng = build_engine("native", tiny, tokenizer_for_tests, max_batch_size=2, max_model_len=64, threads=1)
    long_req, short = prompts(1, seed=4)[0], prompts(8, lo=59, hi=60, seed=5)
    sp = SamplingParams(temperature=0.0, max_new_tokens=40, ignore_eos=True)
    out = eng.generate([long_req] + short, sp)
    st = eng.last_stats
    assert st.decode_steps == 39 and st.rows_decoded == 39 + 8 * 4
    ref = build_engine("native", tiny, tokenizer_for_tests, max_model_len=64)
    assert ids(out) == [ids(ref.generate([p], sp))[0] for p in [long_req] + short]
    assert [len(g[0].response_ids) for g in out] == [40] + [5] * 8
    assert all(g[0].finish_reason == "length" for g in out)


@batch_invariant
def test_decode_workers_give_the_same_results_as_one_batch(tiny, tokenizer_for_tests):
    ps = prompts(7, seed=15)
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=2)
    one = build_engine("native", tiny, tokenizer_for_tests, threads=1)
    three = build_engine("native", tiny, tokenizer_for_tests, threads=3, max_batch_size=6)
    a, b = one.generate(ps, sp), three.generate(ps, sp)
    assert ids(a) == ids(b)
    assert [[c.logprobs for c in g] for g in a] == [[c.logprobs for c in g] for g in b]
    assert three.workers_for(len(ps)) == 3 and three.last_stats.generated_tokens == 7 * 3 * 10
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10, ignore_eos=True)
    assert ids(one.generate(ps, greedy)) == ids(three.generate(ps, greedy))


def test_a_small_call_is_shared_by_all_decode_workers(tiny, tokenizer_for_tests):
    # 4 requests x 4 samples fit one worker's 256 rows many times over: a worker that took
    # requests while it had room would decode them all and leave the other idle
    engine = build_engine("native", tiny, tokenizer_for_tests, threads=2)
    sp = SamplingParams(n=4, temperature=1.0, max_new_tokens=6, ignore_eos=True, seed=0)
    out = engine.generate(prompts(4, seed=21), sp)
    assert engine.last_stats.busy_workers == 2 and engine.last_stats.max_live == 16
    # the KV caches are sized for the call and released at its end (the trainer runs next)
    assert engine.last_stats.kv_cache_bytes > 0
    assert all(c.prompt is None and c.gen is None for c in engine.caches)
    assert ids(out) == ids(build_engine("native", tiny, tokenizer_for_tests, threads=1).generate(prompts(4, seed=21), sp))


@pytest.mark.parametrize("slow", ["rlxf-decode-0", "rlxf-decode-1"])
def test_which_requests_share_a_batch_does_not_depend_on_thread_timing(tiny, tokenizer_for_tests, monkeypatch, slow):
    """A run is reproducible (and a resume exact) even where the matmuls round a row by batch size.

    torch's F.linear (MKL) gives a row other last bits for other numbers of rows, so a request's
    log-probs can depend on which requests share its batch. Two workers, ten requests whose
    responses end at different steps (the context window): when requests went to whichever
    worker had room first, slowing one worker changed every later batch.
    """
    from rlxf.rollout.native import engine as native
    from rlxf.rollout.native.kernels import TorchKernels

    def run(delay: float):
        eng = build_engine("native", tiny, tokenizer_for_tests, threads=2, max_batch_size=8, max_model_len=48)
        eng.kernels = TorchKernels()
        batches: list[tuple[str, tuple[int, ...]]] = []
        step = native._Run.step

        def recorded(r):
            name = threading.current_thread().name
            batches.append((name, tuple(sorted(set(r.row_req[:r.B].tolist())))))
            if name == slow:
                time.sleep(delay)
            step(r)

        with monkeypatch.context() as m:
            m.setattr(native._Run, "step", recorded)
            out = eng.generate(prompts(10, lo=18, hi=46, seed=31),
                               SamplingParams(n=2, temperature=1.0, max_new_tokens=24, ignore_eos=True, seed=4))
        return out, sorted(batches)

    expected, expected_batches = run(0.0)
    got, got_batches = run(0.003)
    assert len({len(g[0].response_ids) for g in got}) > 3  # responses end at different steps
    assert got_batches == expected_batches
    assert ids(got) == ids(expected)
    assert [[c.logprobs for c in g] for g in got] == [[c.logprobs for c in g] for g in expected]


def test_a_group_larger_than_the_batch_is_split_across_admissions(tiny, tokenizer_for_tests):
    sp = SamplingParams(n=5, temperature=1.0, max_new_tokens=8, ignore_eos=True)
    req = [GenerationRequest(prompts(1, seed=6)[0], seed=3)]
    small = build_engine("native", tiny, tokenizer_for_tests, max_batch_size=2, threads=1).generate(req, sp)
    big = build_engine("native", tiny, tokenizer_for_tests).generate(req, sp)
    assert ids(small) == ids(big)


def test_prompts_are_prefilled_once_per_group(engine):
    ps = prompts(3, seed=7)
    engine.generate(ps, SamplingParams(n=4, temperature=1.0, max_new_tokens=4, ignore_eos=True))
    st = engine.last_stats
    assert st.prefill_prompts == 3 and st.prefill_tokens == sum(len(p) for p in ps)
    assert st.generated_tokens == 3 * 4 * 4


def test_bad_prompts_fail_alone_with_a_reason(tiny, tokenizer_for_tests):
    eng = build_engine("native", tiny, tokenizer_for_tests, max_model_len=64)
    good = prompts(2, seed=8)
    sp = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=1, ignore_eos=True)
    out = eng.generate([good[0], [], list(range(100, 170)), good[1], [5, 99999]], sp)
    for i, reason in ((1, "empty prompt"), (2, "context window is 64"), (4, "outside the vocabulary")):
        assert all(c.finish_reason == "error" and reason in c.error and c.response_ids == [] for c in out[i])
    clean = eng.generate([good[0], good[1]], sp)
    # the surviving requests keep their index-derived seeds, so compare with seeds made explicit
    from rlxf.rollout.sampling import derive_seed

    alone0 = eng.generate([GenerationRequest(good[0], seed=derive_seed(1, 0))], sp)[0]
    alone3 = eng.generate([GenerationRequest(good[1], seed=derive_seed(1, 3))], sp)[0]
    assert ids([out[0], out[3]]) == ids([alone0, alone3])
    assert all(c.finish_reason == "length" and len(c.response_ids) == 6 for g in clean for c in g)


def test_the_context_window_ends_a_response_with_length(tiny, tokenizer_for_tests):
    eng = build_engine("native", tiny, tokenizer_for_tests, max_model_len=20)
    out = eng.generate([list(range(100, 115))], SamplingParams(temperature=0.0, max_new_tokens=50, ignore_eos=True))
    assert len(out[0][0].response_ids) == 5 and out[0][0].finish_reason == "length"


def test_stop_tokens_end_a_response_and_are_kept(engine, tokenizer_for_tests):
    p = prompts(1, seed=9)
    free = engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=30, ignore_eos=True))[0][0]
    stop = free.response_ids[4]
    first = free.response_ids.index(stop)
    out = engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=30, ignore_eos=True, stop_token_ids=[stop]))
    c = out[0][0]
    assert c.response_ids == free.response_ids[: first + 1] and c.finish_reason == "stop"
    assert c.logprobs == free.logprobs[: first + 1]


def test_stop_strings_end_a_response_at_the_completing_token(engine, tokenizer_for_tests):
    tok = tokenizer_for_tests
    p = prompts(1, seed=10)
    free = engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=30, ignore_eos=True))[0][0]
    text6, text5 = tok.decode(free.response_ids[:6]), tok.decode(free.response_ids[:5])
    assert len(text6) > len(text5)
    stop = text6[-2:] if len(text6) - len(text5) >= 2 else text6[-1]
    if stop in text5:
        pytest.skip("greedy text repeats the chosen stop string earlier")
    out = engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=30, ignore_eos=True, stop_strings=[stop]))
    assert out[0][0].response_ids == free.response_ids[:6] and out[0][0].finish_reason == "stop_string"


def test_model_eos_ids_stop_by_default(tiny, engine):
    assert set(engine.eos_ids) >= {2, 0}  # <|im_end|> and <|endoftext|> from the generation config
    p = prompts(1, seed=11)
    free = engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True))[0][0]
    patched = copy.copy(engine)
    patched.eos_ids = (free.response_ids[2],)
    out = patched.generate(p, SamplingParams(temperature=0.0, max_new_tokens=12))[0][0]
    assert out.finish_reason == "stop" and out.response_ids == free.response_ids[: free.response_ids.index(free.response_ids[2]) + 1]


def test_max_new_tokens_one_comes_from_the_prefill(engine):
    out = engine.generate(prompts(3, seed=12), SamplingParams(n=2, temperature=1.0, max_new_tokens=1, ignore_eos=True))
    assert all(len(c.response_ids) == 1 and c.finish_reason == "length" for g in out for c in g)
    assert engine.last_stats.decode_steps == 0


def test_update_weights_is_a_copy_that_changes_generation(tiny, tokenizer_for_tests):
    eng = build_engine("native", tiny, tokenizer_for_tests)
    p = prompts(2, seed=13)
    sp = SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True)
    before = ids(eng.generate(p, sp))
    pointers = {name: t.data_ptr() for name, t in eng.weights.targets.items()}
    changed = copy.deepcopy(tiny)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for prm in changed.parameters():
            prm.add_(torch.randn(prm.shape, generator=g) * 0.05)
    eng.update_weights(changed.named_parameters(), version=7)
    after = eng.generate(p, sp)
    assert ids(after) != before
    assert all(c.policy_version == 7 for g in after for c in g)
    # the same as an engine built from the changed model, and no tensor was re-allocated
    assert ids(after) == ids(build_engine("native", changed, tokenizer_for_tests).generate(p, sp))
    assert {name: t.data_ptr() for name, t in eng.weights.targets.items()} == pointers
    with pytest.raises(KeyError, match="does not know"):
        eng.update_weights([("model.layers.0.not_a_weight", torch.zeros(1))], version=8)


def test_models_the_native_engine_does_not_implement_fall_back_to_hf(caplog):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)).eval()
    with caplog.at_level("WARNING"):
        eng = build_engine("native", model)
    assert type(eng).__name__ == "HFEngine" and "using 'hf' instead" in caplog.text
    out = eng.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True))
    assert len(out[0][0].response_ids) == 4


def test_lora_wrapped_models_are_copied_with_their_adapters_merged(tiny, tokenizer_for_tests):
    from rlxf.config.model import LoraConfig
    from rlxf.models import apply_lora, merged_state_dict

    peft_model = apply_lora(copy.deepcopy(tiny), LoraConfig(r=4, alpha=8))
    with torch.no_grad():  # LoRA B starts at zero: give the adapters an effect
        for name, prm in peft_model.named_parameters():
            if "lora_B" in name:
                prm.normal_(0, 0.2, generator=torch.Generator().manual_seed(len(name)))
    merged = copy.deepcopy(tiny)
    merged.load_state_dict(merged_state_dict(peft_model), strict=False)
    p = prompts(2, seed=14)
    sp = SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)
    expected = ids(build_engine("native", merged, tokenizer_for_tests).generate(p, sp))
    assert expected != ids(build_engine("native", tiny, tokenizer_for_tests).generate(p, sp))
    for backend in ("native", "hf"):
        assert ids(build_engine(backend, peft_model, tokenizer_for_tests).generate(p, sp)) == expected, backend
    eng = build_engine("native", tiny, tokenizer_for_tests)
    eng.update_weights(merged_state_dict(peft_model).items(), version=1)
    assert ids(eng.generate(p, sp)) == expected


def test_packed_weights_are_a_memory_bounded_choice_with_the_same_samples(tiny, tokenizer_for_tests, monkeypatch):
    from rlxf.rollout.base import EngineOptions
    from rlxf.rollout.native.kernels import OneDNNKernels, select_kernels

    try:
        select_kernels(torch.device("cpu"), torch.float32, "onednn")
    except RuntimeError:
        pytest.skip("oneDNN kernels not available here")
    packed = build_engine("native", tiny, tokenizer_for_tests, pack_weights=True)
    plain = build_engine("native", tiny, tokenizer_for_tests, pack_weights=False)
    # compare oneDNN's two layouts, whichever auto packs here
    packed.kernels, plain.kernels = OneDNNKernels(pack=True), OneDNNKernels(pack=False)
    assert packed.kernels._reorder is not None and plain.kernels._reorder is None
    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=5)
    a, b = packed.generate(prompts(4), sampling), plain.generate(prompts(4), sampling)
    assert ids(a) == ids(b)
    assert [[c.logprobs for c in g] for g in a] == [[c.logprobs for c in g] for g in b]
    monkeypatch.setattr(EngineOptions, "PACK_WEIGHTS_AUTO_MAX_BYTES", 1 << 20)  # a model over the bound
    assert getattr(build_engine("native", tiny, tokenizer_for_tests).kernels, "_reorder", None) is None


@pytest.mark.parametrize("max_new_tokens", [1, 2])
def test_every_request_is_answered_when_a_whole_batch_finishes_at_once(tiny, tokenizer_for_tests, max_new_tokens):
    """Four rows (two prompts x n=2) fill the batch and all finish in the same step, leaving it
    empty: the worker stopped there, and four of six prompts came back as None."""
    engine = build_engine("native", tiny, tokenizer_for_tests, max_batch_size=4, threads=1)
    got = engine.generate(prompts(6, seed=1), SamplingParams(n=2, temperature=1.0, max_new_tokens=max_new_tokens,
                                                             seed=0))
    assert all(c is not None and len(c.response_ids) == max_new_tokens for group in got for c in group)
