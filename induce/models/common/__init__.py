"""Building blocks shared by several families, registering no model: the AWD-LSTM base (:mod:`.awd`: weight-
dropped LSTMs, locked dropout, the tied language model of ON-LSTM, PRPN and PaLM), relevancy screening
(:mod:`.relevancy`: PRPN, PaLM and the relevancy LSTMs), the released initialisations (:mod:`.init`) and
the grammars' shared networks and sampling (:mod:`.grammar`: the PCFG families)."""
