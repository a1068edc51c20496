"""Where prompts (and SFT / preference examples) come from and how they become token ids."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlxf.config.base import Section


class FieldMap(Section):
    """Which record keys hold what. A mapped key missing from a record is an error that names it."""

    prompt: str | None = Field("prompt", description="Key of the prompt text (one user turn).")
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


class DataConfig(Section):
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
    train_split: str = Field("train", description="HF datasets: split for training.")
    test_split: str | None = Field(
        "test", description="HF datasets: split for evaluation; null = no held-out split."
    )
    fields: FieldMap = Field(default_factory=FieldMap, description="Record keys for prompt, answer, etc.")
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
        "null = no limit. Longer ones follow `overlong_prompt` (truncate keeps the first tokens).",
    )
    overlong_prompt: Literal["drop", "truncate", "error"] = Field(
        "drop",
        description="What to do with a prompt over max_prompt_len: drop it (counted in the log), "
        "keep its last max_prompt_len tokens, or stop with an error.",
    )
    shuffle: bool = Field(True, description="Shuffle the training prompts each epoch (seeded by run.data_seed).")

    @model_validator(mode="after")
    def _source_needs(self) -> DataConfig:
        if self.source == "task" and not self.task:
            raise ValueError("data.source is 'task' but data.task is not set; e.g. data.task=arithmetic")
        if self.source != "task" and not self.train_path:
            raise ValueError(f"data.source is {self.source!r} but data.train_path is not set")
        if self.fields.prompt is None and self.fields.messages is None:
            raise ValueError("data.fields.prompt and data.fields.messages are both null; set one of them")
        return self
