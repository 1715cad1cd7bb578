"""An independent reimplementation of win2-v1 and pp3-v1, written from docs/rules.md.

Plain numpy/math/scipy.stats; nothing from ``runner`` is imported. Sums use numpy (pairwise)
instead of the rule's correctly rounded sums, and the bootstrap sums counts x family sums,
so agreement with the rule module shows the numbers do not hinge on one summation order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import t as student_t

STARTS = ("s1", "s2", "s3")
METRICS = {  # name: (direction, role, role with ms_per_round primary)
    "pooled_rate_tps": ("higher", "primary", "reported"),
    "accepted_per_round": ("higher", "guard", "guard"),
    "decode_tps": ("higher", "guard", "guard"),
    "ms_per_round": ("lower", "reported", "primary"),
    "ttft_s": ("lower", "reported", "reported"),
}


def _verdict(point: float, low: float, high: float, bar: float, direction: str) -> str:
    if direction == "lower":
        point, low, high = -point, -high, -low
    if point > bar and low > 0:
        return "WIN"
    if point < -bar and high < 0:
        return "LOSS"
    return "NO_CHANGE"


def corrected(p_values: list[float], alpha: float, correction: str) -> list[bool]:
    """Holm's step-down or Bonferroni (docs/rules.md 2.7): which p-values pass, in input order."""
    m = len(p_values)
    passed = [False] * m
    for k, i in enumerate(sorted(range(m), key=lambda i: (p_values[i], i)), start=1):
        if correction == "bonferroni":
            passed[i] = p_values[i] < alpha / m
        elif p_values[i] < alpha / (m - k + 1):
            passed[i] = True
        else:
            break
    return passed


def _p_value(d: list[float]) -> float:
    arr = np.array(d, dtype=float)
    point, sd = float(np.mean(arr)), float(np.std(arr, ddof=1))
    if sd == 0:
        return 1.0 if point == 0 else 0.0
    return float(2 * student_t.sf(abs(point / (sd / math.sqrt(len(d)))), len(d) - 1))


