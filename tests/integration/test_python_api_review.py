"""rlxf.train as a library call: arguments that would silently train on the wrong thing are refused
by name before a run directory exists; a failed start leaves the run it was to replace as it was;
and the caller's process (logging, torch threads, signal handlers) is as before, after a run and
after an interrupted one."""

from __future__ import annotations

import logging
import os
import signal

import pytest
import torch
from rl_helpers import metrics

import rlxf
from rlxf.config import ConfigError
from rlxf.trainer.interrupt import TrainingInterrupted


def _rows(n: int) -> list[dict]:
    return [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(n)]


def one(sample):
    return 1.0


def _kw(tmp_path, nano_model_dir, **over):
    kw = dict(model=nano_model_dir, prompts=_rows(4), reward_funcs=[one],
              run={"name": "api", "output_dir": str(tmp_path / "runs")}, rollout={"n": 2, "max_new_tokens": 2},
              train={"steps": 1, "prompts_per_step": 1, "micro_batch_size": 2}, eval={"every": 0},
              logging={"progress": False})
    return kw | over


def _lock_held(run) -> bool:
    """Whether this process still holds an open file of the run's lock."""
    fd_dir = f"/proc/{os.getpid()}/fd"
    return any(os.path.realpath(os.path.join(fd_dir, fd)) == str(run / ".lock") for fd in os.listdir(fd_dir))


@pytest.mark.parametrize("arg", ["prompts", "eval_prompts"])
def test_prompts_that_iterate_as_something_else_are_refused(tmp_path, nano_model_dir, arg):
    import pandas as pd
    from datasets import Dataset, DatasetDict

    splits = DatasetDict(train=Dataset.from_list(_rows(2)), test=Dataset.from_list(_rows(2)))
    for value, message in (("1+1=", r"single str, whose characters .* e\.g\. \w+=\['1\+1='\]"),
                           (b"1+1=", "single bytes"),
                           ({"prompt": ["1+1="], "answer": ["2"]}, r"dict \(keys prompt, answer\).*from_dict"),
                           (splits, r"DatasetDict of splits \(train, test\); pass one split"),
                           (pd.DataFrame(_rows(2)), r"DataFrame.*to_dict\('records'\)")):
        with pytest.raises(ConfigError, match=f"{arg} is a {message}"):
            rlxf.train(**_kw(tmp_path, nano_model_dir, **{arg: value}))
    assert not (tmp_path / "runs").exists()


def test_rows_without_a_prompt_or_of_mixed_forms_are_named(tmp_path, nano_model_dir):
    chat = [{"role": "user", "content": "1+1="}]
    for given, message in (({"prompts": [{"question": "1+1="}]}, r"prompts\[0\] has no 'prompt' \(its keys: question\)"),
                           ({"eval_prompts": [{"prompt": "2+2=", "answer": "4"}, {"q": 1}]},
                            r"eval_prompts\[1\] has no 'prompt'"),
                           ({"eval_prompts": ["2+2="]}, r"eval_prompts\[0\] has no 'answer' but prompts\[0\] has one"),
                           ({"prompts": ["1+1=", {"prompt": "2+2=", "answer": "4"}]},
                            r"prompts\[0\] has no 'answer' but prompts\[1\] has one"),
                           ({"prompts": ["1+1=", {"prompt": chat}]},
                            r"prompts\[1\]\['prompt'\] is a chat-messages list but prompts\[0\]'s is text"),
                           ({"prompts": [{"prompt": None}]}, r"prompts\[0\]\['prompt'\] is a NoneType"),
                           ({"prompts": ["1+1=", "  \n"]}, r"prompts\[1\]\['prompt'\] holds no text"),
                           ({"prompts": [{"prompt": [{"role": "system", "content": "be brief"}]}]},
                            r"prompts\[0\]\['prompt'\] holds no text")):
        with pytest.raises(ConfigError, match=message):
            rlxf.train(**_kw(tmp_path, nano_model_dir, **given))
    assert not (tmp_path / "runs").exists()


