// Mean/std normalisation of the Darcy fields, with the statistics taken from the training split.
//
// compute_normalizer is sharded: the split's S*H rows (sample-major) are divided among the mesh's ranks by the
// one split rule (split_extents), each rank reads only its rows and sums them and their squares in f64, and one
// all-reduce (sum, 4 f64 values, over the flat communicator) gives every rank the same totals. std is the
// population standard deviation over every point of every sample (one scalar per field, as PhysicsNeMo's Darcy
// normaliser {permeability: (mean, std), darcy: (mean, std)}).
#pragma once
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "mesh/mesh.h"
#include "runtime/tensor.h"

namespace shardrt::data {

struct ByteCounter;

struct FieldStats {
  double mean = 0;
  double std = 1;
};

struct Normalizer {
  FieldStats permeability, darcy;

  // ValueError naming the field for one not in {permeability, darcy}.
  const FieldStats& field(const std::string& name) const;
  // (x - mean) / std and its inverse, in place on a floating CPU tensor (contiguous).
  void normalize(const std::string& field_name, Tensor& t) const;
  void denormalize(const std::string& field_name, Tensor& t) const;
  template <typename T>
  void normalize(const std::string& field_name, T* data, int64_t count) const;

  // {"permeability": {"mean": m, "std": s}, "darcy": {...}}; save writes it atomically (temp file + rename).
  nlohmann::json to_json() const;
  static Normalizer from_json(const nlohmann::json& j);  // IoError naming what is missing
  void save(const std::string& path) const;
  static Normalizer load(const std::string& path);
  // As checkpoint tensors: "normalizer.permeability.mean" ... (f64 scalars of shape [1]), and back.
  std::map<std::string, Tensor> state() const;
  static Normalizer from_state(const std::map<std::string, Tensor>& state);
};

// The statistics of the split behind `manifest_path` (the training set), computed sharded over `mesh` (see the
// top). `counter`, when given, counts the bytes this rank read. Collective over the mesh.
Normalizer compute_normalizer(const std::string& manifest_path, const Mesh& mesh,
                              std::shared_ptr<ByteCounter> counter = nullptr);

}  // namespace shardrt::data
