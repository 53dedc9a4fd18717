#!/usr/bin/env python3
"""Reference data for ShardRT's C++ models: PhysicsNeMo's own ViT, FLARE and GeoTransolver modules, in fp64, with every
parameter perturbed, run forward and backward on fixed random inputs with a random grad_output.

    tools/golden/make_goldens.py --physicsnemo-src DIR --out tests/data/golden

DIR is a checkout of NVIDIA/physicsnemo (the ViT lives only in its examples; tools/golden/setup-venv
--physicsnemo-src DIR clones one). A python without torch re-runs it under the golden venv's (setup-venv makes
that venv). tests/data/golden/README.md says what every file holds. CI never runs this script: its small outputs
are committed, and the C++ model tests compare against them."""
import argparse
import contextlib
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_venv import ensure_golden_venv  # noqa: E402

ensure_golden_venv()
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import geotransolver_cases  # noqa: E402
import gumbel_noise  # noqa: E402
import physicsnemo_models  # noqa: E402
from perturb import perturb_parameters  # noqa: E402

# Every case: the constructor args exactly as passed (PhysicsNeMo's names; they become config.json), the forward
# inputs in forward order with their shapes (`time` is drawn from [0, 1), the rest from randn), and a seed.
CASES = {
    "vit2d": dict(model="vit", seed=101, inputs={"x": (2, 3, 32, 24)},
                  config=dict(img_size=[32, 24], patch_size=4, in_channels=3, num_classes=5, embed_dim=32,
                              num_heads=4, depth=2, mlp_ratio=2.0, qkv_bias=True)),
    "vit2d_headless": dict(model="vit", seed=102, inputs={"x": (1, 3, 16, 16)},
                           config=dict(img_size=[16, 16], patch_size=4, in_channels=3, num_classes=0, embed_dim=32,
                                       num_heads=4, depth=1, mlp_ratio=2.0, qkv_bias=False)),
    "vit3d": dict(model="vit", seed=103, inputs={"x": (2, 2, 16, 8, 8)},
                  config=dict(img_size=[16, 8, 8], patch_size=4, in_channels=2, num_classes=3, embed_dim=24,
                              num_heads=2, depth=1)),
    "flare_irregular": dict(model="flare", seed=201, inputs={"fx": (2, 37, 3), "embedding": (2, 37, 5)},
                            config=dict(functional_dim=3, out_dim=2, embedding_dim=5, n_layers=2, n_hidden=32,
                                        dropout=0.0, n_head=4, act="gelu", mlp_ratio=1, slice_num=8, use_te=False)),
    "flare_unified": dict(model="flare", seed=202, inputs={"fx": (1, 10, 12, 2)},
                          config=dict(functional_dim=2, out_dim=1, n_layers=2, n_hidden=16, n_head=2, mlp_ratio=2,
                                      slice_num=4, unified_pos=True, ref=4, structured_shape=[10, 12])),
    "flare_structured": dict(model="flare", seed=203, inputs={"fx": (2, 9, 8, 1), "embedding": (2, 9, 8, 2)},
                             config=dict(functional_dim=1, out_dim=2, embedding_dim=2, n_layers=1, n_hidden=16,
                                         n_head=4, mlp_ratio=1, slice_num=4, structured_shape=[9, 8])),
    "flare_time": dict(model="flare", seed=204, inputs={"fx": (2, 21, 1), "embedding": (2, 21, 3), "time": (2,)},
                       config=dict(functional_dim=1, out_dim=1, embedding_dim=3, n_layers=2, n_hidden=16, n_head=2,
                                   mlp_ratio=1, slice_num=4, time_input=True, act="silu")),
    # One sample, as a simulation runs it in situ (tests/capi, tests/fortran: 1 to 3 ranks, one of them without
    # points).
    "flare_time_insitu": dict(model="flare", seed=205,
                              inputs={"fx": (1, 19, 2), "embedding": (1, 19, 2), "time": (1,)},
                              config=dict(functional_dim=2, out_dim=2, embedding_dim=2, n_layers=2, n_hidden=16,
                                          n_head=2, mlp_ratio=1, slice_num=4, time_input=True, act="gelu")),
    **geotransolver_cases.CASES,  # inputs there are name -> (shape, how drawn); see geotransolver_cases.py
}

