// GeoTransolver (models/geotransolver.h): the goldens from PhysicsNeMo's own module (serially at 1e-9, with the
// Gumbel draws PhysicsNeMo made for plus mode as inputs), sharded against the serial fp64 oracle on every mesh
// with the stream points and the geometry cloud split differently (uneven, a zero-size geometry shard), local
// features included in backward; the exact collectives of a GALE block and of the context; typed errors for bad
// inputs. The state_dict keys are checked in test_geotransolver_keys.cpp.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "models/geotransolver.h"
#include "runtime/errors.h"
#include "tests/models/golden_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::models;
using namespace shardrt::test;

namespace {

// A GeoTransolver golden: the common fields, plus every output (output or output.{i}) and its grad_output. Plus
// mode's Gumbel draws are inputs (gumbel_u.<site>, the model's optional inputs), recorded from PhysicsNeMo's run.
struct GeoGolden {
  Golden g;
  std::vector<Tensor> outputs, grad_outputs;
};

const std::vector<std::string> kGoldens = {"geotransolver_gale_weighted", "geotransolver_galefa_concat",
                                           "geotransolver_structured2d", "geotransolver_local",
                                           "geotransolver_two_streams"};


GeoGolden load_geo_golden(const std::string& name) {
  GeoGolden out;
  out.g = load_golden(name);
  const SafetensorsFile f = load_safetensors(golden_path(name));
  auto get = [&](const std::string& key) -> Tensor {
    auto it = f.tensors().find(key);
    return it == f.tensors().end() ? Tensor() : it->second.clone();
  };
  if (out.g.output.defined()) {
    out.outputs = {out.g.output};
    out.grad_outputs = {out.g.grad_output};
  }
  for (int i = 0;; ++i) {
    const Tensor o = get("output." + std::to_string(i));
    if (!o.defined()) break;
    out.outputs.push_back(o);
    out.grad_outputs.push_back(get("grad_output." + std::to_string(i)));
  }
  return out;
}

std::unique_ptr<GeoTransolver> geo_model(const GeoGolden& gg) {
  auto m = golden_model(gg.g);
  auto* geo = dynamic_cast<GeoTransolver*>(m.release());
  REQUIRE(geo != nullptr);
  return std::unique_ptr<GeoTransolver>(geo);
}

// One rank: outputs, input grads and every parameter grad against PhysicsNeMo's.
void check_geo_serial(const GeoGolden& gg, double rtol) {
  auto model = geo_model(gg);
  check_model_serial(*model, gg.g, gg.outputs, gg.grad_outputs, rtol);
}

// A split of `len` over `n` ranks unlike split_extents: a third, then the rest on two ranks; a zero-size shard at
// coordinate 1 on three or more.
Extents skewed(int64_t len, int n) {
  if (n == 1) return {len};
  if (n == 2) return {len / 3, len - len / 3};
  return split_around_zero(len, n);
}

// The per-input extents of a case on `mesh`: the batch by the split rule over the batch axis; over the domain axis
// the streams (and their positions) by split_extents, the geometry `skewed` — two different uneven splits, and a
// zero-size geometry shard from 3 domain ranks on. Structured grids split in whole rows either way.
std::map<std::string, AxisExtents> two_cloud_extents(const GeoTransolver& m, const Golden& g, const Mesh& mesh,
                                                     bool zero_size_streams = false) {
  std::map<std::string, AxisExtents> out;
  const auto& sp = m.config().structured_shape;
  for (const auto& [name, full] : g.inputs) {
    // Global tokens (and the draws of their tokenizer) are replicated over the domain.
    if (name == "global_embedding" || name == "time" || name == "gumbel_u.context_builder.global_tokenizer")
      continue;
    const bool draws = name.rfind("gumbel_u.", 0) == 0;  // (B, N, H, S) of a site: split like its points
    const bool on_geometry = name == "geometry" || name.rfind("gumbel_u.context_builder.", 0) == 0;
    const Shape& s = full.shape();
    const bool spatial = !draws && s.size() > 3;
    const int64_t unit = sp && !spatial ? s[1] / (*sp)[0] : 1;  // a flattened grid row
    const int64_t len = sp && !spatial ? (*sp)[0] : s[1];
    AxisExtents e(mesh.ndim());
    for (int a = 0; a < mesh.ndim(); ++a) {
      if (mesh.is_batch_axis(a)) {
        e[a] = split_extents(s[0], mesh.shape()[a]);
        continue;
      }
      const int n = mesh.shape()[a];
      Extents x = on_geometry ? skewed(len, n) : zero_size_streams ? split_around_zero(len, n) : split_extents(len, n);
      for (int64_t& v : x) v *= unit;
      e[a] = x;
    }
    out[name] = e;
  }
  return out;
}

ShardedCheckResult check_geo_sharded(const Mesh& mesh, const GeoGolden& gg,
                                     const std::map<std::string, AxisExtents>& extents) {
  auto model = geo_model(gg);
  return check_model_sharded(mesh, gg.g, *model, extents, 1e-10);
}

}  // namespace

