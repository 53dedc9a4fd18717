// The comm ledger: scope labels, table and JSON dumps, reset, and exact calls and bytes for a scripted
// sequence of every kind of collective.
#include <nlohmann/json.hpp>

#include "mesh/agree.h"
#include "mesh/communicator.h"
#include "mesh/mesh.h"
#include "mesh_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("ledger: nested scopes are dotted paths", "[mesh][ledger]") {
  CommLedger l;
  CHECK(l.current_scope().empty());
  l.record("barrier", "world", 0);
  {
    auto a = l.scope("linear");
    CHECK(l.current_scope() == "linear");
    l.record("all_reduce", "domain", 40);
    {
      auto b = l.scope("backward");
      CHECK(l.current_scope() == "linear.backward");
      l.record("all_reduce", "domain", 8);
      l.record("all_reduce", "domain", 8);
      l.record("all_gather_v", "ddp", 12);
    }
    CHECK(l.current_scope() == "linear");
  }
  CHECK(l.current_scope().empty());
  CHECK(l.calls("", "barrier", "world") == 1);
  CHECK(l.calls("linear", "all_reduce", "domain") == 1);
  CHECK(l.bytes("linear", "all_reduce", "domain") == 40);
  CHECK(l.calls("linear.backward", "all_reduce", "domain") == 2);
  CHECK(l.bytes("linear.backward", "all_reduce", "domain") == 16);
  CHECK(l.calls("linear.backward", "all_gather_v", "ddp") == 1);
  CHECK(l.calls("linear.backward", "all_gather_v", "domain") == 0);
  CHECK(l.total_calls() == 5);
  CHECK(l.total_bytes() == 68);

  auto e = l.entries();
  REQUIRE(e.size() == 4);
  CHECK(e[0].scope.empty());
  CHECK(e[1].scope == "linear");
  CHECK(e[2].kind == "all_gather_v");  // sorted by (scope, kind, axis)

  std::string table = l.table();
  CHECK_THAT(table, Catch::Contains("scope") && Catch::Contains("bytes_sent") && Catch::Contains("linear.backward"));
  auto j = nlohmann::json::parse(l.to_json());
  REQUIRE(j.size() == 4);
  CHECK(j[3]["scope"] == "linear.backward");
  CHECK(j[3]["kind"] == "all_reduce");
  CHECK(j[3]["axis"] == "domain");
  CHECK(j[3]["calls"] == 2);
  CHECK(j[3]["bytes_sent"] == 16);

  auto open = l.scope("still.open");
  l.reset();
  CHECK(l.total_calls() == 0);
  CHECK(l.entries().empty());
  CHECK(l.current_scope() == "still.open");
}

