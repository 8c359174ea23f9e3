"""Python side of the production CUDA kernels in csrc/.

Layers (dependencies point down only):
    backend/  policy, one module per family: ``attention`` (capability checks, fallbacks
              cuda -> fa4 -> torch, env override, strict selection with ``use_backend``),
              ``rotary`` (kernel or torch path, autograd), ``fp8`` (scaling recipes,
              ``fp8_autocast``, FP8 linear layers)
    ops/      stateless wrappers, the only code that touches the compiled bindings
    loader    finds and imports the modules ``python -m tools.build_ext`` put in lib/
"""
