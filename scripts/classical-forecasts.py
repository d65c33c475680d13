#!/usr/bin/env python3
"""Scores classical seasonal forecasters on a utilisation trace the way
`tidemill-sim forecast-eval` scores tidemill, as a reference for
docs/forecasting.md ("Against classical seasonal methods").

Each series is cut into 15-minute slot means. At every origin (every
--step-hours, from two days after the series' first slot: Holt-Winters needs
two daily cycles), each method reads at most the 14 days before the origin
(gaps filled linearly for fitting) and forecasts 48 h. A lead is scored where
its slot was observed and same-slot-yesterday (the last observed same slot
before the origin, a day or more back) exists. MASE = Σ|y − forecast| over
Σ|y − same-slot-yesterday| on the same points, as forecast-eval reports it.

Methods:
- holt-winters: additive daily season (96 slots), no trend, fitted by
  statsmodels' ExponentialSmoothing;
- stl+ar1: robust STL with a daily period, AR(1) on the remainder
  (statsmodels' STLForecast), only with --with-stl (slow);
- median-profile: the median of each slot of the day over the kept days;
- hindsight-profile: the mean of each slot of the day over the whole
  series, the future included. No forecaster can have it; it bounds what a
  daily profile could reach.

With --tidemill-json (forecast-eval's `--json` on the same trace, nodes and
`--step`), tidemill's MASE on origins with at least two days of history
is printed beside them, from its `by_history` rows.

Needs numpy and statsmodels, for example:
    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install statsmodels
    /tmp/ref/bin/python scripts/classical-forecasts.py --trace FILE ...
"""
import argparse
import csv
import gzip
import json
import math
import warnings

import numpy as np
from statsmodels.tsa.arima.model import ARIMA
from statsmodels.tsa.forecasting.stl import STLForecast
from statsmodels.tsa.holtwinters import ExponentialSmoothing

SLOT_S = 900
DAY = 96
HORIZON = 192
KEEP = 14 * DAY


def read(path, cols, scale_max):
    """Series in order of first appearance (forecast-eval's order), as
    (time s, value) pairs; values scaled to each series' max if asked."""
    opener = gzip.open if path.endswith(".gz") else open
    rows = {}
    with opener(path, "rt") as f:
        r = csv.reader(f)
        next(r)
        for row in r:
            node, t, v = (row[c] for c in cols)
            if v != "":
                rows.setdefault(node, []).append((float(t), float(v)))
    if scale_max:
        for node, pts in rows.items():
            top = max(v for _, v in pts) or 1.0
            rows[node] = [(t, 100.0 * v / top) for t, v in pts]
    return rows


def slot_means(pts):
    t0 = int(min(t for t, _ in pts)) // SLOT_S
    t1 = int(max(t for t, _ in pts)) // SLOT_S
    s, n = np.zeros(t1 - t0 + 1), np.zeros(t1 - t0 + 1)
    for t, v in pts:
        s[int(t) // SLOT_S - t0] += v
        n[int(t) // SLOT_S - t0] += 1
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def yesterday(x, origin, lead):
    i = origin + lead
    while True:
        i -= DAY
        if i < 0:
            return np.nan
        if i < origin and not np.isnan(x[i]):
            return x[i]


def filled(h):
    """Leading gaps dropped, inner gaps interpolated linearly."""
    ok = ~np.isnan(h)
    if not ok.any():
        return h[:0]
    h = h[np.argmax(ok):]
    idx = np.arange(len(h))
    ok = ~np.isnan(h)
    return np.interp(idx, idx[ok], h[ok])


def holt_winters(h):
    fit = ExponentialSmoothing(h, trend=None, seasonal="add", seasonal_periods=DAY).fit()
    return fit.forecast(HORIZON)


def stl_ar1(h):
    fit = STLForecast(h, ARIMA, period=DAY, robust=True, model_kwargs={"order": (1, 0, 0)}).fit()
    return fit.forecast(HORIZON)


def median_profile(h):
    days = len(h) // DAY
    tail = h[len(h) - days * DAY:]
    profile = np.median(tail.reshape(days, DAY), axis=0)
    return np.array([profile[lead % DAY] for lead in range(HORIZON)])


def tidemill_from_two_days(path):
    """tidemill's MASE over forecast-eval's by_history bands from 2 days on:
    Σ|e| = MAE·n and Σ|e_ref| = MAE·n / MASE per band."""
    report = json.load(open(path))
    row = next(m for m in report["methods"] if m["method"] == "tidemill")
    err = ref = points = 0.0
    for band in row["by_history"]:
        if band["history"] == "1 d" or not band.get("points") or not band.get("mase"):
            continue
        err += band["mae"] * band["points"]
        ref += band["mae"] * band["points"] / band["mase"]
        points += band["points"]
    return err / ref, int(points)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--cols", default="0,1,2", help="node,time,value column indices")
    p.add_argument("--scale-max", action="store_true", help="values as percent of each series' max")
    p.add_argument("--max-nodes", type=int, default=0, help="every k-th node, as forecast-eval")
    p.add_argument("--step-hours", type=int, default=4)
    p.add_argument("--with-stl", action="store_true")
    p.add_argument("--tidemill-json")
    a = p.parse_args()
    warnings.filterwarnings("ignore")
    methods = {"holt-winters": holt_winters, "median-profile": median_profile}
    hindsight = "hindsight-profile"
    if a.with_stl:
        methods["stl+ar1"] = stl_ar1
    rows = read(a.trace, [int(c) for c in a.cols.split(",")], a.scale_max)
    nodes = list(rows)
    if a.max_nodes:
        nodes = nodes[:: max(1, math.ceil(len(nodes) / a.max_nodes))]
    sums = {m: [0.0, 0.0, 0] for m in [*methods, hindsight]}
    for k, node in enumerate(nodes, 1):
        x = slot_means(rows[node])
        whole = np.full(len(x) + (-len(x)) % DAY, np.nan)
        whole[: len(x)] = x
        by_phase = np.nanmean(whole.reshape(-1, DAY), axis=0)
        by_phase = np.where(np.isnan(by_phase), np.nanmean(x), by_phase)
        for origin in range(2 * DAY, len(x) - 1, a.step_hours * 4):
            h = filled(x[max(0, origin - KEEP):origin])
            if len(h) < 2 * DAY:
                continue
            forecasts = {}
            for m, f in methods.items():
                try:
                    forecasts[m] = np.clip(f(h), 0.0, 100.0)
                except (ValueError, np.linalg.LinAlgError):
                    forecasts[m] = None
            forecasts[hindsight] = np.array([by_phase[(origin + lead) % DAY] for lead in range(HORIZON)])
            for lead in range(HORIZON):
                i = origin + lead
                if i >= len(x) or np.isnan(x[i]):
                    continue
                ref = yesterday(x, origin, lead)
                if np.isnan(ref):
                    continue
                for m, f in forecasts.items():
                    if f is not None:
                        s = sums[m]
                        s[0] += abs(x[i] - f[lead])
                        s[1] += abs(x[i] - ref)
                        s[2] += 1
        print(f"{k}/{len(nodes)} nodes scored", flush=True)
    for m, (err, ref, n) in sums.items():
        print(f"{m}: MASE {err / ref:.3f} over {n} points")
    if a.tidemill_json:
        mase, n = tidemill_from_two_days(a.tidemill_json)
        print(f"tidemill (forecast-eval, from 2 days of history): MASE {mase:.3f} over {n} points")


if __name__ == "__main__":
    main()
