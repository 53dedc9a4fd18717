// The ViT (PhysicsNeMo's HybridViT): PhysicsNeMo's keys, shapes and counts; PhysicsNeMo's numbers on one rank
// (goldens, 1e-9); the same model sharded — batch over ddp, image rows over domain, uneven and zero-size row
// splits — against the serial fp64 oracle; the exact collectives of one forward and backward; bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "models/vit.h"
#include "runtime/errors.h"
#include "tests/models/golden_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::models;
using namespace shardrt::test;

namespace {

// models-spec §1.3's small example config.
Json small_config() {
  return Json{{"img_size", {32, 32}}, {"patch_size", 8}, {"in_channels", 3}, {"num_classes", 10},
              {"embed_dim", 64},      {"num_heads", 4},  {"depth", 2}};
}

Golden vit_golden(const std::string& name) {
  INFO("golden " << golden_path(name) << " (from the golden branch: tools/golden/make_goldens.py)");
  REQUIRE(std::filesystem::exists(golden_path(name)));
  return load_golden(name);
}

const std::vector<std::string> kGoldens = {"vit2d", "vit2d_headless", "vit3d"};

// Patch-row extents times the patch: `rows` patch rows over the axis as `patch_rows` says.
Extents image_rows(const Extents& patch_rows, int64_t patch) {
  Extents e = patch_rows;
  for (int64_t& x : e) x *= patch;
  return e;
}

// Patch rows split unevenly on purpose: one row moved from the last rank to the first (2 ranks: 5, 3 of 8).
Extents uneven_rows(int64_t rows, int n) {
  Extents e = split_extents(rows, n);
  if (n > 1) ++e.front(), --e.back();
  return e;
}

}  // namespace

TEST_CASE("vit: the small example config has PhysicsNeMo's 31 keys, shapes and 114,122 parameters", "[models][vit]") {
  auto m = build_model("vit", small_config(), {DType::f32});
  CHECK(m->kind() == "vit");
  const NamedTensors sd = m->state_dict();
  std::vector<std::pair<std::string, Shape>> want = {
      {"pos_embed", {1, 16, 64}},          {"patch_embed.conv.weight", {64, 3, 8, 8}},
      {"patch_embed.conv.bias", {64}},     {"patch_embed.norm.weight", {64}},
      {"patch_embed.norm.bias", {64}}};
  for (int i = 0; i < 2; ++i) {
    const std::string s = "stages." + std::to_string(i) + ".";
    for (const auto& [k, shape] : std::vector<std::pair<std::string, Shape>>{
             {"norm1.weight", {64}},        {"norm1.bias", {64}},        {"attn.qkv.weight", {192, 64}},
             {"attn.qkv.bias", {192}},      {"attn.proj.weight", {64, 64}}, {"attn.proj.bias", {64}},
             {"norm2.weight", {64}},        {"norm2.bias", {64}},        {"mlp.fc1.weight", {256, 64}},
             {"mlp.fc1.bias", {256}},       {"mlp.fc2.weight", {64, 256}}, {"mlp.fc2.bias", {64}}})
      want.push_back({s + k, shape});
  }
  want.push_back({"head.weight", {10, 64}});
  want.push_back({"head.bias", {10}});
  REQUIRE(sd.size() == 31);
  REQUIRE(want.size() == 31);
  for (size_t i = 0; i < sd.size(); ++i) {
    INFO("entry " << i);
    CHECK(sd[i].first == want[i].first);
    CHECK(sd[i].second.shape() == want[i].second);
    CHECK(sd[i].second.dtype() == DType::f32);
  }
  CHECK(m->named_parameters().size() == 31);
  CHECK(m->named_buffers().empty());
  CHECK(m->num_parameters() == 114122);
  const std::vector<std::string> names = model_names();
  CHECK(std::find(names.begin(), names.end(), "vit") != names.end());
  // num_classes 0: no head (nn.Identity); qkv_bias false: qkv without a bias. 31 - 2 - depth entries.
  Json headless = small_config();
  headless["num_classes"] = 0;
  headless["qkv_bias"] = false;
  const NamedTensors hd = build_model("vit", headless, {DType::f32})->state_dict();
  CHECK(hd.size() == 27);
  for (const auto& [k, t] : hd) CHECK((k.rfind("head.", 0) != 0 && k.find("qkv.bias") == std::string::npos));
}