TEST_CASE("geotransolver: goldens serial against PhysicsNeMo at 1e-9 (GALE weighted, GALE_FA concat, structured "
          "2-D, local features, two streams with plus)", "[models]") {
  for (const std::string& name : kGoldens) {
    INFO(name);
    check_geo_serial(load_geo_golden(name), 1e-9);
  }
}

TEST_CASE("geotransolver: goldens sharded against the serial oracle, the streams and the geometry split "
          "differently (uneven, a zero-size geometry shard), on the domain mesh and ddp x domain",
          "[models]") {
  std::vector<Mesh> meshes = {world_1d(std::make_shared<CommLedger>())};
  if (world_size() == 4) meshes.push_back(Mesh(MPI_COMM_WORLD, 2, 2, own_ledger()));
  for (const Mesh& mesh : meshes)
    for (const std::string& name : kGoldens) {
      const GeoGolden gg = load_geo_golden(name);
      auto m = geo_model(gg);
      INFO(name << " on " << mesh.str());
      const ShardedCheckResult r = check_geo_sharded(mesh, gg, two_cloud_extents(*m, gg.g, mesh));
      INFO(r.report);
      CHECK(r.ok);
    }
}

namespace {

// p + 0.1 randn; a slice temperature 0.55 + |0.2 randn| instead, so that clamp(τ, 0.5, 5) passes its grad.
Tensor perturbed(const std::string& key, const Tensor& t, uint64_t seed) {
  const Tensor noise = rnd(t.shape(), seed);
  const bool temperature = key.size() >= 11 && key.substr(key.size() - 11) == "temperature";
  return temperature ? add_scalar(abs(mul_scalar(noise, 0.2)), 0.55) : add(t, mul_scalar(noise, 0.1));
}

// A case with ShardRT's own weights (perturbed, so zero-initialised parameters count) and random inputs: the
// sharded runs against the serial oracle whether or not the goldens exist yet, on configs beyond them.
GeoGolden random_case(const std::string& name, const std::string& config,
                      const std::vector<std::pair<std::string, Shape>>& inputs, uint64_t seed) {
  GeoGolden gg;
  Golden& g = gg.g;
  g.name = name;
  g.model = "geotransolver";
  g.config = Json::parse(config);
  auto m = build_model("geotransolver", g.config, {DType::f64, seed});
  {
    NoGradGuard ng;
    uint64_t k = seed * 100;
    for (const auto& [key, t] : m->state_dict()) {
      Tensor w = t;
      if (w.numel() > 0) w.copy_(perturbed(key, t, ++k));
      g.params[key] = w.clone();
    }
  }
  uint64_t k = seed * 1000;
  for (const auto& [in, shape] : inputs) {
    g.input_names.push_back(in);
    // Positions and geometry in the unit cube, so the ball queries find neighbours at the test radii.
    Tensor t = rnd(shape, ++k);
    if (in.rfind("local_positions", 0) == 0 || (in == "geometry" && g.config.value("include_local_features", false)))
      t = rand(shape, {DType::f64}, nullptr, 0.0, 1.0);
    g.inputs[in] = t;
    g.grad_inputs[in] = Tensor();  // marks the input as differentiable
  }
  return gg;
}

// The random cases: each golden's config, and what the goldens do not cover (structured 3-D, GALE_FA weighted with
// global tokens, three streams with local features, a block hidden size not divisible by the heads).
std::vector<GeoGolden> random_cases() {
  manual_seed(77);  // the inputs drawn with rand() need the same values on every rank
  const std::string small = R"("n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4)";
  return {
      random_case("gale_weighted", R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3, "global_dim": 5, )" +
                                       small + "}",
                  {{"local_embedding", {2, 23, 3}}, {"geometry", {2, 17, 3}}, {"global_embedding", {2, 3, 5}}}, 1),
      random_case("galefa_weighted_global",
                  R"({"functional_dim": 2, "out_dim": 1, "geometry_dim": 3, "global_dim": 4,
                      "attention_type": "GALE_FA", )" + small + "}",
                  {{"local_embedding", {1, 19, 2}}, {"geometry", {1, 13, 3}}, {"global_embedding", {1, 2, 4}}}, 2),
      random_case("galefa_concat", R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3,
                      "attention_type": "GALE_FA", "state_mixing_mode": "concat_project", )" + small + "}",
                  {{"local_embedding", {2, 21, 3}}, {"geometry", {2, 11, 3}}}, 3),
      random_case("structured2d", R"({"functional_dim": 3, "out_dim": 1, "geometry_dim": 3,
                      "structured_shape": [7, 4], )" + small + "}",
                  {{"local_embedding", {2, 28, 3}}, {"geometry", {2, 7, 4, 3}}}, 4),
      random_case("structured3d_concat", R"({"functional_dim": 2, "out_dim": 2, "geometry_dim": 2,
                      "structured_shape": [5, 3, 2], "state_mixing_mode": "concat_project", )" + small + "}",
                  {{"local_embedding", {1, 5, 3, 2, 2}}, {"geometry", {1, 30, 2}}}, 5),
      random_case("local_two_streams", R"({"functional_dim": [2, 3], "out_dim": [1, 2], "geometry_dim": 3,
                      "global_dim": 2, "include_local_features": true, "radii": [0.3, 0.55],
                      "neighbors_in_radius": [3, 6], "n_hidden_local": 5, "n_layers": 1, "n_hidden": 12,
                      "n_head": 3, "mlp_ratio": 1, "slice_num": 4})",
                  {{"local_embedding.0", {1, 17, 2}}, {"local_embedding.1", {1, 11, 3}},
                   {"local_positions.0", {1, 17, 3}}, {"local_positions.1", {1, 11, 3}}, {"geometry", {1, 14, 3}},
                   {"global_embedding", {1, 2, 2}}}, 6),
      random_case("plus_streams", R"({"functional_dim": [3, 2], "out_dim": [2, 1], "geometry_dim": 3,
                      "plus": true, )" + small + "}",
                  {{"local_embedding.0", {2, 13, 3}}, {"local_embedding.1", {2, 9, 2}}, {"geometry", {2, 10, 3}}}, 7),
  };
}

}  // namespace

