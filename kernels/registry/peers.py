"""Peers: torch SDPA backends, FlashAttention-4, cuDNN's SDPA through cudnn-frontend's graph API
and FlashInfer's paged-KV wrappers, run on the same inputs as our kernels.

The torch SDPA backends, FA4 and FlashInfer take bf16 / fp16 inputs. ``cudnn-fe`` also takes
the FP8 (e4m3) problems, on the FP8 rungs' inputs (``Fp8Tensor`` q, k, v with a per-tensor
descale each, bf16 out), so that ``python -m tools.compare k12 cudnn-fe --dtype e4m3`` compares
like with like. No other peer takes them: FA4 has no FP8 path on Hopper, and torch's FP8
attention (``_scaled_dot_product_attention_quantized``) runs only on an external
FlashAttention-3 build, not on a backend torch ships.

cudnn-fe and the FlashInfer runners come from the ``peers`` extra (``pip install -e ".[peers]"``);
where a package is missing, ``unsupported`` says which and how to install it.
"""

from __future__ import annotations

import functools
import importlib
import warnings

from ..harness.problem import AttentionProblem
from .production import PAGE_SIZE, as_paged_cache
from .runner import Launch, Runner

PEER_DTYPES = ("bf16", "fp16")
PEERS_EXTRA = 'pip install -e ".[peers]"'


def dtype_reason(name: str, problem: AttentionProblem, dtypes=PEER_DTYPES) -> str | None:
    if problem.dtype not in dtypes:
        return f"{name}: dtype {problem.dtype} unsupported (supported: {list(dtypes)})"
    return None


