// Models: a bundled model built from its PhysicsNeMo config (and weights) on a mesh, run on the code's own sharded
// fields (forward, backward with a given grad_output, input grads), and exported in PhysicsNeMo's formats.
#include "autograd/engine.h"
#include "autograd/tape.h"
#include "capi/objects.h"
#include "optim/checkpoint.h"
#include "runtime/errors.h"
#include "runtime/weights.h"

namespace shardrt::capi {

namespace {

CapiError state_error(const char* fn, const std::string& what) { return {SHARDRT_ERR_STATE, std::string(fn) + ": " + what}; }

void check_same_mesh(const ModelObj& m, const ShardedObj& s, const char* fn, const char* what) {
  SHARDRT_CHECK(s.mesh == m.mesh || same_mesh(*s.mesh->mesh, *m.mesh->mesh), ValueError, fn, ": ", what,
                " lives on another mesh than the model (", s.mesh->mesh->str(), " vs ", m.mesh->mesh->str(),
                "); create it with the model's mesh handle");
}

// `t` laid out as `target` says (same global shape required): itself when it already is, else redistributed
// (collective, outside the tape).
ShardTensor laid_out_as(const ShardTensor& t, const ShardSpec& target, const char* fn, const char* what) {
  SHARDRT_CHECK(t.global_shape() == target.global_shape(), ShapeError, fn, ": ", what, " is global ",
                shape_str(target.global_shape()), " but the model's output is global ", shape_str(t.global_shape()));
  if (t.spec() == target) return t;
  NoGradGuard no_grad;
  return redistribute(t, target);
}

// PhysicsNeMo's class of each bundled model, for the args.json of an .mdlus written from a model that was not
// itself loaded from one.
std::optional<std::pair<std::string, std::string>> physicsnemo_class(const std::string& kind) {
  if (kind == "flare") return std::make_pair(std::string("FLARE"), std::string("physicsnemo.models.flare.flare"));
  if (kind == "geotransolver")
    return std::make_pair(std::string("GeoTransolver"), std::string("physicsnemo.models.geotransolver.geotransolver"));
  return std::nullopt;
}

// The tensor of `tensors` keyed `name`; ValueError naming a few of the keys otherwise.
Tensor named_tensor(const models::NamedTensors& tensors, const std::string& name, const ModelObj& m, const char* fn) {
  std::string some;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].first == name) return tensors[i].second;
    if (i < 4) some += (i ? ", " : "") + tensors[i].first;
  }
  throw ValueError(detail::concat(fn, ": ", m.kind, " has no parameter '", name, "' (its ", tensors.size(),
                                  " keys are PhysicsNeMo's state_dict keys: ", some, ", ...)"));
}

// `value` (a parameter or its grad) into the caller's tensor `dst` of the same shape.
void copy_named(TensorObj& dst, const Tensor& value, const char* fn, const std::string& name) {
  SHARDRT_CHECK(dst.view.shape() == value.shape(), ShapeError, fn, ": '", name, "' is ", shape_str(value.shape()),
                " but dst is ", dst.view.str());
  SHARDRT_CHECK(is_floating(dst.view.dtype()), DTypeError, fn, ": dst ", dst.view.str(), " is not floating");
  if (dst.view.dtype() != value.dtype())
    dst.note_copy(fn, std::string("converting ") + dtype_name(value.dtype()) + " '" + name + "' to " +
                          dtype_name(dst.view.dtype()),
                  static_cast<int64_t>(value.nbytes()));
  dst.view.copy_(value);
}