TEST_CASE("geotransolver: own weights sharded against the serial oracle (GALE / GALE_FA, weighted / concat, "
          "structured 2-D and 3-D through the halo conv, local features in backward, streams, plus), the two "
          "clouds split differently, zero-size shards", "[models]") {
  const std::vector<GeoGolden> cases = random_cases();
  std::vector<Mesh> meshes = {world_1d(std::make_shared<CommLedger>())};
  if (world_size() == 4) meshes.push_back(Mesh(MPI_COMM_WORLD, 2, 2, own_ledger()));
  for (const Mesh& mesh : meshes)
    for (const GeoGolden& gg : cases) {
      auto m = geo_model(gg);
      for (bool zero_streams : {false, true}) {
        if (zero_streams && world_size() < 3) continue;
        INFO(gg.g.name << " on " << mesh.str() << (zero_streams ? ", a zero-size stream shard too" : ""));
        const ShardedCheckResult r = check_geo_sharded(mesh, gg, two_cloud_extents(*m, gg.g, mesh, zero_streams));
        INFO(r.report);
        CHECK(r.ok);
      }
    }
}

namespace {

GeoTransolverConfig block_config(const std::string& attention, const std::string& mixing) {
  return read_geotransolver_config(Json::parse(R"({"functional_dim": 3, "out_dim": 2, "n_layers": 1,
    "n_hidden": 32, "n_head": 4, "mlp_ratio": 1, "slice_num": 8, "attention_type": ")" + attention +
                                               R"(", "state_mixing_mode": ")" + mixing + R"("})"));
}

void perturb(const Module& m, uint64_t seed) {
  NoGradGuard ng;  // LayerNorms away from 1/0 and biases away from 0, so every grad path is exercised
  for (const auto& [key, t] : m.named_parameters()) {
    Tensor w = t;
    if (w.numel() > 0) w.copy_(perturbed(key, t, seed++ + t.numel()));
  }
}

}  // namespace

