// Softmax patches against the serial fp64 oracle: softmax/log_softmax over the sharded dim need two all-reduces
// forward and one backward, over an unsharded dim none; bad arguments are the local op's error, named after the op
// called (not its internal amax), on every rank.
#include "tests/patches/bad_input_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ShardTensor> softmaxes(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  const ShardTensor& x = in[0];
  return {softmax(x, 1), log_softmax(x, 1), softmax(x, 2), log_softmax(x, -1)};
}

using SoftmaxFn = ShardTensor (*)(const ShardTensor&, int);
using LocalSoftmaxFn = Tensor (*)(const Tensor&, int);

// Bad arguments of softmax and log_softmax for x sharded as xs along dim 1 (xi: an i64 x in the same layout).
std::vector<BadInput> softmax_bad_inputs(const Tensor& x, const ShardTensor& xs, const Tensor& xi_full,
                                         const ShardTensor& xi) {
  struct Op {
    std::string name;
    SoftmaxFn sharded;
    LocalSoftmaxFn local;
  };
  std::vector<BadInput> rows;
  for (const Op& op : {Op{"softmax", &shardrt::softmax, &shardrt::softmax},
                       Op{"log_softmax", &shardrt::log_softmax, &shardrt::log_softmax}}) {
    for (int dim : {1, 2})  // the sharded dim (an amax and all-reduces inside) and an unsharded one (local)
      rows.push_back(rejects<DTypeError>(op.name + " i64 input, dim " + std::to_string(dim),
                                         op.name + ": input must be f32 or f64, got " + xi_full.str(),
                                         [=] { (void)op.sharded(xi, dim); }, [=] { (void)op.local(xi_full, dim); }));
    for (int dim : {3, -4})
      rows.push_back(rejects<ShapeError>(op.name + " dim " + std::to_string(dim),
                                         op.name + ": dim " + std::to_string(dim) + " is out of range for " + x.str(),
                                         [=] { (void)op.sharded(xs, dim); }, [=] { (void)op.local(x, dim); }));
  }
  return rows;
}

}  // namespace

TEST_CASE("patch softmax/log_softmax: over the sharded dim two all-reduces forward, one backward", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t rows = 2 * 3;  // the (2, 3) rows of dim 1
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c =
        sharded_case("softmax " + e.name, {rnd({2, 11, 3}, 56)}, {on_line(Placement::Shard(1))}, {{e.extents}});
    const int64_t b = all_reduce_bytes(rows, 8, p);
    check_patch(line, softmaxes, c,
                {{"softmax.forward", "all_reduce", "domain", 2, 2 * b},
                 {"softmax.backward", "all_reduce", "domain", 1, b},
                 {"log_softmax.forward", "all_reduce", "domain", 2, 2 * b},
                 {"log_softmax.backward", "all_reduce", "domain", 1, b}});
  }
  if (has_grid()) {
    // Over dim 0 (dx) and dim 1 (dy): the rows are this rank's (dy extent, 3) and (dx extent, 3).
    auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{softmax(in[0], 0), log_softmax(in[0], 1)};
    };
    const Mesh& grid = grid_mesh();
    for (const auto& ext : grid_extents(5, 7)) {
      const int64_t bx = all_reduce_bytes(ext[1][grid.coord("dy")] * 3, 8, 2);
      const int64_t by = all_reduce_bytes(ext[0][grid.coord("dx")] * 3, 8, 2);
      ShardedCase c = sharded_case("softmax 2x2", {rnd({5, 7, 3}, 57)}, {kGridS0S1}, {ext});
      check_patch(grid, fn, c,
                  {{"softmax.forward", "all_reduce", "dx", 2, 2 * bx},
                   {"softmax.backward", "all_reduce", "dx", 1, bx},
                   {"log_softmax.forward", "all_reduce", "dy", 2, 2 * by},
                   {"log_softmax.backward", "all_reduce", "dy", 1, by}});
    }
  }
}

TEST_CASE("patch softmax: a Partial input is MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 3}, 58), line, on_line(Placement::Shard(1)));
  const ShardTensor partial = sum(x, {1});
  CHECK_THROWS_WITH(softmax(partial, 1), Catch::Contains("softmax") && Catch::Contains("(P)"));
  CHECK_THROWS_AS(log_softmax(partial, 0), MissingShardPatch);
}

TEST_CASE("patch softmax/log_softmax: bad arguments are the local op's error, named after the op, on every rank",
          "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor x = rnd({2, 11, 3}, 61), xi = iota({2, 11, 3}, DType::i64);
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    INFO("1-D mesh, " << e.name << " extents");
    const ShardTensor xs = distribute(x, line, on_line(S(1)), AxisExtents{e.extents});
    const ShardTensor xis = distribute(xi, line, on_line(S(1)), AxisExtents{e.extents});
    check_rejected(softmax_bad_inputs(x, xs, xi, xis));
    // Not the internal step's name.
    CHECK_THROWS_WITH(softmax(xis, 1), !Catch::Contains("amax"));
    CHECK_THROWS_WITH(log_softmax(xis, 1), !Catch::Contains("amax"));
    // The job goes on: both all-reduces of a sharded softmax pair up on every rank (the (2, 3) rows of dim 1,
    // two forward and one backward per op; over dim 2 local).
    const int64_t b = all_reduce_bytes(2 * 3, 8, line.size());
    check_patch(line, softmaxes, sharded_case("softmax after the bad inputs", {x}, {on_line(S(1))}, {{e.extents}}),
                {{"softmax.forward", "all_reduce", "domain", 2, 2 * b},
                 {"softmax.backward", "all_reduce", "domain", 1, b},
                 {"log_softmax.forward", "all_reduce", "domain", 2, 2 * b},
                 {"log_softmax.backward", "all_reduce", "domain", 1, b}});
  }
  if (!has_grid()) return;
  const Tensor x2 = rnd({5, 7, 3}, 62), xi2 = iota({5, 7, 3}, DType::i64);
  for (const AxisExtents& ext : grid_extents(5, 7)) {
    const ShardTensor xs = distribute(x2, grid_mesh(), kGridS0S1, ext);
    check_rejected(softmax_bad_inputs(x2, xs, xi2, distribute(xi2, grid_mesh(), kGridS0S1, ext)));
    // Over dim 1 (dy): the rows are this rank's (dx extent, 3); over dim 2 local.
    const int64_t by = all_reduce_bytes(ext[0][grid_mesh().coord("dx")] * 3, 8, 2);
    check_patch(grid_mesh(), softmaxes, sharded_case("softmax 2x2 after the bad inputs", {x2}, {kGridS0S1}, {ext}),
                {{"softmax.forward", "all_reduce", "dy", 2, 2 * by},
                 {"softmax.backward", "all_reduce", "dy", 1, by},
                 {"log_softmax.forward", "all_reduce", "dy", 2, 2 * by},
                 {"log_softmax.backward", "all_reduce", "dy", 1, by}});
  }
}
