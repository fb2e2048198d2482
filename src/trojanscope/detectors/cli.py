"""``trojanscope detect`` (the TrojAI contract), ``trojanscope detect fit`` and ``trojanscope detectors``."""

from __future__ import annotations

from pathlib import Path

import typer

_CONTRACT_HELP = (
    "Score ONE classifier the way a TrojAI submission does and write P(trojaned) -- exactly one number in "
    "[0, 1] -- to --result_filepath (written atomically).\n\n"
    "The detector sees only the model file, its clean example texts, the reduced config.json beside the model "
    "file (encoder, summary rule, architecture, classes) and the frozen encoder; never ids, METADATA or "
    "ground truth. The default detector ships fitted parameters; other detectors need --params from "
    "`trojanscope detect fit`, or parameters written by configure mode.\n\n"
    "Configure mode (TrojAI's, from Round 9 on): --configure_mode --configure_models_dirpath DIR "
    "--learned_parameters_dirpath OUT refits the detector on DIR's labelled training models and writes "
    "OUT/NAME.json (the same fit as `trojanscope detect fit`); a later invocation with "
    "--learned_parameters_dirpath OUT scores with those parameters.\n\n"
    "Examples:\n\n"
    "  trojanscope detect --model_filepath M/model.pt --examples_dirpath M/clean_example_data "
    "--result_filepath out.txt --scratch_dirpath /tmp/s\n\n"
    "  trojanscope detect --detector weights --configure_mode --configure_models_dirpath zoo/r5-train "
    "--learned_parameters_dirpath learned/"
)


_EXPLAIN_HELP = (
    "Say what a model's trojan is: the verdict (a detector's P(trojaned)), the target class, the source class and "
    "a trigger that works, with its attack success -- the fraction of the given clean examples of the source "
    "class it flips to the target.\n\n"
    "Text models: candidates are the scan family's generic words, phrases and punctuation, ranked by how the head "
    "answers their mean shift of the encoder's summary vector; the best are inserted into the real example texts "
    "(as their own unit before a sentence, at every position). Image models: the (source, target) pair named is the "
    "one whose best one-colour square, stamped on the middle of each example's sign, raises the target's "
    "probability most beyond the other colours; that square is reported first, then Neural Cleanse masks and "
    "patterns per class pair, smallest first; --picture draws it. A clean model may "
    "have a natural trigger; the strongest one is reported either way and the verdict says which the probability "
    "favours.\n\n"
    "Examples:\n\n"
    "  trojanscope explain --model_filepath M/model.pt --examples_dirpath M/clean_example_data --json\n\n"
    "  trojanscope explain --model_filepath M/model.pt --examples_dirpath M/clean_example_data --picture patch.png"
)


_FIT_HELP = (
    "Fit a detector's parameters on a training zoo and save them as JSON (never a pickle).\n\n"
    "Only the contract inputs of each model are read, plus its ground_truth.csv label. The "
    "shipped default parameters are one fit over train zoos of every text preset:\n\n"
    "  trojanscope detect fit --zoo zoos/r5-train --zoo zoos/r6-train --zoo zoos/ds-train "
    "--detector default --out src/trojanscope/detectors/params/default.json\n\n"
    "--zoo may be repeated: the models of every zoo are fitted as one set (the exact recipe: "
    "docs/detectors.md, 'The shipped parameters'). Models a zoo's METADATA marks unconverged "
    "are left out.\n\n"
    "Zoos of 3 or more generators (preset names) are calibrated leaving one generator out, and "
    "the fit draws its answer towards 0.5 for models further out than its own (docs/detectors.md, "
    "'Calibration across generators'); zoos of one or two generators use stratified folds. "
    "--detector auto chooses its families by cross-validation: the detector to configure on a "
    "round's own train split.\n\n"
    "Parameters are JSON: a pickle or joblib file would run code when loaded."
)


