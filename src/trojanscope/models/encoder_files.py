"""Which encoder a TrojAI model folder is read with: its ``embeddings/``/``tokenizers/`` files, the config's
Hugging Face id, or one the user names, in that order, with a message saying which and why.

TrojAI Round 5/6 shipped ``embeddings/<name>.pt`` and ``tokenizers/<name>.pt`` as whole pickled
``transformers`` objects. Those never pass the allow-list (they name transformers classes), so for real
rounds the config's ``embedding_flavor`` decides; a Hugging Face model *folder* in their place is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trojanscope.errors import ConfigError, ModelFileError, UnsafeModelFileError
from trojanscope.models.layout import read_config
from trojanscope.models.safe_pickle import safe_unpickle


@dataclass(frozen=True)
class EncoderChoice:
    """Where the encoder comes from: ``kind`` is ``"folder"``, ``"flavor"`` or ``"user"``; ``value`` the
    folder, HF id or user name; ``message`` one line for the log saying what was used and why."""

    kind: str
    value: str
    message: str


def find_encoder_file(model_dir: Path, config: dict[str, Any], kind: str) -> Path | None:
    """The round's ``embeddings/`` or ``tokenizers/`` entry for this model (``kind`` is the folder name).

    Looks beside the model folder's ``models/`` parent (TrojAI's round layout) for the config's
    ``embedding_filename``, else ``<embedding>-<flavor>.pt`` with ``/`` replaced by ``-``.
    """
    names = []
    if config.get("embedding_filename"):
        names.append(str(config["embedding_filename"]))
    if config.get("embedding") and config.get("embedding_flavor"):
        names.append(f"{config['embedding']}-{str(config['embedding_flavor']).replace('/', '-')}.pt")
    for root in (model_dir.parent.parent, model_dir.parent, model_dir):
        for name in names:
            for candidate in (root / kind / name, root / kind / Path(name).stem):
                if candidate.exists():
                    return candidate
    return None


def _probe(path: Path) -> tuple[bool, str]:
    """(usable as an encoder source, why) for one embeddings/tokenizers entry, never running its code."""
    if path.is_dir():
        return True, f"{path} is a model folder"
    try:
        obj = safe_unpickle(path)
    except UnsafeModelFileError as exc:
        return False, f"{path.name} is a whole pickled object and was not unpickled ({str(exc).split(': ', 2)[1]})"
    except ModelFileError as exc:
        return False, f"{path.name} is unreadable ({exc})"
    return False, f"{path.name} unpickled safely but holds {type(obj).__name__} weights without an architecture"


def choose_encoder(model_dir: Path | str, config: dict[str, Any] | None = None,
                   user_encoder: str | None = None) -> EncoderChoice:
    """Decide the encoder source for a TrojAI (or trojanscope) model folder; see the module docstring."""
    model_dir = Path(model_dir)
    config = read_config(model_dir) if config is None else config
    notes = []
    path = find_encoder_file(model_dir, config, "embeddings")
    if path is not None:
        usable, why = _probe(path)
        if usable:
            return EncoderChoice("folder", str(path), f"encoder: {why}; using it")
        notes.append(why)
    flavor = config.get("embedding_flavor")
    if flavor:
        prefix = "; ".join(notes) + "; " if notes else ""
        message = f"encoder: {prefix}using embedding_flavor {flavor!r} from config.json"
        return EncoderChoice("flavor", str(flavor), message)
    if user_encoder:
        prefix = "; ".join(notes) + "; " if notes else "config.json has no embedding_flavor; "
        return EncoderChoice("user", user_encoder, f"encoder: {prefix}using the given encoder {user_encoder!r}")
    raise ConfigError(
        f"{model_dir}: no usable encoder (no embeddings folder, no embedding_flavor in config.json); pass --encoder"
    )


def encoder_for_model_dir(model_dir: Path | str, config: dict[str, Any] | None = None,
                          user_encoder: str | None = None) -> tuple[Any, EncoderChoice]:
    """Build the encoder :func:`choose_encoder` picks; returns ``(Encoder, choice)`` (log ``choice.message``)."""
    from trojanscope.encoders import encoder_for_config, get_encoder

    model_dir = Path(model_dir)
    config = read_config(model_dir) if config is None else config
    choice = choose_encoder(model_dir, config, user_encoder)
    if choice.kind == "folder":
        tokenizer = find_encoder_file(model_dir, config, "tokenizers")
        tok_dir = tokenizer if tokenizer is not None and tokenizer.is_dir() else None
        return encoder_for_config(config, tokenizer_filepath=tok_dir, embedding_filepath=choice.value), choice
    if choice.kind == "flavor":
        return encoder_for_config(config), choice
    rule = config.get("summary_rule")
    max_length = config.get("embedding_max_length")
    return get_encoder(choice.value, max_length=max_length, summary_rule=rule), choice
