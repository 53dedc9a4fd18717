// check_sharded: the serial fp64 oracle against the sharded run, on every output, input grad and parameter grad,
// with the anti-vacuity checks of check_sharded.h. The harness' own collectives (gathers of the sharded results,
// the cross-rank identity check, the verdict) run in the ledger scope "check_sharded" on the flat communicator.
#include "patches/check_sharded.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "patches/domain_batch.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

// The grad_output of output k is draw k of this generator: identical on every rank and in both runs.
constexpr uint64_t kGradOutputSeed = 20240611;
// The noise that splits a Partial input into rank-distinct parts.
constexpr uint64_t kPartialSeed = 20240612;

// One compared quantity: the sharded result (gathered to a full tensor) against the serial one.
struct Quantity {
  Quantity(std::string n, Tensor g, Tensor w, bool grad)
      : name(std::move(n)), got(std::move(g)), want(std::move(w)), is_grad(grad) {}
  std::string name;
  Tensor got, want;
  bool is_grad = false;  // must also be somewhere nonzero
  double abs = 0, rel = 0;
  bool ok = true;
  bool identical = true;  // the gathered result is the same on every rank
  std::string note;
};

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// Local verdict on one quantity: shapes, finiteness, nonzero grads, and allclose(got, want, atol, rtol).
void compare(Quantity& q, double atol, double rtol) {
  if (q.got.shape() != q.want.shape()) {
    q.ok = false;
    q.note = detail::concat("shape ", shape_str(q.got.shape()), " but serial ", shape_str(q.want.shape()));
    return;
  }
  const std::vector<double> a = q.got.to_vector(), b = q.want.to_vector();
  if (!all_finite(a) || !all_finite(b)) {
    q.ok = false;
    q.note = "not finite";
    return;
  }
  double ref = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    q.abs = std::max(q.abs, e);
    ref = std::max(ref, std::fabs(b[i]));
    if (e > atol + rtol * std::fabs(b[i])) q.ok = false;
  }
  q.rel = ref > 0 ? q.abs / ref : q.abs;
  if (q.is_grad && std::all_of(a.begin(), a.end(), [](double x) { return x == 0; })) {
    q.ok = false;
    q.note = "all zero (vacuous)";
  }
}

// Whether each tensor is the same on every rank, with one all-reduce: the max over ranks of [v, -v] equals
// [v, -v] exactly when every rank holds v.
void check_identical(const Communicator& flat, std::vector<Quantity>& qs) {
  std::vector<double> v;
  for (const Quantity& q : qs) {
    const std::vector<double> x = q.got.to_vector();
    v.insert(v.end(), x.begin(), x.end());
  }
  const std::size_t n = v.size();
  Tensor buf = Tensor::empty({static_cast<int64_t>(2 * n)}, DType::f64);
  double* p = buf.data<double>();
  for (std::size_t i = 0; i < n; ++i) p[i] = v[i], p[n + i] = -v[i];
  flat.all_reduce(buf, ReduceOp::max);
  std::size_t at = 0;
  for (Quantity& q : qs) {
    for (int64_t i = 0; i < q.got.numel(); ++i, ++at)
      if (!(p[at] == v[at] && -p[n + at] == v[at])) q.identical = false;
  }
}

// The placements with Partial read as Replicate: the layout of a Partial input's data, and of its grad (grads are
// complete, never Partial).
Placements partial_as_replicate(Placements p) {
  for (Placement& q : p)
    if (q.is_partial()) q = Placement::Replicate();
  return p;
}

// This rank's local tensor of a sharded input: its window of `full` along Shard axes; along a Partial axis the
// parts differ by rank (coordinate 0 holds its value minus (n - 1) times a fixed noise, the others the noise),
// so only their sum over the axis is the input. Not recorded.
ShardTensor sharded_input(const Tensor& full, const Mesh& mesh, const Placements& placements,
                          const AxisExtents& extents) {
  NoGradGuard no_grad;
  const Placements layout = partial_as_replicate(placements);
  const ShardTensor d = extents.empty() ? distribute(full, mesh, layout) : distribute(full, mesh, layout, extents);
  Tensor local = d.local().clone();
  Generator gen(kPartialSeed);
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (!placements[m].is_partial()) continue;
    const Tensor noise =
        distribute(randn(full.shape(), {full.dtype(), full.device()}, &gen), mesh, layout, d.spec().all_extents())
            .local();
    local = mesh.coords()[m] == 0 ? sub(local, mul_scalar(noise, mesh.shape()[m] - 1)) : noise.clone();
  }
  return from_local(local, mesh, placements, d.spec().all_extents(), {.allow_partial = true});
}

