// The oneDNN convolution (see conv_onednn.h): pieces of fixed shape, each a single-threaded oneDNN primitive over
// channel-blocked copies of the operands (nCw8c / nChw8c / nCdhw8c, 16c where the CPU has AVX-512), the
// primitives cached by shape and reused across calls and steps.
#include "kernels/cpu/conv_onednn.h"
#include "kernels/onednn_config.h"  // generated: SHARDRT_WITH_ONEDNN

#if SHARDRT_WITH_ONEDNN
#include <omp.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/conv_onednn_pieces.h"
#include "kernels/cpu/conv_onednn_weights.h"
#include "kernels/cpu/scratch.h"
#endif

namespace shardrt::kernels::cpu::onednn {

#if !SHARDRT_WITH_ONEDNN

bool built() { return false; }
bool accepts(const ConvGeometry&) { return false; }
bool conv_forward(const ConvGeometry&, const float*, const float*, const float*, float*) { return false; }
bool conv_backward_data(const ConvGeometry&, const float*, const float*, float*) { return false; }
bool conv_backward_weights(const ConvGeometry&, const float*, const float*, float*) { return false; }

#else

namespace {

using dnnl::memory;
using PiecePtr = std::shared_ptr<const Piece>;

// The weights of each channel group in the layout its pieces want, back to back: output-channel groups for the
// forward (w[o0:o1, :]), input-channel groups for the input grad (w[:, i0:i1]). A few KiB each.
struct GroupWeights {
  std::vector<int64_t> offset{0};
  Scratch<float> data;
  GroupWeights(const Problem& p, const ChannelGroups& groups, const std::vector<PiecePtr>& first_piece,
               const float* w, bool by_output)
      : data([&] {
          for (const PiecePtr& pc : first_piece)
            offset.push_back(offset.back() + static_cast<int64_t>(pc->weights.get_size() / sizeof(float)));
          return offset.back();
        }()) {
    const ConvGeometry& g = p.g;
    for (size_t i = 0; i < first_piece.size(); ++i) {  // empty where the caller needs no weights
      const memory::desc from = by_output ? p.plain_weights(groups.size(i), g.c_in, g.c_in)
                                          : p.plain_weights(g.c_out, groups.size(i), g.c_in);
      const float* src = w + groups.begin(i) * (by_output ? g.c_in * p.taps : p.taps);
      reorder(from, src, first_piece[i]->weights, data.data() + offset[i]);
    }
  }
};

// The forward's pieces, (output group, sample chunk) in that order; empty when one is missing.
std::vector<PiecePtr> forward_pieces(const Problem& p, const ChannelGroups& oc, const SampleChunks& chunks, bool bias) {
  std::vector<PiecePtr> pieces;
  for (size_t go = 0; go < oc.count(); ++go)
    for (int64_t c = 0; c < chunks.count(); ++c) {
      pieces.push_back(piece(Kind::forward, p, chunks.size(c), p.g.c_in, oc.size(go), bias));
      if (!pieces.back()) return {};
    }
  return pieces;
}

}  // namespace

bool built() { return true; }

bool conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  const Problem p(g);
  if (!p.supported) return false;
  const ChannelGroups oc(g.c_out);
  const SampleChunks chunks = chunks_for(g.batch, oc.count());
  // Every piece's primitive first: a shape oneDNN cannot run well sends the whole call to the im2col path.
  const std::vector<PiecePtr> pieces = forward_pieces(p, oc, chunks, bias != nullptr);
  if (pieces.empty()) return false;
  std::vector<PiecePtr> first;
  for (size_t go = 0; go < oc.count(); ++go) first.push_back(pieces[go * chunks.count()]);

  const BlockedTensor xb(p, g.batch, g.c_in, true);
  const GroupedTensor yg(p, g.batch, oc, false);
  const bool blocked_x = std::any_of(pieces.begin(), pieces.end(), [](const PiecePtr& pc) { return !pc->plain_src; });
  Scratch<float> x_blocked(blocked_x ? xb.floats : 0), y_grouped(yg.floats());
  if (blocked_x) reorder(p.plain_activation(g.batch, g.c_in, g.c_in, true), x, xb.md, x_blocked.data());
  const GroupWeights weights(p, oc, first, w, /*by_output=*/true);

