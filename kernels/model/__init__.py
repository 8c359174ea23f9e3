"""A Llama-architecture model served by the production kernels (kernels/extension/).

    kv_cache   PageAllocator, PagedKVCache: pages, page table, lengths
    llama      PagedLlama: a transformers LlamaForCausalLM whose attention, rotary and KV
               cache are ours; llama_config / random_llama (seeded models, no downloads);
               convert_linears_to_fp8
    generate   PagedGenerator: ragged prefill, greedy decode in CUDA graphs per batch bucket

Needs the `model` extra (transformers): pip install -e '.[model]'.
"""

from .generate import PagedGenerator
from .kv_cache import OutOfPages, PageAllocator, PagedKVCache
from .llama import PagedLlama, convert_linears_to_fp8, llama_config, random_llama

__all__ = ["OutOfPages", "PageAllocator", "PagedGenerator", "PagedKVCache", "PagedLlama",
           "convert_linears_to_fp8", "llama_config", "random_llama"]
