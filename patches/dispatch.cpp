#include "patches/dispatch.h"

namespace shardrt {

std::string describe_placements(const std::vector<const ShardTensor*>& inputs) {
  std::string s;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += i + 1 == inputs.size() ? " and " : ", ";
    const ShardTensor* t = inputs[i];
    s += t && t->defined() ? placements_str(t->placements()) : std::string("(undefined)");
  }
  return s;
}

}  // namespace shardrt
