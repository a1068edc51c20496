"""An OpenAI-compatible ``/v1/chat/completions`` endpoint that records exact token trajectories.

    recorder = EpisodeRecorder(engine, tokenizer, max_total_tokens=1024)
    with serving(recorder) as url:      # uvicorn on loopback: http://127.0.0.1:PORT/v1
        ...                             # an agent program calls POST {url}/chat/completions with the
                                        # whole conversation each turn, `user` = its episode id, or
                                        # uses the episode's own base URL: {root}/episodes/ID/v1
    recorder.set_reward("episode-3", 1.0)          # or POST /v1/rlxf/reward {"episode": ..., "reward": ...}
    trajs = recorder.trajectories()                # one Trajectory per episode, as the agent loop builds them

An episode's own base URL (``episode_url``) lets a program that knows nothing of rlxf (an
OpenAI client given ``base_url``, or the ``OPENAI_BASE_URL`` environment variable) run an
episode unmodified; ``rlxf train`` drives programs that way (``rlxf.envs.programs``).

Token-in, token-out, as in the agent loop (``rlxf.envs.tokens.Conversation``): an episode's ids
grow by appending; the model's turns are the engine's ids (loss_mask 1, log-probs, policy
version), and the messages the program adds since the last turn are appended through the chat
template (loss_mask 0). The program must resend the history it got: earlier user / tool messages
unchanged, and the assistant turns this endpoint wrote (their content is taken from the record,
so an OpenAI client that resends them as ``tool_calls`` works). A history that changed is a 400
naming the first differing message.

In training (``sampling`` given), every turn samples with the rollout's parameters, whatever the
program asks for (a program's own temperature would make the recorded log-probs those of
another distribution than the trainer's), and an episode opened with a seed (``open``) samples
turn k with ``derive_seed(seed, k)``, the built-in agent loop's seed, so the two paths give the
same trajectory for the same seeded episode. ``max_turns`` and ``max_total_tokens`` end an
episode as they do in the agent loop: a request past them is a 400 and ``ended`` says why.

A model turn holding ``<tool_call>{json}</tool_call>`` blocks (``rlxf.envs.tools``) is also
returned as OpenAI ``tool_calls`` with ``finish_reason: "tool_calls"``. Requests are served one
at a time (the engine is not shared between threads), so concurrent episodes are not batched.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlxf.envs.agent import conversation_trajectory
from rlxf.envs.tokens import Conversation, TemplateAppendError, TokenBoundaryError
from rlxf.envs.tools import TOOL_CALL
from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory


class HistoryMismatch(ValueError):
    """A request's messages do not extend the episode recorded so far."""


class EpisodeLimit(ValueError):
    """The episode has used its turns or tokens; no further model turn."""


class _Batcher:
    """Runs the turns that arrive together as one engine call (one per sampling parameters).

    Each episode of an agent program sends its turns on its own, but an engine samples a batch
    far faster than its rows one at a time, as the built-in agent loop does. The engine runs one
    call at a time: whoever gets it first waits ``window_s`` for company, takes every request
    queued by then and answers them all; requests arriving while it runs form the next batch.
    Requests carry their own seeds, so batching does not change what is sampled.
    """

    def __init__(self, engine, window_s: float = 0.005):
        self.engine, self.window_s = engine, window_s
        self._queue: list[tuple[GenerationRequest, SamplingParams, dict[str, Any]]] = []
        self._queue_lock = threading.Lock()
        self._engine_lock = threading.Lock()

    def generate(self, request: GenerationRequest, sampling: SamplingParams):
        slot: dict[str, Any] = {}
        with self._queue_lock:
            self._queue.append((request, sampling, slot))
        with self._engine_lock:
            if not slot:   # not answered by an earlier batch: run one
                time.sleep(self.window_s)
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._run(batch)
        if "error" in slot:
            raise slot["error"]
        return slot["completion"]

    def _run(self, batch: list[tuple[GenerationRequest, SamplingParams, dict[str, Any]]]) -> None:
        by_sampling: dict[SamplingParams, list[tuple[GenerationRequest, dict[str, Any]]]] = {}
        for request, sampling, slot in batch:
            by_sampling.setdefault(sampling, []).append((request, slot))
        for sampling, items in by_sampling.items():
            try:
                results = self.engine.generate([r for r, _ in items], sampling)
                for (_, slot), (completion, *_) in zip(items, results, strict=True):
                    slot["completion"] = completion
            except Exception as e:  # noqa: BLE001 - every waiter of the call hears about it
                for _, slot in items:
                    slot["error"] = e


