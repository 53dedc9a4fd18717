#!/usr/bin/env python3
"""Check a folder of goldens written by make_goldens.py, from the files alone: the key set and metadata of every
<case>.safetensors, the side files (config.json, inputs, grad_output) against it, and the numbers themselves, by
rebuilding each module from its config.json, loading its param.* tensors with load_state_dict(strict=True) and
running forward and backward again on input.* and grad_output, and once more through models-spec.md's math
written independently (spec_reference.py). The two checkpoints are loaded the way PhysicsNeMo
and PyTorch load them (Module.from_checkpoint, torch.load) and compared with the param.* tensors.

    tools/golden/check_goldens.py --physicsnemo-src DIR --dir tests/data/golden"""
import argparse
import io
import json
import os
import sys
import warnings
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_venv import ensure_golden_venv  # noqa: E402

ensure_golden_venv()
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import make_goldens  # noqa: E402
import physicsnemo_models  # noqa: E402
import spec_reference  # noqa: E402

TOL = 1e-12  # the same module on the same numbers: only thread-count reduction order may differ
SPEC_TOL = 1e-11  # models-spec.md's math in other op orders (explicit softmax, patch GEMM, LayerNorm by hand)


def fail(case, what):
    raise SystemExit(f"check_goldens: {case}: {what}")


def same(case, name, a, b, tol=TOL):
    if a.shape != b.shape or a.dtype != b.dtype:
        fail(case, f"{name}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    err = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item() if a.numel() else 0.0
    if err > tol:
        fail(case, f"{name}: relative difference {err:.3g} > {tol:g}")
    return err


def check_case(case, spec, folder, src):
    base = os.path.join(folder, case)
    with safe_open(f"{base}.safetensors", "pt") as f:
        meta = f.metadata()
    t = load_file(f"{base}.safetensors")
    expected_meta = {"model", "config", "inputs", "physicsnemo_version", "torch_version", "case"}
    if set(meta) != expected_meta:
        fail(case, f"metadata keys {sorted(meta)}, expected {sorted(expected_meta)}")
    if meta["case"] != case or meta["model"] != spec["model"] or meta["inputs"] != ",".join(spec["inputs"]):
        fail(case, f"metadata {meta}")
    config = json.loads(meta["config"])
    with open(f"{base}.config.json") as f:
        if json.load(f) != config or config != spec["config"]:
            fail(case, "config.json, the metadata config and the case table differ")
    if any(v.dtype != torch.float64 or not v.is_contiguous() for v in t.values()):
        fail(case, "a tensor is not contiguous fp64")

    torch.manual_seed(0)  # any init: every state_dict entry is overwritten below
    kwargs = physicsnemo_models.constructor_kwargs(config)
    net = (physicsnemo_models.hybrid_vit_class(src) if spec["model"] == "vit"
           else physicsnemo_models.flare_class())(**kwargs).double().eval()
    sd_keys = list(net.state_dict())
    param_keys = [k for k, _ in net.named_parameters()]
    inputs = list(spec["inputs"])
    grad_inputs = [k for k in inputs if k != "time"]
    want = ({f"param.{k}" for k in sd_keys} | {f"input.{k}" for k in inputs} | {"output", "grad_output"}
            | {f"grad_input.{k}" for k in grad_inputs} | {f"grad.{k}" for k in param_keys})
    if set(t) != want:
        fail(case, f"keys: missing {sorted(want - set(t))}, unexpected {sorted(set(t) - want)}")
    for k in inputs:
        if tuple(t[f"input.{k}"].shape) != tuple(spec["inputs"][k]):
            fail(case, f"input.{k} has shape {tuple(t[f'input.{k}'].shape)}, expected {spec['inputs'][k]}")
    if "time" in inputs and not ((t["input.time"] >= 0).all() and (t["input.time"] < 1).all()):
        fail(case, "time outside [0, 1)")

    net.load_state_dict({k: t[f"param.{k}"] for k in sd_keys}, strict=True)
    x = {k: t[f"input.{k}"].clone().requires_grad_(k != "time") for k in inputs}
    out = net(**x)
    same(case, "output", out.detach(), t["output"])
    out.backward(t["grad_output"])
    for k in grad_inputs:
        same(case, f"grad_input.{k}", x[k].grad, t[f"grad_input.{k}"])
    for k, p in net.named_parameters():
        same(case, f"grad.{k}", p.grad, t[f"grad.{k}"])

    # The spec's math, written independently (spec_reference.py), on the same numbers.
    P = {k: t[f"param.{k}"].clone().requires_grad_(k in param_keys) for k in sd_keys}
    x = {k: t[f"input.{k}"].clone().requires_grad_(k != "time") for k in inputs}
    out = spec_reference.vit(P, x["x"], config) if spec["model"] == "vit" else spec_reference.flare(P, x, config)
    worst = same(case, "spec output", out.detach(), t["output"], SPEC_TOL)
    out.backward(t["grad_output"])
    for k in grad_inputs:
        worst = max(worst, same(case, f"spec grad_input.{k}", x[k].grad, t[f"grad_input.{k}"], SPEC_TOL))
    for k in param_keys:
        worst = max(worst, same(case, f"spec grad.{k}", P[k].grad, t[f"grad.{k}"], SPEC_TOL))

    side_inputs = load_file(f"{base}.inputs.safetensors")
    if set(side_inputs) != set(inputs):
        fail(case, f"inputs.safetensors holds {sorted(side_inputs)}")
    for k in inputs:
        same(case, f"inputs.safetensors {k}", side_inputs[k], t[f"input.{k}"], 0.0)
    side_gout = load_file(f"{base}.grad_output.safetensors")
    if set(side_gout) != {"output"}:
        fail(case, f"grad_output.safetensors holds {sorted(side_gout)}")
    same(case, "grad_output.safetensors", side_gout["output"], t["grad_output"], 0.0)

    if case == "flare_irregular":
        # The archive's model.pt holds the fp64 tensors exactly; from_checkpoint rebuilds the module from
        # args.json in its default float32 and casts them into it, so it is compared at float32 round-off.
        with zipfile.ZipFile(f"{base}.mdlus") as z:
            stored = torch.load(io.BytesIO(z.read("model.pt")), weights_only=True)
        if list(stored) != sd_keys:
            fail(case, ".mdlus model.pt keys differ from state_dict order")
        for k, v in stored.items():
            same(case, f".mdlus model.pt {k}", v, t[f"param.{k}"], 0.0)
        from physicsnemo import Module
        loaded = Module.from_checkpoint(f"{base}.mdlus")
        if type(loaded).__name__ != "FLARE":
            fail(case, f".mdlus loads as {type(loaded).__name__}")
        for k, v in loaded.state_dict().items():
            same(case, f".mdlus from_checkpoint {k}", v.double(), t[f"param.{k}"], 1e-7)
    if case == "vit2d":
        sd = torch.load(f"{base}.pt", weights_only=True)
        if list(sd) != sd_keys:
            fail(case, ".pt keys differ from state_dict order")
        for k, v in sd.items():
            same(case, f".pt {k}", v, t[f"param.{k}"], 0.0)
    print(f"{case}: ok ({len(t)} tensors; the rebuilt module reproduces output and every grad to {TOL:g}, "
          f"models-spec.md's math to {worst:.1e})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--physicsnemo-src", required=True)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    for case, spec in make_goldens.CASES.items():
        check_case(case, spec, a.dir, a.physicsnemo_src)


if __name__ == "__main__":
    main()
