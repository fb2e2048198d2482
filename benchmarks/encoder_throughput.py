"""Encoder throughput: sentences/s for UCI-like short texts and 128-token texts, cold vs warm cache.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/encoder_throughput.py [--encoder minilm] [--n-short 600]

Short texts are the UCI Sentiment Labelled Sentences (from TROJANSCOPE_DATA/uci_sentences) when
present, else generated sentences of similar length. Long texts are those sentences glued together and
cut to exactly 126 word-piece tokens (128 with [CLS]/[SEP]), encoded with max_length=128.
"cold" = empty cache (encode + write), "warm" = the same texts again (all hits). "batch 1" encodes one
text at a time on a subset: the cost of vectors that cannot depend on batch composition.
Uses torch's own thread count (set OMP_NUM_THREADS / torch.set_num_threads to change it).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def short_texts(n: int, seed: int) -> tuple[list[str], str]:
    root = Path(os.environ.get("TROJANSCOPE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    files = sorted((root / "uci_sentences").glob("*_labelled.txt"))
    rng = random.Random(seed)
    if files:
        lines = [ln.split("\t")[0].strip() for f in files for ln in f.read_text(errors="replace").splitlines()]
        lines = sorted({ln for ln in lines if ln})
        rng.shuffle(lines)
        return lines[:n], f"UCI sentences ({root / 'uci_sentences'})"
    words = ["the", "movie", "phone", "food", "service", "was", "really", "not", "very", "good", "bad", "great",
             "awful", "and", "but", "plot", "acting"]
    return [" ".join(rng.choices(words, k=rng.randint(4, 20))) + "." for _ in range(n)], "generated UCI-like"


def long_texts(encoder, pool: list[str], n: int, tokens: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        text = " ".join(rng.sample(pool, 12))
        fitted = encoder.fit_to_budget(text, tokens, keep="first")
        if encoder.count_tokens([fitted])[0] >= tokens - 2:
            out.append(fitted)
    return out


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:8.1f} sentences/s  ({n} in {seconds:6.2f} s)"


def main() -> None:
    import torch

    from trojanscope.encoders import CacheStats, EmbeddingCache, encode_cached, get_encoder

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--n-short", type=int, default=600)
    ap.add_argument("--n-long", type=int, default=160)
    ap.add_argument("--n-batch1", type=int, default=48, help="texts encoded one at a time (0 to skip)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    t0 = time.perf_counter()
    enc_short = get_encoder(args.encoder)
    enc_long = get_encoder(args.encoder, max_length=128)
    print(f"encoder {enc_short.name}: dim {enc_short.dim}, rule {enc_short.summary_rule}, "
          f"loaded in {time.perf_counter() - t0:.1f} s; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work slows every number)")
    shorts, origin = short_texts(args.n_short, args.seed)
    longs = long_texts(enc_long, shorts, args.n_long, 126, args.seed)
    for label, enc, texts in (("short", enc_short, shorts), ("128-token", enc_long, longs)):
        lengths = enc.count_tokens(texts)
        print(f"\n{label} texts: {len(texts)} from {origin}; tokens mean {sum(lengths) / len(lengths):.1f}, "
              f"max {max(lengths)} (+{enc.num_special_tokens} special), window {enc.max_length}")
        with tempfile.TemporaryDirectory() as tmp:
            cache = EmbeddingCache(Path(tmp) / "bench.sqlite")
            for phase in ("cold", "warm"):
                stats = CacheStats()
                encode_cached(enc, texts, cache, stats, batch_size=args.batch_size)
                print(f"  {phase:5s} cache (hits {stats.hits:4d}, encoded {stats.encoded:4d}): "
                      f"{rate(len(texts), stats.seconds)}")
        t = time.perf_counter()
        enc.encode(texts, batch_size=args.batch_size)
        print(f"  no cache, batch {args.batch_size:3d}:                {rate(len(texts), time.perf_counter() - t)}")
        if args.n_batch1:
            sub = texts[: args.n_batch1]
            t = time.perf_counter()
            for text in sub:
                enc.encode([text])
            print(f"  no cache, batch   1:                {rate(len(sub), time.perf_counter() - t)}")


if __name__ == "__main__":
    main()
