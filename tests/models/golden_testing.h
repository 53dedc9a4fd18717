// Goldens from PhysicsNeMo's own modules (tests/data/golden, made by tools/golden/make_goldens.py) and the two checks
// every bundled model runs against them:
//   check_golden_serial  — the model on one rank, fp64, against PhysicsNeMo's output, input grads and every
//                          parameter grad (relative error: max |error| / max |golden|);
//   check_golden_sharded — the model on a mesh against the serial fp64 oracle (check_sharded: outputs, input grads,
//                          every parameter grad after the batch-axis mean), inputs laid out by the model's own
//                          input_placements or by caller-given extents (uneven, zero-size shards).
#pragma once
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "models/model.h"
#include "patches/check_sharded.h"
#include "patches/ops.h"
#include "runtime/safetensors.h"

namespace shardrt::test {

struct Golden {
  std::string name, model;
  models::Json config;
  std::vector<std::string> input_names;      // forward order
  std::map<std::string, Tensor> params;      // the state dict (parameters and buffers)
  std::map<std::string, Tensor> inputs;      // by forward argument name
  std::map<std::string, Tensor> grad_inputs;  // every input but plus mode's noise draws
  std::map<std::string, Tensor> grads;       // by parameter name
  Tensor output, grad_output;
};

inline std::string golden_path(const std::string& name) {
  return std::string(SHARDRT_TEST_DATA_DIR) + "/golden/" + name + ".safetensors";
}

inline Golden load_golden(const std::string& name) {
  SafetensorsFile f = load_safetensors(golden_path(name));
  Golden g;
  g.name = name;
  g.model = f.metadata().at("model");
  g.config = models::Json::parse(f.metadata().at("config"));
  std::stringstream names(f.metadata().at("inputs"));
  for (std::string s; std::getline(names, s, ',');) g.input_names.push_back(s);
  auto take = [](const std::string& key, const std::string& prefix, std::string& rest) {
    if (key.rfind(prefix, 0) != 0) return false;
    rest = key.substr(prefix.size());
    return true;
  };
  for (const auto& [key, t] : f.tensors()) {
    std::string rest;
    if (take(key, "param.", rest)) g.params[rest] = t.clone();
    else if (take(key, "input.", rest)) g.inputs[rest] = t.clone();
    else if (take(key, "grad_input.", rest)) g.grad_inputs[rest] = t.clone();
    else if (take(key, "grad.", rest)) g.grads[rest] = t.clone();
    else if (key == "output") g.output = t.clone();
    else if (key == "grad_output") g.grad_output = t.clone();
  }
  return g;
}

// The model of `g`, fp64, holding PhysicsNeMo's (perturbed) weights, loaded strictly.
inline std::unique_ptr<models::Model> golden_model(const Golden& g) {
  auto m = models::build_model(g.model, g.config, {DType::f64});
  m->load_state_dict(g.params, /*strict=*/true, golden_path(g.name));
  return m;
}

inline double rel_error(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> a = got.to(DType::f64).to_vector(), b = want.to_vector();
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::fmax(err, std::fabs(a[i] - b[i]));
    scale = std::fmax(scale, std::fabs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

// One rank, its own one-rank ddp x domain mesh: `model` (built from golden `g`) forward, backward with the golden
// grad_outputs, compared with PhysicsNeMo's outputs and grads. Every grad the golden has must also be defined here
// (the comparison is not vacuous). A parameter grad that is zero in exact arithmetic (GeoTransolver's cross_k bias:
// the softmax cancels it) holds only round-off on both sides; one below 1e-12 of the largest grad is compared
// absolutely, at that round-off.
inline void check_model_serial(models::Model& model, const Golden& g, const std::vector<Tensor>& outputs,
                               const std::vector<Tensor>& grad_outputs, double rtol) {
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  std::map<std::string, ShardTensor> ins;
  std::map<std::string, Tensor> leaves;
  for (const auto& [name, full] : g.inputs) {
    Tensor leaf = full.clone();
    if (g.grad_inputs.count(name)) set_requires_grad(leaf);
    leaves[name] = leaf;
    ins[name] = from_local(leaf, serial, Placements(serial.ndim(), Placement::Replicate()));
  }
  const std::vector<ShardTensor> out = model.forward(ins);
  REQUIRE(out.size() == outputs.size());
  for (size_t i = 0; i < out.size(); ++i) {
    INFO(g.name << ": output " << i);
    CHECK(rel_error(full_tensor(out[i]), outputs[i]) <= rtol);
  }
  backward_global(out, grad_outputs);
  for (const auto& [name, want] : g.grad_inputs) {
    INFO(g.name << ": grad of input " << name);
    REQUIRE(grad_of(leaves.at(name)).defined());
    CHECK(rel_error(grad_of(leaves.at(name)), want) <= rtol);
  }
  const auto params = model.named_parameters();
  CHECK(params.size() == g.grads.size());
  double largest = 0;
  for (const auto& [name, want] : g.grads)
    for (double v : want.to_vector()) largest = std::fmax(largest, std::fabs(v));
  for (const auto& [name, p] : params) {
    INFO(g.name << ": grad of parameter " << name);
    REQUIRE(g.grads.count(name));
    REQUIRE(grad_of(p).defined());
    const Tensor& want = g.grads.at(name);
    double scale = 0;
    for (double v : want.to_vector()) scale = std::fmax(scale, std::fabs(v));
    if (scale < 1e-12 * largest) CHECK(rel_error(grad_of(p), want) * scale <= 1e-12 * largest);
    else CHECK(rel_error(grad_of(p), want) <= rtol);
  }
}

// The same for the model golden_model(g) builds and the golden's one output.
inline void check_golden_serial(const Golden& g, double rtol = 1e-9) {
  auto model = golden_model(g);
  check_model_serial(*model, g, {g.output}, {g.grad_output}, rtol);
}

// A model built from golden `g` (by golden_model, or by the caller with output flags or a noise source set) on
// `mesh` against the serial fp64 oracle, every input laid out by model.input_placements and input_extents (or
// with `extents[name]`, one vector per mesh axis, for caller decompositions). Returns check_sharded's verdict.
inline ShardedCheckResult check_model_sharded(const Mesh& mesh, const Golden& g, models::Model& model,
                                              const std::map<std::string, AxisExtents>& extents = {},
                                              double tol = 1e-10, bool empty_rank_case = false) {
  models::Model* m = &model;
  ShardedCase c;
  c.name = g.name;
  c.empty_rank_case = empty_rank_case;
  for (const std::string& name : g.input_names) {
    const Tensor& full = g.inputs.at(name);
    c.inputs.push_back(full);
    c.placements.push_back(m->input_placements(name, full.shape(), mesh));
    auto e = extents.find(name);
    c.extents.push_back(e == extents.end() ? m->input_extents(name, full.shape(), mesh) : e->second);
    c.input_requires_grad.push_back(g.grad_inputs.count(name) != 0);
  }
  c.params = m->parameters();
  c.atol = tol;
  c.rtol = tol;
  ShardedFn fn = [&](const std::vector<ShardTensor>& ins, const std::vector<Tensor>& params) {
    m->bind_parameters(params);
    std::map<std::string, ShardTensor> named;
    for (size_t i = 0; i < ins.size(); ++i) named[g.input_names[i]] = ins[i];
    return m->forward(named);
  };
  return check_sharded(mesh, fn, c);
}

// The same for the model golden_model(g) builds.
inline ShardedCheckResult check_golden_sharded(const Mesh& mesh, const Golden& g,
                                               const std::map<std::string, AxisExtents>& extents = {},
                                               double tol = 1e-10) {
  auto model = golden_model(g);
  return check_model_sharded(mesh, g, *model, extents, tol);
}

}  // namespace shardrt::test
