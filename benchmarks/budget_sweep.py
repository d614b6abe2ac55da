"""Budget sweep (the DDTree curve): tau, 1 + C_p and speed-up over autoregressive against B, at T = 0 and 1."""

from __future__ import annotations

from common import best_first, parser, setup, table, tree_decode, write

from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.plain import autoregressive
from tevviz.engine.decode.session import DecodeConfig


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--budgets", default="8,16,32,64,128")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--depths", default="4,6,8")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--verifier", default="tev")
    args = ap.parse_args()
    pair, prompts = setup(args)
    rows = []
    for temp in [float(t) for t in args.temperatures.split(",")]:
        base_cfg = DecodeConfig(sampling=SamplingConfig(temperature=temp), max_new_tokens=args.max_new_tokens,
                                stop_on_eos=False)
        autoregressive(pair, prompts[0], base_cfg)  # warm-up
        base_s = base_n = 0
        for ids in prompts:
            b = autoregressive(pair, ids, base_cfg)
            base_s += b.seconds
            base_n += len(b.token_ids)
        for depth, budget in [(int(h), int(b)) for h in args.depths.split(",") for b in args.budgets.split(",")]:
            builder = best_first(budget, depth)
            taus, ceils, n, secs = [], [], 0, 0.0
            for i, ids in enumerate(prompts):
                s, seconds = tree_decode(pair, ids, temp, builder, args.verifier, args.max_new_tokens, i)
                secs += seconds
                n += len(s.generated)
                taus += [r.block_length for r in s.rounds]
                ceils += [1 + r.C_p for r in s.rounds]
            row = {"T": temp, "H": depth, "B": budget, "tau": sum(taus) / len(taus), "1+C_p": sum(ceils) / len(ceils),
                   "tok_s": n / secs, "ar_tok_s": base_n / base_s, "speedup": (n / secs) / (base_n / base_s)}
            rows.append(row)
            print(table([row], list(row)), flush=True)
    print(table(rows, list(rows[0])))
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("tau against B", "speed-up against B"))
    for temp, depth in sorted({(r["T"], r["H"]) for r in rows}):
        sub = [r for r in rows if r["T"] == temp and r["H"] == depth]
        name = f"T={temp:g} H={depth}"
        fig.add_scatter(x=[r["B"] for r in sub], y=[r["tau"] for r in sub], name=f"tau {name}", row=1, col=1)
        fig.add_scatter(x=[r["B"] for r in sub], y=[r["speedup"] for r in sub], name=f"speed-up {name}", row=1, col=2)
    fig.update_xaxes(type="log")
    write("budget_sweep", args, {"rows": rows}, fig)


if __name__ == "__main__":
    main()
