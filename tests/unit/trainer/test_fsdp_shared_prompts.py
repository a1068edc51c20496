"""Under FSDP the ranks choose the shared-prompt path together.

``sequence_logprobs(share_prompts='auto')`` runs each distinct prompt once when that is fewer
trunk tokens than packing: two trunk forwards (prompts, then responses) where packing runs one.
Under FSDP every trunk forward gathers each layer's shards, a collective: a rank whose rows
repeat a prompt ran two where a rank whose rows did not (or a rank's idle pass, one row) ran
one, and the ranks' all-gathers no longer paired up (a hang, or a gloo size mismatch). GRPO's
groups make repeated prompts the common case.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.multiprocessing as mp

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.models import load_model
from rlxf.trainer.distributed import SINGLE, DataParallel, free_address
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, ForwardSpec
from rlxf.types import Experience

HANG_S = 120


def _experience() -> Experience:
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


def _run(model_dir, dp: DataParallel) -> dict:
    torch.manual_seed(0)
    objective = PolicyObjective.from_config(AlgorithmConfig(loss_agg="token_mean"), max_new_tokens=8)
    actor = Actor(load_model(model_dir), objective, OptimConfig(lr=1e-3, warmup_steps=0), total_steps=2,
                  spec=ForwardSpec(micro_batch_size=2), dp=dp)
    exp = _experience()
    before = actor.logprobs(exp.prompt_ids, exp.response_ids)
    actor.update(exp, [list(range(6))], kl_coef=0.0)
    after = actor.logprobs(exp.prompt_ids, exp.response_ids)
    return {"before": before, "after": after, "weights": dp.full_state_dict(actor.model)}


def _rank(rank: int, world: int, address: str, port: int, model_dir: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world)
    try:
        result = _run(model_dir, DataParallel(rank, world, "fsdp"))
        if rank == 0:
            torch.save(result, os.path.join(out, "fsdp.pt"))
    finally:
        dist.destroy_process_group()


def test_fsdp_ranks_agree_on_sharing_prompts(nano_model_dir, tmp_path):
    from rlxf.models.logprobs import can_share_prompts, causal_lm_parts

    assert can_share_prompts(causal_lm_parts(load_model(nano_model_dir))[0])  # else nothing is tested
    address, port = free_address()
    ctx = mp.start_processes(_rank, args=(2, address, port, str(nano_model_dir), str(tmp_path)), nprocs=2,
                             start_method="spawn", join=False)
    deadline = time.monotonic() + HANG_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the FSDP ranks did not finish within {HANG_S}s: their collectives did not pair up")
    two = torch.load(tmp_path / "fsdp.pt", weights_only=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = _run(nano_model_dir, SINGLE)
    finally:
        torch.set_num_threads(threads)
    assert float((two["before"] - one["before"]).abs().max()) <= 1e-5
    assert float((two["after"] - one["after"]).abs().max()) <= 1e-5
    assert max(float((two["weights"][k] - one["weights"][k]).abs().max()) for k in one["weights"]) <= 1e-5
    assert float((one["after"] - one["before"]).abs().max()) > 1e-4  # it trained: equality is not vacuous
