"""Plan once, run many: paged decode (and ragged prefill) as a serving loop calls them.

A decode step calls attention once per layer with the same batch, page table and lengths,
and the lengths change every step (each sequence grows by a token). ``attention()`` checks the
lengths against the page table on the first call with new ones (a device->host copy that
waits for the GPU) and validates and routes each new signature. A plan does that work where
the caller knows it is due:

    plan = DecodePlan(k_cache, v_cache, page_table, seqlens_k, heads_q=32)   # per step or once
    for layer in layers:
        out = plan.run(q, k_cache=layer.k, v_cache=layer.v)                  # per layer

A step whose lengths arrive as new tensors hands them over with ``plan.update(seqlens_k)``
(O(1) checks), instead of planning anew.

``DecodePlan(...)`` validates the cache, the page table and the lengths' tensor once, picks the
backend as ``attention()`` would (our paged decode or torch's path; FlashAttention-4's is not
planned), and fixes the split count and its workspace for the longest length the plan may see
(``max_seqlen_k``, default: what the page table holds); with ``one_launch=True`` also the
arrival counters that make a split call one launch (the last split of each row tile combines
the others). ``run()`` checks only
that ``q`` (and a layer's cache, if given) has the planned shape, dtype and device, and
launches: it never reads the lengths on the host, so it can be captured in a CUDA graph and
replayed step after step while the caller updates ``seqlens_k`` (and the page table) in place.
The lengths are the caller's contract, as with ``check_seqlens=False``: ``check_lengths()``
checks them against the page table when wanted (one device->host copy). A plan's runs share
its workspace and counters: run it on one stream at a time (a plan per stream otherwise).
"""

from __future__ import annotations

import torch

from ..ops import attention as ops
from .attention import _UNSUPPORTED, _runner, _strict_backend, backend_order, choose_backend, describe_call
from .torch_path import _run_torch
from .validation import E4M3, _scale_number, check_seqlens_in_pages, kv_scales_of, validate_inputs

PLAN_BACKENDS = ("cuda", "torch")  # what a plan can run (FlashAttention-4's paged decode: not yet)


def _check_plan_args(counts, flags, k_cache) -> None:
    """What a plan checks before validate_inputs: (name, value, least) ints, (name, value) bools,
    the cache's rank (the query's shape is derived from it)."""
    for name, value, least in counts:
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            positive = " (positive)" if least else ""
            raise ValueError(f"{name} must be an int >= {least}{positive}, got {value!r}")
    for name, flag in flags:
        if flag is not True and flag is not False:
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    if not isinstance(k_cache, torch.Tensor) or k_cache.dim() != 4:
        raise ValueError("k_cache must be a 4-D tensor [num_pages, page_size, Hkv, D]")


