"""Relevancy and memory language models (``rellstm``, ``relrnn``, ``memlstm``; Kerg et al. 2020), language models
only (parser kind ``none``): :mod:`.model`; base configs ``rellstm.yaml``, ``relrnn.yaml``, ``memlstm.yaml``."""
from .model import MemLSTM, RelLSTM, RelRNN

__all__ = ["MemLSTM", "RelLSTM", "RelRNN"]
