"""Policy over the ops: which implementation runs a call (capabilities, fallbacks, overrides)."""

from .attention import BACKENDS, ENV_VAR, attention, select_backend, use_backend

__all__ = ["BACKENDS", "ENV_VAR", "attention", "select_backend", "use_backend"]
