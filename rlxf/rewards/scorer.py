"""The one reward function the trainer calls: a batch in, one ``ScoredSample`` per input out.

    scorer = build_reward(cfg.reward)            # LocalReward, or RemoteReward if reward.url
    samples = scorer.score(inputs)               # or: await scorer.ascore(inputs)
    logger.log(batch_metrics(samples))           # reward/mean, reward/accuracy, errors, ...

Two implementations of ``RewardFunction``:

- ``LocalReward`` builds the configured verifiers. CPU-bound kinds go through a
  ``VerifierPool`` (worker processes if ``reward.workers > 0``); code, judge and reward-model
  verifiers run here, asynchronously (their heavy work is already in sandboxes, HTTP servers
  or a model forward on a thread). All verifiers of a batch run at the same time.
- ``RemoteReward`` posts the batch to ``rlxf serve-reward`` (``reward.url``), which runs a
  ``LocalReward`` there.

Nothing a verifier does fails the batch: a raise, a hang past ``reward.timeout_s`` or a dead
worker becomes a ``VerifierFailure`` on that sample, scored ``reward.error_score``.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rlxf.config.reward import RewardConfig
from rlxf.errors import MissingExtraError
from rlxf.rewards.base import Verifier, build_verifier, is_isolated, run_sync
from rlxf.rewards.pool import VerifierPool
from rlxf.rewards.types import RewardInput, RewardResult, ScoredSample, VerifierFailure, describe_exception

Outcome = RewardResult | VerifierFailure


@runtime_checkable
class RewardFunction(Protocol):
    """Scores batches. ``names`` are the verifier names in config order."""

    names: list[str]
    accuracy: str

    async def ascore(self, batch: Sequence[RewardInput]) -> list[ScoredSample]: ...

    def score(self, batch: Sequence[RewardInput]) -> list[ScoredSample]: ...

    def close(self) -> None: ...


def combine(names: Sequence[str], weights: Sequence[float], outcomes: Sequence[Outcome], *,
            accuracy: str, error_score: float, uid: str = "") -> ScoredSample:
    """One sample's verifier outcomes -> its reward ``Σ_i w_i · s_i`` and verdict.

    A failed verifier (a ``VerifierFailure``, a result with ``error``, or a non-finite score)
    contributes ``error_score``. ``correct`` is the accuracy verifier's ``metrics["correct"]``
    if it reports one, else its ``score >= 1``; None if it failed.
    """
    scores: dict[str, float] = {}
    failures: dict[str, VerifierFailure] = {}
    metrics: dict[str, float] = {}
    correct: bool | None = None
    reward = 0.0
    for name, weight, outcome in zip(names, weights, outcomes, strict=True):
        failure = _failure(outcome)
        if failure is not None:
            failures[name] = failure
            score = error_score
        else:
            score = float(outcome.score)
            metrics.update({f"{name}/{k}": float(v) for k, v in outcome.metrics.items()})
            if name == accuracy:
                explicit = outcome.metrics.get("correct")
                correct = bool(explicit >= 0.5) if explicit is not None else score >= 1.0
        scores[name] = score
        reward += weight * score
    return ScoredSample(reward=reward, scores=scores, correct=correct, failures=failures, metrics=metrics,
                        uid=uid)


def _failure(outcome: Outcome) -> VerifierFailure | None:
    if isinstance(outcome, VerifierFailure):
        return outcome
    if outcome.error is not None:
        return VerifierFailure("error", outcome.error)
    if not math.isfinite(outcome.score):
        return VerifierFailure("error", f"non-finite score {outcome.score}")
    for k, v in outcome.metrics.items():
        if isinstance(v, str) or not isinstance(v, numbers.Real):  # would fail float() in combine
            return VerifierFailure("error", f"metric {k!r} is {type(v).__name__} {v!r:.80}, not a number")
        if not math.isfinite(v):   # would be invalid JSON in samples.jsonl and the reward server's reply
            return VerifierFailure("error", f"metric {k!r} is {v}, not a finite number")
    return None


async def gather_all(awaitables: Sequence[Any]) -> list[Any]:
    """``asyncio.gather`` that, when one awaitable raises (a KeyboardInterrupt in a reward function
    included), cancels the others, waits for them to finish and raises the first error here.

    asyncio raises a KeyboardInterrupt or SystemExit of a task straight out of the event loop,
    leaving its siblings pending ("Task was destroyed but it is pending", "Task exception was
    never retrieved"); catching it inside each task and re-raising it in the caller avoids that.
    """
    failed: list[BaseException] = []

    async def caught(aw: Any) -> Any:
        try:
            return await aw
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - re-raised below, once the siblings have stopped
            if not failed:
                failed.append(e)
                for task in tasks:
                    if task is not asyncio.current_task():
                        task.cancel()
            return None

    tasks = [asyncio.ensure_future(caught(aw)) for aw in awaitables]
    results = await asyncio.gather(*tasks, return_exceptions=True)   # cancelled here: waits for them
    if failed:
        raise failed[0]
    cancelled = next((r for r in results if isinstance(r, asyncio.CancelledError)), None)
    if cancelled is not None:  # one was cancelled from elsewhere: as gather does, so is this
        raise cancelled
    return results


class LocalReward:
    """Scores with the verifiers of a ``RewardConfig`` in this process (+ its worker pool).

    ``verifiers`` replaces the in-process verifiers by name (tests pass fakes this way).
    """

    def __init__(self, cfg: RewardConfig, *, verifiers: dict[str, Verifier] | None = None):
        if cfg.url:
            raise ValueError("reward.url is set: use RemoteReward (or build_reward) to score remotely")
        self.cfg = cfg
        self.names = cfg.names
        self.weights = [v.weight for v in cfg.verifiers]
        self.accuracy = cfg.accuracy_name
        given = dict(verifiers or {})
        unknown = set(given) - set(self.names)
        if unknown:
            raise ValueError(f"verifiers {sorted(unknown)} are not in reward.verifiers ({self.names})")
        pooled = [i for i, c in enumerate(cfg.verifiers) if is_isolated(c) and c.label not in given]
        self._pool_slot = {i: k for k, i in enumerate(pooled)}
        self._pool: VerifierPool | None = None
        self._local: dict[int, Verifier] = {}
        try:
            for i, c in enumerate(cfg.verifiers):
                if i not in self._pool_slot:
                    self._local[i] = given.get(c.label) or build_verifier(c)
            if pooled:
                self._pool = VerifierPool([cfg.verifiers[i] for i in pooled], workers=cfg.workers,
                                          timeout_s=cfg.timeout_s)
        except BaseException:
            self.close()
            raise

    async def ascore(self, batch: Sequence[RewardInput]) -> list[ScoredSample]:
        batch = list(batch)
        if not batch:
            return []
        runs = []
        for i in range(len(self.names)):
            if i in self._pool_slot:
                runs.append(self._pooled(i, batch))
            else:
                runs.append(self._in_process(self._local[i], batch))
        per_verifier = await gather_all(runs)
        return [combine(self.names, self.weights, [outcomes[j] for outcomes in per_verifier],
                        accuracy=self.accuracy, error_score=self.cfg.error_score, uid=x.uid)
                for j, x in enumerate(batch)]

    def score(self, batch: Sequence[RewardInput]) -> list[ScoredSample]:
        """Blocking ``ascore`` (safe to call from a thread that runs an event loop)."""
        return run_sync(self.ascore(batch))

    async def _pooled(self, i: int, batch: list[RewardInput]) -> list[Outcome]:
        assert self._pool is not None
        futures = self._pool.submit(self._pool_slot[i], batch)
        return await gather_all([asyncio.wrap_future(f) for f in futures])

    async def _in_process(self, verifier: Verifier, batch: list[RewardInput]) -> list[Outcome]:
        """Call ``ascore_batch`` on chunks of the verifier's ``batch_size`` (default 1),
        ``concurrency`` at a time, each under ``reward.timeout_s`` unless the verifier limits
        its own time (``self_limited``: the sandbox, the judge's HTTP timeouts)."""
        size = max(1, int(getattr(verifier, "batch_size", 1)))
        gate = asyncio.Semaphore(max(1, int(getattr(verifier, "concurrency", 1))))
        limit = None if getattr(verifier, "self_limited", False) else self.cfg.timeout_s

        async def chunk(xs: list[RewardInput]) -> list[Outcome]:
            async with gate:
                try:
                    results = await asyncio.wait_for(verifier.ascore_batch(xs), limit)
                except asyncio.TimeoutError:
                    return [VerifierFailure("timeout", f"no result within reward.timeout_s={limit:g}s")] * len(xs)
                except Exception as e:  # noqa: BLE001 - the verifier's failure, recorded per sample
                    return [VerifierFailure("error", describe_exception(e))] * len(xs)
            if len(results) != len(xs):
                return [VerifierFailure("error", f"{verifier.name} returned {len(results)} results for "
                                                 f"{len(xs)} inputs")] * len(xs)
            return [r if isinstance(r, RewardResult) else VerifierFailure(
                "error", f"{verifier.name} returned {type(r).__name__}, not RewardResult") for r in results]

        parts = await gather_all([chunk(batch[k:k + size]) for k in range(0, len(batch), size)])
        return [o for part in parts for o in part]

    @property
    def problem(self) -> str | None:
        """Why this scorer cannot score any more (no reward worker can be started), or None."""
        return self._pool.broken if self._pool is not None else None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        for verifier in self._local.values():
            verifier.close()

    def __enter__(self) -> LocalReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteReward:
    """Scores through ``rlxf serve-reward`` at ``url`` (see ``rlxf.rewards.server``).

    Batches larger than the server's ``max_batch_size`` are split; a request that fails
    after ``retries`` retries marks its samples as failed (``error_score``), never the run.
    """

    def __init__(self, url: str, *, timeout_s: float = 600.0, error_score: float = 0.0, retries: int = 2,
                 token: str | None = None):
        try:
            import httpx  # noqa: PLC0415
        except ImportError as e:
            raise MissingExtraError(f"reward.url ({url}) needs httpx to reach the reward server: "
                                    f"pip install 'rlxf[serve]'") from e
        self._httpx = httpx
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.error_score = error_score
        self.retries = retries
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            health = httpx.get(f"{self.url}/health", timeout=min(timeout_s, 30.0),
                               headers=self.headers).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as e:
            raise ConnectionError(f"reward server at {self.url} is not reachable ({e}); start it with "
                                  "`rlxf serve-reward CONFIG` or unset reward.url") from None
        names, accuracy, size = (health.get(k) for k in ("verifiers", "accuracy", "max_batch_size")) if isinstance(
            health, dict) else (None, None, None)
        if (not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not isinstance(accuracy, str)
                or isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ConnectionError(f"{self.url}/health answered {str(health)[:200]!r}, not an rlxf reward server's "
                                  "{verifiers, accuracy, max_batch_size}; point reward.url at `rlxf serve-reward`")
        self.names: list[str] = names
        self.accuracy: str = accuracy
        self.max_batch_size: int = size

    async def ascore(self, batch: Sequence[RewardInput]) -> list[ScoredSample]:
        batch = list(batch)
        if not batch:
            return []
        chunks = [batch[k:k + self.max_batch_size] for k in range(0, len(batch), self.max_batch_size)]
        async with self._httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers) as client:
            parts = await gather_all([self._post(client, c) for c in chunks])
        return [s for part in parts for s in part]

    def score(self, batch: Sequence[RewardInput]) -> list[ScoredSample]:
        return run_sync(self.ascore(batch))

    async def _post(self, client: Any, batch: list[RewardInput]) -> list[ScoredSample]:
        try:
            body = {"samples": [x.to_json() for x in batch]}
            request = client.build_request("POST", f"{self.url}/score", json=body)
        except (TypeError, ValueError) as e:
            return self._failed(batch, f"the batch is not JSON-serialisable (ground truth or metadata): {e}")
        problem = ""
        for attempt in range(self.retries + 1):
            try:
                response = await client.send(request)
            except self._httpx.HTTPError as e:
                problem = f"{type(e).__name__}: {e}"
            else:
                if response.status_code == 200:
                    return self._parse(batch, response)
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code == 413 and len(batch) > 1:  # too big a body: halve and resend
                    half = len(batch) // 2
                    parts = await asyncio.gather(self._post(client, batch[:half]), self._post(client, batch[half:]))
                    return [s for part in parts for s in part]
                if response.status_code < 500 and response.status_code != 429:
                    break  # our request is wrong: retrying will not help
            if attempt < self.retries:
                await asyncio.sleep(0.5 * 2 ** attempt)
        return self._failed(batch, f"reward server {self.url}: {problem}")

    def _parse(self, batch: list[RewardInput], response: Any) -> list[ScoredSample]:
        """The results of a 200 answer; its samples' failure if the body is not results (a
        proxy's page, another service on that port, a server of another version)."""
        try:
            data = response.json()
            rows = data.get("results") if isinstance(data, dict) else None
            if not isinstance(rows, list):
                raise ValueError('the body has no "results" list')
            results = []
            for i, row in enumerate(rows):
                try:
                    results.append(ScoredSample.from_json(row))
                except ValueError as e:
                    raise ValueError(f"result {i}: {e}") from None
        except (ValueError, RecursionError) as e:   # JSONDecodeError is a ValueError
            return self._failed(batch, f"reward server {self.url} answered 200 with a body that is not rlxf "
                                       f"results ({str(e)[:200]}): {response.text[:200]!r}; is `rlxf "
                                       "serve-reward` of this rlxf version serving that URL?")
        if len(results) != len(batch) or any(r.uid != x.uid for r, x in zip(results, batch, strict=True)):
            return self._failed(batch, f"reward server {self.url} answered {len(results)} results that do "
                                       f"not match the {len(batch)} samples sent")
        return results

    def _failed(self, batch: list[RewardInput], message: str) -> list[ScoredSample]:
        return [ScoredSample(reward=self.error_score, scores={}, correct=None,
                             failures={"remote": VerifierFailure("error", message)}, uid=x.uid) for x in batch]

    def close(self) -> None:
        pass


def build_reward(cfg: RewardConfig) -> RewardFunction:
    """The reward function for a ``reward`` config section: remote if ``reward.url``, else local."""
    if cfg.url:
        return RemoteReward(cfg.url, timeout_s=cfg.remote_timeout_s, error_score=cfg.error_score,
                            token=os.environ.get(cfg.server.token_env) or None)
    return LocalReward(cfg)
