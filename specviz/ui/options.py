"""Each method's own options as widgets, generated from its options dataclass
(`specviz.methods.options`): name, range, default and help come from the dataclass, the upper
bound also from the app's limits. The widgets write into one JSON value, {"method.option": value},
the race's `method_options` input: the same names as the bench's `--option`. A text option (a file
path: EAGLE's head, SSSD's datastore) is no widget, so a visitor cannot point a method at a file;
its group says the value it runs with and how to change it from the command line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import gradio as gr

from specviz.methods.options import OptionField, option_fields
from specviz.serving.limits import AppLimits

if TYPE_CHECKING:
    from specviz.methods import MethodSpec


def option_widget(f: OptionField, limits: AppLimits) -> gr.Checkbox | gr.Dropdown | gr.Textbox | gr.Slider:
    """One option's widget: a slider for a number with a default, a text box for one the method
    tunes itself when left empty, a checkbox or a dropdown; its help names the default, as the
    race's panels do ("speculation_length = 4 (default)")."""
    most = f.bound(limits)
    info = f"{f.help} (default: {f.default})"
    if f.kind == "bool":
        return gr.Checkbox(f.default, label=f.name, info=info)
    if f.kind == "choice":
        return gr.Dropdown(list(f.choices), value=f.default, label=f.name, info=info)
    if f.default is None:
        # text, not gr.Number: a number box shows 0 for "no value", which would read as a setting
        return gr.Textbox(
            "",
            label=f"{f.name} (empty: the tuned value)",
            info=f"{f.help} ({f.least:g} to {most:g})",
            placeholder="tuned",
        )
    step = 1 if f.kind == "int" else 0.01
    return gr.Slider(f.least, most, value=f.default, step=step, label=f.name, info=info)


def fixed_options_note(spec: MethodSpec) -> str:
    """Markdown: the method's options that are no widget (file paths, a build to compare), each at the
    value the app runs it with and its help, and the bench flag that sets another; "" for a method without any."""
    fixed = [f for f in option_fields(spec.options, every=True) if not f.widget]
    return "\n".join(
        f"- `{f.name}`: {json.dumps(f.default)} in the app ({f.help}); other values from the command line only: "
        f"`python -m specviz.bench --option {spec.name}.{f.name}=VALUE`"
        for f in fixed
    )


def method_option_widgets(
    specs: list[MethodSpec], limits: AppLimits, methods: gr.CheckboxGroup, ticked: list[str]
) -> tuple[gr.JSON, dict[str, gr.Column]]:
    """Per method with options, a group of its widgets, shown while the method is ticked in `methods`:
    (the hidden JSON of what the visitor changed, {"method.option": value}; the groups by method)."""
    method_options = gr.JSON({}, label="method_options", visible=False)
    groups: dict[str, gr.Column] = {}
    with gr.Row(equal_height=False):  # one column per method, side by side, wrapping on narrow screens
        for spec in specs:
            fields = option_fields(spec.options)
            if not fields:
                continue
            with gr.Column(
                visible=spec.name in ticked, min_width=300, variant="panel", elem_id=f"sv-options-{spec.name}"
            ) as groups[spec.name]:
                gr.Markdown(f"**{spec.label}**: {spec.description}", elem_classes="sv-option-head")
                if note := fixed_options_note(spec):
                    gr.Markdown(note, elem_classes="sv-option-fixed")
                for f in fields:
                    widget = option_widget(f, limits)
                    key = json.dumps(f"{spec.name}.{f.name}")
                    widget.change(
                        None,
                        [method_options, widget],
                        method_options,
                        js=f"(o, v) => Object.assign({{}}, o || {{}}, {{{key}: v}})",
                    )

    def show(chosen: list[str] | None) -> list[Any]:
        return [gr.update(visible=name in (chosen or ())) for name in groups]

    methods.change(show, methods, list(groups.values()), queue=False, api_visibility="private")
    return method_options, groups
