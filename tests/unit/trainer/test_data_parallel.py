"""Two learner processes (gloo) give the weights one process gives, for the same global batch.

Each strategy (ddp: summed gradients on full replicas; fsdp: FSDP2 shards) trains the nano
actor on hand-built experience under 1 and 2 processes (torch.multiprocessing, no Ray). The
plan's mini-batches split unevenly over the ranks (a rank gets one row fewer, one micro-batch
fewer, or none), the loss is a token mean over the global mini-batch, and the clipping norm
binds, so a rank that normalised by its own tokens, clipped by its own norm or skipped alone
would drift off.

The tolerance: sums run in another order (and micro-batches pack other rows), so gradients
differ in the last bits. The largest weight difference is in the attention key biases, whose
gradient is zero in exact arithmetic (softmax ignores a constant added to every key): their
computed gradient is rounding noise, which AdamW's normalisation turns into steps of ~lr
either way, so they differ by ~1e-3 x lr after a few steps.

The same two ranks then run the shared-prompt experiment under FSDP (one spawn for all: starting
the two processes is most of this module's time).
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.multiprocessing as mp

from rlxf.algorithms import registry
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.data import SFTExample
from rlxf.models import load_model
from rlxf.models.value_model import ValueModel
from rlxf.trainer.distributed import SINGLE, DataParallel, free_address
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, Critic, ForwardSpec
from rlxf.types import Experience

# rows 0-6, micro-batches of 2; rows per rank: 2 + 2 (the single process's micro-batches), 1 + 2
# (packed otherwise), 2 + 3 (rank 0 runs one pass fewer), 0 + 1 (rank 0 holds nothing)
PLAN = [[3, 0, 6, 1], [5, 2, 4], [6, 5, 4, 3, 2], [1]]
# then row 7, whose advantage is nan, on rank 0 alone: both ranks must skip the step; and row 8,
# whose advantage is 0, on rank 0: it has no signal, rank 1 has, and both must step
SKIPS = [[7, 0], [8, 1]]


def _experience(rows: int = 9) -> Experience:
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 200, (4 + i % 2,), generator=gen).tolist() for i in range(rows)]
    responses = [torch.randint(10, 200, (2 + i % 4,), generator=gen).tolist() for i in range(rows)]
    width = max(len(r) for r in responses)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
    adv = torch.randn(rows, 1, generator=gen)
    adv[7], adv[8] = float("nan"), 0.0
    returns = torch.randn(rows, width, generator=gen) * mask
    return Experience(prompt_ids=prompts, response_ids=responses, mask=mask,
                      rollout_logprobs=torch.zeros(rows, width), old_logprobs=None, advantages=adv * mask,
                      group_ids=torch.arange(rows) // 2, rewards=adv.squeeze(1), values=torch.zeros(rows, width),
                      returns=returns)


def _demos(batches: int) -> list[list[SFTExample]]:
    """PPO-ptx demonstrations, three per optimizer step: every rank is handed all of them."""
    gen = torch.Generator().manual_seed(1)
    return [[SFTExample(f"d{b}-{i}", torch.randint(10, 200, (3,), generator=gen).tolist(),
                        torch.randint(10, 200, (2 + i,), generator=gen).tolist(), "", "") for i in range(3)]
            for b in range(batches)]


def _actor(model_dir, dp: DataParallel) -> Actor:
    objective = PolicyObjective.from_config(AlgorithmConfig(loss_agg="token_mean", entropy_coef=0.01),
                                            max_new_tokens=8)
    optim = OptimConfig(lr=3e-3, weight_decay=0.1, max_grad_norm=0.5, warmup_steps=0)
    model = load_model(model_dir)
    if dp.rank == 1:  # a rank whose start differs (a value head drawn from another random state)
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
    return Actor(model, objective, optim, total_steps=10, spec=ForwardSpec(micro_batch_size=2), dp=dp, ptx_coef=0.5)


def _train(model_dir, dp: DataParallel) -> dict:
    """Build the actor (sharded under FSDP), run the plan; every rank's view of the result."""
    torch.manual_seed(0)
    actor = _actor(model_dir, dp)
    model = actor.model
    exp = _experience()
    metrics, first, _ = actor.update(exp, PLAN, kl_coef=0.0, demos=_demos(len(PLAN)))
    skips, _, _ = actor.update(exp, SKIPS, kl_coef=0.0)
    logprobs = actor.logprobs(exp.prompt_ids, exp.response_ids)  # a sharded forward, gathered
    out = {"weights": dp.full_state_dict(model), "optimizer": actor.state_dict()["optimizer"],
           "metrics": metrics, "skips": skips, "first": first, "logprobs": logprobs}
    if dp.strategy == "ddp":  # the critic (PPO) trains under DDP only
        critic = Critic(ValueModel.from_pretrained(model_dir), OptimConfig(lr=3e-3, max_grad_norm=0.5),
                        10, ForwardSpec(micro_batch_size=2), value_clip=0.2,
                        aggregate=registry.get("loss_agg", "token_mean"), agg_norm=None, dp=dp)
        out["critic"] = {"metrics": critic.update(exp, PLAN), "weights": dp.full_state_dict(critic.model),
                         "values": critic.values(exp.prompt_ids, exp.response_ids)}
    return out