// A digest of every parameter and buffer (keys and bytes): two ranks with other weights differ in it.
int64_t state_digest(const models::Module& model) {
  uint64_t h = 0;
  for (const auto& [key, t] : model.state_dict()) {
    const Tensor host = t.detach().to(Device::cpu()).contiguous();
    h = h * 1000003u ^ static_cast<uint64_t>(digest(key.data(), key.size()));
    h = h * 1000003u ^ static_cast<uint64_t>(digest(host.raw_data(), host.nbytes()));
  }
  return static_cast<int64_t>(h);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

// The model's forward on its bound inputs; with `record`, every floating input becomes a leaf whose grad backward
// fills when `input_grads`. Used by shardrt_model_forward and shardrt_train_step.
std::vector<ShardTensor> run_forward(ModelObj& m, const char* fn, bool record, bool input_grads) {
  if (m.inputs.empty()) throw state_error(fn, "no input is bound; call shardrt_model_set_input first");
  m.outputs.clear();
  m.input_leaves.clear();
  m.backward_done = false;
  std::map<std::string, ShardTensor> in;
  for (const auto& [name, s] : m.inputs) {
    const bool floating = is_floating(s->tensor->view.dtype());
    Tensor local = s->read(fn, floating ? m.dtype : s->tensor->view.dtype());
    s->check_replicated(fn, "input '" + name + "'", local);
    if (record && input_grads && floating) {
      local = local.detach();
      set_requires_grad(local);
      m.input_leaves[name] = local;
    }
    in.emplace(name, ShardTensor(local, *s->spec));
  }
  if (record) return m.model->forward(in);
  NoGradGuard no_grad;
  return m.model->forward(in);
}

// "embedding [2, 13, 2]; fx [2, 13, 3]": the names and global shapes of the bound inputs, for the signature.
std::string bound_inputs(const ModelObj& m) {
  std::string s;
  for (const auto& [name, in] : m.inputs) s += (s.empty() ? "" : "; ") + name + " " + shape_str(in->spec->global_shape());
  return s.empty() ? "none" : s;
}

}  // namespace shardrt::capi

using namespace shardrt;
using namespace shardrt::capi;

extern "C" {

shardrt_status shardrt_model_create(shardrt_model* out, shardrt_mesh mesh, const char* kind, const char* config,
                                    const char* weights, int dtype, uint64_t seed) {
  const char* fn = "shardrt_model_create";
  return entry(fn, [&] {
    require(out, fn, "out");
    out->id = 0;
    auto mh = open_handle(meshes(), mesh.id, "mesh", fn);
    auto m = std::make_shared<ModelObj>();
    // Building and loading are local: the whole model is made in the prepare step, and its digest is part of the
    // signature the ranks agree on (a rank that read another weights file would compute silently otherwise).
    mh->run(CallId::model_create, fn, [&](Signature& sig) {
      require(kind, fn, "kind");
      const DType dt = to_dtype(dtype, fn);
      SHARDRT_CHECK(dt == DType::f32 || dt == DType::f64, DTypeError, fn, ": dtype ", dtype_name(dt),
                    " is not a model precision; use SHARDRT_F32 or SHARDRT_F64");
      m->mesh = mh;
      m->kind = kind;
      m->dtype = dt;
      m->config = read_json_argument(config, fn, "config");
      m->model = models::build_model(m->kind, m->config, {dt, seed});
      const bool loaded = weights && *weights;
      if (loaded) {
        LoadedWeights w = load_weights(weights);
        if (!w.model_name.empty()) {
          const auto cls = physicsnemo_class(m->kind);
          SHARDRT_CHECK(!cls || cls->first == w.model_name, IoError, fn, ": '", weights, "' holds a PhysicsNeMo ",
                        w.model_name, " but the model is ", m->kind, " (", cls ? cls->first : "", ")");
        }
        m->model->load_state_dict(w.tensors, /*strict=*/true, weights);
        m->mdlus_args = w.args;
      }
      sig.text("kind", m->kind);
      sig.json("config", m->config);
      sig.value("dtype", dtype, dtype_name(dt), SHARDRT_ERR_DTYPE);
      if (!loaded) sig.number("seed", static_cast<int64_t>(seed));  // loaded weights override the initialisation
      const int64_t d = state_digest(*m->model);
      sig.value("weights", d, loaded ? detail::concat("'", weights, "' (parameters digest ", d, ")")
                                     : detail::concat("none: seed ", seed, " (parameters digest ", d, ")"));
    }, [] {});
    out->id = models_table().add(std::move(m));
  });
}

shardrt_status shardrt_model_destroy(shardrt_model model) {
  return entry("shardrt_model_destroy", [&] { models_table().remove(model.id, "model"); });
}

shardrt_status shardrt_model_num_parameters(shardrt_model model, int64_t* count) {
  const char* fn = "shardrt_model_num_parameters";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    require(count, fn, "count");
    *count = m->model->num_parameters();
  });
}

