"""Size presets for the built-in Qwen2-architecture models made by ``rlxf init-model``.

All presets share the 4096-token tokenizer of ``rlxf.models.tokenizer`` and tie the input
embedding to the output head (as small Qwen2 models do), so the embedding costs
``vocab x hidden`` parameters once. Grouped-query attention (half as many key/value heads as
query heads) keeps the KV cache of the rollout engine small.

| preset | hidden | layers | heads / kv | mlp   | parameters |
|--------|--------|--------|------------|-------|------------|
| nano   | 64     | 2      | 4 / 2      | 192   | 361,024    |
| tiny   | 256    | 4      | 4 / 2      | 512   | 3,412,224  |
| small  | 512    | 8      | 8 / 4      | 1600  | 28,066,304 |
| base   | 768    | 12     | 12 / 4     | 2816  | 99,911,424 |

(`tests/unit/models/test_presets.py` checks these counts against the built models.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0

    def param_count(self, vocab_size: int) -> int:
        """Parameters of the Qwen2ForCausalLM this preset builds (tied embeddings)."""
        h, head_dim = self.hidden_size, self.hidden_size // self.num_heads
        kv = self.num_kv_heads * head_dim
        attn = (h * h + h) + 2 * (h * kv + kv) + h * h  # q, k, v carry a bias in Qwen2; o does not
        mlp = 3 * h * self.intermediate_size            # gate, up, down
        layer = attn + mlp + 2 * h                      # two RMSNorm weights
        return vocab_size * h + self.num_layers * layer + h  # embedding, layers, final norm


PRESETS: dict[str, Preset] = {
    "nano": Preset(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=192),
    "tiny": Preset(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=512),
    "small": Preset(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4, intermediate_size=1600),
    "base": Preset(hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=4, intermediate_size=2816),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[name]