def _shared_prompt_experience() -> Experience:
    """Six rows over two ranks (rows 0-2 and 3-5), micro-batches of 2: rank 0's first micro-batch
    repeats one prompt (rows 0 and 1: sharing runs fewer tokens), rank 1's rows are all distinct."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 200, (12,), generator=gen).tolist() for _ in range(6)]
    prompts[1] = list(prompts[0])
    responses = [torch.randint(10, 200, (2 + i % 3,), generator=gen).tolist() for i in range(6)]
    width = max(len(r) for r in responses)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
    adv = torch.randn(6, 1, generator=gen) * mask
    return Experience(prompt_ids=prompts, response_ids=responses, mask=mask, rollout_logprobs=torch.zeros(6, width),
                      old_logprobs=None, advantages=adv, group_ids=torch.arange(6) // 2,
                      rewards=adv[:, 0], values=torch.zeros(6, width), returns=torch.zeros(6, width))


def _shared_prompts(model_dir, dp: DataParallel) -> dict:
    torch.manual_seed(0)
    objective = PolicyObjective.from_config(AlgorithmConfig(loss_agg="token_mean"), max_new_tokens=8)
    actor = Actor(load_model(model_dir), objective, OptimConfig(lr=1e-3, warmup_steps=0), total_steps=2,
                  spec=ForwardSpec(micro_batch_size=2), dp=dp)
    exp = _shared_prompt_experience()
    before = actor.logprobs(exp.prompt_ids, exp.response_ids)
    actor.update(exp, [list(range(6))], kl_coef=0.0)
    after = actor.logprobs(exp.prompt_ids, exp.response_ids)
    return {"before": before, "after": after, "weights": dp.full_state_dict(actor.model)}


def _rank(rank: int, world: int, address: str, port: int, model_dir: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world)
    try:
        for strategy in ("ddp", "fsdp"):
            dp = DataParallel(rank, world, strategy)
            result = _train(model_dir, dp)
            if rank == 0:
                torch.save(result, os.path.join(out, f"{strategy}.pt"))
            dist.barrier()
            # every rank loads what rank 0 wrote (one process's layout) into a fresh actor
            saved = torch.load(os.path.join(out, f"{strategy}.pt"), weights_only=False)
            fresh = _actor(model_dir, dp)
            dp.load_full_state_dict(fresh.model, saved["weights"])
            dp.load_optimizer_state_dict(fresh.model, fresh.optimizer, saved["optimizer"])
            reloaded = {"weights": dp.full_state_dict(fresh.model), "optimizer": fresh.state_dict()["optimizer"]}
            if rank == 0:
                torch.save(reloaded, os.path.join(out, f"{strategy}-reloaded.pt"))
        result = _shared_prompts(model_dir, DataParallel(rank, world, "fsdp"))
        if rank == 0:
            torch.save(result, os.path.join(out, "shared-prompts.pt"))
    finally:
        dist.destroy_process_group()


HANG_S = 240


@pytest.fixture(scope="module")
def two_ranks(nano_model_dir, tmp_path_factory):
    """What rank 0 saved; if the ranks hang (collectives that no longer pair up), what it saved
    before, and "hung": True."""
    out = tmp_path_factory.mktemp("dp")
    address, port = free_address()
    ctx = mp.start_processes(_rank, args=(2, address, port, str(nano_model_dir), str(out)), nprocs=2,
                             start_method="spawn", join=False)
    deadline, hung = time.monotonic() + HANG_S, False
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            hung = True
            break
    names = ("ddp", "fsdp", "ddp-reloaded", "fsdp-reloaded", "shared-prompts")
    return {"hung": hung, **{s: torch.load(out / f"{s}.pt", weights_only=False) for s in names
                             if (out / f"{s}.pt").exists()}}


def _saved(two_ranks: dict, name: str) -> dict:
    assert name in two_ranks, (f"the ranks did not finish within {HANG_S}s: their collectives did not pair up"
                               if two_ranks["hung"] else f"the ranks exited without saving {name}")
    return two_ranks[name]


@pytest.fixture(scope="module")
def one_rank(nano_model_dir):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(nano_model_dir, SINGLE)
    finally:
        torch.set_num_threads(threads)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _assert_same_moments(a: dict, b: dict, tol: float) -> None:
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert float((a["state"][i][k].float() - b["state"][i][k].float()).abs().max()) <= tol, (i, k)
    # hyper-parameters equal; torch's distributed loader hands betas back as a list, not a tuple
    def plain(groups):
        return [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in groups]

    assert plain(a["param_groups"]) == plain(b["param_groups"])


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_train_the_weights_one_process_trains(strategy, two_ranks, one_rank, nano_model_dir):
    two = _saved(two_ranks, strategy)
    base = load_model(nano_model_dir).state_dict()
    assert _max_diff(one_rank["weights"], base) > 1e-3  # it trained, so equality is not vacuous
    assert _max_diff(two["weights"], one_rank["weights"]) <= 1e-5

    # the checkpointed optimizer is one process's, whatever held it: moments by parameter index
    _assert_same_moments(one_rank["optimizer"], two["optimizer"], 1e-5)
    # and every rank loads that layout back (FSDP keeps its shards): gathered again, it is unchanged
    reloaded = _saved(two_ranks, f"{strategy}-reloaded")
    assert _max_diff(reloaded["weights"], two["weights"]) == 0.0
    _assert_same_moments(reloaded["optimizer"], two["optimizer"], 0.0)

    # the first forward's log-probs and every metric are the global batch's
    assert float((two["first"] - one_rank["first"]).abs().max()) <= 1e-5
    assert float((two["logprobs"] - one_rank["logprobs"]).abs().max()) <= 1e-5
    assert one_rank["metrics"]["grad_norm"] > 0.5  # clipping bound: a per-rank norm would differ
    for metrics in ("metrics", "skips"):
        assert two[metrics].keys() == one_rank[metrics].keys()
        for k, v in one_rank[metrics].items():
            assert two[metrics][k] == pytest.approx(v, rel=1e-4, abs=1e-6, nan_ok=True), (metrics, k)
    assert one_rank["skips"]["skipped"] == 1 and one_rank["skips"]["no_signal"] == 0


def test_two_processes_train_the_critic_one_process_trains(two_ranks, one_rank):
    one, two = one_rank["critic"], _saved(two_ranks, "ddp")["critic"]
    assert one["metrics"]["critic/grad_norm"] > 0 and one["metrics"]["critic/skipped"] == 0
    assert _max_diff(two["weights"], one["weights"]) <= 1e-5
    assert float((two["values"] - one["values"]).abs().max()) <= 1e-5
    # explained variance too: the mini-batch's, from the values every rank computed for its rows
    assert two["metrics"].keys() == one["metrics"].keys()
    for k, v in one["metrics"].items():
        assert two["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6), k


def test_fsdp_ranks_agree_on_sharing_prompts(two_ranks, nano_model_dir):
    """Under FSDP the ranks choose the shared-prompt path together.

    ``sequence_logprobs(share_prompts='auto')`` runs each distinct prompt once when that is fewer
    trunk tokens than packing: two trunk forwards (prompts, then responses) where packing runs one.
    Under FSDP every trunk forward gathers each layer's shards, a collective: a rank whose rows
    repeat a prompt ran two where a rank whose rows did not (or a rank's idle pass, one row) ran
    one, and the ranks' all-gathers no longer paired up (a hang, or a gloo size mismatch). GRPO's
    groups make repeated prompts the common case.
    """
    from rlxf.models.logprobs import can_share_prompts, causal_lm_parts

    assert can_share_prompts(causal_lm_parts(load_model(nano_model_dir))[0])  # else nothing is tested
    two = _saved(two_ranks, "shared-prompts")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = _shared_prompts(nano_model_dir, SINGLE)
    finally:
        torch.set_num_threads(threads)
    assert float((two["before"] - one["before"]).abs().max()) <= 1e-5
    assert float((two["after"] - one["after"]).abs().max()) <= 1e-5
    assert max(float((two["weights"][k] - one["weights"][k]).abs().max()) for k in one["weights"]) <= 1e-5
    assert float((one["after"] - one["before"]).abs().max()) > 1e-4  # it trained: equality is not vacuous
