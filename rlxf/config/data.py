"""Where prompts (and SFT / preference examples) come from and how they become token ids."""

from __future__ import annotations

import unicodedata
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlxf.config.base import Section
from rlxf.config.reward import VerifierConfig, expand_custom_shorthand


class FieldMap(Section):
    """Which record keys hold what. A mapped key missing from a record is an error that names it."""

    prompt: str | None = Field("prompt", description="Key of the prompt: text (one user turn) or a chat messages list.")
    messages: str | None = Field(
        None,
        description="Key of a chat `messages` list ([{role, content}, ...]), used instead of `prompt` "
        "when set. For SFT a final assistant message is the response.",
    )
    ground_truth: str | None = Field(
        "answer",
        description="Key of the reference answer / tests passed to verifiers; null for data without one.",
    )
    response: str | None = Field("response", description="SFT: key of the target response text.")
    chosen: str = Field(
        "chosen", description="Preference data: key of the preferred response (text or messages list)."
    )
    rejected: str = Field(
        "rejected", description="Preference data: key of the dispreferred response (text or messages list)."
    )
    metadata: list[str] | None = Field(
        None,
        description="Keys copied into each prompt's metadata for verifiers and environments; null = "
        "every key not mapped above.",
    )


class SourceFields(Section):
    """Where one source's prompts come from: a procedural task, files, or a Hugging Face dataset.

    ``data`` itself is one source; each entry of ``data.sources`` (a mixture) and ``data.ptx``
    (demonstrations) is another, with the same fields.
    """

    source: Literal["task", "jsonl", "json", "parquet", "csv", "hf"] = Field(
        "task",
        description="`task`: a procedural task (built-in or reasoning-gym); the others read files "
        "or a Hugging Face dataset (a `save_to_disk` directory, a data directory or a hub name).",
    )
    task: str | None = Field(
        None,
        description="Procedural task name: `arithmetic` (built-in) or `reasoning_gym:<dataset>` "
        "(needs `rlxf[tasks]`).",
    )
    task_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the task. Built-in tasks: every option is listed below as "
        "data.task_options[task=NAME].OPTION (from the task's own schema). reasoning_gym: the "
        "dataset's config fields (seed and size come from run.data_seed and train_size / test_size).",
    )
    train_size: int = Field(20000, ge=1, description="Procedural tasks: number of training problems.")
    test_size: int = Field(
        500, ge=1,
        description="Procedural tasks: number of held-out problems (never in the training stream).",
    )
    train_path: str | None = Field(None, description="File / directory / hub name of the training data.")
    test_path: str | None = Field(
        None,
        description="File / directory / hub name of held-out data. For `hf`, default: `train_path` "
        "with `test_split`. Prompts that also occur in it are removed from training (counted).",
    )
    hf_subset: str | None = Field(
        None,
        description="HF datasets: the configuration (subset) of a hub dataset that has several, "
        "passed to `load_dataset` as its name, e.g. `main` for `openai/gsm8k`.",
    )
    train_split: str = Field("train", description="HF datasets: split for training; a slice such as "
                             "`train[:90%]` (with `test_split: train[90%:]`) holds out part of a dataset "
                             "that has one split.")
    test_split: str | None = Field(
        "test", description="HF datasets: split (or slice) for evaluation; null = no held-out split."
    )
    fields: FieldMap = Field(default_factory=FieldMap, description="Record keys for prompt, answer, etc.")

    def _check_source(self, where: str) -> None:
        if self.source == "task" and not self.task:
            raise ValueError(f"{where}.source is 'task' but {where}.task is not set; e.g. {where}.task=arithmetic")
        if self.source != "task" and not self.train_path:
            raise ValueError(f"{where}.source is {self.source!r} but {where}.train_path is not set")
        if self.fields.prompt is None and self.fields.messages is None:
            raise ValueError(f"{where}.fields.prompt and {where}.fields.messages are both null; set one of them")

    @property
    def default_name(self) -> str:
        """A task's name (a reasoning-gym dataset's own name), or the training file's stem."""
        if self.source == "task":
            return str(self.task).rpartition(":")[2]
        from pathlib import Path  # noqa: PLC0415 - only for the stem

        path = Path(str(self.train_path))
        return (path.stem if path.suffix else path.name) or str(self.train_path)


class MixtureSource(SourceFields):
    """One entry of ``data.sources``: a source, its share of the training prompts, its verifiers."""

    name: str | None = Field(
        None,
        description="Name in uids (`<name>:<split>:<i>`), per-source metrics (`eval/<name>/accuracy`) and "
        "logs; default the task's name (a reasoning-gym dataset's own name) or the training file's stem.",
    )
    weight: float = Field(
        1.0, ge=0, allow_inf_nan=False,
        description="Share of the training prompts drawn from this source: weight / sum of the weights. "
        "The prompts drawn so far hold each source's share to within one prompt (with two sources every "
        "batch does too); with data.curriculum, a skipped prompt is replaced from its own source. 0: evaluated only (its held-out "
        "accuracy is reported with every eval; none of its prompts is trained on), e.g. a skill RL on "
        "the other sources might cost.",
    )
    seed: int | None = Field(
        None,
        description="Generator seed of this source's task; default run.data_seed. Held-out prompts stay out "
        "of training by content even where seeds overlap (reasoning-gym seeds item i with seed + i).",
    )
    verifiers: list[VerifierConfig] = Field(
        default_factory=list,
        description="Verifiers for this source's prompts instead of reward.verifiers (same syntax); empty = "
        "reward.verifiers. The accuracy verifier is the first of this list.",
    )

    @field_validator("verifiers", mode="before")
    @classmethod
    def _custom_shorthand(cls, value: Any) -> Any:
        return expand_custom_shorthand(value)

    @model_validator(mode="after")
    def _source_needs(self) -> MixtureSource:
        self._check_source("data.sources[]")
        names = [v.label for v in self.verifiers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"data.sources[{self.label}].verifiers: names {dup} repeat; give each a distinct `name`")
        if ":" in self.label or "/" in self.label:
            raise ValueError(f"data.sources[].name {self.label!r} may not contain ':' or '/' (it starts uids and "
                             f"metric names); set `name`")
        if any(unicodedata.category(c).startswith("C") for c in self.label):
            # an escape or a newline would break the one-line-per-step progress line and CI logs
            raise ValueError(f"data.sources[].name {self.label!r} holds a control character (a newline, tab or "
                             f"escape); set `name` to printable text")
        return self

    @property
    def label(self) -> str:
        return self.name or self.default_name