shardrt_status shardrt_model_set_input(shardrt_model model, const char* name, shardrt_sharded input) {
  const char* fn = "shardrt_model_set_input";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    auto s = open_handle(shardeds(), input.id, "input", fn);
    require(name, fn, "name");
    std::string known;
    bool found = false;
    for (const models::ModelInput& in : m->model->inputs()) {
      known += " " + in.name;
      found = found || in.name == name;
    }
    SHARDRT_CHECK(found, ValueError, fn, ": ", m->kind, " has no input '", name, "'; its inputs are", known);
    check_same_mesh(*m, *s, fn, "the input");
    m->inputs[name] = s;
  });
}

shardrt_status shardrt_model_clear_inputs(shardrt_model model) {
  const char* fn = "shardrt_model_clear_inputs";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    m->inputs.clear();
    m->outputs.clear();
    m->input_leaves.clear();
  });
}

shardrt_status shardrt_model_forward(shardrt_model model, shardrt_sharded output, int record_grad) {
  const char* fn = "shardrt_model_forward";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    std::shared_ptr<ShardedObj> o;
    m->mesh->run(CallId::model_forward, fn, [&](Signature& sig) {
      o = open_handle(shardeds(), output.id, "output", fn);
      check_same_mesh(*m, *o, fn, "the output");
      SHARDRT_CHECK(record_grad == 0 || record_grad == 1, ValueError, fn, ": record_grad ", record_grad,
                    " must be 0 or 1");
      sig.number("record_grad", record_grad);
      sig.text("the bound inputs", bound_inputs(*m), SHARDRT_ERR_SHAPE);
      sig.text("the output's global shape", shape_str(o->spec->global_shape()), SHARDRT_ERR_SHAPE);
    }, [&] {
      std::vector<ShardTensor> outs = run_forward(*m, fn, record_grad == 1, /*input_grads=*/true);
      const ShardTensor placed = laid_out_as(outs.at(0), *o->spec, fn, "the output sharded tensor");
      o->write(fn, placed.local().detach());
      if (record_grad == 1) m->outputs = std::move(outs);
    });
  });
}

shardrt_status shardrt_model_backward(shardrt_model model, shardrt_sharded grad_output) {
  const char* fn = "shardrt_model_backward";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    std::shared_ptr<ShardedObj> g;
    m->mesh->run(CallId::model_backward, fn, [&](Signature& sig) {
      g = open_handle(shardeds(), grad_output.id, "grad_output", fn);
      check_same_mesh(*m, *g, fn, "grad_output");
      if (m->backward_done) throw state_error(fn, "backward already ran for the last forward; run forward again");
      if (m->outputs.empty())
        throw state_error(fn, "no graph to run backward through; call shardrt_model_forward with record_grad = 1");
      sig.text("grad_output's global shape", shape_str(g->spec->global_shape()), SHARDRT_ERR_SHAPE);
    }, [&] {
      const ShardTensor& out = m->outputs.at(0);
      const ShardTensor given(g->read(fn, m->dtype), *g->spec);
      g->check_replicated(fn, "grad_output", given.local());
      SHARDRT_CHECK(given.global_shape() == out.global_shape(), ShapeError, fn, ": grad_output is global ",
                    shape_str(given.global_shape()), " but the output is global ", shape_str(out.global_shape()));
      ShardTensor grad = given;
      if (given.spec() != out.spec()) {
        NoGradGuard no_grad;
        grad = redistribute(given, out.spec());
      }
      backward(std::vector<Tensor>{out.local()}, std::vector<Tensor>{grad.local().contiguous()});
      m->outputs.clear();  // its graph is spent
      m->backward_done = true;
    });
  });
}

