"""``python -m cudnn_py algos --model NAME`` (and ``--compare``, ``--merge``, ``--list-models``): every engine
configuration of every layer of a known network, the heuristics' picks and their regret, whole-model totals
(docs/tuning.md, "Model sweeps", with examples). Measurements are kept in the tuning database, so a second run
reports from it (``--remeasure`` measures again); the filters apply when reporting.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

#: --quick: this many operations, repeats and warm-up runs
QUICK = (4, 3, 1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The model-sweep options (``--model``, ``--compare`` or ``--merge`` switch ``algos`` to this command)."""
    from cudnn_py.tuning_records.models import MODELS
    g = p.add_argument_group("model sweeps (--model), comparisons (--compare) and merges (--merge)")
    g.add_argument("--model", choices=sorted(MODELS), help="sweep every layer of this network (forward and backward)")
    g.add_argument("--list-models", action="store_true", help="print the models' operation counts and exit")
    g.add_argument("--seq", type=int, default=None, help="llama3-8b's sequence length (default 2048)")
    g.add_argument("--layers", type=int, default=None, metavar="N", help="only the first N distinct operations")
    g.add_argument("--quick", action="store_true", help=f"a short check: --layers {QUICK[0]} --repeats {QUICK[1]} "
                   f"--warmup {QUICK[2]}")
    g.add_argument("--jobs", type=int, default=None, metavar="N", help="N worker processes: builds in parallel, "
                   "each GPU timing one at a time (default: one per core, at most one per 2 GiB of GPU memory; 1: in "
                   "this process)")
    g.add_argument("--time-limit", type=float, default=600.0, metavar="S", help="stop a worker stuck on one build "
                   "or timing for S seconds, that configuration recorded as failed (default 600)")
    g.add_argument("--devices", default=None, help="'all' or a list like 0,1: the workers spread over these GPUs, "
                   "each timing on its own")
    g.add_argument("--shard", default=None, metavar="I/N", help="measure only operations i, i+N, ... (0-based)")
    g.add_argument("--db", default=None, metavar="PATH", help="the tuning database (default: $CUDNN_PY_TUNING_DB, "
                   "else the per-user cache)")
    g.add_argument("--remeasure", action="store_true", help="measure even what the database holds")
    g.add_argument("--details", action="store_true", help="also print every configuration of every operation")
    g.add_argument("--legacy", action="store_true", help="the convolutions through the legacy API's algorithms "
                   "(the _v7 heuristic as mode A) instead of the graph API's engines")
    g.add_argument("--max-configs", type=int, default=None, metavar="N", help="measure at most N configurations "
                   "of each heuristics mode (default: all)")
    g.add_argument("--exhaustive", action="store_true", help="time and check every configuration in full (default: "
                   "a race: configurations slower than 1.5x the best after their first sample stop being timed)")
    g.add_argument("--no-runtime-compilation", action="store_true", help="do not measure engines that compile at "
                   "run time (their builds take seconds)")
    g.add_argument("--cold-l2", action="store_true", help="time each sample as one execution after a write that "
                   "evicts the L2 cache (default: back to back, the data warm in L2)")
    g.add_argument("--deterministic", action="store_true", help="pick only deterministic configurations")
    g.add_argument("--no-tf32", action="store_true", help="no tensor-core (TF32) configurations on float32 data")
    g.add_argument("--no-reduced-precision", action="store_true", help="no reduced-precision reductions")
    g.add_argument("--compare", nargs=2, metavar=("DB_A", "DB_B"), help="list operations whose best configuration "
                   "or time changed between two databases")
    g.add_argument("--threshold", type=float, default=0.05, help="--compare: a relative time change (default 0.05)")
    g.add_argument("--merge", nargs="+", metavar="DB", help="INTO FROM...: copy FROM databases' records into INTO "
                   "(the newer of one key's wins); with --db, every DB is a FROM and --db is INTO")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the ``algos`` arguments ask for this command."""
    return bool(args.model or args.list_models or args.compare or args.merge)


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise SystemExit(f"algos: --shard takes I/N, e.g. 0/4, got {text!r}") from None
    if not 0 <= i < n:
        raise SystemExit(f"algos: --shard {text}: need 0 <= I < N")
    return i, n


def _devices(text: str, found: dict) -> list[int]:
    if text == "all":
        if not found["gpus"]:
            raise SystemExit(f"algos: --devices all: {found['why_none'] or 'no GPU'}")
        return [g["index"] for g in found["gpus"]]
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"algos: --devices takes 'all' or ordinals like 0,1, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    """The ``algos --model / --compare / --merge / --list-models`` command."""
    from cudnn_py.tuning import TuningDatabase, TuningDatabaseError
    from cudnn_py.tuning import report as rp
    filters = rp.Filters(args.deterministic, args.no_tf32, args.no_reduced_precision, args.workspace_limit)
    try:
        if args.list_models:
            from cudnn_py.tuning_records.models import MODELS
            for name, make in MODELS.items():
                m = make()
                print(f"{name:<10} {m.parameters():>14,} parameters  conv {m.count('conv'):>3}  linear "
                      f"{m.count('linear'):>3}  norm {m.count('norm'):>3}  attention {m.count('attention'):>3}  "
                      f"{len(m.problems(1, 'float16'))} distinct operations per step  ({m.description})")
            return 0
        if args.compare:
            for path in args.compare:
                _existing(path, "--compare")
            a, b = (TuningDatabase(p) for p in args.compare)
            changes, info = rp.compare(a, b, args.threshold, filters)
            print(rp.format_compare(changes, info, args.threshold))
            return 0
        if args.merge:
            into_path, sources = (args.db, args.merge) if args.db else (args.merge[0], args.merge[1:])
            if not sources:
                raise SystemExit("algos: --merge INTO FROM [FROM ...] (or --merge FROM [FROM ...] --db INTO)")
            for src in sources:
                _existing(src, "--merge")
            into = TuningDatabase(into_path)
            for src in sources:
                n = into.merge(src)
                print(f"{src}: {n} record{'' if n == 1 else 's'} merged into {into_path}")
            return 0
        return _sweep(args, rp, filters)
    except TuningDatabaseError as e:
        raise SystemExit(f"algos: {e}") from None


def _existing(path: str, flag: str) -> None:
    """Refuse a database that is read but does not exist (opening it would create an empty one)."""
    if path == ":memory:" or not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "does not exist"
        raise SystemExit(f"algos {flag}: tuning database {path} {what} (a database that is read must exist)")


def _sweep(args, rp, filters) -> int:
    from cudnn_py.cli.algos import progress_writer
    from cudnn_py.cli.algos_graph import heuristics_modes
    from cudnn_py.cli.info import driver_and_gpus
    from cudnn_py.tuning import TuningDatabase, default_database, default_path
    from cudnn_py.tuning.sweep import Settings, kernel_cache, kernel_cache_text, sweep, time_summary
    from cudnn_py.tuning.workers import default_jobs
    from cudnn_py.tuning_records.models import model
    if args.dtype not in ("float32", "float16", "bfloat16"):
        raise SystemExit(f"algos --model: --dtype float32, float16 or bfloat16, got {args.dtype}")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise SystemExit("algos: --plot needs matplotlib: pip install 'cudnn-py[plot]' (or leave --plot out)")
    if args.quick:
        args.layers, args.repeats, args.warmup = args.layers or QUICK[0], QUICK[1], QUICK[2]
    modes = heuristics_modes(args.modes, "algos")
    if args.repeats < 1 or args.warmup < 0 or any(v is not None and v < 1 for v in (args.layers, args.max_configs,
                                                                                    args.jobs)):
        raise SystemExit("algos: --repeats, --layers, --max-configs and --jobs must be >= 1, --warmup >= 0")
    if not args.time_limit > 0:
        raise SystemExit(f"algos: --time-limit must be > 0 seconds, got {args.time_limit}")
    settings = Settings(modes, args.repeats, args.warmup, args.max_configs, not args.no_runtime_compilation,
                        args.exhaustive, args.cold_l2)
    m = model(args.model, args.seq)
    try:
        problems = m.problems(args.batch, args.dtype, args.layout, legacy=args.legacy)
    except ValueError as e:
        raise SystemExit(f"algos: {e}") from None
    if not problems:
        raise SystemExit(f"algos: {m.name} has no convolutions for --legacy to sweep")
    problems = problems[:args.layers] if args.layers else problems
    shard = _shard(args.shard)
    mine = problems[shard[0]::shard[1]] if shard else problems
    found = driver_and_gpus()         # the driver's answer (no CUDA context)
    path = args.db or default_path()
    if not found["gpus"] and (path == ":memory:" or not os.path.isfile(path)):
        raise SystemExit(f"algos --model: no GPU to measure on: {found['why_none']}; nothing was written")
    devices = _devices(args.devices, found) if args.devices else None
    gib = [g["memory_gib"] for g in found["gpus"] if g["index"] in (devices or [args.device])]
    jobs = max(args.jobs or (default_jobs(gib) if gib else 1), len(devices or ()))  # a worker per device at least
    new_file = path != ":memory:" and not os.path.exists(path)
    db = TuningDatabase(args.db) if args.db else default_database()
    start = time.monotonic()
    progress = None if args.quiet else progress_writer(sys.stderr.isatty())
    cache = kernel_cache()
    try:
        records, measured = sweep(mine, db, device=args.device, devices=devices, jobs=jobs, settings=settings,
                                  remeasure=args.remeasure, progress=progress, time_limit=args.time_limit)
    except SystemExit:   # refused (no GPU): a database this run made, and left empty, goes (SQLite's side files too)
        if new_file and db.count() == 0:
            db.close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{db.path}{suffix}").unlink(missing_ok=True)
        raise
    except KeyboardInterrupt:
        if progress and sys.stderr.isatty():
            sys.stderr.write("\r\033[K")
        print(f"algos: interrupted; every operation measured before is kept in {db.path or 'memory'}", file=sys.stderr)
        return 130
    if progress and sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    elapsed = time.monotonic() - start
    results = rp.analyse(mine, records, filters)
    summary = rp.totals(results)
    title = f"{m.description}: batch {args.batch}, {args.dtype}, {args.layout}; filters: {filters.text()}"
    print(title)
    on = devices or [args.device]
    where = f"on device {args.device}" if jobs == 1 and not devices else \
        f"in {jobs} worker processes on device{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}"
    print(f"{len(mine)} operations{f' (shard {args.shard})' if shard else ''}: {measured} measured {where}, "
          f"{len(mine) - measured} from {db.path or 'memory'}; {elapsed:.1f} s")
    spent = time_summary([records[p.key] for p in mine if p.key in records])
    if spent:
        print(spent)
    if measured:
        print(kernel_cache_text(cache))
    print(rp.format_table(results))
    print(rp.format_totals(summary))
    if args.details:
        for r in results:
            if r.key in records:
                print(rp.format_details(r, records[r.key], filters))
    meta = {"model": m.name, "description": m.description, "batch": args.batch, "dtype": args.dtype,
            "layout": args.layout, "filters": filters.text(), "database": str(db.path or "memory"),
            "environment": db.environment(args.device).text(), "elapsed_s": elapsed, "notes": list(m.notes),
            "kernel_cache": cache, "cold_l2": args.cold_l2}
    if args.csv:
        rp.write_csv(results, args.csv)
    if args.json:
        rp.write_json(results, summary, meta, args.json, records)
    if args.plot:
        rp.plot(results, args.plot, title)
    return 0
