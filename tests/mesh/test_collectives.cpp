// Every collective x dtype x even, uneven and zero-size segments, against a host reference that every rank
// computes for itself from the same generator.
#include <algorithm>

#include "mesh/communicator.h"
#include "mesh_testing.h"
#include "runtime/errors.h"
#include "runtime/half.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

double reduce_ref(ReduceOp op, const std::vector<double>& xs) {
  double acc = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) {
    if (op == ReduceOp::max) acc = std::max(acc, xs[i]);
    else if (op == ReduceOp::min) acc = std::min(acc, xs[i]);
    else acc += xs[i];
  }
  return op == ReduceOp::mean ? acc / static_cast<double>(xs.size()) : acc;
}

std::vector<ReduceOp> ops_for(DType t) {
  if (is_floating(t)) return {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean};
  return {ReduceOp::sum, ReduceOp::max, ReduceOp::min};
}

}  // namespace

TEST_CASE("collectives: all_reduce, every dtype and op", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  for (DType t : all_dtypes())
    for (ReduceOp op : ops_for(t))
      for (int64_t n : {0, 1, 5, 37}) {
        INFO(dtype_name(t) << " " << reduce_op_name(op) << " n=" << n);
        Tensor buf = tensor_of(gen_vec(r, n), t);
        c.all_reduce(buf, op);
        std::vector<double> want(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> xs;
          for (int s = 0; s < p; ++s) xs.push_back(gen(s, i));
          want[static_cast<std::size_t>(i)] = reduce_ref(op, xs);
        }
        CHECK_VALUES(buf, want);
      }
}

TEST_CASE("collectives: bf16/f16 sums with f32 accumulation round once", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  // 256 (bf16) and 2048 (f16) sit where the spacing is 2: adding 1s one at a time in the 16-bit type can lose
  // them, f32 accumulation cannot.
  for (DType t : {DType::bf16, DType::f16}) {
    const double big = t == DType::bf16 ? 256.0 : 2048.0;
    const double exact = big + (p - 1);
    const double rounded = t == DType::bf16 ? bf16_to_float(float_to_bf16(static_cast<float>(exact)))
                                            : f16_to_float(float_to_f16(static_cast<float>(exact)));
    INFO(dtype_name(t));
    Tensor buf = tensor_of(std::vector<double>(6, r == 0 ? big : 1.0), t);
    c.all_reduce(buf, ReduceOp::sum, Accumulate::f32);
    CHECK(buf.to_vector() == std::vector<double>(6, rounded));

    std::vector<int64_t> counts(p, 2);
    Tensor in = tensor_of(std::vector<double>(2 * p, r == 0 ? big : 1.0), t);
    Tensor out = Tensor::empty({2}, t);
    c.reduce_scatter_v(in, out, counts, ReduceOp::sum, Accumulate::f32);
    CHECK(out.to_vector() == std::vector<double>(2, rounded));
    c.reduce_scatter(in, out, ReduceOp::mean, Accumulate::f32);
    CHECK(out.to_vector()[0] == Approx(exact / p).epsilon(1.0 / 128));
  }
}

TEST_CASE("collectives: broadcast from every root", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  for (DType t : all_dtypes())
    for (int root = 0; root < p; ++root)
      for (int64_t n : {0, 7}) {
        INFO(dtype_name(t) << " root=" << root << " n=" << n);
        Tensor buf = r == root ? tensor_of(gen_vec(root, n), t) : zeros({n}, {t});
        c.broadcast(buf, root);
        CHECK_VALUES(buf, gen_vec(root, n));
      }
}

TEST_CASE("collectives: barrier", "[mesh][collectives]") {
  world().barrier();
  world().barrier();
}

TEST_CASE("collectives: all_gather and all_gather_v", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  for (DType t : all_dtypes()) {
    for (int64_t n : {0, 3}) {  // even
      INFO(dtype_name(t) << " all_gather n=" << n);
      Tensor in = tensor_of(gen_vec(r, n), t), out = Tensor::empty({n * p}, t);
      c.all_gather(in, out);
      std::vector<double> want;
      for (int s = 0; s < p; ++s)
        for (double x : gen_vec(s, n)) want.push_back(x);
      CHECK_VALUES(out, want);
    }
    for (const auto& [name, counts] : count_patterns(p)) {
      INFO(dtype_name(t) << " all_gather_v " << name);
      Tensor in = tensor_of(gen_vec(r, counts[r]), t), out = Tensor::empty({prefix(counts).back()}, t);
      c.all_gather_v(in, out, counts);
      std::vector<double> want;
      for (int s = 0; s < p; ++s)
        for (double x : gen_vec(s, counts[s])) want.push_back(x);
      CHECK_VALUES(out, want);
    }
  }
  // The shapes do not matter, only the element counts: a 2-D shard gathers into a 2-D whole.
  Tensor in = tensor_of(gen_vec(r, 6), DType::f32).view({2, 3}), out = Tensor::empty({2 * p, 3});
  c.all_gather(in, out);
  CHECK(out.narrow(0, 2 * r, 2).contiguous().to_vector() == gen_vec(r, 6));
}

