"""The compiler's view of a rung, on any machine: ``python -m tools.inspect k2 [--head-dim 128] [--causal]``.

Compiles the rung for sm_90a with fake tensors (no GPU needed), then reports what ptxas and
the disassembler say: registers, shared memory, stack frame and spills, and the SASS
instruction mix. ``--record`` stores the reports for every rung in results/inspect.json, which
the docs read so that building the site needs neither a GPU nor minutes of compiling.
``--production-ws`` counts the steady-state step of the production warp-specialized prefill
(csrc, built by nvcc) at head_dim 64, 128 and 256, as :func:`main_loop_facts` does for a rung.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernels.harness.problem import AttentionProblem
from tools.cli import positive_int

ROOT = Path(__file__).resolve().parent.parent
RECORD_PATH = ROOT / "results" / "inspect.json"
ARCH = "sm_90a"

# Opcode families shown side by side; the order is the order of the columns.
FAMILIES = {
    "HGMMA": "tensor core (warpgroup)", "QGMMA": "tensor core (warpgroup, fp8)", "HMMA": "tensor core (warp)",
    "FFMA": "fp32 fma", "FMUL": "fp32 mul", "FADD": "fp32 add", "FMNMX": "fp32 min/max",
    "MUFU": "special function (exp2, rcp)", "F2FP": "fp32 -> bf16 / fp8 pack", "SHFL": "warp shuffle",
    "LDG": "global load", "STG": "global store", "LDS": "shared load", "STS": "shared store",
    "LDSM": "ldmatrix", "LDGSTS": "cp.async", "UTMALDG": "TMA load", "UTMASTG": "TMA store",
    "SYNCS": "mbarrier", "BAR": "barrier", "USETMAXREG": "register reallocation (setmaxnreg)",
    "ATOMG": "global atomic", "LDL": "local load (spill)", "STL": "local store (spill)",
}


def _tool(name: str) -> str:
    """Find a CUDA tool: the nvidia-cuda-* wheels (13.4+, as new as the DSL's output), then PATH."""
    try:
        import nvidia

        for base in nvidia.__path__:
            for cand in Path(base).glob(f"*/bin/{name}"):
                return str(cand)
    except ImportError:
        pass
    found = shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")
    if found:
        return found
    raise FileNotFoundError(f"{name} not found: pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump")


def sass_of(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_tool("nvdisasm"), "-c", f.name], check=True, capture_output=True,
                              text=True).stdout


def opcode_mix(sass: str) -> collections.Counter:
    """Count base opcodes (``@P0 FFMA.FTZ R1, ...`` -> ``FFMA``) in the disassembly."""
    mix = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            mix[m.group(1)] += 1
    return mix


def sass_facts(sass: str) -> dict:
    """Claims about a warp-specialized kernel that the opcode mix cannot show: named barriers
    (``BAR.SYNC`` / ``BAR.ARV`` on an id other than 0, the CTA-wide ``__syncthreads``), and
    whether every TMA load sits in the producer's region, between the producer's
    ``USETMAXREG.DEALLOC`` and the consumers' ``USETMAXREG.TRY_ALLOC`` (the order in which the
    compiler lays out the two branches of the role switch); and the distinct warpgroup MMA
    instructions with their shapes and types (``QGMMA.64x128x32.F32.E4M3.E4M3``)."""
    lines = sass.splitlines()
    named_sync = sum(1 for ln in lines if re.search(r"\bBAR\.SYNC\S*\s+(?!0x0\b)\w+", ln))
    named_arrive = sum(1 for ln in lines if re.search(r"\bBAR\.ARV\b", ln))
    dealloc = [i for i, ln in enumerate(lines) if "USETMAXREG.DEALLOC" in ln]
    alloc = [i for i, ln in enumerate(lines) if "USETMAXREG.TRY_ALLOC" in ln]
    tma_loads = [i for i, ln in enumerate(lines) if re.search(r"\bUTMALDG\b", ln)]
    in_producer = None
    if len(dealloc) == 1 and len(alloc) == 1 and tma_loads:
        in_producer = all(dealloc[0] < i < alloc[0] for i in tma_loads)
    mmas = sorted({m.group(1) for ln in lines for m in [re.search(r"\b([HQ]GMMA\.[\w.]+)", ln)] if m})
    return {"named_barrier_syncs": named_sync, "named_barrier_arrives": named_arrive,
            "tma_loads_in_producer": in_producer, "warpgroup_mma": mmas,
            "main_loop": main_loop_facts(sass)}


