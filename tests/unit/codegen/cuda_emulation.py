"""Run a generated CUDA kernel on the host: the kernel text compiled by g++ against a small emulation
of the CUDA execution model, so the block-reduction structure is executed without a GPU.

What is emulated (and so checked): ``threadIdx``/``blockIdx``/``blockDim`` as per-thread values, one
OS thread per CUDA thread of a block (all threads of a block run concurrently, blocks one after the
other), ``__syncthreads`` as a barrier of the block, ``__shfl_xor_sync``/``__shfl_sync`` as an exchange
through a per-warp buffer between two barriers of the warp, ``__shared__`` arrays as ``static`` (one
instance, shared by the block's threads, reused by the next block), atomics under a mutex, and the
float32 math functions of ``<math.h>``. bfloat16/float16 storage types are small structs with exact
round-to-nearest-even conversions.

What is *not* checked: anything about real hardware — memory coalescing, occupancy, register limits,
the warp-synchronous behaviour of divergent code (a shuffle every lane of a warp reaches is all this
emulation supports, which is also what the kernels rely on), and CUDA's own math library accuracy.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

HEADER = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dcs_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local dcs_dim3 threadIdx, blockIdx;
dcs_dim3 blockDim, gridDim;
thread_local unsigned dcs_linear = 0;
static std::barrier<>* dcs_block_barrier = nullptr;
static std::vector<std::barrier<>*> dcs_warp_barriers;
static std::vector<unsigned long long> dcs_exchange;
static std::mutex dcs_atomic_mutex;

inline void __syncthreads() { dcs_block_barrier->arrive_and_wait(); }
template <typename T> T dcs_exchange_with(T v, unsigned src_lane) {
  unsigned warp = dcs_linear / 32, lane = dcs_linear % 32;
  unsigned long long bits = 0; std::memcpy(&bits, &v, sizeof(T));
  dcs_exchange[warp * 32 + lane] = bits;
  dcs_warp_barriers[warp]->arrive_and_wait();
  bits = dcs_exchange[warp * 32 + (src_lane % 32)];
  dcs_warp_barriers[warp]->arrive_and_wait();
  T out; std::memcpy(&out, &bits, sizeof(T)); return out;
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int o) { return dcs_exchange_with(v, (dcs_linear % 32) ^ o); }
template <typename T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return dcs_exchange_with(v, (dcs_linear % 32) / width * width + src % width);
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <typename T> T __ldcg(const T* p) { return *p; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
template <typename T> T atomicAdd(T* p, T v) { std::lock_guard<std::mutex> g(dcs_atomic_mutex); T o = *p; *p = o + v; return o; }
inline int atomicCAS(int* p, int cmp, int val) {
  std::lock_guard<std::mutex> g(dcs_atomic_mutex); int o = *p; if (o == cmp) *p = val; return o; }

inline std::uint16_t dcs_round16(float f, int shift) {   // float32 -> upper bits, round to nearest even
  std::uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (std::uint16_t)((u >> shift) | 0x40);
  return (std::uint16_t)((u + ((1u << (shift - 1)) - 1) + ((u >> shift) & 1)) >> shift);
}
struct __nv_bfloat16 {     // converts to and from float as CUDA's does (a Cast prints ``(__nv_bfloat16)(x)``)
  std::uint16_t bits;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : bits(dcs_round16(f, 16)) {}
  operator float() const { std::uint32_t u = (std::uint32_t)bits << 16; float f; std::memcpy(&f, &u, 4); return f; }
};
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
struct __half {            // GCC's IEEE half: conversions round to nearest even
  _Float16 value;
  __half() = default;
  __half(float f) : value((_Float16)f) {}
  operator float() const { return (float)value; }
};
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half_rn(float f) { return __half(f); }
"""

