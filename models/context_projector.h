// GeoTransolver's context tokenizers (physicsnemo/models/geotransolver/context_projector.py; models-spec §4.3, §4.4a):
//   ContextProjector(Cg)             half a GALE: in_project_x / in_project_fx (Linear Cg -> H*Dc; a 3x3 conv on a
//                                    structured grid = StructuredContextProjector), in_project_slice (Dc -> S), the
//                                    slices of §2.3; returns the slice tokens T (B, H, S, Dc).
//   GeometricFeatureProcessor        ball query (radius r, at most K neighbours, inclusive) of `queries` among
//                                    `points`, the neighbours' raw xyz (zeros where missing) flattened (K*3), Mlp
//                                    3K -> h -> h/2 -> h, tanh. The grad reaches the points' coordinates only.
//   MultiScaleFeatureExtractor       per stream: processors.{j} and tokenizers.{j}, one per radius.
//   GlobalContextBuilder             local_extractors.{i} (local features), geometry_tokenizer, global_tokenizer,
//                                    in that order; the context is their tokens concatenated on the last dim.
//
// Domain parallelism (§4.5): geometry and the local points are sharded over the domain axis, each cloud with its own
// (uneven, possibly zero-size) split, global tokens replicated. Every tokenizer on geometry points leaves its slice
// sums pending, and the builder resolves all of them with ONE all-reduce (models/gale_slices.h); the global
// tokenizer runs on replicated data (no collective, and its parameters' grads are complete without a reduction).
// The context (B, H, S, Dctx) is replicated over the domain and reused by every block. The ball queries are the
// radius_search patch (a ring of the point blocks over the domain axis) and the neighbour gather the
// gather_neighbor_features patch (sharded forward and backward), one sample at a time: every rank runs the same
// rounds (the most samples any rank holds, its missing ones stand-in clouds, narrowed away), so a rank without a
// sample records the ops of the others (models/context_projector.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/gale_layers.h"
#include "models/gale_slices.h"

namespace shardrt::models {

class ContextProjector : public Module {
 public:
  ContextProjector(int64_t dim, int64_t heads, int64_t dim_head, int64_t slice_num, bool plus, bool concrete,
                   double dropout, std::optional<std::vector<int64_t>> grid, DType dtype);
  // x (B, M, dim) -> this rank's pending slice sums (resolve_slice_tokens gives T (B, H, S, Dc)).
  PendingSlices pending(const ShardTensor& x, GumbelState& noise) const;
  void init_torch_default(Generator& gen);

  int64_t heads, dim_head;
  bool plus;
  std::string noise_site;  // its module path ("context_builder.geometry_tokenizer"): plus mode's draws
  Tensor temperature;  // (1, 1, H, 1), 0.5
  TokenProjection in_project_x;
  std::unique_ptr<TokenProjection> in_project_fx;  // absent with plus
  Linear in_project_slice;
  std::unique_ptr<Linear> proj_temperature0, proj_temperature2;  // plus only
  std::unique_ptr<ConcreteDropout> output_dropout;               // concrete_dropout only
};

class GeometricFeatureProcessor : public Module {
 public:
  GeometricFeatureProcessor(double radius, int64_t neighbors, int64_t hidden, Activation act, DType dtype);
  // points (B, Np, 3), queries (B, Nq, 3), each sharded on its points -> (B, Nq, hidden), placed like queries.
  ShardTensor forward(const ShardTensor& points, const ShardTensor& queries) const;

  double radius;
  int64_t neighbors;
  Mlp mlp;
};

class MultiScaleFeatureExtractor : public Module {
 public:
  MultiScaleFeatureExtractor(const std::vector<double>& radii, const std::vector<int64_t>& neighbors, int64_t hidden,
                             int64_t heads, int64_t dim_head, int64_t slice_num, bool plus, bool concrete,
                             double dropout, DType dtype);

  std::vector<std::unique_ptr<GeometricFeatureProcessor>> processors;
  std::vector<std::unique_ptr<ContextProjector>> tokenizers;
};

struct ContextConfig {
  int64_t n_streams = 1;
  std::optional<int64_t> geometry_dim, global_dim;
  std::vector<double> radii;
  std::vector<int64_t> neighbors_in_radius;
  int64_t n_hidden_local = 32, n_hidden = 256, n_head = 8, slice_num = 32;
  double dropout = 0.0;
  bool plus = false, include_local_features = false, concrete_dropout = false;
  std::optional<std::vector<int64_t>> structured_shape;
};

struct BuiltContext {
  ShardTensor context;                      // (B, H, S, Dctx), or undefined without any part
  std::vector<ShardTensor> local_features;  // per stream (B, N_i, h_loc * scales), local features only
};

class GlobalContextBuilder : public Module {
 public:
  GlobalContextBuilder(const ContextConfig& config, DType dtype);
  int64_t context_dim() const { return context_dim_; }
  bool has_local_extractors() const { return !local_extractors.empty(); }
  // positions: one per stream (needed with local features); geometry / global may be undefined.
  BuiltContext build(const std::vector<ShardTensor>& positions, const ShardTensor& geometry,
                     const ShardTensor& global, GumbelState& noise) const;
  void init_torch_default(Generator& gen);

  std::vector<std::unique_ptr<MultiScaleFeatureExtractor>> local_extractors;
  std::unique_ptr<ContextProjector> geometry_tokenizer, global_tokenizer;

 private:
  int64_t context_dim_ = 0;
};

}  // namespace shardrt::models
