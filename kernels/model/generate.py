"""Greedy generation on `PagedLlama`: one ragged prefill, then decode steps in CUDA graphs.

    gen = PagedGenerator(hf_model, max_batch=64, max_seqlen=2048, page_size=64)
    tokens = gen.generate(prompts, max_new_tokens=32)          # [B, 32], like hf.generate's new tokens

`prefill(prompts)` packs the prompts of a batch back to back (no padding) through the paged
prefill kernel and picks each row's first token; each `step()` appends one token per row
through the paged decode kernel and picks the next. On a GPU a step is one CUDA-graph replay:
graphs are captured per batch-size bucket (1, 2, 4, ... up to `max_batch`) the first time a
bucket is used, over static buffers (tokens, logits, and the cache's page table and lengths,
which the host updates in place before each replay). Rows past the batch inside its bucket
are empty: they write to the null page and attend to no key. A step does not wait for the
device (the lengths travel through pinned buffers reused two steps apart), so the host
prepares step i+1 while the GPU runs step i.

Under `fp8_autocast` the linear layers converted by `convert_linears_to_fp8` run in FP8; a
graph captured inside it is kept apart from the bf16 one (one graph per bucket and recipe).
`DynamicScaling` suits inference: it has no state, while `DelayedScaling`'s amax history also
moves during the warm-up runs that precede a capture.
"""

from __future__ import annotations

import torch

from ..extension.backend.fp8 import get_recipe
from .kv_cache import PagedKVCache
from .llama import PagedLlama


