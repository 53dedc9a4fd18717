// Operand alignment (patches/align.cpp): binary elementwise ops, cat and the losses on operands sharded along the
// same dim by the same axis but with different extents (one of them a caller decomposition, zero-size shards
// included). Parity with the serial fp64 oracle (output, both input grads) and the exact collectives: one
// all_to_all_v of the second operand's rows that change owner forward, the reverse one backward. Under the strict
// policy the same MissingShardPatch on every rank, naming the op, both placements and both extents, and nothing
// sent.
#include "tests/patches/bad_input_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

constexpr int64_t kLen = 10;

// A caller decomposition of 10 rows that is not the split rule, with a zero-size shard from 3 ranks on (on one
// rank there is only one decomposition).
Extents caller_extents(int n) {
  switch (n) {
    case 1:
      return {kLen};
    case 2:
      return {2, 8};
    case 3:
      return {0, 7, 3};
    case 4:
      return {0, 5, 1, 4};
    default:
      return split_around_zero(kLen, n);
  }
}

std::string extents_text(const Extents& e) {
  std::string s = "extents ";
  for (std::size_t j = 0; j < e.size(); ++j) {
    if (j) s += ',';
    s += std::to_string(e[j]);
  }
  return s;
}

// Rows of this rank's window under `from` that other ranks own under `to`.
int64_t rows_leaving(const Extents& from, const Extents& to, int me) {
  int64_t f0 = 0, t0 = 0;
  for (int j = 0; j < me; ++j) f0 += from[j], t0 += to[j];
  const int64_t stay = std::max<int64_t>(0, std::min(f0 + from[me], t0 + to[me]) - std::max(f0, t0));
  return from[me] - stay;
}

// The collectives of moving the second operand from `b` to `a` extents on the line (rows of `row` f64 elements),
// forward and back; none where nothing differs (one rank).
std::vector<ExpectedComm> alignment_comms(const Extents& a, const Extents& b, int64_t row) {
  const int me = line_mesh().rank();
  if (a == b) return {};
  return {{"redistribute", "all_to_all_v", "domain", 1, rows_leaving(b, a, me) * row * 8},
          {"redistribute.backward", "all_to_all_v", "domain", 1, rows_leaving(a, b, me) * row * 8}};
}

struct Order {
  std::string name;
  Extents a, b;  // the first and the second operand's extents
};
std::vector<Order> orders(int n) {
  return {{"a split rule, b caller", split_extents(kLen, n), caller_extents(n)},
          {"a caller, b split rule", caller_extents(n), split_extents(kLen, n)}};
}

using BinaryOp = ShardTensor (*)(const ShardTensor&, const ShardTensor&);
struct NamedOp {
  std::string name;
  BinaryOp op;
};

ShardedFn binary_fn(BinaryOp op) {
  return [op](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor y = op(in[0], in[1]);
    CHECK(y.spec().all_extents() == in[0].spec().all_extents());  // the output follows the first operand
    return std::vector<ShardTensor>{y};
  };
}

ShardTensor add_op(const ShardTensor& a, const ShardTensor& b) { return add(a, b); }
ShardTensor mul_op(const ShardTensor& a, const ShardTensor& b) { return mul(a, b); }
ShardTensor mse_op(const ShardTensor& a, const ShardTensor& b) { return mse_loss(a, b); }
ShardTensor rel_op(const ShardTensor& a, const ShardTensor& b) { return relative_l2_loss(a, b); }

}  // namespace

TEST_CASE("align: add and mul of operands with different extents, one all_to_all_v each way", "[patch][align]") {
  const Mesh& line = line_mesh();
  const Placements s0 = on_line(Placement::Shard(0));
  for (const Order& o : orders(line.size()))
    for (const NamedOp& f : {NamedOp{"add", add_op}, NamedOp{"mul", mul_op}}) {
      ShardedCase c = sharded_case(f.name + " " + o.name, {rnd({kLen, 3}, 301), rnd({kLen, 3}, 302)},
                                   {s0, s0}, {{o.a}, {o.b}});
      check_patch(line, binary_fn(f.op), c, alignment_comms(o.a, o.b, 3));
    }
}

