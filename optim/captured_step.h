// A whole training step in one CUDA graph: forward, backward, grad reduction and the optimizer's update, captured
// once for fixed shapes and fixed tensor storage and then replayed with one graph launch per step, the loss
// written to a device slot, no host synchronisation inside.
//
// Why the schedule still advances on replay: a graph bakes every host scalar of its kernel launches in. The
// optimizer's CUDA updates therefore read the learning rate and the step count from device memory, and the graph
// contains the tiny kernel that advances them (kernels/cuda/optim_update.h: advance_step); the schedule's factors
// for the planned steps are evaluated on the host before the capture into a device table the kernel indexes. So
// replay k computes exactly what eager step k computes, bias corrections and warm-up included (the eager CUDA
// optimizer runs the same kernels with the same scalars, so the two agree bit for bit).
//
// Index ops (index_select, gather, scatter_add) check their indices on the host, which a capture forbids; inside
// a capture they queue a device-side bounds check that raises a flag (kernels/cuda/index.h), and an out-of-range
// index is ignored by the kernels, never read or written out of bounds. check() reads that flag after replays.
//
// What is refused (typed errors at construction): CPU parameters (DeviceError), more than one rank (DeviceError:
// the MPI backend stages device buffers through the host, which cannot be captured; NCCL collectives can be, but
// the checked-collective agreement and the ledger run host-side MPI work per call, so multi-rank capture is not
// wired up yet), accumulation_steps != 1 (ValueError: one graph is one optimizer step), Muon (DeviceError: its
// rate is a host scalar), planned_steps < 1 (ValueError).
//
// Before constructing one, run at least one eager step of the same function: first calls create cuBLAS/cuDNN
// handles, plans and workspaces, which must not happen inside a capture (CUDA refuses; the capture then throws
// CudaError). Every tensor the step writes that outlives it (parameters, grads, optimizer state, inputs the caller
// refills in place, the loss slot) must exist before the capture; temporaries come from the stream-ordered
// caching allocator and become graph memory nodes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "optim/optimizer.h"
#include "runtime/cuda/graph.h"
#include "runtime/tensor.h"

namespace shardrt::optim {

class CapturedStep {
 public:
  // `forward_backward` runs one micro-batch's forward and backward on the optimizer's device and returns the
  // scalar loss; the step is forward_backward(), optimizer.step(), then the loss copied into loss_slot().
  // Captures it (nothing runs) for the optimizer's next `planned_steps` steps.
  CapturedStep(Optimizer& optimizer, std::function<Tensor()> forward_backward, int64_t planned_steps);
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // Queues one step; never synchronises. ValueError once the planned steps are used up (capture a new one).
  void replay();
  // Synchronises the stream and throws ValueError when an index op of a replayed step met an out-of-range index,
  // or when a step ran past the schedule table (the weights then did not move for it).
  void check() const;
  // f32 [1] on the device: the loss of the latest replayed step.
  const Tensor& loss_slot() const { return loss_slot_; }
  int64_t replays() const { return replays_; }
  int64_t planned_steps() const { return planned_; }

 private:
  Optimizer& optimizer_;
  int device_ = 0;
  int64_t planned_ = 0, replays_ = 0;
  Tensor loss_slot_;
  Tensor lr_table_;  // f64 [planned_]: the schedule factors of the planned steps, read by the graph
  CudaGraph graph_;
};

}  // namespace shardrt::optim
