"""Neuron stimulation for image classifiers, after ABS (Liu et al., CCS 2019): one channel that, raised on its
own, sends images of every class to one label.

A polygon trigger is learned as a feature — a few channels of a late convolutional layer that fire on the
trigger and drive the target logit. Raising such a channel over the whole feature map, with every other
channel left as the clean image made it, sends images of every class to the target: the channel alone
carries a label. A clean network's channels are shared between classes, so one raised channel rarely
overrides the rest of the image at the same level. For the deepest ``layers`` ReLU outputs (each called
once per forward), every channel is set to ``level`` times the layer's largest clean activation, for a
few levels, on a few clean examples per class; the rate at which the examples not already of the winning
label go to it is read per channel. The features are the strongest channel's rate per layer and level,
the runner-up's, and how many channels flip most of the images; the meta-classifier calibrates them
against clean models.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily


def forward_hooked(model, x, modules, hook) -> None:
    """One inference forward of ``model`` on ``x`` with ``hook`` on each of ``modules``, removed afterwards."""
    import torch

    handles = [m.register_forward_hook(hook) for m in modules]
    try:
        with torch.inference_mode():
            model(x)
    finally:
        for h in handles:
            h.remove()


def called_once(model, x, modules, accept=lambda output: True) -> list:
    """Those of ``modules`` that run exactly once in a forward pass of ``model`` on ``x``, in call order
    (a module called twice has no single input or output to read); calls whose output ``accept`` rejects
    are not counted."""
    calls: dict[int, int] = {}
    order: list = []

    def count(module, _inputs, output):
        if accept(output):
            calls[id(module)] = calls.get(id(module), 0) + 1
            if module not in order:
                order.append(module)

    forward_hooked(model, x, modules, count)
    return [m for m in order if calls[id(m)] == 1]


def relu_layers(model, x) -> list:
    """The model's ReLU modules that run exactly once per forward pass on a 4-D map, in call order."""
    from torch import nn

    return called_once(model, x, [m for m in model.modules() if isinstance(m, nn.ReLU)], lambda out: out.dim() == 4)


def raised_predictions(model, module, x, n_ch: int, value: float):
    """[n_ch * len(x)] labels: for each channel c < ``n_ch`` of ``module``'s output, the images ``x`` with that
    channel set to ``value`` everywhere (copy c of the batch, in order).

    The answers are those of stamping ``x.repeat(n_ch)`` through the whole network (the definition, and the
    fallback), computed more cheaply: the layers before ``module`` see the images once and only the rest of the
    network runs ``n_ch`` times. The network is traced (``torch.fx``) and run node by node; ``module``'s output is
    widened to the ``n_ch`` raised copies, and a value from before it that a later node reads beside a widened one
    (a skip connection across ``module``) is repeated there, which is what the repeated batch would have held. A
    network that does not trace, or a batch of one (which would broadcast), takes the repeated batch."""
    n = len(x)
    if n >= 2:
        try:
            logits = _Widened(model, module, n, n_ch, value).run(x)
        except Exception:  # noqa: BLE001 - not traceable, or an op the widening cannot follow: the definition
            logits = None
        if logits is not None and tuple(logits.shape[:1]) == (n_ch * n,):
            return logits.argmax(1)
    return stamped_predictions(model, module, x, n_ch, value)


def stamped_predictions(model, module, x, n_ch: int, value: float):
    """:func:`raised_predictions` by its definition: every raised copy of the batch through the whole network."""
    import torch

    n = len(x)

    def stamp(_m, _i, output):
        return _raise_each(output.clone(), n, n_ch, value)

    h = module.register_forward_hook(stamp)
    try:
        with torch.inference_mode():
            return model(x.repeat(n_ch, 1, 1, 1)).argmax(1)
    finally:
        h.remove()


def _raise_each(copies, n: int, n_ch: int, value: float):
    """``copies`` (``n_ch`` copies of an ``n``-image batch of maps) with channel c set to ``value`` in copy c."""
    for c in range(n_ch):
        copies[c * n : (c + 1) * n, c] = value
    return copies


