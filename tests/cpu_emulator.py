"""Run a generated kernel on the CPU: the CUDA source compiled as plain C++ (g++ -std=c++20), the
blocks of the launch one after another (the blocks of a thread-block cluster at once, each with its
own shared memory, which the others reach through `cluster_map`), each block's threads as real
threads, so `__syncthreads` is a barrier, `__shared__` memory is shared by the block, and warp shuffles exchange values between
the 32 threads of a warp. Enough to check index math, tiling, barriers and scans against PyTorch on a
machine with no GPU (float32 tensors; inline PTX only where it stands behind a function given here in C++: the
3xTF32 GEMM's). The
GPU's verifier stays the judge; this catches a wrong window or a lost carry early."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import torch

from agents.expert.codegen import MATH_PRELUDE, PRELUDE
from agents.expert.opgraph import is_draw
from runtime.correctness import copy_model, in_float64
from runtime.draws import Record, Replay
from runtime.kernel_api import kernel_span
from tasks import tensor_attribute

CPU_PRELUDE = r"""#include <barrier>
#include <functional>
#include <vector>
#include <cmath>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __cluster_dims__(...)
#define __grid_constant__
struct EmuDim { long long x = 0, y = 0, z = 0; };
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
// a 16-byte access off a 16-byte boundary faults on the GPU: here it stops the run (x86 would allow it)
template <class T, class P> inline T* emu_vec(P* p) {
    if (reinterpret_cast<unsigned long long>(p) & 15ULL) { fprintf(stderr, "misaligned 16-byte access\n"); abort(); }
    return reinterpret_cast<T*>(p);
}
static EmuDim blockDim, gridDim;
static thread_local EmuDim threadIdx, blockIdx;
// what each block of a running cluster has of its own (blocks of a cluster run at once; a launch
// without clusters runs its blocks one at a time, each a cluster of one)
struct EmuBlock {
    std::barrier<>* bar = nullptr;
    std::vector<std::barrier<>*> warps;
    std::vector<std::barrier<>*> wgs;  // a warpgroup's 128 threads (its MMAs are collective)
    alignas(8) unsigned char warp_buf[32][32][8];
    unsigned char* smem = nullptr;
    unsigned long long addr = 0;  // smem[0]'s shared address: past the static shared memory where a kernel has some
    int vote = 0;  // __syncthreads_or's
};
static thread_local EmuBlock* emu_blk;
static thread_local unsigned emu_rank;
static EmuBlock* emu_cluster;
static std::barrier<>* emu_cluster_barrier;
#define emu_block_barrier (emu_blk->bar)
#define emu_warp_barriers (emu_blk->warps)
#define emu_warp_buf (emu_blk->warp_buf)
#define emu_dyn_smem (emu_blk->smem)
// a dynamic shared pointer's shared address, and the dynamic shared byte at a shared address (a read outside the
// dynamic memory, as a misplaced swizzle's could be, stops the run)
inline unsigned long long emu_saddr(const void* p) { return emu_blk->addr + ((const unsigned char*)p - emu_dyn_smem); }
inline unsigned __cvta_generic_to_shared(const void* p) { return (unsigned)emu_saddr(p); }
inline const unsigned char* emu_sbyte(unsigned long long at) {
    if (at < emu_blk->addr || at - emu_blk->addr >= (1ull << 20)) {
        fprintf(stderr, "a shared read at %llu, outside the dynamic shared memory (from %llu)\n", at, emu_blk->addr); abort(); }
    return emu_dyn_smem + (at - emu_blk->addr);
}
// the thread-block cluster's PTX (agents/expert/codegen.py CLUSTER_PRELUDE)
inline unsigned cluster_rank() { return emu_rank; }
inline float* cluster_map(float* p, unsigned r) {
    return reinterpret_cast<float*>(emu_cluster[r].smem + (reinterpret_cast<unsigned char*>(p) - emu_blk->smem)); }
inline void cluster_sync() { emu_cluster_barrier->arrive_and_wait(); }
inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
inline int __syncthreads_or(int p) {  // a barrier returning whether any thread's p was nonzero
    emu_block_barrier->arrive_and_wait();
    if (p) std::atomic_ref<int>(emu_blk->vote).store(1);
    emu_block_barrier->arrive_and_wait();
    const int r = std::atomic_ref<int>(emu_blk->vote).load();
    emu_block_barrier->arrive_and_wait();
    if (threadIdx.x == 0) std::atomic_ref<int>(emu_blk->vote).store(0);  // before anyone's next vote (its first barrier)
    return r;
}
template <typename T> inline T emu_shfl(T v, int src_lane) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    std::memcpy(emu_warp_buf[warp][lane], &v, sizeof(T));
    emu_warp_barriers[warp]->arrive_and_wait();
    T r;
    std::memcpy(&r, emu_warp_buf[warp][src_lane], sizeof(T));
    emu_warp_barriers[warp]->arrive_and_wait();
    return r;
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl(v, (int)((threadIdx.x & 31) ^ m)); }
template <typename T> inline T __shfl_up_sync(unsigned, T v, int d) {
    const int lane = threadIdx.x & 31; return emu_shfl(v, lane >= d ? lane - d : lane); }
