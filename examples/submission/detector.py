"""A minimal detector for a trojanscope (or TrojAI-style) leaderboard: the whole contract, one feature.

Inference mode (once per model):
    python detector.py --model_filepath M/model.pt --result_filepath OUT --scratch_dirpath S
                       [--examples_dirpath M/clean_example_data] [--learned_parameters_dirpath P] [...]
    writes P(trojaned) to OUT.
Configure mode (once per round, on its labelled train split):
    python detector.py --configure_mode --configure_models_dirpath MODELS --learned_parameters_dirpath P
                       --scratch_dirpath S
    writes what inference needs into P (here: params.json).

The feature is deliberately simple, the largest absolute weight of the head's output layer, turned into a
probability by a logistic fit on the train split: replace `feature()` with your detector. Everything else is what
the sandbox gives you: this folder is read-only, so write only to --scratch_dirpath, the parameters folder in
configure mode, or /tmp; there is no network.
"""

from __future__ import annotations

import argparse
import json
import math
import os


def feature(model_filepath: str) -> float:
    import torch

    import trojanscope  # the server's trojanscope: its safe loader reads TrojAI and trojanscope model files

    model = trojanscope.load_model(model_filepath)
    last = [p for name, p in model.named_parameters() if name.endswith("weight")][-1]
    with torch.no_grad():
        return float(last.abs().max())


def configure(models_dir: str, out_dir: str) -> None:
    """Fit p = sigmoid(a * (log feature - b)) on the labelled train models (ground_truth.csv beside each)."""
    xs, ys = [], []
    for name in sorted(os.listdir(models_dir)):
        folder = os.path.join(models_dir, name)
        truth = os.path.join(folder, "ground_truth.csv")
        if os.path.isfile(truth) and os.path.isfile(os.path.join(folder, "model.pt")):
            xs.append(math.log(feature(os.path.join(folder, "model.pt")) + 1e-12))
            with open(truth) as fh:
                ys.append(int(fh.read().strip()))
    if len(set(ys)) < 2:
        raise SystemExit(f"configure: {models_dir} needs clean and trojaned models, found labels {sorted(set(ys))}")
    mean = {y: sum(x for x, t in zip(xs, ys, strict=True) if t == y) / ys.count(y) for y in (0, 1)}
    spread = (sum((x - mean[y]) ** 2 for x, y in zip(xs, ys, strict=True)) / len(xs)) ** 0.5 or 1.0
    params = {"a": (mean[1] - mean[0]) / spread ** 2, "b": (mean[0] + mean[1]) / 2, "n_models": len(xs)}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "params.json"), "w") as fh:
        json.dump(params, fh)
    print(f"configured on {len(xs)} models: {params}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_filepath")
    parser.add_argument("--result_filepath")
    parser.add_argument("--scratch_dirpath")
    parser.add_argument("--examples_dirpath")
    parser.add_argument("--learned_parameters_dirpath")
    parser.add_argument("--configure_mode", action="store_true")
    parser.add_argument("--configure_models_dirpath")
    args, _ignored = parser.parse_known_args()  # tokenizer/embedding paths, --cls_token_is_first, ...
    if args.configure_mode:
        configure(args.configure_models_dirpath, args.learned_parameters_dirpath)
        return
    params = {"a": 1.0, "b": 0.0}  # unconfigured: a guess; configure mode learns better
    if args.learned_parameters_dirpath and os.path.isfile(os.path.join(args.learned_parameters_dirpath, "params.json")):
        with open(os.path.join(args.learned_parameters_dirpath, "params.json")) as fh:
            params = json.load(fh)
    x = math.log(feature(args.model_filepath) + 1e-12)
    p = 1 / (1 + math.exp(-max(-30.0, min(30.0, params["a"] * (x - params["b"])))))
    with open(args.result_filepath, "w") as fh:
        fh.write(f"{min(max(p, 0.01), 0.99):.6f}")


if __name__ == "__main__":
    main()