TEST_CASE("collectives: reduce_scatter and reduce_scatter_v", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  for (DType t : all_dtypes())
    for (ReduceOp op : ops_for(t)) {
      auto patterns = count_patterns(p);
      patterns.insert(patterns.begin(), {"even (reduce_scatter)", std::vector<int64_t>(p, 4)});
      for (std::size_t k = 0; k < patterns.size(); ++k) {
        const auto& [name, counts] = patterns[k];
        INFO(dtype_name(t) << " " << reduce_op_name(op) << " " << name);
        auto d = prefix(counts);
        Tensor in = tensor_of(gen_vec(r, d.back(), 1), t), out = Tensor::empty({counts[r]}, t);
        if (k == 0) c.reduce_scatter(in, out, op);
        else c.reduce_scatter_v(in, out, counts, op);
        std::vector<double> want;
        for (int64_t i = d[r]; i < d[r + 1]; ++i) {
          std::vector<double> xs;
          for (int s = 0; s < p; ++s) xs.push_back(gen(s, i, 1));
          want.push_back(reduce_ref(op, xs));
        }
        CHECK_VALUES(out, want);
      }
    }
}

TEST_CASE("collectives: all_to_all and all_to_all_v", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  // send(s, j): elements rank s sends to rank j; stream s*p+j keeps every block distinct.
  using CountFn = int64_t (*)(int, int);
  const std::vector<std::pair<std::string, CountFn>> patterns = {
      {"even", [](int, int) -> int64_t { return 2; }},
      {"uneven", [](int s, int j) -> int64_t { return (s + 2 * j) % 3 + 1; }},
      {"zero-size", [](int s, int j) -> int64_t { return (s + j) % 2 == 0 ? 0 : s + j; }},
      {"all-zero", [](int, int) -> int64_t { return 0; }},
  };
  for (DType t : all_dtypes())
    for (const auto& [name, f] : patterns) {
      INFO(dtype_name(t) << " all_to_all_v " << name);
      std::vector<int64_t> sc(p), rc(p);
      std::vector<double> send, want;
      for (int j = 0; j < p; ++j) {
        sc[j] = f(r, j);
        rc[j] = f(j, r);
        for (double x : gen_vec(r * p + j, sc[j], 2)) send.push_back(x);
        for (double x : gen_vec(j * p + r, rc[j], 2)) want.push_back(x);
      }
      Tensor in = tensor_of(send, t), out = Tensor::empty({prefix(rc).back()}, t);
      if (name == "even") c.all_to_all(in, out);
      else c.all_to_all_v(in, sc, out, rc);
      CHECK_VALUES(out, want);
    }
}

