"""The view in the page's URL: `?run=<browser>.<run>&round=R&node=N&folds=U,V&below=P&walk=T&pin=<browser>.<run>
&cmp=<browser>.<run>.K&metric=M&find=F` (below: the fold by mass's target flow; cmp: run B and round K of the
comparison shown; F: the token searched for),
written as the view changes and read when the page loads, so a reload returns to the same view and a copied link
opens it on the same server. Each move is an entry of the browser's history: Back undoes it, Forward redoes it.

The browser's id lives in its localStorage (`tevviz-user`): its runs' folder on the server (app/run_store.py).
"""

from __future__ import annotations

from urllib.parse import parse_qs

import gradio as gr

from ..render import METRICS

MAX_FIND = 200  # characters of a searched token a link keeps

# A component that draws nothing: its value (updates.view_url's JSON) goes into the address bar, without a reload.
_SYNC = """
const MOVES = ['run', 'round', 'node', 'folds', 'below', 'walk', 'pin', 'cmp'];
const write = () => {
  if (!props.value) return;
  let view;
  try { view = JSON.parse(props.value); } catch (e) { return; }
  const url = new URL(window.location.href);
  for (const key of ['run', 'round', 'node', 'folds', 'below', 'walk', 'pin', 'cmp', 'metric', 'find']) {
    const value = view[key];
    if (value === undefined || value === null || value === '') url.searchParams.delete(key);
    else url.searchParams.set(key, String(value));
  }
  if (url.href === window.location.href) return;
  // A move to another run, round, node, fold or comparison is a step of the browser's history, so Back undoes it and
  // Forward redoes it; the first view a page shows, a colour or a search replaces the entry instead.
  const before = new URL(window.location.href).searchParams;
  const moved = before.get('run') && MOVES.some((key) => (before.get(key) || '') !== (url.searchParams.get(key) || ''));
  if (moved) window.history.pushState(null, '', url.href);
  else window.history.replaceState(null, '', url.href);
};
// Back and Forward load the view their URL names (the server restores it as on a reload).
if (!window.tevvizHistory) {
  window.tevvizHistory = true;
  window.addEventListener('popstate', () => window.location.reload());
}
write();
watch('value', write);
"""

# Run on load, before the server restores the view: the browser's id (made once, kept) and the URL's query.
LOAD_JS = """() => {
  let user = window.localStorage.getItem('tevviz-user') || '';
  if (!/^[0-9a-f]{32}$/.test(user)) {
    const bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    user = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
    window.localStorage.setItem('tevviz-user', user);
  }
  // The tree view's room, so that a restored view is drawn for it at once: drawn for another width first, it was
  // drawn again a moment later, and a click in between (the chart purged and bound afresh) was lost.
  const tree = document.querySelector('#tree-plot .tv-figure');
  const width = tree && tree.parentElement ? Math.round(tree.parentElement.clientWidth) : 0;
  return [user, window.location.search, width];
}"""

COPY_JS = """() => {
  const link = window.location.href;
  if (navigator.clipboard) navigator.clipboard.writeText(link).catch(() => {});
  return link;
}"""


def url_sync() -> gr.HTML:
    """The component that keeps the address bar in step with the view."""
    return gr.HTML("", html_template="<span></span>", js_on_load=_SYNC, container=False, show_label=False,
                   apply_default_css=False, elem_id="url-sync", padding=False)


def read_query(query: str) -> dict:
    """The view a URL's query names: run (browser id, run id), round, node, open folds, the fold by mass, the pinned
    run, the comparison shown, metric and the token searched for, each None (no folds: empty; no search: "") where
    absent or malformed (a bad link is said, not raised)."""
    q = {k: v[0] for k, v in parse_qs((query or "").lstrip("?")).items() if v}
    run = q.get("run", "")
    user, _, run_id = run.partition(".")
    node = q.get("node")
    if node is not None and not (node == "bonus" or node.startswith("ghost:")):
        node = _index(node)
    folds = frozenset(int(u) for u in q.get("folds", "").split(",") if u.isdigit())
    return {"user": user or None, "run": run_id or None, "round": _index(q.get("round", "")), "node": node,
            "folds": folds, "below": _flow(q.get("below", "")), "walk": _index(q.get("walk", "")),
            "pin": _pin(q.get("pin", "")), "cmp": _compared(q.get("cmp", "")),
            "metric": q.get("metric") if q.get("metric") in METRICS else None, "find": q.get("find", "")[:MAX_FIND]}


def _index(text: str) -> int | None:
    """A round or node index written in ASCII digits, else None: str.isdigit takes '²' (int() then raises), and a
    number past int()'s digit limit raises too; no tree comes near a billion nodes."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def _flow(text: str) -> float | None:
    """A target-flow threshold in [0, 1], else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def _compared(text: str) -> tuple[str, str, int] | None:
    """The comparison a link shows, as (browser id, run B's id, round); None where absent or malformed."""
    user, run_id, k = (text.split(".") + ["", "", ""])[:3]
    k = _index(k)
    return (user, run_id, k) if user and run_id and k is not None and text.count(".") == 2 else None


def _pin(text: str) -> tuple[str, str] | None:
    """The pinned run a link names, as (browser id, run id); None where absent or malformed."""
    user, _, run_id = text.partition(".")
    return (user, run_id) if user and run_id else None
