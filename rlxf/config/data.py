"""Where prompts come from and how they become token ids."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlxf.config.base import Section


class FieldMap(Section):
    prompt: str | None = Field("prompt", description="Column holding the prompt text.")
    messages: str | None = Field(
        None, description="Column holding a chat `messages` list (used instead of `prompt` when set)."
    )
    ground_truth: str | None = Field(
        "answer", description="Column holding the reference answer / tests passed to verifiers."
    )


class DataConfig(Section):
    source: Literal["task", "jsonl", "json", "parquet", "csv", "hf"] = Field(
        "task",
        description="`task`: a procedural task (built-in or reasoning-gym); the others read files "
        "or a Hugging Face dataset.",
    )
    task: str | None = Field(
        None,
        description="Procedural task name: `arithmetic` (built-in) or `reasoning_gym:<dataset>` "
        "(needs `rlxf[tasks]`).",
    )
    task_options: dict[str, Any] = Field(
        default_factory=dict, description="Options passed to the task generator (e.g. digits, ops)."
    )
    train_size: int = Field(20000, ge=1, description="Procedural tasks: number of training problems.")
    test_size: int = Field(500, ge=1, description="Procedural tasks: number of held-out problems.")
    train_path: str | None = Field(None, description="File / directory / hub name of the training prompts.")
    test_path: str | None = Field(None, description="File / directory / hub name of held-out prompts.")
    train_split: str = Field("train", description="HF datasets: split for training.")
    test_split: str | None = Field("test", description="HF datasets: split for evaluation.")
    fields: FieldMap = Field(default_factory=FieldMap, description="Column names for prompt and answer.")
    system_prompt: str | None = Field(None, description="System message prepended to every prompt.")
    max_prompt_len: int = Field(512, ge=1, description="Longest prompt in tokens (after the chat template).")
    overlong_prompt: Literal["drop", "truncate", "error"] = Field(
        "drop",
        description="What to do with a prompt over max_prompt_len: drop it (counted in the log), "
        "keep its last max_prompt_len tokens, or stop with an error.",
    )
    shuffle: bool = Field(True, description="Shuffle the training prompts each epoch (seeded by run.seed).")

    @model_validator(mode="after")
    def _source_needs(self) -> DataConfig:
        if self.source == "task" and not self.task:
            raise ValueError("data.source is 'task' but data.task is not set; e.g. data.task=arithmetic")
        if self.source != "task" and not self.train_path:
            raise ValueError(f"data.source is {self.source!r} but data.train_path is not set")
        return self