def contract(
    ctx: typer.Context,
    model_filepath: Path = typer.Option(None, "--model_filepath", help="The classifier's model.pt."),
    result_filepath: Path = typer.Option(None, "--result_filepath", help="Where to write P(trojaned)."),
    scratch_dirpath: Path = typer.Option(None, "--scratch_dirpath", help="A folder the detector may write to."),
    examples_dirpath: Path = typer.Option(
        None, "--examples_dirpath", help="Folder of clean example texts class_{c}_example_{k}.txt."
    ),
    tokenizer_filepath: Path = typer.Option(None, "--tokenizer_filepath", help="Tokenizer file/folder (optional)."),
    embedding_filepath: Path = typer.Option(None, "--embedding_filepath", help="Encoder file/folder (optional)."),
    cls_token_is_first: bool = typer.Option(
        False, "--cls_token_is_first", help="TrojAI flag: summary = first token (used only without a config)."
    ),
    round_training_dataset_dirpath: Path = typer.Option(
        None, "--round_training_dataset_dirpath", help="Accepted for TrojAI compatibility and ignored."
    ),
    detector: str = typer.Option(
        "default", "--detector", help="Registered detector (see `trojanscope detectors`)."
    ),
    params: Path = typer.Option(None, "--params", help="Parameter JSON from `trojanscope detect fit`."),
    configure_mode: bool = typer.Option(
        False, "--configure_mode", help="Refit on --configure_models_dirpath and write the parameters into "
        "--learned_parameters_dirpath instead of scoring a model."),
    configure_models_dirpath: Path = typer.Option(
        None, "--configure_models_dirpath", help="Configure mode: labelled training models (a zoo, or a folder "
        "of model folders each with ground_truth.csv)."),
    learned_parameters_dirpath: Path = typer.Option(
        None, "--learned_parameters_dirpath", help="Configure mode writes NAME.json here; otherwise the "
        "parameters are read from here (default: the detector's shipped parameters)."),
    explain: bool = typer.Option(
        False, "--explain", help="Also write RESULT.explanation.json beside --result_filepath: the target "
        "class, the source class and trigger candidates with their attack success (see `trojanscope "
        "explain --help`; text models)."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from trojanscope.errors import ConfigError

    if configure_mode:
        if configure_models_dirpath is None or learned_parameters_dirpath is None:
            raise ConfigError("--configure_mode needs --configure_models_dirpath and --learned_parameters_dirpath")
        from trojanscope.detectors.runner import configure

        det, n = configure(configure_models_dirpath, learned_parameters_dirpath, detector)
        if det is None:
            typer.echo(f"detector {detector!r} has nothing to learn; nothing written")
        else:
            clf = det.classifier_
            typer.echo(f"configured {detector} on {n} models: cross-validated CE {clf.cv_cross_entropy:.4f}, "
                       f"ROC-AUC {clf.cv_roc_auc:.4f}; wrote {learned_parameters_dirpath}/{detector}.json")
        return
    if model_filepath is None or result_filepath is None:
        if model_filepath is None and result_filepath is None and examples_dirpath is None:
            typer.echo(ctx.get_help())
            raise typer.Exit(0)
        raise ConfigError("detect needs --model_filepath and --result_filepath (see `trojanscope detect --help`)")
    from trojanscope.detectors.runner import run_contract

    p = run_contract(
        model_filepath, result_filepath, examples_dirpath=examples_dirpath, scratch_dirpath=scratch_dirpath,
        tokenizer_filepath=tokenizer_filepath, embedding_filepath=embedding_filepath,
        cls_token_is_first=cls_token_is_first, detector=detector, params=params,
        learned_parameters_dirpath=learned_parameters_dirpath, explain=explain,
    )
    typer.echo(f"{p:.6f}")


def explain_command(
    model_filepath: Path = typer.Option(..., "--model_filepath", help="The classifier's model.pt."),
    examples_dirpath: Path = typer.Option(..., "--examples_dirpath", help="Its clean examples: texts "
                                          "class_{c}_example_{k}.txt, or images class_{c}_example_{k}.png."),
    tokenizer_filepath: Path = typer.Option(None, "--tokenizer_filepath", help="Tokenizer file/folder "
                                            "(optional)."),
    embedding_filepath: Path = typer.Option(None, "--embedding_filepath", help="Encoder file/folder (optional)."),
    detector: str = typer.Option("default", "--detector", help="Registered detector that gives the verdict's "
                                 "probability (see `trojanscope detectors`)."),
    params: Path = typer.Option(None, "--params", help="Its parameter JSON (default: the shipped ones)."),
    top_k: int = typer.Option(5, "--top-k", min=1, max=50, help="Trigger candidates to report."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout instead of text."),
    picture: Path = typer.Option(None, "--picture", help="Image models: also write a PNG here showing a clean "
                                 "example, the recovered patch and the example stamped with it, with the model's "
                                 "answers."),
) -> None:
    import json

    from trojanscope.detectors.explain import explain_model
    from trojanscope.detectors.modalities import optional_hook
    from trojanscope.detectors.runner import contract_inputs, score_inputs
    from trojanscope.models.modalities import modality_name

    inputs = contract_inputs(model_filepath, examples_dirpath=examples_dirpath,
                             tokenizer_filepath=tokenizer_filepath, embedding_filepath=embedding_filepath)
    draw = None
    if picture is not None:
        modality = modality_name(inputs.config)
        draw = optional_hook(modality, "picture")
        if draw is None:
            raise typer.BadParameter(f"{model_filepath} is a {modality} model; --picture draws image patches only",
                                     param_hint="--picture")
    p = score_inputs(inputs, detector, params=params)
    answer = explain_model(inputs, p, detector=detector, top_k=top_k)
    typer.echo(json.dumps(answer.to_json()) if as_json else answer.summary())
    if draw is not None:
        written = draw(inputs, answer, picture)
        typer.echo(f"picture: {written}" if written else "picture: none (no patch was found)", err=as_json)


def fit(
    zoo_dir: list[Path] = typer.Option(..., "--zoo", help="Training zoo with ground_truth.csv per model; "
                                       "repeat to fit on several zoos as one set (e.g. one per preset)."),
    detector: str = typer.Option("default", "--detector", help="Registered detector to fit."),
    out: Path = typer.Option(None, "--out", help="Output JSON (default params/NAME.json)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Processes computing features in parallel."),
    limit: int = typer.Option(None, "--limit", min=2, help="Use only the first N models of each zoo "
                              "(quick runs)."),
    executor: str = typer.Option("local", "--executor", help="local (processes here) or ray (Ray tasks on a "
                                 "fresh local cluster or RAY_ADDRESS; the zoo must be at the same path on every "
                                 "node; docs/cluster.md)."),
) -> None:
    from trojanscope.detectors.meta import PARTS, REFERENCE_WORDS
    from trojanscope.detectors.runner import fit_on_zoo

    out = out or Path("params") / f"{detector}.json"
    det, n = fit_on_zoo(zoo_dir, detector, out, workers=workers, limit=limit, executor=executor)
    clf = det.classifier_
    calibration = (f"left one of {clf.n_groups} generators out, abstains beyond reach {clf.reach_ref:.2f} at rate "
                   f"{clf.abstain:g}" if clf.calibration == "groups" else "stratified folds (one or two generators)")
    chosen = f", reads {' + '.join(det.used_families)}" if getattr(det, "candidates", None) else ""
    if getattr(det, "references", None):
        chosen += (" against all training models" if clf.reference == "global" else
                   f" with a classifier of its own per {REFERENCE_WORDS[clf.reference]}" if clf.reference in PARTS
                   else f" against each {REFERENCE_WORDS[clf.reference]}'s training models")
    typer.echo(f"fitted {detector} on {n} models{chosen}: {clf.settings}, "
               f"cross-validated CE {clf.cv_cross_entropy:.4f}, ROC-AUC {clf.cv_roc_auc:.4f}, "
               f"calibration: {calibration}; novelty bound mean |z| "
               + ("none" if clf.novelty_max is None else f"{clf.novelty_max:.2f}")
               + ("" if not getattr(det, "anchor_", None) else
                  f"; held within {det.anchor_['cap']:g} nat(s) of its {'+'.join(det.anchor_['families'])} anchor "
                  f"(cross-validated CE {det.anchor_['classifier'].cv_cross_entropy:.4f})")
               + f"; wrote {out}")


def detectors() -> None:
    import textwrap

    from trojanscope.detectors import DETECTORS, domain, load_detector

    width = max(map(len, DETECTORS.names()))

    def detail(text: str, indent: str = "") -> None:  # a shipped file's lines, under the description, <= 110 wide
        pad = " " * (width + 1) + indent
        typer.echo(textwrap.fill(text, 110, initial_indent=pad, subsequent_indent=pad + "  ", break_long_words=False))

    for name in DETECTORS.names():
        typer.echo(f"{name:<{width}} {DETECTORS.help(name)}")  # aligned to the longest name
        if getattr(DETECTORS.get(name), "shipped", None):
            shipped = load_detector(name)
            fitted = getattr(shipped, "trained_on_", {})
            bound = getattr(getattr(shipped, "classifier_", None), "novelty_max", None)
            novelty = ("warns on features further out than any training model's" if bound is not None else
                       "no feature-novelty bound (fitted before it; refit with `detect fit` to get one)")
            first, *shapes = domain.describe(fitted.get("domain"))
            preset = fitted.get("preset") or " + ".join(sorted(fitted.get("groups") or {}))  # groups: generators
            detail(f"shipped parameters fitted on {fitted.get('n_models', '?')} {preset + ' ' if preset else ''}models")
            detail(f"fit domain: {first}")
            for line in shapes:
                detail(line, "  ")
            detail(novelty)
            keys = shipped.abstain_keys() if hasattr(shipped, "abstain_keys") else ()
            if keys:
                detail(f"answers 0.5 outside the fit's {', '.join(domain.WORDS[k] for k in keys)}; warns on other "
                       "differences")
            clf = getattr(shipped, "classifier_", None)
            if clf is not None:
                calibrated = (f"calibrated leaving one of {clf.n_groups} generators out; abstains beyond its reach"
                              if clf.calibration == "groups" else
                              "calibrated on stratified folds; no abstention by reach "
                              "(refit over 3+ generators for it)")
                detail(calibrated)
            held = getattr(shipped, "anchor_", None)
            if held:
                detail(f"answer held within {held['cap']:g} nat(s) of log-odds of a {'+'.join(held['families'])}-only "
                       f"classifier's (fitted on {held['trained_on'].get('n_models', '?')} models)")


def register(app: typer.Typer, zoo: typer.Typer) -> None:
    # plain Click help, as for every command: types shown only where a value is taken (see trojanscope.cli)
    detect = typer.Typer(invoke_without_command=True, help=_CONTRACT_HELP, add_completion=False,
                         rich_markup_mode=app.rich_markup_mode)
    app.add_typer(detect, name="detect")
    detect.callback(invoke_without_command=True)(contract)
    app.command("explain", help=_EXPLAIN_HELP)(explain_command)
    detect.command(help=_FIT_HELP)(fit)
    app.command("detectors", help="List the registered detectors with one-line descriptions.")(detectors)
