"""compute-sanitizer's racecheck, memcheck and synccheck on K13 and every rung after it
(``python -m tools.sanitize``): no hazard, no error, every launch right."""


import pytest

from kernels.registry import rung_names
from tools import sanitize

pytestmark = pytest.mark.gpu

# K13 is the first rung whose consumers read what the producer writes with plain stores.
FIRST_CHECKED = 13
CHECKED = [n for n in rung_names() if int(n[1:]) >= FIRST_CHECKED]


@pytest.mark.parametrize("tool", sanitize.TOOLS)
@pytest.mark.parametrize("name", CHECKED)
def test_sanitizer_is_clean(name, tool):
    try:
        sanitize.sanitizer()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    clean, detail = sanitize.run_tool(tool, name, head_dim=128)
    assert clean, f"{name} {tool}: {detail}"