TEST_CASE("ledger: exact calls and bytes for a scripted sequence", "[mesh][ledger]") {
  const int p = world_size(), r = world_rank();
  auto ledger = std::make_shared<CommLedger>();
  CommOptions opts;
  opts.ledger = ledger;
  Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain", opts);
  const Communicator& c = mesh.axis("domain");
  const int64_t others = p - 1;

  std::vector<int64_t> counts(p);
  for (int j = 0; j < p; ++j) counts[j] = j + 1;
  const int64_t total = prefix(counts).back();
  std::vector<int64_t> sc(p), rc(p);
  for (int j = 0; j < p; ++j) sc[j] = (r + j) % 3, rc[j] = (j + r) % 3;
  int64_t a2a_bytes = 0;
  for (int j = 0; j < p; ++j)
    if (j != r) a2a_bytes += sc[j] * 4;
  HaloWidths w{std::vector<int64_t>(p, 1), std::vector<int64_t>(p, 2)};
  const int64_t halo_slabs = (r > 0 ? w.right[r - 1] : 0) + (r < p - 1 ? w.left[r + 1] : 0);

  {
    auto fwd = ledger->scope("block");
    c.all_reduce(Tensor::empty({10}), ReduceOp::sum);  // f32
    c.all_reduce(zeros({10}, {DType::f64}), ReduceOp::max);
    {
      auto attn = ledger->scope("attn");
      c.all_gather_v(Tensor::empty({counts[r]}, DType::f16), Tensor::empty({total}, DType::f16), counts);
      c.ring_shift(Tensor::empty({r + 1}, DType::f64), Tensor::empty({(r + p - 1) % p + 1}, DType::f64));
      c.ring_shift_async(Tensor::empty({3}, DType::i32), Tensor::empty({3}, DType::i32)).wait();
    }
    c.halo_exchange(Tensor::empty({1 + 3 + 2, 5}, DType::f32), 0, w);
  }
  {
    auto bwd = ledger->scope("block.backward");  // a label may carry its own dots
    c.reduce_scatter_v(zeros({total}, {DType::bf16}), Tensor::empty({counts[r]}, DType::bf16), counts, ReduceOp::sum,
                       Accumulate::f32);  // the wire carries f32
    c.reduce_scatter(zeros({2 * p}, {DType::f32}), Tensor::empty({2}), ReduceOp::mean);
    c.all_to_all_v(zeros({prefix(sc).back()}, {DType::i32}), sc, Tensor::empty({prefix(rc).back()}, DType::i32), rc);
    c.all_to_all(zeros({3 * p}, {DType::u8}), Tensor::empty({3 * p}, DType::u8));
    c.all_gather(Tensor::empty({4}, DType::i64), Tensor::empty({4 * p}, DType::i64));
    c.broadcast(zeros({6}, {DType::f16}), 0);
    c.barrier();
    agree_or_throw(c, true, "unused");
  }
  if (p > 1) {
    if (r == 0) c.send(zeros({5}, {DType::f32}), 1, 3);
    if (r == 1) c.recv(Tensor::empty({5}), 0, 3);
  }

  const std::string ax = "domain";
  CHECK(ledger->calls("block", "all_reduce", ax) == 2);
  CHECK(ledger->bytes("block", "all_reduce", ax) == (10 * 4 + 10 * 8) * others);
  CHECK(ledger->calls("block.attn", "all_gather_v", ax) == 1);
  CHECK(ledger->bytes("block.attn", "all_gather_v", ax) == counts[r] * 2 * others);
  CHECK(ledger->calls("block.attn", "ring_shift", ax) == 2);
  CHECK(ledger->bytes("block.attn", "ring_shift", ax) == (p > 1 ? (r + 1) * 8 + 3 * 4 : 0));
  CHECK(ledger->calls("block", "halo_exchange", ax) == 1);
  CHECK(ledger->bytes("block", "halo_exchange", ax) == halo_slabs * 5 * 4);
  CHECK(ledger->calls("block.backward", "reduce_scatter_v", ax) == 1);
  CHECK(ledger->bytes("block.backward", "reduce_scatter_v", ax) == (total - counts[r]) * 4);
  CHECK(ledger->calls("block.backward", "reduce_scatter", ax) == 1);
  CHECK(ledger->bytes("block.backward", "reduce_scatter", ax) == 2 * others * 4);
  CHECK(ledger->bytes("block.backward", "all_to_all_v", ax) == a2a_bytes);
  CHECK(ledger->bytes("block.backward", "all_to_all", ax) == 3 * others);
  CHECK(ledger->bytes("block.backward", "all_gather", ax) == 4 * 8 * others);
  CHECK(ledger->calls("block.backward", "broadcast", ax) == 1);
  CHECK(ledger->bytes("block.backward", "broadcast", ax) == (r == 0 ? 12 * others : 0));
  CHECK(ledger->calls("block.backward", "barrier", ax) == 1);
  CHECK(ledger->bytes("block.backward", "barrier", ax) == 0);
  CHECK(ledger->calls("block.backward", "agree", ax) == 1);
  CHECK(ledger->bytes("block.backward", "agree", ax) == others);
  const int64_t p2p_calls = p > 1 && r <= 1 ? 1 : 0;
  CHECK(ledger->calls("", "send", ax) == (r == 0 ? p2p_calls : 0));
  CHECK(ledger->bytes("", "send", ax) == (r == 0 && p > 1 ? 20 : 0));
  CHECK(ledger->calls("", "recv", ax) == (r == 1 ? p2p_calls : 0));
  CHECK(ledger->total_calls() == 14 + p2p_calls);

  // The same counts come back from the JSON dump; invalid calls are not counted.
  CHECK_THROWS_AS(c.all_reduce(Tensor::empty({4, 4}).transpose(0, 1)), ShapeError);
  CHECK(ledger->total_calls() == 14 + p2p_calls);
  auto j = nlohmann::json::parse(ledger->to_json());
  int64_t sum_calls = 0;
  for (const auto& e : j) sum_calls += e["calls"].get<int64_t>();
  CHECK(sum_calls == ledger->total_calls());
}
