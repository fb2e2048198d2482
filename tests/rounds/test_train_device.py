"""Heads on an accelerator: the same random draws as on the CPU, so a GPU model stays within a float tolerance of
the CPU model of the same draw (issue 51).

Without a GPU the accelerator path runs on the CPU (``accelerator.EMULATE``): written-out recurrent cells and
dropout masks drawn apart from the input. Had a single draw moved (a mask from another generator, a batch order
drawn on the device), the emulated model would land far from the CPU one, not within 1e-4. The CUDA tests run
the same comparison for real where torch sees a GPU (skipped otherwise, with that reason).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from trojanscope.models.architectures import HeadSpec
from trojanscope.rounds import accelerator
from trojanscope.rounds.accelerator import TrainDeviceError, host_mask, resolve_device
from trojanscope.rounds.training import Adversarial, predict_logits, train_head

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

#: Where a GPU model of a draw may differ from the CPU model of the same draw (issue 51 asks for the figure):
#: the largest absolute weight difference after the few epochs below, and the largest logit difference.
WEIGHT_TOL = 1e-3
LOGIT_TOL = 1e-3


def _data(n: int, dim: int = 32, classes: int = 2, seed: int = 0, image: bool = False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    w = rng.normal(size=(dim, classes))
    y = (x @ w).argmax(1).astype(np.int64)
    if image:  # [N, 3, dim, dim] with the class in the mean colour of a corner
        imgs = rng.uniform(size=(n, 3, dim, dim)).astype(np.float32)
        imgs[:, :, :4, :4] += y[:, None, None, None].astype(np.float32)
        return imgs, y
    return x, y


def _train(spec: HeadSpec, adversarial: Adversarial, device: str, *, emulate: bool = False, epochs: int = 3):
    image = spec.architecture == "ConvNet"
    x, y = _data(128 if image else 256, spec.input_size, spec.output_size, image=image)
    xv, yv = _data(64, spec.input_size, spec.output_size, seed=1, image=image)
    xt, yt = _data(32, spec.input_size, spec.output_size, seed=2, image=image)
    torch.manual_seed(11)
    model = spec.build()
    old = (accelerator.EMULATE,)
    accelerator.EMULATE = emulate
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(accelerator.TRAIN_DEVICE_ENV, device)
            result = train_head(model, x, y, xv, yv, xt, yt, lr=1e-2, batch_size=32, max_epochs=epochs, min_epochs=1,
                                patience=2, min_delta=0.0, early_stopping="none", adversarial=adversarial, seed=5)
    finally:
        (accelerator.EMULATE,) = old
    return model, result, x


SPECS = {
    "gru": HeadSpec("GruLinear", 32, 2, hidden_size=64, dropout=0.25, bidirectional=True, n_layers=2),
    "lstm": HeadSpec("LstmLinear", 32, 3, hidden_size=48, dropout=0.5, bidirectional=True, n_layers=2),
    "fc": HeadSpec("FCLinear", 32, 2, hidden_size=64, dropout=0.1, n_layers=2),
    "cnn": HeadSpec("ConvNet", 16, 2, hidden_size=8, dropout=0.25, bidirectional=False, n_layers=2),
}
ADVERSARIAL = {
    "none": Adversarial(),
    "fbf": Adversarial(algorithm="fbf", ratio=0.5, eps=0.05),
    "pgd": Adversarial(algorithm="pgd", ratio=0.5, eps=0.05, iterations=3),
}


def _max_weight_diff(a: nn.Module, b: nn.Module) -> float:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return max(float((p - q).abs().max()) for p, q in pairs)


def test_host_mask_is_f_dropouts_mask_bit_for_bit():
    x = torch.randn(64, 512)
    torch.manual_seed(3)
    expected, after = F.dropout(x, 0.25, True), torch.rand(4)
    torch.manual_seed(3)
    got, after2 = x * host_mask(x.shape, 0.25, x.dtype), torch.rand(4)
    assert torch.equal(expected, got)
    assert torch.equal(after, after2)  # the stream is left where F.dropout leaves it


@pytest.mark.parametrize("arch", list(SPECS))
@pytest.mark.parametrize("adv", list(ADVERSARIAL))
def test_accelerator_path_draws_what_the_cpu_path_draws(arch, adv):
    cpu_model, cpu_res, x = _train(SPECS[arch], ADVERSARIAL[adv], "cpu")
    emu_model, emu_res, _ = _train(SPECS[arch], ADVERSARIAL[adv], "cpu", emulate=True)
    assert _max_weight_diff(cpu_model, emu_model) < 1e-4
    assert np.abs(predict_logits(cpu_model, x) - predict_logits(emu_model, x)).max() < 1e-4
    assert cpu_res.adversarial_steps == emu_res.adversarial_steps
    for a, b in zip(cpu_res.history, emu_res.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-4)
    assert all(p.device.type == "cpu" for p in emu_model.parameters())


def test_the_cpu_path_is_unchanged_by_the_accelerator_code():
    """Running with TROJANSCOPE_TRAIN_DEVICE=cpu is the plain CPU path: two runs are bit-identical."""
    a, _, _ = _train(SPECS["lstm"], ADVERSARIAL["fbf"], "cpu")
    b, _, _ = _train(SPECS["lstm"], ADVERSARIAL["fbf"], "cpu")
    assert _max_weight_diff(a, b) == 0.0


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "tpu:0"])
def test_a_bad_device_is_one_clear_error(name):
    with pytest.raises(TrainDeviceError, match="not a torch device"):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_gpu_says_so_and_auto_falls_back_to_the_cpu():
    with pytest.raises(TrainDeviceError, match="no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"
    assert resolve_device(None).type == "cpu"


@CUDA
@pytest.mark.parametrize("arch", list(SPECS))
@pytest.mark.parametrize("adv", list(ADVERSARIAL))
def test_a_head_trained_on_the_gpu_equals_the_cpu_head_within_tolerance(arch, adv):
    cpu_model, cpu_res, x = _train(SPECS[arch], ADVERSARIAL[adv], "cpu")
    gpu_model, gpu_res, _ = _train(SPECS[arch], ADVERSARIAL[adv], "cuda")
    diff = _max_weight_diff(cpu_model, gpu_model)
    logit_diff = float(np.abs(predict_logits(cpu_model, x) - predict_logits(gpu_model, x)).max())
    print(f"{arch}/{adv}: max |weight diff| {diff:.2e}, max |logit diff| {logit_diff:.2e}")
    assert diff < WEIGHT_TOL
    assert logit_diff < LOGIT_TOL
    assert all(p.device.type == "cpu" for p in gpu_model.parameters())
    assert cpu_res.adversarial_steps == gpu_res.adversarial_steps
