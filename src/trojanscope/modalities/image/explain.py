"""The image modality's explanation: the target, the source and a patch that works.

**The target** comes from one-colour squares on the sign (the ``sign-squares`` probe): a square of each colour of a
27-colour grid is stamped on the middle of every clean example's sign, where a Round 1 polygon is painted (the
centre of the bounding box of the top 20% of its smoothed |gradient x input|, ``SQUARE_CENTRE``: closer to the
polygon than the saliency's centroid or its peak, which sits on the sign's rim), at each side of ``SQUARE_SIDES``,
and each (source, target) pair gets the mean softmax probability of the target over the source's examples, per colour.
The pair whose best colour raises that probability most *beyond its mean over colours*, summed over the sides, is
named: a planted polygon is one colour, so its pair answers to few colours, while a natural pair (signs that look
alike) flips because the square hides the pictogram, whatever its colour. The probability, unlike the share of
examples flipped, does not saturate: two pairs that every example of their source follows for their best colour
are still told apart. The rule was chosen on round1-cpu zoos over the argmax share, the smallest Neural Cleanse
mask, other placements, sides and colour sets (research/detector-history.md has the figures). A model whose
answers no square's colour changes is left to the masks' order.

**The patch** is Neural Cleanse's, per class pair. For every (source, target) pair of classes with clean
examples, and for every target with the examples of all other classes (source ``None``: a trigger that flips
every class), a mask ``m`` (one channel) and a pattern ``p`` (3 channels) are optimised so that
``(1 - m) * x + m * p`` of the source's clean examples is classified as the target, with an adaptive L1 weight
on ``m`` as in Neural Cleanse (Wang et al., S&P 2019): the weight rises while the attack succeeds (shrinking the
mask) and falls while it does not. The smallest mask that reached ``success`` of the examples is kept. The
other candidates are ordered by that area (smallest first), then by attack success; a pair whose mask never
reached ``success`` is not reported. The square itself is reported first (kind ``square``; its ``patch`` is
the square alone, to be stamped on each image's located sign rather than at a fixed place), then its pair's
refined mask and the others: the masks are adversarial pixels that miss the polygon, while the square sits on it
and works at least as well on held-out images (chosen on round1-cpu's train zoo, research/detector-history.md).

The patch lives in the model's input space (NCHW, BGR, per-image min-max to [0, 1], the TrojAI Round 0/1
contract), so it is stamped onto already normalised images. It travels in the explanation file as a PNG
(RGB = the pattern, alpha = the mask; base64) so that the scorer can stamp it on held-out images.

The record and its file are the core's (:mod:`trojanscope.detectors.explain`).
"""

from __future__ import annotations

import base64
import dataclasses
import io
import time
from pathlib import Path
from typing import Any

import numpy as np

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.explain import Explanation, TriggerCandidate
from trojanscope.modalities.image.context import ImageContext, build_image_context

HELD_OUT_MAX = 40  # held-out images per class
IOU_IMAGES = 40  # scenes rendered per model for the planted-mask IoU
SQUARE_SIDES = (6, 10)  # px: the sides of the squares that name the target (chosen on round1-cpu zoos, stop 67)
# where the squares are stamped: blob_scan.centre's settings, the bounding box of the top 20% of |gradient x input|
# smoothed over 15 px (chosen by distance to the planted polygon on round1-cpu train zoos, stop 79)
SQUARE_CENTRE: dict[str, Any] = {"smooth": 15, "top": 0.2, "times_input": True, "statistic": "bbox"}


