#include "models/gale_slices.h"

#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "autograd/tape.h"
#include "models/noise_window.h"
#include "patches/errors.h"
#include "runtime/errors.h"

namespace shardrt::models {

GumbelSource philox_gumbel(uint64_t seed) {
  return [seed](const ShardTensor& z, int64_t call) {
    // One draw per call keyed by (seed, call), of which each rank computes only its own window: the noise of a
    // point does not depend on the decomposition (the draw rand(global shape) of Generator(seed * 1000003 + call)).
    return uniform_window(z, seed * 1000003ull + static_cast<uint64_t>(call), 0);
  };
}

ShardTensor slice_weights(const ShardTensor& z, const Tensor& temperature) {
  // The clamp passes the grad where 0.5 <= τ <= 5, inclusive (torch.clamp's rule), so it passes at the initial 0.5.
  const Tensor tc = clamp(temperature.dtype() == z.dtype() ? temperature : to_dtype(temperature, z.dtype()), 0.5, 5.0);
  return softmax(div(z, tc), -1);
}

ShardTensor slice_weights_plus(const ShardTensor& z, const ShardTensor& f, const Tensor& temperature,
                               const Linear& proj0, const Linear& proj2, GumbelState& noise,
                               const std::string& site) {
  // τ' (B, N, H, 1) = clamp(τ + GELU(Linear(GELU(Linear(F)))), min 0.01): per point, so local.
  const ShardTensor tp = gelu(proj2.forward(gelu(proj0.forward(f))));
  const ShardTensor tau = clamp(add(tp, temperature), 0.01, std::numeric_limits<double>::infinity());
  if (!noise.source) noise.source = philox_gumbel(0);
  Tensor u;
  const ShardTensor* given = nullptr;
  if (noise.given) {
    auto it = noise.given->find("gumbel_u." + site);
    if (it != noise.given->end()) given = &it->second;
  }
  if (given) {
    const ShardTensor& g = *given;
    SHARDRT_CHECK(g.global_shape() == z.global_shape(), ShapeError, "GALE plus: input 'gumbel_u.", site, "' is ",
                  shape_str(g.global_shape()), "; the logits of that site are ", shape_str(z.global_shape()),
                  " (B, N, H, S)");
    // Laid out like the logits (a caller may have split it otherwise: then one redistribution, no grad).
    u = (g.spec() == z.spec() ? g : redistribute(g, z.spec())).local();
    ++noise.call;
  } else {
    u = noise.source(z, noise.call++);
  }
  SHARDRT_CHECK(u.shape() == z.local().shape(), ShapeError, "GALE plus: the Gumbel source returned ",
                shape_str(u.shape()), " for logits ", z.str(), "; it must return this rank's window of the logits");
  Tensor g;
  {
    NoGradGuard no_grad;  // the noise is data
    g = neg(log(add_scalar(neg(log(add_scalar(u.to(z.dtype()), 1e-8))), 1e-8)));
  }
  const ShardTensor noisy = add(z, from_local(g, z.mesh(), z.placements(), z.spec().all_extents()));
  return softmax(div(noisy, tau), -1);
}

PendingSlices slice_sums(const ShardTensor& w, const ShardTensor& f) {
  SHARDRT_CHECK(w.dim() == 4 && f.dim() == 4 && w.global_shape()[1] == f.global_shape()[1] &&
                    w.global_shape()[2] == f.global_shape()[2] && w.spec().all_extents() == f.spec().all_extents() &&
                    w.placements() == f.placements(),
                ShapeError, "slice aggregation: weights ", w.str(), " and features ", f.str(),
                " must be (B, N, H, S) and (B, N, H, D) laid out alike");
  for (const Placement& p : w.placements())
    SHARDRT_CHECK(!(p.is_shard(2) || p.is_shard(3) || p.is_partial()), MissingShardPatch, "slice aggregation: ",
                  w.str(), " shards the heads or slices, or is Partial; shard the batch or the points");
  // Local sums over this rank's points: (B, H, S, n) x (B, H, n, D) and Σ_n w, packed [num | ν] on the last dim.
  const Tensor wl = permute(w.local(), {0, 2, 3, 1}), fl = permute(f.local(), {0, 2, 1, 3});
  const Tensor num = matmul(contiguous(wl), contiguous(fl));
  const Tensor nu = unsqueeze(sum(w.local(), {1}), -1);
  return {cat({num, nu}, -1), w, f.global_shape()[3]};
}

namespace {

// The layout of the reduced slices of w (B, N, H, S): Partial where the points are sharded, the batch as w's.
struct SliceLayout {
  Placements partial, reduced;
  AxisExtents extents;
  bool operator<(const SliceLayout& o) const {
    auto key = [](const SliceLayout& l) {
      std::ostringstream os;
      for (const Placement& p : l.partial) os << p.str() << ";";
      for (const auto& e : l.extents) {
        for (int64_t v : e) os << v << ",";
        os << "|";
      }
      return os.str();
    };
    return key(*this) < key(o);
  }
};

SliceLayout layout_of(const ShardTensor& w) {
  const int n = w.mesh().ndim();
  SliceLayout l{Placements(n, Placement::Replicate()), Placements(n, Placement::Replicate()), AxisExtents(n)};
  for (int m = 0; m < n; ++m) {
    const Placement& p = w.spec().placement(m);
    if (p.is_shard(1)) l.partial[m] = Placement::Partial();
    if (p.is_shard(0)) {
      l.partial[m] = l.reduced[m] = p;
      l.extents[m] = w.spec().extents(m);
    }
  }
  return l;
}

}  // namespace

std::vector<ShardTensor> resolve_slice_tokens(const std::vector<PendingSlices>& pending) {
  std::vector<ShardTensor> out(pending.size());
  std::map<SliceLayout, std::vector<size_t>> groups;  // ordered the same on every rank: the specs are global
  for (size_t i = 0; i < pending.size(); ++i) groups[layout_of(pending[i].weights)].push_back(i);
  for (const auto& [layout, members] : groups) {
    std::vector<Tensor> parts;
    std::vector<int64_t> widths;
    for (size_t i : members) parts.push_back(pending[i].sums), widths.push_back(pending[i].dim + 1);
    const Tensor packed = parts.size() == 1 ? parts[0] : cat(parts, -1);
    const Mesh& mesh = pending[members[0]].weights.mesh();
    // The one all-reduce of these slice sums (none where no axis shards the points).
    const ShardTensor reduced = redistribute(
        from_local(packed, mesh, layout.partial, layout.extents, FromLocalOptions{.allow_partial = true}),
        layout.reduced);
    const std::vector<ShardTensor> each = split(reduced, widths, -1);
    for (size_t k = 0; k < members.size(); ++k) {
      const int64_t d = pending[members[k]].dim;
      const std::vector<ShardTensor> num_nu = split(each[k], {d, 1}, -1);
      out[members[k]] = div(num_nu[0], add_scalar(num_nu[1], 0.01));
    }
  }
  return out;
}

}  // namespace shardrt::models