template <typename T> inline T __shfl_down_sync(unsigned, T v, int d) {
    const int lane = threadIdx.x & 31; return emu_shfl(v, lane + d < 32 ? lane + d : lane); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <typename T> inline T __ldcs(const T* p) { return *p; }  // a cache hint: a plain load here
inline float to_f(float x) { return x; }
inline float to_f(bool x) { return x ? 1.0f : 0.0f; }
inline float to_f(long long x) { return (float)x; }
template <typename T> inline T from_f(float x);
template <> inline float from_f<float>(float x) { return x; }
// 16-bit floats as their bits: bf16 the top half of a float (rounded to nearest even), fp16 through _Float16
struct __nv_bfloat16 { unsigned short x; };
struct __half { unsigned short x; };
inline float emu_bf16(unsigned short b) { const unsigned u = (unsigned)b << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline float emu_f16(unsigned short b) { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
inline float to_f(__nv_bfloat16 x) { return emu_bf16(x.x); }
inline float to_f(__half x) { return emu_f16(x.x); }
template <> inline __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    unsigned u; std::memcpy(&u, &x, 4); u += 0x7FFF + ((u >> 16) & 1); return __nv_bfloat16{(unsigned short)(u >> 16)}; }
template <> inline __half from_f<__half>(float x) { const _Float16 h = (_Float16)x; __half r; std::memcpy(&r.x, &h, 2); return r; }
using std::max;
using std::min;
// the tensor-core GEMM's PTX (agents/expert/templates/gemm_tf32.py TF32_PRELUDE): cp.async as a plain
// copy with zero fill, the TF32 split by masking, mma.m16n8k8 (reading each operand's top 19 bits) by gathering the
// warp's fragments (PTX ISA fragment layouts) and each lane computing its own four results
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline void split_tf32(float x, unsigned& hi, unsigned& lo) { hi = __float_as_uint(x) & 0xffffe000u; lo = __float_as_uint(x - __uint_as_float(hi)); }
inline unsigned round_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }  // cvt.rna (finite x)
inline float emu_tf32_operand(unsigned u) { return __uint_as_float(u & 0xffffe000u); }  // the MMA reads the top 19 bits
static unsigned emu_mma_a[32][32][4], emu_mma_b[32][32][2];
inline void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int q = 0; q < 4; ++q) emu_mma_a[warp][lane][q] = a[q];
    for (int q = 0; q < 2; ++q) emu_mma_b[warp][lane][q] = b[q];
    emu_warp_barriers[warp]->arrive_and_wait();
    for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 2; ++e) {
            const int r = g + 8 * h, n = 2 * t + e;
            double s = 0.0;
            for (int k = 0; k < 8; ++k)  // A(r, k): lane (r % 8) * 4 + k % 4, register (r >= 8) + 2 (k >= 4); B(k, n): lane 4n + k % 4, register k >= 4
                s += (double)emu_tf32_operand(emu_mma_a[warp][(r % 8) * 4 + k % 4][(r >= 8) + 2 * (k >= 4)]) *
                     (double)emu_tf32_operand(emu_mma_b[warp][n * 4 + k % 4][k >= 4]);
            d[2 * h + e] += (float)s;
        }
    emu_warp_barriers[warp]->arrive_and_wait();
}
static const float* emu_ldsm_rows[32][32];
inline void ldsm_x4(unsigned* r, const float* row) {  // lane l: row l / 4 of matrix q, 4-byte word l % 4
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    emu_ldsm_rows[warp][lane] = row;
    emu_warp_barriers[warp]->arrive_and_wait();
    for (int q = 0; q < 4; ++q) std::memcpy(&r[q], emu_ldsm_rows[warp][q * 8 + lane / 4] + lane % 4, 4);
    emu_warp_barriers[warp]->arrive_and_wait();
}
// wgmma (gemm_tf32.WGMMA_PRELUDE): descriptors hold offsets into the dynamic shared buffer; the MMA reads
// the PTX ISA's canonical no-swizzle K-major layout back through them, and each thread computes its own
// registers of the D fragment (warp w of the warpgroup: rows 16w.., register i*4 + h*2 + e at row
// 16w + g + 8h, column 8i + 2t + e)
inline unsigned long long wg_desc(const float* p) {
    const unsigned long long a = emu_saddr(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32);
}
inline unsigned long long wg_desc_sbo(const float* p, unsigned sbo) {
    const unsigned long long a = emu_saddr(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32);
}
inline unsigned long long wg_desc_sw128(const float* p) {
    const unsigned long long a = emu_saddr(p);
    return ((a & 0x3FFFF) >> 4) | (1ULL << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ULL << 62);
}
// EMU_LATE_READS (run_program's `timing="late_reads"`): a warpgroup MMA reading shared memory does so when a wait
// retires its group, the latest the GPU may (wgmma is asynchronous): a slot refilled before then changes the result.
// The MMA is the warpgroup's, so a group is retired for all its threads at once: none passes the wait before every
// thread's share has read (a TMA ring's slot goes back from one thread after its wait)
#ifdef EMU_LATE_READS
static thread_local std::vector<std::vector<std::function<void()>>> emu_wg_groups;  // committed, oldest first
static thread_local std::vector<std::function<void()>> emu_wg_open;
inline void emu_wg_retire(size_t keep) {
    while (emu_wg_groups.size() > keep) {
        for (auto& f : emu_wg_groups.front()) f();
        emu_wg_groups.erase(emu_wg_groups.begin());
    }
    if (!emu_blk->wgs.empty()) emu_blk->wgs[threadIdx.x >> 7]->arrive_and_wait();
}
#define EMU_WG_ISSUE(call) emu_wg_open.push_back([=] { call; })
#else
#define EMU_WG_ISSUE(call) call
#endif
inline void wgmma_fence() {}
// a warpgroup's MMAs are one collective operation: none of its threads is past a commit before all reach it
// (a TMA ring's slot is released by one thread a warpgroup once its MMAs are done, so every thread of the
// warpgroup has by then stopped waiting for the tile)
#ifdef EMU_LATE_READS
inline void emu_wg_close() { emu_wg_groups.push_back(std::move(emu_wg_open)); emu_wg_open.clear(); }
inline void wgmma_wait0() { emu_wg_retire(0); }
inline void wgmma_wait1() { emu_wg_retire(1); }
#else
inline void emu_wg_close() {}
inline void wgmma_wait0() {}
inline void wgmma_wait1() {}
#endif
inline void wgmma_commit() { emu_wg_close(); if (!emu_blk->wgs.empty()) emu_blk->wgs[threadIdx.x >> 7]->arrive_and_wait(); }
inline void fence_proxy_async() {}
inline unsigned long long emu_wg_at(unsigned long long d, int r, int kb) {  // row r's byte kb along K
    const unsigned long long base = (d & 0x3FFF) << 4, lbo = ((d >> 16) & 0x3FFF) << 4, sbo = ((d >> 32) & 0x3FFF) << 4;
    unsigned long long at;
    if ((d >> 62) == 1) {  // the 128-byte swizzle: rows of 128 bytes, address bits 4-6 XORed with bits 7-9
        at = base + (r / 8) * sbo + (r % 8) * 128 + kb;
        at ^= ((at >> 7) & 7) << 4;
    } else {  // core matrices of 8 rows by 16 bytes
        at = base + (r / 8) * sbo + (kb / 16) * lbo + (r % 8) * 16 + kb % 16;
    }
    return at;
}
inline float emu_wg_el(unsigned long long d, int r, int k) {
    float v; std::memcpy(&v, emu_sbyte(emu_wg_at(d, r, 4 * k)), 4);
    return emu_tf32_operand(__float_as_uint(v));
}
// D += A B^T over one k-step of KS elements, A's read by EL, B's by ELB (the D fragment as emu_wgmma_rs's)
template <int N, int KS, class EL, class ELB> inline void emu_wgmma_k(float* d, unsigned long long da, unsigned long long db, EL el, ELB elb) {
    const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < N / 8; ++i)
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) {
                const int r = 16 * w + g + 8 * h, n = 8 * i + 2 * t + e;
                double s = 0.0;
                for (int k = 0; k < KS; ++k) s += (double)el(da, r, k) * (double)elb(db, n, k);
                d[i * 4 + h * 2 + e] += (float)s;
            }
}
template <int N> inline void emu_wgmma(float* d, unsigned long long da, unsigned long long db) {
    EMU_WG_ISSUE((emu_wgmma_k<N, 8>(d, da, db, emu_wg_el, emu_wg_el)));
}
static unsigned emu_wg_a[1024][4];
template <int N> inline void emu_wgmma_rs(float* d, const unsigned* a, unsigned long long db) {
    // A from registers: warp w' of the warpgroup holds rows 16w'.. in mma.m16n8k8's A layout
    // (register q: row g + 8 (q % 2), column t + 4 (q / 2)); every thread of the block calls this together
    for (int q = 0; q < 4; ++q) emu_wg_a[threadIdx.x][q] = a[q];
    emu_block_barrier->arrive_and_wait();
    const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3, wg0 = (threadIdx.x >> 7) * 128;
    for (int i = 0; i < N / 8; ++i)
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) {
                const int r = 16 * w + g + 8 * h, n = 8 * i + 2 * t + e;
                double s = 0.0;
                for (int k = 0; k < 8; ++k) {
                    const unsigned av = emu_wg_a[wg0 + (r / 16) * 32 + (r % 8) * 4 + k % 4][(r % 16) / 8 + 2 * (k / 4)];
                    s += (double)emu_tf32_operand(av) * (double)emu_wg_el(db, n, k);
                }
                d[i * 4 + h * 2 + e] += (float)s;
            }
    emu_block_barrier->arrive_and_wait();
}
inline void wgmma_tf32_rs_n64(float* d, const unsigned* a, unsigned long long b) { emu_wgmma_rs<64>(d, a, b); }
inline void wgmma_tf32_rs_n128(float* d, const unsigned* a, unsigned long long b) { emu_wgmma_rs<128>(d, a, b); }
inline void wgmma_tf32_rs_n256(float* d, const unsigned* a, unsigned long long b) { emu_wgmma_rs<256>(d, a, b); }
// the 16-bit wgmma (gemm_wgmma16): k16 a step, element k at byte 2k of the row (the same canonical layout)
template <bool BF> inline float emu_wg_el16(unsigned long long d, int r, int k) {
    unsigned short v; std::memcpy(&v, emu_sbyte(emu_wg_at(d, r, 2 * k)), 2);
    return BF ? emu_bf16(v) : emu_f16(v);
}
template <int N, bool BF> inline void emu_wgmma16(float* d, unsigned long long da, unsigned long long db) {
    EMU_WG_ISSUE((emu_wgmma_k<N, 16>(d, da, db, emu_wg_el16<BF>, emu_wg_el16<BF>)));
}
// B MN-major (gemm_wgmma16.WGMMA16_TB_PRELUDES, the `_tb` MMAs): the PTX ISA's canonical MN-major 128-byte-swizzle
// layout, ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) in elements: 64 consecutive columns a 128-byte row, rows along K,
// 8-row groups SBO apart, 64-column blocks LBO apart
inline unsigned long long wg_desc_mn128(const float* p, unsigned lbo) {
    const unsigned long long a = emu_saddr(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ULL << 62);
}
template <bool BF> inline float emu_wg_el16_mn(unsigned long long d, int n, int k) {
    const unsigned long long base = (d & 0x3FFF) << 4, lbo = ((d >> 16) & 0x3FFF) << 4, sbo = ((d >> 32) & 0x3FFF) << 4;
    if ((d >> 62) != 1) { fprintf(stderr, "an MN-major B descriptor without the 128-byte swizzle\n"); abort(); }
    unsigned long long at = base + (n / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (n % 64) * 2;
    at ^= ((at >> 7) & 7) << 4;
    unsigned short v; std::memcpy(&v, emu_sbyte(at), 2);
    return BF ? emu_bf16(v) : emu_f16(v);
}
template <int N, bool BF> inline void emu_wgmma16_tb(float* d, unsigned long long da, unsigned long long db) {
    EMU_WG_ISSUE((emu_wgmma_k<N, 16>(d, da, db, emu_wg_el16<BF>, emu_wg_el16_mn<BF>)));
}
inline void wgmma_bf16_n64_tb(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16_tb<64, true>(d, a, b); }
inline void wgmma_bf16_n128_tb(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16_tb<128, true>(d, a, b); }
inline void wgmma_bf16_n256_tb(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16_tb<256, true>(d, a, b); }
inline void wgmma_f16_n64_tb(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16_tb<64, false>(d, a, b); }
inline void wgmma_f16_n128_tb(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16_tb<128, false>(d, a, b); }
inline void wgmma_f16_n256_tb(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16_tb<256, false>(d, a, b); }
inline void wgmma_bf16_n64(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16<64, true>(d, a, b); }
inline void wgmma_bf16_n128(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16<128, true>(d, a, b); }
inline void wgmma_bf16_n256(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16<256, true>(d, a, b); }
inline void wgmma_f16_n64(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16<64, false>(d, a, b); }
inline void wgmma_f16_n128(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16<128, false>(d, a, b); }
inline void wgmma_f16_n256(float* d, unsigned long long a, unsigned long long b) { emu_wgmma16<256, false>(d, a, b); }
inline void wgmma_tf32_n32(float* d, unsigned long long a, unsigned long long b) { emu_wgmma<32>(d, a, b); }
inline void wgmma_tf32_n64(float* d, unsigned long long a, unsigned long long b) { emu_wgmma<64>(d, a, b); }
inline void wgmma_tf32_n128(float* d, unsigned long long a, unsigned long long b) { emu_wgmma<128>(d, a, b); }
inline void wgmma_tf32_n256(float* d, unsigned long long a, unsigned long long b) { emu_wgmma<256>(d, a, b); }
// the TMA GEMM's (gemm_wgmma16.TMA_PRELUDE): a map is where the 16-bit tensor is and its shape; a load copies
// the box at once into the 128-byte swizzle (zeros outside the tensor) and completes its bytes on the barrier;
// a barrier counts arrivals and bytes, and its phase flips when both are in (waits spin on the phase)
struct EggTmap { const unsigned char* base; long long dims[5]; int box[5]; int elem; long long strides[5]; };  // unused dims 1;
// strides: bytes between entries of each dim (run_program fills a contiguous map's)
struct EmuBar { long long pending, expected, tx; std::atomic<unsigned> phase; };
static std::mutex emu_bar_mu;
static std::map<const void*, EmuBar> emu_bars;  // a barrier's node stays put: waiters read its phase unlocked
inline unsigned smem_u32(const void* p) { return (unsigned)emu_saddr(p); }
inline void emu_bar_done(EmuBar& e) { if (e.pending == 0 && e.tx == 0) { e.pending = e.expected; e.phase ^= 1u; } }
inline void mbar_init(unsigned long long* b, unsigned n) {
    std::lock_guard<std::mutex> l(emu_bar_mu); auto& e = emu_bars[b]; e.pending = e.expected = n; e.tx = 0; e.phase = 0; }
inline void mbar_init_fence() {}
inline void mbar_arrive(unsigned long long* b) {
    std::lock_guard<std::mutex> l(emu_bar_mu); auto& e = emu_bars.at(b); --e.pending; emu_bar_done(e); }
inline void mbar_expect(unsigned long long* b, unsigned bytes) {
    std::lock_guard<std::mutex> l(emu_bar_mu); auto& e = emu_bars.at(b); e.tx += bytes; --e.pending; emu_bar_done(e); }
// bulk copies (rowwise.BULK_PRELUDE) not yet landed: with EMU_LATE_COPIES a copy lands when its barrier is first
// waited on, the latest the GPU may, so a read of its bytes that does not wait sees what was there before
struct EmuBulk { void* dst; const void* src; unsigned bytes; };
static std::map<const void*, std::vector<EmuBulk>> emu_bulk_pending;  // by barrier, under emu_bar_mu
inline void emu_bulk_land(const void* b) {  // with emu_bar_mu held
    auto it = emu_bulk_pending.find(b);
    if (it == emu_bulk_pending.end()) return;
    auto& eb = emu_bars.at(b);
    for (auto& c : it->second) { std::memcpy(c.dst, c.src, c.bytes); eb.tx -= c.bytes; }
    emu_bulk_pending.erase(it);
    emu_bar_done(eb);
}
inline void mbar_wait(unsigned long long* b, unsigned parity) {  // hundreds of waiting threads on two cores: sleep, not spin
    EmuBar* e;
    { std::lock_guard<std::mutex> l(emu_bar_mu); emu_bulk_land(b); e = &emu_bars.at(b); }
    while (e->phase.load() == parity) std::this_thread::sleep_for(std::chrono::microseconds(200));
}
// a box into block `smem`'s shared memory at `off`, its bytes completing the barrier at `b` there
inline void emu_tma_into(unsigned char* smem, long long off, const EggTmap* m, const long long* c, unsigned long long* b);
inline void emu_tma(void* dst, const EggTmap* m, const long long* c, unsigned long long* b) {
    emu_tma_into(emu_dyn_smem, (const unsigned char*)dst - emu_dyn_smem, m, c, b);
}
inline void emu_tma_into(unsigned char* smem, long long off, const EggTmap* m, const long long* c, unsigned long long* b) {
    if ((emu_blk->addr + off) & 1023) { fprintf(stderr, "a 128-byte-swizzled TMA box off a 1024-byte boundary\n"); abort(); }
    long long bytes = 0, row = 0;  // the box's rows (everything past its first dim) in order, dim 1 fastest
    for (int i4 = 0; i4 < m->box[4]; ++i4) for (int i3 = 0; i3 < m->box[3]; ++i3) for (int i2 = 0; i2 < m->box[2]; ++i2)
    for (int i1 = 0; i1 < m->box[1]; ++i1, ++row) {
        const long long at_[5] = {0, c[1] + i1, c[2] + i2, c[3] + i3, c[4] + i4};
        bool in = true;
        long long gb = 0;  // the row's first byte
        for (int d = 4; d >= 1; --d) { in = in && at_[d] >= 0 && at_[d] < m->dims[d]; gb += at_[d] * m->strides[d]; }
        for (int e = 0; e < m->box[0]; ++e, bytes += m->elem) {
            const long long gk = c[0] + e;
            unsigned v = 0;
            if (in && gk >= 0 && gk < m->dims[0]) std::memcpy(&v, m->base + gb + gk * m->elem, m->elem);
            long long at = off + row * m->box[0] * m->elem + m->elem * e;
            at ^= ((at >> 7) & 7) << 4;
            std::memcpy(smem + at, &v, m->elem);
        }
    }
    std::lock_guard<std::mutex> l(emu_bar_mu); auto& eb = emu_bars.at(b); eb.tx -= bytes; emu_bar_done(eb);
}
// a bulk copy (rowwise.BULK_PRELUDE): its bytes complete barrier b's transaction; at once, or (EMU_LATE_COPIES) at the
// first wait on b
inline void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
    if ((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src) | bytes) & 15ULL) {
        fprintf(stderr, "a bulk copy off 16-byte boundaries or of a size not a multiple of 16\n"); abort(); }
    std::lock_guard<std::mutex> l(emu_bar_mu);
    emu_bulk_pending[b].push_back({dst, src, bytes});
