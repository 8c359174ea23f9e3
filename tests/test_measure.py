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
