"""A small byte-level BPE tokenizer, trained offline in seconds, for the built-in tiny models.

The training text is generated here (arithmetic, short English sentences, code-like lines), so
``rlxf init-model`` needs no network and gives the same tokenizer on every machine. Every preset
shares this one tokenizer, so a nano reference, a tiny policy and a small reward model can be
mixed in one run.

Digits are always split one per token (as in Llama 3 / Qwen2): a model learning arithmetic then
sees every number as the same kind of digit sequence, instead of an arbitrary merge of them.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

# ChatML, as used by Qwen2: the assistant turn ends with <|im_end|>, which is the eos token.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END, PAD]

# No default system message: tiny models have short contexts.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

VOCAB_SIZE = 4096  # BPE tokens + special tokens + reserved tokens; the model's vocab_size
_CORPUS_SEED = 1234  # fixed: the tokenizer does not depend on the model's init seed

_WORDS = """
the a an this that these those some every each all many few more most other another
I you he she it we they me him her us them my your his its our their what which who when where why how
is are was were be been being have has had do does did will would can could should may might must
go goes went make makes made take takes took see sees saw come comes came know knows knew think thinks
get gets got give gives gave find finds found tell tells told ask asks asked work works worked
seem feel try leave call keep let begin show hear play run move live believe hold bring write
sit stand lose pay meet include continue set learn change lead understand watch follow stop create
speak read allow add spend grow open walk win offer remember love consider appear buy wait serve die
send expect build stay fall cut reach kill remain suggest raise pass sell require report decide pull
time year people way day man woman child children world life hand part place case week company system
program question number night point home water room mother father area money story fact month lot
right study book eye job word business issue side kind head house service friend power hour game
line end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result morning reason
research girl guy moment air teacher force education food tree river mountain sun moon star rain
dog cat bird fish horse apple bread milk table chair window garden school village road train ship
good new first last long great little own old big high different small large next early young
important public bad same able red blue green black white happy sad fast slow warm cold hot quiet
and or but if then because so while after before under over into from with about between through
one two three four five six seven eight nine ten hundred thousand zero half twice
plus minus times divided equals sum product difference answer result total value count
""".split()

_NAMES = "Alice Bob Carol Dave Eve Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Trent Victor Wendy".split()

_CODE_WORDS = """
get set is has make build load save read write parse check find update delete create init compute
run start stop open close send receive encode decode split join merge sort filter map reduce
user name value item list dict key index count size length total result data config path file
token batch model layer state step loss grad score reward prompt response text line word node tree
min max sum mean first last next prev left right input output buffer cache queue stack
""".split()


def _arithmetic(rng: random.Random) -> str:
    a, b = rng.randint(0, 10 ** rng.randint(1, 6)), rng.randint(0, 10 ** rng.randint(1, 6))
    op = rng.choice("+-*")
    ans = a + b if op == "+" else a - b if op == "-" else a * b
    form = rng.randrange(5)
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    if form == 0:
        return f"{a}{op}{b}={ans}"
    if form == 1:
        return f"What is {a} {op} {b}? {ans}"
    if form == 2:
        return f"{a} {word} {b} equals {ans}."
    if form == 3:
        c = rng.randint(0, 999)
        return f"{a}{op}{b}+{c}={ans + c}"
    return f"Compute {a} {op} {b}.\nThe answer is {ans}."


def _sentence(rng: random.Random) -> str:
    n = rng.randint(4, 14)
    words = [rng.choice(_WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(_NAMES))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".!?.")


def _identifier(rng: random.Random) -> str:
    parts = [rng.choice(_CODE_WORDS) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        return "_".join(parts)
    return parts[0] + "".join(p.capitalize() for p in parts[1:])


def _code(rng: random.Random) -> str:
    f, x, y = _identifier(rng), _identifier(rng), _identifier(rng)
    n = rng.randint(0, 100)
    kind = rng.randrange(4)
    if kind == 0:
        return f"def {f}({x}, {y}):\n    return {x} + {y} * {n}\n"
    if kind == 1:
        return f"for i in range({n}):\n    {x}[i] = {y}(i)\n"
    if kind == 2:
        return f'{{"{x}": {n}, "{y}": "{rng.choice(_WORDS)}"}}'
    return f"if {x} == {n}:\n    print({f}({y}))\nelse:\n    {x} += 1\n"


def corpus(num_lines: int = 60000) -> list[str]:
    """The deterministic training text: arithmetic, sentences and code, interleaved."""
    rng = random.Random(_CORPUS_SEED)
    makers = (_arithmetic, _sentence, _code)
    return [makers[i % 3](rng) for i in range(num_lines)]


def train_tokenizer(vocab_size: int = VOCAB_SIZE):
    """Train the byte-level BPE and wrap it as a ``PreTrainedTokenizerFast`` with a chat template.

    The vocabulary is exactly ``vocab_size`` ids: special tokens first (ids 0..3), then the 256
    byte tokens and the merges, then ``<|reserved_k|>`` tokens filling any remainder, so every
    id a model can sample decodes to something.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    missing = vocab_size - tok.get_vocab_size()
    if missing > 0:
        tok.add_special_tokens([f"<|reserved_{k}|>" for k in range(missing)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[ENDOFTEXT, IM_START],
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def save_tokenizer(tokenizer, out_dir: str | Path) -> None:
    tokenizer.save_pretrained(str(out_dir))


# Special tokens in some tokenizers that the model writes to call a tool and its tools or agent
# program read: rlxf's <tool_call> tags (Qwen2.5's tokenizer does not flag them special, some
# fine-tunes' do), Llama 3.1's <|python_tag|>, Mistral's [TOOL_CALLS].
TOOL_CALL_TAGS = ("<tool_call>", "</tool_call>")   # rlxf.envs.tools parses the calls between them
TOOL_CALL_MARKERS = (*TOOL_CALL_TAGS, "<|python_tag|>", "[TOOL_CALLS]")


_CONTROL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> (len(tokenizer), its control tokens)


def control_tokens(tokenizer) -> Mapping[int, str]:
    """The tokenizer's control tokens, id -> text: its special tokens (eos, pad, the chat template's
    markers), which are never text of a model turn or of a message, but ``TOOL_CALL_MARKERS``.

    Read once per tokenizer, and again once it has gained tokens or its special ones changed (a
    new eos, a token made special): reading them takes ~0.3 ms for Llama 3's 256 special tokens,
    on every model turn and message."""
    size = (len(tokenizer), tokenizer.eos_token_id, tuple(tokenizer.all_special_tokens))   # ~15 us
    cached = _CONTROL.get(tokenizer)
    if cached is None or cached[0] != size:
        special = dict(zip(tokenizer.all_special_ids, tokenizer.all_special_tokens))
        special |= {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        control = {i: text for i, text in special.items() if text not in TOOL_CALL_MARKERS}
        cached = _CONTROL[tokenizer] = size, MappingProxyType(control)
    return cached[1]


def reply_text(tokenizer, token_ids: list[int], control: Mapping[int, str] | None = None) -> str:
    """The text of a model's response or turn: its ids decoded without the control tokens, as
    ``skip_special_tokens`` decodes them but keeping the tool-call markers (that would drop them
    where they are special, and the calls with them). ``control``: ``control_tokens(tokenizer)``,
    for a caller decoding many responses."""
    control = control_tokens(tokenizer) if control is None else control
    return tokenizer.decode([i for i in token_ids if i not in control], skip_special_tokens=False)
