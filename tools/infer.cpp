// shardrt-infer: runs a bundled model (ViT, FLARE, …) under mpiexec on any ddp x domain mesh, from a config of
// PhysicsNeMo constructor arguments and a checkpoint, and writes its outputs (and, given a grad_output, the grads of
// its inputs and of every parameter).
//
//   mpiexec -n 4 shardrt-infer --model flare --config c.json --weights w.safetensors --inputs in.safetensors
//       --output out.safetensors [--grad-output g.safetensors] [--mesh 1x4] [--dtype f32|f64]
//
// Every rank reads the config and the weights (small, and every rank needs all of them); rank 0 alone reads the
// inputs and the grad_output and scatters the inputs in the layout the model asks for (samples over ddp, the model's
// sharded axis over domain, uneven where it must be), so a simulation code's node-local file is enough. Outputs are
// gathered to rank 0, which writes every file. A problem found on rank 0 (a wrong input name, shape or dtype) is
// announced to every rank, so all of them stop with the same message.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "models/model.h"
#include "patches/domain_batch.h"
#include "patches/shard_tensor.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tools/mpi_session.h"

using namespace shardrt;

namespace {

struct Args {
  std::string model, config, weights, inputs, output, grad_output, mesh, dtype = "f32";
  bool list_inputs = false;
};

// "DDPxDOMAIN" (e.g. 2x2); empty: every rank on the domain axis.
std::pair<int, int> parse_mesh(const std::string& text, int world) {
  if (text.empty()) return {1, world};
  int ddp = 0, domain = 0;
  char x = 0, extra = 0;
  std::istringstream in(text);
  in >> ddp >> x >> domain;
  const bool ok = in && (x == 'x' || x == 'X') && !(in >> extra) && ddp > 0 && domain > 0;
  SHARDRT_CHECK(ok, ValueError, "shardrt-infer: --mesh '", text, "' is not DDPxDOMAIN (for example 2x2)");
  SHARDRT_CHECK(ddp * domain == world, ValueError, "shardrt-infer: --mesh ", text, " has ", ddp * domain,
                " ranks but mpiexec started ", world, "; use -n ", ddp * domain, " or another mesh");
  return {ddp, domain};
}

models::Json read_json(const std::string& path) {
  std::ifstream f(path);
  SHARDRT_CHECK(f.good(), IoError, "shardrt-infer: cannot open the config file ", path);
  try {
    return models::Json::parse(f);
  } catch (const std::exception& e) {
    throw IoError("shardrt-infer: the config file " + path + " is not valid JSON: " + e.what());
  }
}

// Runs `fn` on rank 0 only and tells every rank what it said: its result string, or its error, which every rank
// then raises with the same message (so no rank waits in a collective that rank 0 will never reach).
std::string on_root(const Mesh& mesh, const std::function<std::string()>& fn) {
  std::string text;
  int64_t failed = 0;
  if (mesh.rank() == 0) {
    try {
      text = fn();
    } catch (const std::exception& e) {
      text = e.what();
      failed = 1;
    }
  }
  Tensor header = from_vector({static_cast<double>(failed), static_cast<double>(text.size())}, {2}, {DType::i64});
  mesh.flat().broadcast(header, 0);
  const std::vector<double> h = header.to_vector();
  Tensor bytes = zeros({static_cast<int64_t>(h[1])}, {DType::u8});
  if (mesh.rank() == 0 && !text.empty()) std::copy(text.begin(), text.end(), bytes.data<uint8_t>());
  if (h[1] > 0) mesh.flat().broadcast(bytes, 0);
  const std::string agreed(reinterpret_cast<const char*>(bytes.data<uint8_t>()), static_cast<size_t>(h[1]));
  if (h[0] != 0) throw ValueError(agreed);
  return agreed;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string n; std::getline(in, n, ',');)
    if (!n.empty()) out.push_back(n);
  return out;
}

