#include "patches/placement.h"

#include "runtime/errors.h"

namespace shardrt {

std::string Placement::str() const {
  switch (kind) {
    case Kind::shard:
      return detail::concat("S(", dim, ")");
    case Kind::partial:
      return "P";
    case Kind::replicate:
      break;
  }
  return "R";
}

std::string placements_str(const Placements& p) {
  std::string s = "(";
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i) s += ", ";
    s += p[i].str();
  }
  return s + ")";
}

}  // namespace shardrt