TEST_CASE("geotransolver: one GALE block's exact collectives on the domain mesh (the slice sums of both streams "
          "in ONE all-reduce forward; dM, the per-point weights and the temperature once each backward; nothing "
          "for the replicated-only weights)", "[models][ledger]") {
  const Mesh mesh = world_1d(std::make_shared<CommLedger>());
  const int p = mesh.size();
  const int64_t b = 2, n1 = 23, n2 = 17, c = 32, h = 4, s = 8, d = 8, dctx = 16;
  GaleBlock block(block_config("GALE", "weighted"), dctx, Activation::gelu, DType::f64);
  perturb(block, 21);
  // Two streams of points over domain and a replicated context (B, H, S, Dctx).
  ShardedCase sc = sharded_case("gale block", {rnd({b, n1, c}, 3), rnd({b, n2, c}, 4), rnd({b, h, s, dctx}, 5)},
                                {on_line(p > 1 ? S(1) : R), on_line(p > 1 ? S(1) : R), on_line(R)});
  sc.params = block.parameters();
  const ShardedFn fn = [&](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    block.bind_parameters(w);
    GumbelState noise;
    return block.forward({in[0], in[1]}, in[2], noise);
  };
  std::vector<ExpectedComm> want;
  if (p > 1) {
    const int64_t slice = b * h * s * (d + 1);
    const int64_t per_point_linears = 2 * (c * h * d + h * d) + (d * s + s) + (h * d * c + c) + 2 * (c * c + c);
    want = {
        // Forward: [Σ w F | Σ w] of both streams, packed: the only collective of the block.
        {"redistribute", "all_reduce", "domain", 1, all_reduce_bytes(2 * slice, 8, p)},
        // Backward: dM of each stream (the weights meet the sharded points in Σ_s w M)...
        {"matmul.backward", "all_reduce", "domain", 2, all_reduce_bytes(2 * b * h * s * d, 8, p)},
        // ... the per-point Linears (in_project_x, in_project_fx, in_project_slice, out_linear, the Mlp's two) and
        // LayerNorms once per call (a call per stream),
        {"linear.backward", "all_reduce", "domain", 2 * 6, all_reduce_bytes(2 * per_point_linears, 8, p)},
        {"layer_norm.backward", "all_reduce", "domain", 2 * 2, all_reduce_bytes(2 * 2 * 2 * c, 8, p)},
        // ... and the temperature, through z / clamp(τ).
        {"div.backward", "all_reduce", "domain", 2, all_reduce_bytes(2 * h, 8, p)}};
  }
  check_patch(mesh, fn, sc, want);
}

