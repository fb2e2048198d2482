"""A frozen text encoder that turns each text into ONE summary vector.

The summary rule decides which vector stands for the text: ``"first"`` (token 0, the [CLS] of
BERT-like models; TrojAI's ``cls_token_is_first``), ``"last"`` (the last non-padding token, GPT-2
style) or ``"mean"`` (the attention-masked mean over tokens, the pooling sentence-transformers
models were trained with; no L2 normalisation). Texts are sorted by token length and batched so
padding stays minimal; torch's own thread setting is respected. The encoder runs on the CPU unless
``TROJANSCOPE_ENCODER_DEVICE`` names a torch device (``cuda``, ``cuda:1``, ``mps``); the vectors it returns
are always CPU arrays. (``zoo make --device`` sets it together with the heads' training device.)

torch and transformers are imported lazily so ``import trojanscope.encoders`` stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trojanscope.encoders.sources import EncoderError, ResolvedSource, check_model_dir, resolve
from trojanscope.errors import ConfigError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

SUMMARY_RULES = ("first", "last", "mean")
FINGERPRINT_VERSION = "trojanscope-encoder-v1"  # bump when encode() changes what it computes
_HUGE_WEIGHTS = 2 << 30  # above this, fingerprint weights by config + sizes instead of reading every byte
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
)
_DECODER_TYPES = {
    "gpt2", "openai-gpt", "gpt_neo", "gptj", "gpt_neox", "gpt_bigcode", "ctrl", "opt", "bloom",
    "llama", "mistral", "mixtral", "qwen2", "phi", "phi3", "falcon", "gemma", "gemma2", "xlnet", "transfo-xl",
}
DEVICE_ENV = "TROJANSCOPE_ENCODER_DEVICE"
_LABELS = {"bert": "BERT", "distilbert": "DistilBERT", "gpt2": "GPT-2", "roberta": "RoBERTa"}


def summarize(hidden: torch.Tensor, attention_mask: torch.Tensor, rule: str) -> torch.Tensor:
    """Reduce token vectors ``[N, T, E]`` to summary vectors ``[N, E]`` under ``rule``.

    "last" uses the last position whose mask is 1, so it is right for right- and left-padded batches.
    "mean" divides by the clamped token count exactly as sentence-transformers' Pooling does.
    """
    import torch

    if rule == "first":
        return hidden[:, 0]
    if rule == "last":
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
        last = (attention_mask.long() * positions).argmax(dim=1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if rule == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    raise EncoderError(f"summary rule {rule!r} is unknown; use one of: {', '.join(SUMMARY_RULES)}")


def encoder_device() -> str:
    """The torch device the frozen encoder runs on: ``TROJANSCOPE_ENCODER_DEVICE`` or ``"cpu"``.

    Vectors computed on a GPU differ from the CPU's in the last float bits (kernels sum in another
    order); the embedding cache does not tell them apart, which is harmless for training heads but
    means a zoo built on a GPU is not bit-identical to the same zoo built on a CPU.
    """
    return os.environ.get(DEVICE_ENV, "").strip() or "cpu"


def _checked_device(name: str) -> Any:
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise EncoderError(f"{DEVICE_ENV}={name!r} is not a torch device; use cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EncoderError(f"{DEVICE_ENV}={name!r} but torch sees no CUDA device here; unset it to run on the CPU")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise EncoderError(f"{DEVICE_ENV}={name!r} but torch sees no MPS device here; unset it to run on the CPU")
    return device


@functools.lru_cache(maxsize=8)
def _load(model_dir: Path, tokenizer_dir: Path, device: str = "cpu") -> tuple[Any, Any]:
    """Load (tokenizer, model) once per process and folder pair, offline, onto ``device``."""
    target = None if device == "cpu" else _checked_device(device)  # a bad device fails before the weights load
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per worker process is noise
    try:
        tokenizer, model = _load_quiet(model_dir, tokenizer_dir, AutoModel, AutoTokenizer)
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    if target is not None:
        model.to(target)
    return tokenizer, model


def _load_quiet(model_dir: Path, tokenizer_dir: Path, AutoModel: Any, AutoTokenizer: Any) -> tuple[Any, Any]:  # noqa: N803
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise EncoderError(f"{tokenizer_dir}: cannot load a tokenizer from this folder ({_first_line(exc)})") from None
    try:
        model = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise EncoderError(f"{model_dir}: cannot load model weights from this folder ({_first_line(exc)})") from None
    model.eval()
    if tokenizer.pad_token is None:  # GPT-2 has none; its padded positions are masked out anyway
        if tokenizer.eos_token is None:
            raise EncoderError(f"{tokenizer_dir}: tokenizer has neither a pad nor an eos token; add a pad token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"  # "first" must see the first real token
    return tokenizer, model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _pooling_rule(model_dir: Path) -> str | None:
    """The pooling a sentence-transformers folder declares in modules.json, as a summary rule."""
    modules = model_dir / "modules.json"
    if not modules.is_file():
        return None
    try:
        entries = json.loads(modules.read_text())
        pooling = next(e for e in entries if e.get("type", "").endswith("Pooling"))
        cfg = json.loads((model_dir / pooling.get("path", "") / "config.json").read_text())
    except (OSError, ValueError, StopIteration, AttributeError):
        return None
    for key, rule in (("pooling_mode_mean_tokens", "mean"), ("pooling_mode_cls_token", "first"),
                      ("pooling_mode_lasttoken", "last")):
        if cfg.get(key):
            return rule
    return None


@functools.lru_cache(maxsize=32)
def _hash_files(paths: tuple[Path, ...], stamps: tuple[tuple[int, int], ...], by_size: bool) -> str:
    """sha256 over the files' bytes (or names and sizes when ``by_size``); ``stamps`` only keys the memo."""
    h = hashlib.sha256()
    for path, (size, _mtime) in zip(paths, stamps, strict=True):
        h.update(f"{path.name}\0{size}\0".encode())
        if not by_size:
            with path.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _files_digest(paths: list[Path], by_size: bool = False) -> str:
    paths = sorted(paths, key=lambda p: p.name)
    stamps = tuple((p.stat().st_size, p.stat().st_mtime_ns) for p in paths)
    return _hash_files(tuple(paths), stamps, by_size)


