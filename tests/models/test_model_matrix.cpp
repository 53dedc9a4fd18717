// The model x mesh x batch matrix: every bundled model variant on the mesh of this job (1, 1x3, 2x1, 2x2 or 2x3 by
// the number of ranks), with batches smaller than, equal to and larger than the ddp size (a ddp group without a
// sample, groups of different sizes) and the points split unevenly by the models' own layout. Each case: output,
// EVERY input grad and every parameter grad against the serial fp64 run (check_sharded, 1e-10); where the case is a
// PhysicsNeMo golden (its weights, its inputs, its batch) also against PhysicsNeMo's numbers (1e-9); and on every
// rank every floating input's shard must have been reached by backward (a rank without a sample too), so the
// adjoints of the collectives that laid the inputs out run on every rank.
//
// Tiers: [fast] the batch of one sample (on a 2-group mesh: the empty ddp group), in the default run; [slow] the
// other batches, under the ctest label model_matrix. Rank 0 prints one "matrix |" line per case (docs/models.md's
// table).
#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "models/geotransolver.h"
#include "patches/domain_batch.h"
#include "tests/models/golden_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::models;
using namespace shardrt::test;

namespace {

// A model variant: a PhysicsNeMo golden (its config and weights; its inputs taken to any batch, sample i being the
// golden's sample i mod B), or a config of ShardRT's own weights (perturbed) with random inputs of the given shapes.
struct Variant {
  std::string name, golden;
  std::string model, config;                                    // without a golden
  std::vector<std::pair<std::string, Shape>> inputs;            // per-sample shapes (no batch dim), without a golden
};

const std::string kGeoSmall = R"("n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4)";

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"vit 2-D", "vit2d"},
      {"vit 3-D", "vit3d"},
      {"flare", "flare_irregular"},
      {"flare, time", "flare_time"},
      {"geotransolver GALE weighted, geometry + global", "geotransolver_gale_weighted"},
      {"geotransolver GALE concat_project", "", "geotransolver",
       R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3, "state_mixing_mode": "concat_project", )" +
           kGeoSmall + "}",
       {{"local_embedding", {23, 3}}, {"geometry", {17, 3}}}},
      {"geotransolver GALE_FA weighted, geometry + global", "", "geotransolver",
       R"({"functional_dim": 2, "out_dim": 1, "geometry_dim": 3, "global_dim": 4, "attention_type": "GALE_FA", )" +
           kGeoSmall + "}",
       {{"local_embedding", {19, 2}}, {"geometry", {13, 3}}, {"global_embedding", {2, 4}}}},
      {"geotransolver GALE_FA concat_project", "geotransolver_galefa_concat"},
      {"geotransolver local features", "geotransolver_local"},
      {"geotransolver global embedding only", "", "geotransolver",
       R"({"functional_dim": 3, "out_dim": 2, "global_dim": 5, )" + kGeoSmall + "}",
       {{"local_embedding", {29, 3}}, {"global_embedding", {3, 5}}}},
      {"geotransolver structured 2-D", "geotransolver_structured2d"},
      {"geotransolver plus, two streams", "geotransolver_two_streams"},
  };
  return v;
}

// p + 0.1 randn; a slice temperature 0.55 + |0.2 randn|, so that clamp(τ, 0.5, 5) passes its grad.
void perturb(Model& m, uint64_t seed) {
  NoGradGuard ng;
  for (const auto& [key, t] : m.named_parameters()) {
    Tensor w = t;
    const bool temp = key.size() >= 11 && key.substr(key.size() - 11) == "temperature";
    if (w.numel() > 0) w.copy_(temp ? add_scalar(abs(mul_scalar(rnd(t.shape(), ++seed), 0.2)), 0.55)
                                    : add(t, mul_scalar(rnd(t.shape(), ++seed), 0.1)));
  }
}

// One case of the matrix: the variant's model (fp64) and its inputs with `batch` samples, as a Golden (weights,
// input names in forward order, which inputs take a grad); `exact` when these are a golden's own inputs.
struct Case {
  Golden g;
  std::vector<Tensor> outputs, grad_outputs;  // the golden's, when exact
  bool exact = false;
};

Tensor take_samples(const Tensor& t, int64_t batch) {
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < batch; ++i) parts.push_back(narrow(t, 0, i % t.size(0), 1));
  return contiguous(cat(parts, 0));
}