_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:(@!?U?P\w+)\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
# Floating-point work that would sit inside a turn (the O rescale is FMUL, the softmax FFMA).
_FP_OPS = {"FFMA", "FMUL", "FADD", "FMNMX", "MUFU", "F2FP"}
_MMA_OPS = ("HGMMA", "QGMMA")  # bf16/fp16 and FP8 warpgroup MMAs


def parse_sass(sass: str) -> tuple[list[dict], dict[str, int]]:
    """``cuobjdump -sass`` text as instructions ``{"pred", "op", "text"}`` in order, and each
    label's index into them (where the next instruction sits)."""
    ins, labels = [], {}
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(ins)
            continue
        m = _INSTRUCTION.match(line)
        if m:
            ins.append({"pred": m.group(2) or "", "op": m.group(3), "text": m.group(3) + m.group(4)})
    return ins, labels


def branch_target(instruction: dict, labels: dict[str, int]) -> int | None:
    """Index of the instruction a ``BRA`` jumps to (None for any other instruction)."""
    target = _BRANCH_TARGET.search(instruction["text"]) if instruction["op"].startswith("BRA") else None
    return labels.get(target.group(1)) if target else None


def main_loop_facts(sass: str) -> dict | None:
    """The steady-state KV loop of a ping-pong consumer, counted per KV tile per warp: the
    smallest loop (a backward branch) with warpgroup MMAs (HGMMA; QGMMA in FP8) and exactly
    one named ``BAR.SYNC`` (take the turn) and one ``BAR.ARV`` (pass it on); without the
    mask that is the only one, under it the unmasked one. Counted on the fast path: an
    mbarrier wait's branch to its retry code is taken not to be taken. ``instructions``: all
    of them; ``uniform``: on the uniform datapath (``U*`` opcodes but the TMA's: descriptors,
    ring indices, loop bounds); ``turn``: those after the ``BAR.SYNC`` up to and including
    the ``BAR.ARV`` (what the other warpgroups wait for), of which ``turn_mma`` are the GEMMs
    and ``turn_fp`` floating-point work. After the turn, up to the wait for every GEMM
    (``WARPGROUP.DEPBAR.LE gsb0, 0x0``, the wait for the warpgroup's own P V): ``pv_wait``,
    how many instructions come before that wait, of which ``exp2_under_own_pv`` are
    exponentials and ``ffma_under_own_pv`` FFMAs (the scaled scores); ``first_arrive``: how
    many come before the first mbarrier arrive (K's release in K11 and K12);
    ``packs_among_exp2``: conversions to 16 bits (``F2FP``, P's packing) before the step's last
    exponential. None for a kernel without such a loop."""
    ins, labels = parse_sass(sass)
    candidates = []
    for end, x in enumerate(ins):
        start = branch_target(x, labels)
        if start is None or start > end:
            continue
        body = ins[start:end + 1]
        syncs = sum(1 for y in body if y["op"].startswith("BAR.SYNC"))
        arrives = sum(1 for y in body if y["op"].startswith("BAR.ARV"))
        if syncs == 1 and arrives == 1 and any(y["op"].startswith(_MMA_OPS) for y in body):
            candidates.append((end - start, start, end))
    if not candidates:
        return None
    _, start, end = min(candidates)
    skipped = set()  # "@P0 BRA forward" over an mbarrier wait's retry, inside the loop
    for i in range(start + 1, end):
        target = branch_target(ins[i], labels) if ins[i]["op"] == "BRA" else None
        if target is not None and ins[i]["pred"] == "@P0" and "TRYWAIT" in ins[i - 1]["op"]:
            if i < target <= end:
                skipped.update(range(i + 1, target))
    path = [ins[i] for i in range(start, end + 1) if i not in skipped]
    take = next(k for k, y in enumerate(path) if y["op"].startswith("BAR.SYNC"))
    give = next(k for k, y in enumerate(path) if y["op"].startswith("BAR.ARV"))
    turn = path[take + 1:give + 1] if take < give else path[take + 1:] + path[:give + 1]
    # From the end of the turn (the GEMMs issued) to the wait for all of them (P V included):
    # the exponentials that run while this warpgroup's own P V is still on the tensor cores.
    after_turn = path[give + 1:] + path[:take] if give > take else path[give + 1:take]
    pv_wait = next((k for k, y in enumerate(after_turn) if y["text"].startswith("WARPGROUP.DEPBAR.LE")
                    and re.search(r"gsb0, 0x0\b", y["text"])), None)
    first_arrive = next((k for k, y in enumerate(after_turn) if y["op"].startswith("SYNCS.ARRIVE")), None)
    return {"instructions": len(path),
            "uniform": sum(1 for y in path if y["op"].startswith("U") and not y["op"].startswith("UTMA")),
            "turn": len(turn),
            "turn_mma": sum(1 for y in turn if y["op"].startswith(_MMA_OPS)),
            "turn_fp": sum(1 for y in turn if y["op"].split(".")[0] in _FP_OPS),
            "pv_wait": pv_wait,
            "exp2_under_own_pv": None if pv_wait is None else
            sum(1 for y in after_turn[:pv_wait] if y["op"].startswith("MUFU.EX2")),
            "ffma_under_own_pv": None if pv_wait is None else
            sum(1 for y in after_turn[:pv_wait] if y["op"].split(".")[0] == "FFMA"),
            "first_arrive": first_arrive,
            "exp2": sum(1 for y in path if y["op"].startswith("MUFU.EX2")),
            "packs_among_exp2": _packs_among_exp2([y["op"] for y in after_turn])}


