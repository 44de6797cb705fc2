"""Deterministic entity extraction (no LLM) and the interface for other extractors.

:class:`RuleExtractor` finds, in this order (an earlier rule's span wins):

* Acts: "Income Tax Assessment Act 1997" -> key ``itaa-1997`` (initials + year), so
  "ITAA 1997" and "ITAA1997" land on the same entity;
* acronym + year ("ITAA 1997", "ITAA1997");
* section references ("s.40-880", "section 40-880(2)", "ss 8-1") -> ``section:40-880``;
* dates ("2024-07-01", "1 July 2024", "July 1, 2024") -> ``date:2024-07-01``;
* amounts ("$20,000", "AUD 1.5 million", "€300") -> ``amount:$20000``;
* defined terms ('"car" means', '(the "Act")');
* capitalised multi-word names ("Australian Taxation Office");
* acronyms ("GST", "DNA").

An alias table (``{"tax office": "ATO"}``) maps any other surface to a canonical
name. A user can add an extractor of their own (for instance one that asks an LLM)
with ``kb.graph.add_extractor(obj)``: anything with ``extract(text) -> list[Entity]``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import NamedTuple, Protocol, runtime_checkable

from .model import slug

__all__ = [
    "Entity",
    "EntityExtractor",
    "RuleExtractor",
    "canonical_key",
    "resolve_aliases",
    "resolve_counted",
]


@dataclass(frozen=True)
class Entity:
    """One mention. ``key`` is the normalised identity (empty: derive it from ``name``)."""

    name: str
    kind: str = "name"
    key: str = ""
    surface: str = ""
    start: int = -1
    end: int = -1


@runtime_checkable
class EntityExtractor(Protocol):
    """Finds entities in a chunk's text. Must be deterministic for a given text."""

    def extract(self, text: str) -> list[Entity]:
        """The entities mentioned in ``text``, with their offsets in it."""
        ...


def canonical_key(name: str) -> str:
    """The comparable form of an entity name (what the node id is made from)."""
    return slug(name)


def resolve_aliases(entities: Sequence[Entity], aliases: Mapping[str, str]) -> list[Entity]:
    """Give every entity its key, mapping aliases to their canonical name; dedupe by key."""
    return [ent for ent, _ in resolve_counted(entities, aliases)]


def resolve_counted(
    entities: Sequence[Entity], aliases: Mapping[str, str]
) -> list[tuple[Entity, int]]:
    """:func:`resolve_aliases`, each entity with the number of ``entities`` it stands for
    (the mentions of one key in a chunk)."""
    out: dict[str, Entity] = {}
    counts: dict[str, int] = {}
    for ent in entities:
        key = ent.key or canonical_key(ent.name)
        name = ent.name
        if aliases:  # else nothing to look up (and no second key to derive)
            target = aliases.get(key) or aliases.get(canonical_key(ent.surface or ent.name))
            if target:
                key, name = canonical_key(target), target
        if not key:
            continue
        if key in out:
            counts[key] += 1
            continue
        counts[key] = 1
        surface = ent.surface or ent.name
        if (key, name, surface) != (ent.key, ent.name, ent.surface):
            ent = replace(ent, key=key, name=name, surface=surface)
        out[key] = ent
    return [(ent, counts[key]) for key, ent in out.items()]


_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for m in names
}
_MONTH_RE = "|".join(sorted((m.capitalize() for m in _MONTHS), key=len, reverse=True))

