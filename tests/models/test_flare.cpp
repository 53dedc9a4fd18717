// FLARE (models/flare.h): PhysicsNeMo's state_dict names, order, shapes and counts; the goldens from PhysicsNeMo's
// own module, serially at 1e-9 and sharded against the serial fp64 oracle on every mesh (uneven points, zero-size
// shards); the exact collectives of one block; typed errors for bad inputs and configs.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "models/flare.h"
#include "runtime/errors.h"
#include "tests/models/golden_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::models;
using namespace shardrt::test;

namespace {

const char* kSmallConfig = R"({"functional_dim": 3, "out_dim": 2, "embedding_dim": 5, "n_layers": 2,
  "n_hidden": 32, "dropout": 0.0, "n_head": 4, "act": "gelu", "mlp_ratio": 1, "slice_num": 8, "use_te": false})";

Json small_config(const std::string& extra = "") {
  Json j = Json::parse(kSmallConfig);
  if (!extra.empty()) j.update(Json::parse(extra));
  return j;
}

std::vector<std::pair<std::string, Shape>> keys_and_shapes(const Module& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [k, t] : m.state_dict()) out.emplace_back(k, t.shape());
  return out;
}

// models-spec §3.3, block by block, in PhysicsNeMo's state_dict order.
std::vector<std::pair<std::string, Shape>> small_keys() {
  std::vector<std::pair<std::string, Shape>> k = {{"preprocess.layers.0.weight", {64, 8}},
                                                  {"preprocess.layers.0.bias", {64}},
                                                  {"preprocess.layers.2.weight", {32, 64}},
                                                  {"preprocess.layers.2.bias", {32}}};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const std::vector<std::pair<std::string, Shape>> block = {
        {"ln_1.weight", {32}},           {"ln_1.bias", {32}},
        {"Attn.q_global", {1, 4, 8, 8}}, {"Attn.in_project_x.weight", {32, 32}},
        {"Attn.in_project_x.bias", {32}}, {"Attn.self_k.weight", {8, 8}},
        {"Attn.self_k.bias", {8}},       {"Attn.self_v.weight", {8, 8}},
        {"Attn.self_v.bias", {8}},       {"Attn.out_linear.weight", {32, 32}},
        {"Attn.out_linear.bias", {32}},  {"ln_mlp1.0.weight", {32}},
        {"ln_mlp1.0.bias", {32}},        {"ln_mlp1.1.layers.0.weight", {32, 32}},
        {"ln_mlp1.1.layers.0.bias", {32}}, {"ln_mlp1.1.layers.2.weight", {32, 32}},
        {"ln_mlp1.1.layers.2.bias", {32}}};
    for (const auto& [name, shape] : block) k.emplace_back(b + name, shape);
  }
  for (const auto& e : std::vector<std::pair<std::string, Shape>>{{"blocks.1.ln_mlp2.0.weight", {32}},
                                                                  {"blocks.1.ln_mlp2.0.bias", {32}},
                                                                  {"blocks.1.ln_mlp2.1.weight", {2, 32}},
                                                                  {"blocks.1.ln_mlp2.1.bias", {2}}})
    k.push_back(e);
  return k;
}

double rms(const Tensor& t) {
  double s = 0;
  for (double v : t.to(DType::f64).to_vector()) s += v * v;
  return std::sqrt(s / static_cast<double>(t.numel()));
}

// Every golden case, with the dim (of fx and embedding) that the domain axis splits: points, or image rows.
const std::vector<std::string> kGoldens = {"flare_irregular", "flare_unified", "flare_structured", "flare_time"};

// Caller extents for the inputs of `g` on `mesh`: the points (rows) of fx and embedding split around a zero-size
// shard on the domain axis, the batch by the split rule on the batch axis.
std::map<std::string, AxisExtents> zero_size_extents(const Golden& g, const Mesh& mesh) {
  std::map<std::string, AxisExtents> out;
  for (const std::string& name : {std::string("fx"), std::string("embedding")}) {
    if (!g.inputs.count(name)) continue;
    const Shape& s = g.inputs.at(name).shape();
    AxisExtents e(mesh.ndim());
    for (int m = 0; m < mesh.ndim(); ++m)
      e[m] = mesh.is_batch_axis(m) ? split_extents(s[0], mesh.shape()[m]) : split_around_zero(s[1], mesh.shape()[m]);
    out[name] = e;
  }
  return out;
}

}  // namespace