class PtxConfig(SourceFields):
    """Demonstrations for PPO-ptx (``algorithm.ptx_coef``): prompt + response pairs, read as
    ``rlxf sft`` reads its data (a task gives question and answer)."""

    batch_size: int = Field(16, ge=1, description="Demonstrations in the supervised loss of each optimizer step.")
    test_size: int = Field(1, ge=1, description="Procedural tasks: demonstrations held back (not trained on).")
    seed: int | None = Field(
        None,
        description="Generator seed of the demonstrations' task; default run.data_seed. Demonstrations whose "
        "prompt is a held-out prompt of the run are removed.",
    )

    @model_validator(mode="after")
    def _source_needs(self) -> PtxConfig:
        self._check_source("data.ptx")
        return self


class CurriculumConfig(Section):
    """Online difficulty filtering (as in DAPO / Polaris): a prompt whose last ``window`` groups
    were all solved (every sample correct) or all unsolved (none correct) gives GRPO no signal,
    so it is skipped when drawn (or kept only ``keep_fraction`` of the time)."""

    skip_solved: bool = Field(False, description="Skip prompts whose last `window` groups were all fully solved, with equal rewards.")
    skip_unsolved: bool = Field(False, description="Skip prompts whose last `window` groups had no correct sample, and equal rewards.")
    window: int = Field(
        2, ge=1, description="How many of a prompt's most recent groups must agree before it is skipped."
    )
    keep_fraction: float = Field(
        0.0, ge=0, lt=1,
        description="Fraction of the flagged prompts still trained on (drawn from the seed and a count of the draws, "
        "so resume repeats it): 0 skips them, 0.25 down-weights them to a quarter.",
    )

    @property
    def enabled(self) -> bool:
        return self.skip_solved or self.skip_unsolved


class DataConfig(SourceFields):
    system_prompt: str | None = Field(
        None, description="System message prepended to every prompt that has none."
    )
    apply_chat_template: bool = Field(
        True,
        description="Template prompts with the tokenizer's chat template (or model.chat_template); "
        "false feeds the raw prompt text (base models).",
    )
    max_prompt_len: int = Field(512, ge=1, description="Longest prompt in tokens (after the chat template).")
    max_response_len: int | None = Field(
        None, ge=1,
        description="SFT / preference data: longest target response in tokens (eos included); "
        "null = no limit. Longer ones follow `overlong_prompt` (truncate keeps the first tokens; `rlxf rm` "
        "keeps the last, eos included, where the reward model reads its score, as its verifier does).",
    )
    overlong_prompt: Literal["drop", "truncate", "error"] = Field(
        "drop",
        description="What to do with a prompt over max_prompt_len: drop it (counted in the log), "
        "keep its last max_prompt_len tokens, or stop with an error.",
    )
    shuffle: bool = Field(True, description="Shuffle the training prompts each epoch (seeded by run.data_seed).")

    sources: list[MixtureSource] = Field(
        default_factory=list,
        description="A mixture: several sources, each with a weight (and optionally its own verifiers), "
        "instead of the single source above (leave data.task / data.train_path unset). Held-out prompts "
        "of every source are removed from every source's training prompts by content.",
    )
    ptx: PtxConfig | None = Field(
        None, description="PPO-ptx demonstrations, mixed into the policy loss with algorithm.ptx_coef."
    )
    curriculum: CurriculumConfig = Field(
        default_factory=CurriculumConfig, description="Skip prompts the policy always or never solves."
    )

    @model_validator(mode="after")
    def _source_needs(self) -> DataConfig:
        if not self.sources:
            self._check_source("data")
            return self
        if self.task or self.train_path:
            raise ValueError("data.sources is set, and so is data.task / data.train_path: a mixture's sources "
                             "are its entries; move the single source into data.sources")
        names = [s.label for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"data.sources: names {dup} repeat; give each entry a distinct `name`")
        if not any(s.weight > 0 for s in self.sources):
            raise ValueError("data.sources: every weight is 0 (evaluated only); give a source to train on a weight > 0")
        return self

    @property
    def mixture(self) -> bool:
        return bool(self.sources)

    def ignored_source_fields(self) -> str | None:
        """In a mixture ``data``'s own source fields are replaced for every source: one set to
        anything but its default (``data.fields``, ``data.test_path``, ...) is ignored. What to
        say about it (a warning at train, a note in explain), or None. Not an error: a base
        config's single source may leave them set."""
        stray = [k for k, f in SourceFields.model_fields.items()
                 if getattr(self, k) != f.get_default(call_default_factory=True)]
        if not (self.mixture and stray):
            return None
        return (f"data.{', data.'.join(stray)} set beside data.sources: ignored, since each source of a mixture "
                f"has its own (data.sources[].{stray[0]}); move what a source needs into its entry")