#ifndef EMU_LATE_COPIES
    emu_bulk_land(b);
#endif
}
inline void tma_load(void* dst, const EggTmap* m, int c0, int c1, int c2, unsigned long long* b) {
    const long long c[5] = {c0, c1, c2, 0, 0}; emu_tma(dst, m, c, b); }
// the cluster's (gemm_tf32.MCAST_PRELUDE): the box into each block of `mask` at dst's offset, completing each one's
// barrier at b's offset; an arrival on block `rank`'s barrier at b's offset
inline unsigned long long* emu_peer_bar(unsigned long long* b, unsigned r) {
    return reinterpret_cast<unsigned long long*>(emu_cluster[r].smem + ((unsigned char*)b - emu_dyn_smem)); }
inline void tma_load_mc(void* dst, const EggTmap* m, int c0, int c1, int c2, unsigned long long* b, unsigned short mask) {
    const long long c[5] = {c0, c1, c2, 0, 0};
    for (unsigned r = 0; r < 16; ++r)
        if (mask >> r & 1) emu_tma_into(emu_cluster[r].smem, (unsigned char*)dst - emu_dyn_smem, m, c, emu_peer_bar(b, r));
}
inline void mbar_arrive_cluster(unsigned long long* b, unsigned rank) { mbar_arrive(emu_peer_bar(b, rank)); }
inline void mbar_wait_cluster(unsigned long long* b, unsigned parity) { mbar_wait(b, parity); }
inline void tma_load4(void* dst, const EggTmap* m, int c0, int c1, int c2, int c3, unsigned long long* b) {
    const long long c[5] = {c0, c1, c2, c3, 0}; emu_tma(dst, m, c, b); }
