"""`rlxf generate`: chat-template prompts, sample responses with a rollout engine, print them."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rlxf.cli.errors import UsageError


def run(model: str, prompts: list[str], backend: str = "native", n: int = 1, temperature: float = 0.0,
        max_new_tokens: int = 64) -> None:
    from rlxf.models.loading import ModelLoadError, load_model, load_tokenizer
    from rlxf.rollout import BACKENDS, SamplingParams, build_engine

    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    try:
        sampling = SamplingParams(n=n, temperature=temperature, max_new_tokens=max_new_tokens)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_local(model)
    try:
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


def _check_local(model: str) -> None:
    """A local path that does not exist is named as the MODEL argument (not as a tokenizer to
    write a model into). A path looks local when it starts with . / ~, has more parts than a hub
    id's org/name, or its first part is a local directory (``runs/typo``)."""
    if Path(model).expanduser().exists():
        return
    parts = model.rstrip("/").split("/")
    looks_local = (model.startswith((".", "/", "~")) or len(parts) > 2 or model.endswith("/")
                   or (len(parts) == 2 and Path(parts[0]).is_dir()))
    if looks_local:
        raise UsageError(f"{model} does not exist; give a run directory (runs/NAME), a checkpoint directory "
                         f"(runs/NAME/checkpoints/step_N), a model directory (`rlxf init-model` builds one), or a "
                         f"Hugging Face hub id (org/name)")
