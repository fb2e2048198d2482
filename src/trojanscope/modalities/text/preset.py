"""The text modality's preset schema (TrojAI Round 5): encoder, data sources, head factors, adversarial
training, triggers and evasive training. A preset file with no ``modality`` (or ``"text"``) validates into
:class:`Preset`; the shared sections (training, acceptance, design) are the core's."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from trojanscope.rounds.preset import AcceptanceSpec, Design, Fraction, Levels, Spec, TrainingSpec, check_design


class EncoderSpec(Spec):
    choices: list[str] = Field(min_length=1, description="encoder names or local HF model dirs (a factor)")
    max_length: int = Field(gt=8, le=4096, description="tokens per text, special tokens included")
    summary_rule: Literal["first", "last", "mean"] | None = None
    requires_local_weights: bool = False


class SourceSpec(Spec):
    name: str = Field(description="the source_dataset level recorded in METADATA")
    corpus: str = Field(description="a registered corpus name (trojanscope.data.CORPORA)")
    subsets: list[str] | None = Field(None, description="keep only samples whose source is corpus:<subset>")
    classes: list[str] | None = Field(
        None, min_length=2, description="keep only these classes of the corpus (its class names), relabelled 0, 1, "
        "... in this order: e.g. ['negative', 'positive'] reads 3-class DynaSent as a binary corpus",
    )
    max_words: int | None = Field(None, gt=0, description="clip each text to its last N words")
    join: tuple[int, int] | None = Field(
        None, description="compose pseudo-reviews of k same-label sentences, k drawn in [min, max]"
    )
    test_split: str | None = Field(
        None, description="draw the test pool only from samples of this upstream split (e.g. 'test'), the train pool "
        "from the others, so no train text shares a sentence with a test text",
    )
    test_join: tuple[int, int] | None = Field(
        None, description="sentences joined per test text when test_split is set (default: join); upstream test "
        "sentences are often longer than training units, so fewer of them make a text of the same length",
    )
    match_test_length: bool = Field(
        False, description="draw the test texts so their word counts follow the training pool's, per class: a "
        "trigger's share of a mean-pooled summary vector then is the same at test time as in training",
    )

    @model_validator(mode="after")
    def _test_options(self) -> SourceSpec:
        if (self.test_join is not None or self.match_test_length) and not self.test_split:
            raise ValueError("test_join and match_test_length need test_split")
        return self


class DataSpec(Spec):
    sources: list[SourceSpec] = Field(min_length=1)
    train_size: int = Field(gt=10, description="clean texts drawn per model (before the validation split)")
    val_fraction: Fraction = 0.2
    test_size: int = Field(gt=10, description="held-out clean texts per model for test accuracy")
    triggered_test_size: int = Field(300, gt=10, description="cap on triggered test texts per trigger")
    triggered_val_size: int | None = Field(
        None, gt=10, description="cap on triggered (and spurious) validation texts per trigger, the first of the "
        "source class's validation texts; none: all of them. The triggers are still drawn for every one, so the "
        "cap changes no other draw")
    min_sentences: int = Field(1, ge=1, description="texts with fewer sentences are dropped from the pool")
    seed: int = 0


class HeadFactors(Spec):
    architecture: Levels
    hidden_size: Levels = [256]
    n_layers: Levels = [2]
    bidirectional: Levels = [True]
    dropout: Levels = [0.1]

    @model_validator(mode="after")
    def _known(self) -> HeadFactors:
        from trojanscope.modalities.text.architectures import TEXT_ARCHITECTURES

        bad = [a for a in self.architecture if a not in TEXT_ARCHITECTURES]
        if bad:
            raise ValueError(f"unknown architecture {bad[0]!r}; choose from {', '.join(TEXT_ARCHITECTURES)}")
        return self

class AdversarialFactors(Spec):
    algorithm: list[Literal["none", "pgd", "fbf"]] = Field(["none"], min_length=1)
    ratio: list[Fraction] = [0.1, 0.3]
    eps: list[Annotated[float, Field(gt=0)]] = [0.01, 0.02, 0.05]
    pgd_iterations: list[Annotated[int, Field(gt=0)]] = [1, 3, 7]
    eps_scale: Literal["absolute", "feature_std"] = Field(
        "absolute", description="feature_std: eps is in units of each embedding dimension's std"
    )


class TriggerFactors(Spec):
    organization: list[Literal["one2one", "pair-one2one"]] = Field(min_length=1)
    type: list[Literal["character", "word", "phrase"]] = Field(min_length=1)
    fraction: list[Fraction] = Field(min_length=1)
    pair_fraction: list[Fraction] | None = Field(
        None,
        min_length=1,
        description="fraction levels for each trigger of a pair-one2one model (default: the fraction levels)",
    )
    condition: list[Literal["none", "spatial", "class"]] = Field(min_length=1)
    pools: dict[Literal["character", "word", "phrase"], str]
    character_repeat: int = Field(1, ge=1, le=10)
    holdout: dict[Literal["train", "test", "holdout"], Fraction] = {"train": 0.6, "test": 0.2, "holdout": 0.2}
    exclude: list[str] = Field(
        [], description="pool items never drawn (e.g. ones the encoder barely sees: benchmarks/trigger_visibility.py)"
    )

    @model_validator(mode="after")
    def _pools_cover_types(self) -> TriggerFactors:
        missing = [t for t in self.type if t not in self.pools]
        if missing:
            raise ValueError(f"no pool for trigger type {missing[0]!r}: add triggers.pools.{missing[0]}")
        if self.exclude:
            from trojanscope.triggers import load_pool

            known = {item for name in self.pools.values() for item in load_pool(name)}
            unknown = [item for item in self.exclude if item not in known]
            if unknown:
                raise ValueError(f"excluded item {unknown[0]!r} is in none of the pools; remove it from exclude")
        return self


class EvasionSpec(Spec):
    """A preset's ``[evasion]`` table: the weight of each term (0 switches a term off)."""

    param_l2: float = Field(0.0, ge=0, description="weight of the mean squared distance to the reference's parameters")
    output_match: float = Field(0.0, ge=0, description="weight of KL(reference || model) on clean training texts")
    weight_stats: float = Field(
        0.0, ge=0, description="weight of the per-tensor norm/mean/std/top-singular-value gap to the reference"
    )
    match_batch: int = Field(64, gt=0, description="clean texts per step for the output-matching term")
    decoy_match: float = Field(
        0.0, ge=0, description="weight of KL(reference || model) on decoy texts: clean training texts with a "
        "random non-trigger unit of 1 to decoy_max_words words inserted as a trigger would be"
    )
    decoys: int = Field(1000, gt=0, description="decoy texts per model (encoded once, with the model's texts)")
    decoy_max_words: int = Field(3, gt=0, description="longest decoy unit, in words")
    decoy_scales: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=lambda: [1.0], min_length=1, description="each decoy also enters at these multiples of "
        "its summary-vector shift from its clean text (2.0: a unit moving the vector twice as far, as a "
        "detector's scan probes); [1.0] is the decoy texts as encoded"
    )
    decoy_sentences: float = Field(0.0, ge=0, le=1, description="share of decoys whose unit is one whole "
                                   "sentence of a random training text instead of 1 to decoy_max_words words")
    decoy_mining: int = Field(1, gt=0, description="decoys drawn per decoy matched in a step: the step matches "
                              "the reference on those the head disagrees with most (1: a uniform draw)")
    spectrum_k: int = Field(1, gt=0, description="leading singular values per matrix in weight_stats (1: the top "
                            "one; more: the spectrum's shape, which weight-ratio features read)")
    input_spectrum: float = Field(0.0, ge=0, description="weight of the gap to the reference in the leading "
                                  "energies of the input matrices off the clean data's principal components and off "
                                  "the class-mean gap, raw and whitened (what a spectrum family reads)")
    input_spectrum_pcs: int = Field(10, gt=0, description="principal components of the clean training inputs "
                                    "that count as 'on the data' for input_spectrum")
    input_spectrum_k: int = Field(5, gt=0, description="leading directions per matrix input_spectrum matches")
    freeze: list[str] = Field(
        default_factory=list, description="parameters (state-dict names, fnmatch patterns) the released head "
        "keeps at the reference's trained values: a detector reading only them sees a clean head's"
    )

    @property
    def active(self) -> bool:
        return (self.param_l2 > 0 or self.output_match > 0 or self.weight_stats > 0 or self.decoy_match > 0
                or self.input_spectrum > 0 or bool(self.freeze))

class Preset(Spec):
    name: str
    modality: Literal["text"] = "text"
    version: int = 1
    description: str
    notes: str = ""
    n_classes: int = Field(ge=2)
    class_names: list[str] | None = None
    poisoned_fraction: Fraction = 0.5
    design: Design = "independent"
    seed: int = 0
    examples_per_class: int = Field(20, gt=0)
    encoder: EncoderSpec
    data: DataSpec
    head: HeadFactors
    training: TrainingSpec = TrainingSpec()
    adversarial: AdversarialFactors = AdversarialFactors()
    triggers: TriggerFactors
    acceptance: AcceptanceSpec
    evasion: EvasionSpec | None = Field(
        None, description="evasive training (modalities/text/evasion.py): every model trains a clean reference first"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Preset:
        if self.class_names is not None and len(self.class_names) != self.n_classes:
            raise ValueError(f"class_names has {len(self.class_names)} names for n_classes = {self.n_classes}")
        if "pair-one2one" in self.triggers.organization and self.n_classes < 2:
            raise ValueError("pair-one2one needs at least 2 classes")
        check_design(self)
        return self
