#include "tools/train_loop.h"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "data/loader.h"
#include "data/normalizer.h"
#include "mesh/agree.h"
#include "mesh/mesh.h"
#include "models/model.h"
#include "optim/optimizer_json.h"
#include "optim/checkpoint.h"
#include "optim/checkpoint_check.h"
#include "optim/optimizer.h"
#include "patches/ops.h"
#include "patches/shard_tensor.h"
#include "runtime/allocator.h"
#include "runtime/errors.h"
#include "tools/plot_darcy.h"
#include "tools/train_io.h"
#include "tools/train_loss.h"
#include "tools/train_metrics.h"

namespace shardrt::tools {

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
auto agreed(const Mesh& mesh, F&& fn) -> decltype(fn()) {
  std::optional<decltype(fn())> out;
  agree_on(mesh.flat(), [&] { out.emplace(fn()); });
  return std::move(*out);
}

double peak_mib_over_ranks() {
  double mine = static_cast<double>(memory_stats(Device::cpu()).peak_bytes) / (1024.0 * 1024.0), most = 0;
  MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

// The mean over validation samples of ||pred - true|| / ||true|| of the pressure ("darcy"), in physical units
// (the normaliser undone). Whole tensors are gathered per batch: validation is small next to training.
// A batch's tensor on the training device (the loader reads into host memory). Data, not a parameter: no grad.
ShardTensor on_device(const ShardTensor& t, Device device) {
  return t.device() == device ? t : ShardTensor(t.local().to(device), t.spec());
}
std::map<std::string, ShardTensor> on_device(std::map<std::string, ShardTensor> inputs, Device device) {
  for (auto& [name, t] : inputs) t = on_device(t, device);
  return inputs;
}

double validate(models::Model& model, const DarcyModelIO& io, data::DarcyLoader& val,
                const std::optional<data::Normalizer>& norm, int64_t batches, int64_t panel_sample,
                DarcyPanel* panel, Device device) {
  NoGradGuard no_grad;
  model.eval();  // validation in eval mode (dropout off), training resumes in training mode
  val.seek(0);
  double total = 0;
  int64_t counted = 0;
  for (int64_t k = 0; k < batches; ++k) {
    data::DarcyBatch b = val.next();
    const ShardTensor pred = model.forward(on_device(io.inputs(b), device)).at(0);
    Tensor p = full_tensor(pred).to(Device::cpu()).to(DType::f64).contiguous().clone();
    Tensor t = full_tensor(io.target(b)).to(DType::f64).contiguous().clone();
    if (norm) norm->denormalize("darcy", p), norm->denormalize("darcy", t);
    const int64_t B = p.size(0), n = p.numel() / B;
    const double* pp = p.data<double>();
    const double* tp = t.data<double>();
    for (int64_t s = 0; s < B; ++s) {
      double num = 0, den = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = pp[s * n + i] - tp[s * n + i];
        num += d * d, den += tp[s * n + i] * tp[s * n + i];
      }
      total += den > 0 ? std::sqrt(num / den) : std::sqrt(num);
      ++counted;
      if (panel && counted - 1 == panel_sample) {
        Tensor k_full = full_tensor(b.permeability).to(DType::f64).contiguous().clone();
        if (norm) norm->denormalize("permeability", k_full);
        panel->height = val.manifest().resolution, panel->width = val.manifest().resolution;
        const double* kp = k_full.data<double>();
        panel->permeability.assign(kp + s * n, kp + (s + 1) * n);
        panel->pressure.assign(tp + s * n, tp + (s + 1) * n);
        panel->prediction.assign(pp + s * n, pp + (s + 1) * n);
      }
    }
  }
  return counted ? total / static_cast<double>(counted) : 0.0;
}

// The panel of one validation sample (rank 0), titled with its error and the step of the weights.
void write_panel(const std::string& png, DarcyPanel& panel, int64_t sample, int64_t step) {
  char title[160];
  std::snprintf(title, sizeof title, "validation sample %lld after %lld steps: relative L2 %.4f",
                static_cast<long long>(sample), static_cast<long long>(step),
                relative_l2(panel.prediction, panel.pressure));
  panel.title = title;
  write_darcy_panel_png(png, panel);
  std::printf("panel: %s\n", png.c_str());
}

std::vector<std::string> normalizer_names() {
  std::vector<std::string> out;
  for (const auto& [name, t] : data::Normalizer{}.state()) out.push_back(name);
  return out;
}

// The best validation so far (the checkpoint kept in best_checkpoint_dir), carried through checkpoints so that a
// resumed run keeps comparing against it.
struct BestValidation {
  double rel_l2 = -1;  // < 0: no validation yet
  int64_t step = 0;
};

// Where checkpoint.best keeps the weights of the best validation: next to checkpoint.dir.
std::string best_checkpoint_dir(const TrainConfig& c) { return c.checkpoint_dir + "-best"; }

// One checkpoint directory holds everything a resume needs: the optimizer's shards (master weights and state), the
// normaliser (rank 0 writes it) and the loop's position, committed atomically by save_checkpoint.

void save_training(const Mesh& mesh, const std::string& dir, const optim::Optimizer& opt,
                   const std::optional<data::Normalizer>& norm, int64_t step, int64_t loader_position,
                   const BestValidation& best, int64_t loader_batch) {
  CheckpointContents c = opt.checkpoint_contents();
  c.state["train"] = {{"step", step},         {"loader_position", loader_position}, {"loader_batch", loader_batch},
                      {"best_val_rel_l2", best.rel_l2}, {"best_step", best.step}};
  if (mesh.rank() == 0 && norm)
    for (const auto& [name, t] : norm->state()) c.ranges.push_back({name, {1}, 0, t.reshape({1})});
  save_checkpoint(mesh, dir, c);
}

struct Resumed {
  int64_t step = 0, loader_position = 0;
  int64_t loader_batch = 0;  // the samples per loader batch the position counts (0: not recorded)
  BestValidation best;
  std::optional<data::Normalizer> normalizer;
};

// The loader position to resume at, in batches of `batch` samples: a run resumed with another data.micro_batch
// continues at the same sample (ValueError where that falls inside one of its batches).
int64_t resumed_position(const Resumed& r, int64_t batch) {
  if (r.loader_batch == 0 || r.loader_batch == batch) return r.loader_position;
  const int64_t samples = r.loader_position * r.loader_batch;
  SHARDRT_CHECK(samples % batch == 0, ValueError, "shardrt-train: --resume: the checkpoint stopped after sample ",
                samples, " of the loader's order, inside a batch of ", batch, " samples (", r.loader_batch,
                " per batch when it was saved); resume with the data.micro_batch it was saved with");
  return samples / batch;
}

Resumed load_training(const Mesh& mesh, const std::string& dir, optim::Optimizer& opt, bool normalize) {
  std::vector<RangeRequest> requests = opt.checkpoint_requests();
  const size_t n = requests.size();
  const std::vector<std::string> names = normalizer_names();
  if (normalize)
    for (const std::string& name : names) requests.push_back({name, 0, 1, DType::f64, std::vector<int64_t>{1}});
  LoadedCheckpoint loaded = load_checkpoint(mesh, dir, requests);
  Resumed r;
  agree_or_throw<IoError>(mesh.flat(), loaded.state.contains("train"),
                          "shardrt-train: --resume: the checkpoint '" + dir +
                              "' was not written by shardrt-train (its state has no 'train' entry)");
  r.step = loaded.state["train"]["step"].get<int64_t>();
  r.loader_position = loaded.state["train"]["loader_position"].get<int64_t>();
  r.loader_batch = loaded.state["train"].value("loader_batch", int64_t{0});
  r.best.rel_l2 = loaded.state["train"].value("best_val_rel_l2", -1.0);  // absent in checkpoints before it
  r.best.step = loaded.state["train"].value("best_step", int64_t{0});
  if (normalize) {
    std::map<std::string, Tensor> st;
    for (size_t i = 0; i < names.size(); ++i) st[names[i]] = loaded.values[n + i];
    r.normalizer = data::Normalizer::from_state(st);
  }
  loaded.values.resize(n);
  opt.load_from(loaded);
  return r;
}

// The config's mesh over MPI_COMM_WORLD, once every rank agrees that the launch has as many ranks as it needs.
Mesh config_mesh(const TrainConfig& c) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Mesh start(MPI_COMM_WORLD, 1, world);  // agrees on the setup's verdicts before the real mesh exists
  agree_or_throw<ValueError>(start.flat(), c.ddp * c.domain == world,
                             "shardrt-train: mesh " + std::to_string(c.ddp) + "x" + std::to_string(c.domain) +
                                 " needs " + std::to_string(c.ddp * c.domain) + " ranks but mpiexec started " +
                                 std::to_string(world) + "; use mpiexec -n " + std::to_string(c.ddp * c.domain) +
                                 " or --set mesh.ddp=D --set mesh.domain=N with D x N = " + std::to_string(world));
  return Mesh(MPI_COMM_WORLD, c.ddp, c.domain);
}

}  // namespace

