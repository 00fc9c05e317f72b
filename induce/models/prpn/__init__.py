"""PRPN (Shen et al. 2018, ``prpn``): :mod:`.model` (the parsing and reading networks' language model) and
:mod:`.reading` (the reading network); base config ``prpn.yaml``."""
from .model import PRPN, PRPNConfig

__all__ = ["PRPN", "PRPNConfig"]