// The grad of every input that took part in the forward, whole (on every rank; rank 0 writes them): an input has
// one when its grad is defined on some rank (the noise draws of plus mode, data to the model, have none anywhere,
// as in PyTorch, where they are drawn inside). One all_reduce agrees on which; then each such grad is gathered by
// every rank alike, a rank whose shard got none (a rank without a sample, an input the model left out there)
// contributing zeros — the same collectives on every rank, whatever the graph of its own share.
std::map<std::string, Tensor> input_grads(const Mesh& mesh, const std::map<std::string, ShardTensor>& inputs,
                                          const std::map<std::string, Tensor>& leaves) {
  Tensor defined = zeros({static_cast<int64_t>(leaves.size())}, {DType::f64});
  int64_t i = 0;
  for (const auto& [name, leaf] : leaves) defined.data<double>()[i++] = grad_of(leaf).defined() ? 1.0 : 0.0;
  mesh.flat().all_reduce(defined, ReduceOp::max);
  std::map<std::string, Tensor> out;
  i = 0;
  for (const auto& [name, leaf] : leaves) {
    if (defined.data<double>()[i++] == 0) continue;
    const Tensor g = grad_of(leaf).defined() ? grad_of(leaf) : zeros(leaf.shape(), {leaf.dtype(), leaf.device()});
    out[name] = full_tensor(ShardTensor(g, inputs.at(name).spec())).detach();
  }
  return out;
}

std::string output_key(size_t i, size_t n) { return n == 1 ? "output" : "output." + std::to_string(i); }

