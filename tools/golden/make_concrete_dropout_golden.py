#!/usr/bin/env python3
"""Writes tests/data/golden/concrete_dropout.safetensors: PhysicsNeMo's own ConcreteDropout in training mode, fp64.

Run with the golden venv:  /work/venv-golden/bin/python tools/golden/make_concrete_dropout_golden.py [out_dir]

The module (physicsnemo.nn.module.concrete_dropout.ConcreteDropout, temperature 0.1) draws its noise with
torch.rand_like inside forward; the draw is replaced here by a fixed tensor `u` (uniform in [0, 1) from a seeded
Generator, with a few entries at the ends so that the module's clamp to [1e-7, 1 - 1e-7] acts), recorded in the
file, so the C++ op (models/concrete_dropout.h) can be given the same noise. One forward with a perturbed p_logit,
one backward with a random grad_output. Tensors: x, u (the raw draw), p_logit (0-d), output, grad_output,
grad_input.x, grad.p_logit. Deterministic: rerunning gives the same bits.
"""
import os
import sys
from pathlib import Path
from unittest import mock

import torch
from safetensors.torch import save_file
from physicsnemo.nn.module.concrete_dropout import ConcreteDropout

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "golden"


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(401)
    module = ConcreteDropout(in_features=4, init_p=0.1).double().train()
    with torch.no_grad():
        module.p_logit.add_(0.3)  # away from the init value
    x = torch.randn(3, 5, 4, dtype=torch.float64, generator=gen).requires_grad_(True)
    u = torch.rand(3, 5, 4, dtype=torch.float64, generator=gen)
    u[0, 0, 0], u[0, 0, 1], u[1, 2, 3] = 0.0, 1.0 - 1e-9, 3e-8  # the clamp's two ends
    with mock.patch.object(torch, "rand_like", lambda t, **kw: u.clone()):
        y = module(x)
    grad_output = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    y.backward(grad_output)
    if module.p_logit.grad is None or module.p_logit.grad.abs().item() == 0:
        raise SystemExit("concrete_dropout: p_logit got no grad")
    tensors = {"x": x, "u": u, "p_logit": module.p_logit, "output": y, "grad_output": grad_output,
               "grad_input.x": x.grad, "grad.p_logit": module.p_logit.grad}
    import physicsnemo
    meta = {"module": "physicsnemo.nn.module.concrete_dropout.ConcreteDropout", "temperature": "0.1",
            "physicsnemo_version": physicsnemo.__version__, "torch_version": torch.__version__}
    os.makedirs(OUT, exist_ok=True)
    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(OUT / "concrete_dropout.safetensors"),
              metadata=meta)
    print(f"concrete_dropout: p_logit {module.p_logit.item():.6f}, grad {module.p_logit.grad.item():.6g}, "
          f"|y| {y.norm().item():.6g}")


if __name__ == "__main__":
    main()