TEST_CASE("geotransolver: bad inputs and configs are typed errors naming the model, the input and the shapes",
          "[models]") {
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  const Placements rr(2, Placement::Replicate());
  auto st = [&](const Shape& s) { return from_local(rnd(s, 1), serial, rr); };
  const Json base = Json::parse(R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3, "global_dim": 4,
    "n_layers": 1, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4})");
  auto cfg = [&](const std::string& extra) {
    Json j = base;
    j.update(Json::parse(extra));
    return j;
  };
  auto m = build_model("geotransolver", base, {DType::f64});
  const std::map<std::string, ShardTensor> good = {
      {"local_embedding", st({1, 9, 3})}, {"geometry", st({1, 7, 3})}, {"global_embedding", st({1, 2, 4})}};
  CHECK(m->forward(good)[0].global_shape() == Shape{1, 9, 2});

  auto with = [&](const std::string& k, const ShardTensor& v) {
    auto in = good;
    in[k] = v;
    return in;
  };
  auto without = [&](const std::string& k) {
    auto in = good;
    in.erase(k);
    return in;
  };
  // time: rejected even when the model has time_fc (PhysicsNeMo raises NotImplementedError).
  auto tm = build_model("geotransolver", cfg(R"({"time_input": true})"), {DType::f64});
  CHECK_THROWS_AS(tm->forward(with("time", st({1}))), ValueError);
  CHECK_THROWS_WITH(tm->forward(with("time", st({1}))),
                    Catch::Contains("geotransolver: input 'time' [1] was given, but GeoTransolver's forward does "
                                    "not implement time"));
  CHECK_THROWS_AS(m->forward(with("local_embedding", st({1, 9, 4}))), ShapeError);
  CHECK_THROWS_WITH(m->forward(with("local_embedding", st({1, 9, 4}))),
                    Catch::Contains("geotransolver: input 'local_embedding' is [1, 9, 4] with 4 channels; the model "
                                    "takes functional_dim=3"));
  CHECK_THROWS_WITH(m->forward(with("geometry", st({1, 7, 2}))),
                    Catch::Contains("input 'geometry' is [1, 7, 2] with 2 channels; the model takes geometry_dim=3"));
  CHECK_THROWS_WITH(m->forward(with("global_embedding", st({1, 2, 5}))),
                    Catch::Contains("input 'global_embedding' is [1, 2, 5]; expected (1, N_g, 4)"));
  CHECK_THROWS_WITH(m->forward(with("geometry", st({2, 7, 3}))),
                    Catch::Contains("input 'geometry' is [2, 7, 3] but the other inputs have batch 1"));
  CHECK_THROWS_AS(m->forward(without("geometry")), ValueError);
  CHECK_THROWS_WITH(m->forward(without("geometry")),
                    Catch::Contains("geotransolver: the required input 'geometry' (B, N_geo, 3) is missing"));
  CHECK_THROWS_WITH(m->forward(with("mesh", st({1}))), Catch::Contains("geotransolver: unknown input 'mesh'"));

  // Local features need the positions of each stream, with its points.
  auto lm = build_model("geotransolver", cfg(R"({"include_local_features": true, "radii": [0.5],
                                                  "neighbors_in_radius": [2], "n_hidden_local": 4})"), {DType::f64});
  CHECK_THROWS_WITH(lm->forward(good), Catch::Contains("the required input 'local_positions' (B, N, 3) is missing"));
  CHECK_THROWS_WITH(lm->forward(with("local_positions", st({1, 8, 3}))),
                    Catch::Contains("input 'local_positions' is [1, 8, 3]; expected (B, 9, 3)"));
  CHECK(lm->forward(with("local_positions", st({1, 9, 3})))[0].global_shape() == Shape{1, 9, 2});

  // Structured: the grid's shape, spatially or flattened.
  auto sm = build_model("geotransolver", cfg(R"({"structured_shape": [3, 4]})"), {DType::f64});
  auto sgood = good;
  sgood["local_embedding"] = st({1, 3, 4, 3});
  sgood["geometry"] = st({1, 12, 3});
  CHECK(sm->forward(sgood)[0].global_shape() == Shape{1, 3, 4, 2});
  sgood["local_embedding"] = st({1, 3, 5, 3});
  CHECK_THROWS_AS(sm->forward(sgood), ShapeError);
  CHECK_THROWS_WITH(sm->forward(sgood), Catch::Contains("input 'local_embedding' is [1, 3, 5, 3]: its spatial shape "
                                                        "differs from structured_shape [3, 4]"));
  sgood["local_embedding"] = st({1, 11, 3});
  CHECK_THROWS_WITH(sm->forward(sgood), Catch::Contains("input 'local_embedding' is [1, 11, 3] with 11 points; a "
                                                        "structured model takes the 12 points"));

  // Streams: one input per functional_dim entry, named .{i}.
  auto two = build_model("geotransolver", cfg(R"({"functional_dim": [3, 2], "out_dim": [2, 1]})"), {DType::f64});
  CHECK_THROWS_WITH(two->forward(good), Catch::Contains("unknown input 'local_embedding'"));

  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"use_te": true})")),
                    Catch::Contains("use_te=true (Transformer Engine layers"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"n_head": 3})")),
                    Catch::Contains("n_hidden=16 must be divisible by n_head=3"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"out_dim": [2, 2]})")),
                    Catch::Contains("functional_dim [3] and out_dim [2, 2] must be the same length"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"attention_type": "FLARE"})")),
                    Catch::Contains("attention_type 'FLARE' is invalid"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"state_mixing_mode": "sum"})")),
                    Catch::Contains("state_mixing_mode 'sum' is invalid"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"include_local_features": true, "geometry_dim": 2})")),
                    Catch::Contains("include_local_features=true needs geometry_dim=3"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"include_local_features": true,
                                                          "structured_shape": [3, 4]})")),
                    Catch::Contains("include_local_features=true is not supported with structured_shape"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"radii": [0.1, "x"]})")),
                    Catch::Contains("key 'radii' must be a list of numbers"));
  CHECK_THROWS_WITH(build_model("geotransolver", cfg(R"({"n_hiden": 8})")), Catch::Contains("unknown key 'n_hiden'"));
}

