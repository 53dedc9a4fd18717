// The tiling analysis of shardrt_sharded_create (capi/box_layout.h): samples over ddp, the sample's box either
// tiled by the domain ranks or held whole by every one of them (replicated).
#include "capi/box_layout.h"

#include <algorithm>
#include <sstream>

#include "runtime/errors.h"

namespace shardrt::capi {

std::string Box::box_str(int from) const {
  std::ostringstream os;
  for (int k = from; k < ndim; ++k) os << (k > from ? " x " : "") << "[" << off[k] << ", " << off[k] + n[k] << ")";
  return os.str();
}

int64_t Box::volume(int from) const {
  int64_t v = 1;
  for (int k = from; k < ndim; ++k) v *= n[k];
  return v;
}

bool Box::whole_sample() const {
  for (int k = 1; k < ndim; ++k)
    if (off[k] != 0 || n[k] != global[k]) return false;
  return true;
}

std::string Box::list(const int64_t* v, int from, int to) {
  std::string s = "[";
  for (int i = from; i < to; ++i) s += (i > from ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

namespace {

bool overlap(const Box& a, const Box& b, int from) {
  for (int k = from; k < a.ndim; ++k)
    if (a.off[k] + a.n[k] <= b.off[k] || b.off[k] + b.n[k] <= a.off[k]) return false;
  return true;
}

const Box& box(const std::vector<Box>& boxes, int rank) { return boxes[static_cast<size_t>(rank)]; }

void check_same_global(const std::vector<Box>& boxes, const char* fn) {
  const Box& first = boxes[0];
  for (size_t r = 1; r < boxes.size(); ++r) {
    const Box& b = boxes[r];
    SHARDRT_CHECK(b.ndim == first.ndim && std::equal(b.global, b.global + first.ndim, first.global), ShapeError, fn,
                  ": the ranks disagree on the global shape: rank 0 states ", first.global_str(), ", rank ", r,
                  " states ", b.global_str(), "; every rank must pass the same global_shape");
  }
}

// dim 0: the same samples within a domain group, the groups' samples tiling global dim 0 in ddp order.
Extents check_samples(const std::vector<Box>& boxes, int ddp, int domain, const char* fn) {
  const Box& first = boxes[0];
  Extents per_group;
  int64_t next_sample = 0;
  for (int g = 0; g < ddp; ++g) {
    const Box& lead = box(boxes, g * domain);
    for (int j = 1; j < domain; ++j) {
      const Box& b = box(boxes, g * domain + j);
      SHARDRT_CHECK(b.off[0] == lead.off[0] && b.n[0] == lead.n[0], ShapeError, fn, ": the ranks of ddp group ",
                    g, " hold different samples: rank ", g * domain, " samples [", lead.off[0], ", ",
                    lead.off[0] + lead.n[0], "), rank ", g * domain + j, " samples [", b.off[0], ", ",
                    b.off[0] + b.n[0], "); a domain group holds subdomains of the same samples (a tensor that "
                    "each rank of the group holds whole, such as a time value, is replicated: every rank states "
                    "the same samples and the whole box)");
    }
    SHARDRT_CHECK(lead.off[0] == next_sample, ShapeError, fn, ": ddp group ", g, " (rank ", g * domain,
                  ") starts at sample ", lead.off[0], " but the groups before it end at ", next_sample,
                  "; the ddp groups' samples must tile dim 0 in ddp order");
    next_sample += lead.n[0];
    per_group.push_back(lead.n[0]);
  }
  SHARDRT_CHECK(next_sample == first.global[0], ShapeError, fn, ": the ddp groups hold ", next_sample,
                " samples in all but the global shape ", first.global_str(), " has ", first.global[0]);
  return per_group;
}

// dims 1..: one box per domain index, the same in every ddp group.
void check_groups_alike(const std::vector<Box>& boxes, int ddp, int domain, const char* fn) {
  const int nd = boxes[0].ndim;
  for (int g = 1; g < ddp; ++g)
    for (int j = 0; j < domain; ++j) {
      const Box& a = box(boxes, j);
      const Box& b = box(boxes, g * domain + j);
      SHARDRT_CHECK(std::equal(a.off + 1, a.off + nd, b.off + 1) && std::equal(a.n + 1, a.n + nd, b.n + 1),
                    ShapeError, fn, ": ranks ", j, " and ", g * domain + j, " (domain index ", j,
                    " of ddp groups 0 and ", g, ") hold different boxes, ", a.box_str(1), " and ", b.box_str(1),
                    "; every ddp group must decompose its samples alike");
    }
}

// "rank 2 holds the whole sample box, as a replicated tensor's ranks do; ..." when one of a clashing pair does.
std::string replicated_hint(const Box& a, int i, const Box& b, int j) {
  const int whole = a.whole_sample() ? i : b.whole_sample() ? j : -1;
  if (whole < 0) return "";
  return "; rank " + std::to_string(whole) + " holds the whole sample box, as the ranks of a replicated tensor do: " +
         "then every domain rank must state the whole box (offsets 0)";
}

// The domain ranks' boxes tile the sample's global box: every element held by exactly one rank.
void check_tiling(const std::vector<Box>& boxes, int domain, const char* fn) {
  const Box& first = boxes[0];
  const int nd = first.ndim;
  int64_t global_volume = 1, held = 0;
  for (int k = 1; k < nd; ++k) global_volume *= first.global[k];
  for (int j = 0; j < domain; ++j) {
    const Box& a = box(boxes, j);
    held += a.volume(1);
    for (int i = 0; i < j && a.volume(1) > 0; ++i) {
      const Box& b = box(boxes, i);
      SHARDRT_CHECK(b.volume(1) == 0 || !overlap(b, a, 1), ShapeError, fn, ": the boxes of ranks ", i, " and ", j,
                    " overlap: ", b.box_str(1), " and ", a.box_str(1), " of the global ", first.global_str(),
                    replicated_hint(b, i, a, j));
    }
  }
  SHARDRT_CHECK(held == global_volume, ShapeError, fn, ": the domain ranks' boxes hold ", held,
                " elements per sample but the global box ", Box::list(first.global, 1, nd), " has ", global_volume,
                "; the extents must add up to the global shape (every element held by exactly one rank)");
}

// A split sample box: its dims that some rank holds only part of, its model-facing shape and extents.
void split_layout(const std::vector<Box>& boxes, int domain, bool points, const char* fn, BoxLayout& out) {
  const Box& first = boxes[0];
  const int nd = first.ndim;
  std::vector<int> split;
  for (int k = 1; k < nd; ++k)
    for (int j = 0; j < domain; ++j)
      if (box(boxes, j).n[k] != first.global[k]) {
        split.push_back(k);
        break;
      }
  const std::string split_str =
      Box::list(std::vector<int64_t>(split.begin(), split.end()).data(), 0, static_cast<int>(split.size()));
  if (points) {
    // dims 1..nd-2 become one point dim, each rank's points in its box's row-major order, the last dim the channels.
    SHARDRT_CHECK(split.empty() || split.back() <= nd - 2, ShapeError, fn, ": the boxes split dims ", split_str,
                  " of ", first.global_str(), "; a point set splits the grid dims 1..", nd - 2,
                  " and leaves the last dim (the channels) whole");
    if (split.empty()) return;
    for (int j = 0; j < domain; ++j) {
      int64_t p = 1;
      for (int k = 1; k < nd - 1; ++k) p *= box(boxes, j).n[k];
      out.domain_extents.push_back(p);
    }
    out.domain_dim = 1;
    return;
  }
  if (split.empty()) return;  // one domain rank (or a sample of no elements): nothing to split
  SHARDRT_CHECK(split.size() == 1, ShapeError, fn, ": the boxes split dims ", split_str, " of ",
                first.global_str(), "; a sharded grid is split along one dim (slabs): run a block decomposition as "
                "a point set with shardrt_sharded_create_points");
  const int d = split[0];
  int64_t next = 0;
  for (int j = 0; j < domain; ++j) {
    const Box& a = box(boxes, j);
    if (a.n[d] > 0)
      SHARDRT_CHECK(a.off[d] == next, ShapeError, fn, ": along dim ", d, " rank ", j, " holds [", a.off[d], ", ",
                    a.off[d] + a.n[d], ") but the lower domain ranks end at ", next,
                    "; slabs must be in domain-rank order (rank j's offset = the extents of ranks < j)");
    next += a.n[d];
    out.domain_extents.push_back(a.n[d]);
  }
  out.domain_dim = d;
}

}  // namespace

BoxLayout analyse_boxes(const std::vector<Box>& boxes, int ddp, int domain, bool points, const char* fn) {
  check_same_global(boxes, fn);
  const Box& first = boxes[0];
  const int nd = first.ndim;
  SHARDRT_CHECK(nd >= 1, ShapeError, fn, ": a sharded tensor needs dim 0 (the samples); the global shape is []");
  SHARDRT_CHECK(!points || nd >= 3, ShapeError, fn, ": a point set is (samples, grid dims..., channels), at least ",
                "3 dims; the global shape is ", first.global_str());
  BoxLayout out;
  out.ddp_extents = check_samples(boxes, ddp, domain, fn);
  check_groups_alike(boxes, ddp, domain, fn);
  out.global.assign(first.global, first.global + nd);
  if (points) {
    int64_t n_points = 1;
    for (int k = 1; k < nd - 1; ++k) n_points *= first.global[k];
    out.global = {first.global[0], n_points, first.global[nd - 1]};
    out.flattened = true;
  }
  // Every domain rank holding the whole sample box: replicated over the domain group (no tiling to check).
  bool all_whole = true;
  for (int j = 0; j < domain; ++j) all_whole = all_whole && box(boxes, j).whole_sample();
  if (all_whole) return out;
  check_tiling(boxes, domain, fn);
  split_layout(boxes, domain, points, fn, out);
  return out;
}

}  // namespace shardrt::capi
