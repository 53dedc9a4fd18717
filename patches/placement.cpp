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

std::vector<int64_t> split_extents(int64_t size, int n) {
  SHARDRT_CHECK(n >= 1, ValueError, "split_extents: ", size, " elements over ", n, " ranks; need at least one rank");
  SHARDRT_CHECK(size >= 0, ValueError, "split_extents: negative size ", size, " over ", n, " ranks");
  std::vector<int64_t> e(static_cast<std::size_t>(n), size / n);
  for (int64_t r = 0; r < size % n; ++r) e[static_cast<std::size_t>(r)] += 1;
  return e;
}

}  // namespace shardrt
