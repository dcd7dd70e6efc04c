"""What a model sweep found (docs/tuning.md): per-operation picks and their regret (``time(pick) / time(best) -
1``, both under the :class:`Filters`), whole-model totals, tables, CSV/JSON, plots, and the comparison of two
databases. The heuristic's pick is what ``Graph.build`` runs: mode A's first configuration that ran, else FALLBACK's.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from cudnn_py.tuning_records.database import TuningDatabase
from cudnn_py.tuning_records.models import Problem

from .sweep import KIND, valid_record

__all__ = ["Filters", "LayerResult", "analyse", "totals", "format_table", "format_totals", "format_details",
           "write_csv", "write_json", "plot", "Change", "compare", "format_compare", "MISS"]

#: a heuristic pick slower than the best by more than this fraction counts as a miss
MISS = 0.05
#: the picks reported, in column order ('heuristic' is A, else FALLBACK: what Graph.build runs)
PICKS = ("heuristic", "A", "B", "FALLBACK")


@dataclass(frozen=True)
class Filters:
    """Which configurations may be picked: deterministic only, no TF32 (tensor cores or down-converted inputs on
    float32 data), no reduced-precision reduction, at most ``workspace_limit`` bytes of workspace. A configuration
    whose output disagreed with the others' (see :mod:`cudnn_py.tuning.sweep`) is never allowed."""

    deterministic: bool = False
    no_tf32: bool = False
    no_reduced_precision: bool = False
    workspace_limit: int | None = None

    def allows(self, cfg: dict, dtype: str) -> bool:
        """Whether a measured configuration (a record's ``configs`` entry) ran and passes the filters."""
        if not cfg.get("ok") or cfg.get("agrees") is False:
            return False
        notes = set(cfg.get("notes") or ())
        if self.deterministic and (not cfg.get("deterministic", True) or "nondeterministic" in notes):
            return False
        if self.no_tf32 and dtype == "float32" and notes & {"tensor_core", "down_convert_inputs"}:
            return False
        if self.no_reduced_precision and "reduced_precision_reduction" in notes:
            return False
        ws = cfg.get("workspace") or 0
        return self.workspace_limit is None or ws <= self.workspace_limit

    def text(self) -> str:
        on = [n for n, v in (("deterministic", self.deterministic), ("no TF32", self.no_tf32),
                             ("no reduced-precision reduction", self.no_reduced_precision)) if v]
        if self.workspace_limit is not None:
            on.append(f"workspace <= {self.workspace_limit} B")
        return ", ".join(on) or "none"


@dataclass
class LayerResult:
    """One operation of the model: its best configuration, each pick with its regret, and how often it runs."""

    key: str
    kind: str
    pass_: str
    layers: list
    count: int
    configs: int = 0
    ran: int = 0
    disagree: int = 0    #: configurations whose output differed from the others' (never picked)
    pruned: int = 0      #: configurations timed by one sample only (out of the race: see the sweep)
    best: str | None = None
    best_ms: float | None = None
    best_workspace: int | None = None
    picks: dict = field(default_factory=dict)     # pick name -> (tag, ms) or None
    regret: dict = field(default_factory=dict)    # pick name -> float or None
    problem: str = ""                             # why nothing was measured, if so
    pruned_picks: list = field(default_factory=list)  # the picks (and "best") whose time is one pruned sample

    @property
    def missed(self) -> bool:
        """Whether the heuristic's pick is more than :data:`MISS` slower than the best."""
        r = self.regret.get("heuristic")
        return r is not None and r > MISS


def analyse_record(rec: dict, dtype: str, filters: Filters = Filters()) -> tuple[dict, str | None, dict]:
    """({tag: config} the filters allow, the best tag, {pick: tag or None}) of one sweep record."""
    usable = {c["tag"]: c for c in rec["configs"] if filters.allows(c, dtype)}
    best = min(usable, key=lambda t: usable[t]["ms"]) if usable else None
    order = rec.get("order", {})
    picks = {m: next((t for t in order.get(m, ()) if t in usable), None) for m in ("A", "B", "FALLBACK")}
    picks["heuristic"] = picks["A"] or picks["FALLBACK"]
    return usable, best, picks


