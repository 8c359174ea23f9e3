"""Pieces shared by the CuTe-DSL rungs (kernels/k1.py, k2.py, ...).

- ``launch``  host side: input validation, torch -> CuTe conversion, fake tensors, compile cache
- ``tensors`` trace side: BSHD views with a static head dimension
- ``softmax`` device side: fast exp2, sub-warp row reductions, the online-softmax step
- ``mask``    device side: causal (bottom-right) and sequence-tail masking, KV loop bounds
"""
