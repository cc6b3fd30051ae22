"""The sweep report's page: report.html, self-contained (the charts inline as SVG), with the
environment, the results table (each profiled cell's trace linked, each failure's log folded
under its reason) and the notes under it."""

import html
import os

from launcher.sweep.results import Results
from launcher.sweep.tables import (
    HEADERS, NUMERICS_NOTE, ONE_RUN_NOTE, display, memory_note, saving_notes, shown_columns,
)


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
font-size:14px;vertical-align:top}th{background:#f3f3f3}tr.baseline td{background:#fff4e8}
td.bad,p.bad{color:#b22}pre{white-space:pre-wrap;font-size:12px;margin:0}svg{max-width:100%;height:auto}"""


def page(results: Results, svg: str) -> str:
    plan, env = results.plan, results.environment
    esc = html.escape
    env_rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in env.items())
    columns = shown_columns(results)
    head = "".join(f"<th>{esc(HEADERS.get(k, k))}</th>" for k in columns)
    body = []
    for row in results.rows:
        cls = ' class="baseline"' if row["baseline"] else ""
        cells = []
        for key in columns:
            bad = (key == "status" and not row["status"].startswith("ok")) or \
                (key == "numerics" and row.get("numerics") == "different")
            text = esc(display(row, key))
            if key == "profile_trace" and row.get("profile_trace"):
                text = f'<a href="{esc(row["profile_trace"])}">{text}</a>'
            if key == "reason" and row.get("log_excerpt"):
                text += f"<details><summary>log</summary><pre>{esc(row['log_excerpt'])}</pre></details>"
            cells.append(f'<td{" class=bad" if bad else ""}>{text}</td>')
        body.append(f"<tr{cls} data-cell=\"{esc(row['cell'])}\">{''.join(cells)}</tr>")
    svg_body = svg[svg.index("<svg"):]  # drop the XML prolog: the SVG is inline
    notes = (f'\n<p class="bad">{esc(ONE_RUN_NOTE)}</p>'
             if any(r.get("step_noise_only") for r in results.rows) else "")
    notes += f"\n<p>{esc(memory_note(results))}</p>" if memory_note(results) else ""
    defects = "".join(f'\n<p class="bad">{esc(d.line)}</p>' for d in results.defects)
    defects += "".join(f"\n<p>{esc(note)}</p>" for note in saving_notes(results))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sweep {esc(plan.name)}</title>
<style>{STYLE}</style></head><body>
<h1>Sweep {esc(plan.name)}</h1>
<p>{len(plan.cells)} cells, {plan.repeats} repeat(s) each, swept: {esc(", ".join(plan.keys))}.
Throughput is the median over the steady-state steps of all repeats, its interval a bootstrap 95%
(repeats, then steps within repeats, resampled). A speedup and a measured saving compare two cells
run by run (repeat r of each ran in round r): the geometric mean of the pairs' throughput ratios
with Student's t 95% interval over the pairs, the saving at the partner's step time; one is within
noise when its interval holds 1.0 (a saving: 0). The baseline row is shaded.</p>{notes}
<h2>Environment</h2><table>{env_rows or "<tr><td>no run has finished yet</td></tr>"}</table>
<h2>Charts</h2>{svg_body}
<h2>Results</h2><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>
<p>{esc(NUMERICS_NOTE)}</p>{defects}
<p>Sweep directory: {esc(os.path.abspath(plan.sweep_dir))}</p>
</body></html>
"""
