// Shapes and layouts of the oneDNN convolution (see conv_onednn_layout.h).
#include "kernels/onednn_config.h"  // generated: SHARDRT_WITH_ONEDNN

#if SHARDRT_WITH_ONEDNN
#include "kernels/cpu/conv_onednn_layout.h"

#include <algorithm>

namespace shardrt::kernels::cpu::onednn {

using dnnl::memory;
using Tag = memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void key_append(std::string& key, std::initializer_list<int64_t> values) {
  for (int64_t v : values) key += std::to_string(v) + ",";
  key += ";";
}

std::string md_key(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  std::string key;
  key_append(key, {d.ndims, static_cast<int64_t>(d.data_type), static_cast<int64_t>(d.format_kind), d.offset0});
  for (int i = 0; i < d.ndims; ++i) key_append(key, {d.dims[i], d.padded_dims[i], d.padded_offsets[i]});
  if (d.format_kind == dnnl_blocked) {
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    for (int i = 0; i < d.ndims; ++i) key_append(key, {b.strides[i]});
    for (int i = 0; i < b.inner_nblks; ++i) key_append(key, {b.inner_blks[i], b.inner_idxs[i]});
  }
  key_append(key, {static_cast<int64_t>(d.extra.flags)});
  return key;
}

namespace {

Tag blocked_tag(int nd, int64_t block) {
  if (block == 16) return nd == 1 ? Tag::nCw16c : nd == 2 ? Tag::nChw16c : Tag::nCdhw16c;
  return nd == 1 ? Tag::nCw8c : nd == 2 ? Tag::nChw8c : Tag::nCdhw8c;
}

// Row-major strides of extents e[0..nd).
memory::dims row_major(const int64_t* e, int nd) {
  memory::dims s(static_cast<size_t>(nd), 1);
  for (int d = nd - 2; d >= 0; --d) s[d] = s[d + 1] * e[d + 1];
  return s;
}

bool has_avx512() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

}  // namespace

Problem::Problem(const ConvGeometry& geometry) : g(geometry) {
  supported = g.nd >= 1 && g.nd <= 3 && g.batch > 0 && g.c_in > 0 && g.c_out > 0;
  for (int d = 0; d < g.nd; ++d) {
    supported = supported && g.in[d] > 0 && g.out[d] > 0;
    taps *= g.kernel[d];
    in_vol *= g.in[d];
    out_vol *= g.out[d];
    strides.push_back(g.stride[d]);
    dilates.push_back(g.dilation[d] - 1);
    pad_l.push_back(g.pad[d]);
    // Symmetric, as the output size was computed (floor): oneDNN checks the extents with the same division.
    pad_r.push_back(g.pad[d]);
  }
  block = has_avx512() ? 16 : 8;
  key_append(key, {g.nd, block});
  for (int d = 0; d < g.nd; ++d) key_append(key, {g.in[d], g.out[d], g.kernel[d], g.stride[d], g.pad[d], g.dilation[d]});
}

memory::dims Problem::spatial(bool input) const {
  const int64_t* e = input ? g.in : g.out;
  return memory::dims(e, e + g.nd);
}

memory::desc Problem::activation(int64_t n, int64_t c, bool input) const {
  memory::dims dims{n, c};
  for (int64_t e : spatial(input)) dims.push_back(e);
  return memory::desc(dims, memory::data_type::f32, blocked_tag(g.nd, block));
}

memory::desc Problem::plain_activation(int64_t n, int64_t c, int64_t c_total, bool input) const {
  const int64_t vol = input ? in_vol : out_vol;
  memory::dims dims{n, c}, strides{c_total * vol, vol};
  const memory::dims sp = spatial(input), rm = row_major(sp.data(), g.nd);
  dims.insert(dims.end(), sp.begin(), sp.end());
  strides.insert(strides.end(), rm.begin(), rm.end());
  return memory::desc(dims, memory::data_type::f32, strides);
}

memory::dims Problem::weight_dims(int64_t co, int64_t ci) const {
  memory::dims dims{co, ci};
  for (int d = 0; d < g.nd; ++d) dims.push_back(g.kernel[d]);
  return dims;
}

memory::desc Problem::plain_weights(int64_t co, int64_t ci, int64_t ci_total) const {
  memory::dims strides{ci_total * taps, taps};
  const memory::dims rm = row_major(g.kernel, g.nd);
  strides.insert(strides.end(), rm.begin(), rm.end());
  return memory::desc(weight_dims(co, ci), memory::data_type::f32, strides);
}

ChannelGroups::ChannelGroups(int64_t c) : total_(c) {
  for (int64_t c0 = 0; c0 < c; c0 += kGroupChannels) begin_.push_back(c0);
  // A last group of fewer than 16 channels joins the one before: oneDNN's kernels take few channels only in plain
  // layout, and one group of 3 beside blocked ones would need the input in both.
  if (begin_.size() > 1 && c - begin_.back() < 16) begin_.pop_back();
}

SampleChunks::SampleChunks(int64_t batch, int64_t want) : batch_(batch) {
  step_ = (batch + want - 1) / want;
  count_ = (batch + step_ - 1) / step_;
}

BlockedTensor::BlockedTensor(const Problem& p, int64_t batch, int64_t c, bool input)
    : md(p.activation(batch, c, input)) {
  floats = static_cast<int64_t>(md.get_size() / sizeof(float));
  per_sample = floats / batch;
}

GroupedTensor::GroupedTensor(const Problem& p, int64_t batch, const ChannelGroups& groups, bool input) {
  offset_.push_back(0);
  for (size_t i = 0; i < groups.count(); ++i) {
    md_.push_back(p.activation(batch, groups.size(i), input));
    const int64_t floats = static_cast<int64_t>(md_.back().get_size() / sizeof(float));
    per_sample_.push_back(floats / batch);
    offset_.push_back(offset_.back() + floats);
  }
}

}  // namespace shardrt::kernels::cpu::onednn
#endif
