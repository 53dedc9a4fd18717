// Normalisation patches against the serial fp64 oracle on 1-D and 2x2 meshes with uneven and zero-size shards,
// every parameter grad compared, and the exact collectives: layer_norm with rows sharded (local statistics, one
// all-reduce of the affine grads per sharded axis) and with normalised dims sharded (f64 moments all-gathered
// and merged with Chan's formula), and group_norm with batch or spatial dims sharded; and f32 data far from
// zero, whose merged statistics must be as accurate as the serial op's.
#include <algorithm>
#include <cmath>
#include <functional>

#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// Parameters perturbed away from their usual initial values (ones/zeros), so that no grad is vacuous.
std::vector<Tensor> affine(const Shape& shape, uint64_t seed) {
  return {add_scalar(mul_scalar(rnd(shape, seed), 0.1), 1.0), mul_scalar(rnd(shape, seed + 1), 0.1)};
}

int coord(const Mesh& m, const char* axis) { return m.axis(axis).rank(); }

// all_gather bytes sent by one rank (mesh/ledger.h): its own contribution times P - 1. The merged statistics'
// all_gather carries each rank's (mean, M2) of its n statistics in f64: 2 * n values.
int64_t all_gather_bytes(int64_t numel, int64_t itemsize, int p) { return numel * itemsize * (p - 1); }

std::vector<ShardTensor> layer_norm_last(const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
  return {layer_norm(in[0], {in[0].global_shape().back()}, p[0], p[1])};
}

}  // namespace

// ---- layer norm, rows sharded ---------------------------------------------------------------------------------

TEST_CASE("patch layer_norm: rows sharded, normalised dims whole; affine grads all-reduced once per axis", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c =
        sharded_case("layer_norm S(1) " + e.name, {rnd({2, 11, 4}, 33)}, {on_line(Placement::Shard(1))}, {{e.extents}});
    c.params = affine({4}, 34);
    check_patch(line, layer_norm_last, c,
                {{"layer_norm.backward", "all_reduce", "domain", 1, all_reduce_bytes(8, 8, p)}});
  }
  // Two normalised dims.
  auto two_dims = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{layer_norm(in[0], {3, 4}, p[0], p[1])};
  };
  ShardedCase c2 = sharded_case("layer_norm over (3, 4)", {rnd({11, 3, 4}, 36)}, {on_line(Placement::Shard(0))});
  c2.params = affine({3, 4}, 37);
  check_patch(line, two_dims, c2, {{"layer_norm.backward", "all_reduce", "domain", 1, all_reduce_bytes(24, 8, p)}});
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c = sharded_case("layer_norm 2x2", {rnd({5, 7, 4}, 38)}, {kGridS0S1}, {ext});
      c.params = affine({4}, 39);
      const int64_t b = all_reduce_bytes(8, 8, 2);
      check_patch(
          grid_mesh(), layer_norm_last, c,
          {{"layer_norm.backward", "all_reduce", "dx", 1, b}, {"layer_norm.backward", "all_reduce", "dy", 1, b}});
    }
}

TEST_CASE("patch layer_norm: a sharded normalised dim agrees with the serial op; a Partial input is MissingShardPatch",
          "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor g = rnd({3}, 42);
  const ShardTensor rows = distribute(rnd({2, 5, 3}, 44), line, on_line(Placement::Shard(1)));
  // A sharded normalised dim is not an error for layer_norm: it merges the statistics across ranks (its parity
  // tests are above); here it must agree with the serial op.
  const Tensor full_rows = rnd({2, 5, 3}, 44);
  const Tensor serial = layer_norm(full_rows, {5, 3});
  const Tensor sharded = full_tensor(layer_norm(rows, {5, 3}));
  const auto a = serial.to_vector(), c = sharded.to_vector();
  REQUIRE(a.size() == c.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - c[i]) < 1e-12);
  const ShardTensor partial = sum(rows, {1});
  CHECK_THROWS_AS(layer_norm(partial, {3}, g, g), MissingShardPatch);
}

// ---- layer norm over sharded normalised dims -------------------------------------------------------------------

