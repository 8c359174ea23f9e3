"""The profile suite: Nsight Compute counters of each rung, of the production tensor-core
prefill and of FA4, one launch each.

Shape: the ladder's longest, one 16k sequence, head_dim 128 (16 heads), no mask, in bf16 and,
for the FP8 rungs, in e4m3 (each kernel in the dtypes it takes). Each row
carries ``ncu``: tensor-pipe activity, issue slots, the XU (MUFU), FMA and ALU pipes,
instructions, and the warp stall reasons (``tools/ncu.py``), of the call's longest launch: an
FP8 rung also launches its V transpose (``launches_in_range`` 2), which the row's time leaves
out and the ladder's includes. The K1 rung
(5 TFLOP/s) is left out: one launch replayed for every counter pass would take minutes.
"""

from __future__ import annotations

from kernels.registry import names

# Beside the rungs: FA4 (the target) and our production prefill, the default kernel and the
# cp.async one it replaced on Hopper (what the production lab page's profile shows; it needs the
# built extension, python -m tools.build_ext).
OTHERS = ("cuda-prefill-tc", "cuda-prefill-tc-cpasync", "fa4")
SKIPPED = ("k1",)


def kernels() -> list[str]:
    return [n for n in names("rung") if n not in SKIPPED] + list(OTHERS)


# The tools.bench filters this suite applies (bench refuses any other before measuring).
FILTERS = ("kernels",)


def run(ctx) -> list[dict]:
    from tools.measure import Case, measure
    from tools.ncu import default_problem, profile
    from tools.suites.ladder import takes_dtype

    selected = ctx.kernels or kernels()
    shape = default_problem(128, causal=False)
    todo = [(p, [n for n in selected if takes_dtype(n, p)]) for p in (shape, shape.with_(dtype="e4m3"))]
    rows = []
    task = ctx.progress.add_task("profile", total=sum(len(chosen) for _, chosen in todo))
    for problem, chosen in todo:
        if not chosen:
            continue
        case = Case.build(problem)
        for name in chosen:
            ctx.progress.update(task, description=f"ncu {name:>6} {problem.label()}")
            # Checked against the reference first (not timed: the profiler gives the time).
            row = measure(ctx.runner(name), case, timed=False)
            if row["status"] == "ok":
                try:
                    row["ncu"] = profile(name, problem)
                    ms = row["ncu"]["duration_ns"] / 1e6
                    row["ms"] = {"median": round(ms, 5), "p20": round(ms, 5), "p80": round(ms, 5)}
                    row["tflops"] = round(problem.flops() / (ms * 1e-3) / 1e12, 2)
                except Exception as exc:  # no ncu, no counter access: say so in the row
                    row["status"] = f"unsupported: ncu: {type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            ctx.progress.advance(task)
        del case
    return rows
