// Checked collectives (SHARDRT_COMM_CHECK / CommOptions::check_collectives): the signature comparison itself,
// mismatches of every kind raising CommError on every rank with the named difference and the communicator
// staying usable, the missing-peer timeout, the mode's precedence, and that the check never shows in the
// ledger (and costs nothing when off). Also: MPI errors become CommErrors naming the call.
#include <string>
#include <vector>

#include "mesh/communicator.h"
#include "mesh/mesh.h"
#include "mesh/mpi_call.h"
#include "mesh/signature.h"
#include "mesh_testing.h"
#include "runtime/errors.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// A checked communicator over every rank whatever SHARDRT_COMM_CHECK says, throwing on failures.
std::unique_ptr<Communicator> checked(const char* axis, double timeout_s = 60) {
  EnvVar on("SHARDRT_COMM_CHECK", "1");
  CommOptions o;
  o.timeout_s = timeout_s;
  o.failure = FailurePolicy::throw_error;
  return std::make_unique<Communicator>(MPI_COMM_WORLD, axis, o);
}

// "ranks 0, 1" / "rank 0" for ranks [0, n).
std::string ranks_below(int n) {
  std::string s = n > 1 ? "ranks " : "rank ";
  for (int j = 0; j < n; ++j) s += (j ? ", " : "") + std::to_string(j);
  return s;
}

// Runs `call`, which must throw a CommError on this rank, and returns its message.
template <typename F>
std::string comm_error_of(F&& call) {
  try {
    call();
  } catch (const CommError& e) {
    return e.what();
  }
  FAIL("no CommError");
  return "";
}

// After a mismatch the communicator must still work: a matching all_reduce gives the right sum.
void check_still_usable(const Communicator& c) {
  Tensor x = full({5}, 1.0, {DType::f32});
  c.all_reduce(x);
  CHECK_VALUES(x, std::vector<double>(5, c.size()));
}

CallSignature reduction(DType t, int64_t n) {
  CallSignature s("all_reduce");
  s.dtype = static_cast<int64_t>(t);
  s.count = n;
  s.op = 0;
  return s;
}

std::vector<int64_t> records(const std::vector<CallSignature>& sigs, const std::vector<int64_t>& seqs) {
  std::vector<int64_t> all;
  const int p = static_cast<int>(sigs.size());
  for (int r = 0; r < p; ++r) {
    auto rec = pack_signature(sigs[r], seqs[r], p);
    all.insert(all.end(), rec.begin(), rec.end());
  }
  return all;
}

}  // namespace

TEST_CASE("checked: the signature comparison names what differs and on which ranks", "[mesh][checked]") {
  // Pure: records built here, no communication.
  auto same = records({reduction(DType::f32, 8), reduction(DType::f32, 8), reduction(DType::f32, 8)}, {4, 4, 4});
  CHECK_FALSE(find_signature_mismatch(same.data(), 3).has_value());

  auto dtype = records({reduction(DType::f32, 8), reduction(DType::f32, 8), reduction(DType::f64, 4)}, {4, 4, 4});
  auto why = find_signature_mismatch(dtype.data(), 3);
  REQUIRE(why.has_value());
  CHECK(*why == "ranks disagree on dtype (f32 on ranks 0, 1; f64 on rank 2); "
                "ranks disagree on the element count (8 on ranks 0, 1; 4 on rank 2)");

  auto seq = records({reduction(DType::f32, 8), CallSignature("barrier")}, {3, 4});
  why = find_signature_mismatch(seq.data(), 2);
  REQUIRE(why.has_value());
  CHECK(*why == "ranks disagree on the collective (all_reduce on rank 0; barrier on rank 1); ranks disagree on the "
                "sequence number (a rank skipped or added a collective on this communicator) (3 on rank 0; 4 on "
                "rank 1)");

  CallSignature a2a("all_to_all_v");
  a2a.dtype = 1;
  std::vector<CallSignature> sigs(2, a2a);
  sigs[0].a = {1, 2}, sigs[0].b = {1, 3};  // rank 0 sends 2 to rank 1 and expects 3 from it
  sigs[1].a = {3, 1}, sigs[1].b = {5, 1};  // rank 1 sends 3 to rank 0 but expects 5 from it
  auto counts = records(sigs, {1, 1});
  why = find_signature_mismatch(counts.data(), 2);
  REQUIRE(why.has_value());
  CHECK(*why == "ranks disagree on the counts exchanged (rank 0 sends rank 1 2 elements, rank 1 expects 5)");

  CallSignature ring("ring_shift");
  ring.dtype = 1, ring.param = 1;
  std::vector<CallSignature> rs(3, ring);
  for (int r = 0; r < 3; ++r) rs[r].count = r + 1, rs[r].extra = (r + 2) % 3 + 1;  // uneven, consistent
  auto ring_ok = records(rs, {2, 2, 2});
  CHECK_FALSE(find_signature_mismatch(ring_ok.data(), 3).has_value());
  rs[1].extra = 7;
  auto ring_bad = records(rs, {2, 2, 2});
  why = find_signature_mismatch(ring_bad.data(), 3);
  REQUIRE(why.has_value());
  CHECK(*why == "ranks disagree on the message sizes (rank 1 expects 7 elements from rank 0, which sends 1)");
}