TEST_CASE("flare: the small config's 42 state_dict entries in PhysicsNeMo's order, 12,290 parameters", "[models]") {
  auto m = build_model("flare", small_config(), {DType::f64, 3});
  CHECK(m->kind() == "flare");
  CHECK(keys_and_shapes(*m) == small_keys());
  CHECK(m->state_dict().size() == 42);
  CHECK(m->num_parameters() == 12290);
  // The §3.3 formula (n = 32, H = 4, S = 8, D = 8, r = 1, Cin = 8, L = 2, out = 2).
  const int64_t n = 32, h = 4, s = 8, d = 8, r = 1, cin = 8, out = 2;
  const int64_t pre = cin * 2 * n + 2 * n + 2 * n * n + n;
  const int64_t block = 2 * n + h * s * d + (n * n + n) + 2 * (d * d + d) + (n * n + n) + 2 * n + (n * r * n + r * n) +
                        (r * n * n + n);
  CHECK(m->num_parameters() == pre + 2 * block + 2 * n + n * out + out);

  // Initialisation (models-spec §3.4): trunc-normal 0.02 Linears with zero biases, LayerNorms 1/0, q_global N(0, 1).
  for (const auto& [k, t] : m->state_dict()) {
    INFO(k);
    const bool bias = k.size() > 5 && k.substr(k.size() - 5) == ".bias";
    if (k.find("q_global") != std::string::npos) CHECK(std::abs(rms(t) - 1.0) < 0.15);
    else if ((k.find("ln_") != std::string::npos && k.find("layers") == std::string::npos &&
              k.find("ln_mlp2.1") == std::string::npos) && !bias)
      CHECK(rms(t) == 1.0);  // LayerNorm weights
    else if (bias) CHECK(rms(t) == 0.0);
    else CHECK(std::abs(rms(t) - 0.02) < 0.006);
  }
}

TEST_CASE("flare: unified_pos puts the grid buffer first (16,066 parameters); time_input adds its keys after "
          "preprocess", "[models]") {
  auto u = build_model("flare", small_config(R"({"embedding_dim": null, "unified_pos": true, "ref": 8,
                                                  "structured_shape": [128, 128]})"));
  const auto sd = u->state_dict();
  REQUIRE(sd.size() == 43);
  CHECK(sd[0].first == "embedding");
  CHECK(sd[0].second.shape() == Shape{1, 16384, 64});
  CHECK(sd[1].first == "preprocess.layers.0.weight");
  CHECK(sd[1].second.shape() == Shape{64, 67});
  CHECK(u->num_parameters() == 16066);
  CHECK(u->named_buffers().size() == 1);

  auto t = build_model("flare", small_config(R"({"time_input": true})"));
  const auto ts = keys_and_shapes(*t);
  REQUIRE(ts.size() == 47);
  const std::vector<std::pair<std::string, Shape>> extras = {{"time_embed.freqs", {16}},
                                                             {"time_fc.0.weight", {32, 32}},
                                                             {"time_fc.0.bias", {32}},
                                                             {"time_fc.2.weight", {32, 32}},
                                                             {"time_fc.2.bias", {32}}};
  CHECK(std::vector<std::pair<std::string, Shape>>(ts.begin() + 4, ts.begin() + 9) == extras);
  CHECK(t->num_parameters() == 12290 + 2 * (32 * 32 + 32));
  const std::vector<ModelInput> ins = t->inputs();
  REQUIRE(ins.size() == 3);
  CHECK((ins[2].name == "time" && !ins[2].required));
}

