"""Models: load/save HF causal LMs (+ LoRA, + value head), built-in tiny models, log-probs.

Importing this package is cheap; transformers and PEFT are imported by the functions that
need them.
"""

from rlxf.models.factory import build_model, init_model
from rlxf.models.loading import (
    ModelLoadError,
    apply_lora,
    count_parameters,
    load_from_config,
    load_model,
    load_tokenizer,
    merged_state_dict,
    resolve_device,
    resolve_dtype,
    save_model,
    unwrap_model,
)
from rlxf.models.logprobs import LogprobOutput, response_mask, sequence_logprobs
from rlxf.models.presets import PRESETS, Preset, get_preset
from rlxf.models.value_model import ValueModel, sequence_scores, sequence_values

__all__ = [
    "PRESETS", "LogprobOutput", "ModelLoadError", "Preset", "ValueModel", "apply_lora", "build_model",
    "count_parameters", "get_preset", "init_model", "load_from_config", "load_model", "load_tokenizer",
    "merged_state_dict", "resolve_device", "resolve_dtype", "response_mask", "save_model",
    "sequence_logprobs", "sequence_scores", "sequence_values", "unwrap_model",
]
