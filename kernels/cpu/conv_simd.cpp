// The conv row kernels (see conv_simd.h), written once with Highway and compiled per target by foreach_target;
// HWY_DYNAMIC_DISPATCH picks the best target the running CPU supports.
#include "kernels/cpu/conv_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/conv_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::conv_rows {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <typename T>
void AddTo(T* dst, const T* src, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Add(hn::LoadU(d, dst + i), hn::LoadU(d, src + i)), d, dst + i);
  if (i < n) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::Add(hn::MaskedLoad(mask, d, dst + i), hn::MaskedLoad(mask, d, src + i)), mask, d, dst + i);
  }
}

void AddToF(float* dst, const float* src, int64_t n) { AddTo(dst, src, n); }
void AddToD(double* dst, const double* src, int64_t n) { AddTo(dst, src, n); }

}  // namespace HWY_NAMESPACE
}  // namespace shardrt::kernels::cpu::conv_rows
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu::conv_rows {

HWY_EXPORT(AddToF);
HWY_EXPORT(AddToD);

void add_to(float* dst, const float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(AddToF)(dst, src, n); }
void add_to(double* dst, const double* src, int64_t n) { HWY_DYNAMIC_DISPATCH(AddToD)(dst, src, n); }

}  // namespace shardrt::kernels::cpu::conv_rows
#endif  // HWY_ONCE
