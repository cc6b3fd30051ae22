"""The sweep report: results.csv/md (launcher.sweep.tables), report.png (launcher.sweep.charts)
and a self-contained report.html (launcher.sweep.page).

Written at the end of every sweep, and on demand by `launch-report SWEEP_DIR` (which also works on
an interrupted sweep).
"""

import io
import os
import sys

from launcher.files import write_bytes_atomic, write_text_atomic
from launcher.sweep.charts import draw
from launcher.sweep.console import print_refusal, print_report_usage, print_results
from launcher.sweep.page import page
from launcher.sweep.results import Results, collect
from launcher.sweep.tables import write_tables


def write_all(results: Results) -> list:
    """Every report file into the sweep directory; returns their paths."""
    folder = results.plan.sweep_dir
    write_tables(results, folder)
    figure = draw(results)
    png, svg = io.BytesIO(), io.StringIO()
    figure.savefig(png, format="png", dpi=110)
    figure.savefig(svg, format="svg")
    write_bytes_atomic(os.path.join(folder, "report.png"), png.getvalue())
    write_text_atomic(os.path.join(folder, "report.html"), page(results, svg.getvalue()))
    return [os.path.join(folder, f) for f in ("results.csv", "results.md", "report.html",
                                              "report.png")]


def main(argv=None) -> None:
    """`launch-report SWEEP_DIR`: rebuild the results and the report from what is on disk."""
    from launcher.sweep.plan import PLAN_FILE, Plan

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print_report_usage()
        sys.exit(2)
    folder = args[0]
    if not os.path.isfile(os.path.join(folder, PLAN_FILE)):
        print_refusal(f"{folder} has no {PLAN_FILE}; give the directory of a `launch -m` sweep "
                      "(hydra.sweep.dir)")
        sys.exit(2)
    results = collect(Plan.load(folder))
    print_results(results, write_all(results))
