"""What a person waits for in the tree view, in a real browser: a Step, a click on a node until its details show, a
key that moves to another round, and one that walks a token, each until the page has painted the change.

The app runs as its own process (`tevviz app`, as a user starts it) on 127.0.0.1 over the chosen pair, and headless
Chromium (Debian's, at /usr/bin/chromium, driven by playwright) times each action in the page, from the input event to
two animation frames after the change is in the DOM (a MutationObserver sees it at once); a click is the
plotly_click event the node's centre fires, a key a keydown on the page. Medians and 90th
percentiles over --repeats actions, warm (the first Step, which loads the models, is left out).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

from common import parser, table, write

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

# Resolve once `changed()` holds and two frames have painted it; the action runs after the observer is set.
TIMED = r"""async ([action, target]) => {
  const title = () => (document.querySelector('#tree-plot .gtitle') || {}).textContent || '';
  const details = () => (document.querySelector('#node-details') || {}).textContent || '';
  const before = {title: title(), details: details()};
  // the title names another round; the details panel holds new words (not a progress note laid over it)
  const changed = () => target === 'title' ? title() !== before.title && /^round /.test(title())
                                           : details() !== before.details && /^\s*(node|Walk)/.test(details());
  const t0 = performance.now();
  const done = new Promise(resolve => {
    const seen = new MutationObserver(() => { if (changed()) { seen.disconnect(); resolve(); } });
    seen.observe(document.body, {subtree: true, childList: true, characterData: true});
  });
  window.__tevvizAction(action);
  const late = new Promise(resolve => setTimeout(() => resolve('late'), 60000));
  if (await Promise.race([done, late]) === 'late') {
    const error = (document.querySelector('#error-box') || {}).textContent || '';
    throw new Error(`${action}: nothing changed in 60 s ${error.trim()}`);
  }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}"""

# The actions, as the page would get them from a person: a click on Step, a click on a node's centre, a key press.
ACTIONS = """() => {
  window.__tevvizAction = (action) => {
    if (action === 'step') {
      [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Step').click();
    } else if (action.startsWith('node:')) {
      const gd = document.querySelector('#tree-plot .tv-figure');
      const nodes = gd.data.find(t => t.name === 'nodes');
      const k = Number(action.slice(5)) % nodes.x.length;
      gd.emit('plotly_click', {points: [{customdata: nodes.customdata[k], data: nodes, pointIndex: k}]});
    } else {
      document.body.dispatchEvent(new KeyboardEvent('keydown', {key: action, bubbles: true}));
    }
  };
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(args, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tevviz", "app", "--server-port", str(port), "--threads", str(args.threads or 1)]
    if args.pair:
        cmd += ["--pair", args.pair]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(600):
        try:
            urllib.request.urlopen(url, timeout=1)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the app did not start")


def measure(url: str, args) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {"Step": [], "click -> details": [], "key <- (round)": [], "key j (walk)": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(300_000)
        page.goto(url)
        page.get_by_role("button", name="Step", exact=True).wait_for()
        page.get_by_label("B budget").fill(str(args.budget))
        page.get_by_label("max new tokens").fill("1000")
        page.evaluate(ACTIONS)
        page.evaluate(TIMED, ["step", "title"])  # loads the models: not timed
        for k in range(args.repeats):
            times["Step"].append(page.evaluate(TIMED, ["step", "title"]))
            times["click -> details"].append(page.evaluate(TIMED, [f"node:{3 * k + 1}", "details"]))
            times["key <- (round)"].append(page.evaluate(TIMED, ["ArrowLeft", "title"]))
            times["key j (walk)"].append(page.evaluate(TIMED, ["j", "details"]))
            page.evaluate(TIMED, ["End", "title"])
        browser.close()
    return times


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    port = free_port()
    proc = serve(args, port)
    try:
        times = measure(f"http://127.0.0.1:{port}/", args)
    finally:
        proc.terminate()
    rows = [{"action": name, "median ms": statistics.median(xs), "p90 ms": sorted(xs)[int(0.9 * len(xs))],
             "n": len(xs)} for name, xs in times.items()]
    print(table(rows, ["action", "median ms", "p90 ms", "n"]))
    write("tree_view_latency", args, {"rows": rows, "times_ms": times})


if __name__ == "__main__":
    main()
