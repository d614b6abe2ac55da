"""Latency of one `Step` in the app (draft + target + verify + record + render + HTTP), through gradio_client.

The app runs as its own process (`tevviz app`, as a user starts it) on 127.0.0.1 over the chosen pair (the embedded
one by default), so the client here does not share the server's interpreter as a browser would not; --in-process
launches it in this process instead. Each Step's time is split into the round (its stage times, read from the
stage-times figure the Step returns) and the app's share: render, serialisation and HTTP, the part that does not
shrink on a faster device.

--client browser clicks Step in headless Chromium instead (the Debian build at /usr/bin/chromium, driven by
playwright) and times, in the page, from the click until the new round's tree is drawn and painted: what a user
waits for, including the browser's own plotly drawing and without gradio_client's 50 ms polling of its message
queue. The browser shares this machine's cores with the server, as on a laptop.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import torch
from common import parser, table, tree_flags, write

from tevviz.app.decode_tab import ROUND_OUTPUTS
from tevviz.render.panel import panel_traces


def round_ms(out: tuple) -> float:
    """The stage times of the Step's round: the last bar of each stage in the session plot's stage-times panel."""
    panel = json.loads(out[ROUND_OUTPUTS.index("session_plot")])  # the figure's JSON text (app/figure_view.py)
    return sum(bar["y"][-1] for bar in panel_traces(panel, "stage"))


def pct(values: list[float], q: float) -> float:
    return sorted(values)[int(q * len(values))]


# Click Step, then resolve once the tree's title names round k and two frames have painted it. A MutationObserver
# sees the title change as soon as plotly writes it (no polling interval).
STEP_IN_PAGE = """async (k) => {
  const button = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Step');
  const drawn = () => (document.querySelector('#tree-plot .gtitle') || {}).textContent?.startsWith(`round ${k}:`);
  const t0 = performance.now();
  button.click();
  await new Promise(resolve => {
    if (drawn()) return resolve();
    const seen = new MutationObserver(() => { if (drawn()) { seen.disconnect(); resolve(); } });
    seen.observe(document.body, {subtree: true, childList: true, characterData: true});
  });
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}"""

# Click Run, then stamp every change of the tree's title until it names round `last` (or nothing changes for 20 s:
# the session ended): the rounds the page drew and when. A page that falls behind the stream draws fewer rounds
# than the server ran.
RUN_IN_PAGE = """async (last) => {
  const button = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Run');
  const title = () => (document.querySelector('#tree-plot .gtitle') || {}).textContent || '';
  const stamps = [];
  let seen = -1;
  await new Promise(resolve => {
    let quiet = setTimeout(resolve, 20000);
    const watch = new MutationObserver(() => {
      const now = title(), round = parseInt(now.slice(6));
      // While gradio swaps a plot's old view for the new one both can be in the page: count a round once.
      if (!now.startsWith('round ') || !(round > seen)) return;
      seen = round;
      stamps.push([round, performance.now()]);
      clearTimeout(quiet);
      quiet = setTimeout(() => { watch.disconnect(); resolve(); }, 20000);
      if (now.startsWith(`round ${last}:`)) { clearTimeout(quiet); watch.disconnect(); resolve(); }
    });
    watch.observe(document.body, {subtree: true, childList: true, characterData: true});
    button.click();
  });
  return stamps;
}"""

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def browser_steps(url: str, args) -> tuple[list[float], list[float], dict | None]:
    """Seconds from each Step click to its tree painted, each round's stage time, and a Run's drawn rounds per
    second (with the rounds drawn of those run), in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(600_000)
            page.goto(url)
            page.get_by_label("B budget", exact=False).first.wait_for()
            set_number(page, "B budget", args.budget)
            set_number(page, "H depth", args.depth)
            set_number(page, "max new tokens", args.max_new_tokens)
            page.evaluate(STEP_IN_PAGE, 0)  # loads the models, warms up
            times, rounds = [], []
            for k in range(1, args.steps + 1):
                times.append(page.evaluate(STEP_IN_PAGE, k) / 1e3)
                rounds.append(page_round_ms(page) / 1e3)
            run = None
            if args.run_rounds:
                # A new session at the Run's budget, from round 0 (as the gradio_client Run after its /reset).
                page.get_by_role("button", name="Reset", exact=True).click()
                page.wait_for_function("() => !(document.querySelector('#tree-plot .gtitle') || {}).textContent"
                                       "?.startsWith('round ')")
                set_number(page, "B budget", args.run_budget)
                set_number(page, "Run: rounds", args.run_rounds)
                stamps = page.evaluate(RUN_IN_PAGE, args.run_rounds - 1)
                span = (stamps[-1][1] - stamps[0][1]) / 1e3
                ran = stamps[-1][0] + 1
                run = {"rounds_per_s": (stamps[-1][0] - stamps[0][0]) / span if span else None,
                       "drawn": len(stamps), "of": ran}
            return times, rounds, run
        finally:
            browser.close()


def set_number(page, label: str, value: int) -> None:
    box = page.get_by_label(label, exact=False).first
    box.fill(str(value))
    box.press("Enter")


