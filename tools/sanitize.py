"""compute-sanitizer on small launches of a rung: shared-memory races, memory errors, barriers.

    python -m tools.sanitize k13                       # racecheck, memcheck and synccheck
    python -m tools.sanitize k13 k12 --tool racecheck

Each tool runs this module again in a child process under ``compute-sanitizer``; the child
launches the rung on :data:`SHAPES` (odd lengths, GQA, batch 2, causal and not, LSE written;
a persistent rung also with few CTAs, so that every CTA walks several tiles), checks each
output against the fp32 reference and prints one line per launch. The parent reads the tool's
summary and exits 1 on any error or hazard, or when the child did not finish its launches.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = ("racecheck", "memcheck", "synccheck")
# The sizes of the defect report (b2, Sq 200, Sk 333, GQA 4/2): two query tiles a head, keys
# not a tile multiple, rows without keys under the causal mask.
SHAPES = dict(batch=2, seqlen_q=200, seqlen_k=333, heads_q=4, heads_kv=2)
# ``ctas`` for a persistent rung: fewer CTAs than the 16 tiles, so each takes several.
FEW_CTAS = 3
# compute-sanitizer's closing line per tool.
SUMMARY = re.compile(r"(RACECHECK|ERROR) SUMMARY: (\d+) (?:hazards? displayed|errors?)"
                     r"(?: \((\d+) errors?, (\d+) warnings?\))?")


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for candidate in sorted(Path("/usr/local").glob("cuda*/bin/compute-sanitizer"), reverse=True):
        return str(candidate)
    raise FileNotFoundError("compute-sanitizer not found: it comes with the CUDA toolkit")


def launches(name: str, head_dim: int):
    """(label, problem, knobs) of the child's launches for rung ``name``."""
    from kernels.harness import AttentionProblem
    from kernels.registry import rung_module

    module = rung_module(name)
    dtype = "bf16" if "bf16" in module.DTYPES else module.DTYPES[0]
    for causal in (False, True):
        problem = AttentionProblem(**SHAPES, head_dim=head_dim, causal=causal, dtype=dtype)
        yield f"causal={causal}", problem, {}
        if "ctas" in getattr(module, "KNOBS", ()):
            yield f"causal={causal} ctas={FEW_CTAS}", problem, {"ctas": FEW_CTAS}


def child(name: str, head_dim: int) -> int:
    """Launch and check; runs under the sanitizer."""
    import torch

    from kernels.harness import check_output, make_inputs, reference_attention, tolerance
    from kernels.registry import rung_module

    module = rung_module(name)
    failed = 0
    for label, problem, knobs in launches(name, head_dim):
        q, k, v = make_inputs(problem, seed=0)
        compiled = module.compile_kernel(problem, **knobs)
        out = torch.full((problem.batch, problem.seqlen_q, problem.heads_q, head_dim), float("nan"),
                         dtype=problem.out_torch_dtype, device="cuda")
        lse = torch.full((problem.batch, problem.heads_q, problem.seqlen_q), float("nan"), device="cuda")
        module.run_kernel(compiled, q, k, v, out, lse)
        torch.cuda.synchronize()
        ref, ref_lse = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)
        check = check_output(out.float(), ref, tolerance(problem), lse=lse, ref_lse=ref_lse)
        failed += not check.ok
        print(f"launch {name} d{head_dim} {label}: {'ok' if check.ok else check.reason} "
              f"(rel_err {check.rel_err:.2e})", flush=True)
    print(f"launches done: {failed} wrong", flush=True)
    return 1 if failed else 0


def run_tool(tool: str, name: str, head_dim: int) -> tuple[bool, str]:
    """(clean, one-line summary) of ``tool`` on the child's launches."""
    report = ["--racecheck-report", "hazard"] if tool == "racecheck" else []
    command = [sanitizer(), "--tool", tool, *report, sys.executable, "-m", "tools.sanitize", "--child", name,
               "--head-dim", str(head_dim)]
    done = subprocess.run(command, capture_output=True, text=True)
    text = done.stdout + done.stderr
    summaries = SUMMARY.findall(text)
    count = sum(int(found[1]) for found in summaries)
    finished = re.search(r"launches done: 0 wrong", text) is not None
    clean = bool(summaries) and count == 0 and finished and done.returncode == 0
    detail = "; ".join(dict.fromkeys(line.strip() for line in text.splitlines()
                                     if "SUMMARY" in line or line.startswith("launch ")))
    if not clean:
        hazards = [line.strip() for line in text.splitlines()
                   if re.search(r"(Error|Warning|Race).*at ", line)]
        detail += "\n    " + "\n    ".join(hazards[:8] or text.strip().splitlines()[-8:])
    return clean, detail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sanitize", description=__doc__.splitlines()[0])
    parser.add_argument("rungs", nargs="+", help="rung names (k13, ...)")
    parser.add_argument("--tool", choices=TOOLS, action="append", help="default: all three")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.rungs[0], args.head_dim)
    clean = True
    for name in args.rungs:
        for tool in args.tool or TOOLS:
            ok, detail = run_tool(tool, name, args.head_dim)
            clean &= ok
            print(f"{name} d{args.head_dim} {tool}: {'clean' if ok else 'NOT CLEAN'}: {detail}", flush=True)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