class Encoder:
    """One frozen encoder with a fixed summary rule and token window. Build it with :func:`get_encoder`."""

    def __init__(self, source: ResolvedSource, max_length: int | None = None, summary_rule: str | None = None):
        self.name = source.name
        self.flavor = source.flavor
        self.model_dir = source.model_dir
        self.tokenizer_dir = source.tokenizer_dir
        self.device = encoder_device()
        self._tokenizer, self._model = _load(source.model_dir, source.tokenizer_dir, self.device)
        config = self._model.config
        model_type = getattr(config, "model_type", "") or ""
        decoder = model_type in _DECODER_TYPES or bool(getattr(config, "is_decoder", False))
        self.embedding = source.embedding or _LABELS.get(model_type, model_type or "unknown")
        self.dim = int(getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or config.dim)
        if summary_rule is None:
            summary_rule = _pooling_rule(source.model_dir) or ("last" if decoder else "first")
        if summary_rule not in SUMMARY_RULES:
            raise EncoderError(f"summary rule {summary_rule!r} is unknown; use one of: {', '.join(SUMMARY_RULES)}")
        self.summary_rule = summary_rule
        # TrojAI's flag names the token a detector reads; a mean-pooled encoder never claims token 0.
        self.cls_token_is_first = summary_rule == "first"
        hard_max, soft_max = self._window_limits()
        self.model_max_length = hard_max
        self.num_special_tokens = int(self._tokenizer.num_special_tokens_to_add(pair=False))
        if max_length is None:
            max_length = soft_max - 2  # TrojAI truncated to the model maximum minus 2
        if isinstance(max_length, bool) or not isinstance(max_length, int | np.integer):
            raise EncoderError(f"max_length {max_length!r} must be an integer number of tokens")
        if not self.num_special_tokens < max_length <= hard_max:
            raise EncoderError(
                f"max_length {max_length} is outside ({self.num_special_tokens}, {hard_max}] for {self.name}; "
                f"choose a token window the model supports"
            )
        self.max_length = int(max_length)
        self.fingerprint = self._fingerprint()

    def __repr__(self) -> str:
        return (f"Encoder({self.name!r}, dim={self.dim}, summary_rule={self.summary_rule!r}, "
                f"max_length={self.max_length}, fingerprint={self.fingerprint[:12]})")

    def _window_limits(self) -> tuple[int, int]:
        """(hard maximum the positions allow, trained maximum sentence-transformers declares)."""
        config = self._model.config
        limits = [getattr(config, k, None) for k in ("max_position_embeddings", "n_positions", "n_ctx")]
        tok_max = getattr(self._tokenizer, "model_max_length", None)
        limits.append(tok_max if isinstance(tok_max, int) and tok_max < 1_000_000 else None)
        known = [int(x) for x in limits if isinstance(x, int) and x > 0]
        if not known:
            raise EncoderError(f"{self.model_dir}: cannot tell the model's maximum length; pass max_length")
        hard = min(known)
        soft = hard
        st_config = self.model_dir / "sentence_bert_config.json"
        if st_config.is_file():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                soft = min(hard, int(json.loads(st_config.read_text())["max_seq_length"]))
        return hard, soft

    def _fingerprint(self) -> str:
        weights = sorted({p for pat in _WEIGHT_PATTERNS for p in self.model_dir.glob(pat)})
        huge = sum(p.stat().st_size for p in weights) > _HUGE_WEIGHTS
        small = [self.model_dir / "config.json"] + [
            self.tokenizer_dir / f for f in _TOKENIZER_FILES if (self.tokenizer_dir / f).is_file()
        ]
        h = hashlib.sha256(FINGERPRINT_VERSION.encode())
        h.update(_files_digest(weights, by_size=huge).encode())
        h.update(_files_digest(small).encode())
        h.update(f"\0rule={self.summary_rule}\0max_length={self.max_length}".encode())
        return h.hexdigest()

    @staticmethod
    def _texts(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string; wrap it in a list")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
        return texts

    @functools.cached_property
    def word_token_ids(self) -> np.ndarray:
        """Ids of the vocabulary's tokens that decode to ASCII letters only (WordPiece ``##`` pieces and
        BPE word-start markers allowed; special tokens excluded): the alphabet of a token-level trigger search."""
        special = set(self._tokenizer.all_special_ids)
        ids = []
        for i in range(len(self._tokenizer)):
            piece = self._tokenizer.decode([i]).strip().removeprefix("##")
            if i not in special and piece.isascii() and piece.isalpha():
                ids.append(i)
        return np.asarray(ids, dtype=np.int64)

    @functools.cached_property
    def continuation_token_ids(self) -> np.ndarray:
        """Ids of the tokens that continue a word (WordPiece's ``##`` pieces): a unit cannot start with one."""
        tokens = self._tokenizer.convert_ids_to_tokens(list(range(len(self._tokenizer))))
        return np.asarray([i for i, tok in enumerate(tokens) if str(tok).startswith("##")], dtype=np.int64)

    @property
    def vocab_size(self) -> int:
        return len(self._tokenizer)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (no special tokens), as the tokenizer writes it."""
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))

    @functools.cached_property
    def _unit_frame(self) -> tuple[list[int], list[int]]:
        """The special token ids before and after a unit encoded alone (``[CLS]`` / ``[SEP]`` for BERT)."""
        template = self._tokenizer("a", return_special_tokens_mask=True)
        inner = [i for i, flag in enumerate(template["special_tokens_mask"]) if not flag]
        return template["input_ids"][: inner[0]], template["input_ids"][inner[-1] + 1:]

    def unit_vectors(self, ids: Any = None, one_hot: Any = None) -> Any:
        """The mean of a unit's contextual token vectors, the unit encoded alone between the model's special
        tokens: ``ids`` ``[B, m]`` token ids (a batch of units of one length) or ``one_hot`` ``[m, V]`` (one
        unit, differentiable through the input embeddings; grad mode is the caller's). A mean-pooled summary of
        a text with the unit inserted is close to the token-count-weighted mean of this and the text's own
        summary (``modalities.text.features.token_search``); only the "mean" rule has that form."""
        import torch

        if self.summary_rule != "mean":
            raise EncoderError(f"{self.name}: unit vectors need the mean summary rule, not {self.summary_rule!r}")
        before, after = (torch.tensor(part, dtype=torch.long) for part in self._unit_frame)
        model = self._model
        if one_hot is not None:
            table = model.get_input_embeddings().weight
            units = (one_hot.to(device=table.device, dtype=table.dtype) @ table)[None]
            m = units.shape[1]
            ends = [table[part.to(table.device)][None] for part in (before, after)]
            embeds = torch.cat([ends[0], units, ends[1]], dim=1)
            hidden = model(inputs_embeds=embeds).last_hidden_state
        else:
            ids = torch.as_tensor(ids, dtype=torch.long)
            m = ids.shape[1]
            seq = torch.cat([before.expand(len(ids), -1), ids, after.expand(len(ids), -1)], dim=1)
            hidden = model(input_ids=seq.to(model.device)).last_hidden_state
        return hidden[:, len(before): len(before) + m].mean(dim=1).float().cpu()

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token count of each text without special tokens and without truncation."""
        texts = self._texts(texts)
        if not texts:
            return []
        ids = self._tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        return [len(x) for x in ids]

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Summary vectors ``[N, dim]`` float32 in input order; texts longer than the window are truncated."""
        import torch

        texts = self._texts(texts)
        if batch_size < 1:
            raise ConfigError(f"batch_size {batch_size} must be at least 1")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # Longest first: padding stays minimal inside each batch and any memory peak comes at once.
        order = np.argsort(-np.asarray(self.count_tokens(texts)), kind="stable")
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), unit="text", desc=f"encode {self.name}")
        try:
            with torch.inference_mode():
                for start in range(0, len(texts), batch_size):
                    idx = order[start : start + batch_size]
                    batch = self._tokenizer(
                        [texts[i] for i in idx], padding=True, truncation=True,
                        max_length=self.max_length, return_tensors="pt",
                    )
                    if self.device != "cpu":
                        batch = batch.to(self._model.device)
                    hidden = self._model(**batch).last_hidden_state
                    summary = summarize(hidden, batch["attention_mask"], self.summary_rule)
                    out[idx] = summary.float().cpu().numpy()
                    if bar is not None:
                        bar.update(len(idx))
        finally:
            if bar is not None:
                bar.close()
        return out

    def fit_to_budget(self, text: str, budget: int, keep: str = "last") -> str:
        """Drop whole words from the start (``keep="last"``) or end (``keep="first"``) until ≤ ``budget`` tokens.

        Tokens are counted without special tokens, so ``budget = max_length - num_special_tokens`` fits
        the encoder window. The kept part is an exact substring (original spacing kept); a text whose
        single kept word is already over budget becomes "".
        """
        if keep not in ("first", "last"):
            raise ConfigError(f"keep={keep!r} is unknown; use 'first' or 'last'")
        if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 0:
            raise ConfigError(f"budget {budget!r} must be a non-negative integer number of tokens")
        if self.count_tokens([text])[0] <= budget:
            return text
        spans = [m.span() for m in re.finditer(r"\S+", text)]

        def piece(k: int) -> str:  # the text with k words kept
            if k == 0:
                return ""
            return text[spans[-k][0] :].rstrip() if keep == "last" else text[: spans[k - 1][1]].lstrip()

        lo, hi = 0, len(spans)  # piece(lo) fits, piece(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.count_tokens([piece(mid)])[0] <= budget:
                lo = mid
            else:
                hi = mid
        while lo > 0 and self.count_tokens([piece(lo)])[0] > budget:  # guard: counts are not strictly additive
            lo -= 1
        return piece(lo)

    def save_trojai_pickles(self, tokenizer_path: Path, embedding_path: Path) -> None:
        """Write the tokenizer and the encoder model as whole-object ``torch.save`` pickles, as TrojAI shipped
        them. Loading them runs code named in the file: for trusted use only (trojanscope never unpickles them).
        """
        import copy

        import torch

        # A pickle of a model on a GPU names that device and would not load on a CPU-only machine.
        model = self._model if self.device == "cpu" else copy.deepcopy(self._model).to("cpu")
        # The tokenizer as the round uses it: its window is the config's embedding_max_length (not the model's
        # 512), and its name is the encoder's id, not the folder it was loaded from on the builder's machine.
        tokenizer = copy.deepcopy(self._tokenizer)
        name = Path(self.flavor).name if Path(self.flavor).is_absolute() else self.flavor
        tokenizer.name_or_path = name
        tokenizer.model_max_length = self.max_length
        tokenizer.init_kwargs.update({"name_or_path": name, "model_max_length": self.max_length})
        if "max_length" in tokenizer.init_kwargs:
            tokenizer.init_kwargs["max_length"] = self.max_length
        for key, value in list(tokenizer.init_kwargs.items()):  # vocab_file & co: the file's name, not its folder
            if isinstance(value, str) and Path(value).is_absolute():
                tokenizer.init_kwargs[key] = Path(value).name
        for obj, path in ((tokenizer, tokenizer_path), (model, embedding_path)):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            torch.save(obj, path)

    def config_fields(self) -> dict[str, Any]:
        """The fields a model config records so :func:`encoder_for_config` can rebuild this encoder."""
        return {
            "embedding": self.embedding,
            "embedding_flavor": self.flavor,
            "summary_rule": self.summary_rule,
            "cls_token_is_first": self.cls_token_is_first,
            "embedding_max_length": self.max_length,
        }


@functools.lru_cache(maxsize=32)
def _build(source: ResolvedSource, max_length: int | None, summary_rule: str | None) -> Encoder:
    return Encoder(source, max_length=max_length, summary_rule=summary_rule)


def get_encoder(
    name_or_path: str = "minilm", max_length: int | None = None, summary_rule: str | None = None
) -> Encoder:
    """The encoder for a registered name, an HF id (offline) or a local model folder; one object per args.

    Defaults: ``summary_rule`` from the folder's sentence-transformers pooling ("mean"), else "first" for
    BERT-like and "last" for GPT-2-like models; ``max_length`` = the model's maximum minus 2 (TrojAI).
    """
    return _build(resolve(name_or_path), max_length, summary_rule)


def _as_dir(value: Any, what: str) -> Path | None:
    """A detector's --tokenizer_filepath/--embedding_filepath: used when it is a model folder."""
    if value is None or value == "":
        return None
    path = Path(value).expanduser()
    if path.is_dir():
        return check_model_dir(path.resolve(), what)
    if path.is_file():
        # TrojAI shipped whole pickled HF objects; unpickling untrusted files is refused, the flavor decides.
        log.info("%s %s is a file, not a model folder; using the config's embedding_flavor instead", what, path)
        return None
    raise EncoderError(f"{path}: {what} does not exist; pass a Hugging Face model folder or leave it out")


def config_summary_rule(config: Mapping) -> str | None:
    """The summary rule a (reduced) config names: ``summary_rule``, else TrojAI's ``cls_token_is_first``
    (True → "first", False → "last"); None when it names neither (the encoder's own rule applies)."""
    rule = config.get("summary_rule")
    if rule is None and "cls_token_is_first" in config:
        rule = "first" if config["cls_token_is_first"] in (True, "True", "true", 1) else "last"
    return rule


def encoder_for_config(config: Mapping, tokenizer_filepath: Any = None, embedding_filepath: Any = None) -> Encoder:
    """Rebuild the encoder a model was trained with from its (reduced) config.

    Reads ``embedding_flavor``, ``summary_rule`` (falling back to TrojAI's ``cls_token_is_first``:
    True → "first", False → "last") and ``embedding_max_length``. Folder arguments override where the
    weights/tokenizer are read from; the recorded flavor is kept.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"model config must be a mapping, got {type(config).__name__}")
    flavor = config.get("embedding_flavor")
    rule = config_summary_rule(config)
    if rule is not None and rule not in SUMMARY_RULES:
        raise ConfigError(f"config summary_rule {rule!r} is unknown; use one of: {', '.join(SUMMARY_RULES)}")
    max_length = config.get("embedding_max_length")
    if max_length is not None:
        try:
            max_length = int(max_length)
        except (TypeError, ValueError):
            raise ConfigError(f"config embedding_max_length {max_length!r} is not an integer") from None
    model_dir = _as_dir(embedding_filepath, "embedding folder")
    tokenizer_dir = _as_dir(tokenizer_filepath, "tokenizer folder")
    if model_dir is None and not flavor:
        raise ConfigError("model config has no embedding_flavor and no embedding folder was given; pass one")
    if model_dir is None and tokenizer_dir is None:
        return get_encoder(str(flavor), max_length=max_length, summary_rule=rule)
    base = resolve(str(flavor)) if model_dir is None else None
    model_dir = model_dir or base.model_dir
    source = ResolvedSource(
        name=str(flavor or model_dir),
        flavor=str(flavor or model_dir),
        embedding=config.get("embedding") or (base.embedding if base else None),
        model_dir=model_dir,
        tokenizer_dir=tokenizer_dir or (base.tokenizer_dir if base else model_dir),
    )
    return _build(source, max_length, rule)