RUNNER = r"""
template <typename F> void dcs_run(unsigned grid, unsigned bx, unsigned by, F kernel) {
  unsigned n = bx * by;
  blockDim = {bx, by, 1}; gridDim = {grid, 1, 1};
  dcs_block_barrier = new std::barrier<>(n);
  for (unsigned w = 0; w < (n + 31) / 32; ++w) dcs_warp_barriers.push_back(new std::barrier<>(32));
  dcs_exchange.assign(((n + 31) / 32) * 32, 0);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back([=] {
      threadIdx = {t % bx, t / bx, 0}; dcs_linear = t;
      for (unsigned b = 0; b < grid; ++b) { blockIdx = {b, 0, 0}; kernel(); dcs_block_barrier->arrive_and_wait(); }
    });
  for (auto& th : threads) th.join();
}
static char* dcs_read(const char* path, size_t bytes) {
  char* buf = (char*)std::malloc(bytes ? bytes : 1); FILE* f = std::fopen(path, "rb");
  if (!f || std::fread(buf, 1, bytes, f) != bytes) { std::fprintf(stderr, "cannot read %s\n", path); std::exit(2); }
  std::fclose(f); return buf;
}
static void dcs_write(const char* path, const char* buf, size_t bytes) {
  FILE* f = std::fopen(path, "wb"); std::fwrite(buf, 1, bytes, f); std::fclose(f);
}
"""

NUMPY = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32, "bool": np.bool_,
         "uint8": np.uint8, "int8": np.int8, "int16": np.int16, "bfloat16": np.uint16,
         "float16": np.float16}


def available() -> str | None:
    """None when kernels can be emulated here, else why not."""
    return None if shutil.which("g++") else "g++ is not installed (the host emulation of CUDA kernels needs it)"


def _main(ks, arrays: dict[str, np.ndarray], launches: int = 1) -> str:
    from codegen.cupy_cuda.cuda_source import C_TYPES
    lines = ["int main(int argc, char** argv) {"]
    args = []
    nbytes = {c: arrays[c].size * np.dtype(NUMPY[ks.storage[c]]).itemsize for c in ks.arrays}
    for i, c in enumerate(ks.arrays):
        lines.append(f"  {C_TYPES[ks.storage[c]]}* a{i} = nullptr;")
        args.append(f"a{i}")
    args += [f"{int(n)}LL" for n in ks.extents]
    how = ks.launch
    # every launch starts from the arrays as given (module-scope __device__ variables persist between them)
    lines.append(f"  for (int launch = 0; launch < {launches}; ++launch) {{")
    for i, c in enumerate(ks.arrays):
        lines.append(f"    a{i} = ({C_TYPES[ks.storage[c]]}*)dcs_read(argv[{i + 1}], {nbytes[c]});")
    lines.append(f"    dcs_run({how.grid}, {how.block[0]}, {how.block[1]}, [=] {{ {ks.name}({', '.join(args)}); }});")
    lines.append("  }")
    for i, c in enumerate(ks.arrays):
        if c in ks.outputs:
            lines.append(f"  dcs_write(argv[{i + 1}], (const char*)a{i}, {nbytes[c]});")
    return "\n".join(lines + ["  return 0;", "}"])


def emulate(ks, arrays: dict[str, np.ndarray], workdir: Path, launches: int = 1) -> dict[str, np.ndarray]:
    """Run kernel ``ks`` on ``arrays`` (every container it touches, outputs pre-initialized as the
    program allocates them) and return its outputs — of the last of ``launches`` launches, each on
    the arrays as given, in one process (so state a kernel keeps between launches is exercised)."""
    kernel = "\n".join(line for line in ks.source.splitlines() if not line.startswith("#include <cuda_"))
    src = workdir / f"{ks.name}.cpp"
    src.write_text(HEADER + kernel + RUNNER + _main(ks, arrays, launches), encoding="utf-8")
    exe = workdir / ks.name
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w", "-o", str(exe), str(src)], check=True,
                   capture_output=True, text=True)
    paths = []
    for i, c in enumerate(ks.arrays):
        path = workdir / f"{ks.name}_a{i}.bin"
        value = arrays[c]
        if ks.storage[c] == "bfloat16" and value.dtype != np.uint16:
            value = to_bf16_bits(value)
        np.ascontiguousarray(value.astype(NUMPY[ks.storage[c]], copy=False)).tofile(path)
        paths.append(str(path))
    subprocess.run([str(exe), *paths], check=True, capture_output=True, text=True, timeout=600)
    out = {}
    for c in ks.outputs:
        k = ks.arrays.index(c)
        got = np.fromfile(paths[k], dtype=NUMPY[ks.storage[c]]).reshape(arrays[c].shape)
        out[c] = from_bf16_bits(got) if ks.storage[c] == "bfloat16" else got
    return out


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bits, round to nearest even (as ``__float2bfloat16_rn``)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)