TEST_CASE("collectives: all_gather_async and reduce_scatter_async (and _v) give the blocking results, several in "
          "flight at once, each one ledger line as the blocking call",
          "[mesh][collectives][async]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  const auto counts = count_patterns(p)[2].second;  // zero-size segments on the even ranks
  const auto d = prefix(counts);
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::i32}) {
    INFO(dtype_name(t));
    const std::string scope = std::string("async.") + dtype_name(t);
    auto s = c.ledger().scope(scope);
    // Four collectives issued before any is waited for, then completed in another order than issued.
    Tensor g_in = tensor_of(gen_vec(r, 3), t), g_out = Tensor::empty({3 * p}, t);
    Tensor gv_in = tensor_of(gen_vec(r, counts[r]), t), gv_out = Tensor::empty({d.back()}, t);
    Tensor rs_in = tensor_of(gen_vec(r, 4 * p, 1), t), rs_out = Tensor::empty({4}, t);
    Tensor rv_in = tensor_of(gen_vec(r, d.back(), 1), t), rv_out = Tensor::empty({counts[r]}, t);
    CommHandle h1 = c.all_gather_async(g_in, g_out);
    CommHandle h2 = c.all_gather_v_async(gv_in, gv_out, counts);
    CommHandle h3 = c.reduce_scatter_async(rs_in, rs_out, ReduceOp::sum);
    CommHandle h4 = c.reduce_scatter_v_async(rv_in, rv_out, counts, ReduceOp::max);
    CHECK(h1.pending());
    h4.wait();
    h2.wait();
    while (!h3.ready()) {
    }
    h1.wait();
    CHECK_FALSE(h1.pending());
    std::vector<double> want_g, want_gv, want_rs, want_rv;
    for (int src = 0; src < p; ++src) {
      for (double x : gen_vec(src, 3)) want_g.push_back(x);
      for (double x : gen_vec(src, counts[src])) want_gv.push_back(x);
    }
    for (int64_t i = 4 * r; i < 4 * r + 4; ++i) {
      std::vector<double> xs;
      for (int src = 0; src < p; ++src) xs.push_back(gen(src, i, 1));
      want_rs.push_back(reduce_ref(ReduceOp::sum, xs));
    }
    for (int64_t i = d[r]; i < d[r + 1]; ++i) {
      std::vector<double> xs;
      for (int src = 0; src < p; ++src) xs.push_back(gen(src, i, 1));
      want_rv.push_back(reduce_ref(ReduceOp::max, xs));
    }
    CHECK_VALUES(g_out, want_g);
    CHECK_VALUES(gv_out, want_gv);
    CHECK_VALUES(rs_out, want_rs);
    CHECK_VALUES(rv_out, want_rv);
    // Counted when issued, under the kind and bytes of the blocking call.
    const int64_t item = static_cast<int64_t>(dtype_size(t)), others = p - 1;
    CHECK(c.ledger().calls(scope, "all_gather", c.axis()) == 1);
    CHECK(c.ledger().bytes(scope, "all_gather", c.axis()) == 3 * item * others);
    CHECK(c.ledger().bytes(scope, "all_gather_v", c.axis()) == counts[r] * item * others);
    CHECK(c.ledger().bytes(scope, "reduce_scatter", c.axis()) == 4 * (p - 1) * item);
    CHECK(c.ledger().bytes(scope, "reduce_scatter_v", c.axis()) == (d.back() - counts[r]) * item);
  }
  // bf16 with f32 accumulation: the output is written when the handle completes, rounded once.
  {
    Tensor in = full({2 * p}, 1.0, {DType::bf16}), out = zeros({2}, {DType::bf16});
    in.narrow(0, 0, 1).fill_(256.0);
    CommHandle h = c.reduce_scatter_async(in, out, ReduceOp::sum, Accumulate::f32);
    h.wait();
    const double exact0 = r == 0 ? 256.0 * p : p;
    CHECK(out.to(DType::f64).to_vector()[1] == static_cast<double>(p));
    CHECK(std::fabs(out.to(DType::f64).to_vector()[0] - exact0) <= exact0 / 128);
  }
  // Bad arguments are the blocking call's typed errors, raised before anything is sent.
  CHECK_THROWS_AS(c.all_gather_async(Tensor::empty({3}), Tensor::empty({3 * p + 1})), ShapeError);
  CHECK_THROWS_AS(c.reduce_scatter_async(Tensor::empty({2 * p}), Tensor::empty({2}, DType::f64)), DTypeError);
}

TEST_CASE("collectives: all_reduce_async, several in flight at once, completes like all_reduce", "[mesh][collectives]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  c.ledger().reset();
  // Three buffers started back to back (f64 sum, f32 max, bf16 sum with f32 accumulation), waited in reverse.
  Tensor a = tensor_of(gen_vec(r, 37), DType::f64), b = tensor_of(gen_vec(r + 11, 5), DType::f32);
  Tensor h = tensor_of(std::vector<double>(4, r == 0 ? 256.0 : 1.0), DType::bf16);
  CommHandle ha = c.all_reduce_async(a), hb = c.all_reduce_async(b, ReduceOp::max);
  CommHandle hh = c.all_reduce_async(h, ReduceOp::sum, Accumulate::f32);
  hh.wait();
  hb.wait();
  ha.wait();
  CHECK_FALSE(ha.pending());
  std::vector<double> want_a(37), want_b(5);
  for (int64_t i = 0; i < 37; ++i) {
    std::vector<double> xs;
    for (int s = 0; s < p; ++s) xs.push_back(gen(s, i));
    want_a[static_cast<std::size_t>(i)] = reduce_ref(ReduceOp::sum, xs);
  }
  for (int64_t i = 0; i < 5; ++i) {
    std::vector<double> xs;
    for (int s = 0; s < p; ++s) xs.push_back(gen(s + 11, i));
    want_b[static_cast<std::size_t>(i)] = reduce_ref(ReduceOp::max, xs);
  }
  CHECK_VALUES(a, want_a);
  CHECK_VALUES(b, want_b);
  // 256 + (p - 1) ones: in f32 exact, then rounded once to bf16 (spacing 2 above 256).
  const double exact = 256.0 + (p - 1);
  CHECK(h.to_vector() == std::vector<double>(4, bf16_to_float(float_to_bf16(static_cast<float>(exact)))));
  // Counted like the blocking calls, at issue: 3 all_reduces, bf16 counted at its f32 width.
  CHECK(c.ledger().calls("", "all_reduce", c.axis()) == 3);
  CHECK(c.ledger().bytes("", "all_reduce", c.axis()) == (37 * 8 + 5 * 4 + 4 * 4) * (p - 1));
}
