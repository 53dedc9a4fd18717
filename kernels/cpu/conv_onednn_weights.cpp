// The banded weight grad of the oneDNN convolution (see conv_onednn_weights.h).
#include "kernels/onednn_config.h"  // generated: SHARDRT_WITH_ONEDNN

#if SHARDRT_WITH_ONEDNN
#include "kernels/cpu/conv_onednn_weights.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <unordered_map>

#include "kernels/cpu/scratch.h"

namespace shardrt::kernels::cpu::onednn {

using dnnl::memory;

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A plain view of rows [r0, r0 + rows) of the outermost spatial dim of sample n of a plain (N, c, *extent) tensor:
// dims (1, c, rows, extent[1..]), the data pointer at that sample and row.
memory::desc row_view(int nd, int64_t c, const int64_t* extent, int64_t rows) {
  int64_t vol = 1;
  for (int d = 0; d < nd; ++d) vol *= extent[d];
  memory::dims dims{1, c, rows}, strides{c * vol, vol, vol / extent[0]};
  for (int d = 1; d < nd; ++d) dims.push_back(extent[d]);
  int64_t s = 1;
  std::vector<int64_t> rest(static_cast<size_t>(nd - 1));
  for (int d = nd - 1; d >= 1; --d) rest[d - 1] = s, s *= extent[d];
  strides.insert(strides.end(), rest.begin(), rest.end());
  return memory::desc(dims, memory::data_type::f32, strides);
}

}  // namespace

WeightGrad::WeightGrad(const Problem& p) : p_(p), oc_(p.g.c_out), ic_(p.g.c_in) {
  const ConvGeometry& g = p.g;
  const int64_t out_inner = p.out_vol / g.out[0];
  rows_ = std::clamp<int64_t>(ceil_div(kBandPositions, out_inner), 1, g.out[0]);
  bands_ = ceil_div(g.out[0], rows_);
  // The band shapes: all bands but the last share one; the last keeps the remaining rows.
  band_problems_.push_back(band_problem(0));
  if (out_rows(bands_ - 1) != rows_) band_problems_.push_back(band_problem(bands_ - 1));
  for (const Problem& pb : band_problems_)
    for (size_t go = 0; go < oc_.count(); ++go)
      for (size_t gi = 0; gi < ic_.count(); ++gi)
        pieces_.push_back(piece(Kind::backward_weights, pb, 1, ic_.size(gi), oc_.size(go), false));
  for (const auto& pc : pieces_) ok_ = ok_ && pc;
  if (!ok_) return;
  // One layout for the input copies, and one weight-grad layout per (group, group) pair whatever the band: a
  // task adds its items' grads elementwise.
  plain_src_ = pieces_[0]->plain_src;
  const size_t pairs = oc_.count() * ic_.count();
  for (size_t i = 0; i < pieces_.size(); ++i)
    ok_ = ok_ && pieces_[i]->plain_src == plain_src_ && pieces_[i]->weights == pieces_[i % pairs]->weights;

  x_offset_.push_back(0);
  gy_offset_.push_back(0);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t b = 0; b < bands_; ++b) {
      const Problem& pb = band_problems_[shape_of(b)];
      const memory::desc xd = plain_src_ ? pb.plain_activation(1, g.c_in, g.c_in, true) : pb.activation(1, g.c_in, true);
      x_offset_.push_back(x_offset_.back() + static_cast<int64_t>(xd.get_size() / sizeof(float)));
      gy_offset_.push_back(gy_offset_.back() + static_cast<int64_t>(pb.activation(1, g.c_out, false).get_size() / sizeof(float)));
    }

  const int64_t items = g.batch * bands_, pairs_i = static_cast<int64_t>(pairs);
  const int64_t chunks = std::clamp<int64_t>(ceil_div(kMinPieces, pairs_i), 1, items);
  const int64_t step = ceil_div(items, chunks);
  for (size_t go = 0; go < oc_.count(); ++go)
    for (size_t gi = 0; gi < ic_.count(); ++gi)
      for (int64_t first = 0; first < items; first += step) tasks_.push_back({go, gi, first, std::min(step, items - first)});
}

size_t WeightGrad::shape_of(int64_t band) const {
  return band == bands_ - 1 && band_problems_.size() > 1 ? 1 : 0;
}

int64_t WeightGrad::out_rows(int64_t band) const { return std::min(rows_, p_.g.out[0] - band * rows_); }

int64_t WeightGrad::in_rows(int64_t band) const {
  return (out_rows(band) - 1) * p_.g.stride[0] + (p_.g.kernel[0] - 1) * p_.g.dilation[0] + 1;
}

Problem WeightGrad::band_problem(int64_t band) const {
  ConvGeometry gb = p_.g;
  gb.batch = 1;
  gb.in[0] = in_rows(band);
  gb.out[0] = out_rows(band);
  gb.pad[0] = 0;  // the copies hold the padding rows as zeros
  return Problem(gb);
}

const std::shared_ptr<const Piece>& WeightGrad::task_piece(const Task& t, int64_t band) const {
  return pieces_[(shape_of(band) * oc_.count() + t.go) * ic_.count() + t.gi];
}

