"""Write notebooks/NN_kN_<name>.ipynb, one per rung of kernels/, from the one template below.

    python notebooks/build.py                  # (re)write every notebook
    python notebooks/build.py --check          # exit 1 if a notebook's cells differ from these
    python notebooks/build.py --clear-outputs  # rewrite them without any outputs

Every notebook has the same steps, so they stay consistent: set-up; the idea (the rung's own
module docstring, quoted into the notebook's text here, so the text is only as old as the last
build and tests/test_notebooks.py fails once it drifts); compile for sm_90a and inspect (no GPU
needed); run and check against the fp32 reference; time against the previous rung and the peers;
the table recorded on the H200. GPU steps are guarded, so every notebook also runs top to bottom
on a CPU-only machine. The notebooks import the rung from kernels/ and use tools.inspect /
tools.compare / tools.report; they never redefine a kernel.

Rewriting keeps the outputs of every code cell whose source is unchanged (they come from the
last run on the GPU host); a changed or new code cell has none until the notebooks are
executed there again (python -m tools.execute_notebooks) and committed with their outputs.
Rungs are found in kernels/ (kN.py); RUNG_TEXT adds the hand-written parts, and a rung without
an entry gets a notebook from its page title and IDEA alone.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from tools.inspect import REPORT_PROBLEM, problem_source  # noqa: E402

PEERS = ("sdpa-flash", "sdpa-cudnn", "fa4")


@dataclass(frozen=True)
class Rung:
    number: int
    name: str   # file name part: 01_k1_<name>.ipynb
    title: str
    learn: str | None  # what the reader learns, one sentence (None: the rung's IDEA stands in)
    look_for: str  # what to look for in the compile report
    dtype: str = "bf16"  # the inputs the rung takes (its DTYPES' first): "e4m3" for an FP8 rung

    @property
    def rung(self) -> str:
        return f"k{self.number}"

    @property
    def previous(self) -> str | None:
        """The rung this one changes (``kernels.registry.rung_base``): usually the one before."""
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from kernels.registry import rung_base

        return rung_base(self.rung)

    @property
    def filename(self) -> str:
        return f"{self.number:02d}_{self.rung}_{self.name}.ipynb"


# The hand-written parts of each notebook, by rung: file name, title, what you learn, what to
# look for in the compile report.
RUNG_TEXT = (
    Rung(1, "naive", "K1: naive attention, one thread per query row",
         "how the online softmax computes attention in one pass over the keys, and why a thread "
         "per row with no shared memory leaves the GPU idle",
         "`FFMA`, `FMUL` and `MUFU` (the two `exp2` per key) fed by `LDG`; no `LDS`, `SHFL` or `BAR`: "
         "no thread shares anything"),
    Rung(2, "row_group", "K2: row groups, FlashAttention-2 tiles in shared memory",
         "how tiling Q, K and V through shared memory and sharing a row between four threads "
         "(shuffle reductions) turns K1 into a FlashAttention-2 kernel on the FP32 pipe",
         "`LDS`, `STS`, `BAR` and four `SHFL` appear; thousands of unrolled `FFMA`"),
    Rung(3, "tma", "K3: TMA loads on mbarriers",
         "how the Tensor Memory Accelerator takes the tile copies off the compute threads and "
         "overlaps them with the math",
         "`UTMALDG` (TMA loads) and `SYNCS` (mbarriers) replace K2's `LDG`/`STS` tile copies"),
    Rung(4, "wgmma", "K4: WGMMA, both GEMMs on the tensor cores",
         "how warpgroup MMAs run S = QK^T and O += PV on the tensor cores and the softmax "
         "works on the accumulator fragments",
         "`HGMMA` replaces the `FFMA` loops; the remaining `FFMA`, `FMNMX`, `MUFU` are the softmax"),
    Rung(5, "warp_specialized", "K5: warp specialization and register reallocation",
         "how a producer warpgroup hands its registers to the consumers with `setmaxnreg`, and "
         "what the registers buy: two consumer warpgroups at head_dim 256, three at 64",
         "`USETMAXREG` appears twice (the producer's `DEALLOC`, the consumers' `TRY_ALLOC`); "
         "the mainloop mix is K4's"),
    Rung(6, "pingpong", "K6: ping-pong between the consumer warpgroups",
         "how two named barriers make the consumer warpgroups take turns on the tensor cores, so "
         "one warpgroup's softmax runs under the other's GEMMs",
         "`BAR` grows: named-barrier syncs and arrives on ids other than 0 (the turns)"),
    Rung(7, "intra_wg_overlap", "K7: softmax and GEMMs overlapped inside a warpgroup",
         "how issuing the next tile's S = QK^T before this tile's softmax, and waiting only for "
         "the older of two MMA groups, keeps the tensor cores busy within one warpgroup",
         "the mainloop body is compiled twice now (the first tile is peeled off), so every "
         "softmax opcode doubles; `HGMMA` doubles with it"),
    Rung(8, "scheduling_epilogue", "K8: mask-free tiles, longest-first causal tiles, TMA-store epilogue",
         "what is left outside the pipelined mainloop: the mask on tiles that need none, the "
         "order in which causal query tiles start, and how O leaves",
         "a third copy of the loop body (the mask-free one), `UTMASTG` instead of `STG`"),
    Rung(9, "rescale_under_s", "K9: the O rescale under the S GEMM",
         "why the rescale of O by each tile's factor can wait for the next P V, and what moving "
         "it under the S GEMM buys at head_dim 128 and 256 (and costs at 64)",
         "the same opcode mix as K8 at D = 128 (the `FMUL` of the rescale move, they do not "
         "disappear); one more rescale before the last P V"),
    Rung(10, "persistent", "K10: persistent CTAs",
         "how one CTA per SM walks the query tiles with its rings and turns running on from tile "
         "to tile, and what that buys over a grid of one CTA per tile",
         "the mainloop mix is K9's; around it, the tile loop's index arithmetic and one more "
         "named-barrier sync per tile (the Q stage handed back after the epilogue)"),
    Rung(11, "short_turn", "K11: the turn holds only the GEMM issues",
         "what a warpgroup does between taking the ping-pong turn and passing it on, and how the "
         "loop's bookkeeping (shared-memory descriptors, the loop bound, the release lane) leaves "
         "the loop when it is built once, before it",
         "the two main-loop rows: fewer instructions per KV tile, half as many on the uniform "
         "datapath, and a turn of the GEMMs and their descriptor offsets only (no float work); "
         "`FMUL` drops by the rescale K9 put before the last P V"),
    Rung(12, "fp8", "K12: FP8",
         "how attention runs on FP8 tensor cores: why V must be transposed for them, how P gets from "
         "the accumulator into the FP8 A operand by relabelling keys instead of moving registers, "
         "and what E4M3 costs in accuracy against the reference and against the bf16 rung",
         "`QGMMA` (e4m3 x e4m3, k32) in place of `HGMMA`, half as many for the same tiles; "
         "`F2FP` converting P to e4m3 two scores at a time; no more `SHFL` than the bf16 rung; "
         "the main-loop rows as K11's: a turn of the `QGMMA` issues only, no float work"),
    Rung(13, "dynamic_scheduler", "K13: a dynamic persistent scheduler",
         "how persistent CTAs take their tiles from a counter in global memory as they free up, "
         "how the producer hands each tile's index to the consumers with its Q, and why the "
         "counter needs no reset before a launch",
         "`ATOMG` (a ticket per tile, a count per CTA) and two `STG` (the counter's reset), none "
         "of them with one CTA per tile; the main-loop rows as K11's (its loop is unchanged)"),
)


def rung_source(rung: str) -> tuple[str, str]:
    """(IDEA, module docstring) of kernels/<rung>.py, read with ast: no import, no GPU."""
    path = ROOT / "kernels" / f"{rung}.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    doc = ast.get_docstring(tree, clean=True)
    if not doc:
        raise SystemExit(f"kernels/{rung}.py has no module docstring to quote")
    idea = next((node.value.value for node in tree.body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 and any(isinstance(t, ast.Name) and t.id == "IDEA" for t in node.targets)), None)
    if not isinstance(idea, str):
        raise SystemExit(f"kernels/{rung}.py has no IDEA string")
    return idea, doc


def rung_dtype(rung: str) -> str:
    """The first of kernels/<rung>.py's DTYPES (read with ast): the inputs its notebook uses."""
    path = ROOT / "kernels" / f"{rung}.py"
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DTYPES" for t in node.targets):
            return ast.literal_eval(node.value)[0]
    raise SystemExit(f"kernels/{rung}.py has no DTYPES")


