"""specviz: race speculative decoding methods in the browser (the same as the `specviz` command).

    python app.py                      # http://127.0.0.1:7860, the default pair
    python app.py --pair tiny-random --port 7861 --share

Options and environment: `specviz/cli.py`.
"""

from specviz.cli import main

if __name__ == "__main__":
    main()