TEST_CASE("geotransolver: the whole model's collectives on the domain mesh: the context in ONE all-reduce, one per "
          "GALE block forward; the geometry tokenizer's and the per-point weights' grads once each, the global "
          "tokenizer's and the replicated-only weights' never", "[models][ledger]") {
  const Mesh mesh = world_1d(std::make_shared<CommLedger>());
  const int p = mesh.size();
  manual_seed(5);
  const GeoGolden gg = random_case("ledger", R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3,
      "global_dim": 5, "n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4})",
                                   {{"local_embedding", {1, 23, 3}}, {"geometry", {1, 17, 3}},
                                    {"global_embedding", {1, 3, 5}}}, 9);
  auto model = geo_model(gg);
  ShardedCase c;
  c.name = "geotransolver model ledger";
  for (const std::string& name : gg.g.input_names) {
    c.inputs.push_back(gg.g.inputs.at(name));
    c.placements.push_back(model->input_placements(name, gg.g.inputs.at(name).shape(), mesh));
  }
  c.params = model->parameters();
  GeoTransolver* m = model.get();
  const ShardedFn fn = [&](const std::vector<ShardTensor>& ins, const std::vector<Tensor>& w) {
    m->bind_parameters(w);
    std::map<std::string, ShardTensor> named;
    for (size_t i = 0; i < ins.size(); ++i) named[gg.g.input_names[i]] = ins[i];
    return m->forward(named);
  };
  // B = 1, n = 16, H = 2, D = Dc = 8, S = 4, mlp_ratio 1, 2 blocks, geometry 3, global 5, out 2.
  const int64_t n = 16, h = 2, d = 8, s = 4, g = 3, out = 2, layers = 2;
  const int64_t linear_numel = (g * n + n) * 2 + (d * s + s)          // geometry tokenizer (not the global one)
                               + (3 * 2 * n + 2 * n) + (2 * n * n + n)  // preprocess
                               + layers * (2 * (n * n + n) + (d * s + s) + (n * n + n) + 2 * (n * n + n))
                               + (n * out + out);  // per block: in_project_x/fx, slice, out_linear, Mlp; the head
  const std::vector<ExpectedComm> want = {
      // The context (geometry's [Σ w F | Σ w]) and each block's slice sums: one all-reduce each.
      {"redistribute", "all_reduce", "domain", 1 + layers,
       all_reduce_bytes(h * s * (d + 1), 8, p) * (1 + layers)},
      {"matmul.backward", "all_reduce", "domain", layers, all_reduce_bytes(layers * h * s * d, 8, p)},
      {"linear.backward", "all_reduce", "domain", 3 + 2 + layers * 6 + 1, all_reduce_bytes(linear_numel, 8, p)},
      {"layer_norm.backward", "all_reduce", "domain", layers * 2 + 1, all_reduce_bytes((layers * 2 + 1) * 2 * n, 8, p)},
      // The temperatures of the geometry tokenizer and of each block (the global tokenizer's is complete).
      {"div.backward", "all_reduce", "domain", 1 + layers, all_reduce_bytes((1 + layers) * h, 8, p)}};
  // On one rank the points are still Shard(1) (of one): the same collectives are issued, sending 0 bytes.
  check_patch(mesh, fn, c, want);
}