TEST_CASE("align: add on the 2x2 mesh, one all_to_all_v per axis whose extents differ", "[patch][align]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const Extents a0 = split_extents(5, 2), a1 = split_extents(7, 2), b0 = {1, 4}, b1 = {0, 7};
  const int c0 = grid.coord("dx"), c1 = grid.coord("dy");
  ShardedCase c = sharded_case("add 2x2", {rnd({5, 7, 3}, 303), rnd({5, 7, 3}, 304)}, {kGridS0S1, kGridS0S1},
                               {{a0, a1}, {b0, b1}});
  // Forward dx first (axis order), on b's block; then dy, on the block with a's rows. Backward in reverse.
  check_patch(grid, binary_fn(add_op), c,
              {{"redistribute", "all_to_all_v", "dx", 1, rows_leaving(b0, a0, c0) * b1[c1] * 3 * 8},
               {"redistribute", "all_to_all_v", "dy", 1, rows_leaving(b1, a1, c1) * a0[c0] * 3 * 8},
               {"redistribute.backward", "all_to_all_v", "dy", 1, rows_leaving(a1, b1, c1) * a0[c0] * 3 * 8},
               {"redistribute.backward", "all_to_all_v", "dx", 1, rows_leaving(a0, b0, c0) * b1[c1] * 3 * 8}});
}

TEST_CASE("align: cat of inputs with different extents follows the first input", "[patch][align]") {
  const Mesh& line = line_mesh();
  const Placements s0 = on_line(Placement::Shard(0));
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor y = cat({in[0], in[1]}, 1);
    CHECK(y.spec().all_extents() == in[0].spec().all_extents());
    return std::vector<ShardTensor>{y};
  };
  for (const Order& o : orders(line.size())) {
    ShardedCase c =
        sharded_case("cat " + o.name, {rnd({kLen, 3}, 305), rnd({kLen, 2}, 306)}, {s0, s0}, {{o.a}, {o.b}});
    check_patch(line, fn, c, alignment_comms(o.a, o.b, 2));
  }
}

TEST_CASE("align: mse_loss and relative_l2_loss with a target of other extents", "[patch][align]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const Placements s0 = on_line(Placement::Shard(0));
  for (const Order& o : orders(p))
    for (const NamedOp& f : {NamedOp{"mse_loss", mse_op}, NamedOp{"relative_l2_loss", rel_op}}) {
      const std::string& loss = f.name;
      ShardedCase c = sharded_case(loss + " " + o.name, {rnd({kLen, 3}, 307), rnd({kLen, 3}, 308)}, {s0, s0},
                                   {{o.a}, {o.b}});
      std::vector<ExpectedComm> comms = alignment_comms(o.a, o.b, 3);
      const int64_t sums = loss == "mse_loss" ? 1 : 2;  // the partial sums all-reduced in forward
      comms.push_back({loss + ".forward", "all_reduce", "domain", 1, all_reduce_bytes(sums, 8, p)});
      auto fn = [op = f.op](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
        return std::vector<ShardTensor>{op(in[0], in[1])};
      };
      check_patch(line, fn, c, comms);
    }
}

TEST_CASE("align: strict extents raise the same MissingShardPatch on every rank, nothing sent", "[patch][align]") {
  const Mesh& line = line_mesh();
  const int n = line.size();
  if (n < 2) return;  // one rank has one decomposition: nothing can differ
  const ShardSpec sa(line, on_line(Placement::Shard(0)), {kLen, 3}, {split_extents(kLen, n)});
  const ShardSpec sb = sa.with(sa.placements(), sa.global_shape(), {caller_extents(n)});
  const ShardTensor a = leaf_shard(rnd({kLen, 3}, 309), sa), b = leaf_shard(rnd({kLen, 3}, 310), sb);
  const ShardTensor c = leaf_shard(rnd({kLen, 2}, 311), sb.with(sb.placements(), {kLen, 2}, sb.all_extents()));
  const std::string ea = extents_text(sa.extents(0)), eb = extents_text(sb.extents(0));

  ExtentMismatchScope strict(ExtentMismatch::raise);
  REQUIRE(extent_mismatch() == ExtentMismatch::raise);
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"add", [&] { add(a, b); }},
      {"mul", [&] { mul(a, b); }},
      {"cat", [&] { cat({a, c}, 1); }},
      {"mse_loss", [&] { mse_loss(a, b); }},
      {"relative_l2_loss", [&] { relative_l2_loss(a, b); }}};
  for (const auto& [op, call] : calls) {
    INFO(op);
    line.flat().ledger().reset();
    CHECK_THROWS_AS(call(), MissingShardPatch);
    const std::string msg = message_of(call);
    CHECK_THAT(msg, Catch::StartsWith(op + ": ") && Catch::Contains("(S(0)) " + ea) &&
                        Catch::Contains("(S(0)) " + eb) && Catch::Contains("SHARDRT_STRICT_EXTENTS"));
    CHECK(same_string_on_every_rank(msg));
    CHECK(line.flat().ledger().total_calls() == 0);
  }
}