def test_arguments_that_would_go_unused_or_conflict_are_refused(tmp_path, nano_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    with pytest.raises(ConfigError, match="tokenizer is an in-memory .* goes with an in-memory model"):
        rlxf.train(**_kw(tmp_path, nano_model_dir, tokenizer=tokenizer))
    with pytest.raises(ConfigError, match="reward_funcs score in this process, but reward.url"):
        rlxf.train(**_kw(tmp_path, nano_model_dir, reward={"url": "http://127.0.0.1:9"}))
    with pytest.raises(ConfigError, match="reward_funcs run in this process, which run.placement=ray does not"):
        rlxf.train(**_kw(tmp_path, nano_model_dir, run={"name": "api", "output_dir": str(tmp_path / "runs"),
                                                        "placement": "ray"}))
    with pytest.raises(ConfigError, match="resume=True .* overwrite=True"):
        rlxf.train(**_kw(tmp_path, nano_model_dir), resume=True, overwrite=True)
    assert not (tmp_path / "runs").exists()


def test_a_failed_start_puts_the_replaced_run_back_and_holds_no_lock(tmp_path, nano_model_dir, monkeypatch):
    run = rlxf.train(**_kw(tmp_path, nano_model_dir)).run_dir
    before = sorted(p.name for p in run.iterdir())

    def disk_full(path, rows):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr("rlxf.api._write_jsonl", disk_full)
        with pytest.raises(OSError, match="No space"):
            rlxf.train(**_kw(tmp_path, nano_model_dir), overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == before and (run / "checkpoints" / "step_1").is_dir()
    assert [p.name for p in run.parent.iterdir()] == ["api"]  # no old run left set aside, to be swept
    assert not _lock_held(run)
    # a refused resume lets another process use the run as well
    with pytest.raises(ConfigError, match="prompts differ"):
        rlxf.train(**_kw(tmp_path, nano_model_dir, prompts=_rows(5)), resume=True)
    assert not _lock_held(run)


def test_the_callers_process_is_as_before_after_an_interrupted_run_and_its_resume(tmp_path, nano_model_dir):
    from transformers.utils import logging as hf_logging

    log = logging.getLogger("rlxf")
    mine = logging.FileHandler(tmp_path / "mine.log", mode="w")
    log.addHandler(mine)
    handlers = list(log.handlers)   # mine, and whatever earlier commands in this process left there
    threads, sigint = torch.get_num_threads(), signal.getsignal(signal.SIGINT)
    state = (log.level, log.propagate, hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled())
    calls = []

    def ctrl_c_once(sample):  # Ctrl-C while step 1 is scored: the step finishes and is checkpointed
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return 1.0

    kw = _kw(tmp_path, nano_model_dir, reward_funcs=[ctrl_c_once],
             run={"name": "api", "output_dir": str(tmp_path / "runs"), "threads": threads + 1},
             train={"steps": 2, "prompts_per_step": 1, "micro_batch_size": 2})
    try:
        with pytest.raises(TrainingInterrupted) as stop:
            rlxf.train(**kw)
        assert stop.value.step == 1
        for _ in range(2):  # after the interrupted run, then after its resume
            assert log.handlers == handlers and torch.get_num_threads() == threads
            assert (log.level, log.propagate, hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == state
            assert signal.getsignal(signal.SIGINT) is sigint
            result = rlxf.train(**kw, resume=True)
        assert [m["step"] for m in metrics(result.run_dir)] == [1, 2]
        log.warning("still mine")  # the caller's own handler was neither closed nor dropped
        mine.flush()
        assert "still mine" in (tmp_path / "mine.log").read_text()
    finally:
        log.removeHandler(mine)
        mine.close()


def test_the_lazy_public_names_are_listed():
    assert {"train", "TrainResult", "__version__"} <= set(dir(rlxf))
