"""FlashAttention forward for Hopper: the CuTe-DSL ladder (k1.py, k2.py, ...), the shared
harness, and the Python layer of the production CUDA kernels (extension/)."""
