// The local ops of the model layer (models/cos_sin.h, models/concrete_dropout.h), each against its formula,
// PhysicsNeMo where it has one, and fp64 finite differences; the counter-based noise window
// (models/noise_window.h); and GeoTransolver's concrete dropout in training mode: fresh masks every step, the
// same masks on every mesh (sharded against the serial oracle), and a grad for every p_logit.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "models/concrete_dropout.h"
#include "models/cos_sin.h"
#include "models/geotransolver.h"
#include "models/noise_window.h"
#include "runtime/errors.h"
#include "tests/autograd/op_testing.h"
#include "tests/models/golden_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::models;
using namespace shardrt::test;

TEST_CASE("cos_sin_embedding: [cos(t f), sin(t f)], fp64 gradcheck in t and freqs, typed errors", "[models][ops]") {
  const Tensor t = from_vector({0.3, -1.7, 2.5}, {3}, {DType::f64});
  const Tensor f = from_vector({1.0, 0.1, 0.01, 0.25}, {4}, {DType::f64});
  const std::vector<double> y = cos_sin_embedding(t, f).to_vector();
  REQUIRE(y.size() == 3 * 8);
  const std::vector<double> tv = t.to_vector(), fv = f.to_vector();
  for (int b = 0; b < 3; ++b)
    for (int k = 0; k < 4; ++k) {
      CHECK(y[b * 8 + k] == Approx(std::cos(tv[b] * fv[k])).epsilon(1e-15));
      CHECK(y[b * 8 + 4 + k] == Approx(std::sin(tv[b] * fv[k])).epsilon(1e-15));
    }
  Tensor tg = t.clone(), fg = f.clone();
  set_requires_grad(tg), set_requires_grad(fg);
  require_gradcheck([](const std::vector<Tensor>& in) { return cos_sin_embedding(in[0], in[1]); }, {tg, fg});
  CHECK_THROWS_AS(cos_sin_embedding(t, f.to(DType::f32)), DTypeError);
  CHECK_THROWS_WITH(cos_sin_embedding(unsqueeze(t, 0), f), Catch::Contains("cos_sin_embedding: t"));
}

namespace {

// p_logit as a per-element λ of x's shape, through expand (its backward sums the grad back to the 0-d parameter).
Tensor per_element(const Tensor& p_logit, const Shape& shape) {
  Shape ones(shape.size(), 1);
  return expand(reshape(p_logit, ones), shape);
}

}  // namespace

TEST_CASE("concrete_dropout: PhysicsNeMo's ConcreteDropout in training mode, given its noise, at 1e-12 (output, "
          "grad of x, grad of p_logit)", "[models][ops]") {
  const SafetensorsFile f =
      load_safetensors(std::string(SHARDRT_TEST_DATA_DIR) + "/golden/concrete_dropout.safetensors");
  Tensor x = f.get("x").clone(), p = f.get("p_logit").clone();
  set_requires_grad(x), set_requires_grad(p);
  // PhysicsNeMo clamps its draw to [1e-7, 1 - 1e-7]; the file holds the raw draw (two entries outside).
  const Tensor u = clamp(f.get("u"), kConcreteEps, 1.0 - kConcreteEps);
  const Tensor y = concrete_dropout(x, per_element(p, x.shape()), u);
  CHECK(rel_error(y, f.get("output")) <= 1e-12);
  backward({y}, {f.get("grad_output")});
  CHECK(rel_error(grad_of(x), f.get("grad_input.x")) <= 1e-12);
  REQUIRE(grad_of(p).defined());
  CHECK(rel_error(grad_of(p), f.get("grad.p_logit")) <= 1e-12);
  CHECK(std::fabs(grad_of(p).item()) > 0.1);
}

TEST_CASE("concrete_dropout: fp64 gradcheck in x and the per-element p_logit with a fixed counter-based noise; "
          "typed errors", "[models][ops]") {
  Generator gen(11);
  const Tensor u = clamp(rand({2, 3, 4}, {DType::f64}, &gen), kConcreteEps, 1.0 - kConcreteEps);
  Tensor x = rnd({2, 3, 4}, 5), lambda = add_scalar(mul_scalar(rnd({2, 3, 4}, 6), 0.5), -1.5);
  set_requires_grad(x), set_requires_grad(lambda);
  // A larger temperature than PhysicsNeMo's 0.1 keeps the mask's slope within what central differences resolve;
  // the formula is the same.
  require_gradcheck([&](const std::vector<Tensor>& in) { return concrete_dropout(in[0], in[1], u, 0.5); }, {x, lambda});
  require_gradcheck([&](const std::vector<Tensor>& in) { return concrete_dropout(in[0], in[1], u); }, {x, lambda});
  CHECK_THROWS_AS(concrete_dropout(x, lambda, u.to(DType::f32)), DTypeError);
  CHECK_THROWS_WITH(concrete_dropout(x, lambda, narrow(u, 0, 0, 1)), Catch::Contains("concrete_dropout: x"));
}

TEST_CASE("uniform_window: each rank's window of the global draw, bit for bit, on any decomposition",
          "[models][ops]") {
  const Mesh mesh = world_1d();
  const int p = mesh.size();
  Generator gen(77);
  (void)gen.next_offset(), (void)gen.next_offset();
  const Tensor whole = rand({3, 11, 2}, {DType::f64}, &gen);  // offset 2 of seed 77
  const Tensor whole32 = rand({3, 11, 2}, {DType::f32}, &gen);  // offset 3
  for (const Extents& e : {split_extents(11, p), split_around_zero(11, p)}) {
    const ShardTensor like = distribute(zeros({3, 11, 2}, {DType::f64}), mesh, {S(1)}, AxisExtents{e});
    CHECK(uniform_window(like, 77, 2).to_vector() == distribute(whole, mesh, {S(1)}, AxisExtents{e}).local().to_vector());
    const ShardTensor like32 = distribute(zeros({3, 11, 2}, {DType::f32}), mesh, {S(1)}, AxisExtents{e});
    CHECK(uniform_window(like32, 77, 3).to_vector() ==
          distribute(whole32, mesh, {S(1)}, AxisExtents{e}).local().to_vector());
  }
}

