"""Output poisoning, coverage and error metrics."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# DESIGN.md: bf16 must land at or under 1e-2 relative Frobenius error (expect ~2e-3).
BF16_TOLERANCE = 1e-2


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
                 lse: torch.Tensor | None = None, ref_lse: torch.Tensor | None = None) -> CheckResult:
    """Coverage (no NaN / inf left, i.e. every element written) then the error bound."""
    if out.shape != ref.shape:
        return CheckResult(False, float("nan"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    bad = (~torch.isfinite(out)).sum().item()
    if bad:
        return CheckResult(False, float("nan"),
                           f"{bad} of {out.numel()} output elements are NaN/inf (unwritten or overflow)")
    err = rel_err(out, ref)
    if not err <= tol:
        return CheckResult(False, err, f"rel_err {err:.2e} > {tol:.0e}")
    if lse is not None and ref_lse is not None:
        finite = torch.isfinite(ref_lse)
        if not torch.equal(torch.isfinite(lse), finite) or (lse[~finite] > 0).any():
            return CheckResult(False, err, "lse: finite / -inf pattern differs from the reference")
        lse_err = (lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
        if not lse_err <= 1e-2:
            return CheckResult(False, err, f"lse max abs error {lse_err:.2e} > 1e-2")
    return CheckResult(True, err)
