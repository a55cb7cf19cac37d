"""Every option of every method says what it does: its help is declared with it, as data."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specviz.errors import SpecvizError
from specviz.methods import all_methods
from specviz.methods.options import MethodOptions, asset, choice, count, number, option_fields


def test_every_option_of_every_method_has_its_help():
    missing = [f"{s.name}.{f.name}" for s in all_methods() for f in option_fields(s.options, every=True) if not f.help]
    assert not missing, f"options without a help text: {missing}"


def test_each_option_is_declared_with_its_help_and_an_unmarked_field_is_refused():
    """The help is data on the field (it was parsed from the source's comments, which tied it to where the
    formatter put them, and gave nothing where the source was missing)."""

    @dataclass(frozen=True)
    class Declared(MethodOptions):
        one: int = count(4, help="on one line")
        many: str = choice("a", ("a", "b"), help="a or b", widget=False)
        file: str = asset("auto", help="a file")

    assert {f.name: f.help for f in option_fields(Declared, every=True)} == {
        "one": "on one line",
        "many": "a or b",
        "file": "a file",
    }
    assert [f.name for f in option_fields(Declared)] == ["one"]  # the others are no widgets
    with pytest.raises(SpecvizError, match="many must be one of a, b, got 'c'"):
        Declared(many="c")
    with pytest.raises(TypeError, match="give it a help text"):
        number(0.5, 0.0, 1.0, help="")

    @dataclass(frozen=True)
    class Bare(MethodOptions):
        plain: bool = True

    with pytest.raises(TypeError, match=r"Bare.plain is no option: mark it"):
        Bare()


def test_every_method_declares_its_options_on_the_base():
    assert [s.name for s in all_methods() if not issubclass(s.options, MethodOptions)] == []


def test_no_option_is_named_alpha_and_each_gamma_help_is_its_own_methods():
    """α is the per-token acceptance everywhere on the page (specviz.ui.why's glossary): SSSD's fusion
    weight was labelled α beside it; vanilla's γ help described the heuristic's schedule."""
    helps = {(s.name, f.name): f.help for s in all_methods() for f in option_fields(s.options, every=True)}
    assert not [key for key, text in helps.items() if "α" in text or "alpha" in text.lower()]
    assert "heuristic" not in helps["vanilla", "speculation_length"]
    assert "2 more after a full acceptance" in helps["heuristic", "speculation_length"]


def test_each_option_widget_names_its_default():
    """Issue 38 item 8: a slider started at the default without saying it was one."""
    from specviz.methods import get_method
    from specviz.serving.limits import AppLimits
    from specviz.ui.options import option_widget

    widgets = {
        (name, f.name): option_widget(f, AppLimits())
        for name in ("vanilla", "sssd", "disco")
        for f in option_fields(get_method(name).options)
    }
    assert widgets["vanilla", "speculation_length"].info.endswith("(default: 4)")
    assert widgets["sssd", "sources"].info.endswith("(default: both)")
    assert "empty: the tuned value" in widgets["disco", "threshold"].label  # no default: the method tunes it


def test_a_text_option_is_said_in_the_app_with_its_value_and_flag():
    """EAGLE's head (a file path, "auto" or "untrained") gets no widget: its group says the value the
    app runs with, what it means and the bench flag that sets a file; a method without one says nothing."""
    from specviz.methods import get_method
    from specviz.ui.options import fixed_options_note

    note = fixed_options_note(get_method("eagle"))
    assert note.startswith('- `head`: "auto" in the app ("auto": the shipped head trained for this target')
    assert "`python -m specviz.bench --option eagle.head=VALUE`" in note
    assert fixed_options_note(get_method("vanilla")) == ""
