// In-situ training through the C API: an optimizer from a JSON document with shardrt-train's keys, one
// train_step (forward, loss, backward, step) on the code's bound fields, and sharded checkpoints of it all.
#include <cmath>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "capi/objects.h"
#include "patches/ops.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

using nlohmann::json;

// The keys a document may hold: shardrt-train's optimizer and schedule sections (docs/training.md) with its
// defaults, plus the loss, the run's length (for schedules that span it) and the micro-batches per update.
json default_optimizer_document() {
  return json::parse(R"({
    "optimizer": {"algorithm": "adamw", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-4,
                  "momentum": 0.0, "nesterov": false, "muon_lr": 0.02, "mode": "replicated", "max_grad_norm": 0.0},
    "schedule": {"kind": "constant", "warmup_steps": 0, "start_factor": 0.01, "min_factor": 0.0, "step_size": 1,
                 "gamma": 0.1, "pct_start": 0.3, "div_factor": 25.0, "final_div_factor": 10000.0},
    "loss": {"kind": "mse"},
    "steps": 0,
    "accumulation_steps": 1
  })");
}

// Merges `src` into `dst`: every key must exist in `dst` with a value of its JSON kind.
void merge_checked(json& dst, const json& src, const std::string& where, const char* fn) {
  for (auto it = src.begin(); it != src.end(); ++it) {
    const std::string key = where + it.key();
    if (!dst.contains(it.key())) {
      std::string keys;
      for (auto k = dst.begin(); k != dst.end(); ++k) keys += (keys.empty() ? "" : ", ") + k.key();
      throw ValueError(std::string(fn) + ": unknown config key '" + key + "'; the keys there are: " + keys);
    }
    json& slot = dst[it.key()];
    if (slot.is_object()) {
      SHARDRT_CHECK(it->is_object(), ValueError, fn, ": config key '", key, "' must be an object, got ", it->dump());
      merge_checked(slot, *it, key + ".", fn);
      continue;
    }
    const bool same = slot.is_number() ? it->is_number() : slot.type() == it->type();
    SHARDRT_CHECK(same, ValueError, fn, ": config key '", key, "' is ", it->dump(), " but must be a ",
                  slot.type_name(), " (like the default ", slot.dump(), ")");
    slot = *it;
  }
}

std::shared_ptr<optim::Schedule> make_schedule(const json& s, int64_t total, const char* fn) {
  const std::string kind = s["kind"].get<std::string>();
  if (kind == "constant") return optim::constant_schedule();
  if (kind == "step") return optim::step_schedule(s["step_size"].get<int64_t>(), s["gamma"].get<double>());
  SHARDRT_CHECK(kind == "warmup_cosine" || kind == "one_cycle", ValueError, fn, ": schedule.kind '", kind,
                "' is not one of constant, warmup_cosine, step, one_cycle");
  SHARDRT_CHECK(total > 0, ValueError, fn, ": schedule ", kind, " spans the run: set \"steps\" to its length");
  if (kind == "warmup_cosine")
    return optim::warmup_cosine_schedule(s["warmup_steps"].get<int64_t>(), total, s["start_factor"].get<double>(),
                                         s["min_factor"].get<double>());
  return optim::one_cycle_schedule(total, s["pct_start"].get<double>(), s["div_factor"].get<double>(),
                                   s["final_div_factor"].get<double>());
}

struct ParsedOptimizer {
  optim::OptimizerConfig config;
  LossKind loss = LossKind::mse;
};

