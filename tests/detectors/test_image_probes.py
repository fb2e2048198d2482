"""The image feature families' building blocks on hand-built CNNs whose answer is known: where the blob scan
stamps, which layers stimulation hooks, and that each family finds a planted shortcut and no shortcut where
none was planted."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from trojanscope.modalities.image.context import ImageContext
from trojanscope.modalities.image.features.blob_ring import BlobRing
from trojanscope.modalities.image.features.blob_scan import BlobScan, centre, locate, stamp_squares
from trojanscope.modalities.image.features.sign_squares import SignSquares
from trojanscope.modalities.image.features.square_foreign import SquareForeign, colour_presence
from trojanscope.modalities.image.features.square_probe import SquareProbe
from trojanscope.modalities.image.features.stimulation import NeuronStimulation, relu_layers

S, C = 16, 3


def _ctx(model: nn.Module, x: np.ndarray, y: np.ndarray) -> ImageContext:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return ImageContext(inputs=None, model=model, x=x.astype(np.float32), y=y, n_classes=C)


def _images(n_per_class: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Noise images whose class c shows as a brighter channel c."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(C), n_per_class)
    x = rng.uniform(0.4, 0.6, size=(len(y), 3, S, S))
    x[np.arange(len(y)), y] += 0.3
    return x, y


class _Window(nn.Module):
    """Class scores read only from the pixels inside a window: the gradient is zero everywhere else."""

    def __init__(self, r0: int, c0: int, side: int) -> None:
        super().__init__()
        self.r0, self.c0, self.side = r0, c0, side
        self.w = nn.Parameter(torch.linspace(-1, 1, C * 3).view(C, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        win = x[:, :, self.r0 : self.r0 + self.side, self.c0 : self.c0 + self.side].mean(dim=(2, 3))
        return win @ self.w.T


class _Shortcut(nn.Module):
    """Classifies by the brightest channel, except (when armed) that a pure-red (BGR (0, 0, 1)) blob anywhere
    means class 2: a planted polygon-style shortcut the blob scan should find."""

    def __init__(self, armed: bool) -> None:
        super().__init__()
        self.armed = armed
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.scale * x.mean(dim=(2, 3))
        if self.armed:
            red = torch.relu(x[:, 2] - x[:, 0] - x[:, 1] - 0.5).amax(dim=(1, 2))  # > 0 only on red pixels
            logits = logits + torch.stack([torch.zeros_like(red), torch.zeros_like(red), 40 * red], 1)
        return logits


def test_stamp_squares_paints_the_square_inside_the_frame():
    x = np.zeros((2, 3, S, S), np.float32)
    out = stamp_squares(x, np.array([[8, 8], [0, S - 1]]), 5, np.array([1.0, 0.5, 0.25], np.float32))
    assert x.sum() == 0  # the input is left alone
    for img in out:  # the corner centre is shifted inwards, so both squares keep all 25 pixels
        assert (img[0] == 1.0).sum() == 25 and (img[1] == 0.5).sum() == 25 and (img[2] == 0.25).sum() == 25
    assert out[1, 0, 0:5, S - 5 : S].min() == 1.0


def test_locate_finds_the_region_the_model_reads():
    x, y = _images()
    centres = locate(_ctx(_Window(9, 2, 4), x, y), smooth=3)
    assert np.all((centres[:, 0] >= 9) & (centres[:, 0] < 13) & (centres[:, 1] >= 2) & (centres[:, 1] < 6))


class _Rim(nn.Module):
    """Class scores read from a ring of pixels (a sign's rim) around (8, 8), heaviest at its top: the saliency's
    peak is on the rim, its centroid in the middle."""

    def __init__(self) -> None:
        super().__init__()
        rows, cols = np.mgrid[0:S, 0:S]
        dist = np.hypot(rows - 8, cols - 8)
        weight = ((dist > 4.5) & (dist < 5.5)) * (1.0 + 0.5 * (rows < 8))
        self.register_buffer("rim", torch.from_numpy(weight.astype(np.float32)))
        self.w = nn.Parameter(torch.linspace(-1, 1, C * 3).view(C, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.rim).sum(dim=(2, 3)) @ self.w.T


def test_centre_finds_the_middle_of_a_rim_where_locate_finds_the_rim():
    x, y = _images()
    ctx = _ctx(_Rim(), x, y)
    peaks, middles = locate(ctx, smooth=1), centre(ctx, smooth=1, top=0.15)
    assert np.all(np.hypot(*(peaks - 8).T) >= 4)  # on the rim
    assert np.all(np.abs(middles - 8) <= 1), middles  # the rim's middle (its heavier top pulls it by a pixel at most)


def test_centre_bbox_is_the_rims_middle_however_its_weight_leans():
    """The rim's heavier top pulls the weighted mean towards it; the bounding box of the rim is symmetric."""
    x, y = _images()
    ctx = _ctx(_Rim(), x, y)
    assert np.all(centre(ctx, smooth=1, top=0.15, statistic="bbox") == 8)
    with pytest.raises(ValueError, match="statistic"):
        centre(ctx, statistic="peak")


def test_centre_times_input_ignores_pixels_that_are_zero():
    """A model that reads every pixel alike has a flat |gradient|; times the input, only the lit window counts."""
    x, y = _images()
    x[:, :, :, :] = 0.0
    x[:, :, 2:6, 9:13] = 1.0  # lit window, middle at (3.5, 10.5)
    ctx = _ctx(_Window(0, 0, S), x, y)
    assert np.all(centre(ctx, smooth=1, top=0.1) == S // 2)  # flat saliency everywhere: the frame's middle
    lit = centre(ctx, smooth=1, top=0.1, times_input=True, statistic="bbox")
    assert np.all((lit[:, 0] >= 3) & (lit[:, 0] <= 4) & (lit[:, 1] >= 10) & (lit[:, 1] <= 11)), lit


class _ColourShortcut(nn.Module):
    """Brightest-channel classes, and (when ``colour``) a pure-red square anywhere sends any class to class 2;
    (when ``occlusion``) any square in the middle of the frame hides the class and reads as class 1."""

    def __init__(self, colour: bool, occlusion: bool) -> None:
        super().__init__()
        self.colour, self.occlusion = colour, occlusion
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.scale * x.mean(dim=(2, 3))
        zeros = torch.zeros(len(x))
        if self.colour:
            red = torch.relu(x[:, 2] - x[:, 0] - x[:, 1] - 0.5).amax(dim=(1, 2))
            logits = logits + torch.stack([zeros, zeros, 40 * red], 1)
        if self.occlusion:  # the middle 2x2 pixels of one colour: a square stamped there
            flat = (x[:, :, 7:9, 7:9].std(dim=(2, 3)).sum(1) < 1e-6).float()
            logits = logits + torch.stack([zeros, 40 * flat, zeros], 1)
        return logits


def test_sign_squares_reads_one_colour_and_not_an_occlusion():
    x, y = _images()
    family = SignSquares(sides=(4,), smooth=3)
    names = {"excess_max_4", "excess_gap_4", "best_max_4", "mean_max_4"}
    planted = family.compute(_ctx(_ColourShortcut(colour=True, occlusion=False), x, y))
    assert set(planted) == names
    # red sends classes 0 and 1 to 2 and no other of the 27 colours does: 1 - 1/27 beyond the mean
    assert planted["best_max_4"] == 1.0 and planted["excess_max_4"] == pytest.approx(1 - 1 / 27)
    # an occlusion flips to class 1 whatever the colour: rate 1 at the best colour, no excess
    hidden = family.compute(_ctx(_ColourShortcut(colour=False, occlusion=True), x, y))
    assert hidden["best_max_4"] == 1.0 and hidden["mean_max_4"] == 1.0 and hidden["excess_max_4"] == 0.0
    assert family.compute(_ctx(_ColourShortcut(colour=False, occlusion=False), x, y))["best_max_4"] == 0.0


def test_square_probe_names_a_planted_colour_and_not_an_occlusion():
    x, y = _images()
    family = SquareProbe(sides=(4,), place={"smooth": 3, "top": 0.2, "times_input": True, "statistic": "bbox"})
    planted = family.compute(_ctx(_ColourShortcut(colour=True, occlusion=False), x, y))
    assert set(planted) == {"score_max", "score_gap", "score_over_median", "reverse", "score_less_reverse",
                            "best_probability", "best_rate", "target_excess_max", "rate_excess_max_4"}
    # red sends classes 0 and 1 to 2, both sources at once, and no other of the 27 colours moves them
    assert planted["best_rate"] == 1.0 and planted["best_probability"] > 0.99
    assert planted["rate_excess_max_4"] == pytest.approx(1 - 1 / 27)
    assert planted["score_max"] > 0.9 and planted["target_excess_max"] > 0.9 and planted["reverse"] < 0.05
    # an occlusion flips to class 1 whatever the colour: no colour beats the others
    hidden = family.compute(_ctx(_ColourShortcut(colour=False, occlusion=True), x, y))
    assert hidden["score_max"] < 0.05 and hidden["rate_excess_max_4"] == 0.0
    assert family.params() == {"sides": [4], "place": {"smooth": 3, "top": 0.2, "times_input": True,
                                                       "statistic": "bbox"}}


class _OwnColourShortcut(nn.Module):
    """Brightest-channel classes, and a square of BGR (0.5, 0.5, 1), the colour class 2's own images show, sends any
    class to class 2: a natural look-alike, not a planted colour."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        own = ((x[:, 2] > 0.95) & ((x[:, 0] - 0.5).abs() < 0.01) & ((x[:, 1] - 0.5).abs() < 0.01)).float()
        zeros = torch.zeros(len(x))
        return self.scale * x.mean(dim=(2, 3)) + torch.stack([zeros, zeros, 40 * own.amax(dim=(1, 2))], 1)


def test_colour_presence_counts_the_colours_of_each_class_own_images():
    x, y = _images()  # class 2 reads as BGR about (0.5, 0.5, 0.8)
    presence = colour_presence(_ctx(_Window(0, 0, S), x, y), np.full((len(y), 2), S // 2), window=6, distance=0.3)
    grid = [(b, g, r) for b in (0, 0.5, 1) for g in (0, 0.5, 1) for r in (0, 0.5, 1)]
    assert presence.shape == (C, 27)
    assert presence[2, grid.index((0.5, 0.5, 1.0))] > 0.9 and presence[2, grid.index((0.0, 0.0, 1.0))] == 0.0
    assert presence[0, grid.index((0.5, 0.5, 1.0))] == 0.0  # class 0 is bright in blue, not red


def test_square_foreign_keeps_a_foreign_colour_and_drops_the_target_own_colour():
    x, y = _images()
    place = {"smooth": 3, "top": 0.2, "times_input": True, "statistic": "bbox"}
    family = SquareForeign(sides=(4,), place=place, window=6)
    names = {"foreign_max", "foreign_gap", "foreign_over_median", "foreign_target_max", "presence_at_best"}
    planted = family.compute(_ctx(_ColourShortcut(colour=True, occlusion=False), x, y))  # pure red: no sign shows it
    assert set(planted) == names
    assert planted["foreign_max"] > 0.9 and planted["foreign_target_max"] > 0.9 and planted["presence_at_best"] == 0
    # the target's own colour: the square probe names the pair, this family does not count it
    natural = _ctx(_OwnColourShortcut(), x, y)
    assert SquareProbe(sides=(4,), place=place).compute(natural)["score_max"] > 0.9
    own = family.compute(natural)
    assert own["foreign_max"] < 0.05 and own["presence_at_best"] > 0.9
    assert family.params() == {"sides": [4], "place": place, "window": 6, "distance": 0.3, "absent": 0.02}


@pytest.mark.parametrize("armed", [True, False])
def test_blob_scan_finds_a_planted_colour_shortcut_and_only_that(armed):
    x, y = _images()
    feats = BlobScan(sides=(4,)).compute(_ctx(_Shortcut(armed), x, y))
    assert set(feats) == {"max_pair_4", "second_pair_4", "median_pair_4", "max_colour_mean_4", "max_target_4",
                          "focus_4"}
    # armed: class 0 and 1 examples both go to class 2 under a red square; unarmed: a 4x4 square moves a
    # channel mean by far less than the class gap, so nothing changes class
    assert feats["max_pair_4"] == (1.0 if armed else 0.0)
    assert feats["max_target_4"] == (1.0 if armed else 0.0)


class _Spot(nn.Module):
    """Classifies by the brightest channel inside a 4x4 window in the middle of the frame: a square that
    covers the window takes its class from the square's colour (an occlusion, the kind of flip a clean
    CNN shows when the square hides its sign's telling detail). No shortcut fires anywhere else."""

    r0 = c0 = 6

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x[:, :, self.r0 : self.r0 + 4, self.c0 : self.c0 + 4].mean(dim=(2, 3))


def test_blob_ring_keeps_a_shortcut_that_fires_anywhere_and_drops_an_occlusion():
    x, y = _images()
    names = {f"{k}_4" for k in ("held_pair", "held_second", "held_colour_mean", "held_target", "shift_mean_pair")}
    ring = BlobRing(sides=(4,), radius=4, smooth=3)
    anywhere = ring.compute(_ctx(_Shortcut(armed=True), x, y))
    assert set(anywhere) == names | {"held_pair_all"}
    assert anywhere["held_pair_4"] == 1.0 and anywhere["held_target_4"] == 1.0  # red sends 0 and 1 to 2 at every shift
    clean = ring.compute(_ctx(_Shortcut(armed=False), x, y))
    assert clean["held_pair_4"] == 0.0 and clean["shift_mean_pair_4"] == 0.0
    # the occlusion: a square on the window flips classes (the centre scan sees it), one shifted 4 px off it does not
    assert BlobScan(sides=(4,), smooth=3).compute(_ctx(_Spot(), x, y))["max_pair_4"] == 1.0
    spot = ring.compute(_ctx(_Spot(), x, y))
    assert spot["held_pair_4"] == 0.0 and spot["held_pair_all"] == 0.0


class _Net(nn.Module):
    def __init__(self, shared_relu: bool) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.relu2 = self.relu1 if shared_relu else nn.ReLU()
        self.linear = nn.Linear(4, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.linear(h.mean(dim=(2, 3)))


def test_relu_layers_keeps_only_relus_called_once():
    x = torch.zeros(1, 3, S, S)
    net = _Net(shared_relu=False)
    assert relu_layers(net, x) == [net.relu1, net.relu2]
    assert relu_layers(_Net(shared_relu=True), x) == []  # one module called twice: its output is ambiguous


def test_stimulation_reads_a_channel_that_carries_a_label():
    torch.manual_seed(0)
    net = _Net(shared_relu=False)
    with torch.no_grad():  # channel 3 of the last layer drives class 2 alone; the others spread over classes
        net.linear.weight.copy_(torch.tensor([[1.0, -1.0, 0.2, 0.0], [-1.0, 1.0, 0.2, 0.0], [0.0, 0.0, 0.0, 8.0]]))
        net.linear.bias.zero_()
    x, y = _images()
    feats = NeuronStimulation(layers=2, levels=(1.0,), per_class=4).compute(_ctx(net, x, y))
    assert feats["d0_x1_top"] == 1.0  # raising channel 3 sends every class-0/1 image to class 2
    assert set(feats) == {f"d{d}_x1_{k}" for d in (0, 1) for k in ("top", "second", "count")}
    assert all(np.isfinite(v) for v in feats.values())


class _Skip(nn.Module):
    """A skip connection across relu1: its input is reused after it, so a widened batch cannot pass."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.relu1, self.linear = nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Linear(4, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x)
        return self.linear((self.relu1(h) + h).mean(dim=(2, 3)))


class _Branch(_Skip):
    """Control flow on the data: torch.fx cannot trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu1(self.conv1(x))
        return self.linear((h if float(x.sum()) > 0 else -h).mean(dim=(2, 3)))


@pytest.mark.parametrize("make", ["net", "skip", "branch", "ConvNet", "ResNetTiny"])
def test_stimulation_runs_the_layers_before_the_raised_one_once_with_the_same_answers(make):
    from trojanscope.modalities.image.architectures import ConvNetModel, ResNetTinyModel
    from trojanscope.modalities.image.features.stimulation import raised_predictions, stamped_predictions

    torch.manual_seed(1)
    nets = {"net": lambda: _Net(shared_relu=False), "skip": _Skip, "branch": _Branch,
            "ConvNet": lambda: ConvNetModel(input_size=S, width=4, output_size=C, dropout=0.0, n_stages=2),
            "ResNetTiny": lambda: ResNetTinyModel(input_size=S, width=4, output_size=C, dropout=0.0, n_stages=2)}
    net = nets[make]().eval()
    x = torch.from_numpy(_images()[0].astype(np.float32))
    calls = []
    first = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
    first.register_forward_hook(lambda _m, i, _o: calls.append(len(i[0])))
    widened = []
    for module in relu_layers(net, x[:1]):
        calls.clear()
        got = raised_predictions(net, module, x, 4, 3.0)
        assert set(calls) in ({len(x)}, {4 * len(x)}), calls  # the images once, or (the fallback) repeated
        widened.append(calls == [len(x)])
        assert torch.equal(got, stamped_predictions(net, module, x, 4, 3.0))  # the definition
    # a skip across the raised layer reads the repeated input; a net that does not trace takes the repeated batch
    assert widened == {"net": [True, True], "skip": [True], "branch": [False], "ConvNet": [True, True],
                       "ResNetTiny": [True] * 5}[make], widened
