// Physics-attention slices (models-spec §2.3), shared by GALE and the GeoTransolver context projectors, written so
// that a sharded point axis costs exactly one all-reduce however many slice reductions meet at one place.
//
//   w  = softmax_S(z / clamp(τ, 0.5, 5))                        (B, N, H, S)  per point
//   ν  = Σ_n w + 0.01,  T = Σ_n w F / ν                          (B, H, S, D)  per sample
//
// T is computed as (Σ_n w F) / ν, which is the same number as PhysicsNeMo's Σ_n (w/ν) F: the sums over the points
// are taken locally (slice_sums: [Σ_n w F | Σ_n w] of this rank's points, a plain local matmul and sum), and
// resolve_slice_tokens packs every pending pair that shares a layout into ONE buffer, wraps it as Partial over the
// axes that shard the points and all-reduces it once (redistribute P -> R). The division by ν then runs on
// replicated values. Backward: the adjoint of that all-reduce is the identity, so dT reaches every rank's local
// sums with no collective (the formula of §2.3 without a reduction of dν); the temperature's grad is reduced by
// the division patch (z / τ with z sharded), once.
//
// Plus mode (Transolver++): τ' = clamp(τ + proj_temperature(F), min 0.01) per point, w = softmax((z + g) / τ')
// with Gumbel noise g = -log(-log(u + 1e-8) + 1e-8) — drawn in eval too, as PhysicsNeMo does. The uniform draws u
// come from a GumbelSource (below), so a test can feed the draws PhysicsNeMo made.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "models/layers.h"

namespace shardrt::models {

// The uniform draws u of one plus-mode softmax: given the logits z (B, N, H, S) of call number `call` (counted per
// model forward, in PhysicsNeMo's order: the context projectors, then each block's streams), returns this rank's
// u, shaped like z.local(). Default (no source): philox_gumbel.
using GumbelSource = std::function<Tensor(const ShardTensor& logits, int64_t call)>;

// u from ShardRT's counter-based generator, keyed by (seed, call, global element index): the same draws on every
// mesh and every decomposition, so sharded plus-mode runs match the serial run bit for bit in their noise.
GumbelSource philox_gumbel(uint64_t seed);

// The noise state of one forward: draws given per site (the model's optional inputs `gumbel_u.<site>`, e.g.
// PhysicsNeMo's own recorded draws), else the source, with the running call counter.
//
// It also carries concrete dropout's draws in training mode (models/gale_layers.h): call k of a forward draws
// uniform_window(x, dropout_seed, dropout_step * 2^20 + k) (models/noise_window.h), so each training step draws
// fresh noise, the same on every mesh.
struct GumbelState {
  GumbelSource source;
  int64_t call = 0;
  const std::map<std::string, ShardTensor>* given = nullptr;  // site -> u (global shape of the site's logits)
  uint64_t dropout_seed = 0, dropout_step = 0;
  int64_t dropout_call = 0;
};

// Slice weights in standard mode, w (B, N, H, S), placed like z.
ShardTensor slice_weights(const ShardTensor& z, const Tensor& temperature);
// Plus mode: f (B, N, H, D) feeds the per-point temperature through proj_temperature (Linear D->S, GELU,
// Linear S->1, GELU). `site` names the call's draws among noise.given (PhysicsNeMo's module path, with the stream
// index for a GALE block: "context_builder.geometry_tokenizer", "blocks.0.Attn.1").
ShardTensor slice_weights_plus(const ShardTensor& z, const ShardTensor& f, const Tensor& temperature,
                               const Linear& proj0, const Linear& proj2, GumbelState& noise,
                               const std::string& site);

// One pending slice reduction: this rank's [Σ_n w F | Σ_n w] (B_local, H, S, D + 1) and the layout of w it came from.
struct PendingSlices {
  Tensor sums;
  ShardTensor weights;  // w, for its spec (and for the caller to keep)
  int64_t dim = 0;      // D
};
PendingSlices slice_sums(const ShardTensor& w, const ShardTensor& f);

// T_j = num_j / (ν_j + 0.01) for every pending reduction, each (B, H, S, D_j): Replicate over the axes that shard
// the points, w's placement on the batch axes. Pending reductions with the same layout (Partial axes and batch
// extents) share one all-reduce: one per distinct layout, nothing where the points are not sharded.
std::vector<ShardTensor> resolve_slice_tokens(const std::vector<PendingSlices>& pending);

}  // namespace shardrt::models