def analyse(problems: Sequence[Problem], records: dict, filters: Filters = Filters()) -> list[LayerResult]:
    """One :class:`LayerResult` per problem (in the problems' order) from the sweep records by key."""
    out = []
    for p in problems:
        res = LayerResult(p.key, p.kind, p.pass_, list(p.layers), p.count)
        rec = records.get(p.key)
        if rec is None or not valid_record(rec):
            res.problem = "not measured"
            out.append(res)
            continue
        res.problem = rec.get("problem", "")
        usable, best, picks = analyse_record(rec, p.dtype, filters)
        res.configs, res.ran = len(rec["configs"]), sum(1 for c in rec["configs"] if c["ok"])
        res.disagree = sum(1 for c in rec["configs"] if c.get("agrees") is False)
        res.pruned = sum(1 for c in rec["configs"] if c["ok"] and c.get("pruned"))
        if best is not None:
            res.best, res.best_ms, res.best_workspace = best, usable[best]["ms"], usable[best].get("workspace")
            if usable[best].get("pruned"):
                res.pruned_picks.append("best")
        for name in PICKS:
            tag = picks[name]
            if tag is not None and usable[tag].get("pruned"):
                res.pruned_picks.append(name)
            res.picks[name] = None if tag is None else (tag, usable[tag]["ms"])
            res.regret[name] = None if tag is None or not res.best_ms else usable[tag]["ms"] / res.best_ms - 1.0
        out.append(res)
    return out


def totals(results: Sequence[LayerResult]) -> dict:
    """Whole-model figures: one step's time with the heuristic's picks and with the best (where both exist), the
    speed-up, the operations the heuristic misses by more than :data:`MISS`, and those with nothing usable."""
    both = [r for r in results if r.best_ms is not None and r.picks.get("heuristic")]
    heuristic = sum(r.picks["heuristic"][1] * r.count for r in both)
    tuned = sum((r.best_ms or 0.0) * r.count for r in both)
    return {"operations": len(results), "compared": len(both), "heuristic_ms": heuristic, "tuned_ms": tuned,
            "gain": heuristic / tuned - 1.0 if tuned else None, "misses": sum(1 for r in both if r.missed),
            "miss_threshold": MISS, "no_heuristic_pick": sum(1 for r in results if r.best_ms is not None and
                                                             not r.picks.get("heuristic")),
            "nothing_usable": sum(1 for r in results if r.best_ms is None)}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def format_table(results: Sequence[LayerResult]) -> str:
    """A fixed-width table, one line per operation."""
    head = (f"{'operation':<16}{'layer (x count)':<40}{'ran':>8}{'best':>34}{'best ms':>10}{'heur ms':>10}"
            f"{'regret':>8}{'A':>8}{'B':>8}{'FB':>8}  note")
    lines = [head, "-" * len(head)]
    for r in results:
        name = (r.layers[0] if r.layers else "") + (f" x{r.count}" if r.count > 1 else "")
        heur = r.picks.get("heuristic")
        flagged = [n for n in r.pruned_picks if n in ("best", "heuristic")]
        note = r.problem[:80] if r.problem else " ".join(
            w for w in ("MISS" if r.missed else "", f"{r.disagree} disagree" if r.disagree else "",
                        f"{r.pruned} pruned" if r.pruned else "",
                        f"({' and '.join(flagged)} timed by its pruned sample)" if flagged else "") if w)
        lines.append(f"{r.kind + '.' + r.pass_:<16}{name[:39]:<40}{f'{r.ran}/{r.configs}':>8}{(r.best or '-')[:33]:>34}"
                     f"{_ms(r.best_ms):>10}{_ms(heur[1] if heur else None):>10}{_pct(r.regret.get('heuristic')):>8}"
                     f"{_pct(r.regret.get('A')):>8}{_pct(r.regret.get('B')):>8}{_pct(r.regret.get('FALLBACK')):>8}"
                     f"  {note}")
    return "\n".join(lines)


def format_totals(t: dict) -> str:
    """The whole-model totals in two lines."""
    gain = "-" if t["gain"] is None else f"{100 * t['gain']:.1f}%"
    return (f"one training step over {t['compared']} of {t['operations']} operations: heuristic picks "
            f"{t['heuristic_ms']:.3f} ms, tuned {t['tuned_ms']:.3f} ms (the heuristic is {gain} slower)\n"
            f"heuristic misses by > {100 * t['miss_threshold']:.0f}%: {t['misses']} operations; no heuristic pick: "
            f"{t['no_heuristic_pick']}; nothing usable: {t['nothing_usable']}")


def _flat(r: LayerResult) -> dict:
    row = {"key": r.key, "kind": r.kind, "pass": r.pass_, "layers": " ".join(r.layers), "count": r.count,
           "configs": r.configs, "ran": r.ran, "disagree": r.disagree, "best": r.best, "best_ms": r.best_ms,
           "best_workspace": r.best_workspace, "missed": r.missed, "problem": r.problem, "pruned": r.pruned,
           "pruned_picks": " ".join(r.pruned_picks)}
    for name in PICKS:
        pick = r.picks.get(name)
        row[f"{name}_pick"], row[f"{name}_ms"] = (pick if pick else (None, None))
        row[f"{name}_regret"] = r.regret.get(name)
    return row


