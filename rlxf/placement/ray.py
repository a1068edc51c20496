"""The Ray placement: the roles of an RL run as Ray actors (``run.placement: ray``).

    colocated       one actor holds learner, engine and reward (a ``LocalPlacement``) and runs
                    every phase in turn, in its own process with its own CPUs/GPUs
    disaggregated   a learner actor (actor, reference, critic, optimizers) and ``ray.engines``
                    engine actors, each with its own copy of the policy; the driver scores with
                    the reward (whose verifiers run in their own worker pool), or splits the
                    scoring over ``ray.reward_actors`` reward actors, and, after each
                    step, ships the learner's weights to every engine: through the object store,
                    or by broadcast over a process group (``ray.weight_sync``, ``broadcast.py``)

With ``ray.learners`` = N the learner is N actors, ranks of one torch.distributed group
(``rlxf.trainer.distributed``: DDP or FSDP2); colocated, rank 0 is the actor that also holds
engine and reward. Every learner call goes to all ranks with the same arguments (under FSDP
every forward and every weight gather is a collective, so all must take part); rank 0 answers.

With ``env:`` (multi-turn episodes), each engine actor runs its share's episodes itself: the agent
loop (or the agent programs and their endpoint) next to its engine, so every turn is generated
token-in, token-out without a round trip to the driver, and an environment that misbehaves does
so in an engine actor's threads, never in the driver or the learner. The driver scores the
episodes (``rlxf.envs.rollout.score_episodes``).

Checkpoints have the same layout as ``local`` (learner rank 0 writes them), so a run resumes
under either placement and any N. A dead engine or reward actor (killed, OOM, node lost) is
replaced (an engine is given the current weights) and its requests are retried, up to
``ray.max_restarts`` times in all, counted in ``stats()`` (logged every step); a dead learner rank
ends the run with ``LearnerLost`` (resume from the last checkpoint). Ray is imported only here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from rlxf.config import Config
from rlxf.errors import UserInputError
from rlxf.placement.base import LearnerLost, Placement, close_all, close_during
from rlxf.rollout import SamplingParams
from rlxf.rollout.stream import GroupRequest, GroupStream
from rlxf.types import Experience, Prompt, Trajectory

if TYPE_CHECKING:
    from rlxf.data import SFTExample

log = logging.getLogger("rlxf")

_ACTOR_LOST = (RayActorError, ActorDiedError, ActorUnavailableError)
# an actor that does not answer its close in this long (never placed, stuck) is killed instead
CLOSE_TIMEOUT_S = 30.0
# how long the actors may wait for the cluster to place them before the run says why it cannot
PLACE_TIMEOUT_S = 300.0
# how long one poll of the broadcast group's members waits for it to be built
JOIN_POLL_S = 1.0


class ActorsNotPlaced(UserInputError):
    """The cluster cannot place the actors the config asks for (too few CPUs or GPUs)."""
_NOT_CLOSED = (*_ACTOR_LOST, GetTimeoutError)


def _own_error(err: RayTaskError) -> BaseException:
    """The rlxf error an actor raised, as itself: Ray's wrapper, whose text is the actor's whole
    traceback, made a ``UserInputError`` print that traceback as its message (and any other
    rlxf error exit as a ``RayTaskError``). Chained to the wrapper, so the traceback is kept
    (``RLXF_DEBUG=1``); an error of other code (torch, a plugin's) stays wrapped: its remote
    traceback is what locates it."""
    cause = err.cause
    if isinstance(cause, UserInputError) or type(cause).__module__.partition(".")[0] == "rlxf":
        cause.__cause__ = err
        return cause
    return err


def _get(refs, **kwargs):
    """``ray.get``, an rlxf error raised in an actor raised as itself (``_own_error``)."""
    try:
        return ray.get(refs, **kwargs)
    except RayTaskError as e:
        own = _own_error(e)
        if own is e:
            raise
        raise own from e


def _closer(method, *args):
    """A closer calling the remote ``method``: an actor already dead, or not answering within
    CLOSE_TIMEOUT_S (never placed, stuck), has nothing more to close (it is killed next)."""
    def close() -> None:
        try:
            _get(method.remote(*args), timeout=CLOSE_TIMEOUT_S)
        except _NOT_CLOSED:
            pass
    return close


@contextlib.contextmanager
def _held_back(*signums: int):
    """``signums`` blocked until the block ends (main thread), then delivered if they came.
    Processes started inside inherit the block, and keep it after exec."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = set(signums) - signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _uninterrupted():
    """Ctrl-C held back until the block ends (main thread): a second Ctrl-C landing inside
    ``close`` left Ray's own processes running and exited 1; it now takes effect after it."""
    return _held_back(signal.SIGINT)


def _threads(cpus: float, seed: int) -> None:
    """An actor's torch threads (its reserved CPUs) and initialisation seed (as run_training's)."""
    import torch

    torch.set_num_threads(max(1, int(cpus)))
    torch.manual_seed(seed)


class _Rank(ABC):
    """A learner rank: joins the learners' torch.distributed group, then builds its roles.

    Construction only reserves the process; ``start`` builds once every rank knows rank 0's
    address (which Ray gives only after rank 0's actor exists).
    """

    def __init__(self, cfg: Config, cpus: float):
        _import_plugins(cfg)
        _threads(cpus, cfg.seeds.init)
        self.cfg = cfg
        self.learner = None
        self.engines = None  # the broadcast group to the engines (rank 0, weight_sync=collective)

    def address(self) -> tuple[str, int]:
        """This node's address as Ray knows it (the one the other nodes reach it by: the host
        name may resolve to a loopback address, 127.0.1.1 on Debian), and a free port on it, held
        bound until this actor's store listens on it (``tcp_store``): a Ray worker starting
        meanwhile binds a free port too, and could take a released one."""
        from rlxf.trainer.distributed import free_address

        return free_address(ray.util.get_node_ip_address(), hold=True)

    def start(self, rank: int, world: int, address: str | None, port: int | None) -> None:
        from rlxf.trainer.distributed import init_data_parallel

        rc = self.cfg.ray
        self._build(init_data_parallel(rank, world, address, port, rc.learner_strategy, rc.learner_backend))

    @abstractmethod
    def _build(self, dp) -> None:
        """Build this rank's roles (``self.learner``) as learner rank ``dp``."""

    def call(self, method: str, *args, **kwargs):
        return self._rank0_only(getattr(self.learner, method)(*args, **kwargs))

    def _rank0_only(self, result):
        """Ranks return what rank 0 returns (the same Experience, the same metrics): only rank 0
        ships it back, so the driver does not fetch N copies."""
        return result if self.learner.dp.rank == 0 else None

    def weights(self) -> tuple[dict[str, Any], bool]:
        """(the actor's weights as plain CPU tensors, merged when LoRA trains; True). Called with
        two returns, so the driver learns that they exist without fetching them. Under FSDP
        every rank must call this (a gather) and ranks other than 0 get {}."""
        return self.learner.dp.full_state_dict(self.learner.actor.model), True

    def join_engines(self, address: str, port: int, world: int):
        """Rank 0: start hosting the broadcast group with the engines (``joined`` says when it is
        built); returns what it will send (manifest)."""
        from rlxf.models.loading import merged_state_dict
        from rlxf.placement.broadcast import Joining, Manifest

        self.joining = Joining(address, port, 0, world, self.cfg.ray.sync_backend)
        return Manifest.of(merged_state_dict(self.learner.actor.model))  # global shapes, also sharded

    def joined(self, timeout: float) -> bool:
        """Whether the group ``join_engines`` started is built (waiting up to ``timeout`` s)."""
        group = self.joining.wait(timeout)
        if group is not None:
            self.engines = group
        return group is not None

    def send_weights(self, manifest) -> int:
        """Broadcast the weights to the engines (FSDP: every rank gathers, rank 0 sends); bytes sent."""
        weights, _ = self.weights()
        return self.engines.send(weights, manifest) if self.engines is not None else 0


class _Colocated(_Rank):
    """A whole ``LocalPlacement`` inside one actor (learner rank 0 when ``ray.learners`` > 1)."""

    def _build(self, dp) -> None:
        from rlxf.placement.local import LocalPlacement

        self.placement = LocalPlacement.from_config(self.cfg, dp=dp)
        self.learner = self.placement.learner

    def call(self, method: str, *args, **kwargs):
        return self._rank0_only(getattr(self.placement, method)(*args, **kwargs))

    def score(self, trajs: list[Trajectory], max_new_tokens: int):
        """Score here; the verdicts go back to the driver's copies of the trajectories."""
        metrics = self.placement.score(trajs, max_new_tokens)
        return [(t.reward, t.scores, t.correct, t.reward_error) for t in trajs], metrics


class _Learner(_Rank):
    """The learner (actor, reference, critic and the algorithm's state), or one rank of it."""

    def _build(self, dp) -> None:
        from rlxf.models import load_from_config
        from rlxf.placement.local import build_learner

        model, tokenizer = load_from_config(self.cfg.model)
        self.learner = build_learner(self.cfg, model, tokenizer, dp=dp)


class _Engine:
    """One rollout engine replica with its own copy of the policy.

    Its calls run one at a time, in order, except ``update_weights``, which runs in a thread of
    its own (the "weights" concurrency group): weights sent while a generate call runs are
    handed over to it and loaded between two of its decode steps, so its sequences continue
    under them (a partial rollout; ``rlxf.rollout.handover``; the hf backend loads them after
    the call). A generate call first waits for the version the driver had sent before it.
    """

    def __init__(self, cfg: Config, cpus: float):
        from rlxf.models import load_from_config
        from rlxf.rollout import build_engine_from_config
        from rlxf.rollout.handover import WeightHandover
        from rlxf.trainer.collect import EngineRollout

        _import_plugins(cfg)
        _threads(cpus, cfg.seeds.init)
        model, tokenizer = load_from_config(cfg.model.model_copy(update={"lora": None}))
        model.eval()
        engine = WeightHandover(build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling))
        self.engine = engine
        if cfg.env is not None:   # episodes run here, next to the engine; the driver scores them
            from rlxf.envs.rollout import EnvRollout

            self.rollout = EnvRollout(cfg.env, engine, tokenizer, generate_only=True)
        else:
            self.rollout = EngineRollout(engine, tokenizer, reward=None)
        self.cfg = cfg
        self.group = None

    def generate(self, prompts, seeds, sampling, first_group, version):
        self.engine.wait_for(version)
        return self.rollout.generate(prompts, seeds, sampling, first_group=first_group)

    @ray.method(concurrency_group="weights")
    def update_weights(self, weights: dict[str, Any], version: int) -> int:
        self.engine.update_weights(weights.items(), version=version)
        return version

    def alive(self) -> bool:
        return True

    def join(self, address: str, port: int, rank: int, world: int) -> None:
        """Start joining the broadcast group (``joined`` says when it is built)."""
        from rlxf.placement.broadcast import Joining

        self.joining = Joining(address, port, rank, world, self.cfg.ray.sync_backend)

    def joined(self, timeout: float) -> bool:
        group = self.joining.wait(timeout)
        if group is not None:
            self.group = group
        return group is not None

    def receive_weights(self, manifest, version: int) -> int:
        return self.update_weights(self.group.receive(manifest), version)

    def close(self) -> None:
        close = getattr(self.rollout, "close", None)   # an EnvRollout's tools and endpoint
        if close is not None:
            close()