TEST_CASE("flare: the computed buffers equal PhysicsNeMo's (unified grid, time frequencies)", "[models]") {
  const Golden u = load_golden("flare_unified");
  auto mu = build_model("flare", u.config, {DType::f64});
  CHECK(rel_error(mu->state_dict()[0].second, u.params.at("embedding")) <= 1e-15);  // fp64 formulas
  const Golden t = load_golden("flare_time");
  auto mt = build_model("flare", t.config, {DType::f64});
  for (const auto& [k, v] : mt->named_buffers())
    if (k == "time_embed.freqs") CHECK(rel_error(v, t.params.at(k)) <= 1e-15);
}

TEST_CASE("flare: golden serial against PhysicsNeMo at 1e-9 (irregular, unified_pos, structured, time)", "[models]") {
  for (const std::string& name : kGoldens) {
    INFO(name);
    check_golden_serial(load_golden(name), 1e-9);
  }
}

TEST_CASE("flare: golden sharded against the serial oracle, points over domain (batch over ddp on 2x2), uneven and "
          "zero-size shards", "[models]") {
  std::vector<Mesh> meshes = {world_1d(std::make_shared<CommLedger>())};
  if (world_size() == 4) meshes.push_back(Mesh(MPI_COMM_WORLD, 2, 2, own_ledger()));
  for (const Mesh& mesh : meshes)
    for (const std::string& name : kGoldens) {
      const Golden g = load_golden(name);
      INFO(name << " on " << mesh.str());
      const ShardedCheckResult even = check_golden_sharded(mesh, g);
      INFO(even.report);
      CHECK(even.ok);
      bool domain_three = false;
      for (int m = 0; m < mesh.ndim(); ++m) domain_three |= !mesh.is_batch_axis(m) && mesh.shape()[m] >= 3;
      if (!domain_three) continue;
      const ShardedCheckResult zero = check_golden_sharded(mesh, g, zero_size_extents(g, mesh));
      INFO("zero-size shard: " << zero.report);
      CHECK(zero.ok);
    }
}

TEST_CASE("flare: one block's exact collectives on the domain mesh (pass 1's two all-reduces forward; dq, dG|dZ and "
          "each weight's grad once backward)", "[models][ledger]") {
  const Mesh mesh = world_1d(std::make_shared<CommLedger>());
  const int p = mesh.size();
  const int64_t b = 2, n_pts = 37, n = 32, h = 4, s = 8, d = 8;
  FlareBlock block(n, h, 1, s, Activation::gelu, false, 2, DType::f64);
  Generator gen(11);
  block.init(gen);
  {
    NoGradGuard ng;  // LayerNorms away from 1/0 and biases away from 0, so every grad path is exercised
    for (const Tensor& t : block.parameters()) {
      Tensor w = t;
      w.copy_(add(t, mul_scalar(rnd(t.shape(), 5 + t.numel()), 0.05)));
    }
  }
  ShardedCase c = sharded_case("flare block", {rnd({b, n_pts, n}, 3)}, {on_line(p > 1 ? S(1) : R)});
  c.params = block.parameters();
  const ShardedFn fn = [&](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    block.bind_parameters(w);
    return std::vector<ShardTensor>{block.forward(in[0])};
  };
  std::vector<ExpectedComm> want;
  if (p > 1) {
    const int64_t bh = b * h;
    want = {
        // Pass 1 (R, S): the LSE max, then the merged [out * w, w]; pass 2 (S, R) is local.
        {"scaled_dot_product_attention.forward", "all_reduce", "domain", 2,
         all_reduce_bytes(bh * s, 8, p) + all_reduce_bytes(bh * s * (d + 1), 8, p)},
        // Pass 2's dG|dZ (packed), then pass 1's dq: q_global's two contributions, each reduced once.
        {"scaled_dot_product_attention.backward", "all_reduce", "domain", 2,
         all_reduce_bytes(2 * bh * s * d, 8, p) + all_reduce_bytes(bh * s * d, 8, p)},
        // in_project_x, self_k, self_v, out_linear, the Mlp's two: one packed weight|bias all-reduce each.
        {"linear.backward", "all_reduce", "domain", 6,
         all_reduce_bytes(4 * (n * n + n) + 2 * (d * d + d), 8, p)},
        {"layer_norm.backward", "all_reduce", "domain", 2, all_reduce_bytes(2 * 2 * n, 8, p)}};
  }
  check_patch(mesh, fn, c, want);
}