def win2(inp: dict[str, Any]) -> dict[str, Any]:
    params = {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2, "repeats": 3, **inp.get("params", {})}
    registered = any(k in params for k in ("primaries", "decide", "correction"))
    primaries = params.get("primaries", ["pooled_rate_tps"])
    mode = params.get("decide", "all")
    correction = params.get("correction", "none") if mode == "any" and len(primaries) > 1 else "none"

    def role(m: str) -> str:
        return "primary" if m in primaries else "guard" if METRICS[m][1] == "guard" else "reported"
    n = params["repeats"]
    cells = inp["decision_cells"]
    waves = [w for w in inp["waves"] if w["cell"] in cells]
    families = sorted({w["family"] for w in waves})
    caps = [inp["starts"][s]["clock_cap_mhz"] for s in STARTS]
    inconclusive = (None in caps or len(set(caps)) > 1 or caps[0] != inp["production_clock_cap_mhz"]
                    or inp["thermal_dialbacks_in_hold"] > 0 or len(families) != 2)
    out: dict[str, Any] = {"cells": {}, "literal": {}, "spread": {}}
    for cell in cells:
        values: dict[str, dict[str, list[Any]]] = {m: {s: [] for s in STARTS} for m in METRICS}
        complete = len(families) == 2
        for s in STARTS:
            for r in range(1, n + 1):
                got = [w for w in waves if (w["start"], w["cell"], w["repeat"]) == (s, cell, r)]
                if sorted(w["family"] for w in got) != families:
                    complete = False
                    for m in METRICS:
                        values[m][s].append(None)
                    continue
                if any(w[c] is None for w in got for c in ("rounds", "accepted", "decode_s")):
                    complete = False
                rounds: Any = None if any(w["rounds"] is None for w in got) else int(np.sum([w["rounds"] for w in got]))
                acc: Any = None if any(w["accepted"] is None for w in got) else int(np.sum([w["accepted"] for w in got]))
                dec: Any = None if any(w["decode_s"] is None for w in got) else float(np.sum([w["decode_s"] for w in got]))
                tokens = int(np.sum([w["client_tokens_after_first"] for w in got]))
                cdec = float(np.sum([w["client_decode_s"] for w in got]))
                ttft = [x for w in got for x in w["ttft_s"]]
                if rounds == 0 or dec == 0 or cdec == 0 or not ttft:
                    complete = False
                ok_rd = rounds is not None and rounds > 0 and dec is not None and dec > 0
                values["pooled_rate_tps"][s].append((rounds + acc) / dec if ok_rd and acc is not None else None)
                values["accepted_per_round"][s].append(acc / rounds if acc is not None and rounds else None)
                values["decode_tps"][s].append(tokens / cdec if cdec > 0 else None)
                values["ms_per_round"][s].append(1000 * dec / rounds if ok_rd else None)
                values["ttft_s"][s].append(float(np.mean(ttft)) if ttft else None)
        metrics: dict[str, Any] = {}
        for m, (direction, _role, _lrole) in METRICS.items():
            v = values[m]
            d = [None if None in (v["s1"][i], v["s2"][i], v["s3"][i])
                 else v["s2"][i] / ((v["s1"][i] + v["s3"][i]) / 2) - 1 for i in range(n)]
            entry: dict[str, Any] = {"per_repeat": v, "d": d, "point": None, "low": None, "high": None,
                                     "effect": None, "guard": None}
            if complete:
                arr = np.array(d, dtype=float)
                point = float(np.mean(arr))
                half = float(student_t.ppf(1 - (1 - params["confidence"]) / 2, n - 1) * np.std(arr, ddof=1)
                             / math.sqrt(n))
                entry.update(point=point, low=point - half, high=point + half,
                             effect=_verdict(point, point - half, point + half, params["bar"], direction))
                worse = sum(1 for i in range(n) if (v["s2"][i] < min(v["s1"][i], v["s3"][i]) if direction == "higher"
                                                    else v["s2"][i] > max(v["s1"][i], v["s3"][i])))
                entry["guard"] = "LOSS" if worse >= params["guard_min_repeats"] else "OK"
            metrics[m] = entry
        if complete and registered:
            for m in primaries:
                metrics[m]["p"] = _p_value(metrics[m]["d"])
            passes = corrected([metrics[m]["p"] for m in primaries], 1 - params["confidence"], correction) \
                if correction != "none" else [True] * len(primaries)
            for m, ok in zip(primaries, passes, strict=True):
                metrics[m]["passed"] = ok

        def literal_verdict(complete: bool = complete, metrics: dict[str, Any] = metrics) -> str | None:
            if not complete:
                return None
            if any(metrics[g]["guard"] == "LOSS" for g in ("accepted_per_round", "decode_tps")):
                return "LOSS"
            return str(metrics["ms_per_round"]["effect"])

        def cell_verdict(complete: bool = complete, metrics: dict[str, Any] = metrics) -> str | None:
            if not complete:
                return None
            effects = [metrics[m]["effect"] for m in primaries]
            if "LOSS" in effects or any(metrics[g]["guard"] == "LOSS" for g in METRICS if role(g) == "guard"):
                return "LOSS"
            if not registered:
                return str(effects[0])
            if mode == "all":
                return "WIN" if all(e == "WIN" for e in effects) else "NO_CHANGE"
            return "WIN" if any(metrics[m]["effect"] == "WIN" and metrics[m]["passed"] for m in primaries) \
                else "NO_CHANGE"

        out["cells"][cell] = {"verdict": cell_verdict(), "metrics": metrics}
        out["literal"][cell] = literal_verdict()
        s1, s3 = values["pooled_rate_tps"]["s1"], values["pooled_rate_tps"]["s3"]
        off = [None if s1[i] is None or s3[i] is None else abs(s1[i] - s3[i]) / ((s1[i] + s3[i]) / 2)
               for i in range(n)]
        rates = [e["pooled_rate_tps"] for e in inp.get("archive", []) if e["cell"] == cell]
        day = (max(rates) - min(rates)) / float(np.mean(rates)) if len(rates) >= 2 else None
        out["spread"][cell] = {"in_window_off_off": off, "archive_day_to_day": day}

    def decision(verdicts: list[str | None]) -> str:
        if inconclusive or None in verdicts:
            return "INCONCLUSIVE"
        if "LOSS" in verdicts:
            return "LOSS"
        return "WIN" if all(v == "WIN" for v in verdicts) else "NO_CHANGE"

    out["decision"] = decision([c["verdict"] for c in out["cells"].values()])
    out["literal_decision"] = decision(list(out["literal"].values()))
    return out


BLOCKS = ("A1", "B1", "B2", "A2")
OBSERVED = ("ok", "bounded")  # a bounded decode run counts as an observation


def clock_hold(clocks: dict[str, Any] | None) -> bool:
    """A clock condition of ``clocks`` holds the promotion (as win2-v1's, per block)."""
    if clocks is None:
        return False
    caps = [clocks["blocks"][b] for b in BLOCKS]
    production = clocks["production_clock_cap_mhz"]
    # no clocks: a recorded cap is off; else a cap unrecorded, or unlike production's (or another block's), is
    off = any(c is not None for c in caps) if production is None else any(c != production for c in caps)
    return off or clocks["thermal_dialbacks_in_hold"] > 0