ParsedOptimizer parse_optimizer(const json& given, const char* fn) {
  json doc = default_optimizer_document();
  merge_checked(doc, given, "", fn);
  ParsedOptimizer p;
  optim::OptimizerConfig& c = p.config;
  const json& o = doc["optimizer"];
  c.algorithm = optim::parse_algorithm(o["algorithm"].get<std::string>());
  SHARDRT_CHECK(o["betas"].is_array() && o["betas"].size() == 2, ValueError, fn,
                ": optimizer.betas must be [beta1, beta2], got ", o["betas"].dump());
  const double lr = o["lr"].get<double>();
  c.adamw.lr = lr;
  c.adamw.beta1 = o["betas"][0].get<double>();
  c.adamw.beta2 = o["betas"][1].get<double>();
  c.adamw.eps = o["eps"].get<double>();
  c.adamw.weight_decay = o["weight_decay"].get<double>();
  c.sgd.lr = lr;
  c.sgd.momentum = o["momentum"].get<double>();
  c.sgd.nesterov = o["nesterov"].get<bool>();
  c.sgd.weight_decay = o["weight_decay"].get<double>();
  c.muon.lr = o["muon_lr"].get<double>();
  c.mode = optim::parse_sharding_mode(o["mode"].get<std::string>());
  c.max_grad_norm = o["max_grad_norm"].get<double>();
  const int64_t acc = doc["accumulation_steps"].get<int64_t>();
  SHARDRT_CHECK(acc >= 1, ValueError, fn, ": accumulation_steps ", acc, " must be >= 1");
  c.accumulation_steps = static_cast<int>(acc);
  c.schedule = make_schedule(doc["schedule"], doc["steps"].get<int64_t>(), fn);
  const std::string loss = doc["loss"]["kind"].get<std::string>();
  SHARDRT_CHECK(loss == "mse" || loss == "relative_l2", ValueError, fn, ": loss.kind '", loss,
                "' is not one of mse, relative_l2");
  p.loss = loss == "mse" ? LossKind::mse : LossKind::relative_l2;
  return p;
}

// Per sample: the sum over every point (dims 1..), completed over the domain axis, so the result is (B,) placed
// like the samples.
ShardTensor per_sample_sum(const ShardTensor& x) {
  std::vector<int> dims;
  for (int i = 1; i < x.dim(); ++i) dims.push_back(i);
  const ShardTensor partial = sum(x, dims);
  Placements whole = partial.placements();
  for (Placement& q : whole)
    if (q.is_partial()) q = Placement::Replicate();
  return redistribute(partial, whole);
}

// mean over the global batch of ||p_b - t_b|| / ||t_b|| (shardrt-train's relative_l2, PhysicsNeMo's LpLoss). The
// batch mean goes through mse_loss(sqrt(s_b), 0), the loss patch that owns the ddp scaling of the grads.
ShardTensor relative_l2(const ShardTensor& pred, const ShardTensor& target) {
  const ShardTensor d = sub(pred, target);
  ShardTensor den;
  {
    NoGradGuard no_grad;
    den = per_sample_sum(mul(target, target));
  }
  const ShardTensor per_sample = sqrt(div(per_sample_sum(mul(d, d)), den));
  ShardTensor zero;
  {
    NoGradGuard no_grad;
    zero = mul_scalar(per_sample, 0.0);
  }
  return mse_loss(sqrt(per_sample), zero);
}

}  // namespace

}  // namespace shardrt::capi

using namespace shardrt;
using namespace shardrt::capi;