def _packs_among_exp2(ops: list[str]) -> int:
    """F2FP instructions before the last MUFU.EX2 of ``ops``."""
    last = max((k for k, op in enumerate(ops) if op.startswith("MUFU.EX2")), default=-1)
    return sum(1 for op in ops[:last] if op.startswith("F2FP"))


# The production warp-specialized prefill (csrc/kernels/attention/prefill_ws_sm90.cuh), dense bf16.
_PRODUCTION_WS = ("#include \"attention/prefill_ws_sm90.cuh\"\n"
                  "template __global__ void kernels::attention::attn_prefill_ws_kernel<"
                  "kernels::attention::PrefillWsConfig<{head_dim}>, __nv_bfloat16, false>("
                  "const __grid_constant__ kernels::attention::PrefillWsParams);\n")


def production_ws_step(head_dim: int) -> dict | None:
    """:func:`main_loop_facts` of the production warp-specialized prefill (csrc, dense bf16,
    ``PrefillWsConfig<head_dim>``), built alone for sm_90a by nvcc with csrc/nvcc.flags (a few
    seconds, no GPU): the step the docs count instructions in."""
    from tools import nvcc

    with tempfile.TemporaryDirectory() as tmp:
        unit, cubin = Path(tmp) / "ws.cu", Path(tmp) / "ws.cubin"
        unit.write_text(_PRODUCTION_WS.format(head_dim=head_dim))
        build = nvcc.command([unit], cubin, extra=("-cubin",))
        subprocess.run(build, check=True, capture_output=True, text=True)
        return main_loop_facts(sass_of(cubin.read_bytes()))


