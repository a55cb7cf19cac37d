"""A visitor's state for the stateful methods: what one person's series of runs carries along.

The Race tab keeps one dict per visitor (in `gr.State`), keyed by (pair name, method name); a
stateful method's entry is its state object (OSD's online learner), made with the method's own
`specviz.methods.new_session` on the visitor's first run and passed to every later run as
`run(..., session=state)`, so one visitor's adaptation never changes another's draft. A learner
made here counts against the server's bound on adapted drafts (`specviz.serving.pools`). The dict
lives where the models run: in this process, or in a ZeroGPU worker, where it ends with the call.
Nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specviz.serving.pools import bounded

if TYPE_CHECKING:
    from specviz.methods import MethodSpec
    from specviz.models.pair import ModelPair


def method_session(sessions: dict, spec: MethodSpec, pair: ModelPair) -> Any:
    """The state `spec` (a MethodSpec) carries across this visitor's runs on `pair`, made on first use;
    None for a method that carries nothing."""
    if spec.session is None:
        return None
    key = (pair.name, spec.name)
    if key not in sessions:
        from specviz.methods import new_session

        sessions[key] = bounded(new_session(spec, pair))
    return sessions[key]


def held_session(sessions: dict, pair_name: str, method: str) -> Any:
    """The state this visitor's runs of `method` on the pair `pair_name` carry, if any run made one (None)."""
    return sessions.get((pair_name, method))
