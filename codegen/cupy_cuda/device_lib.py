"""The CUDA C device library: ``PRELUDE`` starts every kernel's text (the compile checks keep one copy to build
many kernels as one unit), then come the ``HELPER_SOURCES`` its expressions call (``c_expr``: NumPy's ``mod`` and
``floordiv``, integer ``abs`` and ``sign``), each guarded by an ``#ifndef`` so kernels compiled together define it once.

``PRELUDE`` holds the NaN-propagating ``dcs_max``/``dcs_min`` (as ``np.maximum``: elementwise Max/Min and Relu print
``dcs_max<float>``, where ``fmaxf`` would drop a NaN), ``dcs_op<OP>`` (OP: ``reduction_pattern.WCR_OP``, 0 sum,
1 prod, 2 max, 3 min), the warp reduction ``dcs_warp<OP>`` (``__shfl_xor_sync`` butterfly, lane 0's result
broadcast) and ``dcs_cas<OP>``, the compare-and-swap loop of a max, min or prod that threads share (by ``dcs_op``).
"""
from __future__ import annotations

PRELUDE = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define DCS_INF __int_as_float(0x7f800000)

#define DCS_FULL_MASK 0xffffffffu

template <typename T> __device__ T dcs_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ T dcs_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T dcs_sq(T a) { return a * a; }
template <typename T> __device__ __forceinline__ T dcs_cube(T a) { return a * a * a; }
template <int OP, typename T> __device__ __forceinline__ T dcs_op(T a, T b) {
  if (OP == 0) return a + b;
  if (OP == 1) return a * b;
  if (OP == 2) return dcs_max(a, b);
  return dcs_min(a, b);
}
template <int OP, typename T> __device__ __forceinline__ T dcs_warp(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = dcs_op<OP>(v, __shfl_xor_sync(DCS_FULL_MASK, v, o));
  return __shfl_sync(DCS_FULL_MASK, v, 0);
}
template <int OP, int W, typename T> __device__ __forceinline__ T dcs_lanes(T v) {   // W lanes per row
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) v = dcs_op<OP>(v, __shfl_xor_sync(DCS_FULL_MASK, v, o));
  return __shfl_sync(DCS_FULL_MASK, v, 0, W);
}
template <int OP> __device__ float dcs_cas(float* addr, float v) {
  int* p = (int*)addr; int old = *p, seen;
  do { seen = old;
       old = atomicCAS(p, seen, __float_as_int(dcs_op<OP>(__int_as_float(seen), v))); } while (seen != old);
  return __int_as_float(old);
}
"""


def _helper(name: str, integer: str, real: str) -> str:
    """``name`` for every integer type (``integer``) and for float and double (``real``, over ``F`` = fmodf/fmod, …),
    guarded so that kernels compiled as one unit define it once."""
    guard = name.upper()
    reals = "".join(f"__device__ inline {t} {name}({t} a, {t} b) {{ {real.format(T=t, F=f)} }}\n"
                    for t, f in (("float", "f"), ("double", "")))
    return (f"#ifndef {guard}\n#define {guard}\ntemplate <typename T> __device__ T {name}(T a, T b) {{ {integer} }}\n"
            f"{reals}#endif\n")


HELPER_SOURCES = {
    "dcs_mod": _helper("dcs_mod", "T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
                       "{T} r = fmod{F}(a, b); return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysign{F}(({T})0, b);"),
    "dcs_floordiv": _helper("dcs_floordiv", "T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;",
                            "return floor{F}(a / b);"),
    "dcs_iabs": "#ifndef DCS_IABS\n#define DCS_IABS\n"
                "template <typename T> __device__ T dcs_iabs(T a) { return a < 0 ? -a : a; }\n#endif\n",
    "dcs_isign": "#ifndef DCS_ISIGN\n#define DCS_ISIGN\n"
                 "template <typename T> __device__ T dcs_isign(T a) { return (T)((a > 0) - (a < 0)); }\n#endif\n",
}