Case make_case(const Variant& v, int64_t batch) {
  Case c;
  if (!v.golden.empty()) {
    c.g = load_golden(v.golden);
    c.exact = c.g.inputs.begin()->second.size(0) == batch;
    for (auto& [name, t] : c.g.inputs) t = take_samples(t, batch);
    if (c.exact) {
      const SafetensorsFile f = load_safetensors(golden_path(v.golden));
      for (const auto& [key, t] : f.tensors())
        if (key == "output" || key.rfind("output.", 0) == 0) {
          c.outputs.push_back(t.clone());
          c.grad_outputs.push_back(f.get("grad_" + key).clone());
        }
    }
    for (const auto& [name, t] : c.g.inputs)  // every input but the noise draws takes a grad
      if (name.rfind("gumbel_u.", 0) != 0 && !c.g.grad_inputs.count(name)) c.g.grad_inputs[name] = Tensor();
    return c;
  }
  c.g.name = v.name;
  c.g.model = v.model;
  c.g.config = Json::parse(v.config);
  auto m = build_model(v.model, c.g.config, {DType::f64, 7});
  perturb(*m, 700);
  for (const auto& [key, t] : m->state_dict()) c.g.params[key] = t.clone();
  uint64_t seed = 7000;
  for (const auto& [name, shape] : v.inputs) {
    Shape s = {batch};
    s.insert(s.end(), shape.begin(), shape.end());
    c.g.input_names.push_back(name);
    c.g.inputs[name] = rnd(s, ++seed);
    c.g.grad_inputs[name] = Tensor();
  }
  return c;
}

// The sharded run with the golden's grad_output against PhysicsNeMo's output, input grads and parameter grads
// (the same steps as shardrt-infer: each rank's input shard a leaf, backward, the batch-axis mean, the input grads
// gathered); and, for every case, that backward reached every rank's shard of every floating input. Returns the
// largest relative error against the golden (0 when the case has none).
double run_against_golden(const Mesh& mesh, Model& model, const Case& c) {
  std::map<std::string, ShardTensor> ins;
  std::map<std::string, Tensor> leaves;
  for (const std::string& name : c.g.input_names) {
    const Tensor& full = c.g.inputs.at(name);
    const Placements p = model.input_placements(name, full.shape(), mesh);
    const AxisExtents e = model.input_extents(name, full.shape(), mesh);
    const ShardTensor d = e.empty() ? distribute(full, mesh, p) : distribute(full, mesh, p, e);
    Tensor leaf = d.local().detach().clone();
    if (c.g.grad_inputs.count(name)) set_requires_grad(leaf), leaves[name] = leaf;
    ins[name] = ShardTensor(leaf, d.spec());
  }
  const std::vector<ShardTensor> out = model.forward(ins);
  std::vector<Tensor> seeds = c.grad_outputs;
  if (!c.exact) {
    seeds.clear();
    for (size_t i = 0; i < out.size(); ++i) seeds.push_back(rnd(out[i].global_shape(), 900 + i));
  }
  backward_global(out, seeds);
  reduce_batch_grads(mesh, model.parameters());
  bool reached = true;
  for (const auto& [name, leaf] : leaves) {
    INFO("input " << name << " on mesh rank " << mesh.rank() << ": its shard " << leaf.str());
    reached &= grad_of(leaf).defined();
  }
  CHECK(same_on_every_rank(reached));
  if (!c.exact) return 0;
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::fmax(worst, rel_error(full_tensor(out[i]), c.outputs[i]));
  for (const auto& [name, leaf] : leaves) {
    const Tensor g = grad_of(leaf).defined() ? grad_of(leaf) : zeros(leaf.shape(), {leaf.dtype()});
    const Tensor whole = full_tensor(ShardTensor(g, ins.at(name).spec()));
    REQUIRE(c.g.grad_inputs.count(name));
    if (c.g.grad_inputs.at(name).defined()) worst = std::fmax(worst, rel_error(whole, c.g.grad_inputs.at(name)));
  }
  double largest = 0;
  for (const auto& [name, want] : c.g.grads)
    for (double x : want.to_vector()) largest = std::fmax(largest, std::fabs(x));
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor& want = c.g.grads.at(name);
    REQUIRE(grad_of(p).defined());
    double scale = 0;
    for (double x : want.to_vector()) scale = std::fmax(scale, std::fabs(x));
    // A grad that is zero in exact arithmetic (GeoTransolver's cross_k bias) holds round-off on both sides.
    worst = std::fmax(worst, scale < 1e-12 * largest ? rel_error(grad_of(p), want) * scale / largest
                                                     : rel_error(grad_of(p), want));
  }
  return worst;
}

