"""Dynamic rounds: rounds built with the previous round's detectors in the loop (harvesting, lineage)."""

from trojanscope.dynamic.harvest import HarvestResult, harvest, lineage_chain, read_lineage

__all__ = ["HarvestResult", "harvest", "lineage_chain", "read_lineage"]