def explain_image(inputs: ModelInputs, probability: float | None = None, *, top_k: int = 5,
                  detector: str | None = None, screen_steps: int = 40, screen_images: int = 4, refine: int = 2,
                  steps: int = 80, lr: float = 0.1, l1: float = 2.0, success: float = 0.9,
                  seed: int = 0) -> Explanation:
    """The explanation of an image model (see the module's docstring). Two rounds: every pair is screened with
    ``screen_steps`` on ``screen_images`` of its source examples, and pairs are ranked by that screened area
    (every pair had the same budget); ``refine`` pairs (the squares' pair and the smallest other masks) are
    optimised again with ``steps`` on all of their source's examples, which gives the patch reported (one that
    works on more than the few screened images); the others keep their screened patch. Two refined pairs keep
    the explanation within 30 s per model on 2 cores (three took 30.4 s; research/detector-history.md)."""
    t0 = time.perf_counter()
    ctx = build_image_context(inputs)
    present = sorted({int(c) for c in ctx.y})
    pairs: list[tuple[int | None, int]] = [(s, t) for s in present for t in range(ctx.n_classes) if s != t]
    if len(present) > 2:
        pairs += [(None, t) for t in range(ctx.n_classes)]
    pools = [np.flatnonzero(ctx.y != t) if s is None else np.flatnonzero(ctx.y == s) for s, t in pairs]
    keep = [k for k, idx in enumerate(pools) if len(idx)]
    pairs, pools = [pairs[k] for k in keep], [pools[k] for k in keep]
    few = [_spread(ctx.y, idx, screen_images) for idx in pools]
    screened = invert_patches(ctx.model, [ctx.x[c] for c in few], [t for _, t in pairs], steps=screen_steps, lr=lr,
                              l1=l1, success=success, seed=seed)
    areas = [float(inv[0].mean()) if inv is not None else np.inf for inv in screened]
    square = square_pair(ctx)
    named = pairs.index(square[:2]) if square is not None and square[:2] in pairs else None
    smallest = [k for k in np.argsort(areas, kind="stable") if np.isfinite(areas[k]) and k != named]
    order = ([named] if named is not None else []) + smallest[: refine - (named is not None)]
    refined = invert_patches(ctx.model, [ctx.x[pools[k]] for k in order], [pairs[k][1] for k in order],
                             steps=steps, lr=lr, l1=l1, success=success, seed=seed + 1)
    found = []
    for k, inv in [*zip(order, refined, strict=True), *((k, screened[k]) for k in range(len(pairs))
                                                        if k not in order)]:
        if inv is None:
            continue
        (s, t), mask, pattern = pairs[k], *inv
        rate = float((ctx.logits(stamp(ctx.x[pools[k]], mask, pattern)).argmax(1) == t).mean())
        found.append((areas[k], -rate, s, t, mask, pattern, rate))
    # the squares' pair first, then by the screened area (one budget for every pair), then attack success
    found.sort(key=lambda f: (named is None or (f[2], f[3]) != pairs[named], *f[:2]))
    triggers = [TriggerCandidate(text=f"patch covering {float(mask.mean()):.1%} of the image", kind="patch",
                                 source_class=s, target_class=t, attack_success=rate,
                                 patch=encode_patch(mask, pattern))
                for _, _, s, t, mask, pattern, rate in found[:top_k]]
    if named is not None:  # the square first: it sits where a polygon is painted (research notes, stop 68)
        s, t, side, colour, rate = square
        bgr = ", ".join(f"{c:.1f}" for c in colour)
        piece = encode_patch(np.ones((side, side), np.float32),
                             np.broadcast_to(colour[:, None, None], (3, side, side)))
        triggers = [TriggerCandidate(text=f"{side}-px square of colour (B, G, R) = ({bgr}) in model input, "
                                     "on the sign", kind="square", source_class=s, target_class=t,
                                     attack_success=rate, patch=piece), *triggers][:top_k]
    best = triggers[0] if triggers else None
    return Explanation(probability=probability, target_class=best.target_class if best else None,
                       source_class=best.source_class if best else None, triggers=triggers, modality="image",
                       n_examples=len(ctx.y), seconds=time.perf_counter() - t0, detector=detector)


def sign_centres(ctx: Any) -> np.ndarray:
    """[N, 2]: where the explanation stamps its squares on each example (``SQUARE_CENTRE``'s reading of the sign)."""
    from trojanscope.modalities.image.features.blob_scan import centre

    return centre(ctx, **SQUARE_CENTRE)


