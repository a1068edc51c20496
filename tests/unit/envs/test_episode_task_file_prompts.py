"""An environment is given a file prompt's question as written, not its templated text: given the
template's text, an environment that starts its episode with it as a user message templated the
prompt twice (trained silently on "<|im_start|>user\n<|im_start|>user\n41*51=..."), and since the
turn-marker check every such episode failed."""

from __future__ import annotations

import json

from rlxf.config.data import DataConfig
from rlxf.data import build_prompt_data
from rlxf.envs.agent import episode_task


def _prompts(tmp_path, tokenizer, records):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = DataConfig(source="jsonl", train_path=str(path), test_path=None, apply_chat_template=True)
    return build_prompt_data(cfg, tokenizer, seed=0).train


def test_a_file_prompt_gives_the_environment_its_question_before_the_template(tmp_path, tokenizer_for_tests):
    [text, messages] = _prompts(tmp_path, tokenizer_for_tests, [
        {"prompt": "41*51=", "answer": "2091"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6*7="}],
         "answer": "42"},
    ])
    assert "<|im_start|>" in text.prompt_text   # the engine's prompt is templated
    assert episode_task(text, seed=0).prompt == "41*51="
    assert episode_task(messages, seed=0).prompt == "6*7="   # the last user message's text


def test_a_records_own_question_field_is_kept(tmp_path, tokenizer_for_tests):
    [p] = _prompts(tmp_path, tokenizer_for_tests, [{"prompt": "41*51=", "answer": "2091", "question": "q"}])
    assert episode_task(p, seed=0).prompt == "q"
