"""The low-rank neural PCFG of Yang, Zhao & Tu (2021, ``tnpcfg``): :mod:`.model`; base config ``tnpcfg.yaml``."""
from .model import TNPCFG, TNPCFGConfig

__all__ = ["TNPCFG", "TNPCFGConfig"]
