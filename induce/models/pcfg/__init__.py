"""Neural PCFGs of Kim, Dyer & Rush (2019): the N-PCFG (``npcfg``) and the compound PCFG (``cpcfg``, its variant
with a sentence-level ``z``): :mod:`.model`; base configs ``npcfg.yaml``, ``cpcfg.yaml``."""
from .model import NPCFG, CompoundPCFG, PCFGConfig

__all__ = ["NPCFG", "CompoundPCFG", "PCFGConfig"]