TEST_CASE("checked: a dtype and count mismatch is a CommError on every rank, then the job goes on",
          "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs two ranks");
    return;
  }
  auto c = checked("chk");
  // Unchecked, f32[8] against f64[4] (the same bytes) sums garbage on every rank and returns normally.
  Tensor x = r == p - 1 ? full({4}, 1.0, {DType::f64}) : full({8}, 1.0, {DType::f32});
  std::string msg = comm_error_of([&] { c->all_reduce(x); });
  CHECK_THAT(msg, Catch::Contains("all_reduce on axis 'chk' (rank " + std::to_string(r)) &&
                      Catch::Contains("signature check failed: ranks disagree on dtype (f32 on " + ranks_below(p - 1) +
                                      "; f64 on rank " + std::to_string(p - 1) + ")") &&
                      Catch::Contains("ranks disagree on the element count (8 on " + ranks_below(p - 1) +
                                      "; 4 on rank " + std::to_string(p - 1) + ")"));
  CHECK_VALUES(x, std::vector<double>(static_cast<std::size_t>(x.numel()), 1.0));  // untouched
  check_still_usable(*c);

  // Same dtype, different count; and a different reduction.
  Tensor y = full({r == 0 ? 3 : 2}, 1.0);
  CHECK_THAT(comm_error_of([&] { c->all_reduce(y); }),
             Catch::Contains("the element count (3 on rank 0; 2 on " + std::string(p > 2 ? "ranks 1" : "rank 1")));
  CHECK_THAT(comm_error_of([&] { c->all_reduce(full({2}, 1.0), r == 0 ? ReduceOp::max : ReduceOp::sum); }),
             Catch::Contains("ranks disagree on the reduction (max on rank 0; sum on"));
  // all_gather: each rank's input count is checked, though every rank's output is consistent with its own.
  const int64_t n = r == 0 ? 3 : 2;
  CHECK_THAT(comm_error_of([&] { c->all_gather(Tensor::empty({n}), Tensor::empty({n * p})); }),
             Catch::Contains("all_gather on axis 'chk'") && Catch::Contains("the element count (3 on rank 0; 2 on"));
  check_still_usable(*c);
}

TEST_CASE("checked: a root mismatch is a CommError on every rank", "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs two ranks");
    return;
  }
  auto c = checked("chk");
  Tensor b = full({4}, static_cast<double>(r));
  CHECK_THAT(comm_error_of([&] { c->broadcast(b, r == p - 1 ? 1 : 0); }),
             Catch::Contains("broadcast on axis 'chk'") &&
                 Catch::Contains("ranks disagree on the root (0 on " + ranks_below(p - 1) + "; 1 on rank " +
                                 std::to_string(p - 1) + ")"));
  CHECK_VALUES(b, std::vector<double>(4, r));  // nothing was broadcast
  c->broadcast(b, 1);
  CHECK_VALUES(b, std::vector<double>(4, 1.0));
}

