"""Run the calling script under the golden venv's python when the current one has no torch, so that
`tools/golden/make_goldens.py ...` works straight from a shell. The venv is $SHARDRT_GOLDEN_VENV (default
/work/venv-golden, as tools/golden/setup-venv makes it)."""
import importlib.util
import os
import sys


def ensure_golden_venv():
    if importlib.util.find_spec("torch") is not None:
        return
    venv = os.environ.get("SHARDRT_GOLDEN_VENV", "/work/venv-golden")
    py = os.path.join(venv, "bin", "python")
    # the venv's python is a symlink to the base interpreter: tell them apart by sys.prefix
    if os.path.realpath(sys.prefix) != os.path.realpath(venv) and os.access(py, os.X_OK):
        os.execv(py, [py] + sys.argv)
    raise SystemExit(f"{os.path.basename(sys.argv[0])}: no torch in {sys.executable} nor a venv at {venv}; "
                     f"run tools/golden/setup-venv (or set SHARDRT_GOLDEN_VENV)")
