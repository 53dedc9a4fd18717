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

import geotransolver_cases  # noqa: E402
import gumbel_noise  # noqa: E402
import make_goldens  # noqa: E402
import physicsnemo_models  # noqa: E402
import spec_reference  # noqa: E402
import spec_reference_geotransolver  # noqa: E402

TOL = 1e-12  # the same module on the same numbers: only thread-count reduction order may differ
SPEC_TOL = 1e-11  # models-spec.md's math in other op orders (explicit softmax, patch GEMM, LayerNorm by hand)


# Grads that are exactly zero in exact arithmetic: a bias added to every key of a softmax attention adds the same
# q.b to each of a query's logits, which the softmax cancels (GALE's and GALE_FA's cross_k). PyTorch leaves
# round-off there (~1e-17 of the largest grad), so a relative comparison is meaningless: such a grad must be below
# ZERO_GRAD_TOL of the case's largest grad on both sides instead.
ZERO_GRADS = (".Attn.cross_k.bias",)
ZERO_GRAD_TOL = 1e-13


def is_zero_grad(name):
    return name.endswith(ZERO_GRADS)


def fail(case, what):
    raise SystemExit(f"check_goldens: {case}: {what}")


def same(case, name, a, b, tol=TOL, zero_scale=None):
    if a.shape != b.shape or a.dtype != b.dtype:
        fail(case, f"{name}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    if zero_scale is not None:  # an exact zero up to round-off (ZERO_GRADS)
        err = max(a.abs().max().item(), b.abs().max().item()) / zero_scale
        if err > ZERO_GRAD_TOL:
            fail(case, f"{name}: {err:.3g} of the largest grad, expected round-off of an exact zero")
        return 0.0
    err = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item() if a.numel() else 0.0
    if err > tol:
        fail(case, f"{name}: relative difference {err:.3g} > {tol:g}")
    return err


def check_case(case, spec, folder, src):
    base = os.path.join(folder, case)
    with safe_open(f"{base}.safetensors", "pt") as f:
        meta = f.metadata()
    t = load_file(f"{base}.safetensors")
    geo = spec["model"] == "geotransolver"
    expected_meta = {"model", "config", "inputs", "physicsnemo_version", "torch_version", "case"}
    if geo:
        expected_meta |= {"gumbel_noise", "radius_search"}
    if set(meta) != expected_meta:
        fail(case, f"metadata keys {sorted(meta)}, expected {sorted(expected_meta)}")
    noise_names = [k[len("input."):] for k in t if k.startswith("input.gumbel_u.")]
    inputs = list(spec["inputs"]) + [n for n in meta["inputs"].split(",") if n.startswith("gumbel_u.")]
    if meta["case"] != case or meta["model"] != spec["model"] or meta["inputs"] != ",".join(inputs):
        fail(case, f"metadata {meta}")
    if sorted(noise_names) != sorted(inputs[len(spec["inputs"]):]):
        fail(case, f"Gumbel noise tensors {sorted(noise_names)} vs metadata inputs {meta['inputs']}")
    if geo and (meta["gumbel_noise"] != (make_goldens.GUMBEL_RECORDED if noise_names else "none")
                or bool(noise_names) != bool(spec["config"].get("plus"))):
        fail(case, f"gumbel_noise metadata '{meta['gumbel_noise']}' with {len(noise_names)} noise inputs")
    config = json.loads(meta["config"])
    with open(f"{base}.config.json") as f:
        if json.load(f) != config or config != spec["config"]:
            fail(case, "config.json, the metadata config and the case table differ")
    if any(v.dtype != torch.float64 or not v.is_contiguous() for v in t.values()):
        fail(case, "a tensor is not contiguous fp64")

    torch.manual_seed(0)  # any init: every state_dict entry is overwritten below
    kwargs = physicsnemo_models.constructor_kwargs(config)
    net = {"vit": lambda: physicsnemo_models.hybrid_vit_class(src), "flare": physicsnemo_models.flare_class,
           "geotransolver": physicsnemo_models.geotransolver_class}[spec["model"]]()(**kwargs).double().eval()
    sd_keys = list(net.state_dict())
    param_keys = [k for k, _ in net.named_parameters()]
    grad_inputs = [k for k in inputs if not k.startswith("gumbel_u.")]
    outputs = sorted(k for k in t if k == "output" or k.startswith("output."))
    if geo and outputs != sorted(make_goldens.output_names(config)):
        fail(case, f"outputs {outputs} for out_dim {config['out_dim']}")
    want = ({f"param.{k}" for k in sd_keys} | {f"input.{k}" for k in inputs} | set(outputs)
            | {f"grad_{k}" for k in outputs} | {f"grad_input.{k}" for k in grad_inputs}
            | {f"grad.{k}" for k in param_keys})
    if set(t) != want:
        fail(case, f"keys: missing {sorted(want - set(t))}, unexpected {sorted(set(t) - want)}")
    for k in spec["inputs"]:
        shape = spec["inputs"][k][0] if geo else spec["inputs"][k]
        if tuple(t[f"input.{k}"].shape) != tuple(shape):
            fail(case, f"input.{k} has shape {tuple(t[f'input.{k}'].shape)}, expected {shape}")
    if "time" in inputs and not ((t["input.time"] >= 0).all() and (t["input.time"] < 1).all()):
        fail(case, "time outside [0, 1)")
    for k in noise_names:
        if not ((t[f"input.{k}"] >= 0).all() and (t[f"input.{k}"] < 1).all()):
            fail(case, f"{k} outside [0, 1)")
    if geo:
        n_params, n_keys = sum(p.numel() for p in net.parameters()), len(sd_keys)
        if (n_params, n_keys) != geotransolver_cases.expected_counts(config):
            fail(case, f"{n_params} parameters / {n_keys} keys, models-spec.md's formulas give "
                       f"{geotransolver_cases.expected_counts(config)}")

    net.load_state_dict({k: t[f"param.{k}"] for k in sd_keys}, strict=True)
    x = {k: t[f"input.{k}"].clone().requires_grad_(k in grad_inputs) for k in inputs if k in spec["inputs"]}
    if geo:
        noise = {k: t[f"input.{k}"] for k in noise_names}
        with geotransolver_cases.torch_radius_search(), gumbel_noise.replaying(net, noise):
            out = geotransolver_cases.output_tensors(net(**geotransolver_cases.forward_kwargs(x)))
    else:
        out = {"output": net(**x)}
    for k in outputs:
        same(case, k, out[k].detach(), t[k])
    torch.autograd.backward([out[k] for k in outputs], [t[f"grad_{k}"] for k in outputs])
    for k in grad_inputs:
        same(case, f"grad_input.{k}", x[k].grad, t[f"grad_input.{k}"])
    grad_scale = max(t[f"grad.{k}"].abs().max().item() for k in param_keys)
    zero = {k: grad_scale if is_zero_grad(k) else None for k in param_keys}
    for k, p in net.named_parameters():
        same(case, f"grad.{k}", p.grad, t[f"grad.{k}"], zero_scale=zero[k])

    # The spec's math, written independently (spec_reference*.py), on the same numbers.
    P = {k: t[f"param.{k}"].clone().requires_grad_(k in param_keys) for k in sd_keys}
    x = {k: t[f"input.{k}"].clone().requires_grad_(k in grad_inputs) for k in inputs}
    if geo:
        o = spec_reference_geotransolver.geotransolver(P, x, config)
    else:
        o = {"output": spec_reference.vit(P, x["x"], config) if spec["model"] == "vit"
             else spec_reference.flare(P, x, config)}
    worst = 0.0
    for k in outputs:
        worst = max(worst, same(case, f"spec {k}", o[k].detach(), t[k], SPEC_TOL))
    torch.autograd.backward([o[k] for k in outputs], [t[f"grad_{k}"] for k in outputs])
    for k in grad_inputs:
        worst = max(worst, same(case, f"spec grad_input.{k}", x[k].grad, t[f"grad_input.{k}"], SPEC_TOL))
    for k in param_keys:
        worst = max(worst, same(case, f"spec grad.{k}", P[k].grad, t[f"grad.{k}"], SPEC_TOL, zero_scale=zero[k]))

    side_inputs = load_file(f"{base}.inputs.safetensors")
    if set(side_inputs) != set(inputs):
        fail(case, f"inputs.safetensors holds {sorted(side_inputs)}")
    for k in inputs:
        same(case, f"inputs.safetensors {k}", side_inputs[k], t[f"input.{k}"], 0.0)
    side_gout = load_file(f"{base}.grad_output.safetensors")
    if set(side_gout) != set(outputs):
        fail(case, f"grad_output.safetensors holds {sorted(side_gout)}")
    for k in outputs:
        same(case, f"grad_output.safetensors {k}", side_gout[k], t[f"grad_{k}"], 0.0)
    side_weights = load_file(f"{base}.weights.safetensors")
    if set(side_weights) != set(sd_keys):
        fail(case, "weights.safetensors keys differ from the state_dict's")
    for k in sd_keys:
        same(case, f"weights.safetensors {k}", side_weights[k], t[f"param.{k}"], 0.0)

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
    spec_note = f"models-spec.md's math to {worst:.1e}"
    n_zero = sum(v is not None for v in zero.values())
    print(f"{case}: ok ({len(t)} tensors; the rebuilt module reproduces every output and grad to {TOL:g}, "
          f"{spec_note}" + (f"; {n_zero} grads zero up to round-off" if n_zero else "") + ")")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--physicsnemo-src", help="root of a checkout of NVIDIA/physicsnemo (needed for the ViT cases)")
    p.add_argument("--dir", required=True)
    p.add_argument("--cases", nargs="*", default=list(make_goldens.CASES))
    a = p.parse_args()
    torch.set_num_threads(1)
    for case in a.cases:
        if case not in make_goldens.CASES:
            raise SystemExit(f"--cases: unknown case {case}")
        check_case(case, make_goldens.CASES[case], a.dir, a.physicsnemo_src)


if __name__ == "__main__":
    main()
