"""Python side of the production CUDA kernels in csrc/.

Layers (dependencies point down only):
    backend/  policy, one module per family: ``attention`` (capability checks, fallbacks
              cuda -> fa4 -> torch, env override, strict selection with ``use_backend``),
              ``rotary`` (kernel or torch path, autograd), ``fp8`` (scaling recipes,
              ``fp8_autocast``, FP8 linear layers), ``context_parallel`` (attention over a
              sequence sharded across the ranks of a torch.distributed group, built on
              ``attention``)
    ops/      stateless wrappers, the only code that touches the compiled bindings; the
              kernels' limits (e.g. ``ops.attention.HEAD_DIMS``) are defined there
    loader    finds and imports the modules ``python -m tools.build_ext`` put in lib/

Nothing here imports ``kernels.registry``: the registry imports this layer.
"""
