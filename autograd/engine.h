// Reverse-mode execution of the tape.
#pragma once
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

// Runs backward from `roots` seeded with `grads` (one per root, same shape; undefined means ones, allowed only
// for single-element roots). Grads accumulate into every reachable leaf that requires grad. Unless
// `retain_graph`, each node frees its saved tensors after running, and a second backward through it throws
// AutogradError.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);
inline void backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad}, retain_graph);
}

// dst += src, in place, for same-shape floating tensors on one device (used for grad accumulation); bf16 / f16
// destinations are summed in f32 and rounded once.
void accumulate_into(const Tensor& dst, const Tensor& src);

}  // namespace shardrt