TEST_CASE("align: the policy scope restores the default, which redistributes", "[patch][align]") {
  const ExtentMismatch before = extent_mismatch();
  {
    ExtentMismatchScope strict(ExtentMismatch::raise);
    CHECK(extent_mismatch() == ExtentMismatch::raise);
  }
  CHECK(extent_mismatch() == before);
  CHECK(before == ExtentMismatch::redistribute);  // the suite runs without SHARDRT_STRICT_EXTENTS
}

TEST_CASE("align_to: t redistributed to another tensor's spec; other meshes or shapes are a ShapeError",
          "[patch][align]") {
  const Mesh& line = line_mesh();
  const int n = line.size(), me = line.rank();
  const ShardSpec sa(line, on_line(Placement::Shard(0)), {kLen, 3}, {caller_extents(n)});
  const ShardSpec sb = ShardSpec::split_evenly(line, on_line(Placement::Shard(0)), {kLen, 3});
  const Tensor full = iota({kLen, 3});
  const ShardTensor t = leaf_shard(full, sb);
  const ShardTensor other = leaf_shard(zeros({kLen, 3}, {DType::f64}), sa);
  line.flat().ledger().reset();
  const ShardTensor y = align_to(t, other);
  CHECK(y.spec() == sa);
  CHECK_SAME_VALUES(y.local(), window(full, sa));
  CHECK(line.flat().ledger().calls("redistribute", "all_to_all_v", "domain") == (n > 1 ? 1 : 0));
  CHECK(line.flat().ledger().bytes("redistribute", "all_to_all_v", "domain") ==
        rows_leaving(sb.extents(0), sa.extents(0), me) * 3 * 8);
  CHECK(align_to(t, t).local().is_same(t.local()));
  const ShardTensor wide = leaf_shard(zeros({kLen, 4}, {DType::f64}), sb.with(sb.placements(), {kLen, 4},
                                                                                 sb.all_extents()));
  CHECK_THROWS_AS(align_to(t, wide), ShapeError);
  CHECK_THROWS_WITH(align_to(t, wide), Catch::Contains("align_to") || Catch::Contains("redistribute"));
  CHECK_THROWS_WITH(align_to(t, wide), Catch::Contains("global [10, 3]") && Catch::Contains("global [10, 4]"));
}

TEST_CASE("align: where(cond, a, b) moves a and b to cond's extents", "[patch][align]") {
  const Mesh& line = line_mesh();
  const Placements s0 = on_line(Placement::Shard(0));
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor cond = gt(in[0], zeros({}, {DType::f64}));
    const ShardTensor y = where(cond, in[1], in[2]);
    CHECK(y.spec().all_extents() == in[0].spec().all_extents());  // the output follows cond
    return std::vector<ShardTensor>{y};
  };
  for (const Order& o : orders(line.size())) {
    // cond (from input 0) and b with a's extents of the order, a with its b extents: only a moves.
    ShardedCase c = sharded_case("where " + o.name, {rnd({kLen, 3}, 309), rnd({kLen, 3}, 310), rnd({kLen, 3}, 311)},
                                 {s0, s0, s0}, {{o.a}, {o.b}, {o.a}});
    c.input_requires_grad = {false, true, true};
    check_patch(line, fn, c, alignment_comms(o.a, o.b, 3));
  }
}
