// Standalone test of contiguous-KV decode and prefill (tensor-core and scalar) against a CPU
// reference; prints a correctness table with timings, exits 1 on any mismatch.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I csrc/kernels \
//        csrc/tests/attn_test.cu csrc/kernels/attention/attn_decode.cu \
//        csrc/kernels/attention/attn_prefill.cu -o build/attn_test && ./build/attn_test
#include <algorithm>
#include <cstdio>
#include <string>

#include "../kernels/attention/attn_api.h"
#include "attn_test_common.h"

using namespace kernels::attention;

struct Case {
    const char* kind;  // "decode" | "prefill"
    int b, sq, sk, hq, hkv, d;
    bool causal;
};

static bool run_case(const Case& c, AttnImpl impl) {
    const long q_elems = long(c.b) * c.sq * c.hq * c.d, kv_elems = long(c.b) * c.sk * c.hkv * c.d;
    auto q = attn_test::random_bf16(q_elems, 1), k = attn_test::random_bf16(kv_elems, 2),
         v = attn_test::random_bf16(kv_elems, 3);
    std::vector<float> ref(q_elems);
    const double scale = 1.0 / std::sqrt(double(c.d));
    for (int bi = 0; bi < c.b; ++bi) {
        attn_test::reference_one_batch(q.data() + long(bi) * c.sq * c.hq * c.d, k.data() + long(bi) * c.sk * c.hkv * c.d,
                                       v.data() + long(bi) * c.sk * c.hkv * c.d, ref.data() + long(bi) * c.sq * c.hq * c.d,
                                       c.sq, c.sk, c.hq, c.hkv, c.d, c.causal, scale, long(c.hq) * c.d,
                                       long(c.hkv) * c.d, long(c.hq) * c.d);
    }
    auto* dq = attn_test::to_device(q);
    auto* dk = attn_test::to_device(k);
    auto* dv = attn_test::to_device(v);
    __nv_bfloat16* dout = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&dout, q_elems * 2));
    KERNELS_CUDA_CHECK(cudaMemset(dout, 0xff, q_elems * 2));  // NaN poison

    AttnParams p;
    p.q = dq; p.o = dout; p.k = dk; p.v = dv;
    p.q_batch_stride = p.o_batch_stride = long(c.sq) * c.hq * c.d;
    p.q_token_stride = p.o_token_stride = long(c.hq) * c.d;
    p.q_head_stride = p.o_head_stride = c.d;
    p.k_block_stride = p.v_block_stride = long(c.sk) * c.hkv * c.d;
    p.k_token_stride = p.v_token_stride = long(c.hkv) * c.d;
    p.k_head_stride = p.v_head_stride = c.d;
    p.batch = c.b; p.seqlen_q = c.sq; p.seqlen_k = c.sk;
    p.heads_q = c.hq; p.heads_kv = c.hkv; p.head_dim = c.d; p.group = c.hq / c.hkv;
    p.scale = float(scale); p.scale_log2 = float(scale * 1.4426950408889634); p.causal = c.causal;

    const bool decode = std::string(c.kind) == "decode";
    float* ws = nullptr;
    if (decode) {
        int dev = 0, sms = 0;
        KERNELS_CUDA_CHECK(cudaGetDevice(&dev));
        KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        p.num_splits = decode_num_splits(c.b, c.hkv, c.sq, p.group, c.sk, c.d, sms);
        const int64_t floats = decode_workspace_floats(p.num_splits, c.b, c.hq, c.sq, c.d);
        if (floats > 0) {
            KERNELS_CUDA_CHECK(cudaMalloc(&ws, floats * 4));
            p.o_partial = ws;
            p.lse_partial = ws + int64_t(p.num_splits) * c.b * c.hq * c.sq * c.d;
        }
    }
    auto launch = [&] { decode ? run_decode(p, impl, nullptr) : run_prefill(p, impl, nullptr); };
    launch();
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> out(q_elems);
    KERNELS_CUDA_CHECK(cudaMemcpy(out.data(), dout, q_elems * 2, cudaMemcpyDeviceToHost));
    const double err = attn_test::rel_err(out, ref);
    const float ms = attn_test::time_ms(launch);
    double pairs = 0;
    for (int i = 0; i < c.sq; ++i) pairs += c.causal ? std::clamp(i + c.sk - c.sq + 1, 0, c.sk) : c.sk;
    const double tflops = 4.0 * c.d * c.b * c.hq * pairs / (ms * 1e-3) / 1e12;
    const double gbps = 2.0 * kv_elems * 2 / (ms * 1e-3) / 1e9;
    const bool ok = err <= 1e-2;
    std::printf("%-7s %-6s b%-3d sq%-5d sk%-5d h%d/%d d%-3d %-6s splits %-3d  rel_err %.2e  %8.3f ms  %7.1f TFLOP/s  %7.1f GB/s(KV)  %s\n",
                c.kind, impl == AttnImpl::kTensorCore ? "tc" : "scalar", c.b, c.sq, c.sk, c.hq, c.hkv, c.d,
                c.causal ? "causal" : "", p.num_splits, err, ms, tflops, gbps, ok ? "PASS" : "FAIL");
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(ws);
    return ok;
}

int main() {
    // Small shapes check every head_dim, GQA and tails against the CPU reference; the last
    // rows are the benchmark shapes (their CPU reference takes a few seconds).
    const Case cases[] = {
        {"decode", 2, 1, 1000, 32, 8, 64, false},   {"decode", 2, 1, 1000, 32, 8, 128, false},
        {"decode", 2, 3, 777, 8, 1, 256, true},     {"decode", 1, 1, 4096, 32, 8, 128, false},
        {"prefill", 2, 130, 257, 8, 2, 64, true},   {"prefill", 1, 200, 200, 4, 4, 128, false},
        {"prefill", 1, 200, 300, 8, 2, 128, true},  {"prefill", 1, 97, 130, 4, 1, 256, true},
        {"prefill", 1, 1024, 1024, 4, 4, 128, false},
    };
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every finished case reaches the log
    int failures = 0;
    for (const Case& c : cases)
        for (AttnImpl impl : {AttnImpl::kTensorCore, AttnImpl::kScalar}) {
            const std::string label = std::string(c.kind) + (impl == AttnImpl::kTensorCore ? " tc" : " scalar") +
                                      " d" + std::to_string(c.d) + " sq" + std::to_string(c.sq) + " sk" +
                                      std::to_string(c.sk);
            failures += !attn_test::run_guarded(label.c_str(), [&] { return run_case(c, impl); });
        }
    std::printf("attn_test: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
