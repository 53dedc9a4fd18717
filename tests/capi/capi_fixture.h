// What the C API tests share: a context + 1 x P mesh on MPI_COMM_WORLD, a small FLARE, a point set split unevenly
// around a zero-size shard, each rank's piece held in its own host arrays (as a simulation holds its subdomain),
// and the serial C++ oracle (the same model on a one-rank mesh of MPI_COMM_SELF, fed the whole input).
#pragma once
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "capi/shardrt.h"
#include "mesh/mesh.h"
#include "models/model.h"
#include "patches/shard_tensor.h"

namespace shardrt::capi_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

#define CAPI_OK(call)                                   \
  do {                                                  \
    const shardrt_status capi_ok_s_ = (call);           \
    INFO(#call << ": " << shardrt_last_error());        \
    REQUIRE(shardrt_status_name(capi_ok_s_) == std::string("SHARDRT_OK")); \
  } while (0)

// FLARE with fx (B, N, 3) and embedding (B, N, 2) -> (B, N, 2).
inline const char* flare_config() {
  return R"({"functional_dim": 3, "out_dim": 2, "embedding_dim": 2, "n_layers": 2, "n_hidden": 16, "n_head": 2,
             "mlp_ratio": 1, "slice_num": 4})";
}

// The points each rank holds: uneven, with a zero-size shard on 4 ranks.
inline std::vector<int64_t> point_extents(int64_t n, int p) {
  if (p == 1) return {n};
  if (p == 2) return {n - 5, 5};
  if (p == 4) return {5, 0, 3, n - 8};
  std::vector<int64_t> e(static_cast<size_t>(p), n / p);
  e.back() += n % p;
  return e;
}

// Deterministic fields of (sample, point, channel), the same on every rank.
inline double fx_value(int64_t b, int64_t i, int64_t c) { return std::sin(0.37 * double(i + 1) * double(c + 1) + 0.11 * double(b)); }
inline double emb_value(int64_t b, int64_t i, int64_t c) { return std::cos(0.23 * double(i) + 0.5 * double(c)) + 0.01 * double(b); }
inline double target_value(int64_t b, int64_t i, int64_t c) { return 0.3 * std::sin(0.2 * double(i) + double(c)) + 0.1 * double(b); }

// A whole (B, N, C) field on every rank (for the oracle).
inline Tensor whole(int64_t B, int64_t N, int64_t C, double (*f)(int64_t, int64_t, int64_t)) {
  Tensor t = Tensor::empty({B, N, C}, DType::f64);
  double* p = t.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) p[(b * N + i) * C + c] = f(b, i, c);
  return t;
}

struct Session {
  shardrt_context ctx{0};
  shardrt_mesh mesh{0};
  explicit Session(int flags = SHARDRT_AGREE_ERRORS, int ddp = 1) {
    CAPI_OK(shardrt_context_create(&ctx, MPI_COMM_WORLD, flags));
    CAPI_OK(shardrt_mesh_create(&mesh, ctx, MPI_COMM_WORLD, ddp, world_size() / ddp, SHARDRT_DEVICE_CPU));
  }
  ~Session() {
    shardrt_mesh_destroy(mesh);
    shardrt_context_destroy(ctx);
  }
};

// One rank's piece [offset, offset + n) of a (B, N, C) point field, in memory the test owns.
struct Piece {
  int64_t B = 0, N = 0, C = 0, offset = 0, n = 0;
  std::vector<double> data;
  shardrt_tensor tensor{0};
  shardrt_sharded sharded{0};

  Piece(const Session& s, int64_t B_, int64_t N_, int64_t C_, double (*f)(int64_t, int64_t, int64_t) = nullptr)
      : B(B_), N(N_), C(C_) {
    const std::vector<int64_t> e = point_extents(N, world_size());
    for (int r = 0; r < world_rank(); ++r) offset += e[static_cast<size_t>(r)];
    n = e[static_cast<size_t>(world_rank())];
    data.assign(static_cast<size_t>(B * n * C), 0.0);
    if (f)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < C; ++c) data[static_cast<size_t>((b * n + i) * C + c)] = f(b, offset + i, c);
    const int64_t shape[3] = {B, n, C}, global[3] = {B, N, C}, offs[3] = {0, offset, 0};
    CAPI_OK(shardrt_tensor_wrap(&tensor, s.ctx, data.data(), SHARDRT_F64, 3, shape, nullptr,
                                SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_AUTO, SHARDRT_COPY_DEFAULT));
    CAPI_OK(shardrt_sharded_create(&sharded, s.mesh, tensor, 3, global, offs));
  }
  ~Piece() {
    shardrt_sharded_destroy(sharded);
    shardrt_tensor_destroy(tensor);
  }
  double at(int64_t b, int64_t i, int64_t c) const { return data[static_cast<size_t>((b * n + i) * C + c)]; }
};

// The serial oracle: the same model (same seed) on a one-rank mesh.
struct Oracle {
  Mesh self{MPI_COMM_SELF, 1, 1};
  std::unique_ptr<models::Model> model;
  explicit Oracle(uint64_t seed) : model(models::build_model("flare", nlohmann::json::parse(flare_config()), {DType::f64, seed})) {}
  ShardTensor input(const Tensor& full) const { return distribute(full, self, models::samples_and_domain(self, 1)); }
};

}  // namespace shardrt::capi_test