int run(const Args& a, const tools::MpiSession& session) {
  const auto [ddp, domain] = parse_mesh(a.mesh, session.size());
  const Mesh mesh(MPI_COMM_WORLD, ddp, domain);
  const bool root = mesh.rank() == 0;
  const DType dtype = dtype_from_name(a.dtype);
  SHARDRT_CHECK(dtype == DType::f32 || dtype == DType::f64, ValueError, "shardrt-infer: --dtype must be f32 or f64, got ",
                a.dtype);
  const auto t0 = std::chrono::steady_clock::now();

  // The model, with its weights (every rank).
  auto model = models::build_model(a.model, read_json(a.config), {dtype});
  if (a.list_inputs) {
    if (root)
      for (const auto& in : model->inputs())
        std::printf("%s %s%s\n", in.name.c_str(), in.shape.c_str(), in.required ? "" : " (optional)");
    return 0;
  }
  LoadedWeights weights = load_weights(a.weights);
  const models::LoadReport report = model->load_state_dict(weights.tensors, /*strict=*/true, a.weights);
  if (root) {
    for (const std::string& note : weights.notes) std::printf("note: %s\n", note.c_str());
    for (const std::string& note : report.notes) std::printf("note: %s\n", note.c_str());
    std::printf("shardrt-infer: %s, %lld parameters, on %s\n", a.model.c_str(),
                static_cast<long long>(model->num_parameters()), mesh.str().c_str());
  }
  const bool want_grads = !a.grad_output.empty();

  // The inputs: rank 0 reads and checks them against the model's input list, then scatters each.
  std::map<std::string, Tensor> on_rank0;
  const std::vector<std::string> names = split_names(on_root(mesh, [&] {
    SafetensorsFile f = load_safetensors(a.inputs);
    std::string list;
    for (const auto& in : model->inputs()) {
      if (!f.contains(in.name)) continue;
      Tensor t = f.get(in.name);
      if (is_floating(t.dtype())) t = t.to(dtype).clone();
      on_rank0[in.name] = t;
      list += in.name + ",";
    }
    std::map<std::string, ShardTensor> probe;  // names only: the model's own check, with its message
    for (const std::string& n : f.names()) probe[n] = ShardTensor();
    models::check_input_names(*model, probe);
    return list;
  }));
  std::map<std::string, ShardTensor> inputs;
  for (const std::string& name : names) {
    const models::Model& m = *model;
    inputs[name] = scatter(root ? on_rank0.at(name) : Tensor(), 0, mesh, [&](const Shape& shape) {
      return ScatterLayout{m.input_placements(name, shape, mesh), m.input_extents(name, shape, mesh)};
    });
  }
  // With --grad-output every floating input is differentiable: each rank's shard is a leaf of its own, and its
  // grad is gathered explicitly below (input_grads), by every rank alike whatever its share of the batch.
  std::map<std::string, Tensor> leaves;
  if (want_grads)
    for (auto& [name, x] : inputs)
      if (is_floating(x.dtype())) {
        Tensor leaf = x.local().detach();
        set_requires_grad(leaf);
        leaves[name] = leaf;
        x = ShardTensor(leaf, x.spec());
      }

  // Forward; the outputs gathered (every rank takes part, rank 0 writes).
  const std::vector<ShardTensor> outs = model->forward(inputs);
  std::map<std::string, Tensor> written;
  for (size_t i = 0; i < outs.size(); ++i) written[output_key(i, outs.size())] = full_tensor(outs[i]).detach();
  // With --grad-output the file is written once, at the end, with the grads: a grad_output refused below must not
  // leave an outputs-only file behind that looks like the complete answer.
  if (root && !want_grads) save_safetensors(a.output, written);

  if (want_grads) {
    // The grad_output, checked on rank 0 against the outputs' global shapes, then broadcast whole: backward_global
    // takes the complete global grad on every rank.
    std::vector<Tensor> grads;
    on_root(mesh, [&] {
      SafetensorsFile g = load_safetensors(a.grad_output);
      for (size_t i = 0; i < outs.size(); ++i) {
        const std::string key = output_key(i, outs.size());
        const Tensor& t = g.get(key);
        SHARDRT_CHECK(t.shape() == outs[i].global_shape(), ShapeError, "shardrt-infer: ", a.grad_output, ": '", key,
                      "' is ", shape_str(t.shape()), " but the output is ", shape_str(outs[i].global_shape()));
        grads.push_back(t.to(dtype).clone());
      }
      return std::string();
    });
    if (!root)
      for (const ShardTensor& o : outs) grads.push_back(zeros(o.global_shape(), {dtype}));
    for (const Tensor& g : grads) mesh.flat().broadcast(g, 0);
    backward_global(outs, grads);
    // The patches summed every parameter's grad over the domain axes; the batch axes' mean is the optimizer's step,
    // which makes it the whole batch's grad here.
    reduce_batch_grads(mesh, model->parameters());
    const std::map<std::string, Tensor> input_grad = input_grads(mesh, inputs, leaves);
    if (root) {
      std::map<std::string, Tensor> grad_file;
      for (const auto& [name, g] : input_grad) grad_file["grad_input." + name] = g;
      for (const auto& [name, p] : model->named_parameters())
        grad_file["grad." + name] = grad_of(p).defined() ? grad_of(p) : zeros(p.shape(), {p.dtype()});
      // The outputs and the grads in one file: the grad-output run's answer is complete in --output.
      for (const auto& [k, t] : written) grad_file[k] = t;
      save_safetensors(a.output, grad_file);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (root) {
    for (const auto& [k, t] : written) std::printf("%s %s\n", k.c_str(), shape_str(t.shape()).c_str());
    std::printf("wrote %s%s in %.2f s\n", a.output.c_str(), want_grads ? " (outputs, input grads, parameter grads)" : "",
                secs);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  Args a;
  CLI::App app{"Runs a bundled model on a ddp x domain mesh from a PhysicsNeMo config and checkpoint."};
  std::string models_list;
  for (const std::string& n : models::model_names()) models_list += (models_list.empty() ? "" : ", ") + n;
  app.add_option("--model", a.model, "bundled model: " + models_list)->required();
  app.add_option("--config", a.config, "JSON of the model's PhysicsNeMo constructor arguments")->required();
  app.add_option("--weights", a.weights, "checkpoint: .safetensors, PhysicsNeMo .mdlus, or torch .pt/.pth");
  app.add_option("--inputs", a.inputs, "safetensors with one tensor per forward argument (see --list-inputs)");
  app.add_option("--output", a.output, "safetensors to write: 'output' (and the grads with --grad-output)");
  app.add_option("--grad-output", a.grad_output, "safetensors holding the grad of 'output': write every grad too");
  app.add_option("--mesh", a.mesh, "DDPxDOMAIN, e.g. 2x2 (default: every rank on the domain axis)");
  app.add_option("--dtype", a.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}));
  app.add_flag("--list-inputs", a.list_inputs, "print the model's input names and shapes for this config, and stop");
  app.footer(
      "Inputs are PhysicsNeMo's forward argument names: vit: x (B, C_in, H, W[, D]); flare: fx (B, N, C_f) or spatial, "
      "embedding, time (B,). The output file holds 'output'; with --grad-output also grad_input.<name> and "
      "grad.<parameter> for every parameter.");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  int rc = 0;
  std::string error;
  try {
    if (!a.list_inputs)
      SHARDRT_CHECK(!a.weights.empty() && !a.inputs.empty() && !a.output.empty(), ValueError,
                    "shardrt-infer: --weights, --inputs and --output are required (see --help)");
    rc = run(a, session);
  } catch (const std::exception& e) {
    error = e.what();
    rc = 2;
  }
  // Errors raised alike on every rank are printed once (by rank 0); a problem of some ranks only, by those ranks.
  int failed = error.empty() ? 0 : 1, failures = 0, worst = 0;
  MPI_Allreduce(&failed, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (failed && (failures < session.size() || session.is_root())) std::fprintf(stderr, "shardrt-infer: %s\n", error.c_str());
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
