"""The PyTorch side of tools/bench-cpu: one CPU workload of issue 10, timed, with the same CLI, the same inputs and
the same output line as shardrt-bench-cpu (see tools/bench_cpu.cpp):
  bench-cpu impl=torch workload=W threads=N reps=R min_ms=.. median_ms=.. checksum=s,q;s,q;...
Input number `seed`: element i (row-major) is sin(0.37 i + seed) * scale in double, cast to f32; grad_output is
cos(0.11 i). Run with the golden venv's python (tools/bench-cpu does)."""
import argparse
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: fine here
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(2)  # tools/bench-cpu checks for torch first and says what to install


def data(shape, seed, scale, offset=0.0):
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.float64)
    return (offset + torch.sin(0.37 * i + seed) * scale).to(torch.float32).reshape(shape)


def grad_output(shape):
    return torch.cos(0.11 * torch.arange(torch.Size(shape).numel(), dtype=torch.float64)).float().reshape(shape)


def make(op):
    if op == "matmul":
        return [data([1024, 1024], 1, 1.0), data([1024, 1024], 2, 1.0)], lambda a, b: a @ b
    if op == "layer_norm":
        return ([data([4096, 384], 1, 2.0, 0.5), data([384], 2, 0.1, 1.0), data([384], 3, 0.1)],
                lambda x, w, b: F.layer_norm(x, [384], w, b, 1e-5))
    if op == "gelu":
        return [data([8, 4096, 128], 1, 3.0)], lambda x: F.gelu(x)  # exact (erf)
    if op == "softmax":
        return [data([4096, 384], 1, 4.0)], lambda x: F.softmax(x, dim=-1)
    if op in ("attention_n256", "attention_n4096"):
        h, n = (6, 256) if op == "attention_n256" else (1, 4096)
        return ([data([1, h, n, 64], s, 1.0) for s in (1, 2, 3)],
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.125))
    if op == "conv2d":
        return ([data([1, 64, 128, 128], 1, 1.0), data([64, 64, 3, 3], 2, 1.0 / 24), data([64], 3, 0.1)],
                lambda x, w, b: F.conv2d(x, w, b, padding=1))
    raise SystemExit(f"--workload: unknown workload {op}")


def sums(t):
    t = t.detach().double()
    return f"{t.sum().item():.9g},{(t * t).sum().item():.9g}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    op, _, mode = a.workload.rpartition("_")
    if mode not in ("fwd", "fwdbwd"):
        raise SystemExit("--workload must end in _fwd or _fwdbwd")
    inputs, forward = make(op)
    bwd = mode == "fwdbwd"
    for t in inputs:
        t.requires_grad_(bwd)
    state = {}

    def step():
        out = forward(*inputs)
        state["out"] = out
        if bwd:
            if "gout" not in state:
                state["gout"] = grad_output(out.shape)
            for t in inputs:
                t.grad = None
            out.backward(state["gout"])

    step()  # warm-up
    step()
    ms = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    checksum = ";".join([sums(state["out"])] + ([sums(t.grad) for t in inputs] if bwd else []))
    print(f"bench-cpu impl=torch workload={a.workload} threads={a.threads} reps={a.reps} "
          f"min_ms={min(ms):.4f} median_ms={statistics.median(ms):.4f} checksum={checksum}")


if __name__ == "__main__":
    main()