class _PagedPlan:
    """What both plans share: the inputs validated once on a stand-in query of the planned shape
    (no bytes, no data read), the cache, page table and lengths held, and each run's query and
    layer cache checked in O(1)."""

    def _hold(self, q_shape, k_cache, v_cache, page_table, seqlens_k, cu_seqlens_q, causal, scale, q_dtype,
              k_scale, v_scale):
        """Validate and keep the planned inputs; returns the stand-in query (for routing)."""
        self.q_shape = q_shape
        if q_dtype is None:  # the cache's, or bf16 for an e4m3 cache
            q_dtype = torch.bfloat16 if k_cache.dtype == E4M3 else k_cache.dtype
        if not isinstance(q_dtype, torch.dtype):
            raise TypeError(f"q_dtype must be a torch.dtype, got {q_dtype!r}")
        probe = torch.empty(q_shape[-1:], dtype=q_dtype, device=k_cache.device).expand(q_shape)
        validate_inputs(probe, k_cache, v_cache, scale=scale, page_table=page_table, seqlens_k=seqlens_k,
                        cu_seqlens_q=cu_seqlens_q, check_seqlens=False)
        self.kv_scales = kv_scales_of(k_cache, k_scale, v_scale)
        for name, t in (("page_table", page_table), ("seqlens_k", seqlens_k), ("cu_seqlens_q", cu_seqlens_q)):
            if t is not None and t.device != k_cache.device:
                raise ValueError(f"{name} must be on the cache's device {k_cache.device}, got {t.device}")
        self.k_cache, self.v_cache, self.page_table, self.seqlens_k = k_cache, v_cache, page_table, seqlens_k
        self.cu_seqlens_q, self.causal = cu_seqlens_q, causal
        self.scale = None if scale is None else _scale_number(scale)
        self.dtype, self.device = q_dtype, k_cache.device
        return probe

    def _check_run(self, q, k_cache, v_cache, k_scale, v_scale):
        """The planned query's shape, dtype and device, and a layer's cache (and an e4m3 cache's
        factors) of the planned one's (or the planned ones): O(1). Returns the caches and the
        factors (None for a 16-bit cache) to run on."""
        if q.shape != self.q_shape or q.dtype != self.dtype or q.device != self.device:
            raise ValueError(f"q must be {tuple(self.q_shape)} {self.dtype} on {self.device} as planned, "
                             f"got {tuple(q.shape)} {q.dtype} on {q.device}")
        k_cache = self.k_cache if k_cache is None else k_cache
        v_cache = self.v_cache if v_cache is None else v_cache
        if k_cache is not self.k_cache or v_cache is not self.v_cache:
            planned = self.k_cache
            for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
                if t.shape != planned.shape or t.dtype != planned.dtype or t.device != self.device:
                    raise ValueError(f"{name} must be {tuple(planned.shape)} {planned.dtype} on "
                                     f"{self.device} as planned, got {tuple(t.shape)} {t.dtype} "
                                     f"on {t.device}")
        kv_scales = self.kv_scales
        if k_scale is not None or v_scale is not None:
            if kv_scales is None:
                raise ValueError("k_scale and v_scale are the factors of an e4m3 cache; the plan's is "
                                 f"{self.k_cache.dtype}")
            given = (kv_scales[0] if k_scale is None else k_scale,
                     kv_scales[1] if v_scale is None else v_scale)
            for name, t, old in zip(("k_scale", "v_scale"), given, kv_scales):
                if not isinstance(t, torch.Tensor) or t.shape != old.shape or t.dtype != old.dtype \
                        or t.device != old.device or t.stride() != old.stride():
                    got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if isinstance(t, torch.Tensor) \
                        else type(t).__name__
                    raise ValueError(f"{name} must be a contiguous {tuple(old.shape)} {old.dtype} tensor on "
                                     f"{old.device} as planned, got {got}")
            kv_scales = given
        return k_cache, v_cache, kv_scales


