"""Token-in, token-out conversations: masks cover exactly the model's tokens and the ids equal a
fresh templating of the whole conversation, under two chat templates; non-appendable templates fail clearly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlxf.envs.tokens import Conversation, TemplateAppendError, encode_text, render
from rlxf.models.tokenizer import CHATML_TEMPLATE

# A header-style template (Llama-3-like): role in a header, turns end with <|endoftext|>, no newline after.
HEADER_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}<|im_end|>\n\n{{ m['content'] }}<|endoftext|>{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant<|im_end|>\n\n{% endif %}"
)
# Not append-only: the first line counts the messages, so every append rewrites the start.
COUNTING_TEMPLATE = "{{ messages|length }} turns\n" + CHATML_TEMPLATE
TEMPLATES = {"chatml": (CHATML_TEMPLATE, "<|im_end|>"), "header": (HEADER_TEMPLATE, "<|endoftext|>")}

WORDS = ["the", "cat", "sat", "on", "mat", "12", "7", "+", "=", "higher", "lower", "answer", "is", "(3*4)",
         "guess", ",", "."]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
env_messages = st.lists(st.tuples(st.sampled_from(["user", "tool"]), texts), min_size=1, max_size=2)
turns = st.lists(st.tuples(texts, st.booleans(), env_messages), min_size=1, max_size=4)


@pytest.fixture(scope="module")
def tokenizers(tokenizer_for_tests):
    import copy

    out = {}
    for name, (template, end) in TEMPLATES.items():
        tok = copy.deepcopy(tokenizer_for_tests)
        tok.chat_template = template
        out[name] = (tok, tok.convert_tokens_to_ids(end))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=st.sampled_from(sorted(TEMPLATES)), first=texts, episode=turns)
def test_masks_cover_model_tokens_and_ids_equal_fresh_templating(tokenizers, template, first, episode):
    tok, end_id = tokenizers[template]
    conv = Conversation.start(tok, [{"role": "user", "content": first}])
    model_positions = []                       # response indices the model wrote
    for text, ends_turn, messages in episode:
        ids = encode_text(tok, text) + ([end_id] if ends_turn else [])   # canonical ids, as a model could sample
        start = len(conv.response_ids)
        conv.add_model_turn(ids, [-0.5] * len(ids), version=3)
        model_positions += range(start, start + len(ids))
        conv.add_messages([{"role": r, "content": c} for r, c in messages])
    fresh = encode_text(tok, render(tok, conv.messages, generation_prompt=True))
    assert conv.ids == fresh
    assert [i for i, m in enumerate(conv.loss_mask) if m] == model_positions
    assert len(conv.loss_mask) == len(conv.logprobs) == len(conv.versions) == len(conv.response_ids)
    assert all((lp, v) == (-0.5, 3) for lp, v, m in zip(conv.logprobs, conv.versions, conv.loss_mask) if m)
    assert all((lp, v) == (0.0, -1) for lp, v, m in zip(conv.logprobs, conv.versions, conv.loss_mask) if not m)


def test_model_ids_are_kept_as_sampled(tokenizers):
    """A non-canonical split of the model's text is kept as sampled (never re-tokenized)."""
    tok, end_id = tokenizers["chatml"]
    conv = Conversation.start(tok, [{"role": "user", "content": "say the"}])
    pieces = [tok.convert_tokens_to_ids(t) for t in ("t", "h", "e")] + [end_id]
    conv.add_model_turn(pieces, [-1.0] * 4, version=0)
    conv.add_messages([{"role": "user", "content": "again"}])
    assert conv.response_ids[:4] == pieces
    assert conv.messages[1] == {"role": "assistant", "content": "the"}


def test_template_that_rewrites_earlier_turns_is_a_clear_error(tokenizer_for_tests):
    import copy

    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = COUNTING_TEMPLATE
    conv = Conversation.start(tok, [{"role": "user", "content": "hi"}])
    ids = encode_text(tok, "hello") + [tok.eos_token_id]
    conv.add_model_turn(ids, [0.0] * len(ids), version=0)
    with pytest.raises(TemplateAppendError, match="not append-only.*model.chat_template"):
        conv.add_messages([{"role": "user", "content": "more"}])


def test_turn_ended_by_a_token_the_template_does_not_write(tokenizers):
    """Another eos id (<|im_end|> where the template ends turns with <|endoftext|>) stays as sampled
    with mask 1; the template's whole closing follows it with mask 0 (found by a random nano model)."""
    tok, end_id = tokenizers["header"]
    conv = Conversation.start(tok, [{"role": "user", "content": "hi"}])
    ids = encode_text(tok, "hello") + [tok.convert_tokens_to_ids("<|im_end|>")]
    conv.add_model_turn(ids, [0.0] * len(ids), version=0)
    appended = conv.add_messages([{"role": "user", "content": "more"}])
    assert conv.response_ids[: len(ids)] == ids and appended[0] == end_id
    assert conv.loss_mask == [1] * len(ids) + [0] * len(appended)


