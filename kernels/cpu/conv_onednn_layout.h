// Shapes and memory layouts of the oneDNN convolution (conv_onednn.cpp): the problem in oneDNN's terms, the
// channel groups and sample chunks the work is cut into, and where each piece's operands lie in the blocked
// copies. Built only with oneDNN; internal to the conv kernel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/conv.h"

namespace shardrt::kernels::cpu::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // one per thread

// Channels per group. Measured on AVX2 (3x3, 64 channels, 128²): 32-channel pieces run within 3% of the whole
// convolution, 16-channel ones 20% slower (the kernel's register block wants several 8-channel blocks).
constexpr int64_t kGroupChannels = 32;

// A cache key: the integers appended in order.
void key_append(std::string& key, std::initializer_list<int64_t> values);
// Everything that defines a memory descriptor's layout, as a key.
std::string md_key(const dnnl::memory::desc& md);

// The convolution g in oneDNN's terms: spatial extents, kernel, strides, dilations (oneDNN counts dilation - 1),
// paddings, and the channel block of the blocked activations (8 floats, or 16 where the CPU has AVX-512).
struct Problem {
  explicit Problem(const ConvGeometry& g);

  ConvGeometry g;
  bool supported = false;  // every extent positive and 1 to 3 spatial dims
  int64_t block = 8, taps = 1, in_vol = 1, out_vol = 1;
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
  std::string key;  // the geometry without batch and channels

  // (n, c, *spatial) blocked by channels, dense: the input's extents or the output's.
  dnnl::memory::desc activation(int64_t n, int64_t c, bool input) const;
  // Channels [c0, c0 + c) of a plain (n, c_total, *spatial) tensor; the data pointer goes to channel c0.
  dnnl::memory::desc plain_activation(int64_t n, int64_t c, int64_t c_total, bool input) const;
  dnnl::memory::dims weight_dims(int64_t co, int64_t ci) const;
  // Input channels [i0, i0 + ci) of output channels [o0, o0 + co) of the plain (c_out, ci_total, *kernel) weights.
  dnnl::memory::desc plain_weights(int64_t co, int64_t ci, int64_t ci_total) const;

 private:
  dnnl::memory::dims spatial(bool input) const;
};

// [0, c) in groups of kGroupChannels, the last one shorter (16 to 31) or longer (33 to 47).
class ChannelGroups {
 public:
  explicit ChannelGroups(int64_t c);
  size_t count() const { return begin_.size(); }
  int64_t begin(size_t i) const { return begin_[i]; }
  int64_t size(size_t i) const { return (i + 1 < begin_.size() ? begin_[i + 1] : total_) - begin_[i]; }

 private:
  int64_t total_;
  std::vector<int64_t> begin_;
};

// [0, batch) in `want` chunks of equal size, the last one shorter (fewer chunks when that leaves some empty).
class SampleChunks {
 public:
  SampleChunks(int64_t batch, int64_t want);
  int64_t count() const { return count_; }
  int64_t begin(int64_t i) const { return i * step_; }
  int64_t size(int64_t i) const { return std::min(step_, batch_ - i * step_); }

 private:
  int64_t batch_, step_, count_;
};

// A (batch, c) activation blocked by channels as one dense tensor.
struct BlockedTensor {
  BlockedTensor(const Problem& p, int64_t batch, int64_t c, bool input);
  dnnl::memory::desc md;
  int64_t floats = 0, per_sample = 0;
};

// A (batch, c) activation as one dense blocked tensor per channel group, back to back. With one sample this is the
// same memory as the BlockedTensor of all channels (groups are whole channel blocks), which the backward uses.
class GroupedTensor {
 public:
  GroupedTensor(const Problem& p, int64_t batch, const ChannelGroups& groups, bool input);
  const dnnl::memory::desc& md(size_t group) const { return md_[group]; }
  // Floats from the start to sample n0 of group `group`.
  int64_t offset(size_t group, int64_t n0) const { return offset_[group] + n0 * per_sample_[group]; }
  int64_t floats() const { return offset_.back(); }

 private:
  std::vector<dnnl::memory::desc> md_;
  std::vector<int64_t> offset_, per_sample_;
};

}  // namespace shardrt::kernels::cpu::onednn