def resource_usage(cubin: bytes) -> dict:
    """Registers, static shared memory, stack frame and local memory per thread, as the
    cubin records them (``cuobjdump -res-usage``; the DSL's PTX is newer than most ptxas)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([_tool("cuobjdump"), "-res-usage", f.name], check=True,
                              capture_output=True, text=True).stdout

    def grab(field):
        m = re.search(rf"\b{field}:(\d+)", text)
        return int(m.group(1)) if m else 0

    return {"registers": grab("REG"), "static_smem_bytes": grab("SHARED"),
            "stack_frame_bytes": grab("STACK"), "local_bytes": grab("LOCAL")}


def dynamic_smem_bytes(module, problem: AttentionProblem) -> int | None:
    """The dynamic shared memory the rung asks for at launch (its ``shared_bytes``), which the
    cubin cannot show: only static shared memory is recorded there."""
    shared_bytes = getattr(module, "shared_bytes", None)
    return shared_bytes(problem.head_dim, problem.element_size) if shared_bytes else None


def _artifact(value, binary: bool = False):
    """The DSL hands back either the artifact itself or the path it dumped it to."""
    if isinstance(value, str) and len(value) < 4096 and Path(value).is_file():
        return Path(value).read_bytes() if binary else Path(value).read_text()
    if binary and isinstance(value, str):
        return value.encode("latin1")
    return value


def native_problem(name: str, problem: AttentionProblem | None = None) -> AttentionProblem:
    """``problem`` (default: head_dim 128) in a dtype rung ``name`` runs: its own if the rung
    takes it, else the rung's first (an FP8 rung's compile report is of an e4m3 problem)."""
    from kernels.registry import rung_module

    problem = problem or AttentionProblem(head_dim=128)
    dtypes = rung_module(name).DTYPES
    return problem if problem.dtype in dtypes else problem.with_(dtype=dtypes[0])


# The problem of the rung notebooks' compile reports, of results/inspect.json (at each head dim
# and mask) and of the SASS tests, so that a test run's report cache compiles each rung once.
REPORT_PROBLEM = AttentionProblem(batch=4, seqlen_q=4096, seqlen_k=4096, heads_q=16, heads_kv=16,
                                  head_dim=128)


def problem_source(problem: AttentionProblem) -> str:
    """``problem`` as the code a notebook cell writes: its shape fields (the rest are defaults)."""
    fields = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim")
    return f"AttentionProblem({', '.join(f'{f}={getattr(problem, f)}' for f in fields)})"


# A folder where compile reports are kept across processes: the test run sets it (tests/conftest.py)
# so that the SASS tests, the notebooks and the record check compile each rung once between them.
REPORT_CACHE_ENV = "KERNELS_INSPECT_CACHE"


@functools.cache
def _sources_digest() -> str:
    """What a compile report depends on besides its arguments: every kernels/ source, the DSL's
    version and the target."""
    import cutlass

    target = f"{getattr(cutlass, '__version__', '?')} {os.environ.get('CUTE_DSL_ARCH')}"
    digest = hashlib.sha256(target.encode())
    for path in sorted((ROOT / "kernels").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()


def inspect(name: str, problem: AttentionProblem | None = None, *, has_lse: bool = False, **knobs) -> dict:
    """Compile rung ``name`` for sm_90a (no GPU) and return its compile report (of the variant
    that also writes the LSE with ``has_lse``; ``knobs``: the rung's constructor keywords).
    Where $KERNELS_INSPECT_CACHE names a folder, a report made there from the same sources and
    arguments is read instead (reports are JSON: the same values either way)."""
    os.environ.setdefault("CUTE_DSL_ARCH", ARCH)
    problem = problem or AttentionProblem(head_dim=128)
    folder = os.environ.get(REPORT_CACHE_ENV)
    if not folder:
        return _inspect(name, problem, has_lse, knobs)
    key = json.dumps([name, problem.to_dict(), has_lse, sorted(knobs.items()), _sources_digest()],
                     default=str)
    path = Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
    if path.exists():
        return json.loads(path.read_text())
    report = json.loads(json.dumps(_inspect(name, problem, has_lse, knobs)))
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")  # written whole, then renamed
    partial.write_text(json.dumps(report))
    os.replace(partial, path)
    return report


def _inspect(name: str, problem: AttentionProblem, has_lse: bool, knobs: dict) -> dict:
    from kernels.registry import rung_module

    module = rung_module(name)
    reason = module.can_implement(problem)
    if reason:
        return {"kernel": name, "problem": problem.to_dict(), "status": f"unsupported: {reason}"}
    t0 = time.perf_counter()
    compiled = module.compile_for_inspect(problem, has_lse=has_lse, **knobs)
    compile_s = time.perf_counter() - t0
    cubin = _artifact(compiled.__cubin__, binary=True)
    sass = sass_of(cubin)
    mix = opcode_mix(sass)
    report = {"kernel": name, "problem": problem.to_dict(), **({"has_lse": True} if has_lse else {}),
              "status": "ok",
              "compile_s": round(compile_s, 1), **resource_usage(cubin),
              "dynamic_smem_bytes": dynamic_smem_bytes(module, problem),
              "sass_total": sum(mix.values()),
              "sass_mix": {op: mix.get(op, 0) for op in FAMILIES}, "sass_facts": sass_facts(sass)}
    return report


def resources_rows(reports: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Side-by-side table: one column per report."""
    headers = ["", *[r["kernel"] + (" causal" if r["problem"].get("causal") else "") for r in reports]]

    def smem(r):
        dyn = r.get("dynamic_smem_bytes")
        total = r.get("static_smem_bytes", 0) + (dyn or 0)
        return f"{total / 1024:.1f} KiB" if (dyn is not None or r.get("static_smem_bytes")) else "0"

    rows = [["registers / thread", *[str(r.get("registers", "-")) for r in reports]],
            ["shared memory / block", *[smem(r) if r["status"] == "ok" else "-" for r in reports]],
            ["stack frame / local memory (bytes)",
             *[f"{r.get('stack_frame_bytes', '-')} / {r.get('local_bytes', '-')}" for r in reports]],
            ["spill instructions (STL / LDL)",
             *[f"{r['sass_mix']['STL']} / {r['sass_mix']['LDL']}" if "sass_mix" in r else "-"
               for r in reports]],
            ["SASS instructions", *[str(r.get("sass_total", "-")) for r in reports]],
            ["compile time (s)", *[str(r.get("compile_s", "-")) for r in reports]]]
    loops = [(r.get("sass_facts") or {}).get("main_loop") for r in reports]
    if any(loops):  # ping-pong rungs (K6 on): the steady-state KV loop, per tile and warp
        rows += [["main loop per KV tile: instructions / uniform (U*)",
                  *[f"{m['instructions']} / {m['uniform']}" if m else "-" for m in loops]],
                 ["its turn (BAR.SYNC to BAR.ARV): instr. / GMMA / float",
                  *[f"{m['turn']} / {m['turn_mma']} / {m['turn_fp']}" if m else "-" for m in loops]]]
    shown = [op for op in FAMILIES if any(r.get("sass_mix", {}).get(op) for r in reports)]
    for op in shown:
        rows.append([f"{op} ({FAMILIES[op]})", *[str(r.get("sass_mix", {}).get(op, 0)) for r in reports]])
    for r in reports:
        if r["status"] != "ok":
            rows.append([r["kernel"], r["status"]])
    return headers, rows


def record(names: list[str], head_dims=(64, 128, 256), causals=(False, True)) -> dict:
    """Compile every (rung, head_dim, causal) and write results/inspect.json (a rung that does
    not offer a head_dim gets an "unsupported" report)."""
    import cutlass

    from tools.provenance import git_commit

    reports = [inspect(n, native_problem(n, REPORT_PROBLEM.with_(head_dim=d, causal=c)))
               for n in names for d in head_dims for c in causals]
    doc = {"meta": {"arch": ARCH, "cutlass_dsl": getattr(cutlass, "__version__", "?"),
                    "commit": git_commit(), "date": datetime.date.today().isoformat()},
           "reports": reports}
    RECORD_PATH.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def load_recorded() -> dict:
    if not RECORD_PATH.exists():
        raise FileNotFoundError(f"{RECORD_PATH.relative_to(ROOT)} missing: "
                                "run python -m tools.inspect --record")
    return json.loads(RECORD_PATH.read_text())


def main(argv=None) -> int:

    from kernels.registry import rung_module, rung_names
    from tools.report import console as report_console
    from tools.report import rich_table

    parser = argparse.ArgumentParser(prog="python -m tools.inspect", description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", help=f"rungs ({', '.join(rung_names())}); default: all")
    parser.add_argument("--head-dim", type=positive_int,
                        help="default: 128 (with --production-ws: 64, 128 and 256)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.add_argument("--production-ws", action="store_true",
                        help="the steady-state step of the csrc warp-specialized prefill (nvcc, no GPU)")
    parser.add_argument("--record", action="store_true",
                        help="compile every rung at head_dim 64/128/256, causal and not, "
                             "into results/inspect.json")
    args = parser.parse_args(argv)
    if args.production_ws:
        if args.kernels or args.causal or args.record:
            parser.error("--production-ws reports the csrc prefill alone: no rungs, --causal or --record")
        if args.head_dim not in (None, 64, 128, 256):
            parser.error(f"--production-ws: head_dim 64, 128 or 256, got {args.head_dim}")
        dims = [args.head_dim] if args.head_dim else [64, 128, 256]
        facts = {d: production_ws_step(d) for d in dims}
        if args.json:
            print(json.dumps(facts, indent=1))
        else:
            keys = list(next((f for f in facts.values() if f), {"instructions": None}))
            rows = [[str(d)] + [str(f[k]) if f else "-" for k in keys] for d, f in facts.items()]
            title = "production warp-specialized prefill: the steady-state step, per warp (dense bf16)"
            report_console().print(rich_table(["head_dim", *keys], rows, title=title))
        return 0
    names = args.kernels or rung_names()
    unknown = [n for n in names if n not in rung_names()]
    if unknown:
        parser.error(f"not a rung: {', '.join(unknown)} (rungs: {', '.join(rung_names())})")
    if args.record:
        if args.kernels or args.head_dim or args.causal:  # the file holds every rung's reports
            parser.error("--record rewrites results/inspect.json with every rung at head_dim 64/128/256, "
                         "causal and not: it takes no rung names, --head-dim or --causal")
        doc = record(names)
        print(f"wrote {RECORD_PATH.relative_to(ROOT)} ({len(doc['reports'])} reports)")
        return 0
    problem = AttentionProblem(head_dim=args.head_dim or 128, causal=args.causal)
    refused = {n: rung_module(n).can_implement(native_problem(n, problem)) for n in args.kernels}
    refused = {n: reason for n, reason in refused.items() if reason}
    if refused:  # a rung asked for by name that cannot compile this problem
        parser.error("; ".join(refused.values()))
    reports = [inspect(n, native_problem(n, problem)) for n in names]  # FP8 rungs: an e4m3 problem
    if args.json:
        print(json.dumps(reports, indent=1))
    else:
        # rungs that cannot compile this problem are listed under the table: a column of their
        # reasons would squeeze every other column to nothing
        console = report_console()
        compiled = [r for r in reports if r["status"] == "ok"]
        if compiled:
            headers, rows = resources_rows(compiled)
            title = f"sm_90a compile report, head_dim {problem.head_dim}"
            console.print(rich_table(headers, rows, title=title + (", causal" if problem.causal else "")))
        for r in reports:
            if r["status"] != "ok":
                console.print(f"{r['kernel']}: not compiled: {r['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
