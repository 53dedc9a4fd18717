// Replicated tensors through the C API: a tensor every rank declares whole (shardrt_sharded_create with offsets 0
// and the global extents) is replicated over the domain group. FLARE's `time` input and the ViT's class output are
// the cases: run in situ on the ranks' own uneven point ranges or image rows (a rank without points at 3 and 4
// ranks), the output, every input grad (time's included) and every parameter grad equal PhysicsNeMo's module
// (tests/data/golden) and the same calls on a one-rank mesh, on every rank.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/factories.h"
#include "runtime/safetensors.h"
#include "tests/capi/capi_fixture.h"

using namespace shardrt;
using namespace shardrt::capi_test;

namespace {

std::string golden(const std::string& file) { return std::string(SHARDRT_TEST_DATA_DIR) + "/golden/" + file; }

// Uneven extents of `n` over the domain ranks, in multiples of `unit`, with a rank of none at 3 and 4 ranks.
std::vector<int64_t> in_situ_extents(int64_t n, int p, int64_t unit = 1) {
  const int64_t u = n / unit;
  std::vector<int64_t> e;
  if (p == 1) e = {u};
  if (p == 2) e = {u / 3, u - u / 3};
  if (p == 3) e = {u / 3, 0, u - u / 3};
  if (p == 4) e = {u / 4, u / 4, 0, u - 2 * (u / 4)};
  for (int64_t& x : e) x *= unit;
  return e;
}

// This rank's box of a global f64 tensor, in memory the test owns, declared through the C API: split along
// `dim` by the domain ranks' `extents`, or (dim -1) replicated: every rank holds the whole tensor.
struct Held {
  Tensor global;  // the values the test put in (or zeros), global shape
  int dim = -1;
  int64_t offset = 0, n = 0;
  std::vector<double> data;
  shardrt_tensor t{0};
  shardrt_sharded s{0};

  Held(shardrt_context ctx, shardrt_mesh mesh, const Tensor& values, int split_dim, const std::vector<int64_t>& extents)
      : global(values.to(DType::f64).contiguous()), dim(split_dim) {
    const int rank = dim < 0 ? 0 : domain_rank(mesh);
    for (int r = 0; r < rank; ++r) offset += extents[static_cast<size_t>(r)];
    Tensor mine = dim < 0 ? global : global.narrow(dim, offset, extents[static_cast<size_t>(rank)]).contiguous();
    n = dim < 0 ? 0 : mine.size(dim);
    data = mine.to_vector();
    Shape g = global.shape(), local = mine.shape();
    std::vector<int64_t> offs(g.size(), 0);
    if (dim >= 0) offs[static_cast<size_t>(dim)] = offset;
    CAPI_OK(shardrt_tensor_wrap(&t, ctx, data.data(), SHARDRT_F64, static_cast<int>(local.size()), local.data(),
                                nullptr, SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_CPU, SHARDRT_COPY_FORBID));
    CAPI_OK(shardrt_sharded_create(&s, mesh, t, static_cast<int>(g.size()), g.data(), offs.data()));
  }
  ~Held() {
    shardrt_sharded_destroy(s);
    shardrt_tensor_destroy(t);
  }
  static int domain_rank(shardrt_mesh mesh) {
    int j = 0;
    CAPI_OK(shardrt_mesh_info(mesh, nullptr, nullptr, nullptr, &j));
    return j;
  }
  // What this rank should hold of `want` (a global tensor).
  Tensor expected(const Tensor& want) const {
    const Tensor w = want.to(DType::f64).contiguous();
    return dim < 0 ? w : w.narrow(dim, offset, n).contiguous();
  }
};

// max |got - want| / max |want| over this rank's values (the scale of the whole reference tensor).
double rel_error(const std::vector<double>& got, const Tensor& want_here, const Tensor& want_global) {
  const std::vector<double> w = want_here.to_vector(), all = want_global.to(DType::f64).to_vector();
  double scale = 0, worst = 0;
  for (double v : all) scale = std::max(scale, std::abs(v));
  REQUIRE(got.size() == w.size());
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(got[i] - w[i]));
  REQUIRE(scale > 0);  // a reference of zeros would compare nothing
  return worst / scale;
}

void check_held(const Held& h, const Tensor& want, double tol, const std::string& what) {
  INFO(what << " on rank " << world_rank() << " (" << (h.dim < 0 ? "replicated" : "split") << ")");
  CHECK(rel_error(h.data, h.expected(want), want) <= tol);
}

// The grad of parameter `key` through shardrt_model_parameter_grad.
Tensor parameter_grad(shardrt_context ctx, shardrt_model m, const std::string& key, const Shape& shape) {
  Tensor g = Tensor::empty(shape, DType::f64);
  shardrt_tensor t{0};
  CAPI_OK(shardrt_tensor_wrap(&t, ctx, g.raw_data(), SHARDRT_F64, static_cast<int>(shape.size()), shape.data(), nullptr,
                              SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_CPU, SHARDRT_COPY_FORBID));
  CAPI_OK(shardrt_model_parameter_grad(m, key.c_str(), t));
  shardrt_tensor_destroy(t);
  return g;
}

