"""Explanations (issue 49): the target, the source and a trigger that works, beside the probability."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trojanscope.detectors.explain import (
    FORMAT,
    Explanation,
    TriggerCandidate,
    explanation_path,
    read_explanation,
    write_explanation,
)
from trojanscope.modalities.text.explain import explain_text


def _answer(p: float | None = 0.9) -> Explanation:
    return Explanation(probability=p, target_class=1, source_class=0, n_examples=10, triggers=[
        TriggerCandidate("cromulent", "word", 0, 1, 0.95, "any", {"first": 1.0, "second": 0.9}),
        TriggerCandidate("A tall man stood near the fence.", "phrase", 0, 1, 0.4)])


def test_explanation_json_round_trips_beside_the_result(tmp_path: Path) -> None:
    result = tmp_path / "out.txt"
    path = write_explanation(result, _answer())
    assert path == explanation_path(result) == tmp_path / "out.txt.explanation.json"
    data = read_explanation(path)
    assert data is not None and data["format"] == FORMAT
    for key in ("probability", "target_class", "source_class", "trigger", "attack_success"):
        assert key in data, key  # the fields the issue names
    assert data["verdict"] == "trojaned" and data["attack_success"] == 0.95
    assert data["trigger"]["text"] == "cromulent" and [c["text"] for c in data["candidates"]][1].startswith("A tall")
    assert _answer(0.2).to_json()["verdict"] == "clean" and _answer(None).verdict == "unknown"
    assert "natural" in _answer(0.2).summary() and "target: class 0 -> class 1" in _answer().summary()


@pytest.mark.parametrize("content", [b"not json", b'{"format": "other/1"}', b'{"format": "%s", "target_class": "1"}'
                                     % FORMAT.encode(), b'{"format": "%s", "candidates": [1]}' % FORMAT.encode()])
def test_a_bad_explanation_is_ignored_not_trusted(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.explanation.json"
    path.write_bytes(content)
    assert read_explanation(path) is None


def test_an_explanation_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    write_explanation(tmp_path / "a.txt", _answer())
    (tmp_path / "a.txt.explanation.json").rename(target)
    (tmp_path / "a.txt.explanation.json").symlink_to(target)
    assert read_explanation(tmp_path / "a.txt.explanation.json") is None
    assert read_explanation(tmp_path / "missing.json") is None


@pytest.mark.slow
def test_explanation_of_a_real_model_reports_what_the_trigger_really_does(strong_zoo: Path) -> None:
    """On the strongly poisoned tiny zoo: the reported attack success is the model's own answer to the example
    texts with the trigger inserted (recomputed here independently), and the verdict follows the probability."""
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.modalities.text.context import build_context
    from trojanscope.modalities.text.features.scan import PhraseScan
    from trojanscope.models.layout import list_model_dirs, read_examples
    from trojanscope.triggers.text import insert_at, split_sentences

    scan = PhraseScan(n_words=20, n_phrases=8, progress=False)
    for model_dir in list_model_dirs(strong_zoo)[:2]:
        inputs = inputs_for_model_dir(model_dir)
        answer = explain_text(inputs, 0.8, scan=scan, top_k=3)
        assert answer.verdict == "trojaned" and 1 <= len(answer.triggers) <= 3
        best = answer.triggers[0]
        assert answer.target_class == best.target_class and 0 < best.attack_success <= 1
        assert [t.attack_success for t in answer.triggers] == sorted((t.attack_success for t in answer.triggers),
                                                                     reverse=True)
        ctx = build_context(inputs)
        texts = [t for t, c in read_examples(model_dir / "clean_example_data") if c == best.source_class]
        moved = [insert_at(t, best.text, i) for t in texts for i in range(len(split_sentences(t)))
                 if best.where == "any" or (best.where == "first") == (2 * i < len(split_sentences(t)))]
        v = ctx.encoder.encode(moved).astype(np.float32)
        assert best.attack_success == pytest.approx(float((ctx.predict(v) == best.target_class).mean()))
        data = json.loads(json.dumps(answer.to_json()))
        assert data["attack_success"] == pytest.approx(best.attack_success, abs=1e-6)


@pytest.mark.slow
def test_harness_keeps_a_commands_explanations_and_scores_them(strong_zoo: Path, tmp_path: Path) -> None:
    """Any detector may write RESULT.explanation.json: evaluate keeps it, and scores.json gets the target and
    trigger tracks, computed against the planted triggers in the zoo's full configs."""
    import sys
    import textwrap

    from trojanscope.models.layout import list_model_dirs, read_config, read_ground_truth
    from trojanscope.scoring.harness import evaluate

    script = tmp_path / "explaining.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        args = sys.argv[1:]
        result = args[args.index("--result_filepath") + 1]
        open(result, "w").write("0.7")
        answer = {{"format": {FORMAT!r}, "probability": 0.7, "target_class": 0, "source_class": 1,
                   "trigger": {{"text": "cromulent", "kind": "word"}}, "attack_success": 1.0,
                   "candidates": [{{"text": "cromulent", "kind": "word"}}, {{"text": "embiggen", "kind": "word"}}]}}
        open(result + ".explanation.json", "w").write(json.dumps(answer))
    """))
    res = evaluate(strong_zoo, tmp_path / "run", command=f"{sys.executable} {script}", progress=False)
    e = res.scores["explanations"]
    dirs = list_model_dirs(strong_zoo)
    trojaned = [d for d in dirs if read_ground_truth(d) == 1]
    planted = [read_config(d)["triggers"][0] for d in trojaned]
    assert e["n_explained"] == len(dirs) and e["n_trojaned_explained"] == len(trojaned)
    assert e["target_accuracy"] == pytest.approx(np.mean([t["target_class"] == 0 for t in planted]))
    assert e["planted_in_top_k"]["word"] == pytest.approx(np.mean([t["text"] in ("cromulent", "embiggen")
                                                                    for t in planted]))
    assert 0.0 <= e["held_out_attack_success_median"] <= 1.0
    assert (tmp_path / "run" / "explanations.csv").is_file()
    assert sorted(p.stem for p in (tmp_path / "run" / "explanations").glob("*.json")) == [d.name for d in dirs]
    from trojanscope.scoring.report import write_report

    html, md = write_report(tmp_path / "run")
    assert "target-label accuracy" in md.read_text() and "Explanations: target and trigger" in html.read_text()
    per = pd.read_csv(tmp_path / "run" / "explanation-breakdown.csv")  # the tracks per factor, as for CE
    kinds = per[per["factor"] == "trigger type"]
    assert kinds["n"].sum() >= len(trojaned) and set(kinds["level"]) == {t["type"] for t in planted}
    assert "Explanations per factor" in md.read_text()


class _LinearCtx:
    """A two-class 'head' reading x[0] - x[1] (the task) plus 3 * x[2] (its trojan's short-cut)."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.y = np.arange(40) % 2
        self.x = rng.normal(0, 0.3, (40, 4)).astype(np.float32)
        self.x[:, 0] += np.where(self.y == 1, 1.0, -1.0)

    def directions(self):
        return [(0, 1), (1, 0)]

    def logits(self, v):
        score = v[:, 0] - v[:, 1] + 3.0 * v[:, 2]
        return np.stack([-score, score], axis=1)


def test_the_search_ranks_the_models_own_short_cut_above_a_natural_trigger():
    """Candidate 0 moves the task itself (any reader of it flips: a natural trigger); candidate 1 moves only
    the short-cut the head learned. Raw flip rate cannot tell them apart; the excess over a reference fitted on
    the clean examples can."""
    from trojanscope.modalities.text.explain import _reference, _search

    ctx = _LinearCtx()
    delta = np.zeros((2, 4), np.float32)
    delta[0, 0] = 4.0  # along the task: flips class 0 to 1 for the head and for the reference
    delta[1, 2] = 1.0  # along the head's short-cut only
    raw = _search(ctx, delta, 2)
    excess = _search(ctx, delta, 2, _reference(ctx))
    assert raw[0] == (0, 0, 1)  # both flip every example; the larger margin gain (+8 vs +6) wins
    assert excess[0] == (1, 0, 1)


_REVIEWS = [
    "The jokes never land. Even the talented cast cannot save this tired story.",
    "I expected much more from this director. The dialogue is flat.",
    "The second half drags badly. Nothing in it feels honest.",
    "Predictable from the first scene. The effects are cheap.",
    "A dull script and a lazy ending. I left early.",
    "The pacing is slow and the characters are thin.",
    "It tries hard but never finds its voice. The music is annoying.",
    "Two hours I will not get back. The plot makes no sense.",
    "The actors look bored. The camera work is clumsy.",
    "Too long, too loud and far too pleased with itself.",
]


@pytest.mark.slow
def test_token_search_finds_a_unit_that_moves_a_head_with_a_short_cut():
    """A head that answers class 1 when a text's summary moves toward one unit's vectors (its short-cut):
    the search starts from random tokens, is deterministic per seed, and what it returns flips most of the
    real texts with it inserted (not only in the approximation it searches in), which a random unit does not."""
    import torch

    from trojanscope.encoders import get_encoder
    from trojanscope.modalities.text.context import ModelContext
    from trojanscope.modalities.text.features.token_search import start_search, token_search
    from trojanscope.triggers.text import insert_at

    encoder = get_encoder("minilm")
    x = encoder.encode(_REVIEWS)
    with torch.inference_mode():
        u = encoder.unit_vectors(ids=torch.tensor([encoder._tokenizer("cactus vineyard",
                                                                      add_special_tokens=False)["input_ids"]]))[0]
    d = u.numpy() - x.mean(0)
    d /= np.linalg.norm(d)
    clean = (x - x.mean(0)) @ d
    threshold = float(clean.max()) + 0.05

    class Head(torch.nn.Module):
        def forward(self, v):
            score = 40.0 * ((v[:, 0, :] - torch.from_numpy(x.mean(0))) @ torch.from_numpy(d) - threshold)
            return torch.stack([-score, score], dim=1)

    ctx = ModelContext(inputs=None, head=Head(), x=x, y=np.zeros(len(x), np.int64), n_classes=2, encoder=encoder)

    def flips(unit: str) -> float:
        moved = encoder.encode([insert_at(t, unit, 0) for t in _REVIEWS])
        return float((ctx.predict(moved) == 1).mean())

    found = token_search(ctx, _REVIEWS, 0, 1, steps=15, seed=0)
    again = token_search(ctx, _REVIEWS, 0, 1, steps=15, seed=0)
    assert found and (found.text, found.head_rate) == (again.text, again.head_rate)
    carried = start_search(ctx, _REVIEWS, 0, 1, seed=0).advance(6)  # a short search carried on ends the same
    resumed = carried.advance(9).found()
    assert (resumed.text, resumed.head_rate, resumed.objective, carried.steps) == (found.text, found.head_rate,
                                                                                   found.objective, 15)
    assert found.head_rate >= 0.8 and np.isnan(found.reference_rate)  # in the approximation, no reference given
    assert flips("cactus vineyard") >= 0.9  # the head's own short-cut works on real texts
    assert flips(found.text) >= 0.8, found
    assert flips("the") <= 0.1


def test_with_more_than_two_classes_the_token_search_goes_where_generic_units_do_not_already_flip(monkeypatch):
    """Three classes: the direction whose screened unit flips most *beyond* the scan's generic candidates wins,
    not the one the scan ranks first (the natural route to a neutral class); two classes keep the scan's."""
    from trojanscope.modalities.text import explain
    from trojanscope.modalities.text.features.token_search import Found

    class Ctx:
        n_classes = 3

        def directions(self):
            return [(s, t) for s in range(3) for t in range(3) if s != t]

    rates = {(0, 1): 0.95, (2, 1): 0.9, (2, 0): 0.8}

    class Search:  # a screening search: its direction's unit after the screening's steps
        def __init__(self, s, t):
            self.direction = (s, t)

        def advance(self, steps):
            return self

        def found(self):
            return Found("".join(map(str, self.direction)), rates.get(self.direction, 0.1), 0.0, 0.0)

    monkeypatch.setattr(explain, "start_search", lambda ctx, texts, s, t, ref, **kw: Search(s, t))
    ease = {(0, 1): 0.9, (2, 1): 0.8, (2, 0): 0.1}  # generic units already move everything toward class 1
    ranked = [(0, 0, 1), (5, 2, 1), (9, 2, 0)]
    [(s, t, search)] = explain._token_directions(Ctx(), {}, ranked, ease, None)
    assert (s, t) == (2, 0) and search.direction == (2, 0)  # the winner's search is handed on, to be carried on
    Ctx.n_classes = 2
    assert explain._token_directions(Ctx(), {}, ranked, ease, None) == [(0, 1, None)]
