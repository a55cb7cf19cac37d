"""What the streaming profiles share: the default pair's streaming model, a HumanEval prompt cached up to its
last token, and a tree of the method's usual shape to verify after it (its tokens do not change the cost).
Imported by the scripts beside it (run as `python benchmarks/streaming/<script>.py`)."""

from specviz.methods.streaming import streaming_model
from specviz.models.kv import CachedLM
from specviz.models.pair import encode_prompt, load_pair
from specviz.prompts import take

PARENTS = [-1, -1, 0, 0, 1, 2]  # 2 wide, 6 nodes, 3 levels

pair = load_pair("default")
lm = streaming_model(pair.target, "auto")
prompt = encode_prompt(pair, take("humaneval", 1)[0].text)
tree = prompt[1 : 1 + len(PARENTS)]  # any tokens: the cost does not depend on them
cache = CachedLM(lm.tuned)
cache.forward(prompt[:-1])
P, last = len(cache), prompt[-1:]


def back() -> None:
    """Drop what a timed part added to the cache."""
    cache.truncate(P)