extern "C" {

shardrt_status shardrt_optimizer_create(shardrt_optimizer* out, shardrt_model model, const char* config) {
  const char* fn = "shardrt_optimizer_create";
  return entry(fn, [&] {
    require(out, fn, "out");
    out->id = 0;
    auto m = models_table().get(model.id, "model");
    auto o = std::make_shared<OptimizerObj>();
    collective(m->mesh->agree_comm, m->mesh->ctx->agree_errors(), fn, [&] {
      if (m->has_optimizer)
        throw CapiError{SHARDRT_ERR_STATE, std::string(fn) + ": the model already has an optimizer (it owns the "
                                                             "parameters' storage); destroy none, reuse that one"};
      const ParsedOptimizer p = parse_optimizer(read_json_argument(config, fn, "config"), fn);
      o->model = m;
      o->loss = p.loss;
      o->opt = std::make_unique<optim::Optimizer>(*m->mesh->mesh, *m->model, p.config);
      m->has_optimizer = true;
    });
    out->id = optimizers().add(std::move(o));
  });
}

shardrt_status shardrt_optimizer_destroy(shardrt_optimizer opt) {
  return entry("shardrt_optimizer_destroy", [&] { optimizers().remove(opt.id, "optimizer"); });
}

shardrt_status shardrt_optimizer_step(shardrt_optimizer opt) {
  const char* fn = "shardrt_optimizer_step";
  return entry(fn, [&] {
    auto o = optimizers().get(opt.id, "optimizer");
    collective(o->model->mesh->agree_comm, o->model->mesh->ctx->agree_errors(), fn, [&] { o->opt->step(); });
  });
}

shardrt_status shardrt_optimizer_steps(shardrt_optimizer opt, int64_t* steps) {
  const char* fn = "shardrt_optimizer_steps";
  return entry(fn, [&] {
    auto o = optimizers().get(opt.id, "optimizer");
    require(steps, fn, "steps");
    *steps = o->opt->steps_taken();
  });
}

shardrt_status shardrt_train_step(shardrt_optimizer opt, shardrt_sharded target, double* loss_host) {
  const char* fn = "shardrt_train_step";
  return entry(fn, [&] {
    auto o = optimizers().get(opt.id, "optimizer");
    auto t = shardeds().get(target.id, "target");
    ModelObj& m = *o->model;
    double loss_value = 0;
    collective(m.mesh->agree_comm, m.mesh->ctx->agree_errors(), fn, [&] {
      require(loss_host, fn, "loss_host");
      SHARDRT_CHECK(t->mesh == m.mesh || same_mesh(*t->mesh->mesh, *m.mesh->mesh), ValueError, fn,
                    ": the target lives on another mesh than the model");
      const std::vector<ShardTensor> outs = run_forward(m, fn, /*record=*/true, /*input_grads=*/false);
      const ShardTensor& pred = outs.at(0);
      ShardTensor tgt(t->read(fn, m.dtype), *t->spec);
      SHARDRT_CHECK(tgt.global_shape() == pred.global_shape(), ShapeError, fn, ": the target is global ",
                    shape_str(tgt.global_shape()), " but the output is global ", shape_str(pred.global_shape()));
      if (tgt.spec() != pred.spec()) {
        NoGradGuard no_grad;
        tgt = redistribute(tgt, pred.spec());
      }
      const ShardTensor loss = o->loss == LossKind::mse ? mse_loss(pred, tgt) : relative_l2(pred, tgt);
      backward(loss.local());
      loss_value = loss.local().item();  // Replicate: the same on every rank
      o->opt->step();
      m.backward_done = true;
    });
    *loss_host = loss_value;
  });
}

shardrt_status shardrt_checkpoint_save(shardrt_optimizer opt, const char* dir) {
  const char* fn = "shardrt_checkpoint_save";
  return entry(fn, [&] {
    auto o = optimizers().get(opt.id, "optimizer");
    collective(o->model->mesh->agree_comm, o->model->mesh->ctx->agree_errors(), fn, [&] {
      require(dir, fn, "dir");
      o->opt->save(dir);
    });
  });
}

shardrt_status shardrt_checkpoint_load(shardrt_optimizer opt, const char* dir, int64_t* step) {
  const char* fn = "shardrt_checkpoint_load";
  return entry(fn, [&] {
    auto o = optimizers().get(opt.id, "optimizer");
    collective(o->model->mesh->agree_comm, o->model->mesh->ctx->agree_errors(), fn, [&] {
      require(dir, fn, "dir");
      o->opt->load(dir);
    });
    if (step) *step = o->opt->steps_taken();
  });
}

}  // extern "C"