TEST_CASE("checked: v-variant counts that differ between ranks are a CommError on every rank", "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs two ranks");
    return;
  }
  auto c = checked("chk");
  // The last rank believes rank 0 holds one element more; every rank's buffers match its own counts.
  std::vector<int64_t> counts(p, 2);
  if (r == p - 1) counts[0] = 3;
  const int64_t total = prefix(counts).back();
  auto list = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  std::vector<int64_t> mine(p, 2), theirs = mine;
  theirs[0] = 3;
  const std::string expected = "ranks disagree on the counts (" + list(mine) + " on " + ranks_below(p - 1) + "; " +
                               list(theirs) + " on rank " + std::to_string(p - 1) + ")";
  CHECK_THAT(comm_error_of([&] {
               c->all_gather_v(Tensor::empty({counts[r]}), Tensor::empty({total}), counts);
             }),
             Catch::Contains("all_gather_v on axis 'chk'") && Catch::Contains(expected));
  CHECK_THAT(comm_error_of([&] {
               c->reduce_scatter_v(zeros({total}), Tensor::empty({counts[r]}), counts);
             }),
             Catch::Contains("reduce_scatter_v on axis 'chk'") && Catch::Contains(expected));

  // all_to_all_v: rank 0 sends rank 1 one element more than rank 1 expects.
  std::vector<int64_t> sc(p, 1), rc(p, 1);
  if (r == 0) sc[1] = 2;
  CHECK_THAT(comm_error_of([&] {
               c->all_to_all_v(zeros({prefix(sc).back()}), sc, Tensor::empty({prefix(rc).back()}), rc);
             }),
             Catch::Contains("all_to_all_v on axis 'chk'") &&
                 Catch::Contains("ranks disagree on the counts exchanged (rank 0 sends rank 1 2 elements, rank 1 "
                                 "expects 1)"));
  check_still_usable(*c);
}

TEST_CASE("checked: a rank that fails a collective locally and goes on is a sequence mismatch", "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs two ranks");
    return;
  }
  auto c = checked("chk");
  c->barrier();
  // The last rank's all_reduce fails its own argument check (a non-contiguous buffer) and that rank moves on to
  // the barrier, one collective ahead of the others, which are in the all_reduce's signature check.
  const std::string last = std::to_string(p - 1);
  if (r == p - 1) {
    CHECK_THROWS_AS(c->all_reduce(Tensor::empty({3, 4}).transpose(0, 1)), ShapeError);
    CHECK_THAT(comm_error_of([&] { c->barrier(); }),
               Catch::Contains("barrier on axis 'chk'") &&
                   Catch::Contains("ranks disagree on the collective (all_reduce on " + ranks_below(p - 1) +
                                   "; barrier on rank " + last + ")") &&
                   Catch::Contains("(2 on " + ranks_below(p - 1) + "; 3 on rank " + last + ")"));
  } else {
    CHECK_THAT(comm_error_of([&] { c->all_reduce(full({4}, 1.0)); }),
               Catch::Contains("all_reduce on axis 'chk'") && Catch::Contains("sequence number"));
  }
  // The ranks resume from the highest sequence number, so the next matching collectives pass.
  check_still_usable(*c);
  c->barrier();
}