def buckets_up_to(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... below max_batch, then max_batch."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch)


class PagedGenerator:
    """Greedy decoding of a batch of prompts (see the module docstring).

    `num_pages`: the cache's pages (default: every row at `max_seqlen`, plus the null page);
    `cuda_graphs`: decode steps replayed from CUDA graphs (default: on for a model on a CUDA
    device); `kv_dtype`: the cache's (default the model's; `torch.float8_e4m3fn`: an FP8 cache,
    with `kv_scale` its initial factor, `cache.k_scale` / `v_scale` to set per layer and head)."""

    def __init__(self, model, *, max_batch: int = 64, max_seqlen: int = 2048, page_size: int = 64,
                 num_pages: int | None = None, cuda_graphs: bool | None = None,
                 kv_dtype: torch.dtype | None = None, kv_scale: float = 1.0):
        self.model = model if isinstance(model, PagedLlama) else PagedLlama(model, max_seqlen=max_seqlen)
        if self.model.max_seqlen < max_seqlen:
            raise ValueError(f"the model's rotary tables cover {self.model.max_seqlen} positions, "
                             f"max_seqlen is {max_seqlen}")
        device = self.model.device
        self.cache = PagedKVCache(num_layers=self.model.num_layers, heads_kv=self.model.heads_kv,
                                  head_dim=self.model.head_dim, max_batch=max_batch, max_seqlen=max_seqlen,
                                  page_size=page_size, num_pages=num_pages,
                                  dtype=kv_dtype or self.model.dtype, device=device, kv_scale=kv_scale)
        self.max_batch = max_batch
        self.buckets = buckets_up_to(max_batch)
        self.cuda_graphs = device.type == "cuda" if cuda_graphs is None else cuda_graphs
        if self.cuda_graphs and device.type != "cuda":
            raise ValueError("cuda_graphs=True needs the model on a CUDA device")
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=device)  # each row's last token
        self._next = torch.zeros(max_batch, dtype=torch.long, device=device)
        self._logits = torch.zeros(max_batch, self.model.vocab_size, dtype=self.model.dtype, device=device)
        self._rows = torch.arange(max_batch, device=device)
        self._graphs: dict = {}
        self._pool = None
        self.batch = 0  # rows 0 .. batch - 1 hold the sequences being generated

    # ---- prefill ---------------------------------------------------------------------------------

    def prefill(self, prompts, *, all_logits: bool = False) -> torch.Tensor:
        """Start a batch: the cache is emptied, row b receives prompt b. `prompts`: lists of
        token ids, 1-D integer tensors, or a 2-D tensor `[B, L]`. Returns the logits of each
        prompt's last token `[B, vocab]` (`all_logits`: of every token, `[sum(lens), vocab]`,
        prompts back to back); `self.tokens[:B]` holds the greedy first tokens."""
        return self._prefill_packed(*self._pack(prompts), all_logits=all_logits)

    def _prefill_packed(self, tokens: torch.Tensor, lengths: list[int], *, all_logits: bool) -> torch.Tensor:
        cache, device = self.cache, self.model.device
        cache.release_all()
        for row, length in enumerate(lengths):
            cache.grow(row, length)
        cache.commit()
        # Where each packed token goes, on the device: its row, its position in the row, its slot.
        lens = torch.tensor(lengths, device=device)
        starts = torch.cumsum(lens, 0) - lens
        rows = torch.repeat_interleave(torch.arange(len(lengths), device=device), lens)
        positions = (torch.arange(tokens.shape[0], device=device) - starts[rows]).to(torch.int32)
        cu_seqlens = torch.cat([starts, starts[-1:] + lens[-1:]]).to(torch.int32)
        last = cu_seqlens[1:].long() - 1
        logits = self.model.forward(tokens, positions, cache, cache.slots_at(rows, positions),
                                    cu_seqlens_q=cu_seqlens, logits_rows=None if all_logits else last)
        self.batch = len(lengths)
        self.tokens[:self.batch] = (logits[last] if all_logits else logits).argmax(-1)
        return logits

    def _pack(self, prompts) -> tuple[torch.Tensor, list[int]]:
        """-> (every prompt's tokens back to back, int64 on the model's device; the lengths)."""
        if isinstance(prompts, torch.Tensor):
            if prompts.dim() != 2:
                raise ValueError(f"a tensor of prompts must be 2-D [B, L], got shape {tuple(prompts.shape)}")
            prompts = list(prompts)
        if not 1 <= len(prompts) <= self.max_batch:
            raise ValueError(f"need 1 to max_batch = {self.max_batch} prompts, got {len(prompts)}")
        device, parts = self.model.device, []
        for i, prompt in enumerate(prompts):
            try:
                part = torch.as_tensor(prompt, device=device)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise TypeError(f"prompt {i}: expected token ids, got {type(prompt).__name__}") from exc
            if part.dim() == 1 and part.numel() == 0:
                raise ValueError(f"prompt {i} is empty")
            if part.dim() != 1 or part.is_floating_point() or part.is_complex() or part.dtype == torch.bool:
                raise TypeError(f"prompt {i}: expected a sequence of integer token ids, got {part.dtype} "
                                f"of shape {tuple(part.shape)}")
            parts.append(part)
        tokens = torch.cat(parts).long()
        lo, hi = torch.stack([tokens.min(), tokens.max()]).tolist()
        if lo < 0 or hi >= self.model.vocab_size:
            bad = next(i for i, p in enumerate(parts) if p.min() < 0 or p.max() >= self.model.vocab_size)
            raise ValueError(f"prompt {bad}: token ids must be in [0, vocab_size = {self.model.vocab_size})")
        return tokens, [p.numel() for p in parts]

    # ---- decode ---------------------------------------------------------------------------------

    def bucket(self, batch: int) -> int:
        return next(size for size in self.buckets if size >= batch)

    def step(self) -> torch.Tensor:
        """One greedy step for rows `0 .. batch - 1`: append `self.tokens`, then set them to the
        next tokens. Returns the step's logits `[B, vocab]`, a view of a buffer the next step
        overwrites (clone to keep)."""
        if self.batch == 0:
            raise RuntimeError("no batch: call prefill(prompts) first")
        bucket = self.bucket(self.batch)
        self.cache.advance(self.batch)
        self.cache.commit()
        if self.cuda_graphs:
            self._graph(bucket).replay()
        else:
            self._decode(bucket)
        self.tokens[:bucket].copy_(self._next[:bucket])
        return self._logits[:self.batch]

    def _decode(self, bucket: int) -> None:
        """The step body on static buffers only (what a graph captures)."""
        positions = (self.cache.seqlens[:bucket] - 1).clamp_min(0)
        slots = self.cache.slots_at(self._rows[:bucket], positions)
        logits = self.model.forward(self.tokens[:bucket], positions, self.cache, slots, batch=bucket)
        self._logits[:bucket].copy_(logits)
        torch.argmax(self._logits[:bucket], dim=-1, out=self._next[:bucket])

    def _graph(self, bucket: int) -> torch.cuda.CUDAGraph:
        key = (bucket, get_recipe())
        graph = self._graphs.get(key)
        if graph is None:
            # Warm-up outside the capture (lazy initialisations, workspaces). It repeats the
            # current step exactly: same slots, same values, so it changes nothing.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._decode(bucket)
            torch.cuda.current_stream().wait_stream(side)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                self._decode(bucket)
            self._graphs[key] = graph
        return graph

    # ---- both ---------------------------------------------------------------------------------------

    def generate(self, prompts, max_new_tokens: int, *, return_logits: bool = False):
        """Greedy tokens `[B, max_new_tokens]` (prefill's pick, then one per step), and with
        `return_logits` the logits each was picked from, `[B, max_new_tokens, vocab]`."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        packed, lengths = self._pack(prompts)
        longest = max(lengths) + max_new_tokens - 1
        if longest > self.cache.max_seqlen:
            raise ValueError(f"the longest prompt plus {max_new_tokens - 1} decode steps needs {longest} "
                             f"positions; max_seqlen is {self.cache.max_seqlen}")
        logits = [self._prefill_packed(packed, lengths, all_logits=False)]
        tokens = [self.tokens[:self.batch].clone()]
        for _ in range(max_new_tokens - 1):
            step_logits = self.step()
            tokens.append(self.tokens[:self.batch].clone())
            if return_logits:
                logits.append(step_logits.clone())
        tokens = torch.stack(tokens, dim=1)
        return (tokens, torch.stack(logits, dim=1)) if return_logits else tokens