shardrt_status shardrt_model_input_grad(shardrt_model model, const char* name, shardrt_sharded grad) {
  const char* fn = "shardrt_model_input_grad";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    auto dst = open_handle(shardeds(), grad.id, "grad", fn);
    require(name, fn, "name");
    if (!m->backward_done) throw state_error(fn, "no backward has run since the last forward");
    const auto leaf = m->input_leaves.find(name);
    SHARDRT_CHECK(leaf != m->input_leaves.end(), ValueError, fn, ": no floating input '", name,
                  "' was bound at the last forward(record_grad = 1)");
    const ShardSpec& in_spec = *m->inputs.at(name)->spec;
    SHARDRT_CHECK(dst->spec->global_shape() == in_spec.global_shape() &&
                      dst->spec->local_shape() == in_spec.local_shape(),
                  ShapeError, fn, ": grad is global ", shape_str(dst->spec->global_shape()), " local ",
                  shape_str(dst->spec->local_shape()), " but input '", name, "' is global ",
                  shape_str(in_spec.global_shape()), " local ", shape_str(in_spec.local_shape()));
    Tensor gr = grad_of(leaf->second);
    if (!gr.defined()) {  // the output does not depend on it: the grad is zero
      gr = Tensor::empty(in_spec.local_shape(), m->dtype);
      gr.zero_();
    }
    dst->write(fn, gr);
  });
}

shardrt_status shardrt_model_zero_grad(shardrt_model model) {
  const char* fn = "shardrt_model_zero_grad";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    for (const Tensor& p : m->model->parameters()) {
      const Tensor g = grad_of(p);
      if (g.defined()) g.zero_();
    }
  });
}

shardrt_status shardrt_model_parameter(shardrt_model model, const char* name, shardrt_tensor dst) {
  const char* fn = "shardrt_model_parameter";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    auto t = open_handle(tensors(), dst.id, "dst", fn);
    require(name, fn, "name");
    copy_named(*t, named_tensor(m->model->state_dict(), name, *m, fn).detach(), fn, name);
  });
}

shardrt_status shardrt_model_parameter_grad(shardrt_model model, const char* name, shardrt_tensor dst) {
  const char* fn = "shardrt_model_parameter_grad";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    auto t = open_handle(tensors(), dst.id, "dst", fn);
    require(name, fn, "name");
    if (m->has_optimizer)
      throw state_error(fn, "the model has an optimizer, which keeps the grads in its own arena; read them "
                            "before creating it");
    const Tensor p = named_tensor(m->model->named_parameters(), name, *m, fn);
    Tensor g = grad_of(p);
    if (!g.defined()) {
      g = Tensor::empty(p.shape(), p.dtype(), p.device());
      g.zero_();
    }
    copy_named(*t, g, fn, name);
  });
}

shardrt_status shardrt_model_export(shardrt_model model, const char* path) {
  const char* fn = "shardrt_model_export";
  return entry(fn, [&] {
    auto m = open_handle(models_table(), model.id, "model", fn);
    m->mesh->run(CallId::model_export, fn, [&](Signature& sig) {
      require(path, fn, "path");
      sig.text("path", path);  // mesh rank 0's is the one written
    }, [&] {
      const std::string p = path;
      std::map<std::string, Tensor> sd;
      std::vector<std::string> order;
      for (const auto& [key, t] : m->model->state_dict()) {
        sd.emplace(key, t.detach().contiguous());
        order.push_back(key);
      }
      nlohmann::json args;
      if (ends_with(p, ".mdlus")) {
        if (m->mdlus_args) {
          args = *m->mdlus_args;
        } else {
          const auto cls = physicsnemo_class(m->kind);
          SHARDRT_CHECK(cls.has_value(), ValueError, fn, ": an .mdlus names PhysicsNeMo's class, which ShardRT ",
                        "knows for flare and geotransolver but not for ", m->kind,
                        "; load the model from an .mdlus, or export .safetensors / .pt");
          args = {{"__name__", cls->first}, {"__module__", cls->second}, {"__args__", m->config}};
        }
      } else {
        SHARDRT_CHECK(ends_with(p, ".safetensors") || ends_with(p, ".pt") || ends_with(p, ".pth"), ValueError, fn,
                      ": '", p, "' has none of the extensions .mdlus, .safetensors, .pt, .pth");
      }
      if (m->mesh->mesh->rank() != 0) return;
      if (ends_with(p, ".mdlus")) export_mdlus(p, sd, order, args);
      else if (ends_with(p, ".safetensors")) export_safetensors(p, sd);
      else export_torch(p, sd, order);
    });
  });
}

}  // extern "C"
