"""ON-LSTM (Shen et al. 2019, ``onlstm``): :mod:`.model`; base config ``onlstm.yaml``."""
from .model import ONLSTM, ONLSTMConfig

__all__ = ["ONLSTM", "ONLSTMConfig"]
