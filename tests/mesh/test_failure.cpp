// Failure handling inside one job: typed argument errors on every rank, agree_or_throw, the timeout setting,
// CommErrors from timeouts and size mismatches under the throw_error policy, the deadline of the set-up calls
// without a non-blocking form (the Mesh constructor's splits) and the watchdog's timing (the abort_job policy and
// the watchdog ending a process are exercised by the failure_probe program and its driver).
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "mesh/agree.h"
#include "mesh/communicator.h"
#include "mesh/deadline.h"
#include "mesh/device_binding.h"
#include "mesh/mesh.h"
#include "mesh/watchdog.h"
#include "mesh_testing.h"
#include "runtime/errors.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

CommOptions throwing(double timeout_s) {
  CommOptions o;
  o.timeout_s = timeout_s;
  o.failure = FailurePolicy::throw_error;
  return o;
}

}  // namespace

TEST_CASE("failure: timeout from SHARDRT_COMM_TIMEOUT, options and setter", "[mesh][failure]") {
  {
    EnvVar e("SHARDRT_COMM_TIMEOUT", "");
    CHECK(default_comm_timeout() == 300.0);
  }
  {
    EnvVar e("SHARDRT_COMM_TIMEOUT", "7.5");
    CHECK(default_comm_timeout() == 7.5);
    Communicator c(MPI_COMM_WORLD, "t");
    CHECK(c.timeout() == 7.5);
    c.set_timeout(2);
    CHECK(c.timeout() == 2);
    CHECK_THROWS_AS(c.set_timeout(0), ValueError);
    CommOptions o;
    o.timeout_s = 4;
    CHECK(Communicator(MPI_COMM_WORLD, "t2", o).timeout() == 4);
  }
  for (const char* bad : {"abc", "-3", "0", "5s"}) {
    EnvVar e("SHARDRT_COMM_TIMEOUT", bad);
    CHECK_THROWS_AS(default_comm_timeout(), ValueError);
  }
}