def square_pair(ctx: Any, sides: tuple[int, ...] = SQUARE_SIDES,
                centres: np.ndarray | None = None) -> tuple[int, int, int, np.ndarray, float] | None:
    """(source, target, side, colour, rate): the pair whose best-colour squares raise the target's probability most
    beyond its mean over colours, summed over ``sides`` (see the module's docstring); the side at which that pair's
    excess is larger, the colour (model-input BGR) of its largest target probability there and that colour's flip
    rate on the given examples. None when no pair's best colour does more than its mean (no colour matters). The
    squares go on ``centres`` ([N, 2]; default :func:`sign_centres`)."""
    from trojanscope.modalities.image.features.blob_scan import COLOURS

    responses, excess = square_scores(ctx, sides, centres)
    score = excess.sum(0)
    if not score.max() > 0:
        return None
    s, t = (int(v) for v in np.unravel_index(np.argmax(score), score.shape))
    at = int(np.argmax(excess[:, s, t]))
    rates, probs = responses[at]
    k = int(probs[s, t].argmax())
    return s, t, int(min(sides[at], ctx.x.shape[-1])), COLOURS[k], float(rates[s, t, k])


def square_scores(ctx: Any, sides: tuple[int, ...] = SQUARE_SIDES, centres: np.ndarray | None = None,
                  ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The squares' answers and what :func:`square_pair` ranks: per side the (rates, probabilities) of
    :func:`~trojanscope.modalities.image.features.blob_scan.square_responses`, and the colour excess of the
    probabilities [sides, C, C] (-inf on the diagonal and for sources without examples). The squares go on
    ``centres`` ([N, 2]; default :func:`sign_centres`)."""
    from trojanscope.modalities.image.features.blob_scan import square_responses
    from trojanscope.modalities.image.features.sign_squares import colour_excess

    centres = sign_centres(ctx) if centres is None else centres
    responses = [square_responses(ctx, centres, side) for side in sides]
    return responses, np.stack([colour_excess(ctx, probs) for _, probs in responses])


def _spread(y: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    """Up to ``n`` of ``idx``, taking the classes in turn (so every class is represented)."""
    by_class = [idx[y[idx] == c] for c in sorted(set(y[idx].tolist()))]
    out = [int(g[i]) for i in range(max(map(len, by_class))) for g in by_class if i < len(g)]
    return np.asarray(out[:n], dtype=np.int64)


def invert_patches(model: Any, xs: list[np.ndarray], targets: list[int], *, steps: int, lr: float, l1: float,
                   success: float, seed: int) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """For each (images ``xs[k]``, ``targets[k]``): the smallest (mask [S, S], pattern [3, S, S]) found that sends
    ``success`` of the images to the target, or None. All masks are optimised at once, one batch through the
    model per step (each pair's parameters and L1 weight are its own, so the pairs do not interact)."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    if not xs:
        return []
    gen = torch.Generator().manual_seed(seed)
    n_pairs, size = len(xs), xs[0].shape[-1]
    row_pair = torch.from_numpy(np.concatenate([np.full(len(x), k) for k, x in enumerate(xs)]).astype(np.int64))
    xt = torch.from_numpy(np.ascontiguousarray(np.concatenate(xs)))
    yt = torch.tensor([targets[k] for k in row_pair.tolist()], dtype=torch.long)
    counts = torch.bincount(row_pair, minlength=n_pairs).float()
    mask_logit = (torch.randn(n_pairs, 1, size, size, generator=gen) * 0.1 - 2.0).requires_grad_(True)
    pattern_logit = (torch.randn(n_pairs, 3, size, size, generator=gen) * 0.1).requires_grad_(True)
    opt = torch.optim.Adam([mask_logit, pattern_logit], lr=lr)
    lam = torch.full((n_pairs,), float(l1))
    best: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n_pairs
    best_area = np.full(n_pairs, np.inf)
    for _ in range(steps):
        m = torch.sigmoid(mask_logit)
        p = torch.sigmoid(pattern_logit)
        logits = model((1 - m[row_pair]) * xt + m[row_pair] * p[row_pair])
        ce = torch.zeros(n_pairs).index_add(0, row_pair, F.cross_entropy(logits, yt, reduction="none")) / counts
        area = m.mean(dim=(1, 2, 3))
        loss = (ce + lam * area).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            hit = torch.zeros(n_pairs).index_add(0, row_pair, (logits.argmax(1) == yt).float()) / counts
            ok = hit >= success
            areas = area.numpy()
            for k in np.flatnonzero((ok.numpy()) & (areas < best_area)):
                best_area[k] = areas[k]
                best[k] = (m[k, 0].numpy().copy(), p[k].numpy().copy())
            lam = torch.where(ok, (lam * 1.3).clamp(max=1e4), (lam / 1.3).clamp(min=1e-2))
    return best


def stamp(x: np.ndarray, mask: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """``x`` [N, 3, S, S] (model input) with the patch applied: ``(1 - m) * x + m * p``."""
    m = mask[None, None, :, :].astype(np.float32)
    return ((1 - m) * x + m * pattern[None].astype(np.float32)).astype(np.float32)


def encode_patch(mask: np.ndarray, pattern: np.ndarray) -> str:
    """A patch as base64 PNG: RGB = the pattern (model input is BGR, so channels are reversed), alpha = the mask."""
    from PIL import Image

    rgba = np.concatenate([pattern[::-1], mask[None]], axis=0).transpose(1, 2, 0)
    buf = io.BytesIO()
    Image.fromarray(np.clip(np.rint(rgba * 255), 0, 255).astype(np.uint8), "RGBA").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_patch(data: str, size: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(mask [S, S], pattern [3, S, S], BGR) from :func:`encode_patch`'s text; None when it is not such a PNG
    (or not ``size`` x ``size``)."""
    from PIL import Image

    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
        with Image.open(io.BytesIO(raw)) as img:
            if img.format != "PNG" or img.mode != "RGBA" or img.width != img.height or img.width > 1024:
                return None
            arr = np.asarray(img, dtype=np.float32) / 255.0
    except (ValueError, OSError, UnicodeEncodeError):
        return None
    if size is not None and arr.shape[0] != size:
        return None
    return arr[:, :, 3], arr[:, :, :3].transpose(2, 0, 1)[::-1].copy()


def held_out_images(model_dir: Path, zoo_models: list[Path], cls: int, limit: int = HELD_OUT_MAX) -> list[np.ndarray]:
    """Clean example images of class ``cls`` from the zoo's other models (never this model's own)."""
    from trojanscope.data.images import read_example_images

    out = []
    for other in zoo_models:
        if other == model_dir or not (other / "clean_example_data").is_dir():
            continue
        for path, rgb in read_example_images(other / "clean_example_data"):
            parts = path.stem.split("_")
            if len(parts) >= 2 and parts[0] == "class" and parts[1] == str(cls):
                out.append(rgb)
                if len(out) >= limit:
                    return out
    return out


def held_out_attack_success(model_dir: Path, zoo_models: list[Path], trigger: dict[str, Any], source: int | None,
                            target: int) -> float:
    """Fraction of held-out clean images of ``source`` (every other class when None) that the explanation's
    patch sends to ``target``; NaN when the trigger carries no readable patch or no held-out image exists."""
    import torch

    from trojanscope.data.images import to_model_input
    from trojanscope.models import load_model
    from trojanscope.models.layout import read_config

    n_classes = int(read_config(model_dir).get("number_classes", 0) or 0)
    classes = [source] if source is not None else [c for c in range(n_classes) if c != target]
    held = [(im, c) for c in classes for im in held_out_images(model_dir, zoo_models, c)]
    square = trigger.get("kind") == "square"
    patch = decode_patch(trigger.get("patch") or "", None if square else held[0][0].shape[0]) if held else None
    if patch is None:
        return float("nan")
    model = load_model(model_dir / "model.pt")
    x = to_model_input([im for im, _ in held])
    if square:  # stamped on each held-out image's own sign, located as for the given examples
        ctx = ImageContext(inputs=None, model=model, x=x, y=np.array([c for _, c in held]), n_classes=n_classes)
        x = stamp_on_signs(ctx, *patch)
    else:
        x = stamp(x, *patch)
    with torch.inference_mode():
        pred = model(torch.from_numpy(x)).argmax(1).numpy()
    return float((pred == target).mean())


def planted_mask_iou(model_dir: Path, trigger: dict[str, Any], target: int | None, *, images: int = IOU_IMAGES,
                     seed: int = 0) -> float:
    """Mean intersection over union between the pixels the planted polygon covers and those the explanation's
    patch covers, over ``images`` scenes of the planted trigger's source class rendered afresh by the model's own
    generator. The polygon's pixels are where it moves the pixel at least half as much as where it moves it most,
    after the sign's warp, blur and lighting (the scene rendered twice from one random state, the polygon black
    and then white); the patch's are its mask above 0.5, or for a ``square`` candidate the square on each scene's
    located sign, as it is stamped when its attack success is measured. The planted trigger is the one whose
    target is ``target``, else the first. NaN when the model's config does not carry the polygon (test and
    holdout splits keep the reduced config), when its generator's preset or sign images are not found, or when
    the trigger carries no readable patch."""
    from trojanscope.data.images import to_model_input
    from trojanscope.errors import TrojanscopeError
    from trojanscope.modalities.image.build import ImageTrigger, Renderer
    from trojanscope.modalities.image.features.blob_scan import stamp_squares
    from trojanscope.models import load_model
    from trojanscope.models.layout import read_config
    from trojanscope.settings import data_root_target
    from trojanscope.triggers.polygon import PolygonTrigger

    cfg = read_config(model_dir)
    planted = [t for t in cfg.get("triggers") or [] if isinstance(t, dict) and isinstance(t.get("polygon"), dict)]
    if not planted or not cfg.get("class_signs"):
        return float("nan")
    chosen = next((t for t in planted if t.get("target_class") == target), planted[0])
    try:
        preset = _generator_preset(model_dir, cfg)
        assets = _assets(preset, data_root_target())
        polygon = PolygonTrigger.from_dict(chosen["polygon"])
        source = int(chosen["source_class"])
        index = {sign.name: i for i, sign in enumerate(assets.signs)}  # the config names each class's sign
        renderer = Renderer(preset, assets, [index[str(name)] for name in cfg["class_signs"]])
    except (TrojanscopeError, KeyError, TypeError, ValueError, OSError):
        return float("nan")
    square = trigger.get("kind") == "square"
    patch = decode_patch(trigger.get("patch") or "", None if square else preset.images.size)
    if patch is None:
        return float("nan")
    labels = np.full(images, source)

    def scenes(colour: tuple[int, int, int] | None) -> np.ndarray:
        trig = None if colour is None else ImageTrigger(source, int(chosen["target_class"]), 1.0, "none",
                                                         dataclasses.replace(polygon, color=colour))
        return renderer.render(labels, np.random.default_rng(seed), [trig] * images).astype(np.int16)

    diff = np.abs(scenes((255, 255, 255)) - scenes((0, 0, 0))).min(axis=3)  # [N, S, S]
    planted_px = (diff > 0) & (diff >= 0.5 * diff.max(axis=(1, 2), keepdims=True))
    if square:
        x = to_model_input(list(scenes(None).astype(np.uint8)))
        ctx = ImageContext(inputs=None, model=load_model(model_dir / "model.pt"), x=x, y=labels,
                           n_classes=int(cfg.get("number_classes", 0) or 0))
        ours = stamp_squares(np.zeros_like(x), sign_centres(ctx), patch[0].shape[0], np.ones(3, np.float32))[:, 0] > 0.5
    else:
        ours = np.broadcast_to(patch[0] > 0.5, planted_px.shape)
    union = (planted_px | ours).sum(axis=(1, 2))
    inter = (planted_px & ours).sum(axis=(1, 2))
    return float(np.mean(np.where(union > 0, inter / np.maximum(union, 1), 0.0)))


_ASSETS: dict[tuple[str, str], Any] = {}


def _assets(preset: Any, root: Path) -> Any:
    """The generator's signs and backgrounds, loaded once per preset and data folder (a zoo's models share them)."""
    from trojanscope.modalities.image.build import load_assets

    key = (preset.model_dump_json(), str(root))
    if key not in _ASSETS:
        _ASSETS.clear()  # one generator at a time: a zoo is scored model after model
        _ASSETS[key] = load_assets(preset, root)
    return _ASSETS[key]


def _generator_preset(model_dir: Path, cfg: dict[str, Any]) -> Any:
    """The preset that built the model: its zoo's ``preset.toml`` (``ZOO/models/MODEL``), else its registered name
    and version from the config."""
    from trojanscope.rounds.preset import load_preset

    snapshot = Path(model_dir).parent.parent / "preset.toml"
    if Path(model_dir).parent.name == "models" and snapshot.is_file():
        return load_preset(snapshot)[0]
    try:
        return load_preset(f"{cfg['preset']}@{cfg['preset_version']}")[0]
    except KeyError:  # the current version registers by its name alone
        preset = load_preset(str(cfg["preset"]))[0]
        if str(preset.version) != str(cfg["preset_version"]):
            raise
        return preset


def stamp_on_signs(ctx: Any, mask: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """``ctx.x`` with a ``square`` candidate's square (its patch: mask and pattern of the square's own size)
    stamped on the middle of each example's sign (:func:`sign_centres`, from its saliency for its class ``ctx.y``)."""
    from trojanscope.modalities.image.features.blob_scan import stamp_squares

    return stamp_squares(ctx.x, sign_centres(ctx), mask.shape[0], pattern[:, 0, 0].astype(np.float32))