class DecodePlan(_PagedPlan):
    """Paged decode (one query token per sequence) planned once; see the module docstring.

    The arguments, in brief:

    - `k_cache`, `v_cache`: [num_pages, page_size, Hkv, D], bf16 or fp16 (fp32: torch only), or
      e4m3 (an FP8 KV cache) with `k_scale`, `v_scale` (as `attention()`'s; a layer's own may
      be passed to `run`).
    - `q_dtype`: the queries' dtype; default the cache's, bf16 for an e4m3 cache.
    - `page_table`, `seqlens_k`: int32 [B, max_pages] and [B] on the cache's device; both may be
      updated in place between runs (a CUDA graph of `run` reads them as they are then).
    - `heads_q`: query heads, a multiple of Hkv.
    - `causal`, `scale`: as `attention()` (one query row sees every key of its sequence either way).
    - `max_seqlen_k`: the longest length any run of this plan will see, which sets the split
      count (default: max_pages * page_size).
    - `one_launch`: a split call in one launch, the last split CTA of each row tile combining
      the others (arrival counters the plan keeps), instead of the split kernel and a combine
      kernel (default).
    """

    def __init__(self, k_cache, v_cache, page_table, seqlens_k, *, heads_q: int, causal: bool = False,
                 scale: float | None = None, max_seqlen_k: int | None = None, one_launch: bool = False,
                 k_scale=None, v_scale=None, q_dtype: torch.dtype | None = None):
        _check_plan_args((("heads_q", heads_q, 1),), (("causal", causal), ("one_launch", one_launch)),
                         k_cache)
        batch, heads_kv, head_dim = page_table.shape[0], k_cache.shape[2], k_cache.shape[3]
        if heads_q % heads_kv:
            raise ValueError(f"heads_q ({heads_q}) must be a multiple of the cache's kv heads ({heads_kv})")
        probe = self._hold((batch, 1, heads_q, head_dim), k_cache, v_cache, page_table, seqlens_k, None,
                           causal, scale, q_dtype, k_scale, v_scale)
        capacity = page_table.shape[1] * k_cache.shape[1]
        if max_seqlen_k is None:
            max_seqlen_k = capacity
        if not isinstance(max_seqlen_k, int) or not 0 <= max_seqlen_k <= capacity:
            raise ValueError(f"max_seqlen_k must be an int in [0, {capacity}] (the page table's "
                             f"capacity), got {max_seqlen_k!r}")
        self.max_seqlen_k = max_seqlen_k
        self.backend = self._choose_backend(probe)
        self.num_splits, self.workspace, self.split_counters = 1, None, None
        if self.backend == "cuda":
            group = heads_q // heads_kv
            self.num_splits = ops.decode_num_splits(batch, heads_kv, 1, group, max(max_seqlen_k, 1), head_dim,
                                                    self.kv_scales is not None)
            size = ops.decode_workspace_size(self.num_splits, batch, heads_q, 1, head_dim)
            if size:
                self.workspace = torch.empty(size, dtype=torch.float32, device=self.device)
            if size and one_launch:  # zeroed once; every run leaves them zero
                self.split_counters = torch.zeros(ops.decode_counter_count(batch, heads_kv, 1, group),
                                                  dtype=torch.int32, device=self.device)

    def _choose_backend(self, probe) -> str:
        """As attention() chooses (use_backend, $KERNELS_ATTENTION_BACKEND, the measured order,
        capability), among the backends a plan runs: our paged decode and the torch path."""
        call = describe_call(probe, self.k_cache, self.v_cache, page_table=self.page_table)
        strict = _strict_backend.get()
        for name in (strict,) if strict is not None else backend_order(call):
            if name in PLAN_BACKENDS and _UNSUPPORTED[name](call) is None:
                return name
        raise RuntimeError(f"DecodePlan runs {' or '.join(PLAN_BACKENDS)}; neither runs this call "
                           + (f"with use_backend({strict!r})" if strict is not None else ""))

    def update(self, seqlens_k=None, page_table=None) -> DecodePlan:
        """This step's lengths (and page table), new tensors of the planned shape, dtype and
        device, for the runs that follow: O(1) checks, no data read, the split count and
        workspace kept (planned for ``max_seqlen_k``). Tensors updated in place need no call.
        A CUDA graph captured from ``run`` keeps reading the tensors it was captured with."""
        given = {name: new for name, new in (("seqlens_k", seqlens_k), ("page_table", page_table))
                 if new is not None}
        for name, new in given.items():  # every check before any change: a refused update changes nothing
            old = getattr(self, name)
            if not isinstance(new, torch.Tensor) or new.shape != old.shape or new.dtype != old.dtype \
                    or new.device != old.device:
                got = f"{tuple(new.shape)} {new.dtype} on {new.device}" if isinstance(new, torch.Tensor) \
                    else type(new).__name__
                raise ValueError(f"{name} must be {tuple(old.shape)} {old.dtype} on {old.device} as "
                                 f"planned, got {got}")
        for name, new in given.items():
            setattr(self, name, new)
        return self

    def check_lengths(self) -> None:
        """The lengths within the page table and within ``max_seqlen_k``: one device->host copy."""
        check_seqlens_in_pages(self.k_cache, self.page_table, self.seqlens_k)
        longest = int(self.seqlens_k.max()) if self.seqlens_k.numel() else 0
        if longest > self.max_seqlen_k:
            raise ValueError(f"seqlens_k holds {longest}, past the plan's max_seqlen_k {self.max_seqlen_k}")

    def run(self, q, *, k_cache=None, v_cache=None, out=None, lse=None, k_scale=None, v_scale=None):
        """Attention of ``q`` [B, 1, Hq, D] over the planned cache (or a layer's ``k_cache`` /
        ``v_cache`` of the planned shape, sharing the page table, and an e4m3 layer's ``k_scale``
        / ``v_scale``); returns out. O(1) checks."""
        k_cache, v_cache, kv_scales = self._check_run(q, k_cache, v_cache, k_scale, v_scale)
        if self.backend == "cuda":
            k_scale, v_scale = kv_scales or (None, None)
            return ops.paged_decode(q, k_cache, v_cache, self.page_table, self.seqlens_k, causal=self.causal,
                                    scale=self.scale, out=out, lse=lse, num_splits=self.num_splits,
                                    workspace=self.workspace, check_seqlens=False,
                                    split_counters=self.split_counters, k_scale=k_scale, v_scale=v_scale)
        return _run_torch(q, k_cache, v_cache, self.causal, self.scale, None, self.page_table, self.seqlens_k,
                          None, out, lse, kv_scales)

    def __repr__(self) -> str:
        batch, _, heads_q, head_dim = self.q_shape
        return (f"DecodePlan(batch={batch}, heads_q={heads_q}, heads_kv={self.k_cache.shape[2]}, "
                f"head_dim={head_dim}, page_size={self.k_cache.shape[1]}, backend={self.backend!r}, "
                f"num_splits={self.num_splits}, max_seqlen_k={self.max_seqlen_k})")


