"""Output poisoning, coverage and error metrics, and the one check every attention kernel passes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .problem import AttentionProblem

# docs/design.md: bf16 must land at or under 1e-2 relative Frobenius error (expect ~2e-3).
BF16_TOLERANCE = 1e-2
E4M3_TOLERANCE = 5e-2  # see tolerance()
TOLERANCES = {"bf16": BF16_TOLERANCE, "fp16": BF16_TOLERANCE, "e4m3": E4M3_TOLERANCE}
# The LSE's relative bound, beside its absolute 1e-2: FP8 tensor cores sum the products of a
# k32 step with fewer bits than fp32 (DeepSeek-V3's report: about 14), so a score of S = Q K^T,
# and the LSE with it, carries an error relative to the size of its products, not to its own
# value (a sum of large products can cancel to a small score). score_bound() is that size; on
# the H200 the error measured 2e-4 of it at D = 64, 128 and 256 (logits ~1e3, magnitude 20).
LSE_RTOL = {"bf16": 0.0, "fp16": 0.0, "e4m3": 1e-3}


def tolerance(problem: AttentionProblem) -> float:
    """The relative Frobenius error a kernel must stay under on ``problem`` (by its dtype).

    bf16 / fp16: ``BF16_TOLERANCE``. e4m3 (FP8 q, k, v), against the reference on the same,
    dequantized, inputs: P is rounded to e4m3 for the P V GEMM, 3 mantissa bits, a relative
    error of up to 2^-4 per probability; it does not average out, O's relative error is about
    that rounding's RMS (a few 1e-2 on random data: tests/test_fp8_attention.py models the
    kernel's arithmetic on the CPU). ``E4M3_TOLERANCE`` is about twice that."""
    return TOLERANCES[problem.dtype]


