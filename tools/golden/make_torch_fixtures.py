#!/usr/bin/env python3
"""Writes the torch / PhysicsNeMo checkpoint fixtures of tests/runtime/test_torch_checkpoint.cpp.

Run with the golden venv:  /work/venv-golden/bin/python tools/golden/make_torch_fixtures.py [out_dir]
(default out_dir: tests/data/torch next to this repository's root).

Good files are written by torch.save / PhysicsNeMo's Module.save themselves; next to each one, `<name>.expected
.safetensors` holds the tensors the C++ loader must return (contiguous, same dtype), written by the safetensors
package, so the test compares bit for bit. Hostile files are real torch files edited at the byte level (or
written by torch.save with an object whose __reduce__ names a dangerous callable): the loader must refuse each
with a message naming the problem. Generation is deterministic (fixed seeds); re-running rewrites every file.
"""
import collections
import io
import os
import pickletools
import sys
import zipfile
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "torch"

# The hostile pickles name this command; the C++ test asserts the file it would create never appears.
PWNED_MARKER = "/tmp/shardrt_torch_pickle_was_executed"


def expected(name, tensors):
    """The safetensors twin: what the loader must return for `name` (contiguous copies, keys as given)."""
    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(OUT / f"{name}.expected.safetensors"))


def rewrite_zip(src, dst, edit):
    """Copies the zip `src` to `dst` with `edit(name, bytes) -> bytes` applied to every entry, STORED like torch."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, edit(info.filename, zin.read(info.filename)))


def all_dtypes():
    g = torch.Generator().manual_seed(7)
    sd = collections.OrderedDict()
    sd["f64"] = torch.randn(2, 3, generator=g, dtype=torch.float64)
    sd["f32"] = torch.randn(4, generator=g)
    # Values that bf16/f16 hold exactly are not required: the bits are compared, whatever they are.
    sd["f16"] = torch.randn(3, 2, generator=g).to(torch.float16)
    sd["bf16"] = torch.randn(5, generator=g).to(torch.bfloat16)
    sd["i64"] = torch.tensor([-(2**40), -1, 0, 2**62], dtype=torch.int64)
    sd["i32"] = torch.tensor([[-7, 8], [2**31 - 1, -(2**31)]], dtype=torch.int32)
    sd["u8"] = torch.tensor([0, 1, 200, 255], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(3.5)  # 0-d
    sd["empty"] = torch.zeros(3, 0)  # zero-size
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2, generator=g))  # pickled through _rebuild_parameter
    # Two views of one storage: one starting at a storage offset, one transposed (non-contiguous).
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd["view_offset"] = base[1:3]  # storage offset 6, contiguous
    sd["view_transposed"] = base.t()  # strides (1, 6)
    sd["view_strided"] = base[:, ::2]  # strides (6, 2), offset 0
    torch.save(sd, OUT / "all_dtypes.pt")
    expected("all_dtypes", sd)
    return sd


def small_state_dict():
    g = torch.Generator().manual_seed(11)
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(2, 3, generator=g))
        lin.bias.copy_(torch.randn(2, generator=g))
    return lin.state_dict()


def prefixed_and_training(sd):
    torch.save(collections.OrderedDict((f"module.{k}", v) for k, v in sd.items()), OUT / "ddp_prefixed.pth")
    # torch.compile's wrapper inside DDP's, as a compiled DDP model's state_dict has it.
    torch.save({f"module._orig_mod.{k}": v for k, v in sd.items()}, OUT / "compiled_prefixed.pt")
    torch.save({"epoch": 3, "model_state_dict": sd, "loss": 0.25, "tags": ["a", "b"]}, OUT / "training.pt")
    torch.save({"epoch": 3, "weights_of_some_kind": sd}, OUT / "training_unknown_key.pt")
    # A higher pickle protocol: FRAME, STACK_GLOBAL, MEMOIZE and SHORT_BINUNICODE instead of protocol 2's opcodes.
    torch.save(sd, OUT / "protocol4.pt", pickle_protocol=4)
    # Saved from a GPU: only the persistent ids' location string differs ("cuda:0"; the storage bytes are the same).
    # Written by editing a CPU save, since the fixture machine has no GPU; the BINUNICODE length changes with it.
    buffer = io.BytesIO()
    torch.save(sd, buffer)
    (OUT / "linear_plain.pt").write_bytes(buffer.getvalue())
    cpu, cuda = b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"
    rewrite_zip(OUT / "linear_plain.pt", OUT / "saved_on_cuda.pt",
                lambda n, b: b.replace(cpu, cuda) if n.endswith("/data.pkl") else b)
    (OUT / "linear_plain.pt").unlink()
    expected("linear", sd)


def save_legacy_tar(model, path):
    """Module.save(legacy_format=True): PhysicsNeMo writes the tar itself; only its last step, fsspec's put of the
    finished tar to the destination, is replaced by a plain copy, because with the installed fsspec that put treats
    a local file destination as a folder and fails."""
    import shutil

    import physicsnemo.core.module as module

    class LocalCopy:
        def put(self, local, remote):
            shutil.copyfile(str(local), str(remote))

    original = module._get_fs
    module._get_fs = lambda _name: LocalCopy()
    try:
        model.save(str(path), legacy_format=True)
    finally:
        module._get_fs = original


def flare_mdlus():
    from physicsnemo.models.flare import FLARE

    torch.manual_seed(3)
    model = FLARE(functional_dim=1, out_dim=1, embedding_dim=2, n_layers=1, n_hidden=8, n_head=2, mlp_ratio=1,
                  slice_num=4)
    with torch.no_grad():  # zero-initialised parameters would compare equal however they were read
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    model.save(str(OUT / "flare_tiny.mdlus"))
    save_legacy_tar(model, OUT / "flare_tiny_legacy.mdlus")
    expected("flare_tiny", model.state_dict())


class RunsACommand:
    """Unpickling this calls the callable its __reduce__ names: what a malicious checkpoint does."""

    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def hostile(sd):
    tensor = torch.zeros(2, 3)
    torch.save({"w": tensor, "x": RunsACommand(os.system, f"touch {PWNED_MARKER}")}, OUT / "evil_os_system.pt")
    torch.save({"w": tensor, "x": RunsACommand(eval, f"open('{PWNED_MARKER}', 'w')")}, OUT / "evil_eval.pt")

    good = io.BytesIO()
    torch.save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, good)
    (OUT / "plain.pt").write_bytes(good.getvalue())

    raw = good.getvalue()
    (OUT / "truncated.pt").write_bytes(raw[: len(raw) // 2])

    # The storage entry holds 12 of the 24 bytes the pickle's numel (6 floats) says.
    rewrite_zip(OUT / "plain.pt", OUT / "short_storage.pt",
                lambda n, b: b[:12] if n.endswith("/data/0") else b)

    # The storage honestly holds 4 floats, but the tensor [2, 3] over it needs 6: the pickle's numel is edited
    # (the BININT1 6 closing the persistent-id tuple becomes 4) and the entry cut to match.
    def shrink_storage(name, data):
        if name.endswith("/data/0"):
            return data[:16]
        if name.endswith("/data.pkl"):
            ops = list(pickletools.genops(data))
            for i, (op, arg, pos) in enumerate(ops):
                if op.name == "BINPERSID":
                    numel_op, numel, numel_pos = next(o for o in reversed(ops[:i]) if o[0].name == "BININT1")
                    assert numel == 6
                    return data[: numel_pos + 1] + bytes([4]) + data[numel_pos + 2 :]
        return data

    rewrite_zip(OUT / "plain.pt", OUT / "tensor_past_storage.pt", shrink_storage)
    rewrite_zip(OUT / "plain.pt", OUT / "big_endian.pt",
                lambda n, b: b"big" if n.endswith("/byteorder") else b)

    torch.save({"w": torch.tensor([1, -2], dtype=torch.int8)}, OUT / "unsupported_int8.pt")
    torch.save({"w": torch.zeros(2)}, OUT / "legacy_format.pt", _use_new_zipfile_serialization=False)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    all_dtypes()
    sd = small_state_dict()
    prefixed_and_training(sd)
    flare_mdlus()
    hostile(sd)
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files, {total} bytes, into {OUT}")
    assert total < 200_000, "keep tests/data/torch well under 200 KB"


if __name__ == "__main__":
    main()