# What a GeoTransolver golden's metadata says about its two sources of ambiguity (geotransolver_cases.py).
GUMBEL_RECORDED = "recorded: every u = torch.rand_like(logits) is the extra input gumbel_u.<site>"
RADIUS_SEARCH = "physicsnemo torch backend: the K nearest within r, ascending distance, fp64"

# Where models-spec.md states a number outright (§3.3), it is checked as stated, on top of the formulas below.
SPEC_STATED = {"flare_irregular": dict(params=12290, keys=42)}


def vit_expected_counts(c):
    """models-spec.md §1.3/§1.4: parameter count and state_dict entry count of a HybridViT config."""
    e, p, d = c["embed_dim"], c["patch_size"], len(c["img_size"])
    n_patches = 1
    for s in c["img_size"]:
        n_patches *= s // p
    m, ncls, qkv_bias = int(e * c.get("mlp_ratio", 4.0)), c["num_classes"], c.get("qkv_bias", True)
    block = 2 * e + (3 * e * e + (3 * e if qkv_bias else 0)) + (e * e + e) + 2 * e + (e * m + m) + (m * e + e)
    params = (e * c["in_channels"] * p ** d + e) + 2 * e + n_patches * e + c["depth"] * block
    keys = 5 + c["depth"] * (12 if qkv_bias else 11)
    if ncls > 0:
        params += e * ncls + ncls
        keys += 2
    return params, keys


def flare_expected_counts(c):
    """models-spec.md §3.3: parameter count (persistent buffers excluded) and state_dict entry count of a FLARE
    config."""
    n, h, s, layers = c["n_hidden"], c["n_head"], c["slice_num"], c["n_layers"]
    d, rn, out = n // h, n * c["mlp_ratio"], c["out_dim"]
    cin = c["functional_dim"] + (c["ref"] ** 2 if c.get("unified_pos") else c["embedding_dim"])
    preprocess = cin * 2 * n + 2 * n + 2 * n * n + n
    block = 2 * n + h * s * d + (n * n + n) + 2 * (d * d + d) + (n * n + n) + 2 * n + (n * rn + rn) + (rn * n + n)
    params = preprocess + layers * block + 2 * n + n * out + out
    keys = 4 + 17 * layers + 4
    if c.get("time_input"):
        params += 2 * (n * n + n)
        keys += 5  # time_embed.freqs (buffer) + time_fc.{0,2}.{weight,bias}
    if c.get("unified_pos"):
        keys += 1  # the `embedding` buffer
    return params, keys


def build(model, config):
    kwargs = physicsnemo_models.constructor_kwargs(config)
    if model == "vit":
        return physicsnemo_models.hybrid_vit_class(ARGS.physicsnemo_src)(**kwargs)
    if model == "geotransolver":
        return physicsnemo_models.geotransolver_class()(**kwargs)
    return physicsnemo_models.flare_class()(**kwargs)


def buffers_in_fp64(net, config):
    """`.double()` only widens FLARE's float32 buffers (the unified-position grid, the time frequencies), which
    would leave them at float32 round-off (~1e-8) off the fp64 values a C++ build computes. Recompute them in fp64
    by the formulas of models-spec.md §2.2 and check they are the module's own buffers up to that round-off, so
    loading them and computing them agree to fp64."""
    if config.get("unified_pos"):
        hs, ws = config["structured_shape"]
        ref = config["ref"]
        x = torch.linspace(0, 1, hs, dtype=torch.float64)[:, None, None, None]
        y = torch.linspace(0, 1, ws, dtype=torch.float64)[None, :, None, None]
        u = torch.linspace(0, 1, ref, dtype=torch.float64)
        grid = torch.sqrt((x - u[None, None, :, None]) ** 2 + (y - u[None, None, None, :]) ** 2)
        replace_buffer(net, "embedding", grid.reshape(1, hs * ws, ref * ref))
    if config.get("time_input"):
        half = config["n_hidden"] // 2
        freqs = (1.0 / 10000) ** (torch.arange(half, dtype=torch.float64) / half)
        replace_buffer(net.time_embed, "freqs", freqs)


