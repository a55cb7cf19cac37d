"""Paper experiments, one module each, run as `python -m specviz.bench <name> [options]`.

Each module defines `main(argv: list[str] | None = None) -> int`, writes its JSON/CSV/figures under
`--out` (default `results/<name>/`), and prints where it wrote them.
"""
