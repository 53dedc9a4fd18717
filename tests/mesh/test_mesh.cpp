// Mesh layout (row-major ddp x domain), axis groups, isolation of axes, sub-communicators, size errors and
// device binding.
#include <algorithm>
#include <numeric>

#include "mesh/mesh.h"
#include "mesh_testing.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<int> range(int start, int count, int step = 1) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(start + i * step);
  return v;
}

// Checks a ddp x domain mesh over `comm`, whose members have the world ranks `members` (by comm rank).
void check_2d(MPI_Comm comm, const std::vector<int>& members, int ddp, int domain) {
  auto ledger = std::make_shared<CommLedger>();
  CommOptions opts;
  opts.ledger = ledger;
  Mesh m(comm, ddp, domain, opts);
  const int rank = m.rank(), di = rank / domain, xi = rank % domain;
  INFO(m.str() << " mesh rank " << rank);
  CHECK(m.shape() == std::vector<int>{ddp, domain});
  CHECK(m.axis_names() == std::vector<std::string>{"ddp", "domain"});
  CHECK(m.size() == ddp * domain);
  CHECK(m.coords() == std::vector<int>{di, xi});
  CHECK(m.coord("ddp") == di);
  CHECK(m.coord("domain") == xi);

  Communicator& dom = m.axis("domain");
  Communicator& dp = m.axis("ddp");
  std::vector<int> dom_members, dp_members;
  for (int k : range(di * domain, domain)) dom_members.push_back(members[k]);
  for (int k : range(xi, ddp, domain)) dp_members.push_back(members[k]);
  CHECK(dom.world_ranks() == dom_members);
  CHECK(dp.world_ranks() == dp_members);
  CHECK(m.flat().world_ranks() == members);
  CHECK(dom.rank() == xi);
  CHECK(dp.rank() == di);
  CHECK(dom.axis() == "domain");
  CHECK(m.flat().axis() == "mesh");

  // A sum over one axis sees exactly that axis' group, and every group runs concurrently without crosstalk.
  const double mine = members[rank] + 1;
  Tensor x = full({3}, mine, {DType::f64});
  dom.all_reduce(x);
  double want = 0;
  for (int w : dom_members) want += w + 1;
  CHECK(x.to_vector() == std::vector<double>(3, want));
  CHECK(ledger->calls("", "all_reduce", "domain") == 1);
  CHECK(ledger->calls("", "all_reduce", "ddp") == 0);
  CHECK(ledger->calls("", "all_reduce", "mesh") == 0);

  Tensor y = full({2}, mine, {DType::i64});
  dp.all_reduce(y, ReduceOp::max);
  CHECK(y.to_vector() == std::vector<double>(2, *std::max_element(dp_members.begin(), dp_members.end()) + 1.0));
  CHECK(ledger->calls("", "all_reduce", "domain") == 1);
  CHECK(ledger->calls("", "all_reduce", "ddp") == 1);

  Tensor z = Tensor::empty({m.size()}, DType::i32);
  m.flat().all_gather(full({1}, members[rank], {DType::i32}), z);
  std::vector<double> all(members.begin(), members.end());
  CHECK(z.to_vector() == all);
  CHECK(ledger->total_calls() == 3);
}

// The same ranks in the same order, over the same communicator object.
bool same_ranks_and_comm(const Mesh& a, const Mesh& b) {
  return a.shape() == b.shape() && a.rank() == b.rank() && &a.flat() == &b.flat();
}

}  // namespace

TEST_CASE("mesh: every ddp x domain factorisation of the world", "[mesh]") {
  const int p = world_size();
  for (int ddp = 1; ddp <= p; ++ddp) {
    if (p % ddp != 0) continue;
    check_2d(MPI_COMM_WORLD, range(0, p), ddp, p / ddp);
  }
}

TEST_CASE("mesh: ddp = -1 is inferred from the domain size", "[mesh]") {
  const int p = world_size();
  Mesh m(MPI_COMM_WORLD, -1, 1);
  CHECK(m.shape() == std::vector<int>{p, 1});
  Mesh n(MPI_COMM_WORLD, -1, p);
  CHECK(n.shape() == std::vector<int>{1, p});
  CHECK(n.str() == "Mesh(ddp=1, domain=" + std::to_string(p) + ")");
}

TEST_CASE("mesh: 1-D mesh", "[mesh]") {
  const int p = world_size(), r = world_rank();
  Mesh m = Mesh::one_d(MPI_COMM_WORLD);
  CHECK(m.ndim() == 1);
  CHECK(m.shape() == std::vector<int>{p});
  CHECK(&m.flat() == &m.axis("domain"));
  CHECK(m.axis("domain").world_ranks() == range(0, p));
  Mesh copy = m;  // a handle: copies share the communicators
  CHECK(&copy.axis("domain") == &m.axis("domain"));
  Tensor x = full({1}, r, {DType::f32});
  copy.axis("domain").all_reduce(x);
  CHECK(x.item() == p * (p - 1) / 2.0);
  CHECK_THROWS_AS(m.axis("ddp"), ValueError);
}