def score_bound(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * |q_i| * max_j |k_j|`` per row, [B, Hq, Sq] (BSHD ``q``, ``k``, GQA allowed): by
    Cauchy-Schwarz no score of row i is larger, and it is the size that an accumulation error
    of the products q_id k_jd is relative to (``LSE_RTOL`` for e4m3)."""
    q_norm = torch.linalg.vector_norm(q.double(), dim=-1).transpose(1, 2)      # [B, Hq, Sq]
    k_norm = torch.linalg.vector_norm(k.double(), dim=-1).amax(dim=1)          # [B, Hkv]
    k_norm = k_norm.repeat_interleave(q.shape[2] // k.shape[2], dim=1)          # [B, Hq]
    return (scale * q_norm * k_norm[..., None]).float()


def max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |out - ref| / max |ref|`` in fp64: the worst element, where ``rel_err`` averages
    a few wrong rows away (NaN if out has NaN)."""
    out64, ref64 = out.double(), ref.double()
    worst = (out64 - ref64).abs().max().item()
    scale = ref64.abs().max().item()
    return worst / scale if scale > 0 else worst


def poison(*tensors: torch.Tensor) -> None:
    """NaN-fill outputs before a run, so an element the kernel never writes cannot pass."""
    for t in tensors:
        if t is not None:
            t.fill_(float("nan"))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error ||out - ref|| / ||ref|| in fp64 (NaN if out has NaN)."""
    out64, ref64 = out.double(), ref.double()
    denom = torch.linalg.vector_norm(ref64).item()
    num = torch.linalg.vector_norm(out64 - ref64).item()
    return num / denom if denom > 0 else num


@dataclass
class CheckResult:
    ok: bool
    rel_err: float
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def check_output(out: torch.Tensor, ref: torch.Tensor, tol: float = BF16_TOLERANCE,
                 lse: torch.Tensor | None = None, ref_lse: torch.Tensor | None = None, *,
                 lse_atol: float = 1e-2, lse_rtol: float = 0.0,
                 lse_scale: torch.Tensor | None = None) -> CheckResult:
    """Coverage (no NaN / inf left, i.e. every element written), then the error bound.

    With ``ref_lse`` ([B, Hq, Sq] for a BSHD ``out``): rows that see no key (reference LSE
    -inf) must be exactly zero. With ``lse`` too: the same rows must have LSE -inf (not NaN),
    and the others ``|lse - ref_lse| <= lse_atol + lse_rtol * lse_scale``, where ``lse_scale``
    is ``|ref_lse|`` unless given (``score_bound`` for FP8 inputs).
    """
    if out.shape != ref.shape:
        return CheckResult(False, float("nan"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    bad = (~torch.isfinite(out)).sum().item()
    if bad:
        return CheckResult(False, float("nan"),
                           f"{bad} of {out.numel()} output elements are NaN/inf (unwritten or overflow)")
    err = rel_err(out, ref)
    if not err <= tol:
        return CheckResult(False, err, f"rel_err {err:.2e} > {tol:.0e}")
    if ref_lse is None:
        return CheckResult(True, err)
    finite = torch.isfinite(ref_lse)
    if out.dim() == 4 and ref_lse.shape == (out.shape[0], out.shape[2], out.shape[1]):
        unseen = ~finite.transpose(1, 2)                        # [B, Sq, Hq]
        if unseen.any() and (out[unseen] != 0).any():
            rows = int((out[unseen] != 0).any(-1).sum())
            return CheckResult(False, err, f"{rows} rows that see no key are not exactly zero")
    if lse is None:
        return CheckResult(True, err)
    if lse.shape != ref_lse.shape:
        return CheckResult(False, err, f"lse shape {tuple(lse.shape)} != {tuple(ref_lse.shape)}")
    if torch.isnan(lse).any():
        return CheckResult(False, err, f"{int(torch.isnan(lse).sum())} lse entries are NaN (unwritten?)")
    if not torch.equal(lse[~finite], ref_lse[~finite]):
        return CheckResult(False, err, "lse of rows that see no key is not -inf")
    if not torch.isfinite(lse[finite]).all():
        return CheckResult(False, err, "lse is infinite on rows that see keys")
    if finite.any():
        size = (ref_lse.abs() if lse_scale is None else lse_scale)[finite]
        excess = (lse[finite] - ref_lse[finite]).abs() - (lse_atol + lse_rtol * size)
        if excess.max().item() > 0:
            worst = (lse[finite] - ref_lse[finite]).abs().max().item()
            of = "|lse|" if lse_scale is None else "the score bound"
            return CheckResult(False, err, f"lse error {worst:.2e} > {lse_atol:g} + {lse_rtol:g} {of}")
    return CheckResult(True, err)


def verify_attention(run: Callable, problem: AttentionProblem, *, seed: int = 0, magnitude: float = 1.0,
                     with_lse: bool = True, repeat: bool = True, tol: float | None = None,
                     lse_atol: float = 1e-2, lse_rtol: float | None = None, device: str = "cuda",
                     outliers: bool = False) -> CheckResult:
    """Hold ``run(q, k, v, out, lse)`` (writing BSHD ``out`` and, if not None, ``lse [B, Hq, Sq]``
    in place) to the fp32 reference on ``problem``, with every tensor in guard regions.

    Checks, in order: coverage (outputs start NaN), the relative error, rows that see no key
    exactly zero with LSE -inf, the LSE error, no write outside any tensor (guards intact), and
    with ``repeat`` a second run that is bit-identical (a moving result is a race). Inputs are
    ``make_inputs(problem, seed, magnitude=magnitude, outliers=outliers)``: magnitude 20 makes
    large logits. ``tol``: default ``tolerance(problem)``; ``lse_rtol``: default by dtype
    (``LSE_RTOL``), of ``|ref_lse|``, or of ``score_bound`` for FP8 inputs. FP8 inputs
    (``Fp8Tensor``) have their e4m3 data in guarded memory, and the reference sees them
    dequantized.
    """
    from .guards import GuardedAllocator
    from .inputs import make_inputs
    from .quantize import Fp8Tensor, storage
    from .reference import reference_attention

    tol = tolerance(problem) if tol is None else tol
    lse_rtol = LSE_RTOL[problem.dtype] if lse_rtol is None else lse_rtol
    guards = GuardedAllocator(device)
    inputs = make_inputs(problem, seed=seed, device=device, magnitude=magnitude, outliers=outliers)

    def guarded(name, t):
        if isinstance(t, Fp8Tensor):
            return Fp8Tensor(guards.copy(t.data, name=name), t.descale)
        return guards.copy(t, name=name)

    q, k, v = (guarded(name, t) for name, t in zip("qkv", inputs))
    ref, ref_lse = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)

    def launch():
        out = guards.empty((problem.batch, problem.seqlen_q, problem.heads_q, problem.head_dim),
                           problem.out_torch_dtype, name="out")
        lse = guards.empty((problem.batch, problem.heads_q, problem.seqlen_q), torch.float32,
                           name="lse") if with_lse else None
        run(q, k, v, out, lse)
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        return out, lse

    def side_effects(when: str) -> CheckResult | None:
        damage = guards.damage()
        if damage:
            return CheckResult(False, result.rel_err, f"{when}: out-of-bounds writes: " + "; ".join(damage))
        changed = [name for name, before, now in zip("qkv", inputs, (q, k, v))
                   if not torch.equal(storage(before), storage(now))]
        if changed:
            return CheckResult(False, result.rel_err, f"{when}: wrote into its inputs: {', '.join(changed)}")
        return None

    out, lse = launch()
    lse_scale = None
    if isinstance(q, Fp8Tensor):
        lse_scale = score_bound(q.dequantize(), k.dequantize(), problem.softmax_scale)
    result = check_output(out.float(), ref, tol, lse=lse, ref_lse=ref_lse, lse_atol=lse_atol,
                          lse_rtol=lse_rtol, lse_scale=lse_scale)
    if not result:
        return result
    failure = side_effects("first run")
    if failure is not None:
        return failure
    if repeat:
        again, again_lse = launch()
        if not torch.equal(out, again) or (with_lse and not torch.equal(lse, again_lse)):
            return CheckResult(False, result.rel_err, "a repeated run is not bit-identical (race?)")
        failure = side_effects("repeated run")
        if failure is not None:
            return failure
    return result
