// Standalone test of paged decode and ragged paged prefill (random page tables, several page
// sizes) against a CPU reference; prints a correctness table with timings, exits 1 on failure.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I csrc/kernels \
//        csrc/tests/attn_paged_test.cu csrc/kernels/attention/attn_decode.cu \
//        csrc/kernels/attention/attn_prefill.cu -o build/attn_paged_test && ./build/attn_paged_test
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>

#include "../kernels/attention/attn_api.h"
#include "attn_test_common.h"

using namespace kernels::attention;

// decode: q [B, 1, Hq, D]; prefill: packed q [sum(q_lens), Hq, D].
static bool run_case(bool decode, const std::vector<int>& q_lens, const std::vector<int>& k_lens, int hq, int hkv,
                     int d, int page_size, bool causal, AttnImpl impl) {
    const int b = int(k_lens.size());
    const int max_k = *std::max_element(k_lens.begin(), k_lens.end());
    const int max_pages = (max_k + page_size - 1) / page_size;
    const int num_pages = b * max_pages + 5;
    std::vector<int> cu(b + 1, 0);
    for (int i = 0; i < b; ++i) cu[i + 1] = cu[i] + q_lens[i];
    const long total_q = cu[b];
    const long row = long(hq) * d, kv_row = long(hkv) * d;
    auto q = attn_test::random_bf16(total_q * row, 11);
    auto k_cache = attn_test::random_bf16(long(num_pages) * page_size * kv_row, 12);
    auto v_cache = attn_test::random_bf16(long(num_pages) * page_size * kv_row, 13);
    std::vector<int> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(page_size));
    std::vector<int> table(perm.begin(), perm.begin() + long(b) * max_pages);

    // CPU reference on the gathered (contiguous) keys of each batch.
    std::vector<float> ref(total_q * row);
    const double scale = 1.0 / std::sqrt(double(d));
    for (int bi = 0; bi < b; ++bi) {
        std::vector<__nv_bfloat16> kb(std::max(1, k_lens[bi]) * kv_row), vb(kb.size());
        for (int j = 0; j < k_lens[bi]; ++j) {
            const long src = (long(table[bi * max_pages + j / page_size]) * page_size + j % page_size) * kv_row;
            std::copy_n(k_cache.begin() + src, kv_row, kb.begin() + j * kv_row);
            std::copy_n(v_cache.begin() + src, kv_row, vb.begin() + j * kv_row);
        }
        attn_test::reference_one_batch(q.data() + cu[bi] * row, kb.data(), vb.data(), ref.data() + cu[bi] * row,
                                       q_lens[bi], k_lens[bi], hq, hkv, d, causal, scale, row, kv_row, row);
    }

    auto* dq = attn_test::to_device(q);
    auto* dk = attn_test::to_device(k_cache);
    auto* dv = attn_test::to_device(v_cache);
    auto* dtable = attn_test::to_device(table);
    auto* dlens = attn_test::to_device(k_lens);
    auto* dcu = attn_test::to_device(cu);
    __nv_bfloat16* dout = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&dout, total_q * row * 2));
    KERNELS_CUDA_CHECK(cudaMemset(dout, 0xff, total_q * row * 2));

    AttnParams p;
    p.q = dq; p.o = dout; p.k = dk; p.v = dv;
    p.q_token_stride = p.o_token_stride = row;
    p.q_head_stride = p.o_head_stride = d;
    p.k_block_stride = p.v_block_stride = long(page_size) * kv_row;
    p.k_token_stride = p.v_token_stride = kv_row;
    p.k_head_stride = p.v_head_stride = d;
    p.page_table = dtable; p.page_table_batch_stride = max_pages; p.seqlens_k = dlens;
    p.page_size = page_size; p.max_pages = max_pages;
    p.batch = b; p.heads_q = hq; p.heads_kv = hkv; p.head_dim = d; p.group = hq / hkv;
    p.scale = float(scale); p.scale_log2 = float(scale * 1.4426950408889634); p.causal = causal;

    float* ws = nullptr;
    int32_t* dschedule = nullptr;
    if (decode) {
        p.seqlen_q = 1;
        p.q_batch_stride = p.o_batch_stride = row;
        int dev = 0, sms = 0;
        KERNELS_CUDA_CHECK(cudaGetDevice(&dev));
        KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        p.num_splits = decode_num_splits(b, hkv, 1, p.group, max_pages * page_size, d, sms, /*paged=*/true);
        const int64_t floats = decode_workspace_floats(p.num_splits, b, hq, 1, d);
        if (floats > 0) {
            KERNELS_CUDA_CHECK(cudaMalloc(&ws, floats * 4));
            p.o_partial = ws;
            p.lse_partial = ws + int64_t(p.num_splits) * b * hq * d;
        }
    } else {
        p.seqlen_q = *std::max_element(q_lens.begin(), q_lens.end());
        const auto schedule = make_packed_q_schedule(cu.data(), b, p.group, prefill_block_m(d));
        dschedule = attn_test::to_device(schedule);
        p.cu_seqlens_q = dcu; p.q_schedule = dschedule; p.num_q_tiles = int(schedule.size() / 2);
    }
    auto launch = [&] { decode ? run_decode(p, impl, nullptr) : run_prefill(p, impl, nullptr); };
    launch();
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> out(total_q * row);
    KERNELS_CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
    const double err = attn_test::rel_err(out, ref);
    const float ms = attn_test::time_ms(launch);
    double kv_bytes = 0;
    for (int len : k_lens) kv_bytes += 2.0 * len * kv_row * 2;
    const bool ok = err <= 1e-2;
    std::printf("%-13s %-6s b%-3d hq%d/%d d%-3d page %-4d %-6s  rel_err %.2e  %8.3f ms  %7.1f GB/s(KV)  %s\n",
                decode ? "paged-decode" : "paged-prefill", impl == AttnImpl::kTensorCore ? "tc" : "scalar", b, hq, hkv,
                d, page_size, causal ? "causal" : "", err, ms, kv_bytes / (ms * 1e-3) / 1e9, ok ? "PASS" : "FAIL");
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dtable); cudaFree(dlens); cudaFree(dcu);
    cudaFree(dout); cudaFree(ws); cudaFree(dschedule);
    return ok;
}

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every finished case reaches the log
    int failures = 0;
    // An exception (launch error, unsupported shape) fails that case; the others still run.
    auto guarded = [](bool decode, const std::vector<int>& q_lens, const std::vector<int>& k_lens, int hq, int hkv,
                      int d, int page_size, bool causal, AttnImpl impl) {
        const std::string label = std::string(decode ? "paged decode" : "paged prefill") + " d" + std::to_string(d) +
                                  " page " + std::to_string(page_size);
        return attn_test::run_guarded(label.c_str(), [&] {
            return run_case(decode, q_lens, k_lens, hq, hkv, d, page_size, causal, impl);
        });
    };
    for (AttnImpl impl : {AttnImpl::kTensorCore, AttnImpl::kScalar}) {
        for (int page : {1, 16, 64, 256}) {
            failures += !guarded(true, {1, 1, 1, 1}, {1000, 1, 333, 64}, 32, 8, 128, page, false, impl);
            failures += !guarded(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 128, page, true, impl);
        }
        failures += !guarded(true, {1, 1}, {500, 77}, 8, 1, 64, 16, true, impl);
        failures += !guarded(false, {33, 5}, {33, 200}, 8, 8, 256, 16, false, impl);
        failures += !guarded(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 64, 64, false, impl);
    }
    // The benchmark shape: B=16, Sk=4096, 32/8 heads, D=128, page 64.
    failures += !guarded(true, std::vector<int>(16, 1), std::vector<int>(16, 4096), 32, 8, 128, 64, false,
                         AttnImpl::kTensorCore);
    std::printf("attn_paged_test: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