TEST_CASE("flare: bad inputs and configs are typed errors naming the model, the input and the shapes", "[models]") {
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  const Placements rr(2, Placement::Replicate());
  auto st = [&](const Shape& s) { return from_local(rnd(s, 1), serial, rr); };
  auto m = build_model("flare", small_config(), {DType::f64});
  CHECK(m->forward({{"fx", st({1, 6, 3})}, {"embedding", st({1, 6, 5})}})[0].global_shape() == Shape{1, 6, 2});
  CHECK_THROWS_AS(m->forward({{"fx", st({1, 6, 3})}}), ValueError);
  CHECK_THROWS_WITH(m->forward({{"fx", st({1, 6, 3})}}),
                    Catch::Contains("flare: the input 'embedding' (B, N, embedding_dim=5) is missing; it is required "
                                    "when unified_pos=false"));
  CHECK_THROWS_WITH(m->forward({{"fx", st({1, 6, 3})}, {"embedding", st({1, 6, 5})}, {"time", st({1})}}),
                    Catch::Contains("flare: input 'time' [1] was given, but the model was built with "
                                    "time_input=false"));
  CHECK_THROWS_AS(m->forward({{"fx", st({1, 6, 4})}, {"embedding", st({1, 6, 5})}}), ShapeError);
  CHECK_THROWS_WITH(m->forward({{"fx", st({1, 6, 4})}, {"embedding", st({1, 6, 5})}}),
                    Catch::Contains("flare: input 'fx' is [1, 6, 4] with 4 channels; the model takes "
                                    "functional_dim=3"));
  CHECK_THROWS_WITH(m->forward({{"fx", st({6, 3})}, {"embedding", st({1, 6, 5})}}),
                    Catch::Contains("flare: input 'fx' is [6, 3]; expected (B, N, 3)"));
  CHECK_THROWS_WITH(m->forward({{"fx", st({1, 6, 3})}, {"embedding", st({1, 6, 2})}}),
                    Catch::Contains("embedding_dim=5"));
  CHECK_THROWS_WITH(m->forward({{"fx", st({1, 6, 3})}, {"embedding", st({1, 7, 5})}}),
                    Catch::Contains("flare: input 'embedding' is [1, 7, 5] but 'fx' is [1, 6, 3]"));
  CHECK_THROWS_WITH(m->forward({{"fx", st({1, 6, 3})}, {"embedding", st({1, 6, 5})}, {"mesh", st({1})}}),
                    Catch::Contains("flare: unknown input 'mesh'"));

  auto sm = build_model("flare", small_config(R"({"structured_shape": [9, 8]})"), {DType::f64});
  CHECK(sm->forward({{"fx", st({2, 9, 8, 3})}, {"embedding", st({2, 9, 8, 5})}})[0].global_shape() ==
        Shape{2, 9, 8, 2});
  CHECK_THROWS_AS(sm->forward({{"fx", st({2, 9, 7, 3})}, {"embedding", st({2, 9, 7, 5})}}), ShapeError);
  CHECK_THROWS_WITH(sm->forward({{"fx", st({2, 9, 7, 3})}, {"embedding", st({2, 9, 7, 5})}}),
                    Catch::Contains("flare: input 'fx' is [2, 9, 7, 3]: its spatial shape differs from "
                                    "structured_shape [9, 8]"));

  auto um = build_model("flare", small_config(R"({"embedding_dim": null, "unified_pos": true, "ref": 2,
                                                   "structured_shape": [3, 4]})"), {DType::f64});
  CHECK_THROWS_WITH(um->forward({{"fx", st({1, 3, 4, 3})}, {"embedding", st({1, 3, 4, 5})}}),
                    Catch::Contains("unified_pos=true supplies the positional embedding"));
  CHECK_THROWS_WITH(um->forward({{"fx", st({1, 11, 3})}}), Catch::Contains("unified_pos needs the 12 points"));

  CHECK_THROWS_WITH(build_model("flare", small_config(R"({"use_te": true})")),
                    Catch::Contains("flare config: use_te=true (Transformer Engine layers"));
  CHECK_THROWS_WITH(build_model("flare", small_config(R"({"n_head": 5})")),
                    Catch::Contains("n_hidden=32 must be divisible by n_head=5"));
  CHECK_THROWS_WITH(build_model("flare", small_config(R"({"embedding_dim": null})")),
                    Catch::Contains("embedding_dim is required when unified_pos=false"));
  CHECK_THROWS_WITH(build_model("flare", small_config(R"({"unified_pos": true})")),
                    Catch::Contains("unified_pos=true needs a 2-D structured_shape"));
  CHECK_THROWS_WITH(build_model("flare", small_config(R"({"n_hiden": 8})")), Catch::Contains("unknown key 'n_hiden'"));
  CHECK_THROWS_WITH(build_model("flare", small_config(R"({"act": "swish"})")),
                    Catch::Contains("activation 'swish' is not supported"));
}

