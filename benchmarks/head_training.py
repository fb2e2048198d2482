"""Head training time of the zero-state path against nn.GRU / nn.LSTM, interleaved in one process (issue 51).

Trains a round5-cpu-sized head (384 -> bidirectional 2 x 256, dropout 0.25, batch 64; ``--architecture``
GruLinear or LstmLinear) on random vectors with ``train_head``, alternately with the fast path
(``training.FAST_GRU`` / ``FAST_LSTM``) off and on, ``--repeats`` times each, and prints the median seconds per
epoch of both, the speed-up, whether every pair of trained state dicts is bit-identical (GRU: it must be) and
their largest weight difference (LSTM: float tolerance). One thread, as a zoo worker trains. Interleaving keeps
both sides under the same machine load, which a zoo run on a shared 2-core machine does not.

    .venv/bin/python benchmarks/head_training.py --repeats 3 --epochs 2 [--architecture LstmLinear]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from trojanscope.models.architectures import HeadSpec
from trojanscope.rounds import training
from trojanscope.rounds.training import Adversarial, train_head


def run(fast: bool, x: np.ndarray, y: np.ndarray, epochs: int, adv: Adversarial, arch: str) -> tuple[float, dict]:
    training.FAST_GRU = training.FAST_LSTM = fast
    torch.manual_seed(0)
    model = HeadSpec(architecture=arch, input_size=x.shape[1], output_size=2, hidden_size=256, dropout=0.25,
                     bidirectional=True, n_layers=2).build()
    n = len(x)
    t0 = time.perf_counter()
    train_head(model, x[: n * 8 // 10], y[: n * 8 // 10], x[n * 8 // 10:], y[n * 8 // 10:], x[:0], y[:0], lr=1e-3,
               batch_size=64, max_epochs=epochs, min_epochs=1, patience=3, min_delta=0.0, early_stopping="none",
               adversarial=adv, seed=1)
    return (time.perf_counter() - t0) / epochs, model.state_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--adversarial", default="none", choices=["none", "fbf", "pgd"])
    ap.add_argument("--architecture", default="GruLinear", choices=["GruLinear", "LstmLinear"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6000, 384)).astype(np.float32)
    y = (x[:, :8].sum(1) > 0).astype(np.int64)
    adv = Adversarial(algorithm=args.adversarial, ratio=0.3, eps=0.02, iterations=3 if args.adversarial == "pgd" else 1)
    times: dict[bool, list[float]] = {False: [], True: []}
    identical, largest = True, 0.0
    for _ in range(args.repeats):
        states = {}
        for fast in (False, True):
            seconds, states[fast] = run(fast, x, y, args.epochs, adv, args.architecture)
            times[fast].append(seconds)
        identical &= _same(states[False], states[True])
        largest = max(largest, max(float((states[False][k] - states[True][k]).abs().max()) for k in states[True]))
    slow, fast = statistics.median(times[False]), statistics.median(times[True])
    rnn = "nn.GRU" if args.architecture == "GruLinear" else "nn.LSTM"
    print(f"{args.architecture} head, {args.adversarial} adversarial, 4,800 texts/epoch, 1 thread: {rnn} {slow:.2f} "
          f"s/epoch, zero-state path {fast:.2f} s/epoch (medians of {args.repeats}); speed-up {slow / fast:.2f}x; "
          f"trained weights bit-identical: {identical} (largest difference {largest:.2e})")


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


if __name__ == "__main__":
    main()