TEST_CASE("vit: torch's default init, pos_embed zeros, the same weights for the same seed", "[models][vit]") {
  auto a = build_model("vit", small_config(), {DType::f64, 7});
  auto b = build_model("vit", small_config(), {DType::f64, 7});
  std::map<std::string, Tensor> pa, pb;
  for (auto& [k, t] : a->named_parameters()) pa[k] = t;
  for (auto& [k, t] : b->named_parameters()) pb[k] = t;
  auto max_abs = [](const Tensor& t) {
    double m = 0;
    for (double v : t.to_vector()) m = std::fmax(m, std::fabs(v));
    return m;
  };
  CHECK(max_abs(pa.at("pos_embed")) == 0);
  CHECK(pa.at("patch_embed.norm.weight").to_vector() == std::vector<double>(64, 1.0));
  CHECK(max_abs(pa.at("stages.1.norm2.bias")) == 0);
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for conv (fan_in 3*8*8) and linear weights and biases: inside the bound and
  // filling most of it.
  for (const auto& [key, fan_in] : std::vector<std::pair<std::string, double>>{
           {"patch_embed.conv.weight", 192}, {"patch_embed.conv.bias", 192}, {"stages.0.attn.qkv.weight", 64},
           {"stages.0.mlp.fc2.weight", 256}, {"head.bias", 64}}) {
    INFO(key);
    const double bound = 1 / std::sqrt(fan_in), m = max_abs(pa.at(key));
    CHECK(m <= bound);
    CHECK(m > 0.5 * bound);
  }
  for (auto& [k, t] : pa) CHECK_SAME_VALUES(t, pb.at(k));
}

TEST_CASE("vit: the default config's parameter counts (models-spec §1.4)", "[models][vit]") {
  // The default model is 115M parameters; instead of allocating it, count its parts from the real modules: the
  // model without blocks at one patch (8²: pos_embed holds one token), one default block, and pos_embed's E per
  // further token.
  const ViTConfig d = ViTConfig::from_json(Json::object());
  CHECK(d.img_size == std::vector<int64_t>{256, 256});
  CHECK((d.patch_size == 8 && d.in_channels == 3 && d.num_classes == 1000 && d.embed_dim == 768 &&
         d.num_heads == 6 && d.depth == 16 && d.mlp_ratio == 4.0 && d.qkv_bias));
  const TransformerBlock block(768, 6, 4.0, true, DType::f32);
  const int64_t per_block = block.num_parameters();
  CHECK(per_block == 2 * 768 + (3 * 768 * 768 + 3 * 768) + (768 * 768 + 768) + 2 * 768 + (768 * 3072 + 3072) +
                         (3072 * 768 + 768));
  auto count = [&](std::vector<int64_t> img, int64_t tokens) {
    ViTConfig c = d;
    c.depth = 0;
    c.img_size = std::vector<int64_t>(img.size(), 8);
    const HybridViT shell(c, {DType::f32});
    REQUIRE(shell.pos_embed.shape() == Shape{1, 1, 768});
    return shell.num_parameters() + 16 * per_block + (tokens - 1) * 768;
  };
  CHECK(count({256, 256}, 1024) == 115111144);
  CHECK(count({512, 512}, 4096) == 117470440);
  CHECK(count({1024, 1024}, 16384) == 126907624);
  CHECK(count({64, 64, 64}, 512) == 115750120);
  // The token count pos_embed holds comes from img_size itself.
  ViTConfig c = d;
  c.depth = 0;
  c.img_size = {64, 32, 16};
  CHECK(HybridViT(c, {DType::f32}).pos_embed.shape() == Shape{1, 8 * 4 * 2, 768});
}

TEST_CASE("vit: PhysicsNeMo's goldens on one rank, 1e-9 relative (2-D, headless, 3-D)", "[models][vit][golden]") {
  for (const std::string& name : kGoldens) {
    SECTION(name) { check_golden_serial(vit_golden(name)); }
  }
}

TEST_CASE("vit: sharded = serial on the 1-D domain mesh and the ddp x domain grids", "[models][vit][golden]") {
  for (const std::string& name : kGoldens) {
    const Golden g = vit_golden(name);
    const int64_t batch = g.inputs.at("x").size(0);
    {
      const Mesh mesh = world_1d();
      INFO(name << " on " << mesh.str());
      const ShardedCheckResult r = check_golden_sharded(mesh, g);
      INFO(r.report);
      CHECK(r.ok);
    }
    for (auto gr : grids()) {
      // A batch smaller than the ddp axis, with one domain rank, leaves one rank holding everything: no sharding.
      if (gr.second == 1 && batch < gr.first) continue;
      const Mesh mesh = grid(gr);
      INFO(name << " on " << mesh.str());
      const ShardedCheckResult r = check_golden_sharded(mesh, g);
      INFO(r.report);
      CHECK(r.ok);
    }
  }
}