TEST_CASE("patch layer_norm: normalised dims sharded, uneven and zero-size shards", "[norm]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  auto over_two = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{layer_norm(in[0], {11, 3}, w[0], w[1])};
  };
  auto over_last = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{layer_norm(in[0], {11}, w[0], w[1])};
  };
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("layer_norm (11, 3) S(1) " + e.name, {rnd({2, 11, 3}, 61)},
                                 {on_line(Placement::Shard(1))}, {{e.extents}});
    c.params = affine({11, 3}, 62);
    check_patch(line, over_two, c,
                {{"layer_norm.forward", "all_gather", "domain", 1, all_gather_bytes(2 * 2, 8, p)},
                 {"layer_norm.backward", "all_reduce", "domain", 2,
                  all_reduce_bytes(4, 8, p) + all_reduce_bytes(66, 8, p)}});
    ShardedCase l = sharded_case("layer_norm (11) S(1) " + e.name, {rnd({3, 11}, 63)}, {on_line(Placement::Shard(1))},
                                 {{e.extents}});
    l.params = affine({11}, 64);
    check_patch(line, over_last, l,
                {{"layer_norm.forward", "all_gather", "domain", 1, all_gather_bytes(2 * 3, 8, p)},
                 {"layer_norm.backward", "all_reduce", "domain", 2,
                  all_reduce_bytes(6, 8, p) + all_reduce_bytes(22, 8, p)}});
  }
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  // Rows over dx, a normalised dim over dy.
  auto last_two = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{layer_norm(in[0], {7, 4}, w[0], w[1])};
  };
  for (const auto& ext : grid_extents(5, 7)) {
    ShardedCase c = sharded_case("layer_norm 2x2 rows x normalised", {rnd({5, 7, 4}, 65)},
                                 {{Placement::Shard(0), Placement::Shard(1)}}, {ext});
    c.params = affine({7, 4}, 66);
    const int64_t rows = ext[0][coord(grid, "dx")];
    check_patch(grid, last_two, c,
                {{"layer_norm.forward", "all_gather", "dy", 1, all_gather_bytes(2 * rows, 8, 2)},
                 {"layer_norm.backward", "all_reduce", "dy", 2,
                  all_reduce_bytes(2 * rows, 8, 2) + all_reduce_bytes(56, 8, 2)},
                 {"layer_norm.backward", "all_reduce", "dx", 1, all_reduce_bytes(56, 8, 2)}});
  }
  // Both normalised dims sharded.
  auto both = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{layer_norm(in[0], {5, 7}, w[0], w[1])};
  };
  for (const auto& ext : grid_extents(5, 7)) {
    ShardedCase c = sharded_case("layer_norm 2x2 both normalised", {rnd({3, 5, 7}, 67)},
                                 {{Placement::Shard(1), Placement::Shard(2)}}, {ext});
    c.params = affine({5, 7}, 68);
    std::vector<ExpectedComm> want;
    for (const char* a : {"dx", "dy"}) {
      want.push_back({"layer_norm.forward", "all_gather", a, 1, all_gather_bytes(2 * 3, 8, 2)});
      want.push_back(
          {"layer_norm.backward", "all_reduce", a, 2, all_reduce_bytes(6, 8, 2) + all_reduce_bytes(70, 8, 2)});
    }
    check_patch(grid, both, c, want);
  }
}

// ---- group norm ----------------------------------------------------------------------------------------------

TEST_CASE("patch group_norm: spatial dim sharded, moments all-gathered once, affine grads once", "[norm]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{group_norm(in[0], 2, w[0], w[1])};
  };
  const int64_t n = 2, g = 2;
  for (const ExtentsCase& e : extents_cases(13, p)) {
    ShardedCase c = sharded_case("group_norm S(2) " + e.name, {add_scalar(rnd({n, 4, 13}, 50), 3.0)},
                                 {on_line(Placement::Shard(2))}, {{e.extents}});
    c.params = affine({4}, 51);
    check_patch(line, fn, c,
                {{"group_norm.forward", "all_gather", "domain", 1, all_gather_bytes(2 * n * g, 8, p)},
                 {"group_norm.backward", "all_reduce", "domain", 2,
                  all_reduce_bytes(2 * n * g, 8, p) + all_reduce_bytes(8, 8, p)}});
  }
  // No affine parameters: only the statistics travel.
  auto plain = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{group_norm(in[0], 4)};
  };
  ShardedCase c = sharded_case("group_norm no affine", {rnd({1, 4, 3, 11}, 52)}, {on_line(Placement::Shard(3))});
  check_patch(line, plain, c,
              {{"group_norm.forward", "all_gather", "domain", 1, all_gather_bytes(2 * 4, 8, p)},
               {"group_norm.backward", "all_reduce", "domain", 1, all_reduce_bytes(8, 8, p)}});
  // Batch sharded: statistics local, affine grads reduced once.
  ShardedCase b = sharded_case("group_norm S(0)", {rnd({7, 4, 5}, 53)}, {on_line(Placement::Shard(0))});
  b.params = affine({4}, 54);
  check_patch(line, fn, b, {{"group_norm.backward", "all_reduce", "domain", 1, all_reduce_bytes(8, 8, p)}});
}

