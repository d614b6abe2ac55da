"""The shell of tevviz's offline pages (the session report, the run comparison, the scan report): one self-contained
HTML file whose figures are drawn by plotly.js and the page's data, both packed inline (gzip, base64)."""

from __future__ import annotations

import base64
import functools
import zlib

from plotly.offline import get_plotlyjs


def gzip_base64(text: str) -> str:
    """`text` as UTF-8, gzipped (what DecompressionStream("gzip") reads) and base64-encoded for an inline block."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer around deflate
    return base64.b64encode(packer.compress(text.encode("utf-8")) + packer.flush()).decode("ascii")


@functools.cache
def plotly_blob() -> str:
    """The installed plotly.js, packed once per process (0.3 s at level 9)."""
    return gzip_base64(get_plotlyjs())


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
pre { white-space: pre-wrap; background: #f6f6f6; padding: 0.8em; border-radius: 4px; }
table { border-collapse: collapse; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }
table.rounds td { text-align: right; font-variant-numeric: tabular-nums; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 1em; }
.controls { display: flex; gap: 1.5em; align-items: center; flex-wrap: wrap; margin-bottom: 0.5em; }
#round { width: 320px; vertical-align: middle; }
.note { color: #666; font-style: italic; }
.note.error { color: #b00020; font-style: normal; font-weight: bold; }
"""

# Shown until the script has unpacked plotly.js and the data; the script replaces it by a message where it cannot.
STATUS = ('<p class="note" id="status">loading the figures…</p>\n'
          '<noscript><p class="note">The figures and trees need JavaScript; the tables are complete without it.</p>'
          '</noscript>')

# The start of a page's script: unpack plotly.js and the page's data (gzip, base64) into `data`, or say why not in
# #status (WHAT names what the page could not draw, OTHERWISE what it still has); the report and the comparison page
# go on from it.
UNPACK_JS = """
(async function () {
  const status = document.getElementById("status");
  function fail(message) {
    status.textContent = message;
    status.className = "note error";
  }
  if (typeof DecompressionStream === "undefined") {
    fail("This browser cannot unpack the WHAT: it lacks DecompressionStream (Chrome 80, Firefox 113, "
         + "Safari 16.4 or newer have it). OTHERWISE");
    return;
  }

  async function unpack(id) {
    const binary = atob(document.getElementById(id).textContent);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  }

  let data;
  try {
    const [plotlyjs, json] = await Promise.all([unpack("plotly-js"), unpack("report-data")]);
    const script = document.createElement("script");
    script.textContent = plotlyjs;
    document.head.appendChild(script);  // an inline script runs as it is inserted
    if (typeof Plotly === "undefined") throw new Error("plotly.js did not load");
    data = JSON.parse(json);
  } catch (error) {
    fail(`The WHAT could not be unpacked: ${error}`);
    throw error;
  }
  performance.mark("tevviz:unpacked");
  status.remove();
"""


def unpack_script(what: str, otherwise: str, body: str) -> str:
    """A page's script: `UNPACK_JS` (saying `what` could not be drawn and `otherwise` what the page still has), then
    `body`, which reads `data`."""
    return UNPACK_JS.replace("WHAT", what).replace("OTHERWISE", otherwise) + body


# The blobs sit in script blocks of a type the browser does not run; base64 holds no "<", so no "</script>" either.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
<noscript><style>#status {{ display: none; }}</style></noscript>
</head>
<body>
{body}
<script type="application/gzip;base64" id="plotly-js">{plotlyjs}</script>
<script type="application/gzip;base64" id="report-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""