TEST_CASE("vit: uneven and zero-size image-row splits (caller decompositions)", "[models][vit][golden]") {
  const int n = world_size();
  if (n == 1) return;  // one rank holds every row
  const Golden g = vit_golden("vit2d");  // 32 rows, patch 4: 8 patch rows
  const Mesh mesh = world_1d();
  std::vector<std::pair<std::string, Extents>> cases = {{"uneven", image_rows(uneven_rows(8, n), 4)}};
  if (n >= 3) cases.push_back({"zero-size shard", image_rows(split_around_zero(8, n), 4)});
  for (const auto& [what, rows] : cases) {
    INFO(what << " rows " << rows.size());
    const ShardedCheckResult r = check_golden_sharded(mesh, g, {{"x", AxisExtents{rows}}});
    INFO(r.report);
    CHECK(r.ok);
  }
}

namespace {

// The domain-axis collectives of one forward and one backward of vit2d (B 2, E 32, 4 heads of 8, depth 2, MLP 64,
// 8 x 6 patches of 4, 3 input channels; fp64) on a domain axis of `p` ranks, this rank at domain coordinate `r`
// holding `b` samples, the rows split by input_extents.
std::vector<ExpectedComm> vit2d_domain_comms(int p, int r, int64_t b) {
  const int64_t e = 32, heads = 4, hd = 8, depth = 2, m = 64, w = 6, c_in = 3, patch = 4, t = 8;
  Extents tokens = split_extents(8, p);  // whole patch rows, 6 tokens each
  for (int64_t& x : tokens) x *= w;
  const int64_t n = total(tokens);
  auto ar = [&](int64_t numel) { return all_reduce_bytes(numel, t, p); };
  auto kv = [&](int64_t keys) { return b * heads * keys * 2 * hd * t; };  // K and V travel packed
  const int64_t block_linears = (3 * e * e + 3 * e) + (e * e + e) + (m * e + m) + (e * m + e);
  // Weights meeting sharded tokens: one packed all-reduce of weight|bias grads per layer over domain (counted,
  // with no bytes, on one rank too); the mean over tokens (Partial -> Replicate); pos_embed's gathered grad (the
  // adjoint of its Replicate -> Shard slice). The head meets replicated features: nothing.
  std::vector<ExpectedComm> want = {
      {"conv.backward", "all_reduce", "domain", 1, ar(e * c_in * patch * patch + e)},
      {"layer_norm.backward", "all_reduce", "domain", 1 + 2 * depth, (1 + 2 * depth) * ar(2 * e)},
      {"linear.backward", "all_reduce", "domain", 4 * depth, depth * ar(block_linears)},
      {"redistribute", "all_reduce", "domain", 1, ar(b * e)},
      {"redistribute.backward", "all_gather_v", "domain", 1, tokens[r] * e * t * (p - 1)},
  };
  if (p > 1) {
    // Ring attention (on one rank the local op): P-1 K/V shifts forward; backward P-1 again plus P of the dK|dV
    // accumulators travelling home. A rank never sends the block of its right neighbour, which arrives last.
    const int64_t not_next = n - tokens[(r + 1) % p];
    want.push_back({"scaled_dot_product_attention.forward", "ring_shift", "domain", depth * (p - 1),
                    depth * kv(not_next)});
    want.push_back({"scaled_dot_product_attention.backward", "ring_shift", "domain", depth * (2 * p - 1),
                    depth * (kv(not_next) + kv(n))});
  }
  return want;
}

}  // namespace

TEST_CASE("vit: the exact collectives of one forward and one backward on the domain mesh", "[models][vit][ledger]") {
  const Golden g = vit_golden("vit2d");
  const Mesh& mesh = line_mesh();
  mesh.flat().ledger().reset();
  const ShardedCheckResult res = check_golden_sharded(mesh, g);
  INFO(res.report);
  CHECK(res.ok);
  check_ledger(mesh, vit2d_domain_comms(mesh.size(), mesh.rank(), 2));
}