TEST_CASE("patch group_norm: f32 input, large offset: f64 merged statistics stay accurate", "[norm]") {
  const Mesh& line = line_mesh();
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{group_norm(in[0], 2, w[0], w[1])};
  };
  // mean 1e3, spread 1: E[x^2] - E[x]^2 in f32 would lose every digit of the variance.
  ShardedCase c = sharded_case("group_norm f32 offset", {add_scalar(rnd({1, 4, 23}, 55), 1e3).to(DType::f32)},
                               {on_line(Placement::Shard(2))});
  c.params = {affine({4}, 56)[0].to(DType::f32), affine({4}, 56)[1].to(DType::f32)};
  // Against the f64 oracle only f32 rounding is left: of the output and grads (~1e-7 relative) and of the
  // parameter grads' f32 all-reduce (~6e-7 absolute). A mean rounded to f32 (ulp of 1e3 ~6e-5) would show as
  // ~2e-5 in the output; a one-pass variance (E[x^2] ~ 1e6 in f32) would be off by ~1e-1.
  c.atol = c.rtol = 1e-6;
  line.flat().ledger().reset();
  const ShardedCheckResult r = check_sharded(line, fn, c);
  INFO(r.report);
  CHECK(r.ok);
  // Statistics in f64 (2 * N * groups values), the affine grads in f32.
  const int p = line.size();
  check_ledger(line, {{"group_norm.forward", "all_gather", "domain", 1, all_gather_bytes(2 * 2, 8, p)},
                      {"group_norm.backward", "all_reduce", "domain", 2,
                       all_reduce_bytes(2 * 2, 8, p) + all_reduce_bytes(8, 4, p)}});
}

TEST_CASE("patch group_norm: two spatial dims sharded on 2x2, and batch x spatial", "[norm]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{group_norm(in[0], 2, w[0], w[1])};
  };
  for (const auto& ext : grid_extents(5, 7)) {
    ShardedCase c = sharded_case("group_norm 2x2 spatial", {rnd({2, 4, 5, 7}, 57)},
                                 {{Placement::Shard(2), Placement::Shard(3)}}, {ext});
    c.params = affine({4}, 58);
    const int64_t stats = 2 * 2;
    std::vector<ExpectedComm> want;
    for (const char* a : {"dx", "dy"}) {
      want.push_back({"group_norm.forward", "all_gather", a, 1, all_gather_bytes(2 * stats, 8, 2)});
      want.push_back({"group_norm.backward", "all_reduce", a, 2,
                      all_reduce_bytes(2 * stats, 8, 2) + all_reduce_bytes(8, 8, 2)});
    }
    check_patch(grid, fn, c, want);
  }
  // Batch over dx (uneven), spatial over dy: statistics reduced on dy only, affine grads on both.
  ShardedCase c = sharded_case("group_norm 2x2 batch x spatial", {rnd({3, 4, 7}, 59)},
                               {{Placement::Shard(0), Placement::Shard(2)}});
  c.params = affine({4}, 60);
  const int64_t n_local = split_extents(3, 2)[coord(grid, "dx")];
  check_patch(grid, fn, c,
              {{"group_norm.forward", "all_gather", "dy", 1, all_gather_bytes(2 * n_local * 2, 8, 2)},
               {"group_norm.backward", "all_reduce", "dy", 2,
                all_reduce_bytes(2 * n_local * 2, 8, 2) + all_reduce_bytes(8, 8, 2)},
               {"group_norm.backward", "all_reduce", "dx", 1, all_reduce_bytes(8, 8, 2)}});
}

// ---- f32 statistics far from zero --------------------------------------------------------------------------------