TEST_CASE("failure: bad arguments are typed errors naming the collective, axis and rank", "[mesh][failure]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  const std::string at = "on axis 'world' (rank " + std::to_string(r) + " of " + std::to_string(p);
  // Each check fails on every rank before anything is sent, so nobody is left waiting.
  CHECK_THROWS_WITH(c.all_reduce(Tensor::empty({3, 4}).transpose(0, 1)),
                    Catch::Contains("all_reduce " + at) && Catch::Contains("not contiguous"));
  CHECK_THROWS_AS(c.all_reduce(Tensor::empty({3, 4}).transpose(0, 1)), ShapeError);
  CHECK_THROWS_AS(c.all_reduce(Tensor::empty({3}, DType::i32), ReduceOp::mean), DTypeError);
  CHECK_THROWS_AS(c.all_reduce(Tensor::empty({3}, DType::boolean), ReduceOp::sum), DTypeError);
  CHECK_THROWS_AS(c.all_reduce(Tensor()), ValueError);
  CHECK_THROWS_AS(c.all_gather(Tensor::empty({2}), Tensor::empty({2 * p}, DType::f64)), DTypeError);
  CHECK_THROWS_AS(c.all_gather(Tensor::empty({2}), Tensor::empty({2 * p + 1})), ShapeError);
  CHECK_THROWS_WITH(c.all_gather_v(Tensor::empty({2}), Tensor::empty({2}), std::vector<int64_t>(p + 1, 1)),
                    Catch::Contains("all_gather_v " + at) && Catch::Contains("expected one per rank"));
  CHECK_THROWS_AS(c.all_gather_v(Tensor::empty({2}), Tensor::empty({2}), std::vector<int64_t>(p + 1, 1)), ValueError);
  CHECK_THROWS_AS(c.all_gather_v(Tensor::empty({3}), Tensor::empty({2 * p}), std::vector<int64_t>(p, 2)), ShapeError);
  CHECK_THROWS_AS(c.all_gather_v(Tensor::empty({2}), Tensor::empty({2 * p}), std::vector<int64_t>(p, -2)), ValueError);
  CHECK_THROWS_AS(c.reduce_scatter_v(Tensor::empty({4}), Tensor::empty({1}), std::vector<int64_t>(p, 2)), ShapeError);
  CHECK_THROWS_AS(c.all_to_all(Tensor::empty({p}), Tensor::empty({p + 1})), ShapeError);
  CHECK_THROWS_AS(c.broadcast(Tensor::empty({2}), p), ValueError);
  CHECK_THROWS_AS(c.ring_shift(Tensor::empty({2}), Tensor::empty({2}, DType::i32)), DTypeError);
  c.barrier();  // everyone is still in step
}

TEST_CASE("failure: agree_or_throw gives every rank the same typed error", "[mesh][failure]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  agree_or_throw(c, true, "never shown");
  CHECK_FALSE(c.agree(true, "fine").has_value());

  const std::string msg_last = "rank " + std::to_string(p - 1) + ": shard extent 0 is too thin for a halo of 2";
  CHECK_THROWS_WITH(agree_or_throw<ShapeError>(c, r != p - 1, r == p - 1 ? msg_last : "ignored"),
                    Catch::Contains(msg_last) &&
                        Catch::Contains("[check failed on rank(s) " + std::to_string(p - 1) + " of axis 'world']"));
  CHECK_THROWS_AS(agree_or_throw<ShapeError>(c, r != p - 1, "x"), ShapeError);

  // Several failing ranks: the lowest one's words, every failing rank listed.
  std::string failing;
  for (int j = 0; j < p; j += 2) failing += (failing.empty() ? "" : ", ") + std::to_string(j);
  auto agreed = c.agree(r % 2 == 1, "even rank " + std::to_string(r) + " disagrees");
  REQUIRE(agreed.has_value());
  CHECK(*agreed == "even rank 0 disagrees [check failed on rank(s) " + failing + " of axis 'world']");
  CHECK_THROWS_AS(agree_or_throw(c, false, ""), ValueError);  // an empty message still agrees
}

TEST_CASE("failure: a receive that never arrives times out with a CommError", "[mesh][failure]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs a peer that stays silent");
    return;
  }
  Communicator c(MPI_COMM_WORLD, "probe", throwing(0.3));
  if (r == 0) {
    Tensor buf = Tensor::empty({4});
    CHECK_THROWS_WITH(c.recv(buf, 1, 5), Catch::Contains("CommError") && Catch::Contains("recv on axis 'probe'") &&
                                             Catch::Contains("timed out after 0.3 s") &&
                                             Catch::Contains("a message from rank 1"));
    // The communicator is now unusable, and says so instead of touching the transport.
    CHECK_THROWS_WITH(c.barrier(), Catch::Contains("failed earlier"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("failure: a collective some ranks never join times out on the others", "[mesh][failure]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs a rank that stays away");
    return;
  }
  // Unchecked: the clean-up below matches the abandoned all_reduce itself (test_checked.cpp has the checked
  // counterpart, where the signature check is what times out).
  EnvVar unchecked("SHARDRT_COMM_CHECK", "0");
  Communicator c(MPI_COMM_WORLD, "probe", throwing(0.3));
  Tensor buf = full({8}, 1.0);
  if (r == 0) {
    CHECK_THROWS_WITH(c.all_reduce(buf),
                      Catch::Contains("all_reduce on axis 'probe' (rank 0 of " + std::to_string(p)) &&
                          Catch::Contains("timed out") && Catch::Contains("every rank to join"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Let the abandoned collective finish so that no request is left pending at MPI_Finalize (a non-blocking
  // collective only matches a non-blocking one).
  if (r != 0) {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), 8, MPI_FLOAT, MPI_SUM, c.mpi_comm(), &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("failure: an async ring shift whose peer never joins fails in wait(), and the handle lets go",
          "[mesh][failure]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs a peer that stays away");
    return;
  }
  // Unchecked: in checked mode an async ring shift waits for every rank when issued, so it would fail there.
  EnvVar unchecked("SHARDRT_COMM_CHECK", "0");
  Communicator c(MPI_COMM_WORLD, "probe", throwing(0.3));
  if (r == 0) {
    Tensor in = full({4}, 1.0), out = Tensor::empty({4});
    CommHandle h = c.ring_shift_async(in, out);
    CHECK_FALSE(h.ready());
    CHECK_THROWS_WITH(h.wait(), Catch::Contains("ring_shift on axis 'probe'") && Catch::Contains("timed out"));
    CHECK_FALSE(h.pending());  // destroying it now neither waits again nor aborts
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("failure: a message of the wrong size is a CommError, not stale data", "[mesh][failure]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs two ranks");
    return;
  }
  Communicator c(MPI_COMM_WORLD, "probe", throwing(5));
  if (r == 0) c.send(full({3}, 2.0), 1, 0);
  if (r == 1) {
    Tensor buf = Tensor::empty({5});
    CHECK_THROWS_WITH(c.recv(buf, 0, 0), Catch::Contains("received 3 elements from rank 0, expected 5"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// ---- set-up calls without a non-blocking form (mesh/guarded_call.h) ----

namespace {

// Called by the rank that stayed away: once the others gave up (they meet it in the world barrier after their
// CommError), matches by hand the deadline barrier they abandoned on `comm`, so that the collectives on `comm`
// line up again (a non-blocking collective only matches a non-blocking one).
void join_abandoned_barrier(MPI_Comm comm) {
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Request req;
  MPI_Ibarrier(comm, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
}

std::string world_ranks_str(int p) {
  std::string s = "{";
  for (int i = 0; i < p; ++i) s += (i ? ", " : "") + std::to_string(i);
  return s + "}";
}

}  // namespace

TEST_CASE("failure: a rank that skips the Mesh constructor's MPI_Comm_split is a CommError on the others",
          "[mesh][failure]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs a rank that stays away");
    return;
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);  // the abandoned barrier stays on this communicator
  if (r == p - 1) {
    // Takes part in the constructor's first set-up call (the node-local split), then never in the axis split.
    NodeLocal local = node_local(comm);
    CHECK(local.size >= 1);
    join_abandoned_barrier(comm);
  } else {
    Deadline clock(0);
    const std::string expected = "CommError [rank " + std::to_string(r) + "]: Mesh(ddp=1, domain=" +
                                 std::to_string(p) + "): MPI_Comm_split on axis 'ddp': timed out after 0.3 s " +
                                 "waiting for world ranks " + world_ranks_str(p) + " to reach it";
    CHECK_THROWS_WITH(Mesh(comm, 1, p, throwing(0.3)), Catch::StartsWith(expected));
    CHECK(clock.elapsed() >= 0.3);
    CHECK(clock.elapsed() < 3.0);  // the deadline, not a hang
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
}

TEST_CASE("failure: a rank that never builds the mesh is a CommError naming its first set-up call",
          "[mesh][failure]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: needs a rank that stays away");
    return;
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (r == 0) {
    join_abandoned_barrier(comm);  // late, after the others gave up
  } else {
    CHECK_THROWS_WITH(Mesh(comm, {"domain", "ddp"}, {-1, 1}, throwing(0.2)),
                      Catch::StartsWith("CommError [rank " + std::to_string(r) + "]: Mesh(domain=" +
                                         std::to_string(p) + ", ddp=1)") &&
                          Catch::Contains("MPI_Comm_split_type (the ranks sharing a node): timed out after 0.2 s"));
    CHECK_THROWS_AS(Mesh(MPI_COMM_NULL, 1, 1, throwing(0.2)), ValueError);  // local checks still come first
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
}

TEST_CASE("failure: the watchdog fires once its deadline passes, and never once disarmed", "[mesh][failure]") {
  std::atomic<int> fired{0};
  std::string said;
  {
    Watchdog w("MPI_Comm_split: still blocked", 0.05, [&](const std::string& m) {
      said = m;
      fired.fetch_add(1);
    });
    Deadline wait(5);
    while (fired.load() == 0 && !wait.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(wait.elapsed() >= 0.05);
  }
  CHECK(fired.load() == 1);
  CHECK(said == "MPI_Comm_split: still blocked");

  Deadline clock(0);
  {
    Watchdog w("never", 30, [&](const std::string&) { fired.fetch_add(1); });
  }
  CHECK(clock.elapsed() < 1.0);  // disarming does not wait out the deadline
  CHECK(fired.load() == 1);
}