void agree_on(const Communicator& comm, const std::function<void()>& step) {
  std::string kind = "ValueError", msg;
  bool ok = true;
  try {
    step();
  } catch (const Error& e) {
    ok = false, kind = e.kind(), msg = e.what();
    // "<Kind> [rank N]: text" -> "text": the agreed error states the kind again and which ranks failed.
    if (msg.starts_with(kind)) {
      const std::size_t colon = msg.find(": ");
      if (colon != std::string::npos) msg = msg.substr(colon + 2);
    }
  } catch (const std::exception& e) {
    ok = false, msg = e.what();
  }
  const auto agreed_msg = comm.agree(ok, kind + "|" + msg);
  if (!agreed_msg) return;
  const std::size_t bar = agreed_msg->find('|');
  const std::string k = agreed_msg->substr(0, bar), text = agreed_msg->substr(bar + 1);
  if (k == "IoError") throw IoError(text);
  if (k == "ShapeError") throw ShapeError(text);
  if (k == "CommError") throw CommError(text);
  if (k == "DTypeError") throw DTypeError(text);
  throw ValueError(text);
}

double run_evaluation(const TrainConfig& c, const EvalOptions& e) {
  const Mesh mesh = config_mesh(c);
  const bool root = mesh.rank() == 0;
  const std::string manifest = e.data.empty() ? c.val_manifest : e.data;
  agree_or_throw<ValueError>(mesh.flat(), !manifest.empty(),
                             "shardrt-train --eval: no split to evaluate on; pass --eval-data darcy_<split>.json or "
                             "set data.val");
  std::string dir = e.checkpoint;
  if (dir.empty()) dir = std::filesystem::exists(best_checkpoint_dir(c)) ? best_checkpoint_dir(c) : c.checkpoint_dir;
  std::unique_ptr<models::Model> model = agreed(mesh, [&] {
    return models::build_model(c.model_kind, c.model_args, {c.dtype, c.model_seed});
  });
  const data::DarcyManifest m = agreed(mesh, [&] { return data::load_darcy_manifest(manifest); });
  const int64_t R = m.resolution;
  if (c.device.is_cuda()) model->to(c.device);
  optim::OptimizerConfig oc = c.optimizer;
  oc.accumulation_steps = 1;
  optim::Optimizer opt(mesh, *model, oc);  // the checkpoint's master weights reach the model through it
  const Resumed r = load_training(mesh, dir, opt, c.normalize);
  const std::unique_ptr<DarcyModelIO> io = agreed(mesh, [&] { return darcy_model_io(*model, mesh, R, R); });
  data::LoaderOptions lo;
  // Batches as validation takes them in training (so the figures agree), or one sample per ddp group where those
  // would leave samples out.
  const int64_t batch = m.samples % (c.ddp * c.micro_batch) == 0 ? c.ddp * c.micro_batch : c.ddp;
  lo.batch_size = batch, lo.shuffle = false, lo.prefetch = false, lo.dtype = c.dtype, lo.normalizer = r.normalizer;
  lo = io->loader_layout(lo, batch, R, R);
  auto loader = agreed(mesh, [&] { return std::make_unique<data::DarcyLoader>(manifest, mesh, lo); });
  const int64_t batches = loader->batches_per_epoch();
  DarcyPanel panel;
  std::optional<Autocast> scope;
  if (c.autocast) scope.emplace(*c.autocast);
  const double l2 = validate(*model, *io, *loader, r.normalizer, batches, c.panel_sample, &panel, c.device);
  if (root) {
    std::printf("shardrt-train --eval: %s (step %lld) on %s (%lld samples, %lldx%lld) on %s\n", dir.c_str(),
                static_cast<long long>(r.step), manifest.c_str(), static_cast<long long>(batches * batch),
                static_cast<long long>(R), static_cast<long long>(R), mesh.str().c_str());
    if (c.plots && !panel.prediction.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(c.out_dir, ec);
      write_panel(c.out_dir + "/eval-panel.png", panel, c.panel_sample, r.step);
    }
    std::printf("relative L2 (darcy, %lld samples): %.4f\n", static_cast<long long>(batches * batch), l2);
  }
  return l2;
}