_CAP = r"[A-Z][\w'’\-]*"
_CONNECT = r"(?:of|and|for|the|on|in|to|de|van|von|der|la|du|&)"
_ACT = re.compile(rf"\b({_CAP}(?:[ \t]+(?:{_CONNECT}[ \t]+)*{_CAP})*[ \t]+Act)[ \t]+(\d{{4}})\b")
# Most patterns start "X(?<!\w\w)" where they said "\bX" for a word character X (a
# boundary before X is no word character before it): a pattern that starts with a
# character (or a set, or alternatives each starting with one) lets the regex engine
# skip to where that character is, where a leading \b tried every position. The same
# matches (tests/graph/test_graph_ingest.py holds each to its \b form), ~2-7 us less a
# rule and a 60-word chunk.
_ACRONYM_YEAR = re.compile(r"([A-Z](?<!\w\w)[A-Z]{1,7})\s?((?:19|20)\d{2})\b")
_SECTION = re.compile(
    r"(?:s(?<!\w\w)s?\.\s?|s(?<!\w\w)ections?\s+|S(?<!\w\w)ections?\s+"
    r"|s(?<!\w\w)s?\s(?=\d+[A-Za-z]?-\d))"
    r"(\d+[A-Za-z]{0,2}(?:-\d+[A-Za-z]{0,2})?)((?:\(\w{1,4}\))*)"
)
# Year digits are two word characters: the one before them is looked at three back.
_DATE_ISO = re.compile(r"((?:19|20)(?<!\w\w\w)\d{2})-(\d{2})-(\d{2})\b")
_DATE_DMY = re.compile(
    rf"(\d(?<!\w\w)\d?)(?:st|nd|rd|th)?\s+({_MONTH_RE})\.?,?\s+((?:19|20)\d{{2}})\b"
)
_MONTH_AT_BOUNDARY = "|".join(rf"{m[0]}(?<!\w\w){m[1:]}" for m in _MONTH_RE.split("|"))
_DATE_MDY = re.compile(
    rf"({_MONTH_AT_BOUNDARY})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+((?:19|20)\d{{2}})\b"
)
_AMOUNT = re.compile(
    r"(?:(?P<sym>(?:A|AU|US|NZ|C)?\$|€|£|¥)\s?|\b(?P<code>AUD|USD|EUR|GBP|NZD|CAD|JPY)\s?)"
    r"(?P<num>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?"
    r"(?:\s?(?P<mult>million|billion|thousand|mn|bn|m|k)\b)?"
)
_DEFINED = re.compile(
    r"[\"“]([^\"”\n]{2,60})[\"”]\s+(?:means|has the (?:same )?meaning|is defined|includes)\b"
    r"|\((?:the\s+|together,?\s+)?[\"“]([^\"”\n]{2,60})[\"”]\)"
)
_NAME = re.compile(rf"[A-Z](?<!\w\w)[\w'’\-]*(?:[ \t]+(?:{_CONNECT}[ \t]+)?{_CAP})+")
_ACRONYM = re.compile(r"[A-Z](?<!\w\w)[A-Z0-9\-]*[A-Z0-9]s?\b")

_WORD = re.compile(r"\S+")
_ANY_DIGIT = re.compile(r"\d")
_ASCII_DIGITS = "0123456789"
_ASCII_CAPITAL = re.compile("[A-Z]")
_AMOUNT_HINTS = ("$", "€", "£", "¥", "AUD", "USD", "EUR", "GBP", "NZD", "CAD", "JPY")


class RuleHints(NamedTuple):
    """Which rules can match a text at all: each flag is what every match of its rules
    must hold. The rules skip texts that lack it (ten regex scans cost ~110 us a 60-word
    chunk, most finding nothing); the entities found are the same. A named tuple: a
    frozen dataclass took ~1 us a chunk to make."""

    digits: bool  # sections (and every number below)
    years: bool  # "19" or "20": dates, acronym + year
    capitals: bool  # A-Z: names, acronyms, acronym + year
    act: bool  # "Act" and a digit
    amounts: bool  # a currency sign or code, and a digit
    quotes: bool  # a straight or opening curly double quote: defined terms


def rule_hints(text: str) -> RuleHints:
    """The :class:`RuleHints` of ``text``."""
    # In ASCII text \d is 0-9: ten substring tests in C beat the regex scan (~2 us).
    if text.isascii():
        digits = any(map(text.__contains__, _ASCII_DIGITS))
    else:
        digits = _ANY_DIGIT.search(text) is not None
    return RuleHints(
        digits=digits,
        years=digits and ("19" in text or "20" in text),
        capitals=_ASCII_CAPITAL.search(text) is not None,
        act=digits and "Act" in text,
        amounts=digits and any(hint in text for hint in _AMOUNT_HINTS),
        quotes='"' in text or "“" in text,
    )


