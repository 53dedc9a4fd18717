// Sharded ops, every one of them: overloads of the local ops in autograd/ops.h for ShardTensor inputs, so model
// code is one code path for 1 rank and for N ranks — the placements of the inputs decide what runs. Each op
// family lives in patches/<family>.cpp, whose header comment is the full contract of DESIGN.md §2 (accepted
// placements, output placements and extents, forward/backward collectives with bytes, saved bytes per rank);
// the summaries below say which placements take which collectives. Placements no patch takes, Partial among
// them unless said otherwise, are a MissingShardPatch naming the op, the placements and the reason, raised
// identically on every rank from the specs alone. "P" is the size of the mesh axis concerned.
//
// Parameters are plain replicated Tensors. Where one meets a sharded activation its grad is a partial sum over
// the sharded DOMAIN axes, which the patch's backward all-reduces (sum, in >= fp32) over exactly those axes, once
// (patch::reduce_param_grads); a parameter used only on replicated data is not reduced. Over BATCH axes (ddp) no
// patch reduces: each rank's grad is its estimate of the batch's grad (its samples' contribution times the batch
// ranks), and reduce_batch_grads (patches/domain_batch.h, the optimizer's step) averages it there, once.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "patches/align.h"
#include "patches/shard_tensor.h"

namespace shardrt {

// ---- layouts (patches/shard_tensor.h, patches/redistribute.cpp, patches/align.h) ------------------------------
// from_local wraps any caller decomposition (stated extents, zero-size shards included; checked mode verifies
// that every rank stated the same ones; Partial only with FromLocalOptions{.allow_partial = true}).
// redistribute(t, placements[, extents]) / redistribute(t, spec) / align_to(t, other), one hop per changed axis:
//   hop                          forward                           backward
//   S(d) -> R                    all_gather_v                      local slice
//   R -> S(d)                    local slice                       all_gather_v
//   S(i) -> S(j)                 all_to_all_v                      all_to_all_v back
//   S(d) -> S(d), other extents  all_to_all_v of the rows moving   all_to_all_v back
//   P -> R                       all_reduce                        identity
//   P -> S(d)                    reduce_scatter_v                  all_gather_v
// Operands of one op sharded along the same dim by the same axis with different extents (binary elementwise, cat,
// losses): the second is redistributed to the first one's extents (one all_to_all_v per such axis each way) and
// the output follows the first; under set_extent_mismatch(ExtentMismatch::raise) or SHARDRT_STRICT_EXTENTS=1
// (the same on every rank) a MissingShardPatch naming the op, both placements and both extents instead.

// ---- elementwise (patches/elementwise.cpp) ------------------------------------------------------------------
// Same placements on both sides (b with other extents than a is aligned to a's, see "layouts" above), or one side
// Replicate on an axis where the other is sharded along a dim that the replicated operand broadcasts over (size 1
// or missing). A plain Tensor operand, on either side, is a replicated operand. Forward: none. Backward: a
// replicated operand's grad is all-reduced over the axes where the other is sharded. Comparisons give u8 without
// grad (no backward); where(cond, a, b) takes the same rule over its three operands (a and b aligned to cond's extents)
// and sends its grads to a and b (reduced like a replicated operand's).
ShardTensor add(const ShardTensor& a, const ShardTensor& b);
ShardTensor add(const ShardTensor& a, const Tensor& b);
ShardTensor add(const Tensor& a, const ShardTensor& b);
ShardTensor sub(const ShardTensor& a, const ShardTensor& b);
ShardTensor sub(const ShardTensor& a, const Tensor& b);
ShardTensor sub(const Tensor& a, const ShardTensor& b);
ShardTensor mul(const ShardTensor& a, const ShardTensor& b);
ShardTensor mul(const ShardTensor& a, const Tensor& b);
ShardTensor mul(const Tensor& a, const ShardTensor& b);
ShardTensor div(const ShardTensor& a, const ShardTensor& b);
ShardTensor div(const ShardTensor& a, const Tensor& b);
ShardTensor div(const Tensor& a, const ShardTensor& b);
// pow: a > 0 where b's grad is needed
ShardTensor pow(const ShardTensor& a, const ShardTensor& b);
ShardTensor pow(const ShardTensor& a, const Tensor& b);
ShardTensor pow(const Tensor& a, const ShardTensor& b);
// maximum: ties send the grad to a
ShardTensor maximum(const ShardTensor& a, const ShardTensor& b);
ShardTensor maximum(const ShardTensor& a, const Tensor& b);
ShardTensor maximum(const Tensor& a, const ShardTensor& b);
ShardTensor minimum(const ShardTensor& a, const ShardTensor& b);
ShardTensor minimum(const ShardTensor& a, const Tensor& b);
ShardTensor minimum(const Tensor& a, const ShardTensor& b);
// eq: comparisons: u8, no grad
ShardTensor eq(const ShardTensor& a, const ShardTensor& b);
ShardTensor eq(const ShardTensor& a, const Tensor& b);
ShardTensor eq(const Tensor& a, const ShardTensor& b);
ShardTensor ne(const ShardTensor& a, const ShardTensor& b);
ShardTensor ne(const ShardTensor& a, const Tensor& b);
ShardTensor ne(const Tensor& a, const ShardTensor& b);
ShardTensor lt(const ShardTensor& a, const ShardTensor& b);
ShardTensor lt(const ShardTensor& a, const Tensor& b);
ShardTensor lt(const Tensor& a, const ShardTensor& b);
ShardTensor le(const ShardTensor& a, const ShardTensor& b);
ShardTensor le(const ShardTensor& a, const Tensor& b);
ShardTensor le(const Tensor& a, const ShardTensor& b);
ShardTensor gt(const ShardTensor& a, const ShardTensor& b);
ShardTensor gt(const ShardTensor& a, const Tensor& b);
ShardTensor gt(const Tensor& a, const ShardTensor& b);
ShardTensor ge(const ShardTensor& a, const ShardTensor& b);
ShardTensor ge(const ShardTensor& a, const Tensor& b);
ShardTensor ge(const Tensor& a, const ShardTensor& b);
ShardTensor where(const ShardTensor& cond, const ShardTensor& a, const ShardTensor& b);
ShardTensor where(const ShardTensor& cond, const ShardTensor& a, const Tensor& b);
ShardTensor where(const ShardTensor& cond, const Tensor& a, const ShardTensor& b);
// Unary: any Shard/Replicate placements, the output keeps x's spec, no collective either way.
ShardTensor add_scalar(const ShardTensor& x, double s);
ShardTensor mul_scalar(const ShardTensor& x, double s);
ShardTensor pow_scalar(const ShardTensor& x, double p);
ShardTensor neg(const ShardTensor& x);
ShardTensor exp(const ShardTensor& x);
ShardTensor log(const ShardTensor& x);
ShardTensor sqrt(const ShardTensor& x);
ShardTensor rsqrt(const ShardTensor& x);
ShardTensor tanh(const ShardTensor& x);
ShardTensor erf(const ShardTensor& x);
ShardTensor abs(const ShardTensor& x);
ShardTensor clamp(const ShardTensor& x, double lo, double hi);
ShardTensor relu(const ShardTensor& x);
ShardTensor gelu(const ShardTensor& x, GeluApprox approx = GeluApprox::none);
ShardTensor silu(const ShardTensor& x);
ShardTensor sigmoid(const ShardTensor& x);
ShardTensor to_dtype(const ShardTensor& x, DType dtype);

// ---- linear (patches/linear.cpp) -----------------------------------------------------------------------------
// x sharded on any dim but the last (feature) dim, or replicated. Forward: none. Backward: the weight/bias grads
// are all-reduced (one packed buffer) over the axes where x is sharded.
ShardTensor linear(const ShardTensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- matmul, bmm (patches/matmul.cpp) -------------------------------------------------------------------------
// Per mesh axis: a (..., M, K) sharded on M with b (..., K, N) replicated; b sharded on N with a replicated; one
// operand sharded on a batch dim the other broadcasts over; or both sharded on the same batch dim with the same
// extents. A plain Tensor operand, on either side, is replicated. The output is sharded likewise (M, N or the
// batch dim). A sharded K, or Partial: MissingShardPatch. Forward: none. Backward: a replicated operand's grad is
// all-reduced over the axes where the other is sharded, once.
ShardTensor matmul(const ShardTensor& a, const ShardTensor& b);
ShardTensor matmul(const ShardTensor& a, const Tensor& b);
ShardTensor matmul(const Tensor& a, const ShardTensor& b);
ShardTensor bmm(const ShardTensor& a, const ShardTensor& b);  // (B, M, K) x (B, K, N)
ShardTensor bmm(const ShardTensor& a, const Tensor& b);
ShardTensor bmm(const Tensor& a, const ShardTensor& b);

// ---- normalisation (patches/norm.cpp) -------------------------------------------------------------------------
// The placements pick the statistics path (n: the statistics this rank holds, its local rows for layer_norm
// and N * groups for group_norm; A: each mesh axis sharding a normalised or spatial dim):
//   placement of x                              forward                      backward
//   layer_norm: leading dims sharded, or R      none                         1 all_reduce of w|b grads / Shard axis
//   layer_norm: a normalised dim sharded        1 all_gather of 2n f64 / A   1 all_reduce of 2n f64 sums / A, + w|b
//   group_norm: batch dim sharded, or R         none                         1 all_reduce of w|b grads / Shard axis
//   group_norm: spatial dims sharded            1 all_gather of 2n f64 / A   1 all_reduce of 2n f64 sums / A, + w|b
// Statistics over sharded dims are in f64 for every dtype: each rank's (mean, M2) all-gathered and merged with
// Chan et al.'s formula in rank order (bit-identical on every rank; counts exact from the extents, uneven and
// zero-size shards included). group_norm's x is (N, C, *spatial); a sharded channel dim has no patch.
ShardTensor layer_norm(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                       const Tensor& bias = Tensor(), double eps = 1e-5);
ShardTensor group_norm(const ShardTensor& x, int64_t groups, const Tensor& weight = Tensor(),
                       const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- reductions (patches/reduce.cpp) --------------------------------------------------------------------------
// Over sharded dims: sum gives Partial on those axes; mean divides by the GLOBAL count (exact on uneven shards)
// and gives Partial; amax/amin all-reduce (max/min) and give Replicate; logsumexp takes the distributed max, then
// sum, and gives Replicate. Over unsharded dims: local.
//   op          reduced dim sharded: forward             backward
//   sum         none (Partial output)                    none
//   mean        none (Partial output)                    none
//   amax, amin  1 all_reduce (max, min) / axis           1 all_reduce (min) of the winning index / axis
//   logsumexp   2 all_reduce (max, then sum) / axis      none
ShardTensor sum(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
ShardTensor mean(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
ShardTensor amax(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
ShardTensor amin(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
ShardTensor logsumexp(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);

// ---- softmax (patches/softmax.cpp) ----------------------------------------------------------------------------
// Over an unsharded dim: local. Over the sharded dim: distributed max and sum (two all-reduces forward, one
// backward).
ShardTensor softmax(const ShardTensor& x, int dim);
ShardTensor log_softmax(const ShardTensor& x, int dim);

// ---- views on unsharded dims (patches/views.cpp) -------------------------------------------------------------
// Extents are tracked: a sharded dim keeps its per-rank extents wherever it moves. No collective either way.
// reshape/view: a sharded dim stays whole, merges with the unsharded dims right after it ((B, H, W, C) -> (B, H*W, C),
// extents times W), or splits into a leading dim and trailing dims dividing every extent; other merges are refused.
ShardTensor reshape(const ShardTensor& x, const Shape& global_shape);
ShardTensor view(const ShardTensor& x, const Shape& global_shape);     // reshape without a copy
ShardTensor permute(const ShardTensor& x, const std::vector<int>& dims);
ShardTensor transpose(const ShardTensor& x, int d0, int d1);
ShardTensor unsqueeze(const ShardTensor& x, int dim);
ShardTensor squeeze(const ShardTensor& x, int dim);
ShardTensor select(const ShardTensor& x, int dim, int64_t index);  // an unsharded dim
// cat: along an unsharded dim, the same placements; an input with other extents is aligned to the first input's.
ShardTensor cat(const std::vector<ShardTensor>& xs, int dim);
// Along an unsharded dim; each part keeps x's placements and extents.
std::vector<ShardTensor> split(const ShardTensor& x, const std::vector<int64_t>& sizes, int dim);
// Unsharded dims broadcast (size 1 -> n) and new leading dims appear; a sharded dim keeps its global size (or -1).
ShardTensor expand(const ShardTensor& x, const Shape& shape);

// ---- losses over sharded data (patches/loss.cpp) -------------------------------------------------------------
// Scalar, Replicate on every axis: one all-reduce of the partial sums in forward, none in backward. pred and target
// share placements and global shape; a target with other extents is aligned to pred's (see "layouts" above).
ShardTensor mse_loss(const ShardTensor& pred, const ShardTensor& target);
ShardTensor relative_l2_loss(const ShardTensor& pred, const ShardTensor& target);
// logits (N, C) and i64 targets (N) sharded alike on N (Shard(0)) or replicated; the mean over the GLOBAL N. One
// all-reduce of the partial sum (packed with the count of targets outside [0, C)) forward, none backward.
ShardTensor cross_entropy(const ShardTensor& logits, const ShardTensor& targets);

// ---- attention (patches/attention.cpp) ----------------------------------------------------------------------
// Sharded scaled dot-product attention over the sequence dim of q (…, Nq, D), k (…, Nk, D), v (…, Nk, Dv). One mesh
// axis A may shard the sequence (the table below is per A); every other axis places q and k/v alike, Replicate or
// Shard of one leading dim (batch, heads) with equal extents, at no cost (batch or heads over ddp, sequence over
// domain on a 2-D mesh). Nq and Nk are independent (cross-attention works); the output follows q.
//   q, k/v placement   forward                                 backward
//   R, R               none                                    none
//   S, R               none                                    1 all_reduce of dK|dV
//   R, S               2 all_reduce (LSE max, merged out|sum)  1 all_reduce of dq
//   S, S ring          P-1 ring_shift of K/V, overlapped       P-1 ring_shift of K/V, P of dK|dV (home)
//   S, S all_gather    1 all_gather_v of K/V                   1 all_gather_v of K/V, 1 reduce_scatter_v dK|dV
// Partial, the feature dim sharded, two axes on sequence dims, q and k/v split apart on a leading dim, or k and v
// placed differently: MissingShardPatch naming the placements.

// How a (q Shard, kv Shard) call sees the remote K/V blocks.
enum class KvStrategy {
  ring,        // P steps, the next K/V block in flight while the current one computes; O(N/P) memory per rank
  all_gather,  // all_gather_v K/V, one local attention; O(N) K/V per rank during the op, fewer messages
};

struct AttentionShardOutput {
  ShardTensor out;  // (…, Nq, Dv), q's placements and extents
  ShardTensor lse;  // (…, Nq): log-sum-exp of the scaled scores of each query row over ALL keys; q's placements
};

// softmax(scale · q kᵀ) v with its log-sum-exp, both differentiable. k and v must share placements and extents.
// `strategy` only matters when q and k/v are all sharded.
AttentionShardOutput scaled_dot_product_attention(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v,
                                                  double scale, KvStrategy strategy = KvStrategy::ring);

// ---- convolution, pooling, upsampling, padding (patches/conv.cpp, pool.cpp, pool_upsample_pad.cpp) ---------
// x is (B, C, *spatial) with 1-3 spatial dims, as in autograd/ops.h. Any spatial dim may be sharded by any mesh
// axis (1-D meshes, and 2-D meshes with two spatial dims sharded); the batch dim may be sharded too (no halo). A
// sharded channel dim, Partial, or a configuration the patch cannot split exactly has no patch. Weights and
// biases are plain replicated Tensors; their grads are all-reduced over the sharded axes once. Per sharded
// spatial dim (the halo op itself is patches/halo.cpp):
//   path                                   forward (per dim)            backward (per dim)
//   halo, every shard >= the halo          1 halo_exchange              1 halo_exchange back
//   halo, a shard thinner (or zero-size)   1 all_to_all_v (window)      1 all_to_all_v back
//   patchify / nearest / conv_transpose    none                         none
//   pad circular                           2 ring_shift                 2 ring_shift back
//   pad constant / reflect / replicate     none                         none
// conv: stride-1 odd effective kernels (dilation allowed, any symmetric padding: zeros only at the GLOBAL edges)
// get a halo of dilation*(k-1)/2 on each sharded spatial dim, for any extents; kernel == stride (padding 0,
// dilation 1) is a local "patchify" (every rank's extent a multiple of the stride). Unsharded dims, and dims
// sharded over an axis of one rank, take any stride/padding/dilation.
ShardTensor conv(const ShardTensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride = {1},
                 const std::vector<int64_t>& padding = {0}, const std::vector<int64_t>& dilation = {1});
// kernel == stride, no padding (the local op's only form): local on every rank, no halo.
ShardTensor conv_transpose(const ShardTensor& x, const Tensor& w, const Tensor& bias = Tensor());
// (patches/pool.cpp) Any kernel, stride and padding <= kernel/2 on sharded dims, any extents. kernel == stride with
// padding 0 and every extent a positive multiple of the stride: local (a zero-size shard takes the general path
// below). Stride 1 with an odd kernel: halo of kernel/2, as conv. Otherwise (any stride, even kernels): each rank
// computes the outputs whose window STARTS in its slices (extents from every rank's extents), reading a right-only
// halo from the next rank (1 halo_exchange forward, 1 back; none when no window crosses a boundary) or, for thin
// or zero-size shards, its window through 1 all_to_all_v (1 back). avg pool counts the zero padding, as the local op does; max pool pads the global edges
// with -inf, which never wins.
ShardTensor avg_pool(const ShardTensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride = {},
                     const std::vector<int64_t>& padding = {0});
ShardTensor max_pool(const ShardTensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride = {},
                     const std::vector<int64_t>& padding = {0});
// Integer scale factors on sharded dims (out_size = s * global extent). Nearest: local (no halo). Linear
// (align_corners = false): a halo of one slice, the global edges clamped as the local op does.
ShardTensor upsample_nearest(const ShardTensor& x, const std::vector<int64_t>& out_size);
ShardTensor upsample_linear(const ShardTensor& x, const std::vector<int64_t>& out_size, bool align_corners = false);
// `pads` as in autograd/ops.h. Constant/reflect/replicate are applied at the GLOBAL edges only (the first rank's low
// side, the last rank's high side; an empty shard between them pads nothing); no collective. Circular wraps between
// the first and last rank of the axis (the ring neighbours): two ring_shifts per sharded dim forward and backward.
ShardTensor pad(const ShardTensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::constant,
                double value = 0.0);

// ---- indexing with global indices along a sharded dim (patches/index.cpp) -----------------------------------
// Rows move between their owners with all_to_all_v on the axis A sharding the indexed dim (not sharded: the
// local op, no collective):
//   op                   forward                                       backward
//   index_select         1 all_to_all_v of rows                        1 all_to_all_v of grad rows back
//   gather_global        request phase (agree, all_to_all of counts,   1 all_to_all_v of grad rows back, + x's
//                        all_to_all_v of indices), 1 all_to_all_v      grad all-reduced on axes where only the
//                        of rows                                       index is sharded
//   scatter_add_global   request phase, 1 all_to_all_v of src's rows   1 all_to_all_v fetching src's grad rows
// The index values are read on the host, where the routing is planned: a CUDA index is copied to the host (and
// waited for) once per call. The local gather/scatter kernels are (cpu): a CUDA x is a DeviceError.

// x sharded along `dim` by one mesh axis A (other axes may shard other dims), or not sharded along `dim` (local).
// `index`: a plain 1-D i64 tensor of GLOBAL indices in [0, x.global_shape()[dim]), identical on every rank.
// Output, dim sharded: Shard(dim) on A with the index's own split, split_extents(index.numel(), size(A)) — rank
// r holds the rows index[o_r, o_r + k_r) — fetched from their owners with one all_to_all_v (no request phase:
// every rank knows every other rank's index window). Backward routes the grad rows back to the owners (one
// all_to_all_v) and scatter-adds them.
ShardTensor index_select(const ShardTensor& x, int dim, const Tensor& index);

// Rows of x by global index, where the index itself is sharded (e.g. the neighbour lists of sharded queries).
// x sharded along `dim` by one mesh axis A (other axes may shard other dims), or not sharded along `dim` (local);
// `index` an i64 ShardTensor of any shape on the same mesh: Shard(0) or Replicate on A, and on other axes
// Replicate or Shard(0) where x is Replicate (x's grad is then all-reduced there once); values in
// [0, x.global_shape()[dim]) or < 0 (no row: zeros, no grad — the padding of radius_search). Output: x's shape
// with `dim` replaced by index's shape, sharded like the index (its dim 0 lands at `dim`). Forward: a request
// phase (all_to_all of counts, all_to_all_v of the requested global indices), then one all_to_all_v of the rows;
// backward: one all_to_all_v of grad rows back to the owners, scatter-added (the adjoint).
ShardTensor gather_global(const ShardTensor& x, int dim, const ShardTensor& index);

// The adjoint of gather_global as a forward op: out = x + (src's rows added at the global `index` rows of x).
// x and index as for gather_global (entries < 0 are dropped), except that an index sharded where x is Replicate
// has no patch (the sum would be partial there); src shaped and placed like gather_global(x, dim, index).
// Output: x's spec.
ShardTensor scatter_add_global(const ShardTensor& x, int dim, const ShardTensor& index, const ShardTensor& src);

// ---- point clouds (patches/point_cloud.cpp) -------------------------------------------------------------------
// k nearest neighbours and ball query (radius search with a maximum neighbour count) with sharded points, indices
// in GLOBAL numbering, plus the differentiable gather of neighbour features from a sharded feature tensor.
// Points replicated: the local search, no collective; points Shard(0) on an axis: a ring of P-1 ring_shifts of
// the point coordinates, the next block in flight while the current one is searched (every block travels, also
// one every local query skips). No backward (integer results); gather_neighbor_features is gather_global (its
// collectives above).

// The block search: a KD-tree per ring block (nanoflann; the brute force where the build lacks it) that skips a
// block for every query farther from its bounding box than the query's bound (radius, or its current k-th
// distance), or every query against every point (the reference). Both give the same results bit for bit.
enum class NeighborSearch { kdtree, brute_force };

// Neighbours of each query, ordered by distance, then by global point index (deterministic on any mesh).
struct Neighbors {
  ShardTensor index;     // i64 (Nq, k): global point indices; -1 where a query has fewer than k neighbours
  ShardTensor distance;  // points' dtype (Nq, k): Euclidean distances (computed in f64); +inf where index is -1
  ShardTensor count;     // i64 (Nq): the number of valid neighbours of each query
};

// points (Np, D), queries (Nq, D), same float dtype and mesh. Placements: points Shard(0) on at most one axis A
// (the ring axis) and Replicate elsewhere; queries Shard(0) or Replicate on every axis. Results are placed like
// the queries (no grad). (cpu): points or queries on a CUDA device are a DeviceError, never copied to the host.
Neighbors knn(const ShardTensor& points, const ShardTensor& queries, int64_t k,
              NeighborSearch method = NeighborSearch::kdtree);
// Ball query: the (at most max_points) nearest points with distance <= radius.
Neighbors radius_search(const ShardTensor& points, const ShardTensor& queries, double radius, int64_t max_points,
                        NeighborSearch method = NeighborSearch::kdtree);

// Neighbour features: features (Np, C...) placed like the points of the search, neighbours an i64 (Nq, k)
// result of knn/radius_search -> (Nq, k, C...) placed like the neighbours; entries -1 give zero rows. The grads
// are scatter-added back into the shards that own the points (gather_global above).
ShardTensor gather_neighbor_features(const ShardTensor& features, const ShardTensor& neighbors);

}  // namespace shardrt
