// In-situ training through the C API: an optimizer from a JSON document with shardrt-train's keys, one
// train_step (forward, loss, backward, step) on the code's bound fields, and sharded checkpoints of it all.
#include <cmath>
#include <cstdint>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "capi/objects.h"
#include "models/losses.h"
#include "optim/optimizer_json.h"
#include "patches/ops.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

using nlohmann::json;

// The keys a document may hold: shardrt-train's optimizer and schedule sections (docs/training.md) with its
// defaults, plus the loss, the run's length (for schedules that span it) and the micro-batches per update.
json default_optimizer_document() {
  json doc = json::parse(R"({"loss": {"kind": "mse"}, "steps": 0, "accumulation_steps": 1})");
  doc.update(optim::default_optimizer_json());  // the "optimizer" and "schedule" sections, as shardrt-train's
  return doc;
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
    SHARDRT_CHECK(optim::config_kind_matches(slot, *it), ValueError, fn, ": config key '", key, "' is ", it->dump(), " but must be ",
                  optim::config_kind_name(slot), " (like the default ", slot.dump(), ")");
    slot = *it;
  }
}

struct ParsedOptimizer {
  optim::OptimizerConfig config;
  LossKind loss = LossKind::mse;
  std::string document;  // the whole document with its defaults (the ranks agree on it)
};

ParsedOptimizer parse_optimizer(const json& given, const char* fn) {
  json doc = default_optimizer_document();
  merge_checked(doc, given, "", fn);
  ParsedOptimizer p;
  optim::OptimizerConfig& c = p.config;
  c = optim::optimizer_config_from_json(doc["optimizer"], fn);
  // Integers in the range the step loop can use (an int of micro-batches; steps as shardrt-train bounds them).
  c.accumulation_steps = static_cast<int>(optim::config_integer(doc["accumulation_steps"], fn, "accumulation_steps", 1,
                                                                INT32_MAX));
  c.schedule = optim::schedule_from_json(doc["schedule"], optim::config_integer(doc["steps"], fn, "steps", 0, INT32_MAX),
                                         fn);
  const std::string loss = doc["loss"]["kind"].get<std::string>();
  SHARDRT_CHECK(loss == "mse" || loss == "relative_l2", ValueError, fn, ": loss.kind '", loss,
                "' is not one of mse, relative_l2");
  p.loss = loss == "mse" ? LossKind::mse : LossKind::relative_l2;
  p.document = doc.dump();
  return p;
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
    auto m = open_handle(models_table(), model.id, "model", fn);
    auto o = std::make_shared<OptimizerObj>();
    ParsedOptimizer p;
    m->mesh->run(CallId::optimizer_create, fn, [&](Signature& sig) {
      if (m->has_optimizer)
        throw CapiError{SHARDRT_ERR_STATE, std::string(fn) + ": the model already has an optimizer (it owns the "
                                                             "parameters' storage); destroy none, reuse that one"};
      p = parse_optimizer(read_json_argument(config, fn, "config"), fn);
      sig.json("config", nlohmann::json::parse(p.document));  // every setting, defaults included: lr, betas, schedule, loss, ...
    }, [&] {
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
    auto o = open_handle(optimizers(), opt.id, "optimizer", fn);
    o->model->mesh->run(CallId::optimizer_step, fn, [&](Signature& sig) {
      sig.number("steps taken", o->opt->steps_taken(), SHARDRT_ERR_STATE);  // the schedule's position
    }, [&] { o->opt->step(); });
  });
}

shardrt_status shardrt_optimizer_steps(shardrt_optimizer opt, int64_t* steps) {
  const char* fn = "shardrt_optimizer_steps";
  return entry(fn, [&] {
    auto o = open_handle(optimizers(), opt.id, "optimizer", fn);
    require(steps, fn, "steps");
    *steps = o->opt->steps_taken();
  });
}

shardrt_status shardrt_train_step(shardrt_optimizer opt, shardrt_sharded target, double* loss_host) {
  const char* fn = "shardrt_train_step";
  return entry(fn, [&] {
    auto o = open_handle(optimizers(), opt.id, "optimizer", fn);
    ModelObj& m = *o->model;
    std::shared_ptr<ShardedObj> t;
    double loss_value = 0;
    m.mesh->run(CallId::train_step, fn, [&](Signature& sig) {
      t = open_handle(shardeds(), target.id, "target", fn);
      require(loss_host, fn, "loss_host");
      SHARDRT_CHECK(t->mesh == m.mesh || same_mesh(*t->mesh->mesh, *m.mesh->mesh), ValueError, fn,
                    ": the target lives on another mesh than the model");
      if (m.inputs.empty())
        throw CapiError{SHARDRT_ERR_STATE, std::string(fn) + ": no input is bound; call shardrt_model_set_input first"};
      sig.text("the bound inputs", bound_inputs(m), SHARDRT_ERR_SHAPE);
      sig.text("the target's global shape", shape_str(t->spec->global_shape()), SHARDRT_ERR_SHAPE);
      sig.number("steps taken", o->opt->steps_taken(), SHARDRT_ERR_STATE);
    }, [&] {
      const std::vector<ShardTensor> outs = run_forward(m, fn, /*record=*/true, /*input_grads=*/false);
      const ShardTensor& pred = outs.at(0);
      ShardTensor tgt(t->read(fn, m.dtype), *t->spec);
      t->check_replicated(fn, "target", tgt.local());
      SHARDRT_CHECK(tgt.global_shape() == pred.global_shape(), ShapeError, fn, ": the target is global ",
                    shape_str(tgt.global_shape()), " but the output is global ", shape_str(pred.global_shape()));
      if (tgt.spec() != pred.spec()) {
        NoGradGuard no_grad;
        tgt = redistribute(tgt, pred.spec());
      }
      const ShardTensor loss = o->loss == LossKind::mse ? mse_loss(pred, tgt) : models::per_sample_relative_l2_loss(pred, tgt);
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
    auto o = open_handle(optimizers(), opt.id, "optimizer", fn);
    o->model->mesh->run(CallId::checkpoint_save, fn, [&](Signature& sig) {
      require(dir, fn, "dir");
      sig.text("dir", dir);
      sig.number("steps taken", o->opt->steps_taken(), SHARDRT_ERR_STATE);
    }, [&] { o->opt->save(dir); });
  });
}

shardrt_status shardrt_checkpoint_load(shardrt_optimizer opt, const char* dir, int64_t* step) {
  const char* fn = "shardrt_checkpoint_load";
  return entry(fn, [&] {
    auto o = open_handle(optimizers(), opt.id, "optimizer", fn);
    o->model->mesh->run(CallId::checkpoint_load, fn, [&](Signature& sig) {
      require(dir, fn, "dir");
      sig.text("dir", dir);
    }, [&] { o->opt->load(dir); });
    if (step) *step = o->opt->steps_taken();
  });
}

}  // extern "C"
