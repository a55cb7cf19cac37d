"""The one exception type a user can cause, with messages that say what to do."""


class SpecvizError(Exception):
    """A problem the user can fix: a bad prompt, an unknown method or model, an out-of-range option."""


class ModelNotAvailable(SpecvizError):
    """A model id or path that cannot be loaded here (offline, misspelt, or not a causal LM)."""
