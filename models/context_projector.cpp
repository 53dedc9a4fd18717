#include "models/context_projector.h"

#include <algorithm>
#include <cmath>

#include "autograd/tape.h"
#include "models/init.h"
#include "runtime/errors.h"

namespace shardrt::models {

ContextProjector::ContextProjector(int64_t dim, int64_t h, int64_t d, int64_t s, bool plus_, bool concrete,
                                   double dropout, std::optional<std::vector<int64_t>> grid, DType dtype)
    : heads(h), dim_head(d), plus(plus_), in_project_x(dim, h * d, grid, dtype), in_project_slice(d, s, true, dtype) {
  temperature = full({1, 1, h, 1}, 0.5, {dtype});
  register_parameter("temperature", &temperature);
  register_module("in_project_x", &in_project_x);
  if (!plus) {
    in_project_fx = std::make_unique<TokenProjection>(dim, h * d, grid, dtype);
    register_module("in_project_fx", in_project_fx.get());
  }
  register_module("in_project_slice", &in_project_slice);
  if (plus) {
    proj_temperature0 = std::make_unique<Linear>(d, s, true, dtype);
    proj_temperature2 = std::make_unique<Linear>(s, 1, true, dtype);
    register_module("proj_temperature.0", proj_temperature0.get());
    register_module("proj_temperature.2", proj_temperature2.get());
  }
  if (concrete) {
    output_dropout = std::make_unique<ConcreteDropout>(dropout, dtype);
    register_module("output_dropout", output_dropout.get());
  }
}

void ContextProjector::init_torch_default(Generator& gen) {
  in_project_x.init_torch_default(gen);
  if (in_project_fx) in_project_fx->init_torch_default(gen);
  in_project_slice.init_torch_default(gen);  // the projector's slice Linear keeps torch's default (not orthogonal)
  if (proj_temperature0) proj_temperature0->init_torch_default(gen), proj_temperature2->init_torch_default(gen);
}

PendingSlices ContextProjector::pending(const ShardTensor& x, GumbelState& noise) const {
  const Shape& s = x.global_shape();
  SHARDRT_CHECK(s.size() == 3 && s[2] == in_project_x.in_features, ShapeError, "GeoTransolver context projector: x is ",
                shape_str(s), "; expected (B, M, ", in_project_x.in_features, ")");
  const ShardTensor xm = reshape(in_project_x.forward(x), {s[0], s[1], heads, dim_head});
  const ShardTensor fm = plus ? xm : reshape(in_project_fx->forward(x), {s[0], s[1], heads, dim_head});
  const ShardTensor z = in_project_slice.forward(xm);
  const ShardTensor w = plus ? slice_weights_plus(z, fm, temperature, *proj_temperature0, *proj_temperature2, noise,
                                                  noise_site)
                             : slice_weights(z, temperature);
  // output_dropout applies to the resolved tokens (GlobalContextBuilder::build).
  return slice_sums(w, fm);
}

GeometricFeatureProcessor::GeometricFeatureProcessor(double r, int64_t k, int64_t h, Activation act, DType dtype)
    : radius(r), neighbors(k), mlp({3 * k, h, h / 2, h}, act, dtype) {
  register_module("mlp", &mlp);
}

namespace {

// A ball query runs on one sample's cloud at a time, and the ranks of different batch (ddp) groups may hold
// different numbers of samples (an uneven split of the batch, or none at all). Every rank still runs the same
// rounds — the most samples any rank holds — so that every rank records the same ops with the same specs: the
// clouds' from_local agrees over the whole mesh in checked mode, and an input that a rank left off its graph
// would leave the adjoint of its scatter (a point-to-point gather) waiting on the other ranks. A rank pads its
// samples with stand-in clouds up to the rounds and narrows the rounds' results back to its own samples, so the
// stand-ins get zero grads and a rank without a sample keeps every input on the graph, with empty tensors from
// the narrow on. The stand-in points sit at the origin and the stand-in queries far from them (finite in f32, so
// that no distance overflows): a padded round finds no neighbour and its queries skip the KD-tree build, so it
// costs O(N_local), however large the cloud. Every rank of a domain group holds the same samples, so a padded
// round is padded on the whole group and its ring shifts match.
constexpr double kFarAway = 1e38;

// The most samples any rank holds locally (the largest batch extent), from the spec alone.
int64_t most_local_samples(const ShardTensor& x) {
  int64_t most = x.local().size(0);
  for (int m = 0; m < x.mesh().ndim(); ++m)
    if (x.spec().placement(m).is_shard(0))
      for (int64_t e : x.spec().extents(m)) most = std::max(most, e);
  return most;
}

// x's local samples (b, n, 3) and `rounds - b` stand-in clouds of `fill` after them: (rounds, n, 3), on the tape.
Tensor padded_samples(const ShardTensor& x, int64_t rounds, double fill) {
  const Tensor& l = x.local();
  if (l.size(0) == rounds) return l;
  return cat({l, full({rounds - l.size(0), l.size(1), l.size(2)}, fill, {l.dtype(), l.device()})}, 0);
}

// Round b's cloud (n, 3) of the padded samples, as a 2-D ShardTensor whose points keep x's domain split. The batch
// axes are stated Replicate: each rank holds its own sample there, and nothing below communicates over them (the
// search rings over the domain axis only, and the gather's grads stay on the ranks that own the points).
ShardTensor sample_cloud(const ShardTensor& x, const Tensor& padded, int64_t b) {
  const int n = x.mesh().ndim();
  Placements p(n, Placement::Replicate());
  AxisExtents e(n);
  for (int m = 0; m < n; ++m)
    if (x.spec().placement(m).is_shard(1)) p[m] = Placement::Shard(0), e[m] = x.spec().extents(m);
  return from_local(contiguous(select(padded, 0, b)), x.mesh(), p, e);
}

}  // namespace

ShardTensor GeometricFeatureProcessor::forward(const ShardTensor& points, const ShardTensor& queries) const {
  const Shape &ps = points.global_shape(), &qs = queries.global_shape();
  SHARDRT_CHECK(ps.size() == 3 && qs.size() == 3 && ps[2] == 3 && qs[2] == 3 && ps[0] == qs[0], ShapeError,
                "GeoTransolver local features: points ", shape_str(ps), " and queries ", shape_str(qs),
                " must be (B, N, 3) clouds of the same batch (the ball query needs xyz)");
  SHARDRT_CHECK(points.local().size(0) == queries.local().size(0), ShapeError,
                "GeoTransolver local features: points ", points.str(), " and queries ", queries.str(),
                " must split the batch alike");
  const int64_t batch = queries.local().size(0), nq = queries.local().size(1);
  const int64_t rounds = std::max(most_local_samples(points), most_local_samples(queries));
  Tensor flat = zeros({0, nq, neighbors * 3}, {queries.dtype(), queries.device()});  // an empty global batch
  if (rounds > 0) {
    const Tensor all_points = padded_samples(points, rounds, 0.0);
    const Tensor all_queries = padded_samples(queries, rounds, kFarAway);
    std::vector<Tensor> per_round;
    for (int64_t b = 0; b < rounds; ++b) {
      const ShardTensor pts = sample_cloud(points, all_points, b), qry = sample_cloud(queries, all_queries, b);
      const Neighbors nb = radius_search(pts, qry, radius, neighbors);
      // Raw absolute xyz of each neighbour, zeros where a query has fewer than K (index -1): (nq, K, 3).
      const ShardTensor xyz = gather_neighbor_features(pts, nb.index);
      per_round.push_back(unsqueeze(reshape(xyz.local(), {nq, neighbors * 3}), 0));
    }
    flat = narrow(per_round.size() == 1 ? per_round[0] : cat(per_round, 0), 0, 0, batch);
  }
  // (B, Nq, K*3) laid out like the queries.
  const ShardTensor x = from_local(flat, queries.mesh(), queries.placements(), queries.spec().all_extents());
  return tanh(mlp.forward(x));
}

MultiScaleFeatureExtractor::MultiScaleFeatureExtractor(const std::vector<double>& radii,
                                                       const std::vector<int64_t>& k, int64_t hidden, int64_t heads,
                                                       int64_t dim_head, int64_t slice_num, bool plus, bool concrete,
                                                       double dropout, DType dtype) {
  for (size_t j = 0; j < radii.size(); ++j) {
    processors.push_back(std::make_unique<GeometricFeatureProcessor>(radii[j], k[j], hidden, Activation::gelu, dtype));
    register_module("processors." + std::to_string(j), processors.back().get());
  }
  for (size_t j = 0; j < radii.size(); ++j) {
    tokenizers.push_back(std::make_unique<ContextProjector>(hidden, heads, dim_head, slice_num, plus, concrete,
                                                            dropout, std::nullopt, dtype));
    register_module("tokenizers." + std::to_string(j), tokenizers.back().get());
    tokenizers.back()->noise_site = "tokenizers." + std::to_string(j);  // the builder prefixes its path
  }
}

GlobalContextBuilder::GlobalContextBuilder(const ContextConfig& c, DType dtype) {
  const int64_t dc = c.n_hidden / c.n_head;
  if (c.geometry_dim && c.include_local_features && !c.structured_shape) {
    for (int64_t i = 0; i < c.n_streams; ++i) {
      local_extractors.push_back(std::make_unique<MultiScaleFeatureExtractor>(
          c.radii, c.neighbors_in_radius, c.n_hidden_local, c.n_head, dc, c.slice_num, c.plus, c.concrete_dropout,
          c.dropout, dtype));
      register_module("local_extractors." + std::to_string(i), local_extractors.back().get());
      for (auto& t : local_extractors.back()->tokenizers)
        t->noise_site = "context_builder.local_extractors." + std::to_string(i) + "." + t->noise_site;
    }
    context_dim_ += dc * static_cast<int64_t>(c.radii.size()) * c.n_streams;
  }
  if (c.geometry_dim) {
    geometry_tokenizer = std::make_unique<ContextProjector>(*c.geometry_dim, c.n_head, dc, c.slice_num, c.plus,
                                                            c.concrete_dropout, c.dropout, c.structured_shape, dtype);
    register_module("geometry_tokenizer", geometry_tokenizer.get());
    geometry_tokenizer->noise_site = "context_builder.geometry_tokenizer";
    context_dim_ += dc;
  }
  if (c.global_dim) {
    global_tokenizer = std::make_unique<ContextProjector>(*c.global_dim, c.n_head, dc, c.slice_num, c.plus,
                                                          c.concrete_dropout, c.dropout, std::nullopt, dtype);
    register_module("global_tokenizer", global_tokenizer.get());
    global_tokenizer->noise_site = "context_builder.global_tokenizer";
    context_dim_ += dc;
  }
}

void GlobalContextBuilder::init_torch_default(Generator& gen) {
  for (auto& e : local_extractors) {
    for (auto& p : e->processors) p->mlp.init_torch_default(gen);
    for (auto& t : e->tokenizers) t->init_torch_default(gen);
  }
  if (geometry_tokenizer) geometry_tokenizer->init_torch_default(gen);
  if (global_tokenizer) global_tokenizer->init_torch_default(gen);
}

BuiltContext GlobalContextBuilder::build(const std::vector<ShardTensor>& positions, const ShardTensor& geometry,
                                         const ShardTensor& global, GumbelState& noise) const {
  auto hooks = forward_scope();  // e.g. ZeRO-3's gather of the whole builder (GeoTransolver::forward_blocks)
  BuiltContext out;
  std::vector<PendingSlices> pending;
  std::vector<const ContextProjector*> makers;  // the tokenizer of each pending part (its output_dropout)
  if (!local_extractors.empty() && geometry.defined()) {
    for (size_t i = 0; i < local_extractors.size(); ++i) {
      const MultiScaleFeatureExtractor& ex = *local_extractors[i];
      // Context features live on the geometry points (the local points searched around each of them); the local
      // features on the local points (the geometry searched around each of them): the same processor both ways.
      for (size_t j = 0; j < ex.processors.size(); ++j) {
        pending.push_back(ex.tokenizers[j]->pending(ex.processors[j]->forward(positions[i], geometry), noise));
        makers.push_back(ex.tokenizers[j].get());
      }
      std::vector<ShardTensor> scales;
      for (const auto& p : ex.processors) scales.push_back(p->forward(geometry, positions[i]));
      out.local_features.push_back(scales.size() == 1 ? scales[0] : cat(scales, -1));
    }
  }
  if (geometry_tokenizer && geometry.defined()) {
    pending.push_back(geometry_tokenizer->pending(geometry, noise));
    makers.push_back(geometry_tokenizer.get());
  }
  if (global_tokenizer && global.defined()) {
    pending.push_back(global_tokenizer->pending(global, noise));
    makers.push_back(global_tokenizer.get());
  }
  if (pending.empty()) return out;
  // One all-reduce for every part on geometry points; none for the replicated global tokens.
  std::vector<ShardTensor> parts = resolve_slice_tokens(pending);
  // Each tokenizer's output_dropout on its resolved tokens (replicated over the domain: the same draws there).
  for (size_t i = 0; i < parts.size(); ++i)
    if (makers[i]->output_dropout) parts[i] = makers[i]->output_dropout->forward(parts[i], noise);
  out.context = parts.size() == 1 ? parts[0] : cat(parts, -1);
  return out;
}

}  // namespace shardrt::models