TEST_CASE("geotransolver: a structured GALE block's convs run through the halo patch (one halo exchange per conv "
          "each way), and return_embedding_states / return_point_features add the replicated context and the "
          "sharded point features", "[models][ledger]") {
  const Mesh mesh = world_1d(std::make_shared<CommLedger>());
  const int p = mesh.size();
  manual_seed(6);
  GeoGolden gg = random_case("structured extras", R"({"functional_dim": 2, "out_dim": 1, "geometry_dim": 2,
      "structured_shape": [9, 3], "n_layers": 1, "n_hidden": 8, "n_head": 2, "mlp_ratio": 1, "slice_num": 4})",
                             {{"local_embedding", {1, 9, 3, 2}}, {"geometry", {1, 9, 3, 2}}}, 10);
  auto model = geo_model(gg);
  model->return_embedding_states = model->return_point_features = true;
  ShardedCase c;
  c.name = "structured extras";
  for (const std::string& name : gg.g.input_names) {
    c.inputs.push_back(gg.g.inputs.at(name));
    c.placements.push_back(model->input_placements(name, gg.g.inputs.at(name).shape(), mesh));
  }
  c.params = model->parameters();
  GeoTransolver* m = model.get();
  std::vector<Shape> shapes;
  std::vector<Placements> placements;
  const ShardedFn fn = [&](const std::vector<ShardTensor>& ins, const std::vector<Tensor>& w) {
    m->bind_parameters(w);
    std::map<std::string, ShardTensor> named;
    for (size_t i = 0; i < ins.size(); ++i) named[gg.g.input_names[i]] = ins[i];
    std::vector<ShardTensor> out = m->forward(named);
    shapes.clear(), placements.clear();
    for (const ShardTensor& o : out) shapes.push_back(o.global_shape()), placements.push_back(o.placements());
    return out;
  };
  mesh.flat().ledger().reset();
  const ShardedCheckResult r = check_sharded(mesh, fn, c);
  INFO(r.report);
  CHECK(r.ok);
  REQUIRE(shapes.size() == 3);
  CHECK(shapes[0] == Shape{1, 9, 3, 1});
  CHECK(shapes[1] == Shape{1, 2, 4, 4});  // the context (B, H, S, Dctx = Dc): geometry only
  CHECK(shapes[2] == Shape{1, 27, 8});    // the point features (B, N, C_eff)
  CHECK(placements[1] == Placements{R});
  CHECK(placements[2] == Placements{S(1)});
  // Four convs (the geometry tokenizer's two, the block's two), each one halo exchange forward and one back.
  int64_t forward_halos = 0, backward_halos = 0;
  for (const LedgerEntry& e : mesh.flat().ledger().entries()) {
    if (e.scope.rfind("check_sharded", 0) == 0) continue;
    if (e.kind == "halo_exchange" && e.scope.find("backward") == std::string::npos) forward_halos += e.calls;
    if (e.kind == "halo_exchange" && e.scope.find("backward") != std::string::npos) backward_halos += e.calls;
  }
  if (p > 1 && p <= 3) {  // up to 3 ranks every shard holds >= 1 of the 9 rows: the halo path
    CHECK(forward_halos == 4);
    CHECK(backward_halos == 4);
  }
}