namespace {

const char* kConcreteConfig = R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3, "global_dim": 4,
    "n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4, "concrete_dropout": true,
    "dropout": 0.2, "attention_type": "@ATTN@"})";

std::unique_ptr<GeoTransolver> concrete_model(const std::string& attention, uint64_t seed) {
  std::string cfg = kConcreteConfig;
  cfg.replace(cfg.find("@ATTN@"), 6, attention);
  auto m = build_model("geotransolver", Json::parse(cfg), {DType::f64, seed});
  NoGradGuard ng;  // perturbed, so that no grad is zero for a zero weight (temperatures stay above the clamp's 0.5)
  uint64_t k = seed * 100;
  for (const auto& [key, t] : m->named_parameters()) {
    Tensor w = t;
    const bool temp = key.size() >= 11 && key.substr(key.size() - 11) == "temperature";
    if (w.numel() > 0) w.copy_(temp ? add_scalar(abs(mul_scalar(rnd(t.shape(), ++k), 0.2)), 0.55)
                                    : add(t, mul_scalar(rnd(t.shape(), ++k), 0.1)));
  }
  return std::unique_ptr<GeoTransolver>(dynamic_cast<GeoTransolver*>(m.release()));
}

std::map<std::string, ShardTensor> serial_inputs(const Mesh& serial, int64_t b) {
  const Placements rr(serial.ndim(), Placement::Replicate());
  return {{"local_embedding", from_local(rnd({b, 13, 3}, 1), serial, rr)},
          {"geometry", from_local(rnd({b, 9, 3}, 2), serial, rr)},
          {"global_embedding", from_local(rnd({b, 2, 4}, 3), serial, rr)}};
}

}  // namespace

TEST_CASE("concrete dropout in training mode: the identity in eval, fresh masks each step, p_logit clamped to "
          "±10 in place", "[models][ops]") {
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  auto m = concrete_model("GALE", 3);
  const auto in = serial_inputs(serial, 2);
  const Tensor eval1 = full_tensor(m->forward(in)[0]), eval2 = full_tensor(m->forward(in)[0]);
  CHECK(eval1.to_vector() == eval2.to_vector());
  m->train();
  CHECK(m->blocks[0]->attn_dropout->training());
  const Tensor step0 = full_tensor(m->forward(in)[0]), step1 = full_tensor(m->forward(in)[0]);
  CHECK(m->dropout_step == 2);
  CHECK(rel_error(step0, eval1) > 1e-3);  // the masks act
  CHECK(rel_error(step1, step0) > 1e-3);  // and differ between steps
  m->dropout_step = 0;
  CHECK(full_tensor(m->forward(in)[0]).to_vector() == step0.to_vector());  // keyed by the step: replayable
  {
    NoGradGuard ng;
    m->blocks[1]->ffn_dropout->p_logit.fill_(12.5);
  }
  (void)m->forward(in);
  CHECK(m->blocks[1]->ffn_dropout->p_logit.item() == 10.0);
  m->eval();  // the identity again, whatever p_logit
  CHECK(!m->blocks[0]->attn_dropout->training());
  CHECK(full_tensor(m->forward(in)[0]).to_vector() == eval1.to_vector());
}

TEST_CASE("concrete dropout in training mode, sharded against the serial fp64 oracle: the same masks on every "
          "mesh, and every parameter grad (each p_logit's) matches and is nonzero", "[models][ops]") {
  std::vector<Mesh> meshes = {world_1d(std::make_shared<CommLedger>())};
  if (world_size() == 4) meshes.push_back(Mesh(MPI_COMM_WORLD, 2, 2, own_ledger()));
  for (const std::string attention : {"GALE", "GALE_FA"})
    for (const Mesh& mesh : meshes) {
      auto model = concrete_model(attention, 4);
      model->train();
      GeoTransolver* m = model.get();
      const std::vector<std::string> names = {"local_embedding", "geometry", "global_embedding"};
      const std::vector<Shape> shapes = {{3, 13, 3}, {3, 9, 3}, {3, 2, 4}};
      ShardedCase c;
      c.name = "concrete dropout " + attention;
      for (size_t i = 0; i < names.size(); ++i) {
        c.inputs.push_back(rnd(shapes[i], 10 + i));
        c.placements.push_back(m->input_placements(names[i], shapes[i], mesh));
      }
      c.params = m->parameters();
      int p_logits = 0;
      for (const auto& [k, t] : m->named_parameters()) p_logits += k.find("p_logit") != std::string::npos;
      CHECK(p_logits == 2 + 3 * 2);
      const ShardedFn fn = [&](const std::vector<ShardTensor>& ins, const std::vector<Tensor>& w) {
        m->bind_parameters(w);
        m->dropout_step = 5;  // the same step in the serial and the sharded run: the same masks
        std::map<std::string, ShardTensor> named;
        for (size_t i = 0; i < ins.size(); ++i) named[names[i]] = ins[i];
        return m->forward(named);
      };
      INFO(attention << " on " << mesh.str());
      const ShardedCheckResult r = check_sharded(mesh, fn, c);
      INFO(r.report);
      CHECK(r.ok);
    }
}
