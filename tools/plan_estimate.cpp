#include "tools/plan_estimate.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "autograd/engine.h"
#include "models/geotransolver.h"
#include "models/model.h"
#include "models/transolver_shell.h"
#include "models/vit.h"
#include "optim/arena.h"
#include "optim/optimizer.h"
#include "patches/ops.h"
#include "runtime/allocator.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "tools/train_io.h"
#include "tools/train_loss.h"

namespace shardrt::tools {

using nlohmann::json;

std::map<std::string, int64_t> RankPlan::comm_per_axis() const {
  std::map<std::string, int64_t> out;
  for (const CommItem& c : comm) out[c.axis] += c.bytes;
  return out;
}

namespace {

// The rows of the grid each domain rank holds: the loader's split, in whole patch rows for the ViT.
Extents row_extents(const models::Model& model, int64_t R, int domain) {
  if (model.kind() == "vit") {
    const int64_t p = dynamic_cast<const models::HybridViT&>(model).config.patch_size;
    Extents e = split_extents(R / p, domain);
    for (int64_t& x : e) x *= p;
    return e;
  }
  return split_extents(R, domain);
}

// The same model at `rows` x R (its grid-sized arguments changed), for the probe.
json probe_args(const std::string& kind, json args, int64_t rows, int64_t R) {
  if (kind == "flare" && args.contains("structured_shape") && !args["structured_shape"].is_null())
    args["structured_shape"] = {rows, R};
  if (kind == "vit") args["img_size"] = {rows, R}, args["num_classes"] = rows * R;
  return args;
}

// Peak bytes on top of what is held, for one forward + loss + backward + optimizer step of c.micro_batch samples of
// `rows` x R on one rank.
int64_t probe_step_bytes(const TrainConfig& c, int64_t rows, int64_t R) {
  const int64_t B = c.micro_batch;
  const Mesh self(MPI_COMM_SELF, 1, 1);
  std::unique_ptr<models::Model> model =
      models::build_model(c.model_kind, probe_args(c.model_kind, c.model_args, rows, R), {c.dtype, c.model_seed});
  optim::OptimizerConfig oc = c.optimizer;
  oc.mode = optim::ShardingMode::replicated, oc.accumulation_steps = 1, oc.schedule = nullptr;
  optim::Optimizer opt(self, *model, oc);
  const std::unique_ptr<DarcyModelIO> io = darcy_model_io(*model, self, rows, R);
  data::LoaderOptions lo;
  lo = io->loader_layout(lo, B, rows, R);
  const Shape shape = data::batch_shape(io->layout(), B, rows, R);
  Generator gen(17);
  data::DarcyBatch b;
  b.permeability = distribute(randn(shape, {c.dtype}, &gen), self, lo.placements);
  b.darcy = distribute(rand(shape, {c.dtype}, &gen, 0.5, 1.5), self, lo.placements);
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory(Device::cpu());
  {
    const ShardTensor pred = model->forward(io->inputs(b)).at(0);
    const data::FieldStats stats{1.0, 2.0};  // any normaliser: the probe runs the loss's ops, not its numbers
    const ShardTensor loss = training_loss(c, pred, io->target(b), &stats);
    backward(loss.local());
    opt.step();
  }
  return memory_stats(Device::cpu()).peak_bytes - before;
}

struct ModelShape {
  int64_t hidden = 0, heads = 0, head_dim = 0, slices = 0, layers = 0, context_dim = 0;
  int64_t patch = 1, embed = 0;
};

bool replicated_only(const std::string& kind, const std::string& name) {
  if (kind == "vit") return name.rfind("head.", 0) == 0 || name == "pos_embed";
  if (kind == "geotransolver")
    for (const char* part : {".Attn.qkv_project.", ".Attn.cross_q.", ".Attn.cross_k.", ".Attn.cross_v.",
                             ".Attn.state_mixing", ".Attn.concat_project"})
      if (name.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

Plan make_plan(const PlanRequest& req) {
  const TrainConfig& c = req.config;
  const int64_t R = req.resolution;
  SHARDRT_CHECK(R >= 2, ValueError, "shardrt-plan: the grid resolution must be >= 2 (--resolution), got ", R);
  SHARDRT_CHECK(c.loss != LossKind::mse, ValueError,
                "shardrt-plan: loss.kind mse is not modelled; plan with relative_l2 or huber");
  // zero3's gathers follow the model's block structure (optim/zero3.cpp), which the plan does not model yet.
  SHARDRT_CHECK(c.optimizer.mode != optim::ShardingMode::zero3, ValueError,
                "shardrt-plan: optimizer.mode zero3 is not modelled yet; plan with ddp (the same sharded optimizer "
                "state; zero3 holds at most two blocks' parameters whole at a time on top of it)");
  std::unique_ptr<models::Model> model = models::build_model(c.model_kind, c.model_args, {c.dtype, c.model_seed});
  {
    const Mesh self(MPI_COMM_SELF, 1, 1);
    (void)darcy_model_io(*model, self, R, R);  // the same checks as shardrt-train
  }
  ModelShape m;
  const std::string kind = c.model_kind;
  if (kind == "flare") {
    const auto& t = dynamic_cast<const models::TransolverShell&>(*model).config();
    const bool grid_fits = !t.structured_shape || *t.structured_shape == std::vector<int64_t>{R, R};
    SHARDRT_CHECK(grid_fits, ValueError,
                  "shardrt-plan: flare's structured_shape is not the ", R, "x", R,
                  " grid planned; set --set model.args.structured_shape=[", R, ",", R, "]");
    m.hidden = t.n_hidden, m.heads = t.n_head, m.slices = t.slice_num, m.layers = t.n_layers;
  } else if (kind == "vit") {
    const auto& v = dynamic_cast<const models::HybridViT&>(*model).config;
    m.embed = m.hidden = v.embed_dim, m.heads = v.num_heads, m.layers = v.depth, m.patch = v.patch_size;
  } else {
    const auto& g = dynamic_cast<const models::GeoTransolver&>(*model);
    const auto& gc = g.config();
    SHARDRT_CHECK(gc.attention_type == "GALE" && !gc.plus && !gc.include_local_features && !gc.concrete_dropout &&
                      gc.state_mixing_mode == "weighted",
                  ValueError, "shardrt-plan: geotransolver is modelled with attention_type GALE, plus=false, "
                  "include_local_features=false, concrete_dropout=false and state_mixing_mode weighted only");
    m.hidden = gc.n_hidden, m.heads = gc.n_head, m.slices = gc.slice_num, m.layers = gc.n_layers;
    m.context_dim = g.context_dim();
  }
  m.head_dim = m.hidden / m.heads;

  Plan plan;
  plan.model = kind;
  plan.num_parameters = model->num_parameters();
  plan.resolution = R;
  plan.ddp = c.ddp, plan.domain = c.domain;
  plan.micro_batches = c.optimizer.accumulation_steps;
  plan.micro_batch = c.micro_batch;
  plan.dtype = dtype_name(c.dtype);
  plan.optimizer = optim::algorithm_name(c.optimizer.algorithm);
  plan.mode = optim::sharding_mode_name(c.optimizer.mode);
  const int64_t E = static_cast<int64_t>(dtype_size(c.dtype));
  const int Pb = c.ddp, Pd = c.domain, P = Pb * Pd;
  const int64_t k = plan.micro_batches;
  const int64_t b = plan.micro_batch;  // samples per domain group per forward: what scales the activations' traffic

  // The arenas, as the optimizer lays them out.
  int shards = 1;
  if (c.optimizer.mode == optim::ShardingMode::ddp) shards = Pb;
  if (c.optimizer.mode == optim::ShardingMode::mesh) shards = P;
  std::vector<optim::SlotRequest> slots;
  int64_t reduced_numel = 0;
  std::map<std::string, int64_t> per_module;  // parameter elements per module (the name less its last part)
  for (const auto& [name, t] : model->named_parameters()) {
    slots.push_back({name, t.shape(), c.optimizer.algorithm == optim::Algorithm::muon_adamw && t.dim() == 2});
    if (!replicated_only(kind, name)) reduced_numel += t.numel();
    per_module[name.substr(0, name.rfind('.') == std::string::npos ? 0 : name.rfind('.'))] += t.numel();
  }
  // With batch-sharded data (ddp > 1) every op that meets it scales its parameter grads by the batch share in
  // backward (patches/patch_util.cpp, reduce_param_grads): a packed copy and a scaled copy of one op's grads, which
  // the one-rank probe (share 1) never makes. The largest module's, twice.
  int64_t largest_module = 0;
  for (const auto& [name, n] : per_module) largest_module = std::max(largest_module, n);
  const optim::ArenaLayout layout = optim::plan_layout(slots, shards);
  int64_t state_kinds = 2;
  if (c.optimizer.algorithm == optim::Algorithm::sgd) state_kinds = c.optimizer.sgd.momentum != 0 ? 1 : 0;
  if (c.optimizer.algorithm == optim::Algorithm::muon_adamw) state_kinds = 3;
  int64_t buffers = 0;
  for (const auto& [name, t] : model->named_buffers()) buffers += static_cast<int64_t>(t.nbytes());

  // Activations per distinct local row count, from the probe.
  const Extents rows = row_extents(*model, R, Pd);
  const int64_t unit = kind == "vit" ? m.patch : 1;
  std::map<int64_t, int64_t> act;
  std::ostringstream probe;
  for (int64_t r : rows) {
    if (act.count(r) || r == 0) continue;
    // A ViT shard of a single patch row trips the one-rank probe's reshape of a sharded size-1 dim; such a shard is
    // extrapolated from 2 and 3 patch rows instead.
    const bool single_patch_row = kind == "vit" && r < 2 * unit;
    if (r * R <= req.probe_points && !single_patch_row) {
      act[r] = probe_step_bytes(c, r, R);
      probe << (probe.tellp() > 0 ? "; " : "") << "probed at " << r << " rows";
    } else {
      int64_t r1 = std::max<int64_t>(unit, (req.probe_points / R) / unit * unit);
      int64_t r2 = std::max<int64_t>(unit, r1 / 2 / unit * unit);
      if (single_patch_row) r2 = 2 * unit, r1 = 3 * unit;
      if (r2 == r1) r1 = r2 + unit;
      const double a1 = static_cast<double>(probe_step_bytes(c, r1, R));
      const double a2 = static_cast<double>(probe_step_bytes(c, r2, R));
      const double slope = (a1 - a2) / static_cast<double>(r1 - r2);
      act[r] = static_cast<int64_t>(std::llround(a1 + slope * static_cast<double>(r - r1)));
      probe << (probe.tellp() > 0 ? "; " : "") << r << " rows extrapolated from probes at " << r2 << " and " << r1
            << " rows";
    }
  }
  plan.probe = probe.str();

  const int64_t tokens_per_row = kind == "vit" ? R / m.patch : 0;
  Extents tokens(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) tokens[i] = kind == "vit" ? rows[i] / m.patch * tokens_per_row : rows[i] * R;
  const int64_t all_tokens = total(tokens);

  for (int rank = 0; rank < P; ++rank) {
    RankPlan rp;
    rp.rank = rank, rp.ddp_coord = rank / Pd, rp.domain_coord = rank % Pd;
    const int r = rp.domain_coord;
    rp.local_rows = rows[static_cast<size_t>(r)];
    rp.local_points = rp.local_rows * R;
    rp.params = rp.grads = layout.total() * E;
    rp.state = state_kinds * layout.shard_numel * E;
    rp.buffers = buffers;
    rp.batches = 2 * 2 * b * rp.local_points * E;
    rp.activations = (rp.local_rows > 0 ? act.at(rp.local_rows) : 0) + (Pb > 1 ? 2 * largest_module * E : 0);

    auto add = [&](const std::string& what, const std::string& axis, int64_t bytes) {
      if (bytes > 0) rp.comm.push_back({what, axis, bytes});
    };
    auto on_domain = [&](int64_t numel) { return numel * E * (Pd - 1) * k; };  // all_reduce per micro-batch
    auto on_ddp = [&](int64_t numel) { return numel * E * (Pb - 1) * k; };
    const int64_t h = m.heads, s = m.slices, d = m.head_dim, L = m.layers;
    add("parameter grads met by sharded points (" + std::to_string(reduced_numel) + " elements, once each)",
        "domain", on_domain(reduced_numel));
    if (kind == "flare") {
      add("attention forward: max and merged [out*w, w] of the latent queries, per block", "domain",
          on_domain(b * L * (h * s + h * s * (d + 1))));
      add("attention backward: dG|dZ, per block (dq: in the parameter grads)", "domain",
          on_domain(b * L * 2 * h * s * d));
      // The latent queries' grad is summed over domain per sample, (B, H, S, D), before the broadcast's batch sum:
      // the parameter grads above count one sample's worth.
      if (b > 1) add("attention backward: dq of the other samples of a micro-batch", "domain",
                     on_domain((b - 1) * L * h * s * d));
    } else if (kind == "geotransolver") {
      add("slice sums: the context and each block's [sum w F | sum w]", "domain",
          on_domain(b * (h * s * (m.context_dim + 1) + L * h * s * (d + 1))));
      add("slice-weighted sums backward: each block's dM", "domain", on_domain(b * L * h * s * d));
    } else {  // vit
      add("mean over tokens (B, E)", "domain", on_domain(b * m.embed));
      add("pos_embed grad gathered (this rank's tokens)", "domain", tokens[r] * m.embed * E * (Pd - 1) * k);
      add("target gathered over domain (this rank's rows)", "domain", b * rp.local_points * E * (Pd - 1) * k);
      if (Pd > 1) {
        const int64_t next = tokens[static_cast<size_t>((r + 1) % Pd)];
        auto kv = [&](int64_t keys) { return b * h * keys * 2 * d * E; };
        add("ring attention forward: P-1 K/V shifts per block", "domain", k * L * kv(all_tokens - next));
        add("ring attention backward: P-1 K/V shifts + P dK|dV homes per block", "domain",
            k * L * (kv(all_tokens - next) + kv(all_tokens)));
      }
      add("pos_embed slice grad over the batch", "ddp", on_ddp(tokens[r] * m.embed));
    }
    if (kind != "vit")
      add("loss: per-sample sums", "domain", on_domain(c.loss == LossKind::relative_l2 ? 2 * b : 1));
    add("loss: batch mean", "ddp", on_ddp(1));
    // The optimizer, once per step (optim/sharding.h).
    const int64_t total_bytes = layout.total() * E, shard_bytes = layout.shard_numel * E;
    const bool clip = c.optimizer.max_grad_norm > 0;
    switch (c.optimizer.mode) {
      case optim::ShardingMode::replicated:
        add("optimizer: grad arena all_reduce", "ddp", total_bytes * (Pb - 1));
        break;
      case optim::ShardingMode::ddp:
        if (Pb > 1) {
          add("optimizer: grad reduce_scatter", "ddp", total_bytes - shard_bytes);
          add("optimizer: parameter all_gather", "ddp", shard_bytes * (Pb - 1));
          if (clip) add("optimizer: clip norm", "ddp", 8 * (Pb - 1));
        }
        break;
      case optim::ShardingMode::zero3:  // refused by make_plan's first checks
        break;
      case optim::ShardingMode::mesh:
        if (Pb > 1) add("optimizer: grad reduce_scatter", "ddp", total_bytes - shard_bytes * Pd);
        if (P > 1) {
          add("optimizer: parameter all_gather", "mesh", shard_bytes * (P - 1));
          if (clip) add("optimizer: clip norm", "mesh", 8 * (P - 1));
        }
        break;
    }
    plan.ranks.push_back(std::move(rp));
  }
  return plan;
}

json plan_json(const Plan& p) {
  json doc = {{"model", p.model}, {"num_parameters", p.num_parameters}, {"resolution", p.resolution},
              {"mesh", {{"ddp", p.ddp}, {"domain", p.domain}}}, {"micro_batches", p.micro_batches},
              {"micro_batch", p.micro_batch},
              {"dtype", p.dtype}, {"optimizer", p.optimizer}, {"mode", p.mode}, {"activations_method", p.probe},
              {"ranks", json::array()}};
  for (const RankPlan& r : p.ranks) {
    json comm = json::array();
    for (const CommItem& c : r.comm) comm.push_back({{"what", c.what}, {"axis", c.axis}, {"bytes", c.bytes}});
    doc["ranks"].push_back({{"rank", r.rank}, {"ddp", r.ddp_coord}, {"domain", r.domain_coord},
                            {"local_rows", r.local_rows}, {"local_points", r.local_points},
                            {"bytes", {{"parameters", r.params}, {"grads", r.grads}, {"master", r.master},
                                       {"optimizer_state", r.state}, {"buffers", r.buffers},
                                       {"batches", r.batches}, {"activations", r.activations},
                                       {"peak", r.peak()}}},
                            {"comm_bytes_per_step", r.comm_per_axis()}, {"comm", comm}});
  }
  return doc;
}

namespace {

std::string human(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (b < 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace

std::string plan_table(const Plan& p) {
  std::ostringstream os;
  os << "shardrt-plan: " << p.model << " (" << p.num_parameters << " parameters, " << p.dtype << ") on ddp " << p.ddp
     << " x domain " << p.domain << " (" << p.ddp * p.domain << " ranks); " << p.resolution << "x" << p.resolution
     << " grid; " << p.micro_batches << " micro-batch(es) of " << p.micro_batch << " sample(s) per domain group per step; " << p.optimizer << ", optimizer mode " << p.mode
     << "\n";
  os << "activations: " << p.probe << "\n\n";
  char line[400];
  std::snprintf(line, sizeof line, "%-10s %8s %10s %10s %10s %10s %10s %10s %11s | %11s %11s %11s\n", "ranks",
                "points", "params", "grads", "opt state", "buffers", "batches", "activ.", "PEAK", "ddp/step",
                "domain/step", "mesh/step");
  os << line;
  // Ranks with identical figures share a line.
  std::vector<bool> done(p.ranks.size(), false);
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    if (done[i]) continue;
    const RankPlan& a = p.ranks[i];
    std::string who = std::to_string(a.rank);
    int count = 1;
    for (size_t j = i + 1; j < p.ranks.size(); ++j) {
      const RankPlan& b = p.ranks[j];
      if (!done[j] && b.peak() == a.peak() && b.comm_per_axis() == a.comm_per_axis() &&
          b.local_points == a.local_points)
        done[j] = true, ++count;
    }
    if (count > 1) who += " +" + std::to_string(count - 1);
    auto axis = [&](const char* name) {
      const auto m = a.comm_per_axis();
      return m.count(name) ? human(m.at(name)) : std::string("0");
    };
    std::snprintf(line, sizeof line, "%-10s %8lld %10s %10s %10s %10s %10s %10s %11s | %11s %11s %11s\n",
                  who.c_str(), static_cast<long long>(a.local_points), human(a.params).c_str(), human(a.grads).c_str(),
                  human(a.state).c_str(), human(a.buffers).c_str(), human(a.batches).c_str(),
                  human(a.activations).c_str(), human(a.peak()).c_str(), axis("ddp").c_str(),
                  axis("domain").c_str(), axis("mesh").c_str());
    os << line;
  }
  os << "\ncommunication per step of rank 0 (bytes sent):\n";
  for (const CommItem& c : p.ranks.at(0).comm) {
    std::snprintf(line, sizeof line, "  %-7s %12lld  %s\n", c.axis.c_str(), static_cast<long long>(c.bytes),
                  c.what.c_str());
    os << line;
  }
  return os.str();
}

std::string check_against(const Plan& plan, const json& measured, double tol, bool& ok) {
  ok = true;
  std::ostringstream os;
  const json& ranks = measured.at("ranks");
  if (static_cast<size_t>(ranks.size()) != plan.ranks.size()) {
    ok = false;
    os << "the measurement has " << ranks.size() << " ranks, the plan " << plan.ranks.size() << "\n";
    return os.str();
  }
  char line[300];
  for (const json& m : ranks) {
    const RankPlan& r = plan.ranks.at(m.at("rank").get<size_t>());
    const int64_t peak = m.at("peak_bytes").get<int64_t>();
    const double rel = peak > 0 ? std::abs(static_cast<double>(r.peak() - peak)) / static_cast<double>(peak) : 1.0;
    const bool peak_ok = rel <= tol;
    std::map<std::string, int64_t> want = r.comm_per_axis(), got;
    for (auto it = m.at("comm_bytes_per_step").begin(); it != m.at("comm_bytes_per_step").end(); ++it)
      if (it.value().get<int64_t>() != 0) got[it.key()] = it.value().get<int64_t>();
    for (auto it = want.begin(); it != want.end();) it = it->second == 0 ? want.erase(it) : std::next(it);
    const bool comm_ok = want == got;
    ok = ok && peak_ok && comm_ok;
    std::snprintf(line, sizeof line, "rank %d: peak planned %lld measured %lld (%+.1f%%) %s; comm", r.rank,
                  static_cast<long long>(r.peak()), static_cast<long long>(peak),
                  100.0 * static_cast<double>(r.peak() - peak) / static_cast<double>(std::max<int64_t>(1, peak)),
                  peak_ok ? "ok" : "OUT OF TOLERANCE");
    os << line;
    std::set<std::string> axes;
    for (const auto& [a, b] : want) axes.insert(a);
    for (const auto& [a, b] : got) axes.insert(a);
    for (const std::string& a : axes)
      os << " " << a << " planned " << (want.count(a) ? want.at(a) : 0) << " measured " << (got.count(a) ? got.at(a) : 0);
    os << (comm_ok ? " ok" : " MISMATCH") << "\n";
  }
  return os.str();
}

}  // namespace shardrt::tools