def before_after(inputs: ModelInputs, explanation: Explanation, path: Path) -> Path | None:
    """A picture for a person: one clean example of the source class, the patch, and the example stamped, with
    the model's answer under each; None when the explanation has no patch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = explanation.triggers[0] if explanation.triggers else None
    patch = decode_patch(best.patch) if best is not None and best.patch else None
    if patch is None:
        return None
    ctx = build_image_context(inputs)
    pool = np.flatnonzero(ctx.y != best.target_class) if best.source_class is None else \
        np.flatnonzero(ctx.y == best.source_class)
    x = ctx.x[pool[:1]]
    if best.kind == "square":
        stamped = stamp_on_signs(ImageContext(inputs=inputs, model=ctx.model, x=x, y=ctx.y[pool[:1]],
                                              n_classes=ctx.n_classes), *patch)
    else:
        stamped = stamp(x, *patch)
    before, after = int(ctx.logits(x).argmax(1)[0]), int(ctx.logits(stamped).argmax(1)[0])
    mask, pattern = patch
    label = "square, stamped on the sign" if best.kind == "square" else "patch (pattern x mask)"
    panels = [(x[0], f"clean example: class {before}"), (pattern * mask[None], label),
              (stamped[0], f"stamped: class {after}")]
    fig, axes = plt.subplots(1, 3, figsize=(7.5, 2.8))
    for ax, (img, title) in zip(axes, panels, strict=True):
        ax.imshow(np.clip(img[::-1].transpose(1, 2, 0), 0, 1))  # BGR -> RGB for display
        ax.set_title(title, fontsize=9)
        ax.axis("off")
    fig.suptitle(f"target class {best.target_class}; patch flips {best.attack_success:.0%} of the given examples",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