def discovered_rungs() -> list[Rung]:
    """Every rung of kernels/ (the registry's list), with its RUNG_TEXT or defaults, in its dtype."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from kernels.registry import rung_names

    known = {r.rung: r for r in RUNG_TEXT}
    out = []
    for rung in rung_names():
        if rung in known:
            out.append(replace(known[rung], dtype=rung_dtype(rung)))
            continue
        idea, _ = rung_source(rung)
        number = int(rung[1:])
        page = ROOT / "docs" / "worklog" / f"{rung}.md"
        heading = next((line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# ")),
                       None) if page.is_file() else None
        slug = re.sub(r"[^a-z0-9]+", "_", idea.split(":")[0].lower()).strip("_") or "rung"
        out.append(Rung(number, slug, heading or f"{rung.upper()}: {idea}", None,
                        f"what changed against K{number - 1}'s instruction mix, and why", rung_dtype(rung)))
    return out


def md(text: str):
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str):
    return nbformat.v4.new_code_cell(text.strip("\n"))


def cells(r: Rung) -> list:
    prev = r.previous
    compared = ([prev] if prev else []) + [r.rung]
    timed = compared + list(PEERS)
    idea, docstring = rung_source(r.rung)
    learn = f"**What you will learn:** {r.learn}." if r.learn else f"**The idea in one line:** {idea}."
    return [
        md(f"""
