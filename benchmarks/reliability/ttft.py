"""Run race -> the first token on the board (issue 38: under 2 s on the default pair), as a visitor sees it:
the app on the default pair, Chromium at 1440x900, four races of the default prompt once the pair line says
the pair is loaded. Run from the repository root on a quiet machine:

    python benchmarks/reliability/ttft.py
"""

import sys
import time

from playwright.sync_api import sync_playwright

from specviz.tools.load import free_port
from specviz.ui import build_app, launch

sys.path.insert(0, "tests")
from test_app_browser import CHROMIUM, CHROMIUM_ARGS

LOADED = "() => { const e = document.querySelector('#sv-pair-status'); return e && !e.innerText.includes('Loading'); }"
CLEAR = "() => document.querySelectorAll('#sv-board .sv-tok').forEach(e => e.remove())"


def main(races: int = 4) -> None:
    demo = build_app(pair="default")
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(300_000)
        opened = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function(LOADED)
        print(f"pair line shown {time.perf_counter() - opened:.2f} s after the page opened", flush=True)
        for k in range(races):
            page.evaluate(CLEAR)
            pressed = time.perf_counter()
            page.click("#sv-run")
            page.wait_for_selector("#sv-board .sv-tok")
            print(f"race {k + 1}: first token {time.perf_counter() - pressed:.2f} s after Run race", flush=True)
            page.wait_for_selector("#sv-race-status:has-text('Race finished')")
            time.sleep(1)
        browser.close()
    demo.close()


if __name__ == "__main__":
    main()