def page_round_ms(page) -> float:
    """The latest round's stage times, summed from the stage-times figure's bars in the page."""
    return page.evaluate("""() => {
      const plot = document.querySelector('#session-plot .js-plotly-plot');
      return plot.data.filter(t => t.legendgroup === 'stage').reduce((s, bar) => s + bar.y[bar.y.length - 1], 0);
    }""")


@contextlib.contextmanager
def app_server(args, port: int):
    """The app serving on 127.0.0.1:port, in a process of its own unless --in-process."""
    if args.in_process:
        from tevviz.app import build_demo, launch_options
        from tevviz.engine.load.models import ModelSource

        if args.threads:
            torch.set_num_threads(args.threads)
        demo = build_demo(source=ModelSource(target=args.target, draft=args.draft, pair=args.pair, dtype=args.dtype,
                                             device=args.device))
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                    **launch_options())
        try:
            yield
        finally:
            demo.close()
        return
    cmd = [sys.executable, "-m", "tevviz", "app", "--server-name", "127.0.0.1", "--server-port", str(port),
           "--dtype", args.dtype, "--device", args.device, *(["--compile-draft"] if args.compile_draft else [])]
    for flag in ("pair", "target", "draft"):
        if getattr(args, flag):
            cmd += [f"--{flag}", getattr(args, flag)]
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the app exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the app did not answer within 10 minutes") from None
                time.sleep(1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--run-rounds", type=int, default=30, help="rounds of one streamed Run (0: skip)")
    ap.add_argument("--run-budget", type=int, default=32, help="B of the streamed Run")
    ap.add_argument("--in-process", action="store_true",
                    help="serve the app from this process, its models on the main thread as under tevviz app "
                         "(the clicks share the GIL)")
    ap.add_argument("--compile-draft", action="store_true", help="the app's --compile-draft")
    ap.add_argument("--client", choices=("gradio_client", "browser"), default="gradio_client",
                    help="who clicks Step: gradio_client's predict, or headless Chromium (see above)")
    ap.add_argument("--ssl-verify", action="store_true",
                    help="let gradio_client load the CA bundle for every call, as its default does (not what a "
                         "browser pays; see below)")
    tree_flags(ap, budget=64, depth=8, max_new_tokens=512)
    args = ap.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with app_server(args, port):
        # In-process, the main thread serves the models while the clicks come from another thread, as under
        # `tevviz app` (tevviz/app/model_thread.py); the two then share the GIL.
        result = beside_model_thread(clicks, args, port) if args.in_process else clicks(args, port)
    report(args, *result)


def clicks(args, port: int) -> tuple:
    """(Step times, their rounds' times, the Run's rounds/s, the browser's Run record or None)."""
    if args.client == "browser":
        times, rounds, run = browser_steps(f"http://127.0.0.1:{port}/", args)
        return times, rounds, run and run["rounds_per_s"], run
    import gradio_client

    # The server is plain http on 127.0.0.1: there is no TLS to verify. gradio_client opens a new httpx
    # client for every call, and with verification on each one loads the CA bundle (docs/app-latency.md),
    # a cost of this benchmark's client that a browser on its kept-alive connection never pays.
    c = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False, ssl_verify=args.ssl_verify)
    kw = {"budget": args.budget, "depth": args.depth, "max_new_tokens": args.max_new_tokens}
    c.predict(api_name="/step", **kw)  # loads the models, warms up
    times, rounds = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        out = c.predict(api_name="/step", **kw)
        times.append(time.perf_counter() - t0)
        rounds.append(round_ms(out) / 1e3)
    run_rate = None
    if args.run_rounds:
        # A streamed Run: rounds per second from the first update to the last, as the browser sees them.
        c.predict(api_name="/reset")
        job = c.submit(api_name="/run", rounds=args.run_rounds, **(kw | {"budget": args.run_budget}))
        stamps = [time.perf_counter() for _ in job]
        run_rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else None
    return times, rounds, run_rate, None


def beside_model_thread(fn, *args):
    """`fn(*args)` on a thread of its own while this (main) thread serves the app's model calls."""
    from tevviz.app.model_thread import MODEL_THREAD

    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(fn, *args)
        MODEL_THREAD.serve(until=done.done)
        return done.result()


def report(args, times: list[float], rounds: list[float], run_rate, run: dict | None = None) -> None:
    app = [t - r for t, r in zip(times, rounds)]
    row = {"client": args.client, "B": args.budget, "H": args.depth, "steps": len(times),
           "median_ms": 1e3 * statistics.median(times),
           "p90_ms": 1e3 * pct(times, 0.9), "min_ms": 1e3 * min(times),
           "round_median_ms": 1e3 * statistics.median(rounds), "app_median_ms": 1e3 * statistics.median(app),
           "app_p90_ms": 1e3 * pct(app, 0.9), "run_budget": args.run_budget, "run_rounds_per_s": run_rate}
    if run is not None:
        row["run_rounds_drawn"] = f"{run['drawn']}/{run['of']}"
    print(table([row], list(row)))
    write("app_step_latency", args, {"row": row, "times_s": times, "round_s": rounds})


if __name__ == "__main__":
    main()