namespace {

double max_abs_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  REQUIRE(a.size() == b.size());
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return e;
}

// One layout of x, with the shape of the affine parameters.
struct OffsetLayout {
  std::string name;
  Shape shape;
  Placements placements;
  AxisExtents extents;
  Shape param_shape;
};

using SerialNorm = std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)>;
using ShardedNorm = std::function<ShardTensor(const ShardTensor& x, const Tensor& w, const Tensor& b)>;

// x = offset + randn, rounded to f32 once; the fp64 reference runs on that same f32 data (promoted), so each
// error measured is the op's own. The serial f32 op sets the bar: its statistics are f64 within a row, so its
// error is the f32 rounding of the output; merged statistics must not do much worse whatever the offset.
void check_f32_offsets(const Mesh& mesh, const OffsetLayout& l, const SerialNorm& serial, const ShardedNorm& sharded) {
  const std::vector<Tensor> p = affine(l.param_shape, 71);
  const Tensor w = p[0].to(DType::f32), b = p[1].to(DType::f32);
  for (double offset : {0.0, 1e3, 1e5}) {
    const Tensor x = add_scalar(rnd(l.shape, 70), offset).to(DType::f32);
    const Tensor want = serial(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64));
    const double serial_error = max_abs_error(serial(x, w, b), want);
    const Tensor got = full_tensor(sharded(distribute(x, mesh, l.placements, l.extents), w, b));
    const double sharded_error = max_abs_error(got, want);
    INFO(l.name << ", offset " << offset << ": serial f32 error " << serial_error << ", sharded f32 error "
                << sharded_error);
    CHECK(serial_error < 1e-6);
    CHECK(sharded_error <= 10 * serial_error);
  }
}

}  // namespace

TEST_CASE("patch layer_norm / group_norm: f32 far from zero, merged statistics as accurate as the serial op",
          "[norm]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const SerialNorm ln_serial = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x, {w.size(0)}, w, b);
  };
  const ShardedNorm ln_sharded = [](const ShardTensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x, {w.size(0)}, w, b);
  };
  const SerialNorm gn_serial = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return group_norm(x, 2, w, b);
  };
  const ShardedNorm gn_sharded = [](const ShardTensor& x, const Tensor& w, const Tensor& b) {
    return group_norm(x, 2, w, b);
  };
  for (const ExtentsCase& e : extents_cases(11, p))
    check_f32_offsets(line, {"layer_norm (11) S(1) " + e.name, {3, 11}, {S(1)}, {e.extents}, {11}}, ln_serial,
                      ln_sharded);
  for (const ExtentsCase& e : extents_cases(13, p))
    check_f32_offsets(line, {"group_norm S(2) " + e.name, {2, 4, 13}, {S(2)}, {e.extents}, {4}}, gn_serial,
                      gn_sharded);
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const SerialNorm ln2_serial = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x, {5, 7}, w, b);
  };
  const ShardedNorm ln2_sharded = [](const ShardTensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x, {5, 7}, w, b);
  };
  for (const AxisExtents& ext : grid_extents(5, 7)) {
    check_f32_offsets(grid, {"layer_norm 2x2 both normalised", {3, 5, 7}, {S(1), S(2)}, ext, {5, 7}}, ln2_serial,
                      ln2_sharded);
    check_f32_offsets(grid, {"group_norm 2x2 spatial", {2, 4, 5, 7}, {S(2), S(3)}, ext, {4}}, gn_serial,
                      gn_sharded);
  }
}

