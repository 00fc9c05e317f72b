"""Simple PCFGs of Liu, Yang, Kim & Tu (2023): SN-PCFG (``snpcfg``) and SC-PCFG (``scpcfg``), independent left and right
productions: :mod:`.model`; base configs ``snpcfg.yaml``, ``scpcfg.yaml``."""
from .model import SCPCFG, SNPCFG, SimplePCFG

__all__ = ["SCPCFG", "SNPCFG", "SimplePCFG"]
