"""A method's options, declared once: the range and help of each field, checked by the library, drawn as
a widget by the app and parsed from the bench's `--option METHOD.NAME=VALUE`.

An options class is a frozen dataclass over `MethodOptions` whose every field is marked with
`count(...)`, `number(...)`, `choice(...)`, `flag(...)` or `asset(...)`, its help text given as `help=`.
Every field is checked whenever the class is made (`MethodOptions.__post_init__`); a rule that ties
fields together goes in the class's `check`. A bound one option sets on another is declared with the
bounded one: `count(1, at_most="max_ngram", help=...)`. An asset (a shipped file's name or a file path)
and a choice marked `widget=False` are for the library and the CLI only: no widget sets them, so a
visitor of a public page cannot point a method at a file. Live objects are no options: a run is lent
them (`run(..., session=, executor=)`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from specviz.errors import SpecvizError
from specviz.limits import MAX_SPECULATION_LENGTH, check_count, check_number


def count(
    default: int | None,
    least: int = 1,
    most: int = MAX_SPECULATION_LENGTH,
    limit: str = "",
    at_most: str = "",
    *,
    help: str,
) -> Any:
    """A whole-number option in [least, most]; `limit`: the AppLimits field that bounds it further
    in the app (e.g. "speculation_length", "tree_nodes"); `at_most`: the option of the same class it
    may not exceed (a min_ beside its max_). None as default: the method chooses."""
    return _field(default, "int", help, range=(least, most), limit=limit, at_most=at_most)


def number(default: float | None, least: float, most: float, *, help: str) -> Any:
    """A real-valued option in [least, most]. None as default: the method chooses."""
    return _field(default, "float", help, range=(least, most))


def choice(default: str, choices: tuple[str, ...], *, help: str, widget: bool = True) -> Any:
    """One of a few named values; `widget=False`: the library's and the CLI's only (a build to compare)."""
    return _field(default, "choice", help, choices=tuple(choices), widget=widget)


def flag(default: bool, *, help: str) -> Any:
    """True or false."""
    return _field(default, "bool", help)


def asset(default: str, *, help: str) -> Any:
    """A file the method reads (a classifier, a datastore, an adapter, a head): "auto" or another name the
    method knows, or a path; the library's and the CLI's only, never a widget."""
    return _field(default, "text", help, widget=False)


def _field(default: Any, kind: str, help: str, **meta: Any) -> Any:
    if not help.strip():
        raise TypeError("an option says what it does: give it a help text")
    return dataclasses.field(default=default, metadata={"kind": kind, "help": help, **meta})


class MethodOptions:
    """The base of every method's options dataclass: each field checked when the options are made."""

    def __post_init__(self) -> None:
        check_fields(self)
        self.check()

    def check(self) -> None:
        """A rule that ties fields together (raise SpecvizError); none by default."""


@dataclass(frozen=True)
class OptionField:
    """One tunable option of one method, as a widget or a flag needs it."""

    name: str
    kind: str  # "int", "float", "bool", "choice", or "text" (a name or file path)
    default: Any  # None: the method chooses (e.g. DISCO's tuned threshold)
    least: float = 0
    most: float = 0
    choices: tuple[str, ...] = ()
    limit: str = ""  # the AppLimits field bounding an int option in the app ("": only `most`)
    help: str = ""
    at_most: str = ""  # the option of the same class this one may not exceed ("": none)
    widget: bool = True  # the app draws it; False: the library and the CLI set it (a path, a build to compare)

    def bound(self, limits: Any) -> float:
        """The largest value allowed where `limits` (the app's AppLimits) also apply."""
        return min(self.most, getattr(limits, self.limit)) if self.limit else self.most

    def check(self, value: Any) -> Any:
        """`value` if it is allowed, else a SpecvizError naming the option and its range."""
        if value is None and self.default is None:
            return None
        if self.kind == "int":
            return check_count(self.name, value, most=int(self.most), least=int(self.least))
        if self.kind == "float":
            return check_number(self.name, value, self.least, self.most)
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise SpecvizError(f"{self.name} must be true or false, got {value!r}")
            return value
        if self.kind == "text":
            if not isinstance(value, (str, os.PathLike)):
                raise SpecvizError(f"{self.name} must be text (a name or a path), got {value!r}")
            return value
        if value not in self.choices:
            raise SpecvizError(f"{self.name} must be one of {', '.join(self.choices)}, got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        """A value typed as text (a command-line flag, a text box of the app)."""
        text = text.strip()
        if self.default is None and text.lower() in ("", "none", "auto"):
            return None
        try:
            if self.kind == "int":
                return self.check(int(text))
            if self.kind == "float":
                return self.check(float(text))
        except ValueError:
            raise SpecvizError(f"{self.name} must be a number, got {text!r}") from None
        if self.kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise SpecvizError(f"{self.name} must be true or false, got {text!r}")
            return text.lower() in ("true", "1", "yes")
        return self.check(text)


def parse_option(cls: type, name: str, text: str) -> Any:
    """The value of option `name` of options class `cls` typed as text (a CLI flag), typed and
    checked; anything else refused."""
    settable = {f.name: f for f in option_fields(cls, every=True)}
    if name not in settable:
        raise SpecvizError(f"no option {name!r} to set here (its options: {', '.join(settable) or 'none'})")
    return settable[name].parse(text)


def check_fields(options: Any) -> None:
    """Check every field of an options dataclass instance: each in its range or among its choices,
    then each bound one option sets another."""
    fields_ = option_fields(type(options), every=True)
    for f in fields_:
        f.check(getattr(options, f.name))
    for f in (f for f in fields_ if f.at_most):
        value, bound = getattr(options, f.name), getattr(options, f.at_most)
        if value is not None and bound is not None and value > bound:
            raise SpecvizError(
                f"{f.name} ({value}) must be at most {f.at_most} ({bound}): lower one or raise the other"
            )


def option_fields(cls: type, every: bool = False) -> tuple[OptionField, ...]:
    """The fields of an options dataclass that the app draws as widgets, in declaration order;
    `every`: also those that only the library and the CLI may set (assets, `widget=False` choices)."""
    return tuple(f for f in _option_fields(cls) if every or f.widget)


# The cache takes the class as a plain `type`: mypy does not see a `type[X]` (what `type(options)`
# is) as Hashable, which functools.cache asks of its arguments (python/mypy#11470).
@cache
def _option_fields(cls: type) -> tuple[OptionField, ...]:
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "kind" not in meta:
            raise TypeError(f"{cls.__name__}.{f.name} is no option: mark it with count, number, choice, flag or asset")
        least, most = meta.get("range", (0, 0))
        out.append(
            OptionField(
                f.name,
                meta["kind"],
                f.default,
                least,
                most,
                meta.get("choices", ()),
                meta.get("limit", ""),
                meta["help"],
                meta.get("at_most", ""),
                meta.get("widget", True),
            )
        )
    return tuple(out)
