"""An OpenAI-compatible ``/v1/chat/completions`` endpoint that records exact token trajectories.

    recorder = EpisodeRecorder(engine, tokenizer, max_total_tokens=1024)
    app = create_app(recorder)          # serve on loopback (uvicorn), point an agent program at it
    # the program calls POST /v1/chat/completions with the whole conversation each turn, and
    # `user` = its episode id; then reports the episode's reward:
    recorder.set_reward("episode-3", 1.0)          # or POST /v1/rlxf/reward {"episode": ..., "reward": ...}
    trajs = recorder.trajectories()                # one Trajectory per episode, as the agent loop builds them

Token-in, token-out, as in the agent loop (``rlxf.envs.tokens.Conversation``): an episode's ids
grow by appending; the model's turns are the engine's ids (loss_mask 1, log-probs, policy
version), and the messages the program adds since the last turn are appended through the chat
template (loss_mask 0). The program must resend the history it got: earlier user / tool messages
unchanged, and the assistant turns this endpoint wrote (their content is taken from the record,
so an OpenAI client that resends them as ``tool_calls`` works). A history that changed is a 400
naming the first differing message.

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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlxf.envs.agent import conversation_trajectory
from rlxf.envs.tokens import Conversation, TemplateAppendError, TokenBoundaryError
from rlxf.envs.tools import TOOL_CALL
from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.types import Prompt, Trajectory


class HistoryMismatch(ValueError):
    """A request's messages do not extend the episode recorded so far."""


class EpisodeRecorder:
    """The conversations of the episodes an agent program runs through the endpoint."""

    def __init__(self, engine, tokenizer, *, max_total_tokens: int = 1024, default_max_tokens: int = 128):
        self.engine, self.tokenizer = engine, tokenizer
        self.max_total_tokens, self.default_max_tokens = max_total_tokens, default_max_tokens
        self.episodes: dict[str, Conversation] = {}
        self.rewards: dict[str, float] = {}
        self._lock = threading.Lock()

    def complete(self, episode: str, messages: list[dict[str, Any]], *, temperature: float = 1.0,
                 top_p: float = 1.0, max_tokens: int | None = None, seed: int | None = None,
                 stop: list[str] | None = None) -> tuple[str, str, int, int]:
        """The model's next turn in ``episode`` after ``messages``: (text, OpenAI finish_reason,
        the turn's tokens, the episode's tokens)."""
        with self._lock:
            conv = self.episodes.get(episode)
            if conv is None:
                conv = Conversation.start(self.tokenizer, [_plain(m) for m in messages])
                self.episodes[episode] = conv
            else:
                conv.add_messages(self._new_messages(conv, messages))
            budget = min(max_tokens or self.default_max_tokens, self.max_total_tokens - len(conv.ids))
            if budget < 1:
                raise HistoryMismatch(f"episode {episode!r} has {len(conv.ids)} tokens, the limit is "
                                      f"{self.max_total_tokens}: no room for another turn")
            sampling = SamplingParams(n=1, temperature=temperature, top_p=top_p, max_new_tokens=budget,
                                      stop_strings=tuple(stop or ()))
            [[c]] = self.engine.generate([GenerationRequest(conv.ids, seed=seed)], sampling)
            if c.finish_reason == "error":
                raise RuntimeError(f"engine: {c.error}")
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
    """The FastAPI app: POST /v1/chat/completions, POST /v1/rlxf/reward, GET /v1/models."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="rlxf policy (OpenAI-compatible)")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "rlxf"}]}

    @app.post("/v1/chat/completions")
    def chat(request: ChatRequest) -> dict[str, Any]:   # sync: FastAPI runs it in a worker thread
        stop = [request.stop] if isinstance(request.stop, str) else request.stop
        try:
            text, finish, completion_tokens, total_tokens = recorder.complete(
                request.user, request.messages, temperature=request.temperature, top_p=request.top_p,
                max_tokens=request.max_completion_tokens or request.max_tokens, seed=request.seed, stop=stop)
        except (HistoryMismatch, TemplateAppendError, TokenBoundaryError, ValueError) as e:
            raise HTTPException(status_code=400, detail=str(e)) from None
        message: dict[str, Any] = {"role": "assistant", "content": text}
        calls = tool_calls(text)
        if calls:
            message["tool_calls"], finish = calls, "tool_calls"
        return {"id": f"chatcmpl-{request.user}-{total_tokens}", "object": "chat.completion",
                "created": int(time.time()), "model": request.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": {"prompt_tokens": total_tokens - completion_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": total_tokens}}

    @app.post("/v1/rlxf/reward")
    def reward(request: RewardRequest) -> dict[str, Any]:
        try:
            recorder.set_reward(request.episode, request.reward)
        except KeyError as e:
            raise HTTPException(status_code=404, detail=str(e.args[0])) from None
        return {"ok": True}

    return app


@contextlib.contextmanager
def serving(recorder: EpisodeRecorder, *, host: str = "127.0.0.1", port: int = 0,
            start_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``recorder`` with uvicorn in a background thread on loopback; yields the base URL
    (``http://127.0.0.1:PORT/v1``, what an OpenAI client takes as ``base_url``)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(create_app(recorder), host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="rlxf-chat-server")
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the chat endpoint did not start on {host}:{port} within {start_timeout_s:g} s")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
