"""Text triggers: pools, sentence-level insertion, TrojAI-style poisoning and neutrality screening.

Flow: pick a pool item (:func:`load_pool`, :func:`split_pool` per split), :func:`render` it into the
inserted unit, describe the trigger as a :class:`TriggerSpec`, then :func:`poison` the training set and
build :func:`triggered_eval` / :func:`spurious_eval` sets. :func:`screen_neutral` drops pool items that
move clean models on their own. Image rounds: :func:`make_polygon` draws a :class:`PolygonTrigger`,
:func:`stamp` paints it on a sign (:func:`trigger_mask` says where).
"""

from trojanscope.triggers.catalog import POOLS, TRIGGER_TYPES, generate_phrases, load_pool, render, split_pool
from trojanscope.triggers.poison import PoisonedData, poison, spurious_eval, triggered_eval
from trojanscope.triggers.polygon import PolygonTrigger, make_polygon, stamp, trigger_mask
from trojanscope.triggers.screen import screen_neutral
from trojanscope.triggers.spec import CONDITIONS, HALVES, TriggerSpec
from trojanscope.triggers.text import insert, insert_at, insertion_positions, split_sentences

__all__ = [
    "CONDITIONS",
    "HALVES",
    "POOLS",
    "TRIGGER_TYPES",
    "PoisonedData",
    "PolygonTrigger",
    "TriggerSpec",
    "generate_phrases",
    "insert",
    "insert_at",
    "insertion_positions",
    "load_pool",
    "make_polygon",
    "poison",
    "render",
    "screen_neutral",
    "split_pool",
    "split_sentences",
    "spurious_eval",
    "stamp",
    "trigger_mask",
    "triggered_eval",
]
