"""Where the reference modules come from: FLARE and GeoTransolver from the installed nvidia-physicsnemo package,
HybridViT from PhysicsNeMo's ShardTensor example (not part of the package), imported from a checkout of
NVIDIA/physicsnemo.

The example's `model/__init__.py` imports its other models (ConvNet, NattenNet, the latter needing `natten`), so
the package is registered here without running that `__init__`: an empty package object whose __path__ is the
example's `model/` folder lets `ViT.py` resolve its relative imports (`.PatchEmbed2d`, ...) as usual, and nothing
in the checkout is copied or edited."""
import importlib
import importlib.util
import os
import sys

# The commit the goldens were made from (models-spec.md describes this one).
PHYSICSNEMO_COMMIT = "94b355108cfd10e253d3d41cacdc0c0112b078e4"
VIT_EXAMPLE = os.path.join("examples", "minimal", "ShardTensorExamples", "5_vit_training_loop")
_PACKAGE = "_physicsnemo_vit_example_model"


def vit_model_dir(physicsnemo_src):
    """The example's model/ folder inside a checkout of NVIDIA/physicsnemo, checked to hold ViT.py."""
    model_dir = os.path.join(os.path.abspath(physicsnemo_src), VIT_EXAMPLE, "model")
    if not os.path.isfile(os.path.join(model_dir, "ViT.py")):
        raise SystemExit(
            f"--physicsnemo-src {physicsnemo_src}: no {os.path.join(VIT_EXAMPLE, 'model', 'ViT.py')} there. Pass "
            f"the root of a checkout of NVIDIA/physicsnemo at {PHYSICSNEMO_COMMIT} (tools/golden/setup-venv "
            f"--physicsnemo-src DIR clones one).")
    return model_dir


def hybrid_vit_class(physicsnemo_src):
    """HybridViT from the example's model/ViT.py."""
    if _PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_PACKAGE, os.path.join(vit_model_dir(physicsnemo_src),
                                                                             "__init__.py"),
                                                      submodule_search_locations=[vit_model_dir(physicsnemo_src)])
        sys.modules[_PACKAGE] = importlib.util.module_from_spec(spec)  # registered, its __init__ not executed
    return importlib.import_module(f"{_PACKAGE}.ViT").HybridViT


def constructor_kwargs(config):
    """JSON has no tuples: img_size / structured_shape are lists in a config.json, tuples for the constructors."""
    kwargs = dict(config)
    for key in ("img_size", "structured_shape"):
        if kwargs.get(key) is not None:
            kwargs[key] = tuple(kwargs[key])
    return kwargs


def flare_class():
    from physicsnemo.models.flare import FLARE
    return FLARE


def geotransolver_class():
    from physicsnemo.models.geotransolver import GeoTransolver
    return GeoTransolver