double run_training(const TrainConfig& c, const RunOptions& options) {
  const Mesh mesh = config_mesh(c);
  const bool root = mesh.rank() == 0;

  std::unique_ptr<models::Model> model = agreed(mesh, [&] {
    return models::build_model(c.model_kind, c.model_args, {c.dtype, c.model_seed});
  });
  const data::DarcyManifest train_manifest = agreed(mesh, [&] { return data::load_darcy_manifest(c.train_manifest); });
  const int64_t R = train_manifest.resolution;

  optim::OptimizerConfig oc = c.optimizer;
  // The loader's batches per epoch fix an epoch-count run's total, which the schedule needs.
  const int64_t micro = c.optimizer.accumulation_steps;
  const int64_t micro_samples = c.ddp * c.micro_batch;  // the global samples of one forward
  const int64_t batches_per_epoch = train_manifest.samples / micro_samples;
  const int64_t total = c.steps > 0 ? c.steps : c.epochs * (batches_per_epoch / micro);
  agree_or_throw<ValueError>(mesh.flat(), total > 0,
                             "shardrt-train: epochs " + std::to_string(c.epochs) + " of " +
                                 std::to_string(batches_per_epoch / micro) + " steps make no step; raise epochs");
  oc.schedule = agreed(mesh, [&] { return optim::schedule_from_json(c.schedule, total, "shardrt-train"); });
  // On a GPU the parameters move before the optimizer takes them into its (device) arenas.
  if (c.device.is_cuda()) model->to(c.device);
  optim::Optimizer opt(mesh, *model, oc);

  Resumed resumed;
  if (options.resume) {
    resumed = load_training(mesh, c.checkpoint_dir, opt, c.normalize);
  } else if (c.normalize) {
    resumed.normalizer = agreed(mesh, [&] { return std::optional<data::Normalizer>(data::compute_normalizer(c.train_manifest, mesh)); });
  }
  const std::optional<data::Normalizer>& norm = resumed.normalizer;

  const std::unique_ptr<DarcyModelIO> io = agreed(mesh, [&] { return darcy_model_io(*model, mesh, R, R); });
  data::LoaderOptions lo;
  lo.batch_size = micro_samples;
  lo.shuffle = c.shuffle;
  lo.seed = c.data_seed;
  lo.dtype = c.dtype;
  lo.normalizer = norm;
  lo = io->loader_layout(lo, micro_samples, R, R);
  auto train = agreed(mesh, [&] { return std::make_unique<data::DarcyLoader>(c.train_manifest, mesh, lo); });
  train->seek(agreed(mesh, [&] { return resumed_position(resumed, micro_samples); }));
  std::unique_ptr<data::DarcyLoader> val;
  int64_t val_batches = 0;
  if (!c.val_manifest.empty()) {
    data::LoaderOptions vo = lo;
    vo.shuffle = false;
    vo.prefetch = false;
    val = agreed(mesh, [&] { return std::make_unique<data::DarcyLoader>(c.val_manifest, mesh, vo); });
    agree_or_throw<ValueError>(mesh.flat(), val->manifest().resolution == R,
                               "shardrt-train: the validation split is " + std::to_string(val->manifest().resolution) +
                                   "^2 but the training split " + std::to_string(R) + "^2");
    val_batches = val->batches_per_epoch();
    if (c.val_samples > 0) val_batches = std::min(val_batches, std::max<int64_t>(1, c.val_samples / micro_samples));
  }

  const std::string csv_path = c.out_dir + "/metrics.csv";
  std::unique_ptr<MetricsCsv> csv;
  // The output folder is made once the setup has passed (a run refused for its config or data leaves nothing
  // behind), and rank 0's writes are agreed: a folder it cannot make stops every rank with the same IoError instead
  // of leaving the others waiting in the first step's collectives.
  agree_on(mesh.flat(), [&] {
    if (!root) return;
    std::error_code ec;
    std::filesystem::create_directories(c.out_dir, ec);
    SHARDRT_CHECK(!ec, IoError, "shardrt-train: cannot create log.out_dir '", c.out_dir, "' (", ec.message(),
                  "); choose another folder with --set log.out_dir=DIR");
    std::ofstream(c.out_dir + "/config.json") << c.document.dump(2) << "\n";
    csv = std::make_unique<MetricsCsv>(csv_path, options.resume, resumed.step);
  });
  // Every run ends with a save (and may save every checkpoint.every steps): a folder that cannot be written is an
  // IoError on every rank now, before step 1, not after hours of training. (After the setup and the output
  // folder, so a refused config leaves nothing behind and a bad log.out_dir is reported as itself.)
  check_checkpoint_writable(mesh, c.checkpoint_dir);
  if (root) {
    const std::string precision = c.autocast ? std::string(dtype_name(c.dtype)) + " masters, " +
                                                   dtype_name(*c.autocast) + " autocast"
                                             : dtype_name(c.dtype);
    std::printf("shardrt-train: %s (%lld parameters, %s) on %s; %lld train samples %lldx%lld; batch %lld (%lld per "
                "micro-batch x %lld); %s loss; %s %s; %lld steps%s\n",
                c.model_kind.c_str(), static_cast<long long>(model->num_parameters()),
                precision.c_str(),
                mesh.str().c_str(), static_cast<long long>(train_manifest.samples), static_cast<long long>(R),
                static_cast<long long>(R), static_cast<long long>(c.batch_size), static_cast<long long>(micro_samples),
                static_cast<long long>(micro), loss_name(c.loss), optim::algorithm_name(c.optimizer.algorithm),
                oc.schedule->describe().c_str(), static_cast<long long>(total),
                options.resume ? (", resumed at step " + std::to_string(resumed.step)).c_str() : "");
    std::fflush(stdout);
  }
  const bool tty = root && (c.progress_bar == "on" || (c.progress_bar == "auto" && stdout_is_terminal()));

  double last_val = -1, last_loss = 0;
  BestValidation best = resumed.best;
  const std::string best_dir = best_checkpoint_dir(c);
  DarcyPanel panel;
  int64_t step = resumed.step;
  auto window_start = Clock::now();
  int64_t window_steps = 0;
  int64_t epoch = 0;
  std::optional<StepMeasure> measure;
  if (!options.measure_path.empty()) measure.emplace(mesh);
  // On a GPU the step's loss stays on the device (summed over its micro-batches there) and is read once per log
  // line, so steps between log lines never wait for the device; the finiteness check runs on those reads.
  const bool on_gpu = c.device.is_cuda();
  while (step < total) {
    double loss_sum = 0, lr = 0;
    Tensor device_loss_sum;
    model->train();  // training mode: GeoTransolver's concrete dropout draws its masks (models/module.h)
    if (measure) measure->begin();
    for (int64_t k = 0; k < micro; ++k) {
      data::DarcyBatch b = train->next();
      epoch = b.epoch;
      ShardTensor loss;
      {
        // The autocast precisions: forward and backward in one scope; the optimizer below updates f32 masters.
        std::optional<Autocast> scope;
        if (c.autocast) scope.emplace(*c.autocast);
        const ShardTensor pred = model->forward(on_device(io->inputs(b), c.device)).at(0);
        loss = training_loss(c, pred, on_device(io->target(b), c.device), norm ? &norm->darcy : nullptr);
        backward(loss.local());
      }
      if (on_gpu) {
        NoGradGuard no_grad;
        const Tensor l = loss.local().detach().to(DType::f64);
        device_loss_sum = device_loss_sum.defined() ? add(device_loss_sum, l) : l;
      } else {
        loss_sum += loss.local().item();
      }
      // The optimizer counts micro-batches: every accumulation_steps-th call updates, with the summed grads / k.
      if (k == micro - 1) lr = c.base_lr * opt.current_lr_factor();
      opt.step();
    }
    if (measure) measure->end();
    ++step, ++window_steps;
    const bool last = step == total;
    const bool do_val = val && ((c.val_every > 0 && step % c.val_every == 0) || last);
    const bool checkpointing = (c.checkpoint_every > 0 && step % c.checkpoint_every == 0) ||
                               (options.stop_after > 0 && step == options.stop_after);
    const bool do_log = step % c.log_every == 0 || last || do_val;
    // A GPU step's loss is read when it is logged or a checkpoint records the run (then the check below runs).
    const bool read_loss = !on_gpu || do_log || checkpointing;
    if (on_gpu && read_loss) loss_sum = device_loss_sum.item();
    const double loss = read_loss ? loss_sum / static_cast<double>(micro) : last_loss;
    last_loss = loss;
    // The loss is Replicate (the same on every rank); agreeing anyway keeps a rank-local NaN from going unnoticed.
    if (read_loss)
      agree_or_throw<ValueError>(mesh.flat(), std::isfinite(loss),
                                 "shardrt-train: the loss is " + std::to_string(loss) + " at step " +
                                     std::to_string(step) + "; lower optimizer.lr or set optimizer.max_grad_norm");
    std::optional<double> val_l2;
    if (do_val) {
      std::optional<Autocast> scope;  // validation computes as training does
      if (c.autocast) scope.emplace(*c.autocast);
      val_l2 = validate(*model, *io, *val, norm, val_batches, c.panel_sample, last ? &panel : nullptr, c.device);
      last_val = *val_l2;
      // Every rank computed the same figure (validate gathers whole tensors), so all take the same branch.
      if (c.keep_best && (best.rel_l2 < 0 || *val_l2 < best.rel_l2)) {
        best = {*val_l2, step};
        save_training(mesh, best_dir, opt, norm, step, train->position(), best, micro_samples);
      }
    }
    if (do_log) {
      const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
      StepMetrics m;
      m.step = step, m.epoch = epoch, m.loss = loss, m.lr = lr;
      m.seconds_per_step = secs / static_cast<double>(window_steps);
      m.points_per_second = static_cast<double>(c.batch_size * R * R) / m.seconds_per_step;
      m.peak_mib = peak_mib_over_ranks();
      m.val_rel_l2 = val_l2;
      if (root) {
        csv->write(m);
        std::printf("%s%s\n", tty ? "\r\033[K" : "", progress_line(m, total).c_str());
        std::fflush(stdout);
      }
      window_start = Clock::now(), window_steps = 0;
    } else if (tty && step % std::max<int64_t>(1, total / 200) == 0) {  // a few hundred redraws per run at most
      progress_bar(step, total);
    }
    if (c.checkpoint_every > 0 && step % c.checkpoint_every == 0 && !last)
      save_training(mesh, c.checkpoint_dir, opt, norm, step, train->position(), best, micro_samples);
    if (measure && last) measure->write(options.measure_path);
    if (options.stop_after > 0 && step == options.stop_after && !last) {
      save_training(mesh, c.checkpoint_dir, opt, norm, step, train->position(), best, micro_samples);
      if (root) std::printf("stopped after step %lld; checkpoint %s (continue with --resume)\n",
                            static_cast<long long>(step), c.checkpoint_dir.c_str());
      return last_loss;
    }
  }
  save_training(mesh, c.checkpoint_dir, opt, norm, step, train->position(), best, micro_samples);
  if (root) std::printf("checkpoint: %s (step %lld)\n", c.checkpoint_dir.c_str(), static_cast<long long>(step));

  if (root && c.plots) {
    // Plots are the last thing and rank 0's alone; a missing gnuplot is reported, and fails the run like any error.
    const std::string loss_png = c.out_dir + "/loss.png";
    write_loss_plot(csv_path, loss_png, c.model_kind + " on " + mesh.str(), training_loss_label(c, norm.has_value()));
    std::printf("loss curves: %s\n", loss_png.c_str());
    if (!panel.prediction.empty()) write_panel(c.out_dir + "/panel.png", panel, c.panel_sample, step);
  }
  if (root && val)
    std::printf("validation relative L2 (darcy, %lld samples): %.4f\n", static_cast<long long>(val_batches * micro_samples),
                last_val);
  if (root && c.keep_best && best.rel_l2 >= 0)
    std::printf("best checkpoint: %s (step %lld, validation relative L2 %.4f)\n", best_dir.c_str(),
                static_cast<long long>(best.step), best.rel_l2);
  return val ? last_val : last_loss;
}

}  // namespace shardrt::tools
