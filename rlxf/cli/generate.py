"""`rlxf generate`: chat-template prompts, sample responses with a rollout engine, print them."""

from __future__ import annotations

import sys
import time

from rlxf.cli.errors import UsageError


def run(model: str, prompts: list[str], backend: str = "native", n: int = 1, temperature: float = 0.0,
        max_new_tokens: int = 64) -> None:
    from rlxf.models.loading import ModelLoadError, check_source, load_model, load_tokenizer
    from rlxf.rollout import BACKENDS, SamplingParams, build_engine

    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    try:
        sampling = SamplingParams(n=n, temperature=temperature, max_new_tokens=max_new_tokens)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        check_source(model, "model", local_first=True)   # a missing path named as the model, not its tokenizer
        tokenizer = load_tokenizer(model)
        policy = load_model(model, device="auto", dtype="auto").eval()
    except ModelLoadError as e:
        raise UsageError(str(e)) from None
    from rlxf.data.templates import encode_prompts

    templated = getattr(tokenizer, "chat_template", None) is not None
    if not templated:
        print(f"note: tokenizer of {model} has no chat template; prompts are used as plain text", file=sys.stderr)
    encoded = encode_prompts(tokenizer, list(prompts), use_chat_template=templated)
    engine = build_engine(backend, policy, tokenizer)
    start = time.perf_counter()
    groups = engine.generate([ids for ids, _ in encoded], sampling)
    seconds = time.perf_counter() - start
    tokens = 0
    for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True)):
        print(f"=== prompt {i}: {prompt}")
        for j, c in enumerate(group):
            tokens += len(c.response_ids)
            if c.finish_reason == "error":
                print(f"--- sample {j} failed: {c.error}")
                continue
            text = tokenizer.decode(c.response_ids, skip_special_tokens=True)
            print(f"--- sample {j} ({c.finish_reason}, {len(c.response_ids)} tokens, "
                  f"log-prob {sum(c.logprobs):.2f})\n{text}")
    print(f"[{type(engine).__name__}: {tokens} tokens in {seconds:.2f}s]", file=sys.stderr)