def package_reason(name: str, module: str, package: str) -> str | None:
    """Why ``module`` cannot be imported here (naming the pip package and the extra), or None."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, or an import that fails for want of a GPU library
        return (f"{name}: {package} not importable ({type(exc).__name__}: {str(exc)[:80]}); "
                f"install it with {PEERS_EXTRA}")
    return None


def cuda_reason(name: str) -> str | None:
    import torch

    if not torch.cuda.is_available():
        return f"{name}: needs a CUDA device"
    return None


def sdpa_runner(name: str, backend_name: str, description: str) -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        import torch

        if not torch.cuda.is_available():
            return f"{name}: needs a CUDA device"
        return dtype_reason(name, problem)

    def prepare(problem: AttentionProblem) -> Launch:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        backend = getattr(SDPBackend, backend_name)
        gqa = problem.heads_q != problem.heads_kv
        # SDPA's is_causal is top-left aligned; the repository's convention is bottom-right.
        mask = None
        if problem.causal and problem.seqlen_q != problem.seqlen_k:
            mask = causal_lower_right(problem.seqlen_q, problem.seqlen_k)
        is_causal = problem.causal and mask is None

        def launch(q, k, v, out):
            # SDPA allocates its output: return it (as BSHD) rather than time a copy into out.
            with sdpa_kernel(backend):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                    is_causal=is_causal, scale=problem.softmax_scale, enable_gqa=gqa)
            return o.transpose(1, 2)

        return launch

    return Runner(name, "peer", description, unsupported, prepare,
                  limits=functools.partial(dtype_reason, name))


def fa4_runner() -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        try:
            import flash_attn.cute.interface  # noqa: F401
        except Exception as exc:  # ImportError, or a CUDA-less import failure
            return f"fa4: flash_attn.cute not importable ({type(exc).__name__})"
        return dtype_reason("fa4", problem)

    def prepare(problem: AttentionProblem) -> Launch:
        from flash_attn.cute.interface import flash_attn_func

        # FA4 passes a host-side helper object through the DSL, which warns on every compile.
        warnings.filterwarnings("ignore", message=".*cannot be converted to a JitArgument")

        def launch(q, k, v, out):
            # flash_attn_func allocates its output: return it rather than time a copy into out.
            result = flash_attn_func(q, k, v, softmax_scale=problem.softmax_scale,
                                     causal=problem.causal)
            return result[0] if isinstance(result, tuple) else result

        return launch

    return Runner("fa4", "peer", "FlashAttention-4 (CuTe DSL), flash_attn.cute", unsupported, prepare,
                  limits=functools.partial(dtype_reason, "fa4"))


# ---- cudnn-fe: cuDNN SDPA through nvidia-cudnn-frontend's Python graph API ----------------------
# The graph and its plan are built once per problem (prepare); the launch binds the tensors and
# executes it. Graph tensors are [b, h, s, d] with arbitrary strides, so the BSHD tensors go in as
# their transposed views: the same memory, no copy.

CUDNN = "cudnn-fe"
CUDNN_PACKAGE = "nvidia-cudnn-frontend"
CUDNN_DTYPES = ("bf16", "fp16", "e4m3")
# Hopper's rows of cuDNN's SDPA support matrix: head_dim up to 256, a multiple of 8 for
# bf16 / fp16 and of 16 for FP8 (the frontend's sdpa_support_surface checks).
CUDNN_MAX_HEAD_DIM = 256
CUDNN_HEAD_DIM_MULTIPLE = {"bf16": 8, "fp16": 8, "e4m3": 16}
# P is quantized to e4m3 for the P V GEMM as P * scale_s: cudnn-frontend 1.32's sdpa_fp8
# docstring has scale_s set from P's bound, 448 for E4M3 without dropout (P <= 1).
CUDNN_FP8_SCALE_S = 448.0
# Operand uids of the graph (the variant pack is keyed by them).
UID_Q, UID_K, UID_V, UID_O, UID_STATS = 1, 2, 3, 4, 5
UID_DESCALE_Q, UID_DESCALE_K, UID_DESCALE_V, UID_DESCALE_S = 6, 7, 8, 9
UID_SCALE_S, UID_SCALE_O, UID_AMAX_O = 10, 11, 12
CUDNN_PLAN_POLICY = "heuristics mode A, then FALLBACK; the first candidate that builds"


def bhsd_dims_strides(shape, stride) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """cuDNN's ``[b, h, s, d]`` dims and strides for a BSHD tensor of ``shape`` ``[b, s, h, d]``
    and ``stride``: the same memory with the sequence and head axes swapped (what
    ``t.transpose(1, 2)`` describes)."""
    b, s, h, d = shape
    sb, ss, sh, sd = stride
    return (b, h, s, d), (sb, sh, ss, sd)


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def cudnn_diagonal(problem: AttentionProblem) -> str | None:
    """The diagonal alignment of the causal mask to ask cuDNN for (with a right bound of 0),
    or None for no mask. The repository's causal mask is bottom-right aligned: where
    ``seqlen_q == seqlen_k`` that is the top-left diagonal too (the alignment every cuDNN
    SDPA engine takes), and a single query row sees every key (no mask at all)."""
    if not problem.causal or problem.seqlen_q == 1:
        return None
    return "TOP_LEFT" if problem.seqlen_q == problem.seqlen_k else "BOTTOM_RIGHT"


def cudnn_limits(problem: AttentionProblem) -> str | None:
    reason = dtype_reason(CUDNN, problem, CUDNN_DTYPES)
    if reason:
        return reason
    multiple = CUDNN_HEAD_DIM_MULTIPLE[problem.dtype]
    if problem.head_dim > CUDNN_MAX_HEAD_DIM or problem.head_dim % multiple:
        return (f"{CUDNN}: head_dim {problem.head_dim} unsupported ({problem.dtype}: a multiple of "
                f"{multiple} up to {CUDNN_MAX_HEAD_DIM} on Hopper)")
    if problem.causal and problem.seqlen_q > problem.seqlen_k:
        return (f"{CUDNN}: a bottom-right causal mask needs seqlen_q <= seqlen_k (cuDNN refuses "
                f"rows that see no key), got {problem.seqlen_q} > {problem.seqlen_k}")
    return None


def cudnn_unsupported(problem: AttentionProblem) -> str | None:
    reason = (cudnn_limits(problem) or package_reason(CUDNN, "cudnn", CUDNN_PACKAGE)
              or cuda_reason(CUDNN))
    if reason:
        return reason
    if problem.dtype == "e4m3" and cudnn_diagonal(problem) == "BOTTOM_RIGHT":
        import torch

        major, minor = torch.cuda.get_device_capability()
        if major < 10:  # sdpa_support_surface: bottom-right FP8 forward is Blackwell's
            return (f"{CUDNN}: cuDNN's FP8 SDPA takes a bottom-right causal mask on Blackwell only "
                    f"(this GPU: sm_{major}{minor}); causal e4m3 needs seqlen_q == seqlen_k here")
    return None


@functools.cache
def _cudnn_handle(device: int):
    """One cuDNN handle per device for every cudnn-fe graph (its stream is set at each launch)."""
    import cudnn

    return cudnn.create_handle()


def _plan_name(graph) -> str:
    """The name of the plan build_plans() settled on (cudnn-frontend 1.32 keeps its index in
    ``_plan_index``; the classic graph executes its first buildable candidate)."""
    try:
        index = getattr(graph, "_plan_index", 0)
        return f"{graph.get_plan_name_at_index(index)} (plan {index} of {graph.get_execution_plan_count()})"
    except Exception as exc:  # a name is for the record only
        return f"unnamed plan ({type(exc).__name__})"


def _build_cudnn_graph(problem: AttentionProblem, handle, with_lse: bool, out_type):
    """The SDPA graph of ``problem`` (``sdpa`` or, for e4m3, ``sdpa_fp8``) with O written as
    ``out_type``, built to an execution plan: ``(graph, workspace bytes, plan name)``."""
    import cudnn

    p = problem
    io = {"bf16": cudnn.data_type.BFLOAT16, "fp16": cudnn.data_type.HALF,
          "e4m3": cudnn.data_type.FP8_E4M3}[p.dtype]
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)

    def bshd(uid, name, seqlen, heads, data_type):
        shape = (p.batch, seqlen, heads, p.head_dim)
        dims, strides = bhsd_dims_strides(shape, contiguous_strides(shape))
        return graph.tensor(uid=uid, name=name, dim=dims, stride=strides, data_type=data_type)

    def scalar(uid, name):
        return graph.tensor(uid=uid, name=name, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1),
                            data_type=cudnn.data_type.FLOAT)

    q = bshd(UID_Q, "q", p.seqlen_q, p.heads_q, io)
    k = bshd(UID_K, "k", p.seqlen_k, p.heads_kv, io)
    v = bshd(UID_V, "v", p.seqlen_k, p.heads_kv, io)
    diagonal = cudnn_diagonal(p)
    alignment = None if diagonal is None else getattr(cudnn.diagonal_alignment, diagonal)
    if p.dtype == "e4m3":
        mask = {} if diagonal is None else {"diagonal_alignment": alignment, "right_bound": 0}
        o, stats, _amax_s, amax_o = graph.sdpa_fp8(
            q=q, k=k, v=v, descale_q=scalar(UID_DESCALE_Q, "descale_q"),
            descale_k=scalar(UID_DESCALE_K, "descale_k"), descale_v=scalar(UID_DESCALE_V, "descale_v"),
            descale_s=scalar(UID_DESCALE_S, "descale_s"), scale_s=scalar(UID_SCALE_S, "scale_s"),
            scale_o=scalar(UID_SCALE_O, "scale_o"), attn_scale=float(p.softmax_scale),
            generate_stats=with_lse, name="sdpa_fp8", **mask)
        # amax_s stays virtual (1.32: declaring it restricts the graph to backend engines).
        amax_o.set_output(True).set_uid(UID_AMAX_O).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)) \
            .set_data_type(cudnn.data_type.FLOAT)
    else:
        mask = {} if diagonal is None else {"diagonal_alignment": alignment, "diagonal_band_right_bound": 0}
        o, stats = graph.sdpa(q=q, k=k, v=v, attn_scale=float(p.softmax_scale),
                              generate_stats=with_lse, name="sdpa", **mask)
    o_shape = (p.batch, p.seqlen_q, p.heads_q, p.head_dim)
    o_dims, o_strides = bhsd_dims_strides(o_shape, contiguous_strides(o_shape))
    o.set_output(True).set_uid(UID_O).set_dim(o_dims).set_stride(o_strides).set_data_type(out_type)
    if with_lse:  # natural-log LSE, [b, h, s, 1] over the project's [B, Hq, Sq]
        stats.set_output(True).set_uid(UID_STATS).set_dim((p.batch, p.heads_q, p.seqlen_q, 1)) \
            .set_stride((p.heads_q * p.seqlen_q, p.seqlen_q, 1, 1)).set_data_type(cudnn.data_type.FLOAT)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return graph, graph.get_workspace_size(), _plan_name(graph)


def cudnn_sdpa(problem: AttentionProblem, with_lse: bool = False) -> Launch:
    """Build ``problem``'s cuDNN SDPA graph and plan once; return ``launch(q, k, v, out, lse=None)``
    that only executes it (``lse``: ``[B, Hq, Sq]`` fp32, written where the graph was built
    ``with_lse``). ``launch.info`` records the plan and the output type; for e4m3,
    ``launch.graph_only`` executes the graph without the conversion of O to bf16."""
    import cudnn
    import torch

    p = problem
    handle = _cudnn_handle(torch.cuda.current_device())
    fp8 = p.dtype == "e4m3"
    info = {"plan_policy": CUDNN_PLAN_POLICY}
    o8 = None
    if not fp8:
        graph, workspace_bytes, plan = _build_cudnn_graph(p, handle, with_lse, getattr(
            cudnn.data_type, {"bf16": "BFLOAT16", "fp16": "HALF"}[p.dtype]))
        info["output"] = p.dtype
    else:
        try:  # bf16 O where cuDNN writes it (Blackwell, cuDNN >= 9.13) ...
            graph, workspace_bytes, plan = _build_cudnn_graph(p, handle, with_lse, cudnn.data_type.BFLOAT16)
            info["output"] = "bf16"
        except cudnn.cudnnGraphNotSupportedError as exc:
            # ... else O in e4m3 (Hopper), scaled by 1 / v_descale so that |O| <= max |v| maps
            # within e4m3's range, and converted to bf16 into out inside the launch.
            graph, workspace_bytes, plan = _build_cudnn_graph(p, handle, with_lse, cudnn.data_type.FP8_E4M3)
            info["output"] = f"e4m3, converted to bf16 in the launch (bf16 O refused: {str(exc)[:160]})"
            o8 = torch.empty(p.batch, p.seqlen_q, p.heads_q, p.head_dim, dtype=torch.float8_e4m3fn,
                             device="cuda")
    info["plan"] = plan
    info["workspace_bytes"] = workspace_bytes
    workspace = torch.empty(max(1, workspace_bytes), dtype=torch.uint8, device="cuda")
    lse_scratch = (torch.empty(p.batch, p.heads_q, p.seqlen_q, dtype=torch.float32, device="cuda")
                   if with_lse else None)
    scalars: dict[float, torch.Tensor] = {}

    def scalar(value: float) -> torch.Tensor:
        # Descales live on the device; one tensor per value, made once (the inputs' descales
        # repeat across the timing's rotation of input sets).
        t = scalars.get(value)
        if t is None:
            t = scalars[value] = torch.full((1, 1, 1, 1), value, dtype=torch.float32, device="cuda")
        return t

    fixed = {}
    if fp8:
        fixed = {UID_DESCALE_S: scalar(1.0 / CUDNN_FP8_SCALE_S), UID_SCALE_S: scalar(CUDNN_FP8_SCALE_S),
                 UID_AMAX_O: torch.empty((1, 1, 1, 1), dtype=torch.float32, device="cuda")}

    def execute(q, k, v, o, lse):
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        if fp8:
            pack = {UID_Q: q.data.transpose(1, 2), UID_K: k.data.transpose(1, 2),
                    UID_V: v.data.transpose(1, 2), UID_O: o.transpose(1, 2),
                    UID_DESCALE_Q: scalar(q.descale), UID_DESCALE_K: scalar(k.descale),
                    UID_DESCALE_V: scalar(v.descale),
                    UID_SCALE_O: scalar(1.0 / v.descale if o8 is not None else 1.0), **fixed}
        else:
            pack = {UID_Q: q.transpose(1, 2), UID_K: k.transpose(1, 2), UID_V: v.transpose(1, 2),
                    UID_O: o.transpose(1, 2)}
        if with_lse:
            pack[UID_STATS] = (lse if lse is not None else lse_scratch).unsqueeze(-1)
        graph.execute(pack, workspace, handle=handle)

    def launch(q, k, v, out, lse=None):
        if o8 is None:
            execute(q, k, v, out, lse)
            return None
        execute(q, k, v, o8, lse)
        out.copy_(o8)
        out.mul_(v.descale)
        return None

    def graph_only(q, k, v, out, lse=None):
        execute(q, k, v, out if o8 is None else o8, lse)

    launch.info = info
    launch.graph_only = graph_only
    return launch


def cudnn_runner() -> Runner:
    description = (f"cuDNN SDPA forward, {CUDNN_PACKAGE} graph API (graph and plan built once per problem; "
                   f"plan: {CUDNN_PLAN_POLICY}); e4m3 through sdpa_fp8, O in bf16 where cuDNN writes it, "
                   f"else in e4m3 converted to bf16 inside the launch (Hopper)")
    return Runner(CUDNN, "peer", description, cudnn_unsupported,
                  functools.partial(cudnn_sdpa, with_lse=False), limits=cudnn_limits)


# ---- FlashInfer paged-KV wrappers ----------------------------------------------------------------
# Contiguous K/V viewed as a paged cache with an identity page table, as the production paged
# runners do (production.PAGE_SIZE, as_paged_cache): the same problems and data as every other runner.
# FlashInfer takes the page table in CSR form (indptr, indices, last_page_len).

FLASHINFER_PACKAGE = "flashinfer-python"
FLASHINFER_HEAD_DIMS = (64, 128, 256)  # the head dims FlashInfer instantiates (fa3 prefill: these)
FLASHINFER_WORKSPACE_BYTES = 128 * 1024 * 1024  # the float workspace size FlashInfer's docs recommend
# At GQA groups of 4 and more the decode wrapper runs on tensor cores (its prefill kernel), which
# FlashInfer's docs give as faster for large groups; below, its CUDA-core decode kernel.
DECODE_TENSOR_CORE_GROUP = 4


def identity_page_csr(batch: int, seqlen_k: int, page_size: int = PAGE_SIZE):
    """FlashInfer's page table (``indptr [B + 1]``, ``indices [B * P]``, ``last_page_len [B]``,
    int32 on the CPU) for contiguous ``k [B, Sk, H, D]`` viewed as ``B * P`` pages of
    ``page_size`` tokens (``as_paged_cache``): sequence ``b`` owns pages ``b * P .. b * P + P - 1``,
    ``P = Sk / page_size``; every page is full."""
    import torch

    if seqlen_k % page_size:
        raise ValueError(f"identity paging needs seqlen_k % {page_size} == 0, got {seqlen_k}")
    pages = seqlen_k // page_size
    indptr = torch.arange(0, (batch + 1) * pages, pages, dtype=torch.int32)
    indices = torch.arange(batch * pages, dtype=torch.int32)
    last_page_len = torch.full((batch,), page_size, dtype=torch.int32)
    return indptr, indices, last_page_len


def flashinfer_limits(name: str, decode: bool, problem: AttentionProblem) -> str | None:
    reason = dtype_reason(name, problem)
    if reason:
        return reason
    if problem.head_dim not in FLASHINFER_HEAD_DIMS:
        return f"{name}: head_dim {problem.head_dim} unsupported (supported: {FLASHINFER_HEAD_DIMS})"
    if problem.seqlen_k % PAGE_SIZE:
        return f"{name}: identity paging needs seqlen_k % {PAGE_SIZE} == 0, got {problem.seqlen_k}"
    if decode and problem.seqlen_q != 1:
        return f"{name}: the decode wrapper takes one query per sequence (seqlen_q == 1), " \
               f"got {problem.seqlen_q}"
    if problem.causal and problem.seqlen_q > problem.seqlen_k:
        return (f"{name}: causal needs seqlen_q <= seqlen_k (FlashInfer's queries are the last "
                f"seqlen_q of seqlen_k tokens), got {problem.seqlen_q} > {problem.seqlen_k}")
    return None


def _flashinfer_pages(problem: AttentionProblem):
    """The float workspace and the identity page table on the device."""
    import torch

    # The decode wrapper's docstring asks for a zeroed float workspace at its first use.
    workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    table = identity_page_csr(problem.batch, problem.seqlen_k)
    return workspace, *(t.to("cuda") for t in table)


def flashinfer_decode(problem: AttentionProblem, cuda_graph: bool = False) -> Launch:
    """FlashInfer's paged decode, planned once. ``cuda_graph``: the wrapper FlashInfer's docs give
    for capture (its page-table buffers fixed at construction); a call of the plain wrapper
    captured in a graph replays onto buffers the wrapper may free or reuse."""
    import flashinfer

    p = problem
    workspace, indptr, indices, last_page_len = _flashinfer_pages(p)
    tensor_cores = p.group_size >= DECODE_TENSOR_CORE_GROUP
    buffers = dict(use_cuda_graph=True, paged_kv_indptr_buffer=indptr.clone(),
                   paged_kv_indices_buffer=indices.clone(),
                   paged_kv_last_page_len_buffer=last_page_len.clone()) if cuda_graph else {}
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores,
                                                            **buffers)
    wrapper.plan(indptr, indices, last_page_len, p.heads_q, p.heads_kv, p.head_dim, PAGE_SIZE,
                 q_data_type=p.torch_dtype, kv_data_type=p.torch_dtype, sm_scale=p.softmax_scale)

    def launch(q, k, v, out):
        wrapper.run(q.view(p.batch, p.heads_q, p.head_dim), (as_paged_cache(k), as_paged_cache(v)),
                    out=out.view(p.batch, p.heads_q, p.head_dim))

    launch.info = {"tensor_cores": tensor_cores,
                   "backend": getattr(wrapper, "resolved_backend", getattr(wrapper, "_backend", "?"))}
    return launch


def flashinfer_prefill(problem: AttentionProblem) -> Launch:
    import flashinfer
    import torch

    p = problem
    workspace, indptr, indices, last_page_len = _flashinfer_pages(p)
    hopper = torch.cuda.get_device_capability()[0] == 9
    backend = "fa3" if hopper and p.head_dim in FLASHINFER_HEAD_DIMS else "auto"
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend)
    qo_indptr = torch.arange(0, (p.batch + 1) * p.seqlen_q, p.seqlen_q, dtype=torch.int32, device="cuda")
    wrapper.plan(qo_indptr, indptr, indices, last_page_len, p.heads_q, p.heads_kv, p.head_dim, PAGE_SIZE,
                 causal=p.causal, sm_scale=p.softmax_scale, q_data_type=p.torch_dtype,
                 kv_data_type=p.torch_dtype)

    def launch(q, k, v, out):
        wrapper.run(q.view(-1, p.heads_q, p.head_dim), (as_paged_cache(k), as_paged_cache(v)),
                    out=out.view(-1, p.heads_q, p.head_dim))

    launch.info = {"backend_asked": backend, "backend": getattr(wrapper, "_backend", "?")}
    return launch


def flashinfer_runner(name: str, decode: bool, description: str) -> Runner:
    limits = functools.partial(flashinfer_limits, name, decode)

    def unsupported(problem: AttentionProblem) -> str | None:
        return limits(problem) or package_reason(name, "flashinfer", FLASHINFER_PACKAGE) or cuda_reason(name)

    return Runner(name, "peer", description, unsupported, flashinfer_decode if decode else flashinfer_prefill,
                  limits=limits)


def peer_runners() -> list[Runner]:
    return [
        sdpa_runner("sdpa-math", "MATH", "torch SDPA, math backend (unfused)"),
        sdpa_runner("sdpa-flash", "FLASH_ATTENTION", "torch SDPA, FlashAttention-2 backend"),
        sdpa_runner("sdpa-cudnn", "CUDNN_ATTENTION", "torch SDPA, cuDNN backend"),
        fa4_runner(),
        cudnn_runner(),
        flashinfer_runner(
            "flashinfer-paged-decode", True,
            f"FlashInfer BatchDecodeWithPagedKVCacheWrapper, K/V as NHD pages of {PAGE_SIZE} (identity "
            f"page table; plan() in prepare, run() timed); tensor cores (its prefill kernel) at GQA group "
            f">= {DECODE_TENSOR_CORE_GROUP}, else its CUDA-core decode kernel; backend auto"),
        flashinfer_runner(
            "flashinfer-paged-prefill", False,
            f"FlashInfer BatchPrefillWithPagedKVCacheWrapper, K/V as NHD pages of {PAGE_SIZE} (identity "
            f"page table; plan() in prepare, run() timed); backend fa3 on Hopper, else auto"),
    ]
