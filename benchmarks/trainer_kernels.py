"""Training forward+backward with torch's linear layers (MKL) and rlxf's oneDNN ones, side by side.

    python benchmarks/trainer_kernels.py                      # presets tiny and small, 128 tokens
    python benchmarks/trainer_kernels.py --presets small --tokens 32

Workload: an ``rlxf init-model`` preset built in-process, 64 sequences of 16 prompt + ``--tokens``
response tokens (random ids), ``sequence_logprobs`` (packed, entropy on) in micro-batches of 16
with the summed log-probs backpropagated, fp32, ``--threads`` threads. The same model is loaded
with ``model.linear_kernels`` = ``torch`` and ``onednn``; best of 3 timed passes after one warm-up.
Prints the CPU model, seconds per pass, the ratio and the largest difference in the gradients,
then what ``linear_kernels: auto`` picks on this machine and the calibration behind it. Never
asserts.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def fwd_bwd(model, prompts: list[list[int]], responses: list[list[int]], micro: int = 16) -> None:
    from rlxf.models.logprobs import sequence_logprobs

    model.zero_grad(set_to_none=True)
    for i in range(0, len(prompts), micro):
        out = sequence_logprobs(model, prompts[i:i + micro], responses[i:i + micro], with_entropy=True)
        out.logprobs.sum().backward()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["tiny", "small"])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    from transformers.utils import logging as hf_logging

    from rlxf.models import init_model, load_model

    hf_logging.disable_progress_bar()

    from rlxf.models.kernel_choice import cpu_model, machine_kernel_choice

    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_model()}; torch {torch.__version__}")
    print(f"64 sequences x (16 + {args.tokens}) tokens, micro-batch 16, fp32, {args.threads} threads")
    print(f"{'preset':<8} {'torch s':>8} {'onednn s':>9} {'speed-up':>9} {'max grad diff':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            path = init_model(preset, Path(tmp) / preset, seed=0)
            g = torch.Generator().manual_seed(0)
            prompts = [torch.randint(4, 4000, (16,), generator=g).tolist() for _ in range(64)]
            responses = [torch.randint(4, 4000, (args.tokens,), generator=g).tolist() for _ in range(64)]
            seconds, grads = {}, {}
            for kernels in ("torch", "onednn"):
                model = load_model(path, linear_kernels=kernels).train()

                fwd_bwd(model, prompts, responses)
                times = []
                for _ in range(3):
                    t = time.perf_counter()
                    fwd_bwd(model, prompts, responses)
                    times.append(time.perf_counter() - t)
                seconds[kernels] = min(times)
                grads[kernels] = [p.grad.clone() for p in model.parameters()]
            diff = max(float((a - b).abs().max()) for a, b in zip(grads["torch"], grads["onednn"], strict=True))
            print(f"{preset:<8} {seconds['torch']:>8.3f} {seconds['onednn']:>9.3f} "
                  f"{seconds['torch'] / seconds['onednn']:>8.2f}x {diff:>14.2e}")
    # what `linear_kernels: auto` picks here (its own short calibration, cached per machine):
    # it should agree with the speed-up column above wherever that is clearly away from 1.00x
    print("auto on this machine:")
    for line in machine_kernel_choice().reasons():
        print(f"  {line}")


if __name__ == "__main__":
    main()
