"""Execute every notebook in notebooks/ in place, so that it is committed with its outputs.

    python -m tools.execute_notebooks                 # all notebooks/NN_*.ipynb
    python -m tools.execute_notebooks 02_k2_row_group # only these (name or file)

Run it on the H200 host after ``python notebooks/build.py``: the committed notebooks then show
that GPU's checks and timings (the docs site renders them without executing). Each cell has a
time limit; a cell that raises stops that notebook, which is then left unchanged on disk.
Prints one line per notebook and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def execute(path: Path, timeout_s: int, kernel: str):
    """Run ``path`` top to bottom (working directory notebooks/); returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout_s, kernel_name=kernel,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.execute_notebooks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook names (default: all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    args = parser.parse_args(argv)
    try:
        import nbclient  # noqa: F401
        import nbformat
    except ImportError as exc:
        parser.error(f"{exc.name} is missing: pip install -e '.[test]'")

    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.names:
        wanted = {Path(n).stem for n in args.names}
        unknown = wanted - {p.stem for p in paths}
        if unknown:
            have = ", ".join(p.stem for p in paths)
            parser.error(f"no such notebook: {', '.join(sorted(unknown))} (have: {have})")
        paths = [p for p in paths if p.stem in wanted]

    failed = 0
    for path in paths:
        t0 = time.perf_counter()
        try:
            nb = execute(path, args.timeout, args.kernel)
        except Exception as exc:  # CellExecutionError, timeouts, a dead kernel: report and go on
            failed += 1
            first = str(exc).strip().splitlines()
            why = first[-1] if first else type(exc).__name__
            print(f"FAIL  {path.name:28} {time.perf_counter() - t0:6.1f} s  {why}")
            continue
        nbformat.write(nb, path)
        size = path.stat().st_size / 1024
        print(f"ok    {path.name:28} {time.perf_counter() - t0:6.1f} s  {size:6.1f} KiB written")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
