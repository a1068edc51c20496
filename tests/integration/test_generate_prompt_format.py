"""`rlxf generate` formats prompts as the run trained: a model trained on raw `a+b=` prompts
(data.apply_chat_template: false) is asked in plain text, not through the chat template."""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml

from rlxf.cli.errors import UsageError
from rlxf.cli.main import main
from rlxf.data.templates import encode_prompts


def _run(tmp_path, nano_model_dir, name: str, **data) -> tuple:
    """runs/<name> with the nano model as its step-2 checkpoint and a config.yaml whose data
    section is ``data``."""
    run = tmp_path / name
    shutil.copytree(nano_model_dir, run / "checkpoints" / "step_2" / "model")
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"task": "arithmetic", **data}}))
    return run, run / "checkpoints" / "step_2"


def test_a_run_trained_on_raw_prompts_is_asked_in_plain_text(tmp_path, nano_model_dir, capsys):
    run, checkpoint = _run(tmp_path, nano_model_dir, "raw", apply_chat_template=False)
    args = ["3+4=", "9+9=", "--max-new-tokens", "4"]
    assert main(["generate", str(nano_model_dir), *args, "--no-chat-template"]) == 0
    plain = capsys.readouterr().out
    assert main(["generate", str(nano_model_dir), *args]) == 0   # a bare model: the tokenizer's template
    templated = capsys.readouterr().out
    assert plain != templated   # (greedy log-probs differ with the prompt ids)
    for where in (run, checkpoint):
        assert main(["generate", str(where), *args]) == 0, where
        got = capsys.readouterr()
        assert got.out == plain, where
        assert "plain text (data.apply_chat_template: false of" in got.err and "config.yaml" in got.err
    # the explicit option overrides the run's choice
    assert main(["generate", str(run), *args, "--chat-template"]) == 0
    assert capsys.readouterr().out == templated
    # a run that trained with the template keeps it, and says so
    chat, _ = _run(tmp_path, nano_model_dir, "chat", apply_chat_template=True)
    assert main(["generate", str(chat), *args]) == 0
    got = capsys.readouterr()
    assert got.out == templated and "chat template (data.apply_chat_template: true of" in got.err


def test_the_run_s_system_prompt_is_used_as_in_training(tmp_path, nano_model_dir, tokenizer_for_tests):
    from rlxf.cli.generate import prompt_format

    run, checkpoint = _run(tmp_path, nano_model_dir, "sys", apply_chat_template=False, system_prompt="Add.")
    model = str(checkpoint / "model")
    for use, flag in ((False, None), (True, True), (False, False)):
        fmt = prompt_format(model, tokenizer_for_tests, flag)
        assert (fmt.use_chat_template, fmt.system_prompt) == (use, "Add."), flag
    fmt = prompt_format(model, tokenizer_for_tests, None)
    # the training data's own encoding (rlxf.data.templates), not a copy of it
    got = encode_prompts(tokenizer_for_tests, ["3+4="], system_prompt=fmt.system_prompt,
                         use_chat_template=fmt.use_chat_template)
    assert got[0][1] == "Add.\n\n3+4="
    # a model outside any run: the tokenizer's template, no system prompt
    bare = prompt_format(str(nano_model_dir), tokenizer_for_tests, None)
    assert (bare.use_chat_template, bare.system_prompt) == (True, None)


def test_chat_template_on_a_tokenizer_without_one_is_refused(tokenizer_for_tests):
    from rlxf.cli.generate import prompt_format

    plain = copy.deepcopy(tokenizer_for_tests)
    plain.chat_template = None
    assert prompt_format("org/name", plain, None).use_chat_template is False
    with pytest.raises(UsageError, match="--no-chat-template"):
        prompt_format("org/name", plain, True)


def test_help_says_what_the_default_is(capsys):
    assert main(["generate", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--chat-template / --no-chat-template" in out
    assert "Default: as the run trained (data.apply_chat_template" in out
    assert "otherwise the chat template when the tokenizer has one" in out
