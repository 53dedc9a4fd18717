// The weight grad of the oneDNN convolution (conv_onednn.h), over bands of output rows. Built only with
// oneDNN; internal to the conv kernel.
//
// oneDNN's weight-grad kernel sums every output position of its call in one f32 running sum: over a whole 128²
// image that is 16,384 terms, about 5x the round-off of the im2col GEMM (whose BLAS sums in K blocks). So the
// output rows of the outermost spatial dim are cut into bands of about kBandPositions positions, each band a piece
// over a copy of its input rows (halo rows included, zeros outside the image: the piece runs without padding along
// that dim); a task (output group, input group, chunk of (sample, band) items) adds its items' grads in item order,
// and the tasks' sums go into gw in chunk order. Bands, groups and chunks follow from the shapes alone.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/conv_onednn_pieces.h"

namespace shardrt::kernels::cpu::onednn {

// Output positions per band.
constexpr int64_t kBandPositions = 256;

class WeightGrad {
 public:
  // ok() is false when oneDNN has no fast kernel for some band piece (the caller then runs im2col + GEMM).
  explicit WeightGrad(const Problem& p);
  bool ok() const { return ok_; }
  // gw += dL/dw, from x and gy in plain layout.
  void run(const float* x, const float* gy, float* gw) const;

 private:
  struct Task {
    size_t go, gi;
    int64_t first_item, items;  // items t = n * bands + b, in order
  };
  int64_t out_rows(int64_t band) const;
  int64_t in_rows(int64_t band) const;
  Problem band_problem(int64_t band) const;
  size_t shape_of(int64_t band) const;  // 1 for a shorter last band, else 0
  const std::shared_ptr<const Piece>& task_piece(const Task& t, int64_t band) const;
  void copy_bands(const float* x, const float* gy, float* x_bands, float* gy_bands) const;

  Problem p_;
  bool ok_ = true, plain_src_ = false;
  ChannelGroups oc_, ic_;
  int64_t rows_ = 1, bands_ = 1;               // output rows per band (the last keeps the rest), band count
  std::vector<Problem> band_problems_;         // a band's problem: one sample, its rows, no padding along them
  std::vector<int64_t> x_offset_, gy_offset_;  // floats to each (sample, band) copy, and the total at the end
  std::vector<Task> tasks_;
  // [band shape][go][gi]
  std::vector<std::shared_ptr<const Piece>> pieces_;
};

}  // namespace shardrt::kernels::cpu::onednn
