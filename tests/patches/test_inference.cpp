// Inference through sharded ops with collectives in their backward: when no input needs grad, nothing is recorded,
// so no node keeps q, k/v, out, lse or halo buffers alive after the forward.
#include <catch2/catch.hpp>

#include "autograd/tape.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("sharded ops record no node when no input needs grad", "[patch][inference]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  // Sequence / spatial dims of 2p + 1: uneven, every rank holds some.
  const int64_t n = 2 * p + 1;
  const ShardTensor q = distribute(rnd({2, n, 3}, 1), line, {S(1)});
  const ShardTensor kv = distribute(rnd({2, n, 3}, 2), line, {S(1)});
  for (KvStrategy s : {KvStrategy::ring, KvStrategy::all_gather}) {
    const AttentionShardOutput o = scaled_dot_product_attention(q, kv, kv, 0.5, s);
    CHECK_FALSE(requires_grad(o.out.local()));
    CHECK_FALSE(requires_grad(o.lse.local()));
  }
  const ShardTensor x = distribute(rnd({1, 2, n}, 3), line, {S(2)});
  CHECK_FALSE(requires_grad(conv(x, rnd({2, 2, 3}, 4), rnd({2}, 5), {1}, {1}).local()));
  CHECK_FALSE(requires_grad(softmax(x, 2).local()));
  CHECK_FALSE(requires_grad(amax(x, {2}).local()));
  CHECK_FALSE(requires_grad(layer_norm(x, {n}).local()));
  CHECK_FALSE(requires_grad(index_select(x, 2, arange(0, static_cast<double>(n), 1, {DType::i64})).local()));
  // With a parameter that needs grad, the ops that take it still record (its grad needs the backward).
  Tensor w = rnd({2, 2, 3}, 6);
  set_requires_grad(w);
  CHECK(requires_grad(conv(x, w, Tensor(), {1}, {1}).local()));
}