def _in_shares(n: int, k: int, send, replace) -> list:
    """Items ``0..n`` in contiguous shares over ``k`` actors: ``send(i, a, b)`` sends share ``[a, b)``
    to actor ``i`` (an ObjectRef back); a share whose actor died is sent again after
    ``replace(i, err)`` has put a new actor in its place. The results, concatenated in order."""
    bounds = [n * i // k for i in range(k + 1)]
    shares = {i: (bounds[i], bounds[i + 1]) for i in range(k) if bounds[i + 1] > bounds[i]}
    pending = {i: send(i, a, b) for i, (a, b) in shares.items()}
    out: dict[int, list] = {}
    while pending:
        for i, ref in list(pending.items()):
            try:
                out[i] = _get(ref)
                del pending[i]
            except _ACTOR_LOST as e:
                replace(i, e)
                pending[i] = send(i, *shares[i])
    return [x for i in sorted(out) for x in out[i]]


class _Scorer:
    """A reward actor: the run's reward function (its verifiers, and their worker pool)."""

    def __init__(self, cfg: Config):
        from rlxf.rewards import build_run_reward

        _import_plugins(cfg)
        self.reward = build_run_reward(cfg)

    def score(self, inputs):
        return self.reward.score(inputs)

    def close(self) -> None:
        self.reward.close()


class _ActorReward:
    """The reward function the driver scores with when ``ray.reward_actors`` > 0: each call's
    samples are split in contiguous shares over the reward actors; a share whose actor died is
    scored again by its replacement (``placement._replace_actor``)."""

    def __init__(self, placement: RayPlacement):
        self.placement = placement

    def score(self, inputs):
        p = self.placement
        return _in_shares(len(inputs), len(p._scorers), lambda i, a, b: p._scorers[i].score.remote(inputs[a:b]),
                          lambda i, err: p._replace_actor("reward", i, err))

    def close(self) -> None:
        close_all(_closer(scorer.close) for scorer in self.placement._scorers)


class RayPlacement(Placement):
    """Roles as Ray actors; see the module docstring for the two modes."""

    _stream: _EngineActorStream | None = None   # async mode's stream, once asked for (``stream``)

    def __init__(self, cfg: Config):
        self.cfg = cfg
        rc = cfg.ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            # Ray's processes (GCS, raylet, and through it every actor) start with SIGTERM blocked, as
            # Ray starts them with SIGINT blocked: a scheduler's SIGTERM to the whole process group
            # killed them all at once, so the run could neither finish its step nor checkpoint it.
            # The driver alone stops on it (``rlxf.trainer.interrupt``), then stops them (``close``).
            with _held_back(signal.SIGTERM):
                try:
                    ray.init(address=rc.address, include_dashboard=False)
                except OSError as e:   # it writes its auth token to ~/.ray, its session to /tmp/ray
                    raise UserInputError(
                        f"run.placement=ray: Ray could not start here ({type(e).__name__}: {e}). Ray writes its "
                        f"authentication token under $HOME/.ray (HOME={os.environ.get('HOME', '')!r}) and its session "
                        "files under /tmp/ray (RAY_TMPDIR): give it a writable HOME (or set RAY_AUTH_MODE=disabled on "
                        "a machine only you use) and a writable RAY_TMPDIR, or use run.placement=local") from e
        # actors on this machine import what the driver imports (rlxf, plugins next to the config);
        # on a cluster, ship code with the cluster's own means (an installed package, working_dir)
        self._options = {"runtime_env": {"env_vars": {"PYTHONPATH": _pythonpath()}}} if rc.address is None else {}
        self.restarts = 0
        self._version = 0
        self._weights_ref = None   # rank 0's weights in the object store, as of version _weights_version
        self._weights_version = -1
        self._manifest = None      # weight_sync=collective: what rank 0 broadcasts, in order
        self._connected = False    # whether the broadcast group holds the current engines
        self._pending_updates: list[Any] = []  # async mode: weight updates sent, not yet confirmed
        self._engines: list[Any] = []
        self._scorers: list[Any] = []   # reward actors (ray.reward_actors)
        self.restarts_by_role = {"engine": 0, "reward": 0}
        self.reward = None
        self._learners: list[Any] = []
        try:
            from rlxf.models import load_tokenizer

            m = cfg.model
            self.tokenizer = load_tokenizer(m.tokenizer or m.path, chat_template=m.chat_template,
                                            revision=m.tokenizer_revision, trust_remote_code=m.trust_remote_code)
            # learner ranks: rank 0 holds everything when colocated; the others are learner-only
            first = _Colocated if rc.mode == "colocated" else _Learner
            self._learners += [self._new_learner(first)] + [self._new_learner(_Learner) for _ in range(rc.learners - 1)]
            if rc.mode == "disaggregated":   # they start (load the policy) while the learners build theirs
                self._engines = [self._new_engine() for _ in range(rc.engines)]
                self._scorers = [self._new_scorer() for _ in range(rc.reward_actors)]
            self._wait_placed("learner", self._learners)
            address, port = _get(self._learners[0].address.remote()) if rc.learners > 1 else (None, None)
            self._gather([h.start.remote(rank, rc.learners, address, port) for rank, h in enumerate(self._learners)])
            if rc.mode == "disaggregated":
                from rlxf.rewards import build_run_reward

                self._wait_placed("engine and reward", [*self._engines, *self._scorers])
                self.reward = _ActorReward(self) if self._scorers else build_run_reward(cfg)
            self.sync_weights(0)
        except BaseException as e:  # a start that fails (a bad model, ActorsNotPlaced) leaves no actor
            close_during(e, self._abandon, "stopping the Ray placement's actors")  # holding CPUs: a retry
            raise                                                                  # would wait for them

    def _wait_placed(self, role: str, handles: list[Any]) -> None:
        """Raise ActorsNotPlaced, naming what was asked and what the cluster has, when ``handles``
        are not all placed within PLACE_TIMEOUT_S (before, the run waited forever, silently)."""
        refs = [h.__ray_ready__.remote() for h in handles]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=PLACE_TIMEOUT_S)
        if pending:
            rc = self.cfg.ray
            asked = (f"learner_cpus={rc.learner_cpus} x {rc.learners}, engine_cpus={rc.engine_cpus} x "
                     f"{rc.engines if rc.mode == 'disaggregated' else 0}, reward_cpus={rc.reward_cpus} x "
                     f"{rc.reward_actors if rc.mode == 'disaggregated' else 0}, learner_gpus={rc.learner_gpus}, "
                     f"engine_gpus={rc.engine_gpus}")
            have = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
            raise ActorsNotPlaced(
                f"ray: {len(pending)} of {len(handles)} {role} actors could not be placed in {PLACE_TIMEOUT_S:g} s: "
                f"the config asks for {asked}; the cluster has {have}. Lower the ray.*_cpus / *_gpus or the "
                f"actor counts, use ray.mode: colocated, or add resources")

    def _abandon(self) -> None:
        """Kill every actor of a start that failed (none has anything to save yet), close the
        driver's reward, stop the Ray this placement started."""
        self._close_then_stop([self.reward.close] if self.reward is not None
                              and not isinstance(self.reward, _ActorReward) else [])

    @property
    def _colocated(self):
        """The actor holding engine and reward too (colocated), else None."""
        return self._learners[0] if self.cfg.ray.mode == "colocated" else None

    # -- placement interface --------------------------------------------------------------

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        if self._colocated is not None:
            return self._gather([self._colocated.call.remote("generate", prompts, seeds, sampling,
                                                             first_group=first_group)])[0]
        # contiguous shares, so group numbering and order are those of one engine
        return _in_shares(len(prompts), len(self._engines),
                          lambda i, a, b: self._engines[i].generate.remote(prompts[a:b], seeds[a:b], sampling,
                                                                           first_group + a, self._version),
                          self._replace_engine)

    def stream(self) -> GroupStream:
        if self._colocated is not None:
            return super().stream()
        self._stream = _EngineActorStream(self)
        return self._stream

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        if self._colocated is not None:
            verdicts, metrics = self._gather([self._colocated.score.remote(trajs, max_new_tokens)])[0]
            for t, (reward, scores, correct, error) in zip(trajs, verdicts):
                t.reward, t.scores, t.correct, t.reward_error = reward, scores, correct, error
            return metrics
        if self.cfg.env is not None:
            from rlxf.envs.rollout import score_episodes

            return score_episodes(trajs, max_new_tokens, self.reward if self.cfg.env.use_verifiers else None)
        from rlxf.trainer.collect import score

        return score(self.reward, trajs, max_new_tokens)

    def make_experience(self, trajs: list[Trajectory]) -> tuple[Experience, dict[str, float]]:
        return self._on_learners("make_experience", trajs)

    def update(self, exp: Experience, step: int, demos: list[list[SFTExample]] | None = None,
               time_spent: float | None = None) -> dict[str, float]:
        return self._on_learners("update", exp, step, demos, time_spent)

    def sync_weights(self, version: int) -> None:
        self._version = version
        if self._colocated is not None:  # rank 0's engine loads from its own learner (FSDP: all gather)
            self._gather([self._colocated.call.remote("sync_weights", version), *self._gathering_ranks("weights")])
        elif self.cfg.ray.weight_sync == "collective":
            self._broadcast_weights(version)
        elif self.cfg.rollout.mode == "async":
            # an engine actor loads the update between two decode steps of the generate call it
            # is running (a partial rollout), or at once when idle; the calls sent after it wait
            # for it; the trainer does not
            self._put_weights()
            self._confirm_updates()
            self._pending_updates = [(i, e.update_weights.remote(self._weights_ref, version))
                                     for i, e in enumerate(self._engines)]
        else:
            self._put_weights()
            for i in range(len(self._engines)):
                while True:
                    try:
                        _get(self._engines[i].update_weights.remote(self._weights_ref, version))
                        break
                    except _ACTOR_LOST as e:
                        self._replace_engine(i, e, sync=False)

    def _confirm_updates(self) -> None:
        """Wait for the previous async weight updates (an engine that died meanwhile was, or will
        be, replaced with the current weights when its generate call fails)."""
        for _, ref in self._pending_updates:
            try:
                _get(ref)
            except _ACTOR_LOST:
                pass
        self._pending_updates = []

    def save(self, directory: Path) -> None:
        self._on_learners("save", directory)

    def load(self, directory: Path) -> None:
        self._on_learners("load", directory)

    def close(self) -> None:
        """Close every role, each even when another fails, then kill the actors and stop the Ray
        this placement started; the first failure is raised after all of it. Async mode's generate
        calls still in flight are cancelled first: no step will take them, and an engine's close
        would wait behind every one (``CLOSE_TIMEOUT_S``)."""
        self._close_then_stop([*([self._stream.cancel] if self._stream is not None else []),
                               *([_closer(self._colocated.call, "close")] if self._colocated is not None else []),
                               *([self.reward.close] if self.reward is not None else []),
                               *(_closer(engine.close) for engine in self._engines)])

    def _close_then_stop(self, closers: list) -> None:
        """Run ``closers`` (each, even after one fails), then kill every actor and stop the Ray this
        placement started, whatever the closers raised; the first failure is raised after all of it."""
        kills = [lambda h=handle: ray.kill(h) for handle in [*self._learners, *self._engines, *self._scorers]]
        stop = [*kills, *([ray.shutdown] if self._started_ray else [])]
        with _uninterrupted():
            try:
                close_all(closers)
            except BaseException as e:
                close_during(e, lambda: close_all(stop), "stopping the Ray actors")
                raise
            close_all(stop)

    # -- learners ---------------------------------------------------------------------------

    def _on_learners(self, method: str, *args):
        """Call ``method`` on every learner rank with the same arguments; rank 0's result."""
        if len(self._learners) > 1:
            args = tuple(ray.put(a) for a in args)  # one copy in the object store, not one per rank
        return self._gather([h.call.remote(method, *args) for h in self._learners])[0]

    def _gathering_ranks(self, method: str, *args) -> list:
        """Under FSDP, gathering the weights is a collective: ranks 1.. must call ``method`` too."""
        if self.cfg.ray.learner_strategy != "fsdp":
            return []
        return [getattr(h, method).remote(*args) for h in self._learners[1:]]

    def _gather(self, refs: list) -> list:
        """Every result, in order; a dead learner raises ``LearnerLost`` at once (its peers may be
        blocked in a collective waiting for it, so waiting for them in order could hang)."""
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                _get(ready[0])
            except _ACTOR_LOST as e:
                raise self._learner_lost(e) from None
        return _get(refs)

    def _learner_lost(self, err: Exception) -> Exception:
        if isinstance(err, RayActorError) and err.actor_init_failed:  # nothing was lost; resuming fails alike
            return RuntimeError(f"a learner actor could not start (its constructor raised): {err}")
        return LearnerLost(f"a learner actor died ({type(err).__name__}: {err}); its optimizer state is lost. "
                           f"Resume the run from its last checkpoint with `rlxf train CONFIG --resume`.")

    def _new_learner(self, cls):
        rc = self.cfg.ray
        return ray.remote(cls).options(num_cpus=rc.learner_cpus, num_gpus=rc.learner_gpus, **self._options).remote(
            self.cfg, rc.learner_cpus)

    # -- weights to engines -------------------------------------------------------------------

    def _put_weights(self) -> None:
        """Rank 0's weights into the object store (``self._weights_ref``), once for every engine."""
        gathering = self._gathering_ranks("weights")
        self._weights_ref, made = self._learners[0].weights.options(num_returns=2).remote()
        self._gather([made, *gathering])
        self._weights_version = self._version

    def _broadcast_weights(self, version: int) -> None:
        """Rank 0 broadcasts to every engine. A dead engine is replaced and the broadcast retried
        in a rebuilt group (the others' broadcast may fail with it: tolerated then)."""
        while True:
            if not self._connected:
                self._connect_engines()
            calls = {self._learners[0].send_weights.remote(self._manifest): None}
            calls |= {ref: None for ref in self._gathering_ranks("weights")}
            calls |= {e.receive_weights.remote(self._manifest, version): i for i, e in enumerate(self._engines)}
            lost, failed = False, None
            while calls:
                (ref,), _ = ray.wait(list(calls), num_returns=1)
                engine = calls.pop(ref)
                try:
                    ray.get(ref)
                except _ACTOR_LOST as e:
                    if engine is None:
                        raise self._learner_lost(e) from None
                    self._replace_engine(engine, e, sync=False)
                    lost = True
                except RayTaskError as e:
                    failed = e
            if not lost:
                if failed is not None:  # with every engine alive: a real error
                    raise _own_error(failed)
                return

    def _connect_engines(self) -> None:
        """(Re)build the broadcast group: learner rank 0 and the current engines. Dead engines are
        replaced and every engine has finished starting first (a member that joins late makes
        the others wait). The members build it in threads while the driver polls them
        (``broadcast.Joining``): an engine that dies meanwhile (a kill lands after it said it
        was alive) is replaced and the group rebuilt at once, where the others used to wait
        ``broadcast.TIMEOUT`` for it and then fail the sync."""
        while True:
            self._replace_dead_engines()   # alive and constructed: joining must not wait on a start-up
            address, port = self._gather([self._learners[0].address.remote()])[0]
            world = 1 + len(self._engines)
            self._manifest = self._gather([self._learners[0].join_engines.remote(address, port, world)])[0]
            for i, e in enumerate(self._engines):
                e.join.remote(address, port, 1 + i, world)   # an engine lost here fails its first poll
            if self._joined(address, port, world):
                self._connected = True
                return

    def _joined(self, address: str, port: int, world: int) -> bool:
        """Poll the members until the group is built (True) or an engine died (False: replaced,
        the group is to be rebuilt); a build that fails with every member alive raises."""
        members = {None: self._learners[0], **dict(enumerate(self._engines))}
        while members:
            polls = {members[k].joined.remote(JOIN_POLL_S): k for k in members}
            lost, failed = False, None
            for ref, k in polls.items():
                try:
                    if _get(ref):
                        del members[k]
                except _ACTOR_LOST as e:
                    if k is None:
                        raise self._learner_lost(e) from None
                    self._replace_engine(k, e, sync=False)
                    lost = True
                except RayTaskError as e:
                    failed = e
            if lost:
                return False
            if failed is not None and self._replace_dead_engines():   # a member that died mid-build
                return False
            if failed is not None:
                cause = failed.cause or failed
                raise RuntimeError(f"ray: the weight broadcast group (learner rank 0 and {world - 1} engine actors, "
                                   f"its store at {address}:{port}) could not be built: {type(cause).__name__}: "
                                   f"{cause}. Check that the engines' nodes reach the learner's on that address, "
                                   f"or use ray.weight_sync: object_store") from failed
        return True

    def _replace_dead_engines(self) -> bool:
        """Replace every dead engine and wait until each engine has started; whether one was dead."""
        replaced = False
        for i in range(len(self._engines)):
            while True:
                try:
                    _get(self._engines[i].alive.remote())
                    break
                except _ACTOR_LOST as e:
                    self._replace_engine(i, e, sync=False)
                    replaced = True
        return replaced

    # -- engines ------------------------------------------------------------------------------

    def _new_engine(self):
        rc = self.cfg.ray
        actor = ray.remote(concurrency_groups={"weights": 1})(_Engine)  # update_weights' own thread
        return actor.options(num_cpus=rc.engine_cpus, num_gpus=rc.engine_gpus, **self._options).remote(
            self.cfg, rc.engine_cpus)

    def _new_scorer(self):
        return ray.remote(_Scorer).options(num_cpus=self.cfg.ray.reward_cpus, **self._options).remote(self.cfg)

    def _replace_actor(self, role: str, i: int, err: Exception) -> None:
        """Count, log and replace the dead ``role`` actor ``i`` (the caller retries its requests);
        past ``ray.max_restarts`` restarts in all, the run ends."""
        if isinstance(err, RayActorError) and err.actor_init_failed:  # a new one would fail the same way
            raise RuntimeError(f"a {role} actor could not start (its constructor raised), so it is not "
                               f"replaced: {err}") from None
        self.restarts += 1
        self.restarts_by_role[role] += 1
        if self.restarts > self.cfg.ray.max_restarts:
            raise RuntimeError(f"engine and reward actors died {self.restarts} times (ray.max_restarts="
                               f"{self.cfg.ray.max_restarts}); last: {role} actor {i}, {type(err).__name__}: "
                               f"{err}") from None
        log.warning("%s actor %d died (%s); starting a new one and retrying its requests (restart %d of %d)",
                    role, i, type(err).__name__, self.restarts, self.cfg.ray.max_restarts)
        # one only unreachable (ActorUnavailableError) may still be alive, holding its CPUs or GPU
        with contextlib.suppress(Exception):
            ray.kill(self._scorers[i] if role == "reward" else self._engines[i], no_restart=True)
        if role == "reward":
            self._scorers[i] = self._new_scorer()
        else:
            self._engines[i] = self._new_engine()

    def stats(self) -> dict[str, float]:
        return {f"ray/{role}_restarts": float(n) for role, n in self.restarts_by_role.items()}

    def _replace_engine(self, i: int, err: Exception, *, sync: bool = True) -> None:
        """Engine ``i`` died: start a new one with the current weights (its requests are retried).
        The new engine gets them through the object store (one that dies meanwhile is replaced
        in turn, within ``ray.max_restarts``); a broadcast group is rebuilt at the next sync."""
        t0 = time.perf_counter()
        self._replace_actor("engine", i, err)
        self._connected = False
        while sync:
            if self._weights_version != self._version:  # collective sync puts nothing in the store
                self._put_weights()
            try:
                _get(self._engines[i].update_weights.remote(self._weights_ref, self._version))
                break
            except _ACTOR_LOST as e:
                self._replace_actor("engine", i, e)
        log.info("engine actor %d replaced in %.1fs", i, time.perf_counter() - t0)


