"""How the runner drives one decoder family's layers: the Llama family and Gemma 3 text.

An `Arch` names each layer's attention kind (full or sliding, from the config's `layer_types`)
and the window, and holds the few steps that differ between families, in the order the model's
own forward runs them: the embedding (Gemma 3's scales by sqrt(hidden)), the rotary tables
(Gemma 3: one per layer kind, local and global theta), q/k before attention (Gemma 3: a per-head
RMSNorm before RoPE), the residuals around attention and MLP (Gemma 3: four norms a layer), the
logits (Gemma's optional tanh softcap). The modules are the transformers model's own.
Leaves out: attention-logit softcapping (Gemma 2), bidirectional attention, vision towers.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

FULL, SLIDING = "full_attention", "sliding_attention"  # transformers' layer_types names

Rope = dict[str, tuple[torch.Tensor, torch.Tensor]]  # layer kind -> (cos, sin), [T, head_dim]


class LlamaArch:
    """Llama, Mistral and Qwen2 layers: pre-norm attention and gated MLP, one rotary table,
    every layer full attention (check_supported refuses their sliding windows)."""

    def __init__(self, model: Any) -> None:
        self.model, self.core = model, model.model
        self.layer_types = [FULL] * model.config.num_hidden_layers
        self.window: int | None = None  # keys a sliding layer's query sees (itself included)

    @property
    def kinds(self) -> list[str]:
        """The layer kinds present, full first."""
        return sorted(set(self.layer_types), key=lambda k: k != FULL)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.core.embed_tokens(ids)

    def rotary(self, x: torch.Tensor, pos: torch.Tensor) -> Rope:
        cos, sin = self.core.rotary_emb(x, pos[None])
        return {FULL: (cos[0], sin[0])}

    def qkv(self, layer: Any, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [T, heads, d], k and v [T, kv_heads, d] of the tokens x [T, hidden]."""
        attn, h = layer.self_attn, layer.input_layernorm(x)
        q, k, v = (proj(h).view(len(x), -1, attn.head_dim)
                   for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        q, k = self._qk_norm(attn, q, k)
        q, k = apply_rotary_pos_emb(q, k, *rope, unsqueeze_dim=1)
        return q, k, v

    def _qk_norm(self, attn: Any, q: torch.Tensor, k: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def after_attention(self, layer: Any, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """The residual stream after the layer: attention output o [T, heads, d], then MLP."""
        x = x + layer.self_attn.o_proj(o.reshape(len(x), -1))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.core.norm(x)).float()


class Gemma3Arch(LlamaArch):
    """Gemma 3 text (Gemma3ForCausalLM): `layer_types` mixes sliding and full layers (five to
    one by default); a sliding layer's query at position p sees keys p - window + 1 .. p."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        config = model.config
        self.layer_types = list(config.layer_types)
        self.window = config.sliding_window if SLIDING in self.layer_types else None
        self.softcap = config.final_logit_softcapping

    def rotary(self, x: torch.Tensor, pos: torch.Tensor) -> Rope:
        out = {}
        for kind in self.kinds:
            cos, sin = self.core.rotary_emb(x, pos[None], kind)
            out[kind] = (cos[0], sin[0])
        return out

    def _qk_norm(self, attn: Any, q: torch.Tensor, k: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        return attn.q_norm(q), attn.k_norm(k)

    def after_attention(self, layer: Any, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        x = x + layer.post_attention_layernorm(layer.self_attn.o_proj(o.reshape(len(x), -1)))
        return x + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(x)))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        out = super().logits(x)
        if self.softcap is not None:
            out = torch.tanh(out / self.softcap) * self.softcap
        return out


ARCHS = {"llama": LlamaArch, "mistral": LlamaArch, "qwen2": LlamaArch, "gemma3_text": Gemma3Arch}


def arch_for(model: Any) -> LlamaArch:
    """The Arch of a loaded transformers *ForCausalLM (engine/model.py checked its type)."""
    kind = model.config.model_type
    if kind not in ARCHS:
        raise ValueError(f"model_type {kind!r} has no Arch (the runner drives "
                         f"{', '.join(ARCHS)})")
    return ARCHS[kind](model)