def replace_buffer(module, name, value):
    old = getattr(module, name)
    if old.shape != value.shape or not torch.allclose(old, value, rtol=1e-6, atol=1e-7):
        raise SystemExit(f"buffer {name}: the fp64 recomputation {tuple(value.shape)} does not match the module's "
                         f"own {tuple(old.shape)} (max diff {(old - value).abs().max().item():.3g}); "
                         f"models-spec.md §2.2 and the installed physicsnemo disagree")
    with torch.no_grad():
        old.copy_(value)


def output_names(config):
    """A GeoTransolver's outputs: `output` for one stream, `output.0`, `output.1`, ... for an out_dim list."""
    return [f"output.{i}" for i in range(len(config["out_dim"]))] if isinstance(config["out_dim"], list) else ["output"]


def make_inputs(inputs, gen):
    out = {}
    for name, shape in inputs.items():
        if name == "time":  # in [0, 1); it takes part in the forward, so it has a grad like every other input
            out[name] = torch.rand(shape, dtype=torch.float64, generator=gen).requires_grad_(True)
        else:
            out[name] = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_(True)
    return out


def check_counts(case, spec, net):
    sd = net.state_dict()
    n_params = sum(p.numel() for p in net.parameters())
    expected = {"vit": vit_expected_counts, "flare": flare_expected_counts,
                "geotransolver": geotransolver_cases.expected_counts}[spec["model"]](spec["config"])
    stated = SPEC_STATED.get(case)
    if stated and (stated["params"], stated["keys"]) != expected:
        raise SystemExit(f"{case}: the spec's formulas give {expected}, the spec states {stated}")
    if (n_params, len(sd)) != expected:
        raise SystemExit(f"{case}: {n_params} parameters and {len(sd)} state_dict keys; models-spec.md gives "
                         f"{expected[0]} and {expected[1]}")
    return n_params, len(sd)


def check_grad(case, name, g):
    if g is None or not torch.isfinite(g).all() or not (g != 0).any():
        raise SystemExit(f"{case}: gradient of {name} is missing, zero or not finite")


def contiguous(t):
    return t.detach().contiguous().clone()  # no cast: the fp64 check below must see what the module produced


