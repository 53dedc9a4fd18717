// The Module tree: PhysicsNeMo's naming and ordering, strict loading, dtype conversion, rebinding; the config reader.
#include <catch2/catch.hpp>

#include "autograd/tape.h"
#include "models/config.h"
#include "models/layers.h"
#include "models/model.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

using namespace shardrt;
using namespace shardrt::models;

namespace {

// A root with its own parameter and buffer registered AFTER a child, to show that a module's own entries still come
// first in state_dict (PyTorch's order), then the children in registration order.
struct Toy : Module {
  Toy() : norm(4, DType::f64), mlp({4, 6, 2}, Activation::gelu, DType::f64) {
    register_module("norm", &norm);
    scale = ones({2}, {DType::f64});
    register_parameter("scale", &scale);
    grid = zeros({3}, {DType::f64});
    register_buffer("grid", &grid);
    register_module("mlp", &mlp);
  }
  LayerNorm norm;
  Mlp mlp;
  Tensor scale, grid;
};

std::vector<std::string> keys(const NamedTensors& v) {
  std::vector<std::string> out;
  for (const auto& [k, t] : v) out.push_back(k);
  return out;
}

std::map<std::string, Tensor> as_map(const NamedTensors& v) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, t] : v) out[k] = t.clone();
  return out;
}

}  // namespace

TEST_CASE("module: state_dict and named_parameters follow PyTorch's order and names", "[models]") {
  Toy toy;
  CHECK(keys(toy.state_dict()) == std::vector<std::string>{"scale", "grid", "norm.weight", "norm.bias",
                                                           "mlp.layers.0.weight", "mlp.layers.0.bias",
                                                           "mlp.layers.2.weight", "mlp.layers.2.bias"});
  CHECK(keys(toy.named_parameters()) == std::vector<std::string>{"scale", "norm.weight", "norm.bias",
                                                                 "mlp.layers.0.weight", "mlp.layers.0.bias",
                                                                 "mlp.layers.2.weight", "mlp.layers.2.bias"});
  CHECK(keys(toy.named_buffers()) == std::vector<std::string>{"grid"});
  CHECK(toy.num_parameters() == 2 + 4 + 4 + 24 + 6 + 12 + 2);
  for (const Tensor& p : toy.parameters()) CHECK(requires_grad(p));
}

TEST_CASE("module: load_state_dict copies key for key and lists every problem at once", "[models]") {
  Toy src, dst;
  Generator gen(7);
  src.mlp.init_trunc_normal(gen, 0.5);
  {
    NoGradGuard ng;
    src.grid.copy_(from_vector({1, 2, 3}, {3}, {DType::f64}));
  }
  std::map<std::string, Tensor> sd = as_map(src.state_dict());
  dst.load_state_dict(sd);
  for (const auto& [k, t] : dst.state_dict()) {
    const Tensor& want = sd.at(k);
    for (int64_t i = 0; i < t.numel(); ++i) CHECK(t.data<double>()[i] == want.data<double>()[i]);
  }

  std::map<std::string, Tensor> bad = sd;
  bad.erase("norm.bias");
  bad["mlp.layers.4.weight"] = zeros({2, 2}, {DType::f64});
  bad["scale"] = zeros({3}, {DType::f64});
  try {
    dst.load_state_dict(bad, true, "bad.safetensors");
    FAIL("no error");
  } catch (const ValueError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("bad.safetensors"));
    CHECK_THAT(m, Catch::Contains("missing 1: norm.bias"));
    CHECK_THAT(m, Catch::Contains("unexpected 1: mlp.layers.4.weight"));
    CHECK_THAT(m, Catch::Contains("scale (file [3], model [2])"));
  }
  // Not strict: key problems are reported, not thrown; nothing else changes.
  bad["scale"] = sd.at("scale");
  LoadReport r = dst.load_state_dict(bad, false);
  CHECK(r.missing == std::vector<std::string>{"norm.bias"});
  CHECK(r.unexpected == std::vector<std::string>{"mlp.layers.4.weight"});
}

TEST_CASE("module: dtype conversion on load is noted, to_dtype and bind_parameters keep leaves", "[models]") {
  Toy toy;
  std::map<std::string, Tensor> sd;
  for (const auto& [k, t] : toy.state_dict()) sd[k] = t.to(DType::f32).clone();
  LoadReport r = toy.load_state_dict(sd);
  REQUIRE(r.notes.size() == 1);
  CHECK_THAT(r.notes[0], Catch::Contains("8 tensor(s) f32 -> f64"));

  toy.to_dtype(DType::f32);
  for (const auto& [k, t] : toy.state_dict()) CHECK(t.dtype() == DType::f32);
  for (const Tensor& p : toy.parameters()) CHECK(requires_grad(p));

  std::vector<Tensor> fresh;
  for (const Tensor& p : toy.parameters()) {
    Tensor c = p.clone();
    set_requires_grad(c);
    fresh.push_back(c);
  }
  toy.bind_parameters(fresh);
  CHECK(toy.parameters()[0].data<float>() == fresh[0].data<float>());
  fresh.pop_back();
  CHECK_THROWS_AS(toy.bind_parameters(fresh), ValueError);
}

TEST_CASE("config: typed getters, None, and unknown keys named", "[models]") {
  Json j = Json::parse(R"({"n_hidden": 32, "ratio": 2.5, "unified_pos": true, "act": "gelu",
                           "structured_shape": [9, 8], "embedding_dim": null, "n_layrs": 4})");
  ConfigReader c("flare", j);
  CHECK(c.integer("n_hidden", 256) == 32);
  CHECK(c.integer("n_head", 8) == 8);
  CHECK(c.number("ratio", 4.0) == 2.5);
  CHECK(c.boolean("unified_pos", false));
  CHECK(c.string("act", "relu") == "gelu");
  CHECK(*c.optional_integers("structured_shape") == std::vector<int64_t>{9, 8});
  CHECK(!c.optional_integer("embedding_dim").has_value());
  CHECK_THROWS_WITH(c.finish(), Catch::Contains("unknown key 'n_layrs'"));

  ConfigReader t("vit", Json::parse(R"({"patch_size": "8"})"));
  CHECK_THROWS_WITH(t.integer("patch_size", 8), Catch::Contains("key 'patch_size' must be an integer, got \"8\""));
  ConfigReader m("vit", Json::object());
  CHECK_THROWS_WITH(m.integer("functional_dim"), Catch::Contains("required key 'functional_dim' is missing"));
  CHECK_THROWS_AS(ConfigReader("vit", Json::array()), ValueError);
  CHECK(args_from_mdlus(Json::parse(R"({"__name__": "FLARE", "__args__": {"out_dim": 1}})")) ==
        Json::parse(R"({"out_dim": 1})"));
}

TEST_CASE("registry: an unknown model is an error listing the bundled ones", "[models]") {
  CHECK_THROWS_WITH(build_model("resnet", Json::object()), Catch::Contains("unknown model 'resnet'"));
}
