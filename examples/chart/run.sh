#!/usr/bin/env bash
# The JavaScript runtime computes data (primes in each block of 1,000
# below 20,000) and renders it as a PNG bar chart with an encoder of this
# example's own (png.js, loaded by relative import from the computer's
# files), writes chart.png into the computer, and a share link serves it
# over HTTP. The PNG is then decoded here to check it.
. "$(dirname "$0")/../lib.sh"
here=$(cd "$(dirname "$0")" && pwd)

step "a local node agent with share links on a free port"
start_agent --share-listen 127.0.0.1:0
kc create charts --quota 100Mi

step "the encoder and the chart module into the computer"
kc put charts "$here/png.js" png.js
kc put charts "$here/chart.js" chart.js

step "the JavaScript runtime draws the chart"
kc exec charts --runtime js -- 'export { default } from "./chart.js";'

step "a share link serves it"
link=$(kc share charts chart.png --expires 10m | grep -o 'http://[^ ]*' | head -1)
[ -n "$link" ] || fail "share printed no link"
echo "$link"
curl -fsS -o "$WORK/chart.png" "$link"

step "decoding the downloaded PNG"
python3 - "$WORK/chart.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, chunks = 8, {}
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0], kind
    chunks[kind] = chunks.get(kind, b"") + body
    pos += 12 + n
w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
raw = zlib.decompress(chunks[b"IDAT"])
assert (w, h, depth, color) == (640, 360, 8, 2), (w, h, depth, color)
assert len(raw) == h * (1 + w * 3), len(raw)
rows = [raw[y * (1 + w * 3) + 1:(y + 1) * (1 + w * 3)] for y in range(h)]
colors = {bytes(r[x * 3:x * 3 + 3]) for r in rows for x in range(0, w, 7)}
assert bytes([29, 78, 216]) in colors and bytes([255, 255, 255]) in colors, colors
print(f"ok: a {w}x{h} PNG, {len(data)} bytes, {len(colors)} colors, every chunk's CRC right")
PY
