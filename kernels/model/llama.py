"""A Llama-architecture decoder on the production kernels.

`PagedLlama` runs a `transformers` `LlamaForCausalLM` with its own modules (embeddings,
RMSNorms, the q/k/v/o projections, the MLPs, the LM head: the same weights, called, not
copied) and replaces only what attention needs: rotary embedding through `apply_rotary_emb`
with positions, K/V stored in a `PagedKVCache`, and attention on that cache (ragged paged
prefill and paged decode, each through one plan per step, `PrefillPlan` / `DecodePlan`, run by
every layer). Both sides therefore compute the same function, which is what the tests check
against transformers' own forward.

Tokens travel packed, `[tokens, hidden]`, never padded: a prefill call is the prompts of a
batch back to back (`cu_seqlens_q`), a decode call one token per row of the cache.
"""

from __future__ import annotations

import torch

from ..extension.backend.fp8 import Fp8Linear
from ..extension.backend.plan import DecodePlan, PrefillPlan
from ..extension.backend.rotary import apply_rotary_emb

# The benchmark model: a Llama-3-style shape (GQA 4:1, head_dim 128) at 8 layers.
BENCH_SHAPE = dict(num_hidden_layers=8, hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, vocab_size=32000, max_position_embeddings=4096)
# The CPU tests' and notebook's model: every mechanism, in milliseconds.
TINY_SHAPE = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=256)
# RoPE variants whose tables depend on the sequence length seen so far (transformers updates
# them during the forward); the tables here are computed once.
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")


def llama_config(**shape):
    """A `LlamaConfig` (BENCH_SHAPE unless overridden) with no special tokens, so that
    transformers' `generate` never stops early or masks a token: greedy decoding of a fixed
    number of tokens on both sides."""
    from transformers import LlamaConfig

    return LlamaConfig(**{**BENCH_SHAPE, **shape}, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def random_llama(config, *, seed: int = 0, dtype=torch.float32, device="cpu", attn_implementation="eager"):
    """A `LlamaForCausalLM` with transformers' own random initialisation, seeded (built on the
    CPU in fp32, so the weights do not depend on the device), for inference: eval mode, no
    gradients (an `Fp8Linear` then skips the transposed copies that backward would need)."""
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation,
                                              dtype=torch.float32)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def rotary_tables_of(hf_model, rows: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin float32 `[rows, head_dim / 2]` for positions `0 .. rows - 1`, from the model's
    own rotary module (its frequencies and scaling: default RoPE, llama3, linear, yarn...).
    transformers' tables repeat the half-split (NeoX) angles twice; one half is kept."""
    rotary = hf_model.model.rotary_emb
    if any(kind in str(rotary.rope_type) for kind in LENGTH_DEPENDENT_ROPE):
        raise NotImplementedError(f"rope_type {rotary.rope_type!r}: its tables change with the "
                                  "sequence length")
    device = device if device is not None else rotary.inv_freq.device
    positions = torch.arange(rows, device=rotary.inv_freq.device).unsqueeze(0)
    cos, sin = rotary(torch.empty(0, dtype=torch.float32, device=rotary.inv_freq.device), positions)
    half = cos.shape[-1] // 2
    if not (torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:])):
        raise ValueError("the model's rotary tables are not in the half-split layout")
    return cos[0, :, :half].float().to(device).contiguous(), sin[0, :, :half].float().to(device).contiguous()


def convert_linears_to_fp8(hf_model) -> int:
    """Swap every `nn.Linear` of the decoder layers for an `Fp8Linear` holding the same
    parameters (no copy), in place; returns how many. Outside `fp8_autocast` an `Fp8Linear` is
    the same bf16 linear, so the transformers model computes what it did; inside, its GEMMs run
    in FP8. The embeddings and the LM head stay in bf16."""
    swapped = 0
    for layer in hf_model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear:
                    fp8 = Fp8Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                    device="meta", dtype=child.weight.dtype)
                    fp8.weight, fp8.bias = child.weight, child.bias
                    setattr(parent, name, fp8)
                    swapped += 1
    return swapped