# {r.title}

{learn}

**What you need:** this repository's Python environment (`make setup`). Everything down to
*Compile and inspect* runs on any machine, GPU or not: the rung is compiled for Hopper
(`sm_90a`) with fake tensors. *Run and check* and *Time* need an H100/H200; without one they
say so, and the last section shows the numbers recorded on an H200 instead.

The kernel lives in `kernels/{r.rung}.py`; this notebook imports it, it never redefines it.
The worklog page, [docs/worklog/{r.rung}.md](../docs/worklog/{r.rung}.md), walks through its code.
"""),
        md("## Set-up"),
        code(f"""
import os
import sys
from pathlib import Path

ROOT = Path.cwd().parent if Path.cwd().name == "notebooks" else Path.cwd()
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # compile for Hopper even without a GPU

import torch
from IPython.display import SVG, Markdown, display

import tools.inspect as compile_report  # also keeps the DSL's dump files out of the tree
from kernels import {r.rung}
from kernels.harness import AttentionProblem
from tools import report

ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
print("GPU:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
      "| rungs run here" if ON_HOPPER else "| compile and inspect only")
"""),
        md(f"""
## The idea

**{r.rung.upper()} in one line:** {idea}

The rung's module docstring is its spec sheet: what it computes, the one idea it adds, how it
works step by step, what it costs and its constraints. Quoted from `kernels/{r.rung}.py` by
`notebooks/build.py` (the tests fail when this copy and the file differ):

```text
{docstring}
```
"""),
        md(f"""
## Compile and inspect

`tools.inspect` compiles the rung for `sm_90a` (no GPU needed), then reads what the compiler
made: registers per thread, shared memory, local memory, and the SASS instruction mix
(static counts: instructions in the binary, not executed ones).
{"It is shown next to the previous rung, so the table is the diff." if prev else ""}

Look for: {r.look_for}.
"""),
        code(compile_cell(r, compared)),
        *run_and_check_cells(r),
        md(f"""
## Time against {"the previous rung and " if prev else ""}the peers

`tools.compare.run_gpu` is what `python -m tools.compare` runs: every kernel on the same inputs,
checked against the reference before it is timed (median of CUDA-event timings with input
rotation), TFLOP/s from the exact FLOP count. The peers are FlashAttention-4 (`fa4`), and cuDNN
and FlashAttention-2 through torch SDPA.
"""),
        code(f"""
from kernels.harness import fa3_paper_shapes

kernels = {timed!r}
if ON_HOPPER:
    from tools.compare import run_gpu

    measured = run_gpu(kernels, {shapes_expression(r)})
    headers, rows = report.pivot({{"rows": measured["rows"]}}, kernels{label_argument(r)})
    display(Markdown(report.markdown_table(headers, rows)
                     + f"\\n\\nTFLOP/s on {{torch.cuda.get_device_name()}}; bf16 GEMM ceiling in this run: "
                     + f"{{measured['bf16_gemm_tflops']:.0f}} TFLOP/s"))
else:
    print("No Hopper GPU here: see the recorded H200 numbers below.")
"""),
        md("""
## What the profiler sees

Nsight Compute on one launch at the longest shape (`python -m tools.bench --suite profile`,
read from `results/h200/profile.json`): how busy the tensor pipe is, how many issue slots the
warps use, and why warps wait (per issued instruction, by reason). Each rung's step should
show up here before it shows up in the timings.
"""),
        code(f"""
try:
    profiled = report.load("profile")
except report.ResultsError as exc:
    print(exc)