// x's rows of every (sample, band), halo rows included and zeros outside the image, and gy's rows of the band,
// each as one dense tensor of all channels in the pieces' layout. Copies, in parallel over (sample, band).
void WeightGrad::copy_bands(const float* x, const float* gy, float* x_bands, float* gy_bands) const {
  const ConvGeometry& g = p_.g;
  const int64_t in_inner = p_.in_vol / g.in[0], out_inner = p_.out_vol / g.out[0];
  const int64_t items = g.batch * bands_;
  std::exception_ptr failure;
#pragma omp parallel for if (items > 1 && !omp_in_parallel()) schedule(dynamic, 1)
  for (int64_t t = 0; t < items; ++t) {
    try {
      const int64_t n = t / bands_, b = t % bands_;
      const Problem& pb = band_problems_[shape_of(b)];
      const memory::desc xd = plain_src_ ? pb.plain_activation(1, g.c_in, g.c_in, true) : pb.activation(1, g.c_in, true);
      const int64_t first = b * rows_ * g.stride[0] - g.pad[0], rows = in_rows(b);
      const int64_t v0 = std::max<int64_t>(first, 0), v1 = std::min(first + rows, g.in[0]);
      float* xt = x_bands + x_offset_[t];
      if (v1 - v0 < rows) std::memset(xt, 0, xd.get_size());
      if (v1 > v0) {
        memory::dims offsets(static_cast<size_t>(g.nd + 2), 0), dims = xd.dims();
        offsets[2] = v0 - first;
        dims[2] = v1 - v0;
        reorder(row_view(g.nd, g.c_in, g.in, v1 - v0), x + n * g.c_in * p_.in_vol + v0 * in_inner,
                xd.submemory_desc(dims, offsets), xt);
      }
      reorder(row_view(g.nd, g.c_out, g.out, out_rows(b)), gy + n * g.c_out * p_.out_vol + b * rows_ * out_inner,
              pb.activation(1, g.c_out, false), gy_bands + gy_offset_[t]);
    } catch (...) {
#pragma omp critical(shardrt_onednn_bands)
      failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void WeightGrad::run(const float* x, const float* gy, float* gw) const {
  const ConvGeometry& g = p_.g;
  Scratch<float> x_bands(x_offset_.back()), gy_bands(gy_offset_.back());
  copy_bands(x, gy, x_bands.data(), gy_bands.data());

  // Each task's sum, in its pieces' layout.
  std::vector<int64_t> acc_offset{0};
  size_t scratch_bytes = 0, grad_floats = 0;
  for (const Task& t : tasks_) {
    const size_t w = task_piece(t, 0)->weights.get_size() / sizeof(float);
    acc_offset.push_back(acc_offset.back() + static_cast<int64_t>(w));
    grad_floats = std::max(grad_floats, w);
  }
  for (const auto& pc : pieces_) scratch_bytes = std::max(scratch_bytes, pc->scratchpad.get_size());
  Scratch<float> acc(acc_offset.back());
  std::exception_ptr failure;
#pragma omp parallel if (tasks_.size() > 1 && omp_get_max_threads() > 1 && !omp_in_parallel())
  {
    Scratch<char> scratch(static_cast<int64_t>(scratch_bytes));
    Scratch<float> grad(static_cast<int64_t>(grad_floats));
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < tasks_.size(); ++i) {
      try {
        const Task& t = tasks_[i];
        const int64_t ci = ic_.size(t.gi), co = oc_.size(t.go), i0 = ic_.begin(t.gi), o0 = oc_.begin(t.go);
        const size_t w = task_piece(t, 0)->weights.get_size() / sizeof(float);
        float* sum = acc.data() + acc_offset[i];
        std::fill(sum, sum + w, 0.0f);
        for (int64_t item = t.first_item; item < t.first_item + t.items; ++item) {
          const int64_t b = item % bands_;
          const Problem& pb = band_problems_[shape_of(b)];
          const auto& pc = task_piece(t, b);
          const memory::desc src = plain_src_ ? pb.plain_activation(1, ci, ci, true) : pb.activation(1, ci, true);
          std::unordered_map<int, memory> args{
              {DNNL_ARG_SRC, mem(src, x_bands.data() + x_offset_[item] + i0 * pb.in_vol)},
              {DNNL_ARG_DIFF_DST, mem(pb.activation(1, co, false), gy_bands.data() + gy_offset_[item] + o0 * pb.out_vol)},
              {DNNL_ARG_DIFF_WEIGHTS, mem(pc->weights, grad.data())}};
          if (pc->scratchpad.get_size() > 0) args.insert({DNNL_ARG_SCRATCHPAD, mem(pc->scratchpad, scratch.data())});
          pc->prim.execute(stream(), args);
          for (size_t j = 0; j < w; ++j) sum[j] += grad.data()[j];
        }
      } catch (...) {
#pragma omp critical(shardrt_onednn_weights)
        failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);

  // gw += each task's sum, in task order (for one group pair: chunk order).
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    const int64_t ci = ic_.size(t.gi), co = oc_.size(t.go), i0 = ic_.begin(t.gi), o0 = oc_.begin(t.go);
    const auto& pc = task_piece(t, 0);
    const float* sum = acc.data() + acc_offset[i];
    reorder(pc->weights, sum, p_.plain_weights(co, ci, g.c_in), gw + (o0 * g.c_in + i0) * p_.taps, /*accumulate=*/true);
  }
}

}  // namespace shardrt::kernels::cpu::onednn
#endif
