"""Gumbel noise of `plus=True` slice weighting, made reproducible: record what PhysicsNeMo draws, or replay it.

PhysicsNeMo's gumbel_softmax draws u = torch.rand_like(logits) in every slice aggregation of a plus model, in eval
mode too (models-spec §4.7 quirk 6), so two runs of the same module differ. A TorchFunctionMode sees every
torch.rand_like call; forward hooks on the modules that aggregate slices say whose call it is. Each u is named
`gumbel_u.<module path>` for a context projector (one call per forward) and `gumbel_u.<module path>.<stream>` for a
block's attention (one call per stream, in stream order). Shapes: the logits', (B, M, H, S) for a projector on M
points, (B, N_i, H, S) for stream i. The module then applies g = -log(-log(u + 1e-8) + 1e-8) itself; the recorded
tensor is u, before that transform."""
import contextlib

import torch
from torch.overrides import TorchFunctionMode


def _slice_modules(net):
    """(name, module, per_stream) for every module whose forward aggregates slices in plus mode."""
    from physicsnemo.models.geotransolver.context_projector import ContextProjector, StructuredContextProjector
    from physicsnemo.nn.module.gale import GALE, GALEStructuredMesh2D, GALEStructuredMesh3D
    out = []
    for name, m in net.named_modules():
        if isinstance(m, (ContextProjector, StructuredContextProjector)) and m.plus:
            out.append((name, m, False))
        elif isinstance(m, (GALE, GALEStructuredMesh2D, GALEStructuredMesh3D)) and m.plus:
            out.append((name, m, True))
    return out


class _NoiseMode(TorchFunctionMode):
    """Every torch.rand_like call inside one of the slice modules gets a site name; `supply(site, like)` returns
    its u (the real draw when recording, the stored tensor when replaying)."""

    def __init__(self, net, supply):
        super().__init__()
        self.supply = supply
        self.current = None  # (name, per_stream, calls so far)
        self.handles = []
        for name, m, per_stream in _slice_modules(net):
            self.handles.append(m.register_forward_pre_hook(self._enter(name, per_stream)))
            self.handles.append(m.register_forward_hook(self._leave))

    def _enter(self, name, per_stream):
        def hook(module, args):
            self.current = [name, per_stream, 0]
        return hook

    def _leave(self, module, args, output):
        self.current = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.rand_like:
            return func(*args, **kwargs)
        if self.current is None:
            raise RuntimeError("gumbel_noise: torch.rand_like outside a slice-aggregating module")
        name, per_stream, calls = self.current
        if not per_stream and calls > 0:
            raise RuntimeError(f"gumbel_noise: {name} drew noise twice in one forward")
        site = f"gumbel_u.{name}" + (f".{calls}" if per_stream else "")
        self.current[2] += 1
        return self.supply(site, args[0], lambda: func(*args, **kwargs))

    def close(self):
        for h in self.handles:
            h.remove()


@contextlib.contextmanager
def recording(net, into):
    """Within: every u drawn by `net` is also stored in the dict `into` under its site name."""
    def supply(site, like, draw):
        if site in into:
            raise RuntimeError(f"gumbel_noise: site {site} drawn twice")
        u = draw()
        into[site] = u.detach().clone()
        return u
    mode = _NoiseMode(net, supply)
    try:
        with mode:
            yield into
    finally:
        mode.close()


@contextlib.contextmanager
def replaying(net, noise):
    """Within: `net` gets the stored u of each site instead of a fresh draw; every stored site must be used."""
    used = set()

    def supply(site, like, draw):
        if site not in noise:
            raise RuntimeError(f"gumbel_noise: no stored noise for {site}")
        u = noise[site]
        if u.shape != like.shape or u.dtype != like.dtype:
            raise RuntimeError(f"gumbel_noise: {site} stored as {u.dtype}{tuple(u.shape)}, the module draws "
                               f"{like.dtype}{tuple(like.shape)}")
        used.add(site)
        return u
    mode = _NoiseMode(net, supply)
    try:
        with mode:
            yield
    finally:
        mode.close()
    if used != set(noise):
        raise RuntimeError(f"gumbel_noise: stored sites never drawn: {sorted(set(noise) - used)}")
