// Sharded inference of a PhysicsNeMo checkpoint from C++, as a simulation code that links the installed ShardRT
// would do it: every rank holds only its own (deliberately uneven) range of the points, wraps it as a ShardTensor
// without copying, and runs the FLARE model domain-parallel on it. The result is checked against PhysicsNeMo's own
// output for the same checkpoint and inputs, rank by rank, on the rank's own slice (no rank gathers the field).
//
//   mpiexec -n 3 sharded_inference CONFIG.json CHECKPOINT.mdlus INPUTS.safetensors REFERENCE.safetensors
//
// The test data is a golden case of tests/data/golden (flare_irregular): a FLARE of PhysicsNeMo's constructor
// arguments CONFIG.json, its .mdlus checkpoint written by PhysicsNeMo, the inputs (fx, embedding) and PhysicsNeMo's
// output. Exit status 0 when every rank's output matches to 1e-9 (fp64), 1 otherwise, 2 on an error.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "models/model.h"
#include "patches/shard_tensor.h"
#include "runtime/errors.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"

using namespace shardrt;

namespace {

// A simulation's own decomposition, uneven on purpose: rank r owns a share proportional to r + 1 of the points,
// and with four ranks or more rank 0 owns none (a rank whose subdomain holds no points of this set).
std::vector<int64_t> uneven_extents(int64_t n, int ranks) {
  std::vector<int64_t> w(ranks);
  for (int r = 0; r < ranks; ++r) w[r] = (ranks >= 4 && r == 0) ? 0 : r + 1;
  int64_t total = 0;
  for (int64_t x : w) total += x;
  std::vector<int64_t> extents(ranks);
  int64_t given = 0;
  for (int r = 0; r < ranks; ++r) {
    extents[r] = r + 1 == ranks ? n - given : n * w[r] / total;
    given += extents[r];
  }
  return extents;
}

int run(int rank, int ranks, char** argv) {
  const std::string config_path = argv[1], checkpoint = argv[2], inputs_path = argv[3], reference_path = argv[4];
  const Mesh mesh(MPI_COMM_WORLD, /*ddp=*/1, /*domain=*/ranks);

  std::ifstream config_file(config_path);
  SHARDRT_CHECK(config_file.good(), IoError, "sharded_inference: cannot open the config ", config_path);
  auto model = models::build_model("flare", models::Json::parse(config_file), {DType::f64});
  model->load_state_dict(load_weights(checkpoint).tensors, /*strict=*/true, checkpoint);

  // This rank's points: rows [start, start + n) of dim 1. (A simulation has them in memory already; here they
  // come from the golden case's file.)
  const SafetensorsFile inputs = load_safetensors(inputs_path);
  const int64_t points = inputs.get("fx").shape()[1];
  const std::vector<int64_t> extents = uneven_extents(points, ranks);
  int64_t start = 0;
  for (int r = 0; r < rank; ++r) start += extents[r];
  const int64_t n = extents[rank];

  // The model's own placements for a point set on this mesh (samples over ddp, points over domain), with the
  // caller's extents: from_local takes any decomposition as it is. (One ddp group here: it holds every sample.)
  const Placements placements = models::samples_and_domain(mesh, /*domain_dim=*/1);
  const AxisExtents axis_extents = {{inputs.get("fx").shape()[0]}, extents};
  std::map<std::string, ShardTensor> sharded;
  for (const std::string name : {"fx", "embedding"})
    sharded[name] = from_local(inputs.get(name).narrow(1, start, n).contiguous(), mesh, placements, axis_extents);

  mesh.flat().ledger().reset();
  const ShardTensor out = model->forward(sharded).at(0);

  // The check, on this rank's slice only.
  const Tensor expected = load_safetensors(reference_path).get("output").narrow(1, start, n).contiguous();
  const std::vector<double> got = out.local().contiguous().to_vector(), want = expected.to_vector();
  SHARDRT_CHECK(got.size() == want.size(), ShapeError, "sharded_inference: rank ", rank, " holds ", got.size(),
                " output values where PhysicsNeMo's slice has ", want.size());
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  double worst = 0;
  MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // What the forward sent: FLARE's sharded attention reduces its latent sums, it never gathers the points.
  // (Every communicator of the mesh counts into the same ledger.)
  int64_t gathered = 0;
  for (const LedgerEntry& e : mesh.flat().ledger().entries())
    if (e.kind.rfind("all_gather", 0) == 0) gathered += e.bytes_sent;
  std::printf("rank %d: points [%lld, %lld) of %lld, max |output - PhysicsNeMo| %.3g, all-gathered %lld bytes\n", rank,
              static_cast<long long>(start), static_cast<long long>(start + n), static_cast<long long>(points), err,
              static_cast<long long>(gathered));
  const bool ok = worst < 1e-9 && std::isfinite(worst);
  if (rank == 0)
    std::printf("sharded_inference: %d ranks, max error %.3g: %s\n", ranks, worst, ok ? "matches PhysicsNeMo" : "WRONG");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int rc = 0;
  if (argc != 5) {
    if (rank == 0)
      std::fprintf(stderr, "usage: sharded_inference CONFIG.json CHECKPOINT INPUTS.safetensors REFERENCE.safetensors\n");
    rc = 2;
  } else {
    try {
      rc = run(rank, ranks, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sharded_inference: rank %d: %s\n", rank, e.what());
      rc = 2;
    }
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
