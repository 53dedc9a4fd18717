#!/usr/bin/env python3
"""Open ShardRT's exports with PhysicsNeMo and PyTorch themselves (not run in CI; its output is recorded in
docs/checkpoints.md, "Export"). export_golden_weights (built with the tests) writes a golden FLARE case's weights as
<case>.mdlus, <case>.pt and <case>.safetensors; this script then checks that

  - physicsnemo.Module.from_checkpoint(<case>.mdlus) rebuilds the FLARE from ShardRT's args.json and loads its
    model.pt strictly, in ShardRT's key order (its float32 parameters the golden fp64 weights rounded once), and
    Module.load into the same model in fp64 gives every parameter bit for bit;
  - torch.load(<case>.pt, weights_only=True) returns an OrderedDict with the same keys, order and bits;
  - safetensors.torch.load_file(<case>.safetensors) the same tensors;
  - the rebuilt model's forward on the golden inputs reproduces the golden output (1e-12: same weights, same math).

    tools/golden/check_mdlus_export.py --build build-cpu [--case flare_irregular] [--out DIR]"""
import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_venv import ensure_golden_venv  # noqa: E402

ensure_golden_venv()
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import physicsnemo  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(what):
    raise SystemExit(f"check_mdlus_export: FAILED: {what}")


def same_bits(name, a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        fail(f"{name}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    if not torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)):
        fail(f"{name}: values differ")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-cpu"), help="meson build dir with the tests built")
    ap.add_argument("--case", default="flare_irregular")
    ap.add_argument("--out", default=None, help="where the exports go (default: a temporary directory)")
    args = ap.parse_args()

    data = os.path.join(ROOT, "tests", "data")
    out = args.out or tempfile.mkdtemp(prefix="shardrt-export-")
    os.makedirs(out, exist_ok=True)
    exporter = os.path.join(args.build, "tests", "export_golden_weights")
    print(f"$ {exporter} {data} {out} {args.case}")
    run = subprocess.run([exporter, data, out, args.case], capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"export_golden_weights exited with {run.returncode}: {run.stderr.strip()}")
    print(run.stdout.strip())

    golden = load_file(os.path.join(data, "golden", f"{args.case}.weights.safetensors"))
    keys = json.load(open(os.path.join(out, f"{args.case}.keys.json")))
    print(f"torch {torch.__version__}, physicsnemo {physicsnemo.__version__}; {len(keys)} tensors")

    # 1. PhysicsNeMo rebuilds the model from our args.json and loads our model.pt (strict). The model it builds is
    # float32 (PhysicsNeMo's default), so its parameters are the golden fp64 values rounded once to float32.
    mdlus = os.path.join(out, f"{args.case}.mdlus")
    model = physicsnemo.Module.from_checkpoint(mdlus)
    print(f"Module.from_checkpoint: {type(model).__module__}.{type(model).__name__}, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    sd = model.state_dict()
    if list(sd.keys()) != keys:
        fail("the rebuilt model's state_dict keys differ from the exported order")
    for k, v in sd.items():
        same_bits(f".mdlus {k}", v, golden[k].to(v.dtype))
    print(f"  state_dict: {len(sd)} keys in ShardRT's order, each equal to the golden weight rounded to {v.dtype}")
    # The model.pt inside, as from_checkpoint reads it (torch.load), holds the fp64 values bit for bit.
    with zipfile.ZipFile(mdlus) as z:
        inner = torch.load(io.BytesIO(z.read("model.pt")), weights_only=True)
    for k in keys:
        same_bits(f".mdlus model.pt {k}", inner[k], golden[k])
    print(f"  model.pt: {len(inner)} fp64 tensors bit-identical to the golden weights")
    # Module.load (PhysicsNeMo's weights-only loader) into the model made fp64: every parameter bit-identical.
    model = model.double()
    model.load(mdlus)
    for k, v in model.state_dict().items():
        same_bits(f"Module.load {k}", v, golden[k])
    print("Module.load into the fp64 model: every parameter bit-identical to the golden weights")

    # 2. torch.load of the .pt, with the restricted (weights_only) unpickler.
    pt = torch.load(os.path.join(out, f"{args.case}.pt"), weights_only=True)
    if not isinstance(pt, OrderedDict) or list(pt.keys()) != keys:
        fail(f"torch.load returned {type(pt).__name__} with keys in another order")
    for k, v in pt.items():
        same_bits(f".pt {k}", v, golden[k])
    print(f"torch.load(weights_only=True): OrderedDict of {len(pt)} tensors, order and bits as exported")

    # 3. The safetensors export.
    st = load_file(os.path.join(out, f"{args.case}.safetensors"))
    if set(st) != set(keys):
        fail("safetensors keys differ")
    for k in keys:
        same_bits(f".safetensors {k}", st[k], golden[k])
    print(f"safetensors.torch.load_file: {len(st)} tensors bit-identical")

    # 4. The rebuilt model computes the golden output.
    inputs = load_file(os.path.join(data, "golden", f"{args.case}.inputs.safetensors"))
    expected = load_file(os.path.join(data, "golden", f"{args.case}.safetensors"))["output"]
    model = model.eval()
    order = [n for n in ("fx", "embedding", "time") if f"input.{n}" in inputs or n in inputs]
    kwargs = {n: inputs.get(f"input.{n}", inputs.get(n)) for n in order}
    with torch.no_grad():
        y = model(**kwargs)
    err = (y - expected).abs().max().item() / max(expected.abs().max().item(), 1e-300)
    print(f"forward on the golden inputs: max relative difference to the golden output {err:.3e}")
    if err > 1e-12:
        fail("the rebuilt model does not reproduce the golden output")
    print("check_mdlus_export: OK")


if __name__ == "__main__":
    main()