// Evidence that input `x` is really distributed: an axis of several ranks holding rank-distinct parts of it, or
// one along which every rank holds less than the whole dim (a decomposition that leaves one rank everything is
// not sharding). Empty when there is none.
std::string sharding_evidence(std::size_t i, const ShardTensor& x) {
  for (int m = 0; m < x.mesh().ndim(); ++m) {
    const Placement& p = x.placements()[m];
    if (p.is_partial() && x.mesh().shape()[m] > 1)
      return detail::concat("input ", i, " ", placements_str(x.placements()), ": parts over the ", x.mesh().shape()[m],
                            " ranks of axis '", x.mesh().axis_names()[m], "'");
    if (!p.is_shard()) continue;
    const auto& e = x.spec().extents(m);
    const int64_t largest = *std::max_element(e.begin(), e.end());
    if (largest < x.global_shape()[p.dim])
      return detail::concat("input ", i, " ", placements_str(x.placements()), " on axis '", x.mesh().axis_names()[m],
                            "': local extents at most ", largest, " of ", x.global_shape()[p.dim]);
  }
  return "";
}

// Evidence for ShardedCase::empty_rank_case: input `x` has a zero-size shard on an axis of several ranks.
std::string empty_shard_evidence(std::size_t i, const ShardTensor& x) {
  for (int m = 0; m < x.mesh().ndim(); ++m) {
    if (!x.placements()[m].is_shard() || x.mesh().shape()[m] < 2) continue;
    const auto& e = x.spec().extents(m);
    if (std::find(e.begin(), e.end(), 0) != e.end())
      return detail::concat("input ", i, " ", placements_str(x.placements()), " on axis '", x.mesh().axis_names()[m],
                            "': a zero-size shard (rank without data)");
  }
  return "";
}

// Seeds backward on the outputs that carry grad (every rank takes the same ones: the graph is the same).
void run_backward(const std::vector<ShardTensor>& outputs, const std::vector<Tensor>& grads) {
  std::vector<ShardTensor> roots;
  std::vector<Tensor> seeds;
  for (std::size_t k = 0; k < outputs.size(); ++k)
    if (requires_grad(outputs[k].local())) roots.push_back(outputs[k]), seeds.push_back(grads[k]);
  if (!roots.empty()) backward_global(roots, seeds);
}

// The device of the sharded run: the case's, or the mesh's under SHARDRT_CHECK_DEVICE=cuda.
Device run_device(const Mesh& mesh, const ShardedCase& c) {
  const char* env = std::getenv("SHARDRT_CHECK_DEVICE");
  const std::string want = env ? env : "";
  if (want.empty() || want == "cpu") return c.device;
  SHARDRT_CHECK(want == "cuda", ValueError, "check_sharded '", c.name, "': SHARDRT_CHECK_DEVICE is '", want,
                "'; expected cpu or cuda");
  SHARDRT_CHECK(mesh.device().is_cuda(), ValueError, "check_sharded '", c.name,
                "': SHARDRT_CHECK_DEVICE=cuda, but the mesh is bound to ", mesh.device().str(),
                " (no usable CUDA device); unset it to run on the CPU");
  return mesh.device();
}

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

}  // namespace