class PagedLlama:
    """`forward(tokens, positions, cache, slots, ...)` of a transformers `LlamaForCausalLM`
    whose attention, rotary and KV cache are ours (see the module docstring).

    `PagedLlama(hf_model, max_seqlen=...)`: `max_seqlen` sizes the rotary tables; positions at or
    past it are not checked on the device and give NaN logits (PagedGenerator keeps its cache's
    lengths within it)."""

    def __init__(self, hf_model, *, max_seqlen: int):
        from transformers import LlamaForCausalLM

        if not isinstance(hf_model, LlamaForCausalLM):
            raise TypeError(f"expected a transformers LlamaForCausalLM, got {type(hf_model).__name__}")
        config = hf_model.config
        self.hf = hf_model
        self.config = config
        self.num_layers = config.num_hidden_layers
        self.heads_q = config.num_attention_heads
        self.heads_kv = config.num_key_value_heads
        self.head_dim = hf_model.model.layers[0].self_attn.head_dim
        self.scale = hf_model.model.layers[0].self_attn.scaling
        self.vocab_size = config.vocab_size
        self.max_seqlen = max_seqlen
        self.cos, self.sin = rotary_tables_of(hf_model, max_seqlen)

    @property
    def device(self) -> torch.device:
        return self.hf.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.lm_head.weight.dtype

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache, slots: torch.Tensor, *,
                cu_seqlens_q: torch.Tensor | None = None, batch: int | None = None,
                logits_rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits `[rows, vocab]` of packed `tokens [T]` at `positions [T]`, their K/V stored at
        cache `slots [T]` (int64) before attending.

        Prefill: `cu_seqlens_q [B + 1]` int32 gives the sequences' token ranges (rows `0 .. B-1`
        of the cache, already grown to their lengths). Decode: `cu_seqlens_q=None` and one token
        per row `0 .. batch - 1` (`batch` required). `logits_rows` picks the tokens whose logits
        are computed (default: all).
        """
        if cu_seqlens_q is None and batch is None:
            raise ValueError("forward: a decode step (cu_seqlens_q=None) needs batch=, the rows it steps")
        model = self.hf.model
        total = tokens.shape[0]
        rows = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q is not None else batch
        page_table, seqlens = cache.page_table[:rows], cache.seqlens[:rows]
        hidden = model.embed_tokens(tokens)
        # One plan for the step (validation, backend; decode: splits and workspace), run per layer.
        # An FP8 cache: the plan takes its factors and the model's dtype for the queries.
        k_scale, v_scale = cache.layer_scales(0)
        factors = dict(k_scale=k_scale, v_scale=v_scale, q_dtype=self.dtype)
        if cu_seqlens_q is None:
            plan = DecodePlan(*cache.layer(0), page_table, seqlens, heads_q=self.heads_q, causal=True,
                              scale=self.scale, **factors)
        else:
            plan = PrefillPlan(*cache.layer(0), page_table, seqlens, cu_seqlens_q, heads_q=self.heads_q,
                               total_q=total, causal=True, scale=self.scale, **factors)
        for index, layer in enumerate(model.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(total, self.heads_q, self.head_dim)
            k = attn.k_proj(x).view(total, self.heads_kv, self.head_dim)
            v = attn.v_proj(x).view(total, self.heads_kv, self.head_dim)
            q, k = apply_rotary_emb(q, k, self.cos, self.sin, positions, inplace=True)
            cache.write(index, slots, k, v)
            k_cache, v_cache = cache.layer(index)
            k_scale, v_scale = cache.layer_scales(index)
            # decode: [B, 1, Hq, D], the paged decode kernel; prefill: packed ragged queries
            o = plan.run(q.unsqueeze(1) if cu_seqlens_q is None else q, k_cache=k_cache, v_cache=v_cache,
                         k_scale=k_scale, v_scale=v_scale)
            hidden = hidden + attn.o_proj(o.reshape(total, self.heads_q * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        if logits_rows is not None:
            hidden = hidden[logits_rows]
        return self.hf.lm_head(model.norm(hidden))
