"""specviz app (minimal page until the race view lands): run one method on the tiny-random pair."""

from __future__ import annotations

import gradio as gr

import specviz


def decode(method: str, prompt: str, max_new_tokens: int) -> tuple[str, str]:
    try:
        pair = specviz.load_pair("tiny-random")
        result = specviz.generate(method, pair, prompt, max_new_tokens=int(max_new_tokens))
    except specviz.SpecvizError as e:
        raise gr.Error(str(e)) from None
    s = result.summary
    rate = f"{s.accepted / s.drafted:.2f}" if s.drafted else "-"
    return pair.tokenizer.decode(list(s.output_ids)), f"{s.new_tokens} tokens in {s.wall_s:.2f} s, acceptance rate {rate}"


with gr.Blocks(title="specviz") as demo:
    gr.Markdown("# specviz\nSpeculative decoding, method by method (tiny-random pair: random weights, so the text is noise).")
    prompt = gr.Textbox(label="Prompt", value="def fibonacci(n):")
    method = gr.Dropdown(specviz.method_names(), value="vanilla", label="Method")
    max_new = gr.Slider(1, 128, value=32, step=1, label="Max new tokens")
    run = gr.Button("Run")
    text, stats = gr.Textbox(label="Output"), gr.Markdown()
    run.click(decode, [method, prompt, max_new], [text, stats])

if __name__ == "__main__":
    demo.launch()