// The table's figure from check_sharded's report: the largest max|error| / max|serial| over the compared
// quantities, leaving out those whose serial value is round-off (below 1e-12 of the largest quantity: a grad that
// is zero in exact arithmetic, like GeoTransolver's cross_k bias, has no meaningful relative error; check_sharded
// holds it to its absolute tolerance).
double largest_relative_error(const std::string& report) {
  std::vector<std::pair<double, double>> quantities;  // (abs, scale)
  double largest = 0;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find("max abs "), r = line.find(", rel ");
    if (a == std::string::npos || r == std::string::npos) continue;
    const double abs = std::stod(line.substr(a + 8)), rel = std::stod(line.substr(r + 6));
    const double scale = rel > 0 ? abs / rel : 0;
    quantities.emplace_back(abs, scale);
    largest = std::fmax(largest, scale);
  }
  double worst = 0;
  for (const auto& [abs, scale] : quantities)
    if (scale >= 1e-12 * largest) worst = std::fmax(worst, abs / scale);
  return worst;
}

std::string fmt_sci(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1e", x);
  return b;
}

// The mesh of this job: 1, 1x3, 2x1, 2x2 or 2x3 (ddp x domain).
Mesh job_mesh() {
  switch (world_size()) {
    case 2: return Mesh(MPI_COMM_WORLD, 2, 1, own_ledger());
    case 3: return Mesh(MPI_COMM_WORLD, 1, 3, own_ledger());
    case 4: return Mesh(MPI_COMM_WORLD, 2, 2, own_ledger());
    case 6: return Mesh(MPI_COMM_WORLD, 2, 3, own_ledger());
    default: return Mesh(MPI_COMM_WORLD, 1, world_size(), own_ledger());
  }
}

void run_matrix(const std::vector<int64_t>& batches) {
  const Mesh mesh = job_mesh();
  const std::string mesh_name = std::to_string(mesh.shape()[0]) + "x" + std::to_string(mesh.shape()[1]);
  for (const Variant& v : variants())
    for (int64_t batch : batches) {
      const Case c = make_case(v, batch);
      INFO(v.name << ", batch " << batch << " on " << mesh.str());
      auto model = build_model(c.g.model, c.g.config, {DType::f64});
      model->load_state_dict(c.g.params, /*strict=*/true, v.name);
      // Batch 1 over two ddp groups of one domain rank each: one rank holds everything, the other nothing.
      const bool empty_rank = batch < mesh.shape()[0] && mesh.shape()[1] == 1;
      const ShardedCheckResult r = check_model_sharded(mesh, c.g, *model, {}, 1e-10, empty_rank);
      INFO(r.report);
      CHECK(r.ok);
      auto fresh = build_model(c.g.model, c.g.config, {DType::f64});  // check_sharded rebound the other's parameters
      fresh->load_state_dict(c.g.params, /*strict=*/true, v.name);
      const double golden = run_against_golden(mesh, *fresh, c);
      if (c.exact) CHECK(golden <= 1e-9);
      if (mesh.rank() == 0)
        std::printf("matrix | %s | %s | %lld | %.1e | %s\n", v.name.c_str(), mesh_name.c_str(),
                    static_cast<long long>(batch), largest_relative_error(r.report),
                    c.exact ? fmt_sci(golden).c_str() : "-");
    }
}

}  // namespace

TEST_CASE("model matrix: every variant with a batch of one sample (on two ddp groups one of them empty), against "
          "the serial fp64 run and PhysicsNeMo", "[matrix][fast]") {
  run_matrix({1});
}

TEST_CASE("model matrix: every variant with the batches equal to and larger than the ddp size (and 2 on one ddp "
          "group), against the serial fp64 run and PhysicsNeMo where the case is a golden", "[matrix][slow]") {
  const int ddp = job_mesh().shape()[0];
  run_matrix(ddp == 1 ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3});
}
