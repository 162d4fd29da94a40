#!/usr/bin/env python3
"""Checks the DOM headless Chromium built from output_dir/report.html (tests/test_report_html.sh).

usage: report_dom_check.py DOM_HTML METRICS_JSONL LAYERS

Parses the dumped DOM with the standard library's HTMLParser and checks: every chart (figure.chart with an svg) has
an x-axis label "step", a non-empty y-axis label and tick labels on both axes; its chart-data JSON holds, for each
series, the points of metrics.jsonl's field of that name (every step, values equal); it draws a polyline per series;
the memory plan has a figure per tier with class bars for the estimate and the measured peaks; the residency table's
rows cover layers 0 .. LAYERS-1 once; the copy summary says the share hidden; the timeline draws spans. Prints each
check and exits 1 if any fails."""
import json
import sys
from html.parser import HTMLParser


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack = []  # open elements: (tag, attrs)
        self.charts = {}  # id -> {"labels": {class: [text]}, "polylines": [...], "data": str}
        self.memory = {}  # figure id -> {"bars": [(label?, class)]}
        self.rows = []
        self.copy_hidden = None
        self.timeline_spans = 0
        self.text_target = None

    def figure(self, kind):
        for tag, attrs in reversed(self.stack):
            if tag == "figure" and kind in attrs.get("class", "").split():
                return attrs.get("id")
        return None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.stack.append((tag, attrs))
        classes = attrs.get("class", "").split()
        chart = self.figure("chart")
        if tag == "figure" and "chart" in classes:
            self.charts[attrs["id"]] = {"labels": {}, "polylines": [], "data": ""}
        if tag == "figure" and "memory-tier" in classes:
            self.memory[attrs["id"]] = []
        if chart and tag == "polyline":
            self.charts[chart]["polylines"].append(attrs.get("data-series"))
        if chart and tag == "text":
            self.text_target = (chart, " ".join(classes))
        if chart and tag == "script" and "chart-data" in classes:
            self.text_target = (chart, "data")
        memory = self.figure("memory-tier")
        if memory and tag == "rect" and "class-bar" in classes:
            self.memory[memory].append((attrs.get("data-class"), int(attrs.get("data-bytes", "0"))))
        if tag == "tr" and "layer-row" in classes:
            self.rows.append((int(attrs["data-first"]), int(attrs["data-last"])))
        if tag == "p" and "copy-summary" in classes:
            self.copy_hidden = float(attrs["data-hidden"])
        if self.figure("timeline") and tag == "rect" and "span" in classes:
            self.timeline_spans += 1

    def handle_endtag(self, tag):
        while self.stack:
            open_tag, _ = self.stack.pop()
            if open_tag == tag:
                break
        self.text_target = None

    def handle_data(self, data):
        if not self.text_target:
            return
        chart, kind = self.text_target
        if kind == "data":
            self.charts[chart]["data"] += data
        else:
            self.charts[chart]["labels"].setdefault(kind, []).append(data.strip())


def main():
    dom_path, metrics_path, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dom = Dom()
    dom.feed(open(dom_path, encoding="utf-8").read())
    rows = [json.loads(line) for line in open(metrics_path) if line.strip()]
    failures = 0

    def check(what, ok):
        nonlocal failures
        print(("ok   " if ok else "FAIL ") + what)
        failures += 0 if ok else 1

    for chart in ("chart-loss", "chart-lr", "chart-grad-norm", "chart-tokens", "chart-memory"):
        check(chart + " is drawn", chart in dom.charts)
        if chart not in dom.charts:
            continue
        c = dom.charts[chart]
        check(chart + ": x axis labelled 'step'", c["labels"].get("axis-label x-label") == ["step"])
        check(chart + ": y axis labelled", len(c["labels"].get("axis-label y-label", [""])[0]) > 0)
        check(chart + ": tick labels on both axes",
              len(c["labels"].get("tick x-tick", [])) >= 2 and len(c["labels"].get("tick y-tick", [])) >= 2)
        data = json.loads(c["data"])
        check(chart + ": a polyline per series", [s["name"] for s in data["series"]] == c["polylines"])
        for s in data["series"]:
            expected = [[r["step"], r[s["name"]]] for r in rows if s["name"] in r]
            check("%s: %s has metrics.jsonl's %d points" % (chart, s["name"], len(expected)),
                  len(expected) > 0 and s["points"] == expected)
    names = [s["name"] for s in json.loads(dom.charts.get("chart-loss", {"data": '{"series": []}'})["data"])["series"]]
    check("the loss chart has the eval loss too", names == ["loss", "eval_loss"])
    check("the memory plan draws a tier at least", len(dom.memory) >= 1)
    for tier, bars in dom.memory.items():
        check(tier + ": class bars (estimate and measured)", len(bars) >= 2 and all(b > 0 for _, b in bars))
    covered = sorted(l for first, last in dom.rows for l in range(first, last + 1))
    check("the residency table covers every layer once", covered == list(range(layers)))
    check("the copy summary gives the share hidden", dom.copy_hidden is not None and 0 <= dom.copy_hidden <= 1)
    check("the timeline draws the trace's spans", dom.timeline_spans > 0)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
