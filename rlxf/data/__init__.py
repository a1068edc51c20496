"""Data: prompt / SFT / preference datasets, chat templating, procedural tasks, prompt order.

    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data)   # PromptData(train, test, report)
    sampler = build_sampler(data.train, data.weights, seed=cfg.seeds.data, shuffle=cfg.data.shuffle)
"""

from rlxf.data.errors import DataError
from rlxf.data.preference import PreferenceData, PreferenceExample, build_preference_data
from rlxf.data.prompts import PromptData, build_prompt_data
from rlxf.data.readers import read_records
from rlxf.data.sampler import MixtureSampler, PromptSampler, Sampler, build_sampler
from rlxf.data.sft import SFTData, SFTExample, build_sft_data
from rlxf.data.tasks import Task, TaskItem, get_task, register_task, task_names
from rlxf.data.templates import encode_prompt, encode_prompts, encode_response, render_prompt

__all__ = [
    "DataError", "MixtureSampler", "PreferenceData", "PreferenceExample", "PromptData", "PromptSampler",
    "SFTData", "SFTExample", "Sampler", "Task", "TaskItem", "build_preference_data", "build_prompt_data",
    "build_sampler", "build_sft_data", "encode_prompt",
    "encode_prompts", "encode_response", "get_task", "read_records", "register_task", "render_prompt",
    "task_names",
]