TEST_CASE("flare: the whole model's collectives on the domain mesh (flare_time): the blocks', the preprocess "
          "Linears', and time_fc's grad summed once by the broadcast add", "[models][ledger]") {
  const Mesh mesh = world_1d(std::make_shared<CommLedger>());
  const int p = mesh.size();
  const Golden g = load_golden("flare_time");
  auto model = golden_model(g);
  ShardedCase c;
  c.name = "flare_time model ledger";
  for (const std::string& name : g.input_names) {
    c.inputs.push_back(g.inputs.at(name));
    c.placements.push_back(model->input_placements(name, g.inputs.at(name).shape(), mesh));
    c.input_requires_grad.push_back(name != "time");
  }
  CHECK(c.placements[g.input_names.size() - 1] == Placements{R});  // time: replicated over domain
  c.params = model->parameters();
  models::Model* m = model.get();
  const ShardedFn fn = [&](const std::vector<ShardTensor>& ins, const std::vector<Tensor>& w) {
    m->bind_parameters(w);
    std::map<std::string, ShardTensor> named;
    for (size_t i = 0; i < ins.size(); ++i) named[g.input_names[i]] = ins[i];
    return m->forward(named);
  };
  // flare_time: B = 2, n = 16, H = 2, D = 8, S = 4, mlp_ratio 1, 2 blocks, out 1, C_in = 1 + 3.
  const int64_t b = 2, n = 16, h = 2, d = 8, s = 4, cin = 4, out = 1, bh = b * h;
  // On one rank the points are still Shard(1) (of one): the same collectives are issued, sending 0 bytes.
  const int64_t linear_numel = (cin * 2 * n + 2 * n) + (2 * n * n + n)  // preprocess
                               + 2 * (4 * (n * n + n) + 2 * (d * d + d))   // per block: 6 Linears
                               + (n * out + out);                          // ln_mlp2.1
  std::vector<ExpectedComm> want = {
      {"linear.backward", "all_reduce", "domain", 2 + 2 * 6 + 1, all_reduce_bytes(linear_numel, 8, p)},
      {"layer_norm.backward", "all_reduce", "domain", 2 * 2 + 1, all_reduce_bytes(5 * 2 * n, 8, p)},
      // The time term (B, 1, n), replicated over domain, meets the sharded points once: its grad is summed there
      // by the add, so time_fc (on replicated data) is never reduced itself.
      {"add.backward", "all_reduce", "domain", 1, all_reduce_bytes(b * n, 8, p)}};
  want.push_back({"scaled_dot_product_attention.forward", "all_reduce", "domain", 4,
                  2 * (all_reduce_bytes(bh * s, 8, p) + all_reduce_bytes(bh * s * (d + 1), 8, p))});
  want.push_back({"scaled_dot_product_attention.backward", "all_reduce", "domain", 4,
                  2 * (all_reduce_bytes(2 * bh * s * d, 8, p) + all_reduce_bytes(bh * s * d, 8, p))});
  check_patch(mesh, fn, c, want);
}
