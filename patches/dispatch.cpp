#include "patches/dispatch.h"

namespace shardrt {

std::string describe_placements(const std::vector<const ShardTensor*>& inputs) {
  std::string s;
  const ShardTensor* first = nullptr;
  bool meshes_differ = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += i + 1 == inputs.size() ? " and " : ", ";
    const ShardTensor* t = inputs[i];
    if (!t || !t->defined()) {
      s += "(undefined)";
      continue;
    }
    s += placements_str(t->placements()) + " global " + shape_str(t->global_shape());
    if (!first) first = t;
    else if (!same_mesh(first->mesh(), t->mesh())) meshes_differ = true;
  }
  // The most common reason for no match across inputs; say it rather than leave the reader comparing placements.
  if (meshes_differ) s += " (the inputs live on different meshes)";
  return s;
}

}  // namespace shardrt