def make_case(case, spec, out_dir):
    torch.manual_seed(spec["seed"])  # the module's own init draws from the global generator
    net = build(spec["model"], spec["config"]).double().eval()
    gen = torch.Generator().manual_seed(spec["seed"] + 1000)
    perturb_parameters(net, gen)
    buffers_in_fp64(net, spec["config"])
    n_params, n_keys = check_counts(case, spec, net)

    geo = spec["model"] == "geotransolver"
    inputs = geotransolver_cases.make_inputs(spec["inputs"], gen) if geo else make_inputs(spec["inputs"], gen)
    bq_note = geotransolver_cases.ball_query_margins(case, spec["config"], inputs) if geo else ""
    noise = {}
    with contextlib.ExitStack() as stack:
        if geo:
            stack.enter_context(geotransolver_cases.torch_radius_search())
            stack.enter_context(gumbel_noise.recording(net, noise))
            outputs = geotransolver_cases.output_tensors(net(**geotransolver_cases.forward_kwargs(inputs)))
        else:
            outputs = {"output": net(**inputs)}
    if bool(noise) != bool(spec["config"].get("plus")):
        raise SystemExit(f"{case}: {len(noise)} Gumbel noise draws recorded, plus={spec['config'].get('plus')}")
    grad_outputs = {k: torch.randn(v.shape, dtype=torch.float64, generator=gen) for k, v in outputs.items()}
    torch.autograd.backward(list(outputs.values()), list(grad_outputs.values()))

    params = dict(net.named_parameters())
    tensors = {f"param.{k}": contiguous(v) for k, v in net.state_dict().items()}
    tensors.update({f"input.{k}": contiguous(v) for k, v in inputs.items()})
    tensors.update({f"input.{k}": contiguous(v) for k, v in noise.items()})  # extra inputs; no grad
    for k, v in outputs.items():
        tensors[k] = contiguous(v)
        tensors[f"grad_{k}"] = contiguous(grad_outputs[k])
    for k, v in inputs.items():
        if v.requires_grad:
            check_grad(case, f"input {k}", v.grad)
            tensors[f"grad_input.{k}"] = contiguous(v.grad)
    for k, p in params.items():
        check_grad(case, k, p.grad)
        tensors[f"grad.{k}"] = contiguous(p.grad)
    if any(t.dtype != torch.float64 for t in tensors.values()):
        raise SystemExit(f"{case}: a tensor is not fp64")

    config_json = json.dumps(spec["config"])
    metadata = {
        "model": spec["model"],
        "config": config_json,
        "inputs": ",".join(list(spec["inputs"]) + list(noise)),
        "physicsnemo_version": PHYSICSNEMO_VERSION,
        "torch_version": torch.__version__,
        "case": case,
    }
    if geo:
        metadata["gumbel_noise"] = GUMBEL_RECORDED if noise else "none"
        metadata["radius_search"] = RADIUS_SEARCH if spec["config"].get("include_local_features") else "none"
    base = os.path.join(out_dir, case)
    save_file(tensors, f"{base}.safetensors", metadata=metadata)
    with open(f"{base}.config.json", "w") as f:
        json.dump(spec["config"], f, indent=2)
        f.write("\n")
    save_file({k: contiguous(v) for k, v in {**inputs, **noise}.items()}, f"{base}.inputs.safetensors")
    save_file({k: contiguous(v) for k, v in grad_outputs.items()}, f"{base}.grad_output.safetensors")
    # The state dict alone, keyed by PhysicsNeMo's names: what `shardrt-infer --weights` reads in the README example.
    save_file({k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")},
              f"{base}.weights.safetensors")

    if case == "flare_irregular":
        net.save(f"{base}.mdlus")  # PhysicsNeMo's own checkpoint writer: zip of model.pt + args.json
    if case == "vit2d":
        torch.save(net.state_dict(), f"{base}.pt")
    shapes = ", ".join(f"{k} {tuple(v.shape)} |{v.detach().norm().item():.6g}|" for k, v in outputs.items())
    print(f"{case}: {n_params} parameters, {n_keys} state_dict keys, {shapes}, {len(tensors)} tensors"
          + (f", {len(noise)} Gumbel noise inputs" if noise else "") + (f"\n  ball query: {bq_note}" if bq_note else ""))


def main():
    global ARGS, PHYSICSNEMO_VERSION
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--physicsnemo-src", help="root of a checkout of NVIDIA/physicsnemo (needed for the ViT cases)")
    p.add_argument("--out", required=True, help="output folder (tests/data/golden)")
    p.add_argument("--cases", nargs="*", default=list(CASES), help=f"subset of {', '.join(CASES)}")
    ARGS = p.parse_args()
    import physicsnemo
    PHYSICSNEMO_VERSION = physicsnemo.__version__
    if any(CASES.get(c, {}).get("model") == "vit" for c in ARGS.cases):
        physicsnemo_models.vit_model_dir(ARGS.physicsnemo_src)  # fail early, with the fix, on a wrong folder
    geotransolver_cases.check_spec_stated()
    torch.set_num_threads(1)  # the same reduction order on every machine
    os.makedirs(ARGS.out, exist_ok=True)
    for case in ARGS.cases:
        if case not in CASES:
            raise SystemExit(f"--cases: unknown case {case}; known: {', '.join(CASES)}")
        make_case(case, CASES[case], ARGS.out)


if __name__ == "__main__":
    main()