_MULT = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9}
_SYMBOLS = {"€": "EUR", "£": "GBP", "¥": "JPY", "A$": "AUD", "AU$": "AUD", "US$": "USD",
            "NZ$": "NZD", "C$": "CAD", "$": "$"}  # fmt: skip
# Capitalised words that start sentences or headings, not names.
_LEADING = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "there",
        "their",
        "our",
        "we",
        "it",
        "in",
        "on",
        "at",
        "for",
        "from",
        "by",
        "of",
        "to",
        "and",
        "or",
        "but",
        "however",
        "although",
        "when",
        "where",
        "while",
        "if",
        "as",
        "after",
        "before",
        "during",
        "since",
        "between",
        "under",
        "with",
        "each",
        "every",
        "all",
        "some",
        "any",
        "no",
        "not",
        "is",
        "are",
        "was",
        "were",
        "be",
    ]
)
_NOT_ACRONYMS = frozenset(
    [
        "I",
        "II",
        "III",
        "IV",
        "V",
        "VI",
        "VII",
        "VIII",
        "IX",
        "X",
        "XI",
        "XII",
        "XIII",
        "XIV",
        "XV",
        "OK",
        "THE",
        "AND",
        "FOR",
        "NOT",
        "BUT",
        "ARE",
        "WAS",
    ]
)
_CONNECTORS = frozenset({"of", "and", "for", "the", "on", "in", "to", "de", "van", "von", "der",
                         "la", "du", "&"})  # fmt: skip


def _initials(name: str) -> str:
    return "".join(w[0] for w in name.split() if w[:1].isupper())


def _fmt_number(value: float, sep: str = "") -> str:
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return text.replace(",", sep)


class SpanClaims:
    """The entities kept so far and the spans they claim: one whose span overlaps a claimed
    span is dropped, so the rule that runs first wins."""

    def __init__(self) -> None:
        self.found: list[Entity] = []
        self.taken: list[tuple[int, int]] = []

    def add(self, ent: Entity) -> None:
        start, end = ent.start, ent.end
        for s, e in self.taken:  # a loop, not all() over a generator: ~1 us an entity
            if end > s and start < e:
                return
        self.taken.append((start, end))
        self.found.append(ent)


# How a rule hands over what it found: the extractor keeps it unless its span is taken.
AddEntity = Callable[[Entity], None]


