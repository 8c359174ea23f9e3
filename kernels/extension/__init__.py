"""Python side of the production CUDA kernels in csrc/.

Layers (dependencies point down only):
    backend/  policy: capability checks, fallbacks (cuda -> fa4 -> torch), env override,
              strict selection (``use_backend``)
    ops/      stateless wrappers, the only code that touches the compiled bindings
    loader    finds and imports the modules ``python -m tools.build_ext`` put in lib/
"""
