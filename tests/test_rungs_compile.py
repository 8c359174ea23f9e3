"""Each rung compiles for sm_90a on a CPU-only machine, with the instructions its idea implies.

These are the claims the worklog makes about each rung ("K2 does its math in FFMA and shuffles
through SHFL", "K4 runs on HGMMA"), checked against the disassembly.
"""

import re

import pytest

from kernels.harness import AttentionProblem
from kernels.registry import rung_module, rung_names
from tools.inspect import REPORT_PROBLEM, inspect, native_problem

# rung -> (opcodes that must appear, opcodes that must not)
SPILLS = {"LDL", "STL"}
EXPECTED = {
    "k1": ({"FFMA", "LDG", "MUFU"}, {"HGMMA", "HMMA"} | SPILLS),
    "k2": ({"FFMA", "LDS", "STS", "SHFL", "MUFU", "BAR"}, {"HGMMA", "HMMA"} | SPILLS),
    # TMA rungs: every Q/K/V tile arrives by UTMALDG, so no LDG at all.
    "k3": ({"FFMA", "LDS", "SHFL", "UTMALDG", "SYNCS"}, {"LDG", "HGMMA", "HMMA"} | SPILLS),
    # WGMMA; O leaves from the fragments (STG), no register reallocation yet.
    "k4": ({"HGMMA", "UTMALDG", "SYNCS", "SHFL", "MUFU", "STG"},
           {"LDG", "HMMA", "USETMAXREG", "UTMASTG"} | SPILLS),
    # Warp specialization: setmaxnreg on both sides of the role switch.
    "k5": ({"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "STG"}, {"LDG", "HMMA", "UTMASTG"} | SPILLS),
    "k6": ({"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "STG", "BAR"}, {"LDG", "HMMA", "UTMASTG"} | SPILLS),
    "k7": ({"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "STG", "BAR"}, {"LDG", "HMMA", "UTMASTG"} | SPILLS),
    # TMA-store epilogue: O leaves by UTMASTG, no STG left.
    "k8": ({"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "BAR"}, {"LDG", "STG", "HMMA"} | SPILLS),
    "k9": ({"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "BAR"}, {"LDG", "STG", "HMMA"} | SPILLS),
    "k10": ({"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "BAR"}, {"LDG", "STG", "HMMA"} | SPILLS),
    "k11": ({"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "BAR"}, {"LDG", "STG", "HMMA"} | SPILLS),
    # FP8: every warpgroup MMA is QGMMA (e4m3 x e4m3 -> fp32, k32), no bf16 HGMMA left.
    "k12": ({"QGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "BAR"},
            {"HGMMA", "LDG", "STG", "HMMA"} | SPILLS),
    # The dynamic scheduler: tickets by a global atomic; the counter's reset is the only STG.
    "k13": ({"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "BAR", "ATOMG", "STG"},
            {"LDG", "HMMA"} | SPILLS),
}
# Facts beyond the opcode mix (tools.inspect.sass_facts), from the rung that introduces them on.
# every TMA load in the producer's region
WARP_SPECIALIZED = {"k5", "k6", "k7", "k8", "k9", "k10", "k11", "k12", "k13"}
# named barriers: BAR.SYNC / BAR.ARV on ids other than 0
PINGPONG = {"k6", "k7", "k8", "k9", "k10", "k11", "k12", "k13"}
# Rungs whose dot products run on tensor cores (derived: HGMMA or QGMMA is expected): FFMA may
# remain in the softmax (one per score: the scale folded into the exponent), but a scalar
# dot-product loop over head_dim would show as thousands of them. A QGMMA (k32) is two k16 steps.
TENSOR_CORE_RUNGS = {name for name, (present, _) in EXPECTED.items() if present & {"HGMMA", "QGMMA"}}
MAX_FFMA_PER_K16_STEP = 8
FP8_MMA = r"QGMMA\.64x\d+x32\.F32\.E4M3\.E4M3"  # e4m3 x e4m3, fp32 accumulators
FP8_RUNGS = {"k12"}
# From K11 on the turn holds only the GEMM issues (tools.inspect.main_loop_facts): no
# floating-point work between BAR.SYNC and BAR.ARV (the O rescale left it). Against the rung
# before at the same shape, the rung that introduces it (SHORT_TURN_INTRODUCED) has a shorter
# turn and fewer instructions in the loop, at least 8 of them fewer on the uniform datapath
# (its loop's bookkeeping, descriptors, loop bound, release lane, is built once; D = 256,
# where Q's descriptors stay in the loop: 8).
SHORT_TURN = {"k11", "k12", "k13"}
SHORT_TURN_INTRODUCED = {"k11"}
VARIANTS = [(d, c) for d in (64, 128) for c in (False, True)] + [(256, False)]


def test_every_rung_has_expectations():
    assert set(rung_names()) <= set(EXPECTED), "add the new rung's SASS expectations here"


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name, head_dim, causal, **knobs):
        key = (name, head_dim, causal, tuple(sorted(knobs.items())))
        if key not in cache:  # in the rung's own dtype (e4m3 for an FP8 rung)
            problem = native_problem(name, REPORT_PROBLEM.with_(head_dim=head_dim, causal=causal))
            cache[key] = inspect(name, problem, **knobs)
        return cache[key]

    return get


@pytest.mark.parametrize("head_dim,causal", VARIANTS, ids=lambda v: str(v))
@pytest.mark.parametrize("name", rung_names())
def test_rung_sass(name, head_dim, causal, reports):
    if head_dim not in rung_module(name).HEAD_DIMS:
        pytest.skip(f"{name} does not offer head_dim {head_dim}")
    report = reports(name, head_dim, causal)
    assert report["status"] == "ok", report["status"]
    present, absent = EXPECTED[name]
    mix = report["sass_mix"]
    assert not [op for op in present if mix[op] == 0], f"missing from SASS: {present}, mix {mix}"
    assert not [op for op in absent if mix[op] > 0], f"unexpected in SASS: {absent}, mix {mix}"
    if name in TENSOR_CORE_RUNGS:
        k16_steps = mix["HGMMA"] + 2 * mix["QGMMA"]
        assert mix["FFMA"] <= MAX_FFMA_PER_K16_STEP * k16_steps, \
            f"{mix['FFMA']} FFMA: a scalar dot-product loop?"
    assert report["local_bytes"] == 0 and report["stack_frame_bytes"] == 0, \
        "registers spilled, or a register array went to local memory"
    assert 0 < report["registers"] <= 255
    facts = report["sass_facts"]
    if name in FP8_RUNGS:
        assert facts["warpgroup_mma"] and all(re.fullmatch(FP8_MMA, m) for m in facts["warpgroup_mma"]), facts
    if name in WARP_SPECIALIZED:
        assert facts["tma_loads_in_producer"], "a TMA load outside the producer warpgroup's region"
    if name in PINGPONG:
        assert facts["named_barrier_syncs"] >= 1 and facts["named_barrier_arrives"] >= 2, facts
        assert facts["main_loop"], "no KV loop with one BAR.SYNC and one BAR.ARV found"
    else:
        assert facts["named_barrier_arrives"] == 0, f"{name}: named-barrier arrives before K6: {facts}"
    if name in SHORT_TURN:
        loop = facts["main_loop"]
        if head_dim in getattr(rung_module(name), "RESCALE_BEFORE_PV_HEAD_DIMS", ()):
            # the default puts O's rescale (D / 2 multiplies) back inside the turn here
            assert loop["turn_fp"] >= head_dim // 4, f"the O rescale is not inside the turn: {loop}"
        else:
            assert loop["turn_fp"] == 0, f"floating-point work inside the turn: {loop}"


@pytest.mark.parametrize("head_dim,causal", VARIANTS, ids=lambda v: str(v))
@pytest.mark.parametrize("name", [n for n in rung_names() if n in SHORT_TURN_INTRODUCED])
def test_turn_holds_only_the_gemm_issues(name, head_dim, causal, reports):
    prev = rung_names()[rung_names().index(name) - 1]
    # the idea alone: with the O rescale after the wait for P V at every head dim (the default
    # but at RESCALE_BEFORE_PV_HEAD_DIMS, so elsewhere test_rung_sass's compile serves)
    rescale_before_pv = head_dim in getattr(rung_module(name), "RESCALE_BEFORE_PV_HEAD_DIMS", ())
    knobs = {"rescale_before_pv": False} if rescale_before_pv else {}
    loop = reports(name, head_dim, causal, **knobs)["sass_facts"]["main_loop"]
    before = reports(prev, head_dim, causal)["sass_facts"]["main_loop"]
    assert loop and before, (loop, before)
    assert loop["turn_fp"] == 0, f"floating-point work inside the turn: {loop}"
    assert loop["turn"] < before["turn"], f"turn not shorter than {prev}'s: {loop} vs {before}"
    assert loop["instructions"] < before["instructions"], f"{loop} vs {prev} {before}"
    assert loop["uniform"] <= before["uniform"] - 8, f"bookkeeping back in the loop: {loop} vs {before}"


@pytest.mark.parametrize("head_dim,causal", VARIANTS, ids=lambda v: str(v))
def test_k13_changes_the_schedule_not_the_loop(head_dim, causal, reports):
    """K13's idea is where the tiles come from: two global atomics (a ticket per tile, the
    CTA's count at the end) and the counter's two-word reset, none with one CTA per tile; its
    KV loop is K11's: the same MMAs, softmax and waits, in the same places, with ptxas's
    register and uniform-datapath choices moving a few integer instructions (at most 5)."""
    dynamic = reports("k13", head_dim, causal)  # its default below LONG_KEYS keys: test_rung_sass's compile
    one_tile = reports("k13", head_dim, causal, ctas=rung_module("k13").ONE_TILE_PER_CTA)
    assert (dynamic["sass_mix"]["ATOMG"], dynamic["sass_mix"]["STG"]) == (2, 2), dynamic["sass_mix"]
    assert (one_tile["sass_mix"]["ATOMG"], one_tile["sass_mix"]["STG"]) == (0, 0), one_tile["sass_mix"]
    k11 = reports("k11", head_dim, causal)["sass_facts"]["main_loop"]
    for loop in (dynamic["sass_facts"]["main_loop"], one_tile["sass_facts"]["main_loop"]):
        moved = ("instructions", "uniform", "turn")
        kept = [k for k in k11 if k not in moved]
        assert {k: loop[k] for k in kept} == {k: k11[k] for k in kept}, (loop, k11)
        assert all(abs(loop[k] - k11[k]) <= 5 for k in moved), (loop, k11)


@pytest.mark.parametrize("name", [n for n in rung_names() if n in FP8_RUNGS])
def test_fp8_rung_sass_at_head_dim_256_causal(name, reports):
    """The FP8 rungs' claims at the one variant the matrix above leaves out."""
    test_rung_sass(name, 256, True, reports)


@pytest.mark.parametrize("name", [n for n in rung_names() if n in WARP_SPECIALIZED])
def test_warp_specialized_rungs_take_a_tile_plan(name):
    """The tuning knob pages use for ablations: a TilePlan other than the default compiles."""
    from kernels.cute.fmha import TilePlan

    module = rung_module(name)
    plan = TilePlan(head_dim=128, consumer_warpgroups=2, block_n=64, num_stages=3, producer_warps=4)
    compiled = module.compile_for_inspect(native_problem(name, AttentionProblem(head_dim=128)), plan=plan)
    assert compiled.__cubin__


def test_exp2_fma_every_moves_a_share_of_the_exponentials_off_mufu(reports):
    """K12's lab knob ``exp2_fma_every=4``: one P exponential in four runs on the FMA / ALU pipes
    (kernels.cute.softmax.exp2_fma), so the main loop's MUFU.EX2 count drops by a quarter of P's
    (the two row-scale exponentials stay), at the same registers and without local memory."""
    from tools.inspect import _artifact, main_loop_facts, resource_usage, sass_of

    problem = native_problem("k12", REPORT_PROBLEM)
    default = reports("k12", 128, False)
    compiled = rung_module("k12").compile_for_inspect(problem, exp2_fma_every=4)
    cubin = _artifact(compiled.__cubin__, binary=True)
    facts = main_loop_facts(sass_of(cubin))
    p_exps = default["sass_facts"]["main_loop"]["exp2"] - 2
    assert facts["exp2"] == default["sass_facts"]["main_loop"]["exp2"] - p_exps // 4, facts
    usage = resource_usage(cubin)
    assert usage["local_bytes"] == 0 and usage["registers"] == default["registers"], usage


def test_rescale_threshold_puts_os_rescale_behind_a_warp_vote(reports):
    """K12's ``rescale_threshold`` (K11's lazy rescale, on by default): O's D / 2 multiplies per
    thread (two rows of D / 4 registers) sit behind a branch on a warp vote, skipped while no row
    of the warp moved its max, at the recorded registers and without local memory."""
    from tools.inspect import _artifact, branch_target, parse_sass, resource_usage, sass_of

    problem = native_problem("k12", REPORT_PROBLEM)
    compiled = rung_module("k12").compile_for_inspect(problem)
    cubin = _artifact(compiled.__cubin__, binary=True)
    ops, labels = parse_sass(sass_of(cubin))
    guarded = []  # FMULs skipped by a predicated forward branch right after a VOTE.ANY
    for i, x in enumerate(ops):
        if not x["op"].startswith("VOTE.ANY"):
            continue
        j = next(j for j in range(i + 1, len(ops)) if ops[j]["op"].startswith("BRA"))
        target = branch_target(ops[j], labels)
        if ops[j]["pred"] and target > j:
            guarded.append(sum(1 for y in ops[j + 1:target] if y["op"].startswith("FMUL")))
    assert guarded and all(n == 128 // 2 for n in guarded), guarded  # the unmasked and the masked loop
    usage = resource_usage(cubin)
    assert usage["local_bytes"] == 0 and usage["registers"] == reports("k12", 128, False)["registers"], usage


def test_exp2_fma_arithmetic_model():
    """A float32 model of kernels.cute.softmax.exp2_fma's instruction sequence (the floor by adding
    1.5 * 2^23 rounded down, the cubic, the integer add into the exponent field): within 1e-4 of
    exp2 on the range P's exponents take ([-126, 8]), exact at the integers, 0 below -126."""
    import numpy as np

    from kernels.cute.softmax import EXP2_POLY

    c1, c2, c3 = (np.float32(c) for c in EXP2_POLY)
    x = np.concatenate([np.linspace(-130, 8, 400_001), np.arange(-126, 9)]).astype(np.float32)
    xc = np.maximum(x, np.float32(-127))
    big = np.float32(1.5 * 2**23)
    xr = (xc.astype(np.float64) + big).astype(np.float32)  # exact here: the sum needs no rounding
    xr = np.where(xr.astype(np.float64) > xc.astype(np.float64) + big, np.nextafter(xr, -np.inf), xr)  # .rm
    f = xc - (xr - big)
    p = (c3 * f + c2) * f
    p = (p + c1) * f + np.float32(1)
    bits = (p.view(np.uint32).astype(np.int64) + (xr.view(np.int32).astype(np.int64) << 23)) & 0xFFFFFFFF
    got = np.where(xc < -126, np.float32(0), bits.astype(np.uint32).view(np.float32))
    want = np.exp2(x.astype(np.float64))
    inside = x >= -126
    assert np.max(np.abs(got[inside] - want[inside]) / want[inside]) < 1e-4
    integers = np.isin(x, np.arange(-126, 9).astype(np.float32))
    assert np.array_equal(got[integers], want[integers].astype(np.float32))
    assert not got[x < -127].any()


@pytest.mark.parametrize("head_dim,causal", VARIANTS, ids=lambda v: str(v))
def test_pv_wait_knob_moves_the_wait_for_pv_and_not_ks_release(head_dim, causal, reports):
    """K11's knob (kernels.cute.fmha.hold_pv_wait_behind): left to itself, ptxas puts the wait
    for the warpgroup's own P V right after the row max, with no exponential before it. Behind
    the row factors (FA4's compiled order; K11's default at D = 128) the wait follows the two
    factors' exponentials and the scaled scores (an FFMA per P exponential), most P
    exponentials still after it. K's release (the first arrive after the turn) stays where it
    was, at the same registers and without local memory."""
    report = reports("k11", head_dim, causal)
    default = report["sass_facts"]["main_loop"]
    on_by_default = head_dim == 128
    # the default's compile serves for its own setting: the checks below tell held from off
    off = default if not on_by_default else \
        reports("k11", head_dim, causal, pv_wait_after_row_scale=False)["sass_facts"]["main_loop"]
    held_report = report if on_by_default else reports("k11", head_dim, causal, pv_wait_after_row_scale=True)
    held = held_report["sass_facts"]["main_loop"]
    assert held != off, held
    assert off["exp2_under_own_pv"] == 0, off
    assert held["pv_wait"] > off["pv_wait"] and held["exp2"] == off["exp2"], (held, off)
    assert held["first_arrive"] == off["first_arrive"], f"K's release moved: {held} vs {off}"
    assert 2 <= held["exp2_under_own_pv"] < held["exp2"] // 2, held
    assert held["ffma_under_own_pv"] >= held["exp2"] - 2, held
    assert held_report["local_bytes"] == 0 and held_report["registers"] == report["registers"], held_report
