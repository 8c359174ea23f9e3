"""Policy over the ops: which implementation runs a call (capabilities, measurements, fallbacks,
overrides).

``attention`` (re-exported here), ``rotary`` and ``fp8`` are the entry points of each family;
``context_parallel`` runs ``attention`` over a sequence sharded across processes.
"""

from .attention import BACKENDS, ENV_VAR, attention, routing_table, select_backend, use_backend

__all__ = ["BACKENDS", "ENV_VAR", "attention", "routing_table", "select_backend", "use_backend"]
