"""Command-line tools: python -m tools.compare | bench | inspect | report | build_ext | execute_notebooks."""
