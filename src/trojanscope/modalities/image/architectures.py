"""Small image classifiers for CPU image rounds (``round1-cpu``).

TrojAI Rounds 0/1 used ResNet-50, DenseNet-121 and Inception-v3 at 224x224; on 2 CPU cores one of those
trains for hours, so the CPU preset uses these compact networks on small inputs. Both read a tensor
``[N, 3, S, S]`` (BGR, each image min-max scaled to [0, 1], the TrojAI image contract) and return logits
``[N, C]``. Global average pooling makes the weights independent of ``S``; the input side a model was
trained at is kept as ``input_size`` (a plain attribute, part of its architecture record).

Their :class:`~trojanscope.models.architectures.HeadSpec` reuses the head fields: ``input_size`` = image
side, ``hidden_size`` = channels of the first stage (doubling per stage), ``n_layers`` = stages (each
halves the resolution), ``dropout`` before the final linear layer. They reach the core's
``ARCHITECTURES`` through the ``architectures`` of the image modality's ``MODELS`` facet; ``from_spec`` and
``head_spec`` are how the core builds one from its record and reads the record back.
"""

from __future__ import annotations

import torch
from torch import nn

from trojanscope.models.architectures import HeadSpec


class _ImageArchitecture(nn.Module):
    """What every image architecture shares: built from a :class:`HeadSpec`, and its record read back."""

    @classmethod
    def from_spec(cls, spec: HeadSpec) -> nn.Module:
        return cls(spec.input_size, spec.hidden_size, spec.output_size, spec.dropout, spec.n_layers)

    def head_spec(self, arch: str) -> HeadSpec:
        """The record of this instance (an image net keeps its trained input side as an attribute)."""
        width = self.linear.in_features // 2 ** (len(self.features) - 1)
        return HeadSpec(arch, int(self.input_size), self.linear.out_features, hidden_size=width,
                        dropout=float(self.dropout.p), bidirectional=False, n_layers=len(self.features))


def _conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class ConvNetModel(_ImageArchitecture):
    """Stages of conv3x3-BN-ReLU and 2x2 max pooling, then global average pooling and a linear layer."""

    def __init__(self, input_size: int, width: int, output_size: int, dropout: float, n_stages: int) -> None:
        super().__init__()
        self.input_size = input_size
        chans = [3] + [width * 2**i for i in range(n_stages)]
        self.features = nn.Sequential(
            *(nn.Sequential(_conv_bn(a, b), nn.MaxPool2d(2)) for a, b in zip(chans[:-1], chans[1:], strict=True))
        )
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(chans[-1], output_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.features(images).mean(dim=(2, 3))
        return self.linear(self.dropout(h))


class _Residual(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = _conv_bn(c_in, c_out)
        self.conv2 = nn.Sequential(nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out))
        self.skip = nn.Conv2d(c_in, c_out, 1, bias=False) if c_in != c_out else nn.Identity()
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.conv2(self.conv1(x)) + self.skip(x)))


class ResNetTinyModel(_ImageArchitecture):
    """A stem (conv3x3-BN-ReLU, 2x2 pool, like ResNet's early downsampling), then residual stages (two 3x3 convs
    + a 1x1 skip, pooled), global pooling, linear. The early pool makes it ~4x cheaper than full-resolution
    residual stages (measured 171 s vs ~4x that for one 64x64 model on one core)."""

    def __init__(self, input_size: int, width: int, output_size: int, dropout: float, n_stages: int) -> None:
        super().__init__()
        self.input_size = input_size
        self.stem = nn.Sequential(_conv_bn(3, width), nn.MaxPool2d(2))
        chans = [width] + [width * 2**i for i in range(n_stages)]
        self.features = nn.Sequential(*(_Residual(a, b) for a, b in zip(chans[:-1], chans[1:], strict=True)))
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(chans[-1], output_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.features(self.stem(images)).mean(dim=(2, 3))
        return self.linear(self.dropout(h))


class TorchvisionModel(_ImageArchitecture):
    """A torchvision classifier (the faithful Round 0/1 architectures), built without pretrained weights.

    torchvision is an optional extra (``pip install 'trojanscope[vision]'`` with a build matching your
    torch): the CPU torch wheel used here has no matching torchvision, and a 224x224 ResNet-50 is a job for
    a GPU anyway. The wrapped network is ``self.net``; ``width``/``n_stages`` are not used.
    """

    builder = ""

    def __init__(self, input_size: int, width: int, output_size: int, dropout: float, n_stages: int) -> None:
        super().__init__()
        try:
            import torchvision.models as tvm
        except ImportError:
            from trojanscope.errors import ModelFileError

            raise ModelFileError(
                f"architecture {type(self).__name__.removesuffix('Model')} needs torchvision; install a build that "
                "matches your torch (pip install 'trojanscope[vision]') or use the round1-cpu preset"
            ) from None
        kwargs = {"aux_logits": False, "init_weights": True} if self.builder == "inception_v3" else {}
        self.net = getattr(tvm, self.builder)(weights=None, num_classes=output_size, **kwargs)
        self.input_size = input_size
        self.output_size = output_size
        self.dropout = nn.Dropout(dropout)  # kept for a uniform record; torchvision nets own their dropout

    def head_spec(self, arch: str) -> HeadSpec:
        return HeadSpec(arch, int(self.input_size), int(self.output_size), hidden_size=0,
                        dropout=float(self.dropout.p), bidirectional=False, n_layers=0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


class ResNet50Model(TorchvisionModel):
    builder = "resnet50"


class DenseNet121Model(TorchvisionModel):
    builder = "densenet121"


class InceptionV3Model(TorchvisionModel):
    builder = "inception_v3"


IMAGE_ARCHITECTURES: dict[str, type[nn.Module]] = {
    "ConvNet": ConvNetModel,
    "ResNetTiny": ResNetTinyModel,
    "ResNet50": ResNet50Model,
    "DenseNet121": DenseNet121Model,
    "InceptionV3": InceptionV3Model,
}
