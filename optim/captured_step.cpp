#include "optim/captured_step.h"

#include <cstring>
#include <vector>

#include "kernels/cuda/index.h"
#include "kernels/cuda/optim_update.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::optim {

CapturedStep::CapturedStep(Optimizer& optimizer, std::function<Tensor()> forward_backward, int64_t planned_steps)
    : optimizer_(optimizer), planned_(planned_steps) {
  const Device dev = optimizer.device();
  SHARDRT_CHECK(dev.is_cuda(), DeviceError, "CapturedStep: the optimizer's parameters are on ", dev.str(),
                "; a CUDA graph needs them on a CUDA device (Module::to before building the optimizer)");
  SHARDRT_CHECK(optimizer.mesh_.size() == 1, DeviceError, "CapturedStep: the optimizer spans ",
                optimizer.mesh_.str(),
                "; capturing a multi-rank step is not supported (the MPI backend stages device buffers through the "
                "host, which a graph cannot contain, and NCCL's checked collectives agree over MPI on the host "
                "before each call): replay one rank, or run multi-rank steps eagerly");
  SHARDRT_CHECK(optimizer.config_.accumulation_steps == 1, ValueError, "CapturedStep: accumulation_steps is ",
                optimizer.config_.accumulation_steps, "; one captured step is one optimizer update, so it must be 1");
  SHARDRT_CHECK(optimizer.config_.algorithm != Algorithm::muon_adamw, DeviceError,
                "CapturedStep: Muon's learning rate is a host scalar, which a graph would freeze; capture adamw or "
                "sgd, or step Muon eagerly");
  SHARDRT_CHECK(planned_steps >= 1, ValueError, "CapturedStep: planned_steps ", planned_steps, " must be >= 1");
  SHARDRT_CHECK(optimizer.micro_ == 0, ValueError, "CapturedStep: the optimizer is inside an accumulation window");
  device_ = dev.index;

  // The schedule of the planned steps, evaluated on the host now, as the eager step would evaluate it then.
  const int64_t first = optimizer.steps_;
  std::vector<double> factors(static_cast<size_t>(planned_steps));
  for (int64_t k = 0; k < planned_steps; ++k)
    factors[static_cast<size_t>(k)] =
        optimizer.config_.schedule ? optimizer.config_.schedule->factor(first + k) : 1.0;
  lr_table_ = from_vector(factors, {planned_steps}, {DType::f64}).to(dev);
  loss_slot_ = zeros({1}, {DType::f32, dev});
  kernels::cuda::index_error_flag(device_);  // allocated now: allocation cannot be captured
  cuda_synchronize(device_);                 // nothing of the setup may be pending when the capture begins

  // During the capture the optimizer reads the factor table; the host counters advance once as if a step ran,
  // and are put back afterwards (nothing ran: replays count the steps).
  optimizer.lr_table_ = lr_table_;
  optimizer.lr_table_first_ = first;
  struct Restore {
    Optimizer& o;
    int64_t steps;
    ~Restore() {
      o.lr_table_ = Tensor();
      o.lr_table_first_ = 0;
      o.steps_ = steps;
      o.micro_ = 0;
    }
  } restore{optimizer, first};
  graph_.capture(device_, [&] {
    const Tensor loss = forward_backward();
    SHARDRT_CHECK(loss.defined() && loss.numel() == 1 && loss.device() == dev, ValueError,
                  "CapturedStep: the step function must return a one-element loss on ", dev.str(), ", got ",
                  loss.defined() ? loss.str() : std::string("undefined"));
    optimizer.step();
    loss_slot_.copy_(loss.detach().reshape({1}));
  });
}

void CapturedStep::replay() {
  SHARDRT_CHECK(replays_ < planned_, ValueError, "CapturedStep::replay: all ", planned_,
                " planned steps are replayed; capture a new step for the next ones (the schedule table covers "
                "only the planned steps)");
  graph_.replay();
  ++replays_;
  ++optimizer_.steps_;
}

void CapturedStep::check() const {
  const bool index_error = kernels::cuda::take_index_error(device_);  // synchronises
  SHARDRT_CHECK(!index_error, ValueError, "CapturedStep: an index op (index_select, gather or scatter_add) met an "
                "index out of range in a replayed step on cuda:", device_,
                "; the bad index was ignored but the step is wrong: run the step eagerly to see the op and value");
  kernels::cuda::DeviceStepScalars s;
  const Tensor bytes = optimizer_.step_scalars_.to(Device::cpu());
  std::memcpy(&s, bytes.raw_data(), sizeof s);
  SHARDRT_CHECK(s.overrun == 0, ValueError, "CapturedStep: a step ran past the ", planned_,
                " planned schedule factors (device step ", s.step, ")");
  SHARDRT_CHECK(s.step == optimizer_.steps_, ValueError, "CapturedStep: the device counts ", s.step,
                " steps but the optimizer ", optimizer_.steps_, "; eager and replayed steps were interleaved wrongly");
}

}  // namespace shardrt::optim
