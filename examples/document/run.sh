#!/usr/bin/env bash
# A Markdown report written into a computer through the API, turned into
# a PDF by pandoc in the container runtime (PDF engine: groff's pdfroff,
# through pandoc's ms writer), fetched back, and checked with pdftotext.
# The container runtime uses the host's programs read-only: it needs root,
# bubblewrap, and pandoc, groff and poppler-utils installed.
. "$(dirname "$0")/../lib.sh"
container_possible || fail "this example needs the container runtime: root and bubblewrap"
for tool in pandoc pdfroff pdftotext; do
    command -v "$tool" >/dev/null || fail "$tool is missing (Debian: apt-get install pandoc groff poppler-utils)"
done

step "a local node agent and a computer"
start_agent
kc create docs --quota 100Mi

step "the report, written through the API"
cat >"$WORK/report.md" <<'MD'
# Quarterly report

Sales **grew** by 12% this quarter, led by the north.

| region | sales |
|--------|------:|
| north  |   120 |
| south  |    98 |

## Next steps

- open the west office
- hire two engineers
MD
kc put docs "$WORK/report.md" report.md

step "pandoc in the container runtime makes the PDF"
kc exec docs --runtime container -- 'pandoc report.md -t ms --pdf-engine=pdfroff -o report.pdf && ls -l report.pdf'

step "the PDF, fetched back and read with pdftotext"
kc get docs report.pdf "$WORK/report.pdf"
text=$(pdftotext "$WORK/report.pdf" -)
echo "$text" | head -8
case $(head -c 5 "$WORK/report.pdf") in %PDF-) echo "ok: a PDF" ;; *) fail "report.pdf is not a PDF" ;; esac
grep -q '^Quarterly report$' <<<"$text" || fail "the heading is not in the PDF's text"
grep -q 'Next steps' <<<"$text" || fail "the second heading is not in the PDF's text"
echo "ok: the headings are in the PDF"
