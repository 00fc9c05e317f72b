"""A small English-like PCFG treebank with known true trees (for tests and for machines without PTB).

The grammar is an :class:`nltk.PCFG`. Preterminals use Penn Treebank POS tags from
:data:`induce.trees.ptb.WORD_TAGS`, so evaluation's word-tag filter keeps every word; each
sentence ends with ``(. .)`` and some have a ``(, ,)``, so the filter is exercised.
Grammar symbols that cannot be written as NLTK nonterminals are renamed in the output
trees (:data:`OUTPUT_LABEL`): ``S_TOP`` -> ``S``, ``COMMA`` -> ``,``, ``PERIOD`` -> ``.``,
``THAT`` -> ``IN``. Trees are wrapped like ``.mrg`` trees: ``( (S ...) )`` (empty root label).

Sampling is deterministic: :func:`sample_treebank` draws from ``random.Random(seed)``.
"""
from __future__ import annotations

import hashlib
import random

import nltk

GRAMMAR_TEXT = """
S_TOP -> NP VP PERIOD [0.74] | PP COMMA NP VP PERIOD [0.14] | NP VP COMMA CC S PERIOD [0.12]
S -> NP VP [1.0]
NP -> DT NN [0.28] | DT JJ NN [0.14] | DT NNS [0.1] | PRP [0.14] | NNP [0.1] | NP PP [0.12] | DT NN SBAR [0.07] | CD NNS [0.05]
VP -> VBD NP [0.3] | VBD NP PP [0.15] | VBZ ADJP [0.1] | MD VB NP [0.15] | VBD SBAR [0.1] | VBD [0.1] | VBD RB [0.1]
PP -> IN NP [1.0]
SBAR -> THAT S [0.6] | WDT VP [0.4]
ADJP -> JJ [0.7] | RB JJ [0.3]
DT -> 'the' [0.5] | 'a' [0.3] | 'every' [0.1] | 'this' [0.1]
NN -> 'dog' [0.15] | 'cat' [0.15] | 'teacher' [0.1] | 'house' [0.1] | 'market' [0.1] | 'report' [0.1] | 'city' [0.1] | 'garden' [0.1] | 'company' [0.1]
NNS -> 'dogs' [0.2] | 'cats' [0.2] | 'shares' [0.2] | 'children' [0.2] | 'books' [0.2]
NNP -> 'Mary' [0.3] | 'John' [0.3] | 'Chicago' [0.2] | 'Tokyo' [0.2]
PRP -> 'she' [0.4] | 'he' [0.3] | 'they' [0.3]
JJ -> 'big' [0.25] | 'old' [0.25] | 'red' [0.2] | 'happy' [0.15] | 'new' [0.15]
RB -> 'quickly' [0.4] | 'very' [0.3] | 'often' [0.3]
VBD -> 'saw' [0.25] | 'liked' [0.2] | 'found' [0.2] | 'sold' [0.15] | 'slept' [0.2]
VBZ -> 'is' [0.6] | 'seems' [0.4]
VB -> 'see' [0.4] | 'buy' [0.3] | 'find' [0.3]
MD -> 'will' [0.6] | 'can' [0.4]
IN -> 'in' [0.3] | 'with' [0.3] | 'near' [0.2] | 'on' [0.2]
THAT -> 'that' [1.0]
WDT -> 'which' [1.0]
CC -> 'and' [0.6] | 'but' [0.4]
CD -> 'two' [0.4] | 'three' [0.3] | '10' [0.2] | '1.5' [0.1]
COMMA -> ',' [1.0]
PERIOD -> '.' [1.0]
"""

#: Grammar symbol -> label written in the output trees.
OUTPUT_LABEL = {"S_TOP": "S", "COMMA": ",", "PERIOD": ".", "THAT": "IN"}
START = "S_TOP"
#: Sentences longer than this (words incl. punctuation) are rejected and redrawn.
MAX_LENGTH = 40
MAX_DEPTH = 25


def grammar() -> nltk.PCFG:
    """The PCFG (NLTK checks that each left-hand side's probabilities sum to 1)."""
    return nltk.PCFG.fromstring(GRAMMAR_TEXT)


def grammar_sha256() -> str:
    return hashlib.sha256(GRAMMAR_TEXT.encode("utf-8")).hexdigest()


class _TooDeep(Exception):
    pass


def _sample(pcfg: nltk.PCFG, symbol: nltk.Nonterminal, rng: random.Random, depth: int) -> nltk.Tree:
    if depth > MAX_DEPTH:
        raise _TooDeep
    productions = pcfg.productions(lhs=symbol)
    draw = rng.random()
    chosen = productions[-1]  # guards against rounding in the cumulative sum
    cumulative = 0.0
    for production in productions:
        cumulative += production.prob()
        if draw < cumulative:
            chosen = production
            break
    children = [
        _sample(pcfg, item, rng, depth + 1) if isinstance(item, nltk.Nonterminal) else item for item in chosen.rhs()
    ]
    name = symbol.symbol()
    return nltk.Tree(OUTPUT_LABEL.get(name, name), children)


def sample_tree(pcfg: nltk.PCFG, rng: random.Random) -> nltk.Tree:
    """One ``( (S ...) )`` tree of at most :data:`MAX_LENGTH` leaves."""
    while True:
        try:
            tree = _sample(pcfg, nltk.Nonterminal(START), rng, 0)
        except _TooDeep:
            continue
        if len(tree.leaves()) <= MAX_LENGTH:
            return nltk.Tree("", [tree])


def sample_treebank(sizes: dict[str, int], seed: int = 0) -> dict[str, list[nltk.Tree]]:
    """``{split: [tree, ...]}`` with ``sizes[split]`` trees each, drawn in the order of ``sizes``.

    Each split has its own generator seeded from ``(seed, split)``, so changing the size
    of one split does not change the others.
    """
    pcfg = grammar()
    treebank = {}
    for split, size in sizes.items():
        split_seed = int.from_bytes(hashlib.sha256(f"{seed}:{split}".encode()).digest()[:8], "big")
        rng = random.Random(split_seed)
        treebank[split] = [sample_tree(pcfg, rng) for _ in range(size)]
    return treebank


def tree_in_grammar(tree: nltk.Tree, pcfg: nltk.PCFG | None = None) -> bool:
    """True iff every local tree of ``( (S ...) )`` is a production of the grammar."""
    pcfg = pcfg or grammar()
    to_symbol = {label: symbol for symbol, label in OUTPUT_LABEL.items() if symbol not in (START, "THAT")}
    allowed = {(p.lhs().symbol(), tuple(str(x) if isinstance(x, nltk.Nonterminal) else x for x in p.rhs()))
               for p in pcfg.productions()}
    if tree.label() != "" or len(tree) != 1:
        return False

    def symbol_of(node, top: bool) -> str:
        if top and node.label() == "S":
            return START
        # THAT and IN both print as IN: decide by the word.
        if node.label() == "IN" and node.leaves() == ["that"]:
            return "THAT"
        return to_symbol.get(node.label(), node.label())

    def check(node, top: bool) -> bool:
        lhs = symbol_of(node, top)
        rhs = tuple(symbol_of(child, False) if isinstance(child, nltk.Tree) else child for child in node)
        if (lhs, rhs) not in allowed:
            return False
        return all(check(child, False) for child in node if isinstance(child, nltk.Tree))

    return check(tree[0], True)