else:
    rows = [r for r in profiled["rows"] if r["kernel"] in {compared!r} and r["status"] == "ok"
            and not r["problem"]["causal"]]
    metrics = ("tensor_pipe_active_pct", "issue_slots_busy_pct", "xu_pipe_pct", "warp_instructions")
    table = [[m] + [f"{{r['ncu'].get(m, float('nan')):.4g}}" for r in rows] for m in metrics]
    display(Markdown(report.markdown_table(["", *[r["kernel"] for r in rows]], table)))
"""),
        md("""
## Recorded on the H200

The numbers `python -m tools.bench --suite ladder` wrote to `results/h200/ladder.json`, read
through `tools.report` like every table of the docs site, with their provenance.
"""),
        code(f"""
try:
    recorded = report.load("ladder")
except report.ResultsError as exc:
    print(exc)
else:
    for causal in (False, True):
        headers, rows = report.pivot(recorded, kernels, {{"head_dim": 128, "causal": causal}}{label_argument(r)})
        display(Markdown(report.markdown_table(headers, rows)))
    display(Markdown("TFLOP/s. " + report.provenance(recorded["meta"])))
    display(SVG(report.plot_svg(recorded, kernels, {{"head_dim": 128, "causal": False}},
                                title="head_dim 128, no mask")))
"""),
    ]


# ---- the cells that differ for an FP8 rung (dtype "e4m3"); a bf16 rung's are as they always were
def compile_cell(r: Rung, compared: list[str]) -> str:
    problem = problem_source(REPORT_PROBLEM)  # the SASS tests' problem too: one compile serves both
    if r.dtype == "bf16":
        return f"""
problem = {problem}
reports = [compile_report.inspect(name, problem) for name in {compared!r}]
headers, rows = compile_report.resources_rows(reports)
display(Markdown(report.markdown_table(headers, rows)))
"""
    return f"""
problem = {problem}
# each rung in its own dtype: {r.rung} on the {r.dtype} version of the problem, the one before in bf16
reports = [compile_report.inspect(name, compile_report.native_problem(name, problem)) for name in {compared!r}]
headers, rows = compile_report.resources_rows(reports)
display(Markdown(report.markdown_table(headers, rows)))
"""


def run_and_check_cells(r: Rung) -> list:
    if r.dtype == "bf16":
        return [md("""
## Run and check against the reference

Fresh random inputs, an output poisoned with NaN (so an element the kernel never writes
cannot pass), then the relative Frobenius error against an fp32 reference; bf16 must stay at
or under `1e-2`. The second problem has ragged lengths (neither a multiple of the tile),
grouped-query heads and the bottom-right causal mask.
"""), code(f"""
from kernels.harness import check_output, empty_output, make_inputs, poison, reference_attention

checks = [problem.with_(batch=1, seqlen_q=1024, seqlen_k=1024),
          AttentionProblem(batch=2, seqlen_q=300, seqlen_k=517, heads_q=8, heads_kv=2, head_dim=128, causal=True)]
if ON_HOPPER:
    for p in checks:
        q, k, v = make_inputs(p, seed=0)
        out = empty_output(p)
        poison(out)
        {r.rung}.run_kernel({r.rung}.compile_kernel(p), q, k, v, out)
        ref, _ = reference_attention(q, k, v, causal=p.causal, scale=p.softmax_scale)
        result = check_output(out.float(), ref)
        print(f"{{p.label():32}} rel err {{result.rel_err:.1e}}  {{'ok' if result.ok else 'WRONG: ' + result.reason}}")
else:
    print("No Hopper GPU here: skipped (compile and inspect above ran anyway).")
""")]
    prev = r.previous
    return [md(f"""
## Run and check against the reference, and against the bf16 rung

The inputs of an `{r.dtype}` problem are the bf16 problem's random draws, quantized per tensor
(`Fp8Tensor`: e4m3 data and one descale each). Two errors, kept apart: the kernel's own,
against the reference on the same dequantized inputs (what the tolerance bounds), and the
format's, against an fp64 reference on the bf16 source, side by side with the bf16 rung
(`{prev}`) on that source; with the FlashAttention-3 paper's outliers (a few large entries) and
without. The second problem has ragged lengths, grouped-query heads and the causal mask.
"""), code(f"""
from kernels import {prev}
from kernels.harness import (
    check_output,
    empty_output,
    make_inputs,
    poison,
    reference_attention,
    rel_err,
    tolerance,
)

checks = [problem.with_(batch=1, seqlen_q=1024, seqlen_k=1024, dtype="{r.dtype}"),
          AttentionProblem(batch=2, seqlen_q=300, seqlen_k=517, heads_q=8, heads_kv=2, head_dim=128, causal=True,
                           dtype="{r.dtype}")]