TEST_CASE("vit: on ddp x domain, the one ddp collective is pos_embed's slice grad in the add",
          "[models][vit][ledger]") {
  if (world_size() != 4) return;  // the 2x2 mesh: one sample per ddp rank, rows over 2 domain ranks
  const Golden g = vit_golden("vit2d");
  const Mesh mesh(MPI_COMM_WORLD, 2, 2, own_ledger());
  mesh.flat().ledger().reset();
  const ShardedCheckResult res = check_golden_sharded(mesh, g);
  INFO(res.report);
  CHECK(res.ok);
  // No patch reduces a parameter grad over ddp (reduce_batch_grads does, once, called by the harness); the replicated
  // pos_embed slice (24 tokens x 32) meets batch-sharded tokens in the add, whose backward sums its grad there.
  std::vector<ExpectedComm> want = vit2d_domain_comms(2, mesh.coord("domain"), 1);
  want.push_back({"add.backward", "all_reduce", "ddp", 1, all_reduce_bytes(24 * 32, 8, 2)});
  // The harness' own average over ddp (the optimizer's step): every parameter grad in one packed buffer.
  const int64_t params = golden_model(g)->num_parameters();
  want.push_back({"reduce_batch_grads", "all_reduce", "ddp", 1, all_reduce_bytes(params, 8, 2)});
  check_ledger(mesh, want);
}

TEST_CASE("vit: bad input is a typed error naming the model and the shapes, on every rank", "[models][vit]") {
  const Golden g = vit_golden("vit2d");
  auto model = golden_model(g);
  const Mesh mesh = world_1d();
  const Tensor good = g.inputs.at("x");
  auto run = [&](const Tensor& x, const AxisExtents& extents, const std::string& name = "x") {
    const ShardTensor sx = distribute(x, mesh, model->input_placements("x", x.shape(), mesh), extents);
    return model->forward({{name, sx}});
  };
  auto rows = [&](const Tensor& x) { return model->input_extents("x", x.shape(), mesh); };
  const Tensor four_channels = rnd({2, 4, 32, 24}, 1);
  CHECK_THROWS_WITH(run(four_channels, rows(four_channels)),
                    Catch::Contains("vit") && Catch::Contains("[2, 4, 32, 24]") && Catch::Contains("in_channels 3"));
  CHECK_THROWS_AS(run(four_channels, rows(four_channels)), ShapeError);
  const Tensor wider = rnd({2, 3, 32, 28}, 2);
  CHECK_THROWS_WITH(run(wider, rows(wider)), Catch::Contains("vit") && Catch::Contains("[2, 3, 32, 28]") &&
                                                 Catch::Contains("img_size [32, 24]"));
  CHECK_THROWS_AS(run(wider, rows(wider)), ShapeError);
  const Tensor flat = rnd({2, 3, 32}, 3);
  CHECK_THROWS_AS(run(flat, rows(flat)), ShapeError);
  CHECK_THROWS_WITH(run(good, rows(good), "img"), Catch::Contains("vit") && Catch::Contains("'img'"));
  CHECK_THROWS_AS(run(good, rows(good), "img"), ValueError);
  if (mesh.size() > 1) {
    // Image rows that cut a patch: the first rank gets two rows fewer (a multiple of 4 minus 2), the next two more.
    Extents cut = rows(good)[0];
    cut[0] -= 2, cut[1] += 2;
    std::ostringstream list;
    for (size_t i = 0; i < cut.size(); ++i) list << (i ? ", " : "") << cut[i];
    CHECK_THROWS_WITH(run(good, {cut}), Catch::Contains("vit") && Catch::Contains("[2, 3, 32, 24]") &&
                                            Catch::Contains("[" + list.str() + "]") &&
                                            Catch::Contains("multiple of patch_size 4"));
    CHECK_THROWS_AS(run(good, {cut}), ShapeError);
  }
  // Config errors name the key.
  Json bad = small_config();
  bad["patch_sise"] = 8;
  CHECK_THROWS_WITH(build_model("vit", bad), Catch::Contains("patch_sise"));
  bad = small_config();
  bad["img_size"] = {32, 30};
  CHECK_THROWS_AS(build_model("vit", bad), ValueError);
  bad = small_config();
  bad["num_heads"] = 5;
  CHECK_THROWS_WITH(build_model("vit", bad), Catch::Contains("num_heads 5"));
}
