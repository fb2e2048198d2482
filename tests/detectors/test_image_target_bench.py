"""benchmarks/image_target.py: the probes' dump and the rules read over it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import image_target  # noqa: E402


@pytest.mark.parametrize("shape", image_target.SHAPES)
def test_each_shape_is_centred_symmetric_and_inside_its_square(shape):
    for side in (6, 10, 14):
        m = image_target.shape_mask(shape, side)
        assert m.shape == (side, side)
        assert 0.25 * side * side < m.sum() <= side * side
        assert (m == m[:, ::-1]).all()  # left-right symmetric: no shape leans to one side of the sign
    assert image_target.shape_mask("square", 6).all()
    assert not image_target.shape_mask("disc", 10)[0, 0]  # a disc leaves the corners


def test_probe_names_are_checked():
    assert image_target.parse_probe("disc8") == ("disc", 8)
    for bad in ("disc", "star8", "8"):
        with pytest.raises(ValueError, match="SHAPE followed by a side"):
            image_target.parse_probe(bad)


def test_centre_specs_are_checked():
    from trojanscope.modalities.image.explain import SQUARE_CENTRE

    assert image_target.parse_centre(None) == SQUARE_CENTRE
    assert image_target.parse_centre("input:15:0.2:bbox") == {"smooth": 15, "top": 0.2, "times_input": True,
                                                              "statistic": "bbox"}
    for bad in ("input:15:0.2", "saliency:9:0.1:mean", "grad:9:0.1:peak", "grad:x:0.1:mean"):
        with pytest.raises(ValueError, match="GRADIENT:SMOOTH:TOP:STATISTIC"):
            image_target.parse_centre(bad)


def test_colour_grid_of_three_levels_is_the_shipped_grid():
    from trojanscope.modalities.image.features.blob_scan import COLOURS

    assert np.array_equal(image_target.colour_grid(3), COLOURS)
    five = image_target.colour_grid(5)
    assert five.shape == (125, 3) and set(np.unique(five)) == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert len({tuple(c) for c in five}) == 125
    with pytest.raises(ValueError, match="at least 2 values"):
        image_target.colour_grid(1)


def test_a_five_level_dump_read_on_three_levels_is_the_27_colour_dump():
    rng = np.random.default_rng(0)
    y = np.array([0, 0, 1, 1, 2, 2])
    five = image_target.colour_grid(5)
    logits = rng.normal(size=(len(five), len(y), 3))
    dump = {"y": y, "truth": np.array([0, 2]), "shipped": np.array([0, 2]), "master_seed": np.array(1),
            "levels": np.array(5), "square6": logits}
    three = image_target.sub_grid(dump, 3, "m.npz")
    from trojanscope.modalities.image.features.blob_scan import COLOURS

    rows = [int(np.flatnonzero((five == c).all(1))[0]) for c in COLOURS]
    assert np.array_equal(three["square6"], logits[rows]) and int(three["levels"]) == 3
    assert image_target.sub_grid(dump, 5, "m.npz")["square6"].shape[0] == 125
    with pytest.raises(SystemExit, match="does not hold the 4-level"):
        image_target.sub_grid(dump, 4, "m.npz")


def test_colour_excess_names_the_pair_one_colour_moves():
    """Source 0's examples go to class 2 for colour 3 alone; source 1's go to 0 for every colour (a look-alike
    pair, which the excess over colours discounts)."""
    colours, c = 27, 3
    y = np.array([0, 0, 1, 1, 2, 2])
    logits = np.zeros((colours, len(y), c))
    logits[:, y == 1, 0] = 5.0
    logits[3][:, 2][y == 0] = 5.0
    exc = image_target.colour_excess(logits, y)
    assert np.isneginf(np.diag(exc)).all()
    s, t = np.unravel_index(np.argmax(exc), exc.shape)
    assert (s, t) == (0, 2)
    dump = {"y": y, "a": logits, "b": logits}
    assert image_target.named_pair(dump, "a+b") == (0, 2)


def test_dump_and_read_on_a_tiny_zoo(tiny_image_zoo, tmp_path, capsys):
    out = tmp_path / "dumps"
    image_target.main(["dump", "--zoo", str(tiny_image_zoo), "--out", str(out), "--probes", "square6,square10,disc8"])
    files = sorted(out.glob("*.npz"))
    assert files and not list(out.glob("*.part.npz"))
    d = dict(np.load(files[0]))
    assert d["square6"].shape[0] == 27 and d["square6"].shape[1] == len(d["y"])
    assert image_target.named_pair(d, image_target.SHIPPED) == tuple(int(v) for v in d["shipped"])
    capsys.readouterr()
    image_target.main(["dump", "--zoo", str(tiny_image_zoo), "--out", str(out), "--probes", "square6,square10,disc8"])
    assert f"{len(files)} already dumped" in capsys.readouterr().out  # resumes: nothing probed twice
    results = image_target.read(image_target.argparse.Namespace(dumps=out, rules="square6+square10,disc8",
                                                                 per_model=False, levels=None))
    assert set(results) == {"square6+square10", "disc8"}
    assert all(n == len(files) and 0 <= hit <= n for n, hit, _ in results.values())
    with pytest.raises(SystemExit, match="not in every dump"):
        image_target.main(["read", "--dumps", str(out), "--rules", "hexagon8"])


def test_target_score_reads_the_target_across_sources():
    """Colour 3 moves every other source part of the way into class 3 (a trigger that fires from each source);
    colour 5 moves source 1 fully into class 0 (one look-alike pair). The pair excess names the look-alike; the
    target excess, read over every other source, names 3; ``both`` weighs the two."""
    colours, c = 27, 4
    y = np.repeat(np.arange(c), 2)
    logits = np.zeros((colours, len(y), c))
    logits[:, :, :][:, np.arange(len(y)), y] = 4.0  # every example is its own class without a trigger
    logits[3][y != 3, 3] = 4.0  # half-way into 3 from 0, 1 and 2
    logits[5][y == 1, 0] = 12.0
    dump = {"y": y, "square6": logits}
    assert image_target.named_pair(dump, "square6") == (1, 0)
    assert image_target.named_pair(dump, "pair:square6") == (1, 0)
    assert image_target.named_pair(dump, "target:square6")[1] == 3
    exc = image_target.target_excess(logits, y)
    assert exc.shape == (c,) and int(np.argmax(exc)) == 3
    # both: the look-alike's pair excess (~0.96) plus a third of it over sources beats the trigger's ~0.46 twice
    assert image_target.named_pair(dump, "both:square6") == (1, 0)
    logits[3][y != 3, 3] = 6.0  # a stronger trigger: ~0.88 from every source outweighs the one pair
    assert image_target.named_pair(dump, "both:square6")[1] == 3
    assert image_target.named_pair(dump, "square6") == (1, 0)
    with pytest.raises(SystemExit, match="prefix before ':'"):
        image_target.named_pair(dump, "best:square6")
