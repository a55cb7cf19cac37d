from specviz.train.draft.cli import run_cli

run_cli()