TEST_CASE("patch layer_norm / group_norm: bf16 x with sharded statistics: within one bf16 rounding of the reference",
          "[norm]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const std::vector<Tensor> ln_p = affine({11}, 72), gn_p = affine({4}, 73);
  // Every element within one bf16 rounding (2^-9 relative; 2^-8 leaves room for the reference's own last bits):
  // the statistics are merged in f64 and only the output is rounded to bf16.
  auto check_rounded_once = [](const std::string& name, const Tensor& got, const Tensor& want) {
    const std::vector<double> a = got.to_vector(), b = want.to_vector();
    REQUIRE(a.size() == b.size());
    size_t i = 0;
    while (i < a.size() && std::abs(a[i] - b[i]) <= std::ldexp(std::abs(b[i]), -8) + 1e-12) ++i;
    INFO(name << ": first element beyond one bf16 rounding: " << i << " of " << a.size());
    CHECK(i == a.size());
  };
  for (const ExtentsCase& e : extents_cases(11, p)) {
    const Tensor x = add_scalar(rnd({3, 11}, 74), 3.0).to(DType::bf16);
    const Tensor w = ln_p[0].to(DType::bf16), b = ln_p[1].to(DType::bf16);
    const Tensor want = layer_norm(x.to(DType::f64), {11}, w.to(DType::f64), b.to(DType::f64));
    const ShardTensor y = layer_norm(distribute(x, line, {S(1)}, AxisExtents{e.extents}), {11}, w, b);
    REQUIRE(y.local().dtype() == DType::bf16);
    check_rounded_once("layer_norm bf16 S(1) " + e.name, full_tensor(y), want);
  }
  for (const ExtentsCase& e : extents_cases(13, p)) {
    const Tensor x = add_scalar(rnd({2, 4, 13}, 75), 3.0).to(DType::bf16);
    const Tensor w = gn_p[0].to(DType::bf16), b = gn_p[1].to(DType::bf16);
    const Tensor want = group_norm(x.to(DType::f64), 2, w.to(DType::f64), b.to(DType::f64));
    const ShardTensor y = group_norm(distribute(x, line, {S(2)}, AxisExtents{e.extents}), 2, w, b);
    REQUIRE(y.local().dtype() == DType::bf16);
    check_rounded_once("group_norm bf16 S(2) " + e.name, full_tensor(y), want);
  }
}

TEST_CASE("patch group_norm / layer_norm: unsupported placements are MissingShardPatch", "[norm]") {
  const Mesh& line = line_mesh();
  const ShardTensor channels = distribute(rnd({2, 4, 5}, 90), line, on_line(Placement::Shard(1)));
  CHECK_THROWS_WITH(group_norm(channels, 2), Catch::Contains("group_norm") && Catch::Contains("S(1)"));
  const ShardTensor spatial = distribute(rnd({2, 4, 5}, 91), line, on_line(Placement::Shard(2)));
  const ShardTensor partial = sum(spatial, {2}, true);
  CHECK_THROWS_AS(group_norm(partial, 2), MissingShardPatch);
  CHECK_THROWS_AS(layer_norm(partial, {1}), MissingShardPatch);
}

// ---- configurations the contract accepts, each with its exact collectives (issue 9) ----------------------------

TEST_CASE("patch group_norm: a zero-size batch shard joins every collective with empty statistics", "[norm]") {
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{group_norm(in[0], 2, w[0], w[1])};
  };
  const Mesh& line = line_mesh();
  const int p = line.size();
  if (p >= 3) {  // on fewer ranks an empty batch shard leaves the other rank everything: nothing is sharded
    ShardedCase c = sharded_case("group_norm zero-size batch shard", {rnd({5, 4, 6}, 61)}, {on_line(S(0))},
                                 {{split_around_zero(5, p)}});
    c.params = affine({4}, 62);
    check_patch(line, fn, c, {{"group_norm.backward", "all_reduce", "domain", 1, all_reduce_bytes(8, 8, p)}});
  }
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  // Batch over dx with an empty coordinate (either one), spatial over dy: the empty rank all-gathers and reduces
  // zero statistics (0 bytes) but takes part in every call.
  for (const Extents& eb : {Extents{0, 3}, Extents{3, 0}}) {
    ShardedCase c = sharded_case("group_norm 2x2 batch " + std::to_string(eb[0]) + "|" + std::to_string(eb[1]),
                                 {rnd({3, 4, 7}, 63)}, {{S(0), S(2)}}, {{eb, split_extents(7, 2)}});
    c.params = affine({4}, 64);
    const int64_t n_local = eb[coord(grid, "dx")];
    check_patch(grid, fn, c,
                {{"group_norm.forward", "all_gather", "dy", 1, all_gather_bytes(2 * n_local * 2, 8, 2)},
                 {"group_norm.backward", "all_reduce", "dy", 2,
                  all_reduce_bytes(2 * n_local * 2, 8, 2) + all_reduce_bytes(8, 8, 2)},
                 {"group_norm.backward", "all_reduce", "dx", 1, all_reduce_bytes(8, 8, 2)}});
  }
}