def write_csv(results: Sequence[LayerResult], path: str) -> None:
    """One CSV row per operation (picks, times and regrets as columns)."""
    rows = [_flat(r) for r in results]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["key"])
        w.writeheader()
        w.writerows(rows)


def write_json(results: Sequence[LayerResult], summary: dict, meta: dict, path: str,
               records: dict | None = None) -> None:
    """``{"meta": ..., "totals": ..., "operations": [...], "records": {key: sweep record}}`` as JSON."""
    with open(path, "w") as f:
        json.dump({"meta": meta, "totals": summary, "operations": [asdict(r) for r in results],
                   "records": records or {}}, f, indent=1)


def format_details(result: LayerResult, rec: dict, filters: Filters = Filters()) -> str:
    """Every configuration of one operation, fastest first: time, workspace, notes, agreement, modes and ranks,
    whether the filters allow it."""
    ranks = {m: {t: i for i, t in enumerate(order)} for m, order in rec.get("order", {}).items()}
    lines = [f"{result.kind}.{result.pass_} {result.key}  ({', '.join(result.layers[:3])}"
             f"{' ...' if len(result.layers) > 3 else ''})"]
    for c in sorted(rec["configs"], key=lambda c: (not c["ok"], c["ms"] or 0.0)):
        modes = " ".join(f"{m}#{ranks[m][c['tag']]}" for m in ranks if c["tag"] in ranks[m])
        state = (f"{c['ms']:.4f} ms" if c["ok"] else "failed") + ("" if filters.allows(c, rec.get("dtype", ""))
                                                                  or not c["ok"] else " (filtered)")
        agree = "" if c.get("agrees") is not False else f" DISAGREES by {c.get('diff'):.2g}"
        if c["ok"] and c.get("pruned"):
            agree += f" pruned after {c.get('samples', 1)} sample" + ("" if c.get("checked") else ", not checked")
        lines.append(f"  {c['tag'][:44]:<45}{state:<22}{str(c.get('workspace') or 0):>12} B  {modes:<22}"
                     f"{','.join(c.get('notes') or ())}{agree}{'  ' + c['reason'][:100] if c.get('reason') else ''}")
    return "\n".join(lines)


def plot(results: Sequence[LayerResult], path: str, title: str) -> bool:
    """Three panels (off-screen): regret and time (heuristic vs tuned) per operation, a histogram of regret; False
    when matplotlib is missing (nothing written)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False
    rs = [r for r in results if r.regret.get("heuristic") is not None]
    x = range(len(rs))
    regret = [100 * r.regret["heuristic"] for r in rs]
    fig = Figure(figsize=(12, 10))
    a, b, c = fig.subplots(3, 1)
    a.bar(x, regret, color=["C3" if r.missed else "C0" for r in rs])
    a.axhline(100 * MISS, color="grey", lw=0.8, ls="--")
    a.set_ylabel("regret of the heuristic's pick (%)")
    a.set_title(title, fontsize=9)
    b.plot(x, [r.picks["heuristic"][1] for r in rs], "o-", ms=3, label="heuristic pick")
    b.plot(x, [r.best_ms for r in rs], "s-", ms=3, label="tuned (best)")
    b.set_yscale("log")
    b.set_ylabel("time per call (ms)")
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.set_xticks(list(x), [f"{r.kind[0]}.{r.pass_}:{r.layers[0] if r.layers else ''}" for r in rs],
                      rotation=90, fontsize=5)
    c.hist(regret, bins=30, color="C0")
    c.set_xlabel("regret (%)")
    c.set_ylabel("operations")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


@dataclass
class Change:
    """An operation whose best configuration or time differs between two databases."""

    key: str
    best_a: str | None
    ms_a: float | None
    best_b: str | None
    ms_b: float | None
    ratio: float | None      #: ms_b / ms_a
    best_changed: bool
    time_changed: bool


def _newest(db: TuningDatabase, kind: str) -> dict:
    out: dict = {}
    for rec in db.records(kind):
        if valid_record(rec.value) and (rec.key not in out or out[rec.key].updated < rec.updated):
            out[rec.key] = rec
    return out


def compare(a: TuningDatabase, b: TuningDatabase, threshold: float = MISS, filters: Filters = Filters(),
            kind: str = KIND) -> tuple[list[Change], dict]:
    """(the operations in both databases whose best configuration changed, or whose best time by more than
    ``threshold``, B's gains first; {"a": environments, "b": ..., "common", "only_a", "only_b", "same_best",
    "a_best_within", "faster", "slower", "totals", "uncounted"}: docs/tuning.md, "What --compare counts"). The
    totals weigh each operation by its record's ``count`` (1 where none, counted in ``uncounted``)."""
    ra, rb = _newest(a, kind), _newest(b, kind)
    changes = []
    same = within = faster = slower = uncounted = 0
    totals = dict.fromkeys(("tuned_a", "tuned_b", "heuristic_a", "heuristic_b"), 0.0)
    for key in sorted(ra.keys() & rb.keys()):
        va, vb = ra[key].value, rb[key].value
        usable_a, best_a, picks_a = analyse_record(va, va.get("dtype", ""), filters)
        usable_b, best_b, picks_b = analyse_record(vb, vb.get("dtype", ""), filters)
        count = va.get("count") or vb.get("count")
        uncounted += not isinstance(count, int)
        count = count if isinstance(count, int) else 1
        if best_a is not None and best_b is not None:
            totals["tuned_a"] += usable_a[best_a]["ms"] * count
            totals["tuned_b"] += usable_b[best_b]["ms"] * count
        ha, hb = picks_a["heuristic"], picks_b["heuristic"]
        if ha is not None and hb is not None:
            totals["heuristic_a"] += usable_a[ha]["ms"] * count
            totals["heuristic_b"] += usable_b[hb]["ms"] * count
        same += best_a == best_b
        if best_a == best_b or (best_a in usable_b and best_b is not None
                                and usable_b[best_a]["ms"] <= (1 + threshold) * usable_b[best_b]["ms"]):
            within += 1
        ms_a = next((c["ms"] for c in va["configs"] if c["tag"] == best_a), None)
        ms_b = next((c["ms"] for c in vb["configs"] if c["tag"] == best_b), None)
        ratio = ms_b / ms_a if ms_a and ms_b is not None else None
        ch = Change(key, best_a, ms_a, best_b, ms_b, ratio, best_a != best_b,
                    ratio is None or abs(ratio - 1.0) > threshold)
        if ratio is not None and ch.time_changed:
            faster += ratio < 1.0
            slower += ratio > 1.0
        if ch.best_changed or ch.time_changed:
            changes.append(ch)
    changes.sort(key=lambda c: float("inf") if c.ratio is None else c.ratio)
    info = {"a": sorted({r.environment.text() for r in ra.values()}),
            "b": sorted({r.environment.text() for r in rb.values()}),
            "common": len(ra.keys() & rb.keys()), "only_a": len(ra.keys() - rb.keys()),
            "only_b": len(rb.keys() - ra.keys()), "same_best": same, "a_best_within": within, "faster": faster,
            "slower": slower, "totals": {k: round(v, 6) for k, v in totals.items()}, "uncounted": uncounted}
    return changes, info