TEST_CASE("checked: ring shift and halo exchange check the neighbours' sizes and the widths", "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs two ranks");
    return;
  }
  auto c = checked("chk");
  // Rank 0 expects one element more than its source (rank p-1) sends: the receiver of that link and every
  // other rank report it.
  const int64_t expect = r == 0 ? 4 : 3;
  Tensor out = full({expect}, -1.0);
  CHECK_THAT(comm_error_of([&] { c->ring_shift(full({3}, 1.0), out); }),
             Catch::Contains("ring_shift on axis 'chk'") &&
                 Catch::Contains("ranks disagree on the message sizes (rank 0 expects 4 elements from rank " +
                                 std::to_string(p - 1) + ", which sends 3)"));
  CHECK_VALUES(out, std::vector<double>(static_cast<std::size_t>(expect), -1.0));
  // Async: the check runs when the shift is issued.
  CHECK_THAT(comm_error_of([&] { c->ring_shift_async(full({3}, 1.0), out).wait(); }),
             Catch::Contains("the message sizes"));
  const DType t = r == 0 ? DType::f64 : DType::f32;  // the same bytes on the wire
  const int64_t n = r == 0 ? 3 : 6;
  CHECK_THAT(comm_error_of([&] { c->ring_shift(full({n}, 1.0, {t}), Tensor::empty({n}, t)); }),
             Catch::Contains("ranks disagree on dtype (f64 on rank 0; f32 on"));

  // Halo widths must be the same vectors everywhere.
  HaloWidths w{std::vector<int64_t>(p, 1), std::vector<int64_t>(p, 1)};
  if (r == 0) w.left[p - 1] = 2;
  Tensor padded = zeros({2 + 4, 3});
  CHECK_THAT(comm_error_of([&] { c->halo_exchange(padded, 0, w); }),
             Catch::Contains("halo_exchange on axis 'chk'") && Catch::Contains("ranks disagree on the left widths"));
  // Slabs of different shapes (3 against 2 elements per slice).
  HaloWidths ok{std::vector<int64_t>(p, 1), std::vector<int64_t>(p, 1)};
  CHECK_THAT(comm_error_of([&] { c->halo_exchange(zeros({6, r == 0 ? 2 : 3}), 0, ok); }),
             Catch::Contains("ranks disagree on the elements per slice (2 on rank 0; 3 on"));
  c->halo_exchange(padded, 0, ok);
  check_still_usable(*c);
}

