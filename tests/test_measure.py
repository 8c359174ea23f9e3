"""tools.measure's timing rounds, on a CPU: interleaved, and each kernel keeps its fastest."""

from tools.measure import fastest_rounds


def test_rounds_interleave_and_keep_each_kernels_fastest():
    calls = []
    # A slow spell of the GPU during the second round, and b is truly slower than a.
    medians = {"a": iter([1.0, 5.0, 1.1]), "b": iter([2.0, 6.0, 1.9])}

    def timed(name):
        def round_():
            calls.append(name)
            return {"median": next(medians[name]), "p20": 0.0, "p80": 0.0}
        return round_

    best = fastest_rounds({"a": timed("a"), "b": timed("b")}, rounds=3)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert best["a"]["median"] == 1.0 and best["b"]["median"] == 1.9


def test_no_rounds_times_nothing():
    assert fastest_rounds({"a": lambda: 1 / 0}, rounds=0) == {}


class TogetherTimer:
    """A suite's context whose interleaved timing (time_together) records the names it was
    handed, all in one call, and times each at a median of 2 ms."""

    asked = None

    def time_together(self, calls):
        self.asked = list(calls)
        return {name: {"median": 2.0, "p20": 1.0, "p80": 4.0, "reps": 10} for name in calls}


def test_attention_suite_times_a_problems_checked_rows_together(monkeypatch):
    """The attention suite checks every row of a problem, then times the correct ones in one
    interleaved timing; a raising peer or a wrong answer is recorded, not timed; rows keep their
    order, and a graph's time is per call."""
    import torch

    from tools.suites import attention as suite

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    ref = torch.linspace(1, 2, 8)

    def raises():
        raise RuntimeError("no kernel for this shape\nsecond line")

    checked = [suite._check("cuda-a", {}, ref.clone, ref, nbytes=1e9),
               suite._check("fa4-b", {}, raises, ref),
               suite._check("cuda-c", {}, lambda: ref * 2, ref),
               suite._check("cuda-d", {}, ref.clone, ref, flops=2e12, calls=4)]

    ctx = TogetherTimer()
    rows = suite._timed_together(ctx, checked)
    assert [row["kernel"] for row in rows] == ["cuda-a", "fa4-b", "cuda-c", "cuda-d"]
    assert len(ctx.asked) == 2
    assert rows[0]["gbps"] == 1e9 / 2e-3 / 1e9 and rows[0]["rel_err"] == 0
    assert rows[1]["status"] == "unsupported: RuntimeError: no kernel for this shape"
    assert rows[1]["ms"] is None
    assert rows[2]["status"].startswith("wrong: rel_err") and rows[2]["ms"] is None
    assert rows[3]["ms"]["median"] == 0.5 and rows[3]["tflops"] == 2e12 / 0.5e-3 / 1e12


def test_decode_rows_read_their_copies_in_turn(monkeypatch):
    """Decode K/V that fit in L2 are read from copies in turn: a graph of 8 calls takes a number
    of copies that divides 8 (7 would read one copy twice in a row, from L2), and an eager row
    timed together with others runs its copies in turn, one per call."""
    import kernels.harness.timing as timing
    from tools.suites import attention as suite

    monkeypatch.setattr(timing, "l2_bytes", lambda: 50 << 20)
    assert timing.rotation_count(16 << 20, limit=8) == 7
    assert [timing.graph_copies(n << 20, 8) for n in (16, 30, 60, 200)] == [8, 4, 2, 1]
    seen = []
    call = suite._in_turn(lambda kc, vc: seen.append((kc, vc)), [("k0", "v0"), ("k1", "v1"), ("k2", "v2")])
    for _ in range(4):
        call()
    assert seen == [("k0", "v0"), ("k1", "v1"), ("k2", "v2"), ("k0", "v0")]


def test_fp8_suite_times_a_problems_rows_together():
    """The fp8 suite hands every checked row of a problem to one interleaved timing and writes
    each row's time back in place; a graph row's time is per GEMM, not per replay."""
    from tools.suites.fp8 import _time_rows

    ours, peer = {"kernel": "ours"}, {"kernel": "peer"}
    ctx = TogetherTimer()
    _time_rows(ctx, {"ours": (ours, print), "peer": (peer, print)}, ((),), flops=2e12, calls_per_launch=4)
    assert ctx.asked == ["ours", "peer"]
    assert ours["ms"]["median"] == 0.5 and ours["ms"]["p80"] == 1.0
    assert peer["tflops"] == 2e12 / 0.5e-3 / 1e12