class PrefillPlan(_PagedPlan):
    """Ragged prefill (packed queries) on a paged cache, planned once per step and run per layer.

    ``PrefillPlan(k_cache, v_cache, page_table, seqlens_k, cu_seqlens_q, heads_q=, total_q=)``
    validates the cache, the page table and the offsets' tensors once (no data read: the
    lengths and offsets are the caller's contract, as with ``check_seqlens=False``) and picks the
    backend and its kernel entry point as ``attention()`` would; ``run(q)`` checks that ``q``
    [total_q, Hq, D] (and a layer's cache) has the planned shape, dtype and device, and launches.
    """

    def __init__(self, k_cache, v_cache, page_table, seqlens_k, cu_seqlens_q, *, heads_q: int, total_q: int,
                 causal: bool = True, scale: float | None = None, k_scale=None, v_scale=None,
                 q_dtype: torch.dtype | None = None):
        _check_plan_args((("heads_q", heads_q, 1), ("total_q", total_q, 0)), (("causal", causal),), k_cache)
        probe = self._hold((total_q, heads_q, k_cache.shape[3]), k_cache, v_cache, page_table, seqlens_k,
                           cu_seqlens_q, causal, scale, q_dtype, k_scale, v_scale)
        call = describe_call(probe, k_cache, v_cache, page_table=page_table, cu_seqlens_q=cu_seqlens_q)
        self.backend = choose_backend(call)[0]
        self._run = _runner(self.backend, probe, k_cache, page_table, cu_seqlens_q)

    def run(self, q, *, k_cache=None, v_cache=None, out=None, lse=None, k_scale=None, v_scale=None):
        """Attention of the packed ``q`` [total_q, Hq, D] over the planned cache (or a layer's
        ``k_cache`` / ``v_cache`` of the planned shape, and an e4m3 layer's factors); returns out.
        O(1) checks."""
        k_cache, v_cache, kv_scales = self._check_run(q, k_cache, v_cache, k_scale, v_scale)
        args = (q, k_cache, v_cache, self.causal, self.scale, None, self.page_table, self.seqlens_k,
                self.cu_seqlens_q, out, lse)
        return self._run(*args) if kv_scales is None else self._run(*args, kv_scales=kv_scales)

    def __repr__(self) -> str:
        total_q, heads_q, head_dim = self.q_shape
        return (f"PrefillPlan(batch={self.page_table.shape[0]}, total_q={total_q}, heads_q={heads_q}, "
                f"heads_kv={self.k_cache.shape[2]}, head_dim={head_dim}, backend={self.backend!r})")