class RuleExtractor:
    """Regex rules; see the module docstring. Spans already taken are not re-matched."""

    def __init__(
        self, *, names: bool = True, acronyms: bool = True, max_name_words: int = 6
    ) -> None:
        self.names = names
        self.acronyms = acronyms
        self.max_name_words = max_name_words

    def extract(self, text: str) -> list[Entity]:
        """Entities found by the rules of the module docstring, in the rules' order; a span one
        rule claimed is not matched again, so mentions never overlap."""
        claims = SpanClaims()
        add = claims.add
        hints = rule_hints(text)
        if hints.act:
            self._acts(text, add)
        if hints.years and hints.capitals:
            self._acronym_years(text, add)
        if hints.digits:
            self._section_refs(text, add)
        if hints.years:
            self._dates(text, add)
        if hints.amounts:
            self._amounts(text, add)
        if hints.quotes:
            self._defined_terms(text, add)
        if self.names and hints.capitals:
            self._names(text, add)
        if self.acronyms and hints.capitals:
            self._acronyms(text, add)
        return sorted(claims.found, key=lambda e: e.start)

    @staticmethod
    def _acts(text: str, add: AddEntity) -> None:
        for m in _ACT.finditer(text):
            year = m.group(2)
            # Words as they stand (a query is not normalised: spaces may be doubled).
            words = list(_WORD.finditer(m.group(1)))
            while words and words[0].group().casefold() in _LEADING:
                words.pop(0)
            acro = _initials(" ".join(w.group() for w in words))
            if len(acro) < 2:
                continue
            start = m.start(1) + words[0].start()
            name = f"{acro} {year}"
            add(Entity(name, "act", canonical_key(name), text[start : m.end()], start, m.end()))

    @staticmethod
    def _acronym_years(text: str, add: AddEntity) -> None:
        for m in _ACRONYM_YEAR.finditer(text):
            name = f"{m.group(1)} {m.group(2)}"
            add(Entity(name, "act", canonical_key(name), m.group(0), m.start(), m.end()))

    @staticmethod
    def _section_refs(text: str, add: AddEntity) -> None:
        for m in _SECTION.finditer(text):
            number = m.group(1)
            key = f"section:{number.lower()}"
            add(Entity(f"s.{number}", "section_ref", key, m.group(0), m.start(), m.end()))

    @staticmethod
    def _defined_terms(text: str, add: AddEntity) -> None:
        for m in _DEFINED.finditer(text):
            term = (m.group(1) or m.group(2)).strip()
            g = 1 if m.group(1) else 2
            add(Entity(term, "term", canonical_key(term), term, m.start(g), m.end(g)))

    @staticmethod
    def _acronyms(text: str, add: AddEntity) -> None:
        for m in _ACRONYM.finditer(text):
            word = m.group(0)
            core = word[:-1] if word.endswith("s") and word[:-1].isupper() else word
            letters = len(core) if core.isalpha() else sum(ch.isalpha() for ch in core)
            if letters < 2 or len(core) > 10 or core in _NOT_ACRONYMS or not core.isupper():
                continue
            add(Entity(core, "acronym", canonical_key(core), word, m.start(), m.end()))

    @staticmethod
    def _dates(text: str, add: AddEntity) -> None:
        def emit(y: int, mo: int, d: int, m: re.Match[str]) -> None:
            try:
                iso = date(y, mo, d).isoformat()
            except ValueError:
                return
            add(Entity(iso, "date", f"date:{iso}", m.group(0), m.start(), m.end()))

        for m in _DATE_ISO.finditer(text):
            emit(int(m.group(1)), int(m.group(2)), int(m.group(3)), m)
        for m in _DATE_DMY.finditer(text):
            emit(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)), m)
        for m in _DATE_MDY.finditer(text):
            emit(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)), m)

    @staticmethod
    def _amounts(text: str, add: AddEntity) -> None:
        for m in _AMOUNT.finditer(text):
            currency = _SYMBOLS.get(m.group("sym") or "", m.group("code") or "$")
            value = float(
                m.group("num").replace(",", "") + ("." + m.group("frac") if m.group("frac") else "")
            )
            mult = m.group("mult")
            if mult:
                value *= _MULT[mult.lower()]
            shown = _fmt_number(value, ",")
            name = f"{currency}{shown}" if currency == "$" else f"{currency} {shown}"
            key = f"amount:{currency.lower()}{_fmt_number(value)}"
            add(Entity(name, "amount", key, m.group(0).strip(), m.start(), m.end()))

    def _names(self, text: str, add: AddEntity) -> None:
        for m in _NAME.finditer(text):
            words = m.group(0).split()
            offset = m.start()
            # Drop sentence-initial function words ("The", "However") and trailing connectors.
            while words and (words[0].casefold() in _LEADING or words[0].casefold() in _CONNECTORS):
                offset = text.index(words[0], offset) + len(words[0])
                words.pop(0)
            while words and words[-1].casefold() in _CONNECTORS:
                words.pop()
            if len(words) < 2 or len(words) > self.max_name_words:
                continue
            # A shouted heading or acronyms joined by "and" are not one name.
            if any(len(w) > 1 and w.isupper() for w in words if w.casefold() not in _CONNECTORS):
                continue
            name = " ".join(words)
            start = text.index(words[0], offset)
            add(Entity(name, "name", canonical_key(name), name, start, start + len(name)))