inline void tma_load5(void* dst, const EggTmap* m, int c0, int c1, int c2, int c3, int c4, unsigned long long* b) {
    const long long c[5] = {c0, c1, c2, c3, c4}; emu_tma(dst, m, c, b); }
// named barriers (gemm_tf32.NAMED_BAR_PRELUDE): a block's barrier `id` of n threads, made at its first use; an
// arrival that does not wait is std::barrier's arrive
static std::mutex emu_named_mu;
static std::map<std::tuple<const void*, int, int>, std::barrier<>*> emu_named;  // (block, id, threads)
inline std::barrier<>* emu_named_bar(int id, int n) {
    std::lock_guard<std::mutex> l(emu_named_mu);
    auto& b = emu_named[{emu_blk, id, n}];
    if (!b) b = new std::barrier<>(n);
    return b;
}
inline void named_bar_sync(int id, int n) { emu_named_bar(id, n)->arrive_and_wait(); }
inline void named_bar_arrive(int id, int n) { (void)emu_named_bar(id, n)->arrive(); }
template <int N> inline void regs_dec() {}
template <int N> inline void regs_inc() {}
// EMU_LATE_COPIES (`timing="late_copies"`): a cp.async lands when a wait retires its group, the latest the GPU may:
// shared memory read before that wait still holds the poison
#ifdef EMU_LATE_COPIES
struct EmuCopy { float* dst; const float* src; int bytes, valid; };
static thread_local std::vector<std::vector<EmuCopy>> emu_cp_groups;  // committed, oldest first
static thread_local std::vector<EmuCopy> emu_cp_open;
template <int BYTES> inline void cp_async(float* dst, const float* src, int valid_bytes) {
    emu_cp_open.push_back({dst, src, BYTES, valid_bytes});
}
inline void cp_async_commit() { emu_cp_groups.push_back(std::move(emu_cp_open)); emu_cp_open.clear(); }
template <int N> inline void cp_async_wait() {
    while (emu_cp_groups.size() > (size_t)N) {
        for (auto& c : emu_cp_groups.front()) { std::memset(c.dst, 0, c.bytes); std::memcpy(c.dst, c.src, c.valid); }
        emu_cp_groups.erase(emu_cp_groups.begin());
    }
}
#else
template <int BYTES> inline void cp_async(float* dst, const float* src, int valid_bytes) {
    std::memset(dst, 0, BYTES); std::memcpy(dst, src, valid_bytes);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
#endif
"""


TIMINGS = {"": [], "late_copies": ["-DEMU_LATE_COPIES"], "late_reads": ["-DEMU_LATE_READS"]}
TIMING = os.environ.get("EGG_EMU_TIMING", "")


def _ctype(t: torch.Tensor) -> str:
    return {torch.bool: "bool", torch.int64: "long long", torch.bfloat16: "__nv_bfloat16", torch.float16: "__half"}.get(t.dtype, "float")


SIXTEEN = {"__nv_bfloat16": torch.bfloat16, "__half": torch.float16}
HOST_SIXTEEN = {str(t): c for c, t in SIXTEEN.items()}  # host code's "torch.bfloat16" -> its C type


def available() -> bool:
    return shutil.which("g++") is not None


def _cpu_source(src: str) -> str:
    from agents.expert.templates.gemm_tf32 import MCAST_PRELUDE, NAMED_BAR_PRELUDE, TF32_PRELUDE, WGMMA_N32, WGMMA_PRELUDE
    from agents.expert.templates.gemm_wgmma16 import TMA_PRELUDE, WGMMA16_PRELUDES, WGMMA16_TB_PRELUDES
    from agents.expert.codegen import CLUSTER_PRELUDE
    from agents.expert.templates.rowwise import BULK_PRELUDE
    from agents.expert.templates.scan import BOOL_PRELUDE
    body = MATH_PRELUDE + src.replace(PRELUDE, "").replace(BOOL_PRELUDE, "").replace(WGMMA_PRELUDE, "").replace(TF32_PRELUDE, "")
    for pre in [*WGMMA16_TB_PRELUDES.values(), *WGMMA16_PRELUDES.values()]:
        body = body.replace(pre, "")
    body = body.replace(CLUSTER_PRELUDE, "").replace(MCAST_PRELUDE, "").replace(TMA_PRELUDE, "").replace(WGMMA_N32, "").replace(NAMED_BAR_PRELUDE, "")
    body = body.replace(BULK_PRELUDE, "")
    body = body.replace("reinterpret_cast<const float4*>(", "emu_vec<const float4>(").replace("reinterpret_cast<float4*>(", "emu_vec<float4>(")
    # dynamic shared memory becomes one static buffer (blocks run one at a time)
    return re.sub(r"extern __shared__ (?:__align__\(\d+\) )?(\w+(?: \w+)*?) (\w+)\[\];",
                  r"\1* \2 = reinterpret_cast<\1*>(emu_dyn_smem);", body)


# Where a kernel declares static shared memory the driver puts the dynamic after it, whatever `__align__` the extern
# array says (RegNet's conv_stats conv on the H100): the emulator's dynamic memory then starts at a shared address
# 16-byte aligned and no more, so a swizzled layout that assumes a 1024-byte boundary reads misplaced pieces here too
MISPLACED_DYNAMIC_BASE = 6672


def dynamic_base(src: str, kernel: str) -> int:
    """The shared address of `kernel`'s dynamic shared memory in the emulator: 0, or MISPLACED_DYNAMIC_BASE where its
    definition (up to the next kernel's) declares static shared memory."""
    span = kernel_span(src, kernel)
    if span is None:
        return 0
    return MISPLACED_DYNAMIC_BASE if re.search(r"(?<!extern )__shared__", src[span[0]:span[1]]) else 0


_PCH: dict[tuple, str | None] = {}


def _prelude_pch(flags: list[str]) -> str | None:
    """A folder holding the prelude as a precompiled header built with `flags` (once a process: a build takes
    0.7 s where it took 1.6 with the 400-line prelude parsed each time); None where g++ cannot build one."""
    key = tuple(flags)
    if key not in _PCH:
        import atexit
        import tempfile
        d = Path(tempfile.mkdtemp(prefix="egg_emu_pch_"))
        atexit.register(shutil.rmtree, d, True)  # tens of MB a process
        (d / "emu_prelude.h").write_text(CPU_PRELUDE)
        r = subprocess.run(["g++", *flags, "-x", "c++-header", str(d / "emu_prelude.h"), "-o", str(d / "emu_prelude.h.gch")],
                           capture_output=True, text=True)
        _PCH[key] = str(d) if r.returncode == 0 else None
    return _PCH[key]


def run(src: str, kernel: str, grid: int, block: int, out_shape, inputs: list[torch.Tensor], workdir: Path,
        grid_yz: tuple[int, int] = (1, 1)) -> torch.Tensor:
    """One launch: float32 (or bool) inputs in the kernel's argument order after `out`; float32 out."""
    names = [f"in{i}" for i in range(len(inputs))]
    got = run_program(src, [(kernel, (grid, *grid_yz), block, ["out", *names])], {"out": int(np.prod(out_shape))},
                      dict(zip(names, inputs)), "out", workdir)
    return got.reshape(out_shape)


def run_program(src: str, steps: list[tuple[str, tuple, int, list[str]]], buffers: dict[str, int | tuple[int, str]],
                inputs: dict[str, torch.Tensor], result: str, workdir: Path, timing: str | None = None) -> torch.Tensor:
    """Several launches in order over shared buffers (e.g. out, part, res; float32, or (size, C type) for a
    16-bit one) and the inputs: each step is (kernel, grid (x[, y[, z]]), block, argument names; a TMA map
    as a tuple (name, dims, box, element offset[, element bytes])). Returns buffer `result` (flat, as float32).
    `timing` (default $EGG_EMU_TIMING): "late_copies" lands each cp.async at the wait that retires it,
    "late_reads" has each warpgroup MMA read shared memory at the wait that retires it; the latest the GPU may
    do either, so a read before its copy's wait, or a slot refilled under an MMA in flight, changes the result."""
    timing = TIMING if timing is None else timing
    if timing not in TIMINGS:
        raise ValueError(f"timing {timing!r}: one of {sorted(TIMINGS)}")
    names = list(buffers) + list(inputs)
    var = {n: f"emu_v_{n}" for n in names}  # driver variables never clash with the kernel's own names
    typed = {b: (n, "float") if isinstance(n, int) else n for b, n in buffers.items()}
    decl = "\n".join(f"    float* {var[b]} = (float*)malloc({n} * sizeof(float)); for (long long q = 0; q < {n}; ++q) {var[b]}[q] = NAN;"
                     if ct == "float" else  # 16-bit: every bit set, a NaN in both formats
                     f"    {ct}* {var[b]} = ({ct}*)malloc({n} * 2); std::memset({var[b]}, 0xFF, {n} * 2);"
                     for b, (n, ct) in typed.items())
    loads = "\n".join(
        f"""    void* emu_r_{x}_raw; {{ FILE* f = fopen(argv[{2 + i}], "rb"); fseek(f, 0, SEEK_END); long sz = ftell(f);
        fseek(f, 0, SEEK_SET); emu_r_{x}_raw = malloc(sz > 0 ? sz : 1); if (fread(emu_r_{x}_raw, 1, sz, f) != (size_t)sz) return 3; fclose(f); }}
    const {_ctype(t)}* {var[x]} = (const {_ctype(t)}*)emu_r_{x}_raw;"""
        for i, (x, t) in enumerate(inputs.items()))
    calls = []
    for kernel, grid, block, args, *dyn in steps:
        maps = []  # a tensor-map argument: (buffer or input name, dims, box, element offset[, element bytes[, strides]])
        for j, a in enumerate(args):
            if isinstance(a, tuple):
                buf, dims, box, off, elem, strides = (*a, 2, None)[:6] if len(a) < 5 else (*a, None)[:6]
                dims, box = (*dims, 1, 1, 1, 1)[:5], (*box, 1, 1, 1, 1)[:5]
                st = (elem, *(strides or np.cumprod([elem, *dims[:4]])[1:].tolist()), 0, 0, 0, 0)[:5]
                maps.append(f"    EggTmap emu_m{j}{{reinterpret_cast<const unsigned char*>({var[buf]}) + {off} * {elem}LL, "
                            f"{{{', '.join(map(str, dims))}}}, {{{', '.join(map(str, box))}}}, {elem}, {{{', '.join(map(str, st))}}}}};")
        args = [f"emu_m{j}" if isinstance(a, tuple) else _pointer(var, a) for j, a in enumerate(args)]
        g = tuple(grid) + (1,) * (3 - len(grid))
        cm = re.search(rf"__cluster_dims__\((\d+),[^)]*\)\s*(?:__launch_bounds__\([^)]*\)\s*)?{kernel}\(", src)
        C = int(cm.group(1)) if cm else 1
        if g[0] % C:
            raise ValueError(f"{kernel}: grid {g[0]} is not a whole number of clusters of {C}")
        calls.append(f"""    {{
{chr(10).join(maps)}
    gridDim.x = {g[0]}; gridDim.y = {g[1]}; gridDim.z = {g[2]}; blockDim.x = {block};
    std::vector<EmuBlock> blks({C});
    for (auto& bk : blks) {{
        bk.smem = static_cast<unsigned char*>(std::aligned_alloc(128, 1 << 20));
        bk.addr = {dynamic_base(src, kernel)};
        for (int w = 0; w < ({block} + 31) / 32; ++w) bk.warps.push_back(new std::barrier<>(std::min(32, {block} - 32 * w)));
        bk.bar = new std::barrier<>({block});
        if ({block} % 128 == 0) for (int w = 0; w < {block} / 128; ++w) bk.wgs.push_back(new std::barrier<>(128));
    }}
    emu_cluster = blks.data();
    emu_cluster_barrier = new std::barrier<>({C * block});
    for (long long bz = 0; bz < gridDim.z; ++bz)
    for (long long by = 0; by < gridDim.y; ++by)
    for (long long bx = 0; bx < gridDim.x; bx += {C}) {{
        // a block's dynamic shared memory starts as NaN bytes (the GPU leaves what an earlier kernel wrote): a tile
        // read before it is written fails the run instead of reading zeros
        for (auto& bk : blks) std::memset(bk.smem, 0xFF, 256 << 10);
        std::vector<std::thread> ts;
        for (unsigned rk = 0; rk < {C}; ++rk)
        for (int emu_t = 0; emu_t < {block}; ++emu_t)
            ts.emplace_back([&, emu_t, rk, bx, by, bz] {{
                emu_blk = &blks[rk]; emu_rank = rk; blockIdx = EmuDim{{bx + rk, by, bz}}; threadIdx.x = emu_t;
                {kernel}({", ".join(args)}); }});
        for (auto& th : ts) th.join();{_past_dynamic_check(kernel, dyn[0] if dyn else 0)}
    }}
    }}""")
    driver = f"""
int main(int argc, char** argv) {{
{decl}
{loads}
{chr(10).join(calls)}
    FILE* f = fopen(argv[1], "wb"); fwrite({var[result]}, {4 if typed[result][1] == "float" else 2}, {typed[result][0]}, f); fclose(f);
    return 0;
}}
"""
    workdir.mkdir(parents=True, exist_ok=True)
    flags = ["-O1", "-std=c++20", "-pthread", *TIMINGS[timing]]
    pch = _prelude_pch(flags)
    prelude = '#include "emu_prelude.h"\n' if pch else CPU_PRELUDE
    (workdir / "p.cpp").write_text(prelude + _cpu_source(src) + driver)
    r = subprocess.run(["g++", *flags, *([f"-I{pch}", "-Winvalid-pch"] if pch else []), "-o", str(workdir / "p"),
                        str(workdir / "p.cpp")], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"the CPU build of the program failed:\n{r.stderr[-3000:]}")
    files = []
    for x, t in inputs.items():
        p = workdir / f"{x}.bin"
        if t.dtype in (torch.bfloat16, torch.float16):  # the bits as they are
            t.contiguous().view(torch.int16).numpy().tofile(p)
        else:
            t.contiguous().numpy().astype({torch.bool: np.bool_, torch.int64: np.int64}.get(t.dtype, np.float32)).tofile(p)
        files.append(str(p))
    subprocess.run([str(workdir / "p"), str(workdir / "out.bin"), *files], check=True, timeout=600)
    if typed[result][1] != "float":
        return torch.from_numpy(np.fromfile(workdir / "out.bin", dtype=np.int16)).view(SIXTEEN[typed[result][1]]).float()
    return torch.from_numpy(np.fromfile(workdir / "out.bin", dtype=np.float32))


def _past_dynamic_check(kernel: str, size: int) -> str:
    """After a block: its dynamic shared memory past the launch's `size` bytes still holds the poison (on the GPU
    those bytes are another block's: a write there corrupts it, which no result here would show)."""
    if not size:
        return ""
    return f"""
        for (auto& bk : blks)
            for (long long q = {size}; q < (256 << 10); ++q)
                if (bk.smem[q] != 0xFF) {{
                    fprintf(stderr, "{kernel}: dynamic shared memory written at byte %lld, past the launch's {size}\\n", q);
                    abort();
                }}"""


def _pointer(var: dict, a: str) -> str:
    """A launch argument's pointer: a buffer or input, or a view of one from an element on (`x0.view(-1)[96:]`: an
    input's slice a stage reads as its own tensor; `t1.view(-1)[648:]`: a conv's slice of the concatenation it stores
    into), at that element as on the GPU (its alignment too)."""
    m = re.fullmatch(r"(\w+)\.view\(-1\)\[(\d+):\]", a)
    if m and a not in var and m.group(1) in var:
        return f"({var[m.group(1)]} + {m.group(2)})"
    return var[a]


def run_host(src: str, host_code: str, tensors: dict[str, torch.Tensor], workdir: Path, timing: str | None = None) -> torch.Tensor:
    """Run the launches of an expert module's host code (its `egg.empty` buffers and `egg.launch`
    calls, in order) on the CPU; `tensors` maps the host code's names (`x0`, `self.p1`) to values.
    Returns `out`, shaped."""
    import ast
    shapes, types, steps = {}, {}, []
    for line in host_code.splitlines():
        line = line.strip()
        if " = egg.empty(" in line:
            var, call = line.split(" = ", 1)
            args = ast.parse(call).body[0].value.args
            shapes[var] = ast.literal_eval(ast.unparse(args[0]))
            types[var] = HOST_SIXTEEN.get(ast.unparse(args[1]) if len(args) > 1 else "")
        elif line.startswith("self.register_buffer('s"):  # a buffer the module's weight launches write (stage_params)
            name, empty = ast.parse(line).body[0].value.args
            var = f"self.{ast.literal_eval(name)}"
            shapes[var] = ast.literal_eval(ast.unparse(empty.args[0]))
            types[var] = HOST_SIXTEEN.get(ast.unparse(empty.keywords[0].value))
        elif line.startswith("egg.launch("):
            call = ast.parse(line).body[0].value
            kernel, grid, block = (ast.literal_eval(a) for a in call.args[:3])
            names = [(ast.unparse(a.args[0]), *(ast.literal_eval(ast.unparse(x)) for x in a.args[1:]))
                     if isinstance(a, ast.Call) else ast.unparse(a) for a in call.args[3].elts]
            smem = next((ast.literal_eval(kw.value) for kw in call.keywords if kw.arg == "shared_mem"), 0)
            steps.append((kernel, tuple(grid), block[0], names, smem))
    safe = {n: re.sub(r"\W", "_", n) for n in [*tensors, *shapes]}  # (`self.p1`, `self.s4`: C++ names)
    steps = [(k, g, b, [(safe.get(a[0], a[0]), *a[1:]) if isinstance(a, tuple) else safe.get(a, a) for a in args], smem)
             for k, g, b, args, smem in steps]
    buffers = {safe[v]: (int(np.prod(s)), types[v]) if types[v] else int(np.prod(s)) for v, s in shapes.items()}
    got = run_program(src, steps, buffers, {safe[n]: t.contiguous() for n, t in tensors.items()}, "out", workdir, timing)
    return got.reshape(shapes["out"])


def assert_fp32_grade(task_path, g, pk, workdir: Path, factor: float = 16, compiled: bool = True, timing: str | None = None) -> None:
    """An emitted module compiles for sm_90a (`compiled`) and, on the emulator, its max error against a float64
    truth is within `factor` times eager fp32's (fp32 grade); skips the emulation where there is no g++."""
    import pytest
    from runtime.compile import compile_check
    if compiled:
        assert compile_check(pk.cuda_source, pk.compile_options, "sm_90a").ok
    if not available():
        pytest.skip("no g++")
    err, eager_err = run_module(task_path, g, pk, workdir, timing=timing)
    assert err < factor * max(eager_err, 2 ** -24), (err, eager_err)


def run_module(task_path, g, pk, workdir: Path, input_seed: int = 7, prepare=None, timing: str | None = None) -> tuple[float, float]:
    """An emitted module (its host code's launches) on one input set of the task, against a float64
    truth: (the module's max error, eager fp32's), both relative to the truth's largest magnitude.
    The reference runs in eval mode, as the verifier runs it; `prepare(model)` may set its state first."""
    from tasks import load_task
    loaded = load_task(task_path)
    model = loaded.make_model(42)  # the mode its file leaves it in
    if prepare is not None:
        prepare(model)
    torch.manual_seed(4)
    xs = loaded.make_inputs(input_seed)
    with torch.no_grad(), Record() as rec:  # random draws inside forward: the module and the truth get these (as the verifier does)
        want = model(*xs)
    with torch.no_grad():
        state = dict(model.state_dict())
        state.update({n.target: tensor_attribute(model, n.target) for n in g.params if n.target not in state})
        with Replay(rec.draws, torch.float64):
            truth = in_float64(copy_model(model))(*[x.double() if x.is_floating_point() else x for x in xs])
    drawn = [n for n in g.inputs if is_draw(n)]
    assert len(drawn) == len(rec.draws), (len(drawn), len(rec.draws))
    tensors = ({f"x{n.index}": xs[n.index] for n in g.inputs if not is_draw(n)}
               | {f"x{n.index}": d.tensor.to(getattr(torch, n.dtype)) for n, d in zip(drawn, rec.draws)}
               | {f"self.p{n.index}": state[n.target] for n in g.params})
    got = run_host(pk.cuda_source, pk.host_code, tensors, workdir, timing).double()
    scale = truth.abs().max()
    return float((got - truth).abs().max() / scale), float((want.double() - truth).abs().max() / scale)
