// shardrt-train's configuration: one JSON document, checked key by key against the defaults below, with any key
// overridable from the command line (--set optimizer.lr=1e-3). docs/training.md is the reference.
//
// Every key of the document must be one the defaults know (a misspelt key is an error, never silently ignored), and
// of the default's JSON type (a number where a number is expected; null defaults accept anything). model.args is
// the exception: it is the model's PhysicsNeMo constructor arguments, which build_model checks itself.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optim/optimizer_config.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace shardrt::tools {

enum class LossKind { relative_l2, mse, huber };

struct TrainConfig {
  nlohmann::json document;  // the merged document (defaults + file + --set), as run; saved next to the metrics

  std::string model_kind;
  nlohmann::json model_args;
  uint64_t model_seed = 0;
  DType dtype = DType::f32;  // "precision": f32 or f64 (parameters, data, the loss)
  // "precision": "bf16-autocast" / "f16-autocast": dtype f32, and forward + backward under Autocast(*autocast)
  // (autograd/autocast.h). nullopt for f32 and f64.
  std::optional<DType> autocast;
  Device device = Device::cpu();  // "device": cpu or cuda:N (model, batches, optimizer arenas)

  optim::OptimizerConfig optimizer;  // accumulation_steps is derived (see batch_size)
  double base_lr = 1e-3;
  nlohmann::json schedule;  // {"kind": ..., its arguments}; built once the total step count is known

  LossKind loss = LossKind::relative_l2;
  double huber_delta = 1.0;
  // "loss.units": "physical" takes the loss of the fields in physical units (the normaliser undone on the model's
  // output and the target), the quantity validation reports; "normalized" takes it of the normalised fields. With
  // relative_l2 the two differ in more than scale: a normalised pressure has its mean taken off, so its norm, the
  // denominator, is that of the deviation from the mean, not of the pressure.
  bool loss_physical_units = true;

  std::string train_manifest, val_manifest;
  // Global samples per optimizer step, and the samples each ddp group (each domain group) takes per forward
  // ("data.micro_batch"; 0 in the document: batch_size / ddp, the whole share in one forward). The mesh takes
  // ddp * micro_batch samples per micro-batch, and batch_size / (ddp * micro_batch) micro-batches are accumulated:
  // the same objective on every mesh and for every micro_batch.
  int64_t batch_size = 1, micro_batch = 1;
  bool shuffle = true, normalize = true;
  uint64_t data_seed = 0;

  int ddp = 1, domain = 1;
  int64_t steps = 0, epochs = 0;  // steps wins when both are set; one of them must be
  int64_t log_every = 10, val_every = 0, val_samples = 0;  // val_samples 0: the whole split
  std::string out_dir = "train-out", checkpoint_dir;       // checkpoint_dir "": <out_dir>/checkpoint
  int64_t checkpoint_every = 0;                            // 0: only at the end
  bool keep_best = true;  // "checkpoint.best": also keep the checkpoint of the best validation, <checkpoint_dir>-best
  bool plots = true;
  // "auto": a bar between the lines when rank 0's stdout is a terminal (mpiexec gives rank 0 a pseudo-terminal
  // even when its own output goes to a file, so "off" keeps logs free of carriage returns), "on", "off".
  std::string progress_bar = "auto";
  int64_t panel_sample = 0;  // which validation sample the PNG panel shows
};

// The defaults: every key a document may hold.
nlohmann::json default_train_document();

// Applies "a.b.c=value" (value parsed as JSON; a bare word is a string) to `doc`: the key must exist (ValueError
// naming it and the keys beside it).
void apply_override(nlohmann::json& doc, const std::string& assignment);

// Defaults, then the file's keys, then the overrides, then the typed struct. ValueError / IoError naming the
// file and the key for anything wrong.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides);

const char* loss_name(LossKind k);

}  // namespace shardrt::tools