def format_compare(changes: Sequence[Change], info: dict, threshold: float) -> str:
    """The comparison (of :func:`compare`) as text: both sides' environments, the counts, one line per change."""
    t, pct = info["totals"], f"{100 * threshold:.0f}%"

    def ratio_text(a: float, b: float) -> str:
        return f" (B/A {b / a:.3f})" if a else ""
    lines = [f"A: {'; '.join(info['a']) or '(no records)'}", f"B: {'; '.join(info['b']) or '(no records)'}",
             f"{info['common']} operations in both ({info['only_a']} only in A, {info['only_b']} only in B); "
             f"{len(changes)} changed (best configuration, or best time by more than {pct})",
             f"same best configuration in {info['same_best']} of {info['common']}; A's best within {pct} of B's best "
             f"as B timed it in {info['a_best_within']} of {info['common']}",
             f"B's best faster than A's by more than {pct} in {info['faster']} operations, slower in {info['slower']}; "
             f"one step over the {info['common']} common operations"
             + (f" ({info['uncounted']} without a count, weighed once)" if info["uncounted"] else "")
             + f": tuned A {t['tuned_a']:.3f} ms, B {t['tuned_b']:.3f} ms{ratio_text(t['tuned_a'], t['tuned_b'])}; "
             f"heuristic picks A {t['heuristic_a']:.3f} ms, B {t['heuristic_b']:.3f} ms"
             f"{ratio_text(t['heuristic_a'], t['heuristic_b'])}"]
    if changes:
        head = f"{'operation':<70}{'best A':>30}{'ms A':>10}{'best B':>30}{'ms B':>10}{'B/A':>7}  B"
        lines += [head, "-" * len(head)]
        for c in changes:
            ratio = "-" if c.ratio is None else f"{c.ratio:.2f}"
            way = "" if c.ratio is None or not c.time_changed else ("faster" if c.ratio < 1 else "slower")
            lines.append(f"{c.key[:69]:<70}{(c.best_a or '-')[:29]:>30}{_ms(c.ms_a):>10}{(c.best_b or '-')[:29]:>30}"
                         f"{_ms(c.ms_b):>10}{ratio:>7}  {way}")
    return "\n".join(lines)
