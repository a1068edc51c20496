"""`rlxf rm`: a Bradley–Terry reward model learns a hidden preference, loads as the
`reward_model` verifier and as a critic (from the run directory, which names its newest
checkpoint), writes its score statistics, trains with LoRA, and resumes bit for bit."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from pref_helpers import pair_config, read_metrics
from safetensors.torch import load_file

from rlxf.cli.main import main
from rlxf.config.reward import RewardModelVerifierConfig
from rlxf.data.templates import encode_response
from rlxf.models import ValueModel, load_tokenizer, sequence_scores
from rlxf.rewards import RewardInput
from rlxf.rewards.reward_model import STATS_FILE, RewardModelVerifier, ScoreStats


def test_rm_beats_chance_on_held_out_pairs_and_loads_as_verifier_and_critic(tmp_path, nano_model_dir):
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 10, "batch_size": 8, "micro_batch_size": 8,
                                                        "margin": 0.5, "optim": {"lr": 3e-3}})
    assert main(["rm", str(path)]) == 0
    run = tmp_path / "runs" / "rm"
    records = read_metrics(run)
    # a zero head scores every response 0: it ties every pair, which counts as chance
    assert records[0]["step"] == 0 and records[0]["eval/rm/reward_accuracy"] == 0.5
    final = records[-1]
    assert final["step"] == 10
    assert final["eval/rm/reward_accuracy"] >= 0.8, final        # 32 held-out pairs; chance is 0.5
    assert final["eval/rm/reward_margin"] > 0 and final["rm/loss"] < records[1]["rm/loss"]

    assert not (run / "model").exists()   # the one run layout: checkpoints/step_N/model
    saved = run / "checkpoints" / "step_10" / "model"
    verifier = RewardModelVerifier("rm", ValueModel.from_pretrained(run, device="cpu"), load_tokenizer(run))
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    # raw prompt text, not the chat-templated one it was trained on: the rule is in the response
    chosen = verifier.score_batch([RewardInput(prompt=t["prompt"], response=t["chosen"]) for t in test])
    rejected = verifier.score_batch([RewardInput(prompt=t["prompt"], response=t["rejected"]) for t in test])
    wins = sum(c.score > r.score for c, r in zip(chosen, rejected, strict=True))
    assert wins >= 0.7 * len(test), wins

    critic = ValueModel.from_pretrained(run, device="cpu")   # PPO's critic.path
    head = load_file(str(saved / "value_head.safetensors"))
    assert torch.equal(critic.value_head.weight.detach(), head["weight"]) and head["weight"].abs().sum() > 0


def test_rm_resume_is_bit_exact(tmp_path, nano_model_dir):
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 4, "batch_size": 8, "micro_batch_size": 4,
                                                        "optim": {"lr": 1e-3, "schedule": "cosine", "warmup_steps": 1}},
                       checkpoint={"every": 2, "keep_last": 3})
    assert main(["rm", str(path)]) == 0
    run = tmp_path / "runs" / "rm"
    final = run / "checkpoints" / "step_4" / "model"
    straight = load_file(str(final / "model.safetensors"))
    straight_head = load_file(str(final / "value_head.safetensors"))
    straight_stats = (final / STATS_FILE).read_text()
    straight_metrics = read_metrics(run)
    # as if killed after step 2's checkpoint
    shutil.rmtree(run / "checkpoints" / "step_4")
    assert main(["rm", str(path), "--resume"]) == 0
    resumed = load_file(str(final / "model.safetensors"))
    resumed_head = load_file(str(final / "value_head.safetensors"))
    assert (final / STATS_FILE).read_text() == straight_stats
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert all(torch.equal(straight_head[k], resumed_head[k]) for k in straight_head)
    drop = ("time/train",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(run)] == \
        [{k: v for k, v in r.items() if k not in drop} for r in straight_metrics]


def test_rm_saves_the_mean_and_std_of_its_training_scores_and_the_verifier_standardises(tmp_path, nano_model_dir):
    """reward_stats.json holds μ, σ of the saved model's scores on the chosen and rejected
    responses of the first rm.stats_pairs training pairs; `normalize: standard` then gives
    (r - μ) / σ and `clip` bounds it."""
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 3, "batch_size": 8, "micro_batch_size": 8,
                                                        "stats_pairs": 5, "optim": {"lr": 3e-3}},
                       n_train=16, n_test=4)
    assert main(["rm", str(path)]) == 0
    model_dir = tmp_path / "runs" / "rm" / "checkpoints" / "step_3" / "model"
    stats = ScoreStats.load(model_dir)
    model, tok = ValueModel.from_pretrained(model_dir, device="cpu"), load_tokenizer(model_dir)
    pairs = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    # the data reader keeps the file's order (data.shuffle only shuffles batches): the first 5 pairs
    prompts = [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], tokenize=False,
                                       add_generation_prompt=True) for p in pairs[:5]]
    prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    responses = [encode_response(tok, p[k]) for k in ("chosen", "rejected") for p in pairs[:5]]
    with torch.no_grad():
        scores = sequence_scores(model, prompt_ids + prompt_ids, responses)
    assert stats.count == 10
    assert stats.mean == pytest.approx(float(scores.mean()), abs=1e-5)
    assert stats.std == pytest.approx(float(scores.std(correction=0)), abs=1e-5)
    assert stats.std > 0

    cfg = RewardModelVerifierConfig(path=str(tmp_path / "runs" / "rm"), device="cpu", normalize="standard",
                                    clip=(-0.5, 0.5))
    verifier = RewardModelVerifier.from_config(cfg)
    out = verifier.score_batch([RewardInput(prompt=prompts[i], response=pairs[i][k])
                                for k in ("chosen", "rejected") for i in range(5)])
    want = [min(max((r - stats.mean) / stats.std, -0.5), 0.5) for r in scores.tolist()]
    assert [o.score for o in out] == pytest.approx(want, abs=1e-4)
    assert [o.metrics["raw"] for o in out] == pytest.approx(scores.tolist(), abs=1e-4)
    assert any(abs(w) == 0.5 for w in want) or max(abs(w) for w in want) < 0.5


def test_rm_with_lora_trains_adapters_and_the_head_and_saves_a_merged_model(tmp_path, nano_model_dir):
    pytest.importorskip("peft")
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 6, "batch_size": 8, "micro_batch_size": 8,
                                                        "optim": {"lr": 1e-2}}, n_train=32, n_test=16)
    assert main(["rm", str(path), "model.lora.r=4", "model.lora.alpha=8"]) == 0
    run = tmp_path / "runs" / "rm"
    records = read_metrics(run)
    assert records[-1]["eval/rm/reward_accuracy"] > records[0]["eval/rm/reward_accuracy"]
    saved = run / "checkpoints" / "step_6" / "model"
    trunk, base = load_file(str(saved / "model.safetensors")), load_file(str(nano_model_dir / "model.safetensors"))
    assert not any("lora" in k for k in trunk)   # merged: plain trunk weights, loadable without PEFT
    changed = [k for k in trunk if not torch.equal(trunk[k], base.get(f"model.{k}", base.get(k)))]
    # only the adapted projections (model.lora.target_modules: q, k, v, o) moved; the head trained in full
    assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"))
                           for k in changed), changed
    assert load_file(str(saved / "value_head.safetensors"))["weight"].abs().sum() > 0
    # the merged model scores exactly as the adapter model it was trained as
    verifier = RewardModelVerifier.from_config(RewardModelVerifierConfig(path=str(run), device="cpu"))
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    chosen = verifier.score_batch([RewardInput(prompt=t["prompt"], response=t["chosen"]) for t in test])
    rejected = verifier.score_batch([RewardInput(prompt=t["prompt"], response=t["rejected"]) for t in test])
    assert sum(c.score > r.score for c, r in zip(chosen, rejected, strict=True)) > len(test) / 2


def test_a_resume_with_fewer_steps_than_done_says_it_trains_nothing(tmp_path, nano_model_dir, capsys):
    """rm.steps lowered below the checkpoint's step: the resume ended at once, silently."""
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 2, "batch_size": 4, "micro_batch_size": 4},
                       checkpoint={"every": 1}, n_train=16, n_test=4)
    assert main(["rm", str(path)]) == 0
    capsys.readouterr()
    assert main(["rm", str(path), "--resume", "rm.steps=1"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "the run has done 2 steps and rm.steps is 1: nothing to train; raise rm.steps" in said
    assert [r["step"] for r in read_metrics(tmp_path / "runs" / "rm")][-1] == 2
    # and returns the run's last record, as it did when it ended (it returned {})
    from rlxf.config import load_config
    from rlxf.run_dir import RunDir
    from rlxf.trainer.reward_model import run_reward_model

    cfg = load_config(path, ["rm.steps=1"])
    last = {k: v for k, v in read_metrics(tmp_path / "runs" / "rm")[-1].items() if k != "step"}
    assert run_reward_model(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, resume=True), resume=True) == last