TEST_CASE("mesh: sub(axis) is the 1-D mesh of one axis, sharing its communicator", "[mesh]") {
  const int p = world_size(), r = world_rank();
  Mesh line = Mesh::one_d(MPI_COMM_WORLD);
  Mesh same = line.sub("domain");  // a 1-D mesh's only axis is the mesh itself
  CHECK(same_ranks_and_comm(same, line));
  CHECK_THROWS_AS(line.sub("ddp"), ValueError);

  // Every ddp x domain factorisation (2x2 on 4 ranks): each axis' sub-mesh is that axis' group, in coordinate order.
  for (int ddp = 1; ddp <= p; ++ddp) {
    if (p % ddp != 0) continue;
    const int domain = p / ddp;
    auto ledger = std::make_shared<CommLedger>();
    CommOptions opts;
    opts.ledger = ledger;
    Mesh m(MPI_COMM_WORLD, ddp, domain, opts);
    INFO(m.str() << " rank " << r);
    for (const std::string name : {"ddp", "domain"}) {
      Mesh s = m.sub(name);
      CHECK(s.ndim() == 1);
      CHECK(s.axis_names() == std::vector<std::string>{name});
      CHECK(s.shape() == std::vector<int>{m.axis_size(name)});
      CHECK(s.size() == m.axis_size(name));
      CHECK(s.rank() == m.coord(name));
      CHECK(s.coords() == std::vector<int>{m.coord(name)});
      CHECK(&s.axis(name) == &m.axis(name));
      CHECK(&s.flat() == &m.axis(name));
      CHECK(s.device() == m.device());
      CHECK(s.local_size() >= 1);
      CHECK(s.local_rank() < s.local_size());
      CHECK_THROWS_AS(s.axis(name == "ddp" ? "domain" : "ddp"), ValueError);
      // Collectives on the sub-mesh run over the axis' group and land in the parent's ledger, under the axis.
      Tensor x = full({1}, r, {DType::f64});
      s.flat().all_reduce(x);
      double want = 0;
      for (int w : s.flat().world_ranks()) want += w;
      CHECK(x.item() == want);
      CHECK(ledger->calls("", "all_reduce", name) == 1);
    }
    CHECK(ledger->total_calls() == 2);
  }
}

TEST_CASE("mesh: a mesh over a sub-communicator", "[mesh]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) {
    WARN("skipped: a proper sub-communicator needs 2 ranks");
    return;
  }
  // Ranks {0..P-2}; the last rank is not part of it and never touches the mesh.
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, r < p - 1 ? 0 : MPI_UNDEFINED, r, &sub);
  if (sub != MPI_COMM_NULL) {
    check_2d(sub, range(0, p - 1), 1, p - 1);
    check_2d(sub, range(0, p - 1), p - 1, 1);
    Mesh one = Mesh::one_d(sub, "domain");
    CHECK(one.axis("domain").world_ranks() == range(0, p - 1));
    MPI_Comm_free(&sub);
  }
  // Odd world ranks in reverse order: mesh ranks and world ranks differ, and the mapping is reported.
  MPI_Comm rev = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, r % 2 == 1 ? 0 : MPI_UNDEFINED, -r, &rev);
  if (rev != MPI_COMM_NULL) {
    std::vector<int> members;
    for (int w = p - 1; w >= 0; --w)
      if (w % 2 == 1) members.push_back(w);
    check_2d(rev, members, 1, static_cast<int>(members.size()));
    MPI_Comm_free(&rev);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("mesh: a shape that does not fit the communicator fails on every rank, naming the sizes", "[mesh]") {
  const int p = world_size();
  // Nothing is communicated before the check, so every rank throws and none waits for the others.
  CHECK_THROWS_WITH(Mesh(MPI_COMM_WORLD, p + 1, 2),
                    Catch::Contains("Mesh(ddp=" + std::to_string(p + 1) + ", domain=2) needs " + std::to_string(p + 1) +
                                    " x 2 = " + std::to_string(2 * (p + 1)) + " ranks, but the communicator has " +
                                    std::to_string(p)));
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, p + 1, 2), ValueError);
  CHECK_THROWS_WITH(Mesh(MPI_COMM_WORLD, -1, p + 1),
                    Catch::Contains("the communicator has " + std::to_string(p) + " ranks, not a multiple of " +
                                    std::to_string(p + 1)));
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, 0, p), ValueError);
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, -1, -1), ValueError);
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, {"a", "a"}, {1, p}), ValueError);
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, {"mesh", "b"}, {1, p}), ValueError);
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, {"a"}, {1, p}), ValueError);
  // The world is still usable: nobody is stuck in a half-built mesh.
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("mesh: a 3-D mesh splits into one group per axis", "[mesh]") {
  const int p = world_size();
  Mesh m(MPI_COMM_WORLD, {"pp", "ddp", "domain"}, {1, -1, 1});
  CHECK(m.shape() == std::vector<int>{1, p, 1});
  CHECK(m.axis("pp").size() == 1);
  CHECK(m.axis("ddp").size() == p);
  CHECK(m.axis("domain").size() == 1);
}

TEST_CASE("mesh: device binding from the shared-memory split", "[mesh]") {
  const int p = world_size();
  Mesh m = Mesh::one_d(MPI_COMM_WORLD);
  CHECK(m.local_rank() >= 0);
  CHECK(m.local_rank() < m.local_size());
  CHECK(m.local_size() <= p);
  // Node-local ranks are distinct within a node: gather (local_size, local_rank) and count.
  Tensor mine = full({1}, m.local_rank(), {DType::i32}), all = Tensor::empty({p}, DType::i32);
  m.flat().all_gather(mine, all);
  auto v = all.to_vector();
  std::sort(v.begin(), v.end());
  const auto expected = range(0, p);
  if (m.local_size() == p) CHECK(v == std::vector<double>(expected.begin(), expected.end()));
  const int n = cuda_device_count();
  if (n == 0) CHECK(m.device() == Device::cpu());
  else CHECK(m.device() == Device::cuda(m.local_rank() % n));
  CommOptions pinned;
  pinned.cuda_device = CommOptions::no_gpu;
  CHECK(Mesh::one_d(MPI_COMM_WORLD, "domain", pinned).device() == Device::cpu());
}
