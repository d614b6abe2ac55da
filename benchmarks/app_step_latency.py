"""Latency of one `Step` in the app (draft + target + verify + record + render + HTTP), through gradio_client.

The app is launched in-process on 127.0.0.1 over the chosen pair (the embedded one by default).
"""

from __future__ import annotations

import socket
import statistics
import time

from common import parser, table, tree_flags, write

from tevviz.app import build_demo, launch_options


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=30)
    tree_flags(ap, budget=64, depth=8, max_new_tokens=512)
    args = ap.parse_args()
    import gradio_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = build_demo(args.target, args.draft, dtype=args.dtype, device=args.device)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **launch_options())
    try:
        c = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        kw = {"budget": args.budget, "depth": args.depth, "max_new_tokens": args.max_new_tokens}
        c.predict(api_name="/step", **kw)  # loads the models, warms up
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            c.predict(api_name="/step", **kw)
            times.append(time.perf_counter() - t0)
    finally:
        demo.close()
    row = {"B": args.budget, "H": args.depth, "steps": len(times), "median_ms": 1e3 * statistics.median(times),
           "p90_ms": 1e3 * sorted(times)[int(0.9 * len(times))], "min_ms": 1e3 * min(times)}
    print(table([row], list(row)))
    write("app_step_latency", args, {"row": row, "times_s": times})


if __name__ == "__main__":
    main()
