"""The PyTorch side of tools/bench-cpu: one CPU workload of issue 10, timed, with the same CLI, the same inputs and
the same output line as shardrt-bench-cpu (see tools/bench_cpu.cpp):
  bench-cpu impl=torch workload=W threads=N reps=R min_ms=.. median_ms=.. cpu_min_ms=.. cpu_median_ms=..
  checksum=s,q;s,q;...
Input number `seed`: element i (row-major) is sin(0.37 i + seed) * scale in double, cast to f32 (the model-like rows
add a quadratic phase, see mixed_data); grad_output is
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


def mixed_data(shape, seed, scale, offset=0.0):
    """Element i is offset + sin(0.37 i + 0.001 i^2 + seed) * scale, in double, cast to f32. The quadratic phase
    gives every row of a matrix its own frequency: data()'s single frequency makes every matrix rank 2, and a stack
    of blocks built from rank-2 weights is so ill-conditioned that f32 round-off alone moves its grads by 1e-2."""
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.float64)
    return (offset + torch.sin(0.37 * i + 0.001 * (i * i) + seed) * scale).to(torch.float32).reshape(shape)


def transformer_stack(blocks, tokens, E, heads):
    """Pre-norm transformer blocks as in ViT-S, parameters in the order of transformer_stack in bench_cpu.cpp."""
    hidden, head_dim = 4 * E, E // heads
    inputs = [mixed_data([1, tokens, E], 1, 1.0)]
    shapes = []
    for _ in range(blocks):
        shapes += [([E], 0.1, 1.0), ([E], 0.1, 0.0), ([3 * E, E], E ** -0.5, 0.0), ([3 * E], 0.02, 0.0),
                   ([E, E], E ** -0.5, 0.0), ([E], 0.02, 0.0), ([E], 0.1, 1.0), ([E], 0.1, 0.0),
                   ([hidden, E], E ** -0.5, 0.0), ([hidden], 0.02, 0.0), ([E, hidden], hidden ** -0.5, 0.0),
                   ([E], 0.02, 0.0)]
    inputs += [mixed_data(shape, seed, scale, offset) for seed, (shape, scale, offset) in enumerate(shapes, start=2)]

    def forward(x, *p):
        for b in range(blocks):
            w = p[12 * b:12 * (b + 1)]
            h = F.linear(F.layer_norm(x, [E], w[0], w[1], 1e-5), w[2], w[3])
            q, k, v = h.reshape(1, tokens, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, scale=head_dim ** -0.5)
            x = x + F.linear(a.transpose(1, 2).reshape(1, tokens, E), w[4], w[5])
            h = F.gelu(F.linear(F.layer_norm(x, [E], w[6], w[7], 1e-5), w[8], w[9]))
            x = x + F.linear(h, w[10], w[11])
        return x

    return inputs, forward


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
    if op == "vit_s_blocks":
        return transformer_stack(6, 256, 384, 6)
    if op == "attn_stack_7225":
        return transformer_stack(4, 7225, 128, 8)
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
    ms, cpu = [], []
    for _ in range(a.reps):
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    checksum = ";".join([sums(state["out"])] + ([sums(t.grad) for t in inputs] if bwd else []))
    print(f"bench-cpu impl=torch workload={a.workload} threads={a.threads} reps={a.reps} "
          f"min_ms={min(ms):.4f} median_ms={statistics.median(ms):.4f} cpu_min_ms={min(cpu):.4f} "
          f"cpu_median_ms={statistics.median(cpu):.4f} checksum={checksum}")


if __name__ == "__main__":
    main()