class _Widened:
    """Runs a traced model on ``n`` images, widening ``module``'s output to ``n_ch`` raised copies."""

    def __init__(self, model, module, n: int, n_ch: int, value: float) -> None:
        import torch.fx

        self.gm = torch.fx.symbolic_trace(model)  # ~10 ms for round1's nets: traced per call, nothing kept
        names = [name for name, m in model.named_modules() if m is module]
        if not names:
            raise ValueError("module is not part of the model")
        self.target, self.n, self.n_ch, self.value = names[0], n, n_ch, value
        self.interp = torch.fx.Interpreter(self.gm)

    def run(self, x):
        import torch
        from torch.fx.node import map_arg

        env: dict = {}
        batched: set = set()  # nodes whose values carry the image batch (from the input, not from parameters)
        wide: set = set()  # nodes whose values carry the n_ch copies
        nodes = list(self.gm.graph.nodes)
        last_use = {a: i for i, node in enumerate(nodes) for a in node.all_input_nodes}  # values freed after it
        with torch.inference_mode():
            for i, node in enumerate(nodes):
                if node.op == "placeholder":  # the images (the models here take one input)
                    env[node] = x
                    batched.add(node)
                    continue
                if node.op == "output":
                    return map_arg(node.args[0], lambda a: env[a])
                inputs = node.all_input_nodes
                widen_here = any(a in wide for a in inputs)

                def fetch(a, widen_here=widen_here):
                    value = env[a]
                    if widen_here and a in batched and a not in wide:  # read beside the copies: repeat it as they
                        if not isinstance(value, torch.Tensor):  # a batch size or shape: no longer the copies'
                            raise ValueError(f"{a.name} describes the narrow batch")
                        return value.repeat(self.n_ch, *([1] * (value.dim() - 1)))
                    return value

                args, kwargs = map_arg(node.args, fetch), map_arg(node.kwargs, fetch)
                result = getattr(self.interp, node.op)(node.target, args, kwargs)
                if any(a in batched for a in inputs):
                    batched.add(node)
                if widen_here:
                    wide.add(node)
                if node.op == "call_module" and node.target == self.target:
                    if not isinstance(result, torch.Tensor) or result.dim() < 2 or result.shape[0] != self.n:
                        raise ValueError("the raised module's output is not one map per image")
                    result = _raise_each(result.repeat(self.n_ch, *([1] * (result.dim() - 1))), self.n, self.n_ch,
                                         self.value)
                    wide.add(node)
                env[node] = result
                for a in inputs:
                    if last_use[a] == i:
                        del env[a]
        raise ValueError("traced graph has no output")


class NeuronStimulation(FeatureFamily):
    name = "stimulation"
    description = "ABS-style: raise one channel of a late ReLU layer; how many images of other classes follow it."
    needs = frozenset({"weights", "clean_examples"})
    modality = "image"

    def __init__(self, layers: int = 3, levels: tuple[float, ...] = (0.5, 1.0, 2.0), per_class: int = 4,
                 max_channels: int = 128, flip: float = 0.9) -> None:
        self.layers = layers
        self.levels = tuple(float(v) for v in levels)
        self.per_class = per_class
        self.max_channels = max_channels
        self.flip = flip

    def _layer_rates(self, ctx, module, x, y, top: float, channels: int) -> np.ndarray:
        """[levels, channels]: with one channel raised, the share of images not of the majority label that go
        to it (the majority over all images, so a channel that moves nothing scores 0). ``top`` is the layer's
        largest activation on the clean ``x``, ``channels`` its channel count."""

        n_ch = min(channels, self.max_channels)
        n = len(x)
        out = np.zeros((len(self.levels), n_ch))
        for li, level in enumerate(self.levels):
            pred = raised_predictions(ctx.model, module, x, n_ch, level * max(top, 1e-6)).view(n_ch, n).numpy()
            for c in range(n_ch):
                label = np.bincount(pred[c], minlength=ctx.n_classes).argmax()
                others = y != label
                out[li, c] = float((pred[c][others] == label).mean()) if others.any() else 0.0
        return out

    @staticmethod
    def _clean_peaks(model, modules: list, x) -> dict:
        """Per module: (its largest activation on the clean ``x``, its channel count), one forward for all."""
        tops: dict = {}

        def record(module, _inputs, output):
            tops[module] = (float(output.amax()), int(output.shape[1]))

        forward_hooked(model, x, modules, record)
        return tops

    def compute(self, ctx) -> dict[str, float]:
        import torch

        idx = np.concatenate([np.flatnonzero(ctx.y == c)[: self.per_class] for c in range(ctx.n_classes)])
        x = torch.from_numpy(np.ascontiguousarray(ctx.x[idx]))
        y = ctx.y[idx]
        found = relu_layers(ctx.model, x[:1])[-self.layers :]
        tops = self._clean_peaks(ctx.model, found, x)
        layers = [None] * (self.layers - len(found)) + found  # shallow nets: missing layers read as zeros
        feats: dict[str, float] = {}
        for depth, module in enumerate(reversed(layers)):  # depth 0 = deepest
            rates = (self._layer_rates(ctx, module, x, y, *tops[module]) if module is not None
                     else np.zeros((len(self.levels), 2)))
            for li, level in enumerate(self.levels):
                r = np.sort(rates[li])[::-1]
                feats[f"d{depth}_x{level:g}_top"] = float(r[0])
                feats[f"d{depth}_x{level:g}_second"] = float(r[1]) if len(r) > 1 else 0.0
                feats[f"d{depth}_x{level:g}_count"] = float((r >= self.flip).sum())
        return feats