ShardedCheckResult check_sharded(const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c) {
  const std::size_t n_in = c.inputs.size();
  SHARDRT_CHECK(c.placements.size() == n_in, ValueError, "check_sharded '", c.name, "': ", n_in, " inputs but ",
                c.placements.size(), " placements");
  SHARDRT_CHECK(c.extents.empty() || c.extents.size() == n_in, ValueError, "check_sharded '", c.name, "': ", n_in,
                " inputs but ", c.extents.size(), " extents");
  SHARDRT_CHECK(c.input_requires_grad.empty() || c.input_requires_grad.size() == n_in, ValueError, "check_sharded '",
                c.name, "': ", n_in, " inputs but ", c.input_requires_grad.size(), " requires_grad flags");
  auto wants_grad = [&](std::size_t i) { return c.input_requires_grad.empty() || c.input_requires_grad[i]; };

  // ---- serial oracle: one rank (MPI_COMM_SELF) with the same axis names, f64, every input Replicate ----
  CommOptions opts;
  opts.ledger = std::make_shared<CommLedger>();  // keeps the oracle's (trivial) collectives out of the caller's
  opts.cuda_device = mesh.device().is_cuda() ? mesh.device().index : CommOptions::no_gpu;
  const Mesh serial(MPI_COMM_SELF, mesh.axis_names(), std::vector<int>(mesh.ndim(), 1), mesh.axis_roles(), opts);
  const Placements replicated(mesh.ndim(), Placement::Replicate());
  std::vector<Tensor> s_leaves, s_params;
  std::vector<ShardTensor> s_inputs;
  for (std::size_t i = 0; i < n_in; ++i) {
    Tensor x = c.inputs[i].detach().to(DType::f64).clone();
    if (wants_grad(i)) set_requires_grad(x);
    s_leaves.push_back(x);
    s_inputs.push_back(from_local(x, serial, replicated));
  }
  for (const Tensor& p : c.params) {
    Tensor q = p.detach().to(DType::f64).clone();
    set_requires_grad(q);
    s_params.push_back(q);
  }
  const std::vector<ShardTensor> s_out = fn(s_inputs, s_params);

  // ---- sharded run: each input's local window is a leaf of its own (its grad is this rank's slice) ----
  const Device device = run_device(mesh, c);
  std::vector<Tensor> leaves, params;
  std::vector<ShardTensor> inputs;
  const AxisExtents no_extents;
  for (std::size_t i = 0; i < n_in; ++i) {
    const ShardTensor d = sharded_input(c.inputs[i].detach().to(device), mesh, c.placements[i],
                                        c.extents.empty() ? no_extents : c.extents[i]);
    Tensor x = d.local().clone();
    if (wants_grad(i)) set_requires_grad(x);
    leaves.push_back(x);
    inputs.push_back(from_local(x, mesh, d.placements(), d.spec().all_extents(), {.allow_partial = true}));
  }
  for (const Tensor& p : c.params) {
    Tensor q = p.detach().to(device).clone();
    set_requires_grad(q);
    params.push_back(q);
  }
  const std::vector<ShardTensor> out = fn(inputs, params);

  // ---- one random grad_output per output, the same everywhere ----
  std::vector<Quantity> qs;
  const bool same_outputs = out.size() == s_out.size();
  Generator gen(kGradOutputSeed);
  std::vector<Tensor> grads;
  for (const ShardTensor& o : s_out) grads.push_back(randn(o.global_shape(), {DType::f64}, &gen));
  run_backward(s_out, grads);
  if (same_outputs) {
    bool shapes_match = true;
    for (std::size_t k = 0; k < out.size(); ++k)
      shapes_match = shapes_match && out[k].global_shape() == s_out[k].global_shape();
    std::vector<Tensor> device_grads;
    for (const Tensor& g : grads) device_grads.push_back(g.to(device));
    if (shapes_match) run_backward(out, device_grads);
  }

  // Parameter grads are complete over the domain axes and per-rank estimates over the batch axes (domain_batch.h):
  // average them there as the optimizer will, once, and compare the result. A patch that also summed them over a
  // batch axis counts the batch twice and fails.
  reduce_batch_grads(mesh, params);

  const Communicator& flat = mesh.flat();
  auto scope = flat.ledger().scope("check_sharded");
  {
    NoGradGuard no_grad;
    if (same_outputs)
      for (std::size_t k = 0; k < out.size(); ++k)
        qs.emplace_back(detail::concat("output ", k, " ", placements_str(out[k].placements())),
                        full_tensor(out[k]).to(Device::cpu()), full_tensor(s_out[k]), false);
    for (std::size_t i = 0; i < n_in; ++i) {
      if (!wants_grad(i)) continue;
      // Zeros for a missing grad keep the gathers below the same on every rank (and fail the nonzero check).
      Tensor g = grad_of(leaves[i]), sg = grad_of(s_leaves[i]);
      if (!g.defined()) g = zeros(leaves[i].shape(), {leaves[i].dtype(), leaves[i].device()});
      if (!sg.defined()) sg = zeros(s_leaves[i].shape(), {DType::f64});
      Tensor full = full_tensor(
          from_local(g, mesh, partial_as_replicate(inputs[i].placements()), inputs[i].spec().all_extents()));
      qs.emplace_back(detail::concat("input ", i, " grad ", placements_str(inputs[i].placements())),
                      full.to(Device::cpu()), sg, true);
    }
    for (std::size_t j = 0; j < params.size(); ++j) {
      Tensor g = grad_of(params[j]), sg = grad_of(s_params[j]);
      if (!g.defined()) g = zeros(params[j].shape(), {params[j].dtype(), params[j].device()});
      if (!sg.defined()) sg = zeros(s_params[j].shape(), {DType::f64});
      qs.emplace_back(detail::concat("param ", j, " grad"), g.to(Device::cpu()), sg, true);
    }
  }
  for (Quantity& q : qs) compare(q, c.atol, c.rtol);
  check_identical(flat, qs);

  // Sharding is active when some input is split so that every rank holds less than the whole of a dim, or is
  // made of rank-distinct parts.
  std::string sharding = mesh.size() == 1 ? "n/a on one rank" : "";
  for (std::size_t i = 0; i < n_in && sharding.empty(); ++i)
    sharding = c.empty_rank_case ? empty_shard_evidence(i, inputs[i]) : sharding_evidence(i, inputs[i]);
  const bool active = !sharding.empty();
  if (!active)
    sharding = c.empty_rank_case
                   ? "INACTIVE: an empty-rank case where no input has a zero-size shard -> FAIL"
                   : "INACTIVE: no input is split so that every rank holds less than a whole dim, nor Partial -> FAIL";

  // ---- the verdict, agreed: max over ranks of (abs, rel, failed, not identical) per quantity ----
  constexpr int kFields = 4;
  const std::size_t nq = qs.size();
  Tensor red = Tensor::empty({static_cast<int64_t>(kFields * nq + 1)}, DType::f64);
  double* r = red.data<double>();
  for (std::size_t k = 0; k < nq; ++k) {
    r[kFields * k] = qs[k].abs, r[kFields * k + 1] = qs[k].rel;
    r[kFields * k + 2] = qs[k].ok ? 0 : 1, r[kFields * k + 3] = qs[k].identical ? 0 : 1;
  }
  r[kFields * nq] = active && same_outputs ? 0 : 1;
  flat.all_reduce(red, ReduceOp::max);

  ShardedCheckResult res;
  res.ok = r[kFields * nq] == 0;
  std::string& rep = res.report;
  rep = detail::concat("check_sharded '", c.name, "' on ", mesh.str(), " (atol ", fmt(c.atol), ", rtol ", fmt(c.rtol),
                       ")\n");
  if (!same_outputs)
    rep += detail::concat("  outputs: ", out.size(), " sharded but ", s_out.size(), " serial -> FAIL\n");
  for (std::size_t k = 0; k < nq; ++k) {
    const double* f = r + kFields * k;
    const bool ok = f[2] == 0 && f[3] == 0;
    res.ok = res.ok && ok;
    res.max_abs_error = std::max(res.max_abs_error, f[0]);
    res.max_rel_error = std::max(res.max_rel_error, f[1]);
    rep += detail::concat("  ", qs[k].name, ": max abs ", fmt(f[0]), ", rel ", fmt(f[1]),
                          f[3] == 0 ? "" : ", NOT identical on every rank", qs[k].note.empty() ? "" : ", ", qs[k].note,
                          ok ? " -> ok" : " -> FAIL", "\n");
  }
  rep += detail::concat("  sharding: ", sharding, "\n  verdict: ", res.ok ? "ok" : "FAIL", "\n");
  if (mesh.rank() == 0) std::printf("%s", rep.c_str());
  return res;
}

}  // namespace shardrt
