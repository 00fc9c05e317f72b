"""induce: unsupervised grammar induction toolkit (PRPN, ON-LSTM, PaLM) with one evaluation protocol."""

__version__ = "0.1.0"