def run(module, p, q, k, v):
    out = empty_output(p)
    poison(out)
    module.run_kernel(module.compile_kernel(p), q, k, v, out)
    return out.float()


if ON_HOPPER:
    for p in checks:
        for outliers in (False, True):
            q, k, v = make_inputs(p, seed=0, outliers=outliers)
            source = make_inputs(p.with_(dtype="bf16"), seed=0, outliers=outliers)
            out = run({r.rung}, p, q, k, v)
            ref, _ = reference_attention(q, k, v, causal=p.causal, scale=p.softmax_scale)
            result = check_output(out, ref, tolerance(p))
            exact, _ = reference_attention(*source, causal=p.causal, scale=p.softmax_scale, dtype=torch.float64)
            bf16_out = run({prev}, p.with_(dtype="bf16"), *source)
            print(f"{{p.label():36}} {{'outliers' if outliers else 'normal':8}} "
                  f"vs same inputs {{result.rel_err:.1e}} {{'ok' if result.ok else 'WRONG: ' + result.reason}} | "
                  f"vs fp64 of the bf16 source: {r.rung} {{rel_err(out, exact):.1e}}, {prev} {{rel_err(bf16_out, exact):.1e}}")
else:
    print("No Hopper GPU here: skipped (compile and inspect above ran anyway).")
""")]


def shapes_expression(r: Rung) -> str:
    """The problems the timing cell runs: bf16, and for an FP8 rung the same shapes in its dtype."""
    if r.dtype == "bf16":
        return "fa3_paper_shapes(128, False, (1024, 4096))"
    return (f"[p.with_(dtype=d) for d in ('bf16', '{r.dtype}') "
            "for p in fa3_paper_shapes(128, False, (1024, 4096))]")


def label_argument(r: Rung) -> str:
    """An FP8 rung's tables put the bf16 and e4m3 rows of one shape side by side."""
    return "" if r.dtype == "bf16" else ", label=report.shape_label"


def notebook(r: Rung):
    nb = nbformat.v4.new_notebook(cells=cells(r))
    for i, cell in enumerate(nb.cells):
        cell.id = f"{r.rung}-{i:02d}"  # stable ids: regenerating gives the same file
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    return nb


def sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def differences(committed, expected) -> list[str]:
    """How the cells of ``committed`` differ from ``expected`` (outputs aside), one phrase per
    change, e.g. ``cell 3 (markdown, '## The idea') differs``; empty when they agree."""
    import difflib

    old, new = sources(committed), sources(expected)

    def name(cells, i):
        kind, text = cells[i]
        first = text.strip().splitlines()[0] if text.strip() else ""
        return f"cell {i} ({kind}, {first[:50]!r})"

    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op in ("replace", "insert"):
            out += [name(new, j) + (" differs" if op == "replace" else " is missing") for j in range(j1, j2)]
        if op == "delete" or (op == "replace" and i2 - i1 > j2 - j1):
            out += [name(old, i) + " is no longer written" for i in range(i1 + (j2 - j1 if op == "replace" else 0), i2)]
    return out


def keep_outputs(nb, previous) -> int:
    """Copy the outputs of ``previous``'s code cells into the cells of ``nb`` with the same
    source (a GPU run's results stay valid while the code is unchanged); returns how many."""
    runs = {c.source: c for c in previous.cells if c.cell_type == "code" and c.get("outputs")}
    kept = 0
    for cell in nb.cells:
        old = runs.get(cell.source) if cell.cell_type == "code" else None
        if old is not None:
            cell.outputs, cell.execution_count = old.outputs, old.execution_count
            kept += 1
    return kept


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python notebooks/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the committed notebooks' cells, write nothing")
    parser.add_argument("--clear-outputs", action="store_true", help="write the notebooks without outputs")
    args = parser.parse_args(argv)
    stale = []
    for r in discovered_rungs():
        path = HERE / r.filename
        nb = notebook(r)
        previous = nbformat.read(path, as_version=4) if path.exists() else None
        if args.check:
            diff = differences(previous, nb) if previous is not None else ["missing"]
            if diff:
                stale.append(f"{path.name}: {', '.join(diff)}")
            continue
        kept = keep_outputs(nb, previous) if previous is not None and not args.clear_outputs else 0
        nbformat.write(nb, path)
        code_cells = sum(c.cell_type == "code" for c in nb.cells)
        print(f"wrote {path.relative_to(ROOT)} ({kept} of {code_cells} code cells keep their outputs)")
    if stale:
        print("out of date with notebooks/build.py (run it):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