TEST_CASE("checked: a peer that never joins still times out, naming the collective", "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs a rank that stays away");
    return;
  }
  auto c = checked("probe", 0.3);
  Tensor buf = full({8}, 1.0);
  if (r == 0)
    CHECK_THAT(comm_error_of([&] { c->all_reduce(buf); }),
               Catch::Contains("all_reduce on axis 'probe' (rank 0 of " + std::to_string(p)) &&
                   Catch::Contains("(signature check)") && Catch::Contains("timed out after 0.3 s") &&
                   Catch::Contains("every rank to join"));
  MPI_Barrier(MPI_COMM_WORLD);
  // Rank 0 abandoned its signature check; the late ranks' own all_reduce completes it (the signatures match)
  // and then meets rank 0's matching plain all_reduce, so nothing is left pending at MPI_Finalize.
  if (r == 0) {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), 8, MPI_FLOAT, MPI_SUM, c->mpi_comm(), &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else {
    c->set_timeout(60);
    c->all_reduce(buf);
    CHECK_VALUES(buf, std::vector<double>(8, p));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("checked: SHARDRT_COMM_CHECK overrides CommOptions::check_collectives", "[mesh][checked]") {
  CommOptions on;
  on.check_collectives = true;
  {
    EnvVar e("SHARDRT_COMM_CHECK", "");
    CHECK_FALSE(Communicator(MPI_COMM_WORLD, "t").checks_collectives());
    CHECK(Communicator(MPI_COMM_WORLD, "t", on).checks_collectives());
  }
  {
    EnvVar e("SHARDRT_COMM_CHECK", "0");
    CHECK_FALSE(Communicator(MPI_COMM_WORLD, "t", on).checks_collectives());
  }
  {
    EnvVar e("SHARDRT_COMM_CHECK", "1");
    CHECK(Communicator(MPI_COMM_WORLD, "t").checks_collectives());
    CHECK(Mesh::one_d(MPI_COMM_WORLD, "domain").axis("domain").checks_collectives());
  }
  for (const char* bad : {"yes", "2", "on"}) {
    EnvVar e("SHARDRT_COMM_CHECK", bad);
    CHECK_THROWS_WITH(Communicator(MPI_COMM_WORLD, "t"), Catch::Contains("SHARDRT_COMM_CHECK") &&
                                                             Catch::Contains("must be 0 or 1"));
  }
}

TEST_CASE("checked: the check is invisible in the ledger, and off costs nothing", "[mesh][checked]") {
  const int p = world_size(), r = world_rank();
  // The same program with the mode off and on: identical ledgers; the check count is one per collective.
  auto run = [&](const char* mode, int64_t& checks) {
    EnvVar e("SHARDRT_COMM_CHECK", mode);
    auto ledger = std::make_shared<CommLedger>();
    CommOptions o;
    o.ledger = ledger;
    Communicator c(MPI_COMM_WORLD, "domain", o);
    std::vector<int64_t> counts(p);
    for (int j = 0; j < p; ++j) counts[j] = j + 1;
    const int64_t total = prefix(counts).back();
    c.all_reduce(full({10}, 1.0));
    c.broadcast(zeros({6}, {DType::f16}), 0);
    c.all_gather_v(Tensor::empty({counts[r]}), Tensor::empty({total}), counts);
    c.reduce_scatter_v(zeros({total}), Tensor::empty({counts[r]}), counts);
    c.all_to_all(zeros({2 * p}), Tensor::empty({2 * p}));
    c.ring_shift(full({3}, 1.0), Tensor::empty({3}));
    c.halo_exchange(zeros({1 + 3 + 1, 2}), 0, HaloWidths{std::vector<int64_t>(p, 1), std::vector<int64_t>(p, 1)});
    c.barrier();
    CHECK_FALSE(c.agree(true, "unused").has_value());
    checks = c.signature_checks();
    return ledger->entries();
  };
  int64_t checks_off = -1, checks_on = -1;
  auto off = run("0", checks_off);
  auto on = run("1", checks_on);
  CHECK(checks_off == 0);
  CHECK(checks_on == (p > 1 ? 9 : 0));
  REQUIRE(on.size() == off.size());
  for (std::size_t i = 0; i < on.size(); ++i) {
    INFO(on[i].kind);
    CHECK(on[i].kind == off[i].kind);
    CHECK(on[i].calls == off[i].calls);
    CHECK(on[i].bytes_sent == off[i].bytes_sent);
  }
  int64_t calls = 0;
  for (const auto& e : on) calls += e.calls;
  CHECK(calls == 9);
}

TEST_CASE("mpi errors: ShardRT's communicators return MPI errors, which become CommErrors naming the call",
          "[mesh][checked]") {
  const int p = world_size();
  Mesh mesh(MPI_COMM_WORLD, {"ddp", "domain"}, {1, p});
  for (const Communicator* c : {&mesh.axis("ddp"), &mesh.axis("domain"), &mesh.flat()}) {
    MPI_Errhandler h;
    MPI_Comm_get_errhandler(c->mpi_comm(), &h);
    CHECK(h == MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&h);
  }
  // The caller's communicator keeps its own handler.
  MPI_Errhandler world_handler;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
  CHECK(world_handler == MPI_ERRORS_ARE_FATAL);
  MPI_Errhandler_free(&world_handler);

  // A call MPI rejects (a root outside the communicator) comes back as a code, and check_mpi names it.
  const Communicator& c = mesh.axis("domain");
  int x = 0;
  int rc = MPI_Bcast(&x, 1, MPI_INT, p + 3, c.mpi_comm());
  CHECK(rc != MPI_SUCCESS);
  CHECK_THROWS_WITH(check_mpi(rc, "MPI_Bcast", c.axis()),
                    Catch::Contains("CommError") && Catch::Contains("domain: MPI_Bcast failed: "));
  CHECK_THROWS_AS(check_mpi(rc, "MPI_Bcast", c.axis()), CommError);
  c.barrier();
}
