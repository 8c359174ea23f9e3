"""Policy over the ops: which implementation runs a call (capabilities, measurements, fallbacks,
overrides).

``attention`` (re-exported here), ``rotary`` and ``fp8`` are the entry points of each family;
``plan.DecodePlan`` and ``plan.PrefillPlan`` (re-exported) run a serving loop's paged decode and
ragged prefill planned once per step;
``context_parallel`` runs ``attention`` over a sequence sharded across processes.
"""

from .attention import BACKENDS, ENV_VAR, attention, routing_table, select_backend, use_backend
from .plan import DecodePlan, PrefillPlan

__all__ = ["BACKENDS", "ENV_VAR", "DecodePlan", "PrefillPlan", "attention", "routing_table", "select_backend",
           "use_backend"]
