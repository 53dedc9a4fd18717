// The pieces of the oneDNN convolution (conv_onednn.h): single-threaded oneDNN primitives cached by shape, the
// layout reorders between the caller's plain tensors and oneDNN's blocked ones, and the parallel run of a list of
// pieces. Built only with oneDNN; internal to the conv kernel.
#pragma once
#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/conv_onednn_layout.h"

namespace shardrt::kernels::cpu::onednn {

// Pieces per call: a number fixed by the shapes (so the split does not follow the thread count), at least this
// many where the channel groups, samples and bands allow, so that the threads of a node have work.
constexpr int64_t kMinPieces = 8;

// A primitive created for one thread and what its caller must hand it: weights in its own layout (the weight
// grad's layout for a weight-grad piece) and a scratchpad.
struct Piece {
  dnnl::primitive prim;
  dnnl::memory::desc weights, scratchpad;
  // The input in plain (n, c, *spatial) layout instead of blocked: oneDNN's kernels for fewer input channels than a
  // block (an image's 1-3) read it so, which also saves the input's reorder.
  bool plain_src = false;
};
enum class Kind { forward, backward_data, backward_weights };

// The cached piece for n samples, ci input and co output channels of p's spatial problem, or nullptr when oneDNN
// has only its reference kernel (or none) for it.
std::shared_ptr<const Piece> piece(Kind kind, const Problem& p, int64_t n, int64_t ci, int64_t co, bool bias);

dnnl::memory mem(const dnnl::memory::desc& md, const void* data);

// to = from in another layout, or to += from. A copy (or one add per element), so its bits do not depend on how
// oneDNN splits it between threads.
void reorder(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& to, void* dst,
             bool accumulate = false);

// One piece's call: its primitive and arguments (the thread that runs it adds its scratchpad).
struct Run {
  std::shared_ptr<const Piece> piece;
  std::unordered_map<int, dnnl::memory> args;
};

// Runs every piece on one thread each, in parallel where there are threads. Which thread runs which piece changes
// no result: a piece writes only its own outputs.
void execute(const std::vector<Run>& runs);

// Sample chunks beside `groups` channel groups: enough for kMinPieces pieces, at most one chunk per sample.
SampleChunks chunks_for(int64_t batch, size_t groups);

dnnl::memory::desc bias_md(int64_t n);

}  // namespace shardrt::kernels::cpu::onednn
