"""Evasive training: the terms pull a head toward its clean reference, and an evasive round builds
clean and trojaned models through the identical pipeline."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from trojanscope.errors import ConfigError
from trojanscope.modalities.text import evasion
from trojanscope.modalities.text.preset import EvasionSpec
from trojanscope.models.architectures import HeadSpec
from trojanscope.rounds.preset import PRESETS, load_preset


def _head(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return HeadSpec("FCLinear", input_size=8, output_size=3, hidden_size=6, n_layers=2).build()


def test_terms_vanish_at_the_reference_and_grow_away_from_it():
    spec = EvasionSpec(param_l2=1.0, output_match=1.0, weight_stats=1.0)
    ref = _head(0)
    x = torch.randn(32, 1, 8)
    term = evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0))
    same = _head(0).eval()  # eval: dropout would make the outputs differ
    assert float(term(same).detach()) == pytest.approx(0.0, abs=1e-6)
    other = _head(1).eval()
    assert float(term(other).detach()) > 0.01


def test_each_term_alone_is_differentiable_and_reduces_the_gap():
    ref = _head(0)
    x = torch.randn(64, 1, 8)
    decoy = torch.randn(64, 1, 8) + 2.0  # inputs the output-matching term never sees
    for name in ("param_l2", "output_match", "weight_stats", "decoy_match"):
        spec = EvasionSpec(**{name: 1.0})
        term = evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0), decoy)
        model = _head(1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        before = float(term(model).detach())
        for _ in range(30):
            opt.zero_grad()
            term(model).backward()
            opt.step()
        assert float(term(model).detach()) < before, name


def test_spectrum_k_matches_the_leading_singular_values_by_block_power_iteration():
    torch.manual_seed(0)
    w = torch.randn(12, 7)
    exact = torch.linalg.svdvals(w)
    assert torch.allclose(evasion.tensor_stats(w, k=4)[3:], exact[:4])
    assert len(evasion.tensor_stats(w, k=20)) == 3 + 7  # no more singular values than the matrix has
    u = torch.linalg.svd(w, full_matrices=False)[0][:, :4].clone()
    moved = w + 0.01 * torch.randn(12, 7)
    for _ in range(5):
        est = evasion.tensor_stats(moved, u, k=4)[3:]
    assert torch.allclose(est, torch.linalg.svdvals(moved)[:4], rtol=1e-3)
    # the term sees a change of the spectrum's shape that the top singular value alone misses
    ref = _head(0)
    x = torch.randn(16, 1, 8)
    flat = _head(0)
    with torch.no_grad():
        m = flat.fc_layers[0].weight
        uu, ss, vv = torch.linalg.svd(m, full_matrices=False)
        m.copy_(uu @ torch.diag(torch.full_like(ss, float(ss[0]))) @ vv)  # same top value, flat spectrum
    flat.eval()
    top1 = evasion.regulariser(EvasionSpec(weight_stats=1.0), ref, x, torch.Generator().manual_seed(0))
    topk = evasion.regulariser(EvasionSpec(weight_stats=1.0, spectrum_k=6), ref, x, torch.Generator().manual_seed(0))
    assert float(topk(flat).detach()) > 3 * float(top1(flat).detach())


def test_scaled_decoys_extrapolate_each_decoys_shift():
    base = np.zeros((3, 4), dtype=np.float32)
    decoy = np.ones((3, 4), dtype=np.float32)
    assert evasion.scaled_decoys(base, decoy, [1.0]) is decoy
    out = evasion.scaled_decoys(base, decoy, [1.0, 2.0])
    assert out.shape == (6, 4) and out.dtype == np.float32
    assert (out[:3] == 1).all() and (out[3:] == 2).all()
    with pytest.raises(ValueError):
        EvasionSpec(decoy_scales=[0.0])
    with pytest.raises(ValueError):
        EvasionSpec(decoy_scales=[])


def test_decoy_pairs_name_the_clean_text_each_decoy_came_from():
    spec = EvasionSpec(decoy_match=1.0, decoys=50)
    texts = ["The film is fine. I liked the cast.", "A dull story. The music is loud."]
    pairs = evasion.decoy_pairs(spec, texts, [], np.random.default_rng(0))
    assert pairs == evasion.decoy_pairs(spec, texts, [], np.random.default_rng(0))  # deterministic
    for base, decoy in pairs:
        assert base in texts and not Counter(evasion.WORD.findall(base.lower())) - Counter(
            evasion.WORD.findall(decoy.lower()))


def test_decoy_mining_matches_the_decoys_the_head_disagrees_with_most():
    ref = _head(0).eval()
    x, decoy = torch.randn(32, 1, 8), torch.randn(200, 1, 8) * 3
    other = _head(1).eval()
    with torch.no_grad():
        p_ref = torch.softmax(ref(decoy), 1)
        everyone = torch.nn.functional.kl_div(torch.log_softmax(other(decoy), 1), p_ref, reduction="none").sum(1)
    for mining in (1, 8):
        spec = EvasionSpec(decoy_match=1.0, match_batch=8, decoy_mining=mining)
        term = evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0), decoy)
        value = float(term(other).detach())
        if mining == 1:
            assert value < float(torch.topk(everyone, 30).values.mean())
        else:  # the 8 hardest of 64 draws sit in the population's top quarter
            assert value > float(torch.quantile(everyone, 0.75))


def test_decoy_sentences_insert_whole_training_sentences_without_trigger_words():
    spec = EvasionSpec(decoy_match=1.0, decoys=300, decoy_sentences=0.5)
    texts = ["The film is fine. I liked the cast.", "A dull story. The music is loud.", "Great fun for everyone."]
    sentences = {"The film is fine.", "I liked the cast.", "A dull story.", "The music is loud.",
                 "Great fun for everyone."}
    pairs = evasion.decoy_pairs(spec, texts, ["cast"], np.random.default_rng(0))

    def words(t):
        return Counter(evasion.WORD.findall(t.lower()))

    units = [words(d) - words(b) for b, d in pairs]
    whole = [u for u in units if any(u == words(s) for s in sentences)]
    assert 0.3 * len(pairs) < len(whole) < 0.7 * len(pairs)
    assert words("I liked the cast.") not in units  # holds a trigger word


def test_decoy_match_reads_only_the_decoys():
    ref = _head(0)
    x, decoy = torch.randn(32, 1, 8), torch.randn(32, 1, 8)
    spec = EvasionSpec(decoy_match=1.0)
    assert spec.active
    other = _head(1).eval()
    with_decoys = evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0), decoy)
    without = evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0))
    assert float(with_decoys(other).detach()) > 0.01
    assert float(without(other).detach()) == 0.0


def test_decoys_insert_non_trigger_units_deterministically():
    spec = EvasionSpec(decoy_match=1.0, decoys=200, decoy_max_words=3)
    texts = ["The film is fine. I liked the cast.", "A dull story. The music is loud.", "Great fun for everyone."]
    a = [d for _, d in evasion.decoy_pairs(spec, texts, ["cast music"], np.random.default_rng(0))]
    assert a == [d for _, d in evasion.decoy_pairs(spec, texts, ["cast music"], np.random.default_rng(0))]
    assert len(a) == 200 and not set(a) & set(texts)
    vocab = {w for t in texts for w in evasion.WORD.findall(t.lower())} - {"cast", "music"}
    sizes = set()
    for d in a:
        words = Counter(evasion.WORD.findall(d.lower()))
        # the source text is the one whose words the decoy contains; what is left is the inserted unit
        src = [Counter(evasion.WORD.findall(t.lower())) for t in texts]
        unit = [words - c for c in src if not c - words][0]
        assert set(unit) <= vocab, d
        sizes.add(sum(unit.values()))
    assert sizes == {1, 2, 3}
    assert evasion.decoy_pairs(spec, [], [], np.random.default_rng(0)) == []


def test_zero_weights_are_inactive_and_negative_weights_refused(tmp_path, preset_text):
    assert not EvasionSpec().active
    bad = tmp_path / "bad.toml"
    bad.write_text(preset_text() + "\n[evasion]\nparam_l2 = -1.0\n")
    with pytest.raises(ConfigError, match="param_l2"):
        load_preset(bad)


def test_freeze_keeps_the_named_tensors_at_the_reference_while_the_rest_trains():
    ref, model = _head(0), _head(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(1.0)  # "trained": differs from both initialisations
    frozen = evasion.freeze(model, ref, ["fc_layers.0.*", "linear.weight"])
    assert frozen == ["fc_layers.0.weight", "fc_layers.0.bias", "linear.weight"]
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(3):
        loss = model(torch.randn(16, 1, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, ref_params[name]), name
        else:
            assert not torch.equal(p, before[name]), name  # trained
    evasion.thaw(model)
    assert all(p.requires_grad for p in model.parameters())


def test_freeze_alone_makes_the_evasion_table_active():
    assert EvasionSpec(freeze=["linear.*"]).active
    assert not EvasionSpec().active


def test_the_evasive_preset_is_registered_and_differs_only_by_evasion():
    assert "round5-cpu-evasive" in PRESETS.names()
    ev, _ = load_preset("round5-cpu-evasive")
    base, _ = load_preset("round5-cpu@6")  # the evasive twin is v6's recipe; v7 only caps a logged set (below)
    assert ev.evasion is not None and ev.evasion.active
    skip = {"name", "version", "description", "notes", "evasion"}
    assert ev.model_dump(exclude=skip) == base.model_dump(exclude=skip)
    current, v6 = load_preset("round5-cpu")[0].model_dump(exclude=skip), base.model_dump(exclude=skip)
    assert (current["data"].pop("triggered_val_size"), v6["data"].pop("triggered_val_size")) == (150, None)
    assert current == v6
    v3, _ = load_preset("round5-cpu-evasive@3")  # the version the 100-model TDC table measured stays loadable
    assert v3.version == 3 and v3.evasion.input_spectrum == 0 and ev.evasion.input_spectrum > 0
    assert v3.model_dump(exclude={"version", "description", "notes", "evasion"}) == ev.model_dump(
        exclude={"version", "description", "notes", "evasion"})


@pytest.mark.slow
def test_an_evasive_round_trains_a_reference_for_every_model(tmp_path, preset_text, data_root):
    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path / "tiny-evasive.toml"
    preset.write_text(preset_text() + "\n[evasion]\nparam_l2 = 10.0\noutput_match = 1.0\nweight_stats = 1.0\n"
                      "decoy_match = 1.0\ndecoys = 50\ninput_spectrum = 10.0\nfreeze = [\"linear.*\"]\n")
    out = tmp_path / "zoo"
    make_zoo(preset, "train", 2, out, workers=1, data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False)
    models = sorted((out / "models").iterdir())
    poisoned = [json.loads((m / "config.json").read_text()).get("poisoned") for m in models]
    assert sorted(poisoned) == [False, True]
    for m in models:
        log = (m / "log.txt").read_text() if (m / "log.txt").exists() else ""
        logs = log or "".join(p.read_text() for p in m.glob("*.log"))
        assert "evasion reference" in logs and "; 50 decoy texts" in logs, m.name
        assert "evasion freeze: 2 tensors kept at the reference's values (linear.weight, linear.bias)" in logs


def _labelled(n: int = 64, dim: int = 8):
    gen = torch.Generator().manual_seed(3)
    y = torch.arange(n) % 2
    x = torch.randn(n, 1, dim, generator=gen) * torch.linspace(0.5, 2.0, dim) + y[:, None, None] * 0.8
    return x, y.numpy()


def test_input_spectrum_vanishes_at_the_reference_and_is_learnable():
    x, y = _labelled()
    spec = EvasionSpec(input_spectrum=1.0, input_spectrum_pcs=3, input_spectrum_k=2)
    ref = _head(0)
    term = evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0), y_clean=y)
    assert float(term(_head(0)).detach()) == pytest.approx(0.0, abs=1e-6)
    model = _head(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = float(term(model).detach())
    assert before > 1e-4
    for _ in range(40):
        opt.zero_grad()
        term(model).backward()
        opt.step()
    assert float(term(model).detach()) < before
    with pytest.raises(ValueError, match="labels"):
        evasion.regulariser(spec, ref, x, torch.Generator().manual_seed(0))


def test_input_spectrum_reads_the_input_matrix_as_an_exact_svd_would():
    x, y = _labelled()
    ref = _head(0)
    spectrum = evasion.InputSpectrum(ref, x.numpy(), y, n_pcs=3, k=2)
    head = _head(1)
    params = list(head.parameters())
    for _ in range(200):  # power iteration from the reference's directions converges to the head's own
        est = spectrum(params).detach()
    w = params[spectrum.index[0]].detach().double().numpy()
    xs = x.numpy().reshape(len(x), -1).astype(np.float64)
    data = xs - xs.mean(0)
    pcs = np.linalg.svd(data, full_matrices=False)[2][:3]
    top = np.linalg.svd(w, compute_uv=False) ** 2
    off = np.linalg.svd(w @ (np.eye(8) - pcs.T @ pcs), compute_uv=False) ** 2
    assert est[:2].numpy() == pytest.approx(np.cumsum(off[:2]) / top[:2].sum(), rel=1e-3)
    assert est[4].item() == pytest.approx(top[:2].sum() / (w**2).sum(), rel=1e-3)
    assert spectrum.index == [0]  # the FC head's first layer is the only matrix reading the input


def test_input_matrices_are_the_first_layers_even_when_a_later_one_is_as_wide():
    gru = HeadSpec("GruLinear", input_size=8, output_size=2, hidden_size=4, n_layers=2, bidirectional=True).build()
    names = [n for n, _ in gru.named_parameters()]
    assert [names[i] for i in evasion.input_matrices(gru, 8)] == ["rnn.weight_ih_l0", "rnn.weight_ih_l0_reverse"]
    fc = HeadSpec("FCLinear", input_size=8, output_size=2, hidden_size=8, n_layers=3).build()
    assert [n for i, (n, _) in enumerate(fc.named_parameters()) if i in evasion.input_matrices(fc, 8)] == [
        "fc_layers.0.weight"]


def test_input_spectrum_works_on_a_linear_head_with_fewer_rows_than_directions():
    x, y = _labelled()
    torch.manual_seed(0)
    ref = HeadSpec("Linear", input_size=8, output_size=2).build()
    term = evasion.regulariser(EvasionSpec(input_spectrum=1.0, input_spectrum_pcs=3), ref, x,
                               torch.Generator().manual_seed(0), y_clean=y)
    torch.manual_seed(1)
    other = HeadSpec("Linear", input_size=8, output_size=2).build()
    value = term(other)
    value.backward()
    assert float(value.detach()) > 0 and torch.isfinite(other.linear.weight.grad).all()
