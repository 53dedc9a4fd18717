#include "models/noise_window.h"

#include <vector>

#include "runtime/errors.h"
#include "runtime/random_fill.h"

namespace shardrt::models {

Tensor uniform_window(const ShardTensor& like, uint64_t seed, uint64_t offset) {
  const ShardSpec& spec = like.spec();
  SHARDRT_CHECK(!spec.any_partial(), ValueError, "uniform_window: ", like.str(),
                " is Partial; noise is drawn for data laid out by Shard / Replicate");
  const Shape& global = spec.global_shape();
  const Shape local = like.local().shape();
  const int nd = static_cast<int>(global.size());
  std::vector<int64_t> start(static_cast<size_t>(nd), 0), stride(static_cast<size_t>(nd), 1);
  for (int m = 0; m < like.mesh().ndim(); ++m)
    if (spec.placement(m).is_shard()) start[spec.placement(m).dim] += spec.offset(m);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * global[d + 1];
  const bool wide = like.dtype() == DType::f64;
  Tensor out = Tensor::empty(local, wide ? DType::f64 : DType::f32, Device::cpu());
  std::vector<int64_t> at(static_cast<size_t>(nd), 0);  // the local multi-index, row-major
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t g = 0;
    for (int d = 0; d < nd; ++d) g += static_cast<uint64_t>((start[d] + at[d]) * stride[d]);
    if (wide) out.data<double>()[i] = philox::sample_f64(philox::Distribution::uniform, seed, offset, g, 0.0, 1.0);
    else out.data<float>()[i] = philox::sample_f32(philox::Distribution::uniform, seed, offset, g, 0.0f, 1.0f);
    for (int d = nd - 1; d >= 0 && ++at[d] == local[d]; --d) at[d] = 0;
  }
  return out.to(like.dtype()).to(like.device());
}

}  // namespace shardrt::models
