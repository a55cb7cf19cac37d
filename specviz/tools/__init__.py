"""Tools that are not a paper's experiment, run as `python -m specviz.bench <name> [options]`.

Each module defines `main(argv: list[str] | None = None) -> int`, as the experiments do. `load` drives
the app (specviz.ui), so it lives here, apart from `specviz.experiments`, which the app imports.
"""
