"""The native rollout engine: continuous batching over a prefix-shared KV cache.

One ``generate`` call runs this loop until every request is answered:

    admit   fill free sequence rows from the queue of waiting samples; a prompt seen for the
            first time is prefilled once (batched with other new prompts) into a prompt slot,
            and its n samples all read that slot
    step    one batched decode step over every live sequence, then sample (batched)
    finish  sequences that hit a stop token / stop string / their length limit return their
            completion; the last live rows move into the freed rows, so the next step's batch
            is dense and a waiting sample can take the space at once

The KV cache (``cache.py``) is allocated at the start of a call for all of its rows and
prompts; only the generated-token width grows, 32 positions at a time. All per-sequence
bookkeeping is in arrays indexed by row; the hot path has no per-sequence Python loop (stop
strings excepted, and then only for rows whose token could complete one).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rlxf.rollout.base import (
    DecodeHooks,
    EngineOptions,
    RequestLike,
    SamplingParams,
    as_requests,
    check_sampling_params,
    error_completions,
    validate_prompt,
)
from rlxf.rollout.native.cache import KVCache
from rlxf.rollout.native.kernels import select_kernels
from rlxf.rollout.native.model import (
    DecodeBatch,
    NativeWeights,
    UnsupportedModel,
    decode,
    logits_of,
    model_spec,
    prefill,
    rope_tables,
)
from rlxf.rollout.sampling import NonFiniteLogits, derive_seed, sample_keys, sample_tokens, uniforms
from rlxf.rollout.stop import StopStrings
from rlxf.types import Completion

log = logging.getLogger(__name__)

_NESTED_CALL = ("generate was called from a hook of a running generate call (on_group / between_steps), which "
                "would overwrite that call's KV cache; call it after the running one returns")


def model_eos_ids(model, tokenizer=None) -> tuple[int, ...]:
    """The eos ids of the model's generation config, model config and tokenizer (union).

    An id outside the model's vocabulary (from a generation_config.json or tokenizer of another
    model) is never sampled, so it never stops a response: it is warned about once, naming the
    file it came from, and kept (tiny test models have one: GPT-2's 50256 in a 64-token model)."""
    folder = getattr(model.config, "name_or_path", "")
    model_files = f"{folder}/" if folder else "the model's "
    generated = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    configured = getattr(model.config, "eos_token_id", None)
    # without a generation_config.json, transformers copies config.json's ids into the generation config
    copied = generated == configured and not (folder and Path(folder, "generation_config.json").is_file())
    tokenizer_folder = getattr(tokenizer, "name_or_path", "")
    tokenizer_file = f"{tokenizer_folder}/tokenizer_config.json" if tokenizer_folder else "the tokenizer"
    sources = [(f"{model_files}generation_config.json", None if copied else generated),
               (f"{model_files}config.json", configured),
               (f"{tokenizer_file} (eos_token {getattr(tokenizer, 'eos_token', None)!r})",
                getattr(tokenizer, "eos_token_id", None))]
    found: dict[int, list[str]] = {}
    for where, value in sources:
        for t in (value if isinstance(value, (list, tuple)) else [value]):
            if t is not None and where not in found.setdefault(int(t), []):
                found[int(t)].append(where)
    vocab_size = getattr(model.config, "vocab_size", None)
    outside = {t: where for t, where in found.items() if vocab_size is not None and not 0 <= t < vocab_size}
    if outside:
        log.warning("eos id(s) outside the model's vocabulary of %d tokens (ids 0..%d) never stop a response, as "
                    "the model never samples them: %s. Use the model's own tokenizer and generation config, or "
                    "fix eos_token_id there", vocab_size, vocab_size - 1,
                    "; ".join(f"{t} from {', '.join(where)}" for t, where in outside.items()))
    return tuple(found)


def _named_weights(model) -> Iterable[tuple[str, torch.Tensor]]:
    from rlxf.models.loading import merged_state_dict

    return merged_state_dict(model).items()


class NativeEngine:
    """rlxf's own engine for Llama / Qwen2 decoders (see the module docstring).

    Holds its own copy of the weights (fused QKV and gate/up); ``update_weights`` copies into
    it. ``options.compile`` wraps the decode step in ``torch.compile`` (dynamic shapes).

    On CPU a call runs ``options.threads`` decode workers (default: torch's thread count), each
    a Python thread with one intra-op thread and its own continuous batch of up to
    ``max_batch_size / threads`` rows (and at most its even share of the call's requests),
    taking its requests in turn (request i goes to worker i mod threads). Against one batch
    split across OpenMP threads this drops the ~100 thread barriers of every decode step, each
    of which stalls for a scheduler time slice whenever another process holds a core (measured
    3x faster on this shared 2-core machine; the same work when it is idle). The results do not
    depend on it: sampling randomness is per request.

    Thread-safe: ``generate`` and ``update_weights`` calls from several threads run one at a
    time (a call's KV caches, weights and thread count are the engine's, not the call's); a
    ``DecodeHooks.between_steps`` hook may still call ``update_weights`` (same thread).
    """

    name = "native"

    def __init__(self, model, tokenizer=None, options: EngineOptions | None = None):
        from rlxf.models.loading import unwrap_model

        options = options or EngineOptions()
        base = unwrap_model(model)
        try:
            spec = model_spec(base, options.max_model_len)
        except UnsupportedModel as e:
            raise UnsupportedModel(f"the native rollout engine cannot run this model: {e}; use the hf engine "
                                   f"(rollout.backend: hf; build_engine('native', ...) falls back to it)") from None
        param = next(base.parameters())
        device = torch.device(options.device) if options.device is not None else param.device
        dtype = options.dtype or param.dtype
        out_emb, in_emb = base.get_output_embeddings(), base.get_input_embeddings()
        tied = out_emb is not None and out_emb.weight is in_emb.weight
        if tied != spec.tied:
            spec = type(spec)(**{**spec.__dict__, "tied": tied})
        self.spec = spec
        self.options = options
        self.device, self.dtype = device, dtype
        self.tokenizer = tokenizer
        self.weights = NativeWeights.allocate(spec, device, dtype)
        self.weights.load_(_named_weights(model), require_all=True)
        window = spec.context_window if options.max_model_len is None else min(spec.context_window, options.max_model_len)
        self.context_window = window
        self.cos, self.sin = rope_tables(base, spec, window, device)
        self.eos_ids = model_eos_ids(base, tokenizer)
        self.caches = [KVCache(spec, device, dtype)]  # one per decode worker
        # packed oneDNN weights cost a second copy: by default only for small models, and only
        # where packing measured faster (None: select_kernels asks the machine's calibration)
        weight_bytes = sum(p.numel() for p in model.parameters()) * torch.finfo(dtype).bits // 8
        pack = options.pack_weights if options.pack_weights is not None \
            else (None if weight_bytes <= options.PACK_WEIGHTS_AUTO_MAX_BYTES else False)
        # torch.compile cannot trace oneDNN's linear op: a compiled decode step uses plain torch
        self.kernels = select_kernels(device, dtype, prefer="torch" if options.compile else "auto", pack=pack)
        log.info("native engine: %s matmuls%s", self.kernels.name,
                 ", packed weights" if getattr(self.kernels, "_reorder", None) is not None else "")
        self.policy_version = 0
        self.last_stats = RunStats()
        self._seed_rng = np.random.default_rng(options.seed)
        self._stop_cache: dict[tuple[str, ...], StopStrings] = {}
        self._decode = decode
        self._lock = threading.RLock()       # one call at a time (re-entrant: between_steps hooks)
        self._decode_thread = threading.local()
        self._in_call = False                # set while the lock's holder runs a call (its hooks included)
        if options.compile:
            if device.type == "cpu":
                log.warning("rollout compile=True on CPU: torch.compile cannot use the oneDNN kernels, and the "
                            "compiled decode step measured ~4.7x slower than the eager one here (plus ~100 s "
                            "of compiling); leave compile off on CPU")
            self._decode = torch.compile(decode, dynamic=True)

    # ------------------------------------------------------------------------------------
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy new weights in (one ``copy_`` per tensor, into the fused layout) and set the version.
        Waits for a ``generate`` call running in another thread to end."""
        if getattr(self._decode_thread, "active", False):
            raise RuntimeError("update_weights was called from a decode worker thread (an on_group hook of a call "
                               "with several decode workers), while the other workers read the weights; call it "
                               "from between_steps with EngineOptions.threads=1, or after generate returns")
        with self._lock:
            self.weights.load_(named_tensors)
            self.policy_version = int(version)

    def stop_matcher(self, strings: tuple[str, ...]) -> StopStrings | None:
        if not strings:
            return None
        if strings not in self._stop_cache:
            self._stop_cache[strings] = StopStrings(self.tokenizer, strings, self.spec.vocab_size).to(self.device)
        return self._stop_cache[strings]

    def request_seeds(self, requests, sampling: SamplingParams) -> list[int]:
        """Each request's own seed, else one derived from sampling.seed, else from the engine's RNG."""
        seeds = []
        for i, r in enumerate(requests):
            if r.seed is not None:
                seeds.append(int(r.seed))
            elif sampling.seed is not None:
                seeds.append(derive_seed(sampling.seed, i))
            else:
                seeds.append(int(self._seed_rng.integers(0, 2**63 - 1)))
        return seeds

    def generate(self, requests: Sequence[RequestLike], sampling: SamplingParams,
                 hooks: DecodeHooks | None = None) -> list[list[Completion]]:
        """For each request, ``sampling.n`` completions; a bad prompt fails only its own request.
        ``hooks``: hear of each request as it finishes, swap weights between decode steps.
        Concurrent calls (other threads) wait for this one to end."""
        if getattr(self._decode_thread, "active", False):
            raise RuntimeError(_NESTED_CALL)
        with self._lock:   # re-entrant: a hook's thread holds it already, another thread waits here
            if self._in_call:
                raise RuntimeError(_NESTED_CALL)
            self._in_call = True
            try:
                return self._generate(requests, sampling, hooks)
            finally:
                self._in_call = False

    def _generate(self, requests: Sequence[RequestLike], sampling: SamplingParams,
                  hooks: DecodeHooks | None) -> list[list[Completion]]:
        hooks = hooks or DecodeHooks()
        check_sampling_params(sampling, vocab_size=self.spec.vocab_size, engine=self.name)
        reqs = as_requests(requests)
        seeds = self.request_seeds(reqs, sampling)
        results: list[list[Completion] | None] = [None] * len(reqs)
        valid = []
        for i, r in enumerate(reqs):
            reason = validate_prompt(r.prompt_ids, vocab_size=self.spec.vocab_size, context_window=self.context_window)
            if reason is None:
                valid.append(i)
            else:
                results[i] = error_completions(reason, sampling.n, self.policy_version)
                if hooks.on_group is not None:
                    hooks.on_group(i, results[i])
        self.last_stats = RunStats()
        if valid:
            prompts = [reqs[i].prompt_ids for i in valid]
            on_done = None
            if hooks.on_group is not None:
                def on_done(k: int, group: list[Completion]) -> None:
                    hooks.on_group(valid[k], group)
            comps = self._run(prompts, [seeds[i] for i in valid], sampling, on_done, hooks.between_steps)
            for i, group in zip(valid, comps, strict=True):
                results[i] = group
        return results  # type: ignore[return-value]

    def workers_for(self, num_requests: int) -> int:
        """Decode workers for a call: ``options.threads``, or torch's intra-op thread count on CPU."""
        if self.device.type != "cpu":
            return 1
        wanted = self.options.threads if self.options.threads is not None else torch.get_num_threads()
        return max(1, min(wanted, num_requests, self.options.max_batch_size))

    def _run(self, prompts: list[Sequence[int]], seeds: list[int], sampling: SamplingParams,
             on_done=None, between_steps=None) -> list[list[Completion]]:
        workers = self.workers_for(len(prompts))
        if between_steps is not None and workers > 1:
            raise ValueError(f"weights can be swapped between decode steps only with one decode worker "
                             f"(EngineOptions.threads=1); this call would run {workers}")
        while len(self.caches) < workers:
            self.caches.append(KVCache(self.spec, self.device, self.dtype))
        shared = _Shared(prompts, seeds, sampling.n, workers, on_done, between_steps)
        # Each worker's batch holds at most its share of max_batch_size, and no more rows than
        # its own requests can fill (its KV cache is sized by them).
        share = -(-len(prompts) // workers) * sampling.n
        rows = max(1, min(self.options.max_batch_size // workers, share))
        try:
            self.last_stats = self._decode_workers(shared, sampling, workers, rows)
        finally:
            # the caches are sized for this call; between calls (while the trainer runs) they
            # would only hold memory
            for cache in self.caches:
                cache.release()
        return shared.results  # type: ignore[return-value]

    def _decode_workers(self, shared: _Shared, sampling: SamplingParams, workers: int, rows: int) -> RunStats:
        if self.device.type != "cpu":
            with torch.inference_mode():
                return _Run(self, self.caches[0], shared, sampling, rows, worker=0).run()
        # CPU: every worker runs with one intra-op thread, also when there is only one, so that a
        # request's floating-point results (and so its samples) do not depend on how many
        # requests share the call.
        stats: list[RunStats] = [RunStats() for _ in range(workers)]
        errors: list[BaseException] = []
        threads_before = torch.get_num_threads()

        def work(k: int) -> None:
            try:
                if workers > 1:
                    self._decode_thread.active = True   # a thread of its own (see update_weights)
                torch.set_num_threads(1)
                with torch.inference_mode():
                    stats[k] = _Run(self, self.caches[k], shared, sampling, rows, worker=k).run()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
                errors.append(e)
                shared.abort()

        try:
            if workers == 1:
                work(0)
            else:
                pool = [threading.Thread(target=work, args=(k,), name=f"rlxf-decode-{k}") for k in range(workers)]
                for t in pool:
                    t.start()
                for t in pool:
                    t.join()
        finally:
            torch.set_num_threads(threads_before)  # a worker's setting leaks into torch's global count
        if errors:
            raise errors[0]
        return RunStats.merge(stats)


class _Shared:
    """What the decode workers of one call share: the requests, each worker's next one, and the results.

    Request i belongs to worker i mod ``workers``, which takes its requests in order, a whole
    request (all n samples) at a time so that its prompt is prefilled once. The assignment is
    fixed, not first come first served: which requests share a batch then never depends on
    thread timing, so a run's floating-point results (and its samples) are the same on every
    rerun and resume even where the matmul kernels round a row differently by batch size
    (MKL's sgemm does; ``OneDNNKernels`` does not). Dealt in turn, each worker gets an even
    share of a call's requests, whose order carries no meaning for their lengths.
    """

    def __init__(self, prompts: list[Sequence[int]], seeds: list[int], n: int, workers: int = 1,
                 on_done=None, between_steps=None):
        self.on_done = on_done              # (request, its n completions) as soon as its last one finishes
        self.between_steps = between_steps  # before every decode step (DecodeHooks)
        self.prompts = [torch.as_tensor(list(p), dtype=torch.long) for p in prompts]
        self.plen = np.array([len(p) for p in prompts], dtype=np.int64)
        self.seeds = np.array(seeds, dtype=np.uint64)
        self.results: list[list[Completion | None]] = [[None] * n for _ in prompts]
        self.workers = workers
        self._next = list(range(workers))   # worker k's next request: k, k + workers, ...
        self._aborted = False

    def take(self, worker: int) -> int | None:
        """Worker ``worker``'s next request, or None when it has none left (or the call failed)."""
        nxt = self._next[worker]
        if self._aborted or nxt >= len(self.prompts):
            return None
        self._next[worker] = nxt + self.workers
        return nxt

    def pending(self, worker: int) -> bool:
        """Whether ``take(worker)`` would still hand out a request."""
        return not self._aborted and self._next[worker] < len(self.prompts)

    def abort(self) -> None:
        """A worker failed: the others take nothing more."""
        self._aborted = True


@dataclass
class RunStats:
    """What one ``generate`` call did (``NativeEngine.last_stats``)."""

    decode_steps: int = 0         # batched decode steps
    rows_decoded: int = 0         # sum over steps of the live batch size (mean batch = rows / steps)
    prefill_prompts: int = 0      # prompts prefilled (each once, whatever n is)
    prefill_tokens: int = 0       # prompt tokens prefilled (without padding)
    generated_tokens: int = 0     # response tokens sampled
    max_live: int = 0             # most sequences decoded at once
    busy_workers: int = 0         # decode workers that decoded at least one sequence
    kv_cache_bytes: int = 0       # the most KV-cache memory held at once (summed over workers)

    @property
    def mean_batch(self) -> float:
        return self.rows_decoded / self.decode_steps if self.decode_steps else 0.0

    @classmethod
    def merge(cls, parts: list[RunStats]) -> RunStats:
        """Totals over decode workers (``max_live``: the sum of each worker's most)."""
        return cls(**{f: sum(getattr(p, f) for p in parts) for f in cls.__dataclass_fields__})


class _Run:
    """One decode worker's share of a ``generate`` call (rows = sequences, slots = prompts).

    Requests are indexed as in ``shared``; this worker only touches the ones it took.
    """

    def __init__(self, engine: NativeEngine, cache: KVCache, shared: _Shared, sampling: SamplingParams, rows: int,
                 worker: int = 0):
        self.e, self.sp, self.shared, self.worker = engine, sampling, shared, worker
        self.w, self.cache, dev = engine.weights, cache, engine.device
        self.dev = dev
        spec = engine.spec
        self.n = sampling.n
        self.prompts, self.plen, self.seeds = shared.prompts, shared.plen, shared.seeds
        num_req = len(self.prompts)
        ctx = engine.context_window
        self.s_max = min(rows, num_req * self.n)
        self.g_max = min(self.s_max, num_req)
        self.t_max = int(min(sampling.max_new_tokens, ctx - self.plen.min()))
        # prompt width in whole chunks, as the generated width: the attention's sums over positions
        # then see the same vector layout whatever the longest prompt of the call is
        chunk = self.cache.chunk
        self.p_max = int(-(-int(self.plen.max()) // chunk) * chunk)
        self.cache.start(self.g_max, self.p_max, self.s_max, self.t_max)
        self.hidden = torch.zeros(self.g_max, spec.hidden_size, device=dev, dtype=engine.dtype)
        self.out_tok = torch.zeros(self.s_max, self.t_max, dtype=torch.long, device=dev)
        self.out_lp = torch.zeros(self.s_max, self.t_max, dtype=torch.float32, device=dev)
        self.out_ver = np.zeros((self.s_max, self.t_max), np.int64)  # weights version of each sampled token
        stops = set(sampling.stop_token_ids) | (set() if sampling.ignore_eos else set(engine.eos_ids))
        self.stop_ids = torch.tensor(sorted(stops), dtype=torch.long, device=dev)
        self.matcher = engine.stop_matcher(sampling.stop_strings)
        # rows (sequences)
        self.B = 0
        self.row_req = np.zeros(self.s_max, np.int64)
        self.row_member = np.zeros(self.s_max, np.int64)
        self.row_slot = np.zeros(self.s_max, np.int64)
        self.row_ntok = np.zeros(self.s_max, np.int64)
        self.row_limit = np.zeros(self.s_max, np.int64)
        self.row_key = np.zeros(self.s_max, np.uint64)
        # slots (prompts)
        self.G = 0
        self.slot_req = np.zeros(self.g_max, np.int64)
        self.slot_plen = np.zeros(self.g_max, np.int64)
        self.req_slot = np.full(num_req, -1, np.int64)
        # requests this worker has taken and not fully admitted (the head may be partly admitted)
        self.queue: deque[int] = deque()
        self.next_member = np.zeros(num_req, np.int64)
        self.unfinished = np.full(num_req, self.n, np.int64)
        self.results = shared.results
        self.limits = np.minimum(sampling.max_new_tokens, ctx - self.plen)
        self.stats = RunStats()

    def run(self) -> RunStats:
        while True:
            self.admit()
            if not self.B:
                # every row admitted may have finished at once (at its first token): the requests
                # this worker has not taken yet are still its to answer
                if self.queue or self.shared.pending(self.worker):
                    continue
                break
            if self.shared.between_steps is not None:
                self.shared.between_steps()
            self.step()
        self.stats.busy_workers = int(self.stats.generated_tokens > 0)
        self.stats.kv_cache_bytes = self.cache.peak_bytes
        return self.stats

    # -- admission -----------------------------------------------------------------------------
    def admit(self) -> None:
        free = self.s_max - self.B
        new_slots: list[int] = []
        members: list[tuple[int, int]] = []
        while free > 0:
            if not self.queue:
                if self.G == self.g_max:
                    break
                taken = self.shared.take(self.worker)
                if taken is None:
                    break
                self.queue.append(taken)
            r = self.queue[0]
            if self.req_slot[r] < 0:
                if self.G == self.g_max:
                    break
                g = self.G
                self.G += 1
                self.req_slot[r], self.slot_req[g], self.slot_plen[g] = g, r, self.plen[r]
                new_slots.append(g)
            k = int(min(free, self.n - self.next_member[r]))
            members.extend((r, int(self.next_member[r]) + j) for j in range(k))
            self.next_member[r] += k
            free -= k
            if self.next_member[r] == self.n:
                self.queue.popleft()
        if new_slots:
            self.prefill(new_slots)
        if members:
            self.place(members)

    def prefill(self, slots: list[int]) -> None:
        """Prefill new prompts: prompts of equal length together, at most max_prefill_tokens at once.

        Only equal lengths share a forward: the attention kernel's rounding depends on the padded
        length, and a prompt's keys, values and first-token logits must not depend on which
        other prompts were admitted with it (seeded samples would then depend on the batch).
        """
        budget = self.e.options.max_prefill_tokens
        by_length: dict[int, list[int]] = {}
        for g in slots:
            by_length.setdefault(int(self.slot_plen[g]), []).append(g)
        for length, same in sorted(by_length.items()):
            per_chunk = max(1, budget // length)
            for start in range(0, len(same), per_chunk):
                self._prefill_chunk(same[start:start + per_chunk])

    def _prefill_chunk(self, slots: list[int]) -> None:
        width = int(self.slot_plen[slots].max())
        ids = torch.zeros(len(slots), width, dtype=torch.long)
        for i, g in enumerate(slots):
            p = self.prompts[self.slot_req[g]]
            ids[i, : len(p)] = p
        slot_t = torch.tensor(slots, dtype=torch.long, device=self.dev)

        def write_kv(layer, kv):
            self.cache.write_prompt(layer, slot_t, kv)

        hidden = prefill(self.w, self.e.kernels, ids.to(self.dev), self.e.cos, self.e.sin, write_kv)
        self.stats.prefill_prompts += len(slots)
        self.stats.prefill_tokens += int(self.slot_plen[slots].sum())
        last = torch.as_tensor(self.slot_plen[slots] - 1, device=self.dev)
        self.hidden[slot_t] = hidden[torch.arange(len(slots), device=self.dev), last]

    def place(self, members: list[tuple[int, int]]) -> None:
        """Put new samples in rows [B, B + A) and sample their first token from the prompt's logits."""
        lo, a = self.B, len(members)
        hi = lo + a
        req = np.array([m[0] for m in members], np.int64)
        member = np.array([m[1] for m in members], np.int64)
        self.row_req[lo:hi], self.row_member[lo:hi] = req, member
        self.row_slot[lo:hi] = self.req_slot[req]
        self.row_ntok[lo:hi] = 0
        self.row_limit[lo:hi] = self.limits[req]
        self.row_key[lo:hi] = sample_keys(self.seeds[req], member)
        self.B = hi
        self.cache.clear_rows(lo, hi)
        logits = logits_of(self.w, self.e.kernels, self.hidden[torch.as_tensor(self.row_slot[lo:hi], device=self.dev)])
        self.sample_and_record(lo, hi, logits)

    # -- decoding ------------------------------------------------------------------------------
    def step(self) -> None:
        b, g, n = self.B, self.G, self.n
        spec, dev, dt = self.e.spec, self.dev, self.e.dtype
        hq, hkv = spec.num_heads, spec.num_kv_heads
        r = hq // hkv
        ntok = self.row_ntok[:b]
        slot = self.row_slot[:b]
        member = self.row_member[:b]
        at = torch.as_tensor(ntok - 1, device=dev)
        pos = torch.as_tensor(self.slot_plen[slot] + ntok - 1, device=dev)
        self.cache.fit(int(ntok.max()), b)
        width, p_width = self.cache.width, self.cache.prompt.shape[4]
        neg = torch.tensor(float("-inf"), device=dev, dtype=dt)
        zero = torch.zeros((), device=dev, dtype=dt)
        gen_ok = torch.arange(width, device=dev)[None, :] <= at[:, None]
        gen_bias = torch.where(gen_ok, zero, neg)[:, None, None, :].expand(b, hkv, 1, width)
        plen = torch.as_tensor(self.slot_plen[:g], device=dev)
        prompt_ok = torch.arange(p_width, device=dev)[None, :] < plen[:, None]
        prompt_bias = torch.where(prompt_ok, zero, neg)[:, None, None, :].expand(g, hkv, 1, p_width)
        # query row (b, h, k) = b*Hq + h*r + k; group row (g, h, j, k) = ((g*Hkv + h)*n + j)*r + k
        h_r = np.arange(hkv)[:, None] * r + np.arange(r)[None, :]                      # (Hkv, r)
        member_row = np.zeros((g, n), np.int64)
        member_row[slot, member] = np.arange(b)
        to_group = member_row[:, None, :, None] * hq + h_r[None, :, None, :]          # (G, Hkv, n, r)
        to_row = ((slot[:, None, None] * hkv + np.arange(hkv)[None, :, None]) * n + member[:, None, None]) * r \
            + np.arange(r)[None, None, :]                                              # (B, Hkv, r)
        rows = torch.arange(b, device=dev)
        batch = DecodeBatch(
            tokens=self.out_tok[rows, at],
            cos=self.e.cos[pos][:, None, :], sin=self.e.sin[pos][:, None, :],
            write_at=at,
            gen_bias=gen_bias.reshape(b * hkv, 1, width),
            prompt_bias=prompt_bias.reshape(g * hkv, 1, p_width),
            to_group=torch.as_tensor(to_group.reshape(-1), device=dev),
            to_row=torch.as_tensor(to_row.reshape(-1), device=dev),
            n=n, num_prompts=g,
        )
        logits = self.e._decode(self.w, self.e.kernels, batch, self.cache)
        self.stats.decode_steps += 1
        self.stats.rows_decoded += b
        self.sample_and_record(0, b, logits)

    def sample_and_record(self, lo: int, hi: int, logits: torch.Tensor) -> None:
        sp = self.sp
        ntok = self.row_ntok[lo:hi].copy()
        u = None
        if not sp.greedy:
            u = torch.as_tensor(uniforms(self.row_key[lo:hi], ntok), device=self.dev)
        try:
            tokens, lps = sample_tokens(logits, u, temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p)
        except NonFiniteLogits as e:
            steps = sorted({int(ntok[i]) for i in e.rows})
            raise NonFiniteLogits(e.rows, where=f"native engine (policy version {self.e.policy_version}), response "
                                               f"token {steps[:8]}: ") from None
        rows = torch.arange(lo, hi, device=self.dev)
        at = torch.as_tensor(ntok, device=self.dev)
        self.out_tok[rows, at] = tokens
        self.out_lp[rows, at] = lps
        self.out_ver[np.arange(lo, hi), ntok] = self.e.policy_version
        self.row_ntok[lo:hi] = ntok + 1
        self.stats.generated_tokens += hi - lo
        self.stats.max_live = max(self.stats.max_live, self.B)
        # finish reasons, in priority order: stop token, stop string, length
        reason = np.full(hi - lo, "", dtype=object)
        reason[self.row_ntok[lo:hi] >= self.row_limit[lo:hi]] = "length"
        if self.matcher is not None:
            cand = self.matcher.candidates(tokens).nonzero().flatten().tolist()
            for i in cand:
                r = lo + i
                ids = self.out_tok[r, : self.row_ntok[r]].tolist()
                if self.matcher.ends_here(ids):
                    reason[i] = "stop_string"
        if self.stop_ids.numel():
            reason[torch.isin(tokens, self.stop_ids).cpu().numpy()] = "stop"
        done = np.nonzero(reason != "")[0]
        if done.size:
            self.finish(lo + done, reason[done])

    # -- finishing and compaction --------------------------------------------------------------
    def finish(self, rows: np.ndarray, reasons: np.ndarray) -> None:
        lengths = self.row_ntok[rows]
        width = int(lengths.max())
        rows_t = torch.as_tensor(rows, device=self.dev)
        toks = self.out_tok[rows_t, :width].tolist()
        lps = self.out_lp[rows_t, :width].tolist()
        versions = self.out_ver[rows, :width].tolist()
        freed_slots, done = [], []
        for i, r in enumerate(rows.tolist()):
            req, m, ln = int(self.row_req[r]), int(self.row_member[r]), int(lengths[i])
            self.results[req][m] = Completion(response_ids=toks[i][:ln], logprobs=lps[i][:ln],
                                              finish_reason=str(reasons[i]), policy_version=versions[i][0],
                                              token_versions=versions[i][:ln])
            self.unfinished[req] -= 1
            if self.unfinished[req] == 0:
                freed_slots.append(int(self.req_slot[req]))
                self.req_slot[req] = -1
                done.append(req)
        self._compact_rows(rows)
        if freed_slots:
            self._compact_slots(np.array(freed_slots, np.int64))
        if self.shared.on_done is not None:
            for req in done:
                self.shared.on_done(req, self.results[req])

    def _compact_rows(self, dead: np.ndarray) -> None:
        b = self.B
        alive = np.ones(b, bool)
        alive[dead] = False
        new_b = int(alive.sum())
        holes = np.nonzero(~alive[:new_b])[0]
        movers = np.nonzero(alive[new_b:])[0] + new_b
        if holes.size:
            for arr in (self.row_req, self.row_member, self.row_slot, self.row_ntok, self.row_limit, self.row_key):
                arr[holes] = arr[movers]
            width = int(self.row_ntok[holes].max())
            src = torch.as_tensor(movers, device=self.dev)
            dst = torch.as_tensor(holes, device=self.dev)
            self.cache.move_gen(src, dst, width)
            self.out_tok[dst, :width] = self.out_tok[src, :width]
            self.out_lp[dst, :width] = self.out_lp[src, :width]
            self.out_ver[holes, :width] = self.out_ver[movers, :width]
        self.B = new_b

    def _compact_slots(self, dead: np.ndarray) -> None:
        g = self.G
        alive = np.ones(g, bool)
        alive[dead] = False
        new_g = int(alive.sum())
        holes = np.nonzero(~alive[:new_g])[0]
        movers = np.nonzero(alive[new_g:])[0] + new_g
        if holes.size:
            self.slot_req[holes], self.slot_plen[holes] = self.slot_req[movers], self.slot_plen[movers]
            self.req_slot[self.slot_req[holes]] = holes
            remap = np.arange(g)
            remap[movers] = holes
            self.row_slot[: self.B] = remap[self.row_slot[: self.B]]
            src = torch.as_tensor(movers, device=self.dev)
            dst = torch.as_tensor(holes, device=self.dev)
            self.cache.move_prompt(src, dst)
            self.hidden[dst] = self.hidden[src]
        self.G = new_g