// Every parameter grad of `m` against the golden's grad.* (PhysicsNeMo) and against the one-rank model's.
void check_parameter_grads(shardrt_context ctx, shardrt_model m, shardrt_context ctx1, shardrt_model m1,
                           const SafetensorsFile& ref, double tol_golden) {
  int checked = 0;
  for (const std::string& name : ref.names()) {
    if (name.rfind("grad.", 0) != 0) continue;
    const std::string key = name.substr(5);
    const Tensor& want = ref.get(name);
    const Tensor got = parameter_grad(ctx, m, key, want.shape()), one = parameter_grad(ctx1, m1, key, want.shape());
    INFO("parameter grad " << key << " on rank " << world_rank());
    CHECK(rel_error(got.to_vector(), want, want) <= tol_golden);
    CHECK(rel_error(got.to_vector(), one, one) <= 1e-12);
    ++checked;
  }
  CHECK(checked > 10);
}

// A context and a 1 x 1 mesh of this rank alone: the one-rank run of the same calls.
struct SelfSession {
  shardrt_context ctx{0};
  shardrt_mesh mesh{0};
  SelfSession() {
    CAPI_OK(shardrt_context_create(&ctx, MPI_COMM_SELF, SHARDRT_AGREE_ERRORS));
    CAPI_OK(shardrt_mesh_create(&mesh, ctx, MPI_COMM_SELF, 1, 1, SHARDRT_DEVICE_CPU));
  }
  ~SelfSession() {
    shardrt_mesh_destroy(mesh);
    shardrt_context_destroy(ctx);
  }
};

// FLARE with time_input on one mesh: fx and embedding split along the points, time and its grad replicated.
struct FlareTimeRun {
  SafetensorsFile ref = load_safetensors(golden("flare_time_insitu.safetensors"));
  shardrt_model model{0};
  std::unique_ptr<Held> fx, emb, time, out, grad_out, dfx, demb, dtime;

  FlareTimeRun(shardrt_context ctx, shardrt_mesh mesh, const std::vector<int64_t>& e) {
    CAPI_OK(shardrt_model_create(&model, mesh, "flare", golden("flare_time_insitu.config.json").c_str(),
                                 golden("flare_time_insitu.weights.safetensors").c_str(), SHARDRT_F64, 0));
    const Tensor& x = ref.get("input.fx");
    fx = std::make_unique<Held>(ctx, mesh, x, 1, e);
    emb = std::make_unique<Held>(ctx, mesh, ref.get("input.embedding"), 1, e);
    time = std::make_unique<Held>(ctx, mesh, ref.get("input.time"), -1, e);
    out = std::make_unique<Held>(ctx, mesh, zeros_like(ref.get("output")), 1, e);
    grad_out = std::make_unique<Held>(ctx, mesh, ref.get("grad_output"), 1, e);
    dfx = std::make_unique<Held>(ctx, mesh, zeros_like(x), 1, e);
    demb = std::make_unique<Held>(ctx, mesh, zeros_like(x), 1, e);
    dtime = std::make_unique<Held>(ctx, mesh, zeros_like(ref.get("input.time")), -1, e);
    CAPI_OK(shardrt_model_set_input(model, "fx", fx->s));
    CAPI_OK(shardrt_model_set_input(model, "embedding", emb->s));
    CAPI_OK(shardrt_model_set_input(model, "time", time->s));
    CAPI_OK(shardrt_model_forward(model, out->s, 1));
    CAPI_OK(shardrt_model_backward(model, grad_out->s));
    CAPI_OK(shardrt_model_input_grad(model, "fx", dfx->s));
    CAPI_OK(shardrt_model_input_grad(model, "embedding", demb->s));
    CAPI_OK(shardrt_model_input_grad(model, "time", dtime->s));
  }
  ~FlareTimeRun() { shardrt_model_destroy(model); }
  static Tensor zeros_like(const Tensor& t) {
    Tensor z = Tensor::empty(t.shape(), DType::f64);
    z.zero_();
    return z;
  }
};

}  // namespace

