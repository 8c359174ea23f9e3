"""One harness for every kernel: problems, inputs, references, checks, guards, sweeps, timing, ceilings."""

from .checks import (
    BF16_TOLERANCE,
    E4M3_TOLERANCE,
    CheckResult,
    check_output,
    max_error,
    poison,
    rel_err,
    tolerance,
    verify_attention,
)
from .guards import GuardedAllocator
from .inputs import empty_output, make_inputs, paged_kv_cache
from .problem import AttentionProblem, fa3_paper_shapes
from .quantize import Fp8Tensor, dequantize, quantize_e4m3
from .reference import causal_keep_mask, fp8_attention_model, reference_attention, reference_attention_numpy
from .sweep import SweepCase, attention_sweep
from .validate import validate_attention_inputs

__all__ = [
    "AttentionProblem", "BF16_TOLERANCE", "CheckResult", "E4M3_TOLERANCE", "Fp8Tensor", "GuardedAllocator",
    "SweepCase", "attention_sweep", "causal_keep_mask", "check_output", "dequantize", "empty_output",
    "fp8_attention_model",
    "fa3_paper_shapes", "make_inputs",
    "max_error", "paged_kv_cache", "poison", "quantize_e4m3", "reference_attention",
    "reference_attention_numpy", "rel_err", "tolerance", "validate_attention_inputs", "verify_attention",
]
