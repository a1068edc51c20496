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
naming the first differing message, and so is a new assistant message after the first request:
only the model writes those (each counts as a model turn, towards ``max_turns``). So is a message
whose role is neither assistant nor one of ``rlxf.envs.base.ENV_ROLES`` (Gemma's template renders
"model" as a model turn), or whose text holds that of one of the template's turn markers or of eos
(other special tokens' texts stay text: ``rlxf.envs.tokens``).

In training (``sampling`` given), every turn samples with the rollout's parameters, whatever the
program asks for (a program's own temperature would make the recorded log-probs those of
another distribution than the trainer's), and an episode opened with a seed (``open``) samples
turn k with ``derive_seed(seed, k)``, the built-in agent loop's seed, so the two paths give the
same trajectory for the same seeded episode (k counts model turns: a first request's few-shot
assistant messages are history, loss_mask 0). ``max_turns`` and ``max_total_tokens`` end an
episode as they do in the agent loop: a request past them is a 400, ``ended`` says why, and the
episode takes no further request. A request whose messages would leave no room for another model
token is refused before anything of it is recorded, so an episode never grows past
``max_total_tokens``, whatever a program sends.

Tools: a request's ``tools`` (OpenAI function schemas) belong to the episode's first templating
(``Conversation.start(..., tools=)``): given to a chat template that renders them, else written
into the system message as the built-in tool environments write them (logged once; see
``rlxf.envs.tokens``). A later request whose tools differ is a 400 naming what changed. A model
turn holding ``<tool_call>{json}</tool_call>`` blocks (``rlxf.envs.tools``) is also returned as
OpenAI ``tool_calls`` with ``finish_reason: "tool_calls"`` (not with ``tool_choice: "none"``);
``tool_choice`` "auto" and "none" are accepted, a forced call is a 400 (nothing can force one).
The calls' ids are the built-in tool environments' (``rlxf.envs.tools.call_id``), and a tool
message reaches the template with its ``tool_call_id`` and ``name`` (the called tool's when the
program sends only the id, as OpenAI clients do), so a template that renders them gets the same
text on both paths.

What else a request may ask (``rlxf.envs.chat_protocol``): ``stream: true`` is answered with
Server-Sent Events built from the same turn (it is sampled whole first), ``logprobs: true`` with
the recorded log-prob of each sampled token. What would make the recorded turn differ from what
was asked for (``n > 1``, penalties, ``logit_bias``, constrained ``response_format``,
``top_logprobs``, a forced tool call, any unknown field, a message whose content is not text, such
as an image part) is a 400 saying why and what to do.

A turn the engine cannot sample (a conversation past the model's context window: a 400; the
engine raising: a 500) ends its episode in error, as in the agent loop, with the reason in the
reply and in ``failed``; the episode takes no further request.

The turns of concurrent episodes that arrive together are sampled in one engine call
(``_Batcher``); each keeps its own seed, so batching changes nothing that is sampled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from jinja2 import TemplateError
from pydantic import BaseModel

from rlxf.envs.agent import conversation_trajectory, finite_reward
from rlxf.envs.base import ENV_ROLES
from rlxf.envs.chat_protocol import (
    ChatRequest,
    ModelTurn,
    completion_body,
    completion_events,
    refusal,
    tool_calls,
    tools_change,
)
from rlxf.envs.tokens import (
    Conversation,
    TemplateAppendError,
    TokenBoundaryError,
    TokenLimitError,
    text_problem,
)
from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf")


class HistoryMismatch(ValueError):
    """A request's messages do not extend the episode recorded so far."""


class InvalidMessage(ValueError):
    """A request's message the chat template cannot be given as it is (content not text)."""


class EpisodeLimit(ValueError):
    """The episode has used its turns or tokens; no further model turn."""


class EngineFailure(RuntimeError):
    """The engine could not sample the episode's turn; the episode ended in error (``failed``)."""

    def __init__(self, message: str, *, request_error: bool):
        super().__init__(message)
        self.request_error = request_error   # the engine refused this request (e.g. past its context window)


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
        self.failed: dict[str, str] = {}  # episode -> why the engine could not sample its turn
        self._lock = threading.Lock()
        self._batcher = _Batcher(engine)
        self._said_tools_in_system = False

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
            self.failed.pop(episode, None)
            return self.episodes.pop(episode, None)

    def complete(self, episode: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, max_tokens: int | None = None,
                 seed: int | None = None, stop: list[str] | None = None) -> ModelTurn:
        """The model's next turn in ``episode`` after ``messages``; ``tools`` (OpenAI function
        schemas) are the episode's from its first request on."""
        for i, message in enumerate(messages):
            problem = _message_problem(message)
            if problem is not None:
                raise InvalidMessage(f"messages[{i}]: {problem}")
        with self._lock:
            conv = self.episodes.get(episode)
            if conv is None and self.only_opened and episode not in self.seeds:
                raise HistoryMismatch(f"episode {episode!r} is not open: it has ended (or never started)")
            if episode in self.failed:
                raise EpisodeLimit(f"episode {episode!r} has ended in error ({self.failed[episode]}); it takes no "
                                   f"further request")
            if episode in self.ended:
                raise EpisodeLimit(f"episode {episode!r} has ended (env.{self.ended[episode]})")
            if conv is None:
                conv = Conversation.start(self.tokenizer, [_plain(m) for m in messages], tools=tools)
                if len(conv.ids) >= self.max_total_tokens:   # not recorded: nothing of it can train
                    self.ended[episode] = "max_total_tokens"
                    raise EpisodeLimit(f"episode {episode!r}: the first request has {len(conv.ids)} tokens, "
                                       f"the limit is {self.max_total_tokens} (env.max_total_tokens)")
                self._say_where_tools_are(conv)
                self.episodes[episode] = conv
            elif self.max_turns is not None and conv.model_turns >= self.max_turns:
                self.ended[episode] = "max_turns"
                raise EpisodeLimit(f"episode {episode!r} has had its {self.max_turns} turns (env.max_turns)")
            else:
                change = tools_change(conv.tools, tools)
                if change is not None:
                    raise HistoryMismatch(
                        f"the request's tools differ from those of the episode's first request ({change}); "
                        f"the tools are part of the episode's first templating, so they cannot change within "
                        f"an episode: send the same tools every turn (or start a new episode)")
                try:   # room for at least one more model token, or the request is refused unrecorded
                    conv.add_messages(self._new_messages(conv, messages), max_len=self.max_total_tokens - 1)
                except TokenLimitError as e:
                    self.ended[episode] = "max_total_tokens"
                    raise EpisodeLimit(f"episode {episode!r}: the new messages would make it {e.length} tokens "
                                       f"long, the limit is {self.max_total_tokens} (env.max_total_tokens) "
                                       f"with room for another turn") from None
            turn = conv.model_turns
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
        try:
            c = self._batcher.generate(request, sampling)
        except Exception as e:  # noqa: BLE001 - the engine's own failure, said to the program
            raise self._failure(episode, f"engine: {type(e).__name__}: {e}", request_error=False) from e
        if c.finish_reason == "error":
            raise self._failure(episode, f"engine: {c.error}", request_error=True)
        with self._lock:
            text = conv.add_model_turn(list(c.response_ids), list(c.logprobs), c.versions(),
                                       stopped=c.finish_reason == "stop")
            return ModelTurn(index=turn, text=text, finish_reason=c.finish_reason,
                             token_ids=list(c.response_ids),
                             logprobs=[float(x) for x in c.logprobs], prompt_tokens=len(request.prompt_ids))

    def _failure(self, episode: str, reason: str, *, request_error: bool) -> EngineFailure:
        """End ``episode`` in error, as the agent loop ends one whose turn the engine failed: the
        request's messages stay recorded with no model turn after them, so a retry (an OpenAI
        client retries a 500) is refused saying why, not answered from a record it does not extend."""
        with self._lock:
            self.failed[episode] = reason
        return EngineFailure(f"episode {episode!r}: {reason}", request_error=request_error)

    def _say_where_tools_are(self, conv: Conversation) -> None:
        """Once: the chat template ignores ``tools``, so they went into the system message."""
        if conv.tools_in_system and not self._said_tools_in_system:
            self._said_tools_in_system = True
            name = getattr(self.tokenizer, "name_or_path", "")
            log.warning("%s does not render a request's `tools`; rlxf writes them into the "
                        "system message as its built-in tool environments do (rlxf.envs.tools.describe_tools), "
                        "the <tool_call> JSON format included. Set model.chat_template to a template that renders "
                        "`tools` to show them the model's own way.",
                        f"the chat template of {name!r}" if name else "the model's chat template")

    def _new_messages(self, conv: Conversation, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        recorded = conv.messages
        if len(messages) <= len(recorded):
            raise HistoryMismatch(f"the request holds {len(messages)} messages but the episode already has "
                                  f"{len(recorded)}; send the whole conversation plus the new messages")
        called = _called_tools(recorded[conv.prompt_messages:])
        for i, (old, new) in enumerate(zip(recorded, messages)):
            same = new.get("role") == old["role"] and (old["role"] == "assistant" or _plain(new, called) == old)
            if not same:
                raise HistoryMismatch(
                    f"message {i} differs from the episode's record ({_shown(old)} vs "
                    f"{_shown(_plain(new, called))}); an episode's history can only grow (start a new episode "
                    f"with another `user` id)")
        for i in range(len(recorded), len(messages)):
            if messages[i].get("role") == "assistant":   # it would count as a sampled turn (max_turns, seeds, call ids)
                raise HistoryMismatch(
                    f"message {i} is an assistant message this endpoint did not write; after the first request "
                    f"only the model writes an episode's assistant turns (each counts towards env.max_turns): "
                    f"send that text in a user message, or start a new episode with another `user` id")
        return [_plain(m, called) for m in messages[len(recorded):]]

    def set_reward(self, episode: str, reward: float) -> None:
        value = finite_reward(reward)
        if value is None:   # NaN or inf would reach the advantages and the loss unseen
            raise ValueError(f"episode {episode!r}: reward {reward!r:.80} ({type(reward).__name__}); it must be a "
                             f"finite number")
        with self._lock:
            if episode not in self.episodes:
                raise KeyError(f"no episode {episode!r}; episodes: {', '.join(self.episodes) or '(none)'}")
            self.rewards[episode] = value

    def trajectories(self, prompts: dict[str, Prompt] | None = None) -> list[Trajectory]:
        """One trajectory per episode (in the order they started); ``prompts`` attaches each episode's
        data prompt (uid, ground truth) where the caller has one. Each episode is its own group."""
        out = []
        with self._lock:
            for group, (name, conv) in enumerate(self.episodes.items()):
                prompt = (prompts or {}).get(name) or Prompt(uid=name, prompt_ids=[], prompt_text="")
                reward = self.rewards.get(name, 0.0)
                last_model = max((i for i, m in enumerate(conv.loss_mask) if m), default=None)
                error = self.failed.get(name)
                out.append(conversation_trajectory(
                    conv, prompt, group, self.tokenizer, rewards=[reward], reward_at=[last_model], credit="episode",
                    failed=error is not None, episode={"turns": conv.model_turns, "turn_rewards": [reward],
                                                       "end": "error" if error else "terminated", "error": error,
                                                       "infos": []}))
        return out


def _message_problem(message: Any) -> str | None:
    """Why ``message`` cannot reach the chat template as text, or None.

    Its content is a string, null (an assistant turn sent as ``tool_calls``) or a list of text
    parts: a part of another type (an image, audio) is refused rather than dropped, since the
    policy would be trained on a conversation without what the program sent."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return f"a message is {{\"role\": string, \"content\": ...}}, got {json.dumps(message, default=repr)[:80]}"
    if message["role"] not in (*ENV_ROLES, "assistant"):
        return (f"role {message['role']!r} is not one of {', '.join((*ENV_ROLES, 'assistant'))}: a chat template "
                f"may render it as a model turn (Gemma's writes its assistant turns as 'model'), which only the "
                f"model writes; send the text as a user message")
    content = message.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                return (f"content[{j}] is a {kind!r} part; the policy reads text only: send "
                        f"{{\"type\": \"text\", \"text\": ...}} parts or a string")
        content = "".join(part["text"] for part in content)
    elif content is not None and not isinstance(content, str):
        return f"content must be a string or a list of text parts, got {type(content).__name__}"
    problem = text_problem(content or "")
    return None if problem is None else f"its content {problem}"


def _plain(message: dict[str, Any], called: dict[str, str] | None = None) -> dict[str, Any]:
    """An OpenAI message as the chat template sees it: role, text content and, for a tool message,
    the two fields templates read of it, ``tool_call_id`` and ``name`` (``rlxf.envs.tools``).

    OpenAI clients send a tool message's id but not its name; the name is then the one of the call
    the id answers (``called``: id -> tool name), so the message templates as the built-in tool
    environments' does. An assistant message is its text only (``rlxf.envs.tokens``: why)."""
    content = message.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    plain = {"role": message.get("role"), "content": content or ""}
    if plain["role"] == "tool":
        call, name = message.get("tool_call_id"), message.get("name")
        if isinstance(call, str):
            plain["tool_call_id"] = call
            name = name or (called or {}).get(call)
        if isinstance(name, str):
            plain["name"] = name
    return plain


def _called_tools(messages: list[dict[str, Any]]) -> dict[str, str]:
    """id -> tool name of every call the endpoint returned for the recorded assistant turns
    (``messages`` from the first model turn on: call ids number model turns)."""
    turns = [m["content"] for m in messages if m["role"] == "assistant"]
    return {c["id"]: c["function"]["name"] for k, text in enumerate(turns) for c in tool_calls(text, k)}


def _shown(message: dict[str, Any]) -> str:
    """A message in an error: its role, its tool message fields, the start of its text."""
    fields = "".join(f" {key}={message[key]!r}" for key in ("tool_call_id", "name") if key in message)
    return f"{message['role']}{fields}: {message['content'][:40]!r}"


class RewardRequest(BaseModel):
    episode: str
    reward: float


def create_app(recorder: EpisodeRecorder, model_name: str = "rlxf-policy"):
    """The FastAPI app: POST /v1/chat/completions (episode = ``user``), the same under an episode's
    own base URL /episodes/{episode}/v1, POST /v1/rlxf/reward, GET /v1/models.

    Errors are OpenAI's error objects (``{"error": {"message": ...}}``), so an OpenAI client's
    exception says why; a request that does not validate is a 400 naming the fields."""
    from fastapi import FastAPI, HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI(title="rlxf policy (OpenAI-compatible)")

    @app.exception_handler(HTTPException)
    def http_error(_, e: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(e.detail), e.status_code), status_code=e.status_code)

    @app.exception_handler(RequestValidationError)
    def invalid(_, e: RequestValidationError) -> JSONResponse:
        fields = "; ".join(f"{'.'.join(str(x) for x in err['loc'][1:]) or 'body'}: {err['msg']}" for err in e.errors())
        return JSONResponse(error_body(f"invalid request: {fields}", 400), status_code=400)

    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "rlxf"}]}

    def complete(episode: str, request: ChatRequest) -> Any:
        problem = refusal(request)
        if problem is not None:
            raise HTTPException(status_code=400, detail=problem)
        stop = [request.stop] if isinstance(request.stop, str) else request.stop
        try:
            turn = recorder.complete(
                episode, request.messages, tools=request.tools or None,
                temperature=1.0 if request.temperature is None else request.temperature,
                top_p=1.0 if request.top_p is None else request.top_p,
                max_tokens=request.max_completion_tokens or request.max_tokens, seed=request.seed, stop=stop)
        except (HistoryMismatch, EpisodeLimit, TemplateAppendError, TokenBoundaryError, TemplateError,
                ValueError) as e:
            raise HTTPException(status_code=400, detail=str(e)) from None
        except EngineFailure as e:   # a request the engine refused (past its context window) is the request's
            raise HTTPException(status_code=400 if e.request_error else 500, detail=str(e)) from None
        reply_id = f"chatcmpl-{episode}-{turn.prompt_tokens + len(turn.token_ids)}"
        body = completion_body(request, reply_id, turn, recorder.tokenizer)
        if not request.stream:
            return body
        # the turn is sampled whole before the stream starts, so a refusal above is still a plain 400
        return StreamingResponse(iter(completion_events(body, include_usage=request.include_usage)),
                                 media_type="text/event-stream")

    # sync handlers: FastAPI runs them in worker threads (the recorder serialises engine calls)
    app.get("/v1/models")(models)
    app.get("/episodes/{episode}/v1/models")(models)

    @app.post("/v1/chat/completions")
    def chat(request: ChatRequest) -> Any:
        return complete(request.user, request)

    @app.post("/episodes/{episode}/v1/chat/completions")
    def episode_chat(episode: str, request: ChatRequest) -> Any:
        return complete(episode, request)

    @app.post("/v1/rlxf/reward")
    def reward(request: RewardRequest) -> dict[str, Any]:
        try:
            recorder.set_reward(request.episode, request.reward)
        except KeyError as e:
            raise HTTPException(status_code=404, detail=str(e.args[0])) from None
        except ValueError as e:
            raise HTTPException(status_code=400, detail=str(e)) from None
        return {"ok": True}

    return app


def error_body(message: str, status: int) -> dict[str, Any]:
    """OpenAI's error object: what an OpenAI client puts in its exception's message."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


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