def test_special_last_token_of_a_truncated_turn_is_not_a_stop(tokenizers):
    """A turn cut by the length limit whose last token happens to be the end token does not close the turn."""
    tok, end_id = tokenizers["chatml"]
    conv = Conversation.start(tok, [{"role": "user", "content": "hi"}])
    ids = encode_text(tok, "the") + [end_id]
    conv.add_model_turn(ids, [0.0] * len(ids), version=0, stopped=False)
    appended = conv.add_messages([{"role": "user", "content": "more"}])
    assert appended[0] == end_id and conv.loss_mask == [1] * len(ids) + [0] * len(appended)


def test_truncated_turn_is_closed_by_template_tokens_with_mask_zero(tokenizers):
    tok, end_id = tokenizers["chatml"]
    conv = Conversation.start(tok, [{"role": "user", "content": "hi"}])
    ids = encode_text(tok, "the cat")   # the turn hit the length limit: no end token
    conv.add_model_turn(ids, [0.0] * len(ids), version=0)
    appended = conv.add_messages([{"role": "user", "content": "go on"}])
    assert appended[0] == end_id and conv.loss_mask == [1] * len(ids) + [0] * len(appended)
    assert conv.ids == encode_text(tok, render(tok, conv.messages, generation_prompt=True))


# A template that renders `tools` (as Qwen2.5's does, in a system turn of its own before the messages).
TOOLS_TEMPLATE = ("{%- if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t['function'] | tojson }}\n"
                  "{% endfor %}<|im_end|>\n{% endif %}" + CHATML_TEMPLATE)
CALCULATOR = {"type": "function", "function": {"name": "calculator", "description": "Exact arithmetic.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}


@pytest.mark.parametrize("template", ["tools", "chatml"])
def test_tools_are_in_every_templating_of_the_conversation(tokenizer_for_tests, template):
    """A template that renders `tools` gets them; one that ignores them (chatml) gets the built-in tool
    environments' system-message block. Either way the ids stay a fresh templating of the whole episode."""
    import copy

    from rlxf.envs.tools import describe_tools, with_tools_described

    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = TOOLS_TEMPLATE if template == "tools" else CHATML_TEMPLATE
    first = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "12*7="}]
    conv = Conversation.start(tok, first, tools=[CALCULATOR])
    ids = encode_text(tok, '<tool_call>{"name": "calculator"}</tool_call>') + [tok.eos_token_id]
    conv.add_model_turn(ids, [-0.5] * len(ids), version=1)
    conv.add_messages([{"role": "tool", "content": "84"}])
    if template == "tools":
        assert not conv.tools_in_system
        fresh = render(tok, conv.messages, generation_prompt=True, tools=[CALCULATOR])
        assert fresh.startswith('<|im_start|>system\n# Tools\n{"name": "calculator"')
    else:
        assert conv.tools_in_system
        fresh = render(tok, with_tools_described(conv.messages, [CALCULATOR]), generation_prompt=True)
        assert fresh.startswith("<|im_start|>system\nBe exact.\n" + describe_tools([CALCULATOR]) + "<|im_end|>")
    assert conv.ids == encode_text(tok, fresh)
    assert conv.messages[0] == first[0]        # the record keeps the program's messages; the tools beside them


def test_tool_messages_keep_their_name_and_id_and_model_turns_their_sampled_text(tool_template_tokenizer):
    """A tool message's name and call id reach a template that renders them; the model's turn is
    recorded as its text, since given as OpenAI tool_calls the template writes the call in its own
    layout instead of the sampled one."""
    from rlxf.envs.chat_protocol import tool_calls

    tok = tool_template_tokenizer
    conv = Conversation.start(tok, [{"role": "user", "content": "12*7="}])
    sampled = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
    ids = encode_text(tok, sampled) + [tok.eos_token_id]
    conv.add_model_turn(ids, [-0.5] * len(ids), version=1)
    tool = {"role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "84"}
    appended = conv.add_messages([tool])
    assert '{"name": "calculator", "id": "call_0_0", "content": "84"}' in tok.decode(appended)
    assert conv.response_ids[:len(ids)] == ids
    assert conv.ids == encode_text(tok, render(tok, conv.messages, generation_prompt=True))
    assert conv.messages[1] == {"role": "assistant", "content": sampled}
    as_calls = {"role": "assistant", "content": "", "tool_calls": tool_calls(sampled, 0)}
    assert sampled not in render(tok, [conv.messages[0], as_calls], generation_prompt=False)
