"""Inference engines that specviz drives from outside, in their own processes, over their HTTP APIs.

- `vllm`: vLLM's OpenAI-compatible server. specviz never imports vllm (its pins differ from ours and
  move with every release): `make vllm` builds it an environment of its own, `servers` starts the
  servers a race needs on loopback ports (or connects to one a user runs, `--vllm-url NAME=URL`),
  and `stream` reads one completion's tokens as they arrive with vLLM's per-step counts of drafted
  and accepted tokens. `specviz.methods.vllm` turns those into records.
- `export`: a pair's models as folders such a server loads.

Nothing here imports torch at import.
"""
