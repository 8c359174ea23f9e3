"""Policy over the ops: which implementation runs a call (capabilities, measurements, fallbacks,
overrides).

``attention`` (re-exported here), ``rotary`` and ``fp8`` are the entry points of each family;
``plan.DecodePlan`` (re-exported) runs a serving loop's paged decode planned once per step;
``context_parallel`` runs ``attention`` over a sequence sharded across processes.
"""

from .attention import BACKENDS, ENV_VAR, attention, routing_table, select_backend, use_backend
from .plan import DecodePlan

__all__ = ["BACKENDS", "ENV_VAR", "DecodePlan", "attention", "routing_table", "select_backend", "use_backend"]