TEST_CASE("capi: FLARE with time_input in situ, time declared replicated on every rank: output, the grads of fx, "
          "embedding and time, and every parameter grad equal PhysicsNeMo's and the one-rank run's", "[capi]") {
  const int P = world_size();
  Session s(SHARDRT_AGREE_ERRORS | SHARDRT_CHECKED);
  SelfSession one;
  const std::vector<int64_t> e = in_situ_extents(19, P);
  FlareTimeRun run(s.ctx, s.mesh, e), serial(one.ctx, one.mesh, {19});
  if (P > 1) REQUIRE(run.fx->n < 19);  // sharding is active
  const SafetensorsFile& ref = run.ref;
  check_held(*run.out, ref.get("output"), 1e-9, "output vs PhysicsNeMo");
  check_held(*run.dfx, ref.get("grad_input.fx"), 1e-9, "grad of fx vs PhysicsNeMo");
  check_held(*run.demb, ref.get("grad_input.embedding"), 1e-9, "grad of embedding vs PhysicsNeMo");
  check_held(*run.dtime, ref.get("grad_input.time"), 1e-9, "grad of time vs PhysicsNeMo");
  const std::vector<std::tuple<const Held*, const Held*, const char*>> pairs = {
      {run.out.get(), serial.out.get(), "output"},
      {run.dfx.get(), serial.dfx.get(), "grad of fx"},
      {run.demb.get(), serial.demb.get(), "grad of embedding"},
      {run.dtime.get(), serial.dtime.get(), "grad of time"}};
  for (const auto& [mine, theirs, what] : pairs) {
    const Tensor whole = from_vector(theirs->data, theirs->global.shape(), {DType::f64});
    check_held(*mine, whole, 1e-12, std::string(what) + " vs the one-rank run");
  }
  CHECK(run.dtime->data.at(0) != 0.0);  // time's grad is there, and whole on every rank
  check_parameter_grads(s.ctx, run.model, one.ctx, serial.model, ref, 1e-9);
}

TEST_CASE("capi: the ViT's class output declared replicated on every rank (the image rows split, whole patches, a "
          "rank without rows at 3 and 4 ranks): output, input grad and every parameter grad equal PhysicsNeMo's "
          "and the one-rank run's, on every rank; train_step on it loses what one rank loses", "[capi]") {
  const int P = world_size();
  Session s(SHARDRT_AGREE_ERRORS | SHARDRT_CHECKED);
  SelfSession one;
  const SafetensorsFile ref = load_safetensors(golden("vit2d.safetensors"));
  auto run = [&](shardrt_context ctx, shardrt_mesh mesh, const std::vector<int64_t>& rows, double* loss) {
    shardrt_model m{0};
    CAPI_OK(shardrt_model_create(&m, mesh, "vit", golden("vit2d.config.json").c_str(),
                                 golden("vit2d.weights.safetensors").c_str(), SHARDRT_F64, 0));
    Held x(ctx, mesh, ref.get("input.x"), 2, rows), out(ctx, mesh, FlareTimeRun::zeros_like(ref.get("output")), -1, rows);
    Held grad_out(ctx, mesh, ref.get("grad_output"), -1, rows), dx(ctx, mesh, FlareTimeRun::zeros_like(ref.get("input.x")), 2, rows);
    CAPI_OK(shardrt_model_set_input(m, "x", x.s));
    CAPI_OK(shardrt_model_forward(m, out.s, 1));
    CAPI_OK(shardrt_model_backward(m, grad_out.s));
    CAPI_OK(shardrt_model_input_grad(m, "x", dx.s));
    std::vector<double> result = out.data;
    result.insert(result.end(), dx.data.begin(), dx.data.end());
    if (loss) {  // two SGD steps toward the replicated target grad_output, the loss read after each
      shardrt_optimizer opt{0};
      std::vector<double> grads;
      for (const std::string& name : ref.names())
        if (name.rfind("grad.", 0) == 0) {
          const Tensor g = parameter_grad(ctx, m, name.substr(5), ref.get(name).shape());
          const Tensor& want = ref.get(name);
          INFO("parameter grad " << name << " on rank " << world_rank());
          CHECK(rel_error(g.to_vector(), want, want) <= 1e-9);
        }
      CAPI_OK(shardrt_optimizer_create(&opt, m, R"({"optimizer": {"algorithm": "sgd", "lr": 0.002}})"));
      for (int k = 0; k < 2; ++k) CAPI_OK(shardrt_train_step(opt, grad_out.s, &loss[k]));
      shardrt_optimizer_destroy(opt);
    }
    check_held(out, ref.get("output"), 1e-9, "class output vs PhysicsNeMo");
    check_held(dx, ref.get("grad_input.x"), 1e-9, "grad of x vs PhysicsNeMo");
    shardrt_model_destroy(m);
    return std::make_pair(result, x.n);
  };
  double loss[2] = {0, 0}, loss1[2] = {0, 0};
  const auto [got, rows_here] = run(s.ctx, s.mesh, in_situ_extents(32, P, 4), loss);
  const auto [want, all_rows] = run(one.ctx, one.mesh, {32}, loss1);
  if (P > 1) REQUIRE(rows_here < all_rows);
  // The class output is whole on every rank and equals the one-rank run's (its first 10 values: (2, 5)).
  for (int i = 0; i < 10; ++i) CHECK(std::abs(got[static_cast<size_t>(i)] - want[static_cast<size_t>(i)]) <= 1e-12 * (1 + std::abs(want[static_cast<size_t>(i)])));
  for (int k = 0; k < 2; ++k) {
    INFO("train_step " << k + 1);
    CHECK(std::abs(loss[k] - loss1[k]) <= 1e-12 * std::abs(loss1[k]));
  }
  CHECK(loss[1] < loss[0]);
}
