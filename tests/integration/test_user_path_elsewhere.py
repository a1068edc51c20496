"""A user on another machine: the config in a directory whose name has a space, `rlxf train` run
from another working directory, the plugin and reward modules beside the config (README: "a
`my_module.py` beside the YAML just works"), a Ctrl-C, and the printed `--resume` command
pasted back into the shell."""

from __future__ import annotations

import json
import shlex
import signal
import textwrap

from rl_helpers import caught_outside, metrics, signal_after_first, write_config

from rlxf.cli.main import main

ADVANTAGE_MODULE = '''
from rlxf.algorithms import masked_whiten, register, sequence_scores


@register("advantage", "beside_config_whitened_return")
def whitened_return(rewards, mask, group_ids, values, params):
    score = sequence_scores(rewards, mask)[:, None].expand_as(rewards)
    return masked_whiten(score, mask, eps=params.eps), score * mask
'''

REWARD_MODULE = '''
def distinct_chars(sample):
    return len(set(sample.response)) / 10
'''


def test_a_spaced_config_path_from_another_directory_resumes_with_the_printed_command(
        tmp_path, nano_model_dir, monkeypatch, capsys):
    """Ctrl-C after the first checkpoint: exit 130; the printed command, split as a shell
    splits it and run from the same directory, finds the config and both modules again and
    continues from the checkpoint, so metrics.jsonl and samples.jsonl hold each step once."""
    import rlxf.trainer.loop as loop

    config_dir = tmp_path / "my configs"
    write_config(
        config_dir, nano_model_dir,
        plugins=["beside_config_advantage"],
        run={"output_dir": "my runs", "name": "t"},
        reward={"verifiers": [{"type": "beside_config_reward:distinct_chars", "name": "distinct"}]},
        algorithm={"advantage": "beside_config_whitened_return"},
        logging={"progress": False, "samples_fraction": 1.0},
    )
    (config_dir / "beside_config_advantage.py").write_text(textwrap.dedent(ADVANTAGE_MODULE))
    (config_dir / "beside_config_reward.py").write_text(textwrap.dedent(REWARD_MODULE))
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    config = "../my configs/config.yaml"

    monkeypatch.setattr(loop, "save", signal_after_first(loop.save, signal.SIGINT))  # Ctrl-C after step 2's save
    with caught_outside(signal.SIGINT) as caught:
        assert main(["train", config]) == 128 + signal.SIGINT
    assert not caught
    run = workdir / "my runs" / "t"
    assert [m["step"] for m in metrics(run)] == [1, 2, 3]
    assert "reward/distinct" in metrics(run)[0]

    err = capsys.readouterr().err
    command = next(line.split(" with: ", 1)[1] for line in err.splitlines() if line.startswith("continue from"))
    argv = shlex.split(command)
    assert argv == ["rlxf", "train", config, "--resume"]
    monkeypatch.undo()          # the real save again; the same working directory as before
    monkeypatch.chdir(workdir)
    assert main(argv[1:]) == 0

    assert [m["step"] for m in metrics(run)] == [1, 2, 3, 4]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == [1, 2, 3, 4]
    assert "resumed from" in (run / "train.log").read_text()
