"""A method's options, declared once: the range of each field, checked by the library, drawn as a
widget by the app and parsed from the bench's `--option METHOD.NAME=VALUE`.

An options dataclass marks a tunable field with `count(...)`, `number(...)` or `choice(...)`; its
help text is the field's comment: the comment at the end of its declaration (on whichever line the
formatter leaves it) and the comment-only lines right below, for a help too long for one line.
A bound that one option sets on another is declared with the bounded one: `count(1, at_most="max_ngram")`.
Fields without a mark (a bool aside) are for the library and the CLI only: file paths never become
widgets, so a visitor of a public page cannot point a method at a file. Live objects are no
options: a run is lent them (`run(..., session=, executor=)`).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import os
import textwrap
import tokenize
from dataclasses import dataclass
from functools import cache
from typing import Any

from specviz.errors import SpecvizError
from specviz.limits import MAX_SPECULATION_LENGTH, check_count, check_number


def count(
    default: int | None, least: int = 1, most: int = MAX_SPECULATION_LENGTH, limit: str = "", at_most: str = ""
) -> Any:
    """A whole-number option in [least, most]; `limit`: the AppLimits field that bounds it further
    in the app (e.g. "speculation_length", "tree_nodes"); `at_most`: the option of the same class it
    may not exceed (a min_ beside its max_). None as default: the method chooses."""
    meta = {"kind": "int", "range": (least, most), "limit": limit, "at_most": at_most}
    return dataclasses.field(default=default, metadata=meta)


def number(default: float | None, least: float, most: float) -> Any:
    """A real-valued option in [least, most]. None as default: the method chooses."""
    return dataclasses.field(default=default, metadata={"kind": "float", "range": (least, most)})


def choice(default: str, choices: tuple[str, ...]) -> Any:
    """One of a few named values."""
    return dataclasses.field(default=default, metadata={"kind": "choice", "choices": tuple(choices)})


@dataclass(frozen=True)
class OptionField:
    """One tunable option of one method, as a widget or a flag needs it."""

    name: str
    kind: str  # "int", "float", "bool", "choice", or "text" (a file path: the library and the CLI only)
    default: Any  # None: the method chooses (e.g. DISCO's tuned threshold)
    least: float = 0
    most: float = 0
    choices: tuple[str, ...] = ()
    limit: str = ""  # the AppLimits field bounding an int option in the app ("": only `most`)
    help: str = ""
    at_most: str = ""  # the option of the same class this one may not exceed ("": none)

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
    checked; a text field (a file path) as it is; anything else refused."""
    settable = {f.name: f for f in option_fields(cls, text=True)}
    if name not in settable:
        raise SpecvizError(f"no option {name!r} to set here (its options: {', '.join(settable) or 'none'})")
    return settable[name].parse(text)


def check_fields(options: Any) -> None:
    """Check every field of an options dataclass instance (call it from __post_init__): each marked
    one in its range, each text one (a path) as text, then each bound one option sets another."""
    fields_ = option_fields(type(options), text=True)
    for f in fields_:
        f.check(getattr(options, f.name))
    for f in (f for f in fields_ if f.at_most):
        value, bound = getattr(options, f.name), getattr(options, f.at_most)
        if value is not None and bound is not None and value > bound:
            raise SpecvizError(
                f"{f.name} ({value}) must be at most {f.at_most} ({bound}): lower one or raise the other"
            )


def option_fields(cls: type, text: bool = False) -> tuple[OptionField, ...]:
    """The tunable fields of an options dataclass, in declaration order, each with its help;
    `text`: also its text fields (file paths), which only the library and the CLI may set."""
    return _option_fields(cls, text)


# The cache takes the class as a plain `type`: mypy does not see a `type[X]` (what `type(options)`
# is) as Hashable, which functools.cache asks of its arguments (python/mypy#11470).
@cache
def _option_fields(cls: type, text: bool) -> tuple[OptionField, ...]:
    comments = _field_comments(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta, help_ = f.metadata, comments.get(f.name, "")
        if "kind" in meta:
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
                    help_,
                    meta.get("at_most", ""),
                )
            )
        elif isinstance(f.default, bool):
            out.append(OptionField(f.name, "bool", f.default, help=help_))
        elif text and isinstance(f.default, str):
            out.append(OptionField(f.name, "text", f.default, help=help_))
    return tuple(out)


def _field_comments(cls: type) -> dict[str, str]:
    """name -> the comment of its declaration in the class body: the comments on the declaration's
    lines, then the comment-only lines right below it, joined."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined where no source is kept (e.g. an interactive session)
        return {}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = {t.start[0]: t.string.removeprefix("#").strip() for t in tokens if t.type == tokenize.COMMENT}
    lines = source.splitlines()
    out = {}
    class_def = ast.parse(source).body[0]
    assert isinstance(class_def, ast.ClassDef)  # the source of a class is its class statement
    for stmt in class_def.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            end = stmt.end_lineno or stmt.lineno
            while end < len(lines) and lines[end].lstrip().startswith("#"):  # comment-only lines below
                end += 1
            text = " ".join(comments[n] for n in range(stmt.lineno, end + 1) if n in comments)
            if text:
                out[stmt.target.id] = text
    return out