TEST_CASE("geotransolver: concrete dropout adds p_logit keys and is the identity in eval mode", "[models]") {
  const std::string cfg = R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3, "global_dim": 4,
    "n_layers": 1, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4)";
  auto plain = build_model("geotransolver", Json::parse(cfg + "}"), {DType::f64, 3});
  auto concrete = build_model("geotransolver", Json::parse(cfg + R"(, "concrete_dropout": true, "dropout": 0.1})"),
                              {DType::f64, 3});
  std::map<std::string, Tensor> sd;
  for (const auto& [k, t] : plain->state_dict()) sd[k] = t;
  const auto report = concrete->load_state_dict(sd, /*strict=*/false);
  REQUIRE(report.missing.size() == 5);  // geometry / global output_dropout, Attn.out_dropout, attn/ffn_dropout
  for (const auto& [k, t] : concrete->state_dict())
    if (k.find("p_logit") != std::string::npos) CHECK(t.to_vector()[0] == Approx(std::log(0.1 / 0.9)));
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  const Placements rr(2, Placement::Replicate());
  auto st = [&](const Shape& s, uint64_t seed) { return from_local(rnd(s, seed), serial, rr); };
  const std::map<std::string, ShardTensor> in = {
      {"local_embedding", st({1, 9, 3}, 1)}, {"geometry", st({1, 7, 3}, 2)}, {"global_embedding", st({1, 2, 4}, 3)}};
  CHECK_SAME_VALUES(full_tensor(concrete->forward(in)[0]), full_tensor(plain->forward(in)[0]));
}

TEST_CASE("geotransolver: one GALE_FA block's exact collectives on the domain mesh (FLARE's two passes per stream, "
          "the per-token cross attention's dK|dV once backward; state_mixing meets per-point data, so its grad is "
          "reduced, cross_k/v's never)", "[models][ledger]") {
  const Mesh mesh = world_1d(std::make_shared<CommLedger>());
  const int p = mesh.size();
  const int64_t b = 2, n1 = 19, n2 = 14, c = 32, h = 4, s = 8, d = 8, dctx = 16, bh = b * h;
  GaleBlock block(block_config("GALE_FA", "weighted"), dctx, Activation::gelu, DType::f64);
  perturb(block, 41);
  ShardedCase sc = sharded_case("gale_fa block", {rnd({b, n1, c}, 6), rnd({b, n2, c}, 7), rnd({b, h, s, dctx}, 8)},
                                {on_line(S(1)), on_line(S(1)), on_line(R)});
  sc.params = block.parameters();
  const ShardedFn fn = [&](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    block.bind_parameters(w);
    GumbelState noise;
    return block.forward({in[0], in[1]}, in[2], noise);
  };
  const int64_t linears = (c * h * d + h * d) + 3 * (d * d + d) + (h * d * c + c) + 2 * (c * c + c);
  const std::vector<ExpectedComm> want = {
      // Per stream: pass 1's LSE max and merged [out | sum]; pass 2 and the cross attention are local forward.
      {"scaled_dot_product_attention.forward", "all_reduce", "domain", 2 * 2,
       2 * (all_reduce_bytes(bh * s, 8, p) + all_reduce_bytes(bh * s * (d + 1), 8, p))},
      // Per stream: pass 2's dG|dZ, the cross attention's dK|dV, pass 1's dq.
      {"scaled_dot_product_attention.backward", "all_reduce", "domain", 2 * 3,
       2 * all_reduce_bytes((2 + 2 + 1) * bh * s * d, 8, p)},
      // Per stream: in_project_x, self_k, self_v, cross_q, out_linear, the Mlp's two.
      {"linear.backward", "all_reduce", "domain", 2 * 7, all_reduce_bytes(2 * linears, 8, p)},
      {"layer_norm.backward", "all_reduce", "domain", 2 * 2, all_reduce_bytes(2 * 2 * 2 * c, 8, p)},
      // σ(state_mixing) times the per-token SA and CA.
      {"mul.backward", "all_reduce", "domain", 2 * 2, all_reduce_bytes(2 * 2, 8, p)}};
  check_patch(mesh, fn, sc, want);
}