def pp3(inp: dict[str, Any]) -> dict[str, Any]:
    params = {"min_gain": 0.05, "bootstrap": 2000, "seed": 4103, "interval": 0.90, "max_regression": 0.05,
              **inp.get("params", {})}
    reqs = inp["requests"]
    table: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in reqs:  # a pair holds every request of it in a block
        table.setdefault((r["block"], r["family"], r["context"]), []).append(r)
    pairs = sorted({(r["family"], r["context"]) for r in reqs})

    def usable(pair: tuple[str, str]) -> bool:
        rows = [table.get((b, *pair), []) for b in BLOCKS]
        return len({len(rs) for rs in rows}) == 1 and all(
            rs and all(r["status"] in OBSERVED and r["delivered_tokens"] is not None and r["decode_s"] is not None
                       for r in rs) for rs in rows)

    good = [p for p in pairs if usable(p)]
    families = sorted({p[0] for p in good})
    sums = {key: np.zeros(len(families)) for key in ("ta", "da", "tb", "db")}
    for i, f in enumerate(families):
        for p in good:
            if p[0] != f:
                continue
            for b in BLOCKS:
                for r in table[(b, *p)]:
                    arm = b[0].lower()
                    sums["t" + arm][i] += r["delivered_tokens"]
                    sums["d" + arm][i] += r["decode_s"]
    out: dict[str, Any] = {"point": None, "lower": None, "distinct": None, "per_family": {}, "per_pair": {}}
    computable = bool(families) and all((sums["ta"] > 0) & (sums["da"] > 0) & (sums["db"] > 0))
    if computable:
        def gain(counts: np.ndarray) -> np.ndarray:
            tb, db, ta, da = (counts @ sums[k] for k in ("tb", "db", "ta", "da"))
            return (tb / db) / (ta / da) - 1

        k = len(families)
        out["point"] = float(gain(np.ones((1, k)))[0])
        idx = np.random.default_rng(params["seed"]).integers(0, k, size=(params["bootstrap"], k))
        counts = np.zeros((params["bootstrap"], k))
        for m in range(k):
            np.add.at(counts, (np.arange(params["bootstrap"]), idx[:, m]), 1)
        gains = gain(counts)
        out["lower"] = float(np.quantile(gains, (1 - params["interval"]) / 2))
        out["distinct"] = len(set(np.round(gains, 12).tolist()))
        for i, f in enumerate(families):
            out["per_family"][f] = float(gain(np.eye(k)[i:i + 1])[0])

    regress = False
    for p in pairs:
        entry: dict[str, float | None] = {"gain": None}
        if usable(p):
            rows = {b: table[(b, *p)] for b in BLOCKS}
            ta = sum(r["delivered_tokens"] for b in ("A1", "A2") for r in rows[b])
            da = sum(r["decode_s"] for b in ("A1", "A2") for r in rows[b])
            tb = sum(r["delivered_tokens"] for b in ("B1", "B2") for r in rows[b])
            db = sum(r["decode_s"] for b in ("B1", "B2") for r in rows[b])
            if ta > 0 and da > 0 and db > 0:
                entry["gain"] = (tb / db) / (ta / da) - 1
        for field, key in (("ttft_s", "ttft_change"), ("round_ms_p95", "round_p95_change")):
            seen = [[r.get(field) for r in table.get((b, *p), [])] for b in BLOCKS]
            vals = [None if not v or None in v else sum(v) / len(v) for v in seen]
            if None in vals:
                entry[key] = None
            else:
                a = (vals[0] + vals[3]) / 2
                b = (vals[1] + vals[2]) / 2
                entry[key] = None if a == 0 else b / a - 1
            if usable(p) and (entry[key] is None or entry[key] > params["max_regression"]):
                regress = True
        out["per_pair"][f"{p[0]}/{p[1]}"] = entry

    if inp["failures"] or any(r["status"] == "lost" for r in reqs):
        out["decision"] = "REJECT"
    elif (not inp["gates_passed"] or clock_hold(inp.get("clocks")) or inp.get("incomplete")
          or any(r["status"] not in OBSERVED for r in reqs) or len(good) != len(pairs) or not pairs
          or out["point"] is None or out["point"] < params["min_gain"] or out["lower"] <= 0 or regress):
        out["decision"] = "NO_PROMOTION"
    else:
        out["decision"] = "CANDIDATE"
    return out
