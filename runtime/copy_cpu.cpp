#include "runtime/copy_cpu.h"

#include <cstring>
#include <vector>

#include "runtime/half.h"

namespace shardrt {

namespace {

// Conversions go through float for the 16-bit types, which is exact in that direction.
template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<S, bf16>) return convert<D>(bf16_to_float(v));
  else if constexpr (std::is_same_v<S, f16>) return convert<D>(f16_to_float(v));
  else if constexpr (std::is_same_v<D, bf16>) return float_to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, f16>) return float_to_f16(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, bool>) return v != S(0);
  else return static_cast<D>(v);
}

template <typename D, typename S>
void copy_loop(int ndim, const int64_t* shape, D* dst, const int64_t* dst_strides, const S* src,
               const int64_t* src_strides) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  if (n == 0) return;
  if (ndim == 0) {
    *dst = convert<D>(*src);
    return;
  }
  // Walk the index space with the last dim innermost; the inner loop is a plain strided loop.
  std::vector<int64_t> idx(ndim, 0);
  const int last = ndim - 1;
  const int64_t len = shape[last], ds = dst_strides[last], ss = src_strides[last];
  int64_t outer = n / len;
  int64_t doff = 0, soff = 0;
  for (int64_t o = 0; o < outer; ++o) {
    D* d = dst + doff;
    const S* s = src + soff;
    for (int64_t i = 0; i < len; ++i) d[i * ds] = convert<D>(s[i * ss]);
    for (int k = last - 1; k >= 0; --k) {  // advance the multi-index over the outer dims
      ++idx[k];
      doff += dst_strides[k];
      soff += src_strides[k];
      if (idx[k] < shape[k]) break;
      doff -= dst_strides[k] * shape[k];
      soff -= src_strides[k] * shape[k];
      idx[k] = 0;
    }
  }
}

template <typename F>
void visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f(double{});
    case DType::f32: return f(float{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    case DType::u8: return f(uint8_t{});
    case DType::boolean: return f(bool{});
  }
}

}  // namespace

void copy_strided_cpu(int ndim, const int64_t* shape, void* dst, DType dst_dtype, const int64_t* dst_strides,
                      const void* src, DType src_dtype, const int64_t* src_strides) {
  visit_dtype(dst_dtype, [&](auto d_tag) {
    using D = decltype(d_tag);
    visit_dtype(src_dtype, [&](auto s_tag) {
      using S = decltype(s_tag);
      copy_loop<D, S>(ndim, shape, static_cast<D*>(dst), dst_strides, static_cast<const S*>(src), src_strides);
    });
  });
}

void fill_cpu(void* dst, DType dtype, int64_t n, double value) {
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v = convert<T>(value);
    T* p = static_cast<T*>(dst);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

}  // namespace shardrt
