"""Benchmark suites: each module ``tools/suites/<name>.py`` has ``run(ctx) -> list[dict]``
returning rows in the results schema (docs/design.md). tools.bench adds the provenance."""