class EpisodeRecorder:
    """The conversations of the episodes an agent program runs through the endpoint."""

    def __init__(self, engine, tokenizer, *, max_total_tokens: int = 1024, default_max_tokens: int = 128,
                 max_turns: int | None = None, sampling: SamplingParams | None = None, only_opened: bool = False):
        self.engine, self.tokenizer = engine, tokenizer
        self.max_total_tokens, self.default_max_tokens, self.max_turns = max_total_tokens, default_max_tokens, max_turns
        self.sampling = sampling          # training: every turn samples with these (see the module docstring)
        self.only_opened = only_opened    # refuse episodes not opened (a program still running after its timeout)
        self.episodes: dict[str, Conversation] = {}
        self.rewards: dict[str, float] = {}
        self.seeds: dict[str, int] = {}
        self.ended: dict[str, str] = {}   # episode -> the limit that ended it (max_turns | max_total_tokens)
        self._lock = threading.Lock()
        self._batcher = _Batcher(engine)

    def open(self, episode: str, seed: int) -> None:
        """Expect ``episode``, whose turn k samples with ``derive_seed(seed, k)``."""
        with self._lock:
            self.seeds[episode] = seed

    def take(self, episode: str) -> Conversation | None:
        """Remove ``episode`` and return its conversation (None when the program never called)."""
        with self._lock:
            self.seeds.pop(episode, None)
            self.rewards.pop(episode, None)
            self.ended.pop(episode, None)
            return self.episodes.pop(episode, None)

    def complete(self, episode: str, messages: list[dict[str, Any]], *, temperature: float = 1.0,
                 top_p: float = 1.0, max_tokens: int | None = None, seed: int | None = None,
                 stop: list[str] | None = None) -> tuple[str, str, int, int]:
        """The model's next turn in ``episode`` after ``messages``: (text, OpenAI finish_reason,
        the turn's tokens, the episode's tokens)."""
        with self._lock:
            conv = self.episodes.get(episode)
            if conv is None and self.only_opened and episode not in self.seeds:
                raise HistoryMismatch(f"episode {episode!r} is not open: it has ended (or never started)")
            if conv is None:
                conv = Conversation.start(self.tokenizer, [_plain(m) for m in messages])
                self.episodes[episode] = conv
            elif self.max_turns is not None and len(conv.turn_ends) >= self.max_turns:
                self.ended[episode] = "max_turns"
                raise EpisodeLimit(f"episode {episode!r} has had its {self.max_turns} turns (env.max_turns)")
            else:
                conv.add_messages(self._new_messages(conv, messages))
            turn = sum(1 for m in conv.messages if m["role"] == "assistant")
            if self.sampling is not None:
                cap = min(max_tokens or self.sampling.max_new_tokens, self.sampling.max_new_tokens)
                base = self.sampling
            else:
                cap = max_tokens or self.default_max_tokens
                base = SamplingParams(temperature=temperature, top_p=top_p, stop_strings=tuple(stop or ()))
            budget = min(cap, self.max_total_tokens - len(conv.ids))
            if budget < 1:
                self.ended[episode] = "max_total_tokens"
                raise EpisodeLimit(f"episode {episode!r} has {len(conv.ids)} tokens, the limit is "
                                   f"{self.max_total_tokens}: no room for another turn")
            if episode in self.seeds:
                seed = derive_seed(self.seeds[episode], turn)
            request = GenerationRequest(list(conv.ids), seed=seed)
            sampling = replace(base, n=1, max_new_tokens=budget)
        # outside the lock: the turns of other episodes sent meanwhile join this engine call
        c = self._batcher.generate(request, sampling)
        if c.finish_reason == "error":
            raise RuntimeError(f"engine: {c.error}")
        with self._lock:
            text = conv.add_model_turn(list(c.response_ids), list(c.logprobs), c.policy_version,
                                       stopped=c.finish_reason == "stop")
            return text, "length" if c.finish_reason == "length" else "stop", len(c.response_ids), len(conv.ids)

    def _new_messages(self, conv: Conversation, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        recorded = conv.messages
        if len(messages) <= len(recorded):
            raise HistoryMismatch(f"the request holds {len(messages)} messages but the episode already has "
                                  f"{len(recorded)}; send the whole conversation plus the new messages")
        for i, (old, new) in enumerate(zip(recorded, messages)):
            same = new.get("role") == old["role"] and (
                old["role"] == "assistant" or (new.get("content") or "") == old["content"])
            if not same:
                raise HistoryMismatch(
                    f"message {i} differs from the episode's record ({old['role']}: {old['content'][:40]!r} vs "
                    f"{new.get('role')}: {str(new.get('content'))[:40]!r}); an episode's history can only grow "
                    f"(start a new episode with another `user` id)")
        return [_plain(m) for m in messages[len(recorded):]]

    def set_reward(self, episode: str, reward: float) -> None:
        with self._lock:
            if episode not in self.episodes:
                raise KeyError(f"no episode {episode!r}; episodes: {', '.join(self.episodes) or '(none)'}")
            self.rewards[episode] = float(reward)

    def trajectories(self, prompts: dict[str, Prompt] | None = None) -> list[Trajectory]:
        """One trajectory per episode (in the order they started); ``prompts`` attaches each episode's
        data prompt (uid, ground truth) where the caller has one. Each episode is its own group."""
        out = []
        with self._lock:
            for group, (name, conv) in enumerate(self.episodes.items()):
                prompt = (prompts or {}).get(name) or Prompt(uid=name, prompt_ids=[], prompt_text="")
                reward = self.rewards.get(name, 0.0)
                last_model = max((i for i, m in enumerate(conv.loss_mask) if m), default=None)
                out.append(conversation_trajectory(
                    conv, prompt, group, self.tokenizer, rewards=[reward], reward_at=[last_model], credit="episode",
                    failed=False, episode={"turns": len(conv.turn_ends), "turn_rewards": [reward],
                                           "end": "terminated", "error": None, "infos": []}))
        return out


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as the chat template sees it: role and text content."""
    content = message.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return {"role": message.get("role"), "content": content or ""}


def tool_calls(text: str) -> list[dict[str, Any]]:
    """The ``<tool_call>`` blocks of a turn as OpenAI tool_calls (malformed blocks are left out)."""
    calls = []
    for block in TOOL_CALL.findall(text):
        try:
            call = json.loads(block)
            calls.append({"id": f"call_{len(calls)}", "type": "function",
                          "function": {"name": str(call["name"]), "arguments": json.dumps(call.get("arguments", {}))}})
        except (ValueError, KeyError, TypeError):
            continue
    return calls


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")   # OpenAI clients send more fields than rlxf uses
    model: str = "rlxf-policy"
    messages: list[dict[str, Any]] = Field(..., min_length=1)
    user: str = "default"                       # the episode id
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=1)

class RewardRequest(BaseModel):
    episode: str
    reward: float


def create_app(recorder: EpisodeRecorder, model_name: str = "rlxf-policy"):
    """The FastAPI app: POST /v1/chat/completions (episode = ``user``), the same under an episode's
    own base URL /episodes/{episode}/v1, POST /v1/rlxf/reward, GET /v1/models."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="rlxf policy (OpenAI-compatible)")

    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "rlxf"}]}

    def complete(episode: str, request: ChatRequest) -> dict[str, Any]:
        stop = [request.stop] if isinstance(request.stop, str) else request.stop
        try:
            text, finish, completion_tokens, total_tokens = recorder.complete(
                episode, request.messages, temperature=request.temperature, top_p=request.top_p,
                max_tokens=request.max_completion_tokens or request.max_tokens, seed=request.seed, stop=stop)
        except (HistoryMismatch, EpisodeLimit, TemplateAppendError, TokenBoundaryError, ValueError) as e:
            raise HTTPException(status_code=400, detail=str(e)) from None
        message: dict[str, Any] = {"role": "assistant", "content": text}
        calls = tool_calls(text)
        if calls:
            message["tool_calls"], finish = calls, "tool_calls"
        return {"id": f"chatcmpl-{episode}-{total_tokens}", "object": "chat.completion",
                "created": int(time.time()), "model": request.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": {"prompt_tokens": total_tokens - completion_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": total_tokens}}

    # sync handlers: FastAPI runs them in worker threads (the recorder serialises engine calls)
    app.get("/v1/models")(models)
    app.get("/episodes/{episode}/v1/models")(models)

    @app.post("/v1/chat/completions")
    def chat(request: ChatRequest) -> dict[str, Any]:
        return complete(request.user, request)

    @app.post("/episodes/{episode}/v1/chat/completions")
    def episode_chat(episode: str, request: ChatRequest) -> dict[str, Any]:
        return complete(episode, request)

    @app.post("/v1/rlxf/reward")
    def reward(request: RewardRequest) -> dict[str, Any]:
        try:
            recorder.set_reward(request.episode, request.reward)
        except KeyError as e:
            raise HTTPException(status_code=404, detail=str(e.args[0])) from None
        return {"ok": True}

    return app


class ChatServer:
    """``recorder`` served by uvicorn in a background thread on loopback, until ``close``."""

    def __init__(self, recorder: EpisodeRecorder, *, host: str = "127.0.0.1", port: int = 0,
                 start_timeout_s: float = 30.0):
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(create_app(recorder), host=host, port=port,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="rlxf-chat-server")
        self._thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the chat endpoint did not start on {host}:{port} within {start_timeout_s:g} s")
            time.sleep(0.02)
        bound = self._server.servers[0].sockets[0].getsockname()[1]
        self.root = f"http://{host}:{bound}"
        self.url = f"{self.root}/v1"          # what an OpenAI client takes as base_url (episode = `user`)

    def episode_url(self, episode: str) -> str:
        """The base URL of one episode: an OpenAI client pointed at it needs no `user` field."""
        return f"{self.root}/episodes/{episode}/v1"

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@contextlib.contextmanager
def serving(recorder: EpisodeRecorder, *, host: str = "127.0.0.1", port: int = 0,
            start_timeout_s: float = 30.0) -> Iterator[str]:
    """``ChatServer`` as a context; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    server = ChatServer(recorder, host=host, port=port, start_timeout_s=start_timeout_s)
    try:
        yield server.url
    finally:
        server.close()