class _EngineActorStream(GroupStream):
    """``rollout.mode: async`` on engine actors: each ``submit`` is one generate call on the
    engine with the fewest calls in flight, and ``ready`` waits on those calls (``ray.wait``).
    The engines sample while the learner trains; new weights reach a call in progress between
    two decode steps (partial rollouts, as under ``local``; see ``_Engine``). A call whose
    engine died is retried on its replacement: one replacement per death, however many of its
    calls were in flight."""

    def __init__(self, placement: RayPlacement):
        self.placement = placement
        # each call in flight: (engine index, the engine actor it went to, its requests, sampling)
        self.calls: dict[Any, tuple[int, Any, list[GroupRequest], SamplingParams]] = {}

    def submit(self, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        if requests:
            load = [sum(1 for c in self.calls.values() if c[0] == i) for i in range(len(self.placement._engines))]
            self._launch(load.index(min(load)), requests, sampling)

    def _launch(self, i: int, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        engine = self.placement._engines[i]
        ref = engine.generate.remote([r.prompt for r in requests], [r.seed for r in requests], sampling, 0,
                                     self.placement._version)
        self.calls[ref] = (i, engine, requests, sampling)

    def ready(self, timeout: float | None = None) -> list[tuple[int, list[Trajectory]]]:
        if not self.calls:
            return []
        done, _ = ray.wait(list(self.calls), num_returns=1, timeout=timeout)
        if done:  # and every other call that has finished by now
            done, _ = ray.wait(list(self.calls), num_returns=len(self.calls), timeout=0)
        out = []
        for ref in done:
            i, engine, requests, sampling = self.calls.pop(ref)
            try:
                trajs = _get(ref)
            except _ACTOR_LOST as e:
                # its other calls (and an evaluation's) fail with it: the first to tell replaces it
                if self.placement._engines[i] is engine:
                    self.placement._replace_engine(i, e)
                self._launch(i, requests, sampling)
                continue
            groups: list[list[Trajectory]] = [[] for _ in requests]
            for t in trajs:  # numbered by position in the call; give back the callers' ids
                groups[t.group].append(t)
                t.group = requests[t.group].group
            out += [(r.group, g) for r, g in zip(requests, groups)]
        return out

    def engine_stats(self) -> dict[str, float]:
        return {"engine_restarts": float(self.placement.restarts_by_role["engine"])}

    def cancel(self) -> None:
        """Cancel every call in flight (the run is ending): those queued never start; a running
        one ends on its own (Ray does not interrupt an actor's method)."""
        for ref in self.calls:
            ray.cancel(ref)
        self.calls = {}


def _import_plugins(cfg: Config) -> None:
    """Import the config's ``plugins`` in this actor, as the driver did when it loaded the config:
    what they register (advantage estimators, losses, environments, tasks) exists only in the
    processes that import them, and an actor is a process of its own."""
    import importlib

    for module in cfg.plugins:
        importlib.import_module(module)


def _pythonpath() -> str:
    """The driver's import path, so a local Ray's workers import the same rlxf and plugins."""
    import os
    import sys

    return os.pathsep.join(p for p in sys.path if p)