  std::vector<Run> runs;
  for (size_t go = 0; go < oc.count(); ++go)
    for (int64_t c = 0; c < chunks.count(); ++c) {
      const PiecePtr& pc = pieces[go * chunks.count() + c];
      const int64_t n = chunks.size(c), n0 = chunks.begin(c);
      Run r{pc, {}};
      r.args.insert({DNNL_ARG_SRC, pc->plain_src ? mem(p.plain_activation(n, g.c_in, g.c_in, true), x + n0 * g.c_in * p.in_vol)
                                                 : mem(p.activation(n, g.c_in, true), x_blocked.data() + n0 * xb.per_sample)});
      r.args.insert({DNNL_ARG_WEIGHTS, mem(pc->weights, weights.data.data() + weights.offset[go])});
      if (bias) r.args.insert({DNNL_ARG_BIAS, mem(bias_md(oc.size(go)), bias + oc.begin(go))});
      r.args.insert({DNNL_ARG_DST, mem(p.activation(n, oc.size(go), false), y_grouped.data() + yg.offset(go, n0))});
      runs.push_back(std::move(r));
    }
  execute(runs);
  for (size_t go = 0; go < oc.count(); ++go)
    reorder(yg.md(go), y_grouped.data() + yg.offset(go, 0), p.plain_activation(g.batch, oc.size(go), g.c_out, false),
            y + oc.begin(go) * p.out_vol);
  return true;
}

namespace {

// The input grad's pieces: (input-channel group, sample chunk), each writing its own block of the grouped gx.
struct DataGrad {
  struct Item {
    size_t gi;
    int64_t chunk;
    PiecePtr piece;
  };
  ChannelGroups ic;
  SampleChunks chunks;
  std::vector<Item> items;
  bool ok = true;

  explicit DataGrad(const Problem& p) : ic(p.g.c_in), chunks(chunks_for(p.g.batch, ic.count())) {
    for (size_t gi = 0; gi < ic.count(); ++gi)
      for (int64_t c = 0; c < chunks.count(); ++c) {
        items.push_back({gi, c, piece(Kind::backward_data, p, chunks.size(c), ic.size(gi), p.g.c_out, false)});
        ok = ok && items.back().piece;
      }
  }

  // gx (overwritten) = the input grad, from gy in plain layout.
  void run(const Problem& p, const float* w, const float* gy, float* gx) const {
    const ConvGeometry& g = p.g;
    const BlockedTensor gyb(p, g.batch, g.c_out, false);
    const GroupedTensor gxg(p, g.batch, ic, true);
    Scratch<float> gy_blocked(gyb.floats), gx_grouped(gxg.floats());
    reorder(p.plain_activation(g.batch, g.c_out, g.c_out, false), gy, gyb.md, gy_blocked.data());
    std::vector<PiecePtr> first;
    for (const Item& d : items)
      if (d.chunk == 0) first.push_back(d.piece);
    const GroupWeights weights(p, ic, first, w, /*by_output=*/false);
    std::vector<Run> runs;
    for (const Item& d : items) {
      const int64_t n = chunks.size(d.chunk), n0 = chunks.begin(d.chunk);
      Run r{d.piece, {}};
      r.args.insert({DNNL_ARG_DIFF_SRC, mem(p.activation(n, ic.size(d.gi), true), gx_grouped.data() + gxg.offset(d.gi, n0))});
      r.args.insert({DNNL_ARG_WEIGHTS, mem(d.piece->weights, weights.data.data() + weights.offset[d.gi])});
      r.args.insert({DNNL_ARG_DIFF_DST, mem(p.activation(n, g.c_out, false), gy_blocked.data() + n0 * gyb.per_sample)});
      runs.push_back(std::move(r));
    }
    execute(runs);
    for (size_t gi = 0; gi < ic.count(); ++gi)
      reorder(gxg.md(gi), gx_grouped.data() + gxg.offset(gi, 0), p.plain_activation(g.batch, ic.size(gi), g.c_in, true),
              gx + ic.begin(gi) * p.in_vol);
  }
};

}  // namespace

bool accepts(const ConvGeometry& g) {
  const Problem p(g);
  if (!p.supported) return false;
  const ChannelGroups oc(g.c_out);
  return !forward_pieces(p, oc, chunks_for(g.batch, oc.count()), true).empty() && DataGrad(p).ok &&
         WeightGrad(p).ok();
}

bool conv_backward_data(const ConvGeometry& g, const float* w, const float* gy, float* gx) {
  const Problem p(g);
  if (!p.supported) return false;
  const DataGrad data(p);
  if (!data.ok) return false;
  data.run(p, w, gy, gx);
  return true;
}

bool conv_backward_weights(const ConvGeometry& g, const float* x, const float* gy, float* gw) {
  const Problem p(g);
  if (!p.supported) return false;
  const WeightGrad weights(p);
  if (!weights.ok()) return false;
  weights.run(x, gy, gw);
  return true;
}

#endif

}  // namespace shardrt::kernels::cpu::onednn
