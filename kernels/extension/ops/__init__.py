"""Stateless wrappers over the compiled bindings; each raises RuntimeError when its module
is not built. Policy (fallbacks, capability checks) lives in kernels.extension.backend."""
