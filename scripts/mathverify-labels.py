#!/usr/bin/env python3
"""mathverify-labels.py labels (gold, completion) cases with Hugging Face's Math-Verify.

Each case is one JSON object per line with "id", "gold" and "completion"; its label is
    int(math_verify.verify(math_verify.parse(gold), math_verify.parse(completion)))
with parse's and verify's defaults (LaTeX and plain-expression extraction, float_rounding=6,
numeric_precision=15, strict=True). All cases are labelled by this one invocation, split
over --jobs forked workers (default: the CPUs, at most 8; --jobs 1 labels them in this process).

Usage:
    scripts/mathverify-labels.py [--jobs N] CASES.jsonl          # prints {"id": ..., "label": 0|1} per case
    scripts/mathverify-labels.py [--jobs N] --write CASES.jsonl  # rewrites the "label" field of each case

Math-Verify is found in $STX_MATHVERIFY_DIR, else $STX_CACHE_DIR/pyref/mathverify, else
${XDG_CACHE_HOME:-~/.cache}/stx/pyref/mathverify (scripts/fetch-mathverify.sh installs it there),
else among the installed packages.
"""
import json
import logging
import multiprocessing
import os
import sys


def reference_dir():
    if os.environ.get("STX_MATHVERIFY_DIR"):
        return os.environ["STX_MATHVERIFY_DIR"]
    cache = os.environ.get("STX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "stx")
    return os.path.join(cache, "pyref", "mathverify")


def label(case):
    from math_verify import parse, verify

    return int(bool(verify(parse(case["gold"]), parse(case["completion"]))))


def main(argv):
    write, jobs, args = False, min(os.cpu_count() or 1, 8), []
    it = iter(argv)
    for a in it:
        if a == "--write":
            write = True
        elif a == "--jobs":
            jobs = int(next(it, "1"))
        else:
            args.append(a)
    if len(args) != 1 or jobs < 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = reference_dir()
    if os.path.isdir(d):
        sys.path.insert(0, d)
    logging.disable(logging.CRITICAL)  # parse failures and timeouts are labels, not news
    import math_verify  # noqa: F401  (imported once, before the workers fork)

    path = args[0]
    with open(path, encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    if jobs > 1 and len(cases) > 1 and "fork" in multiprocessing.get_all_start_methods():
        # Math-Verify times its steps out with SIGALRM, which works in each
        # worker's main thread.
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            labels = pool.map(label, cases, chunksize=max(1, len(cases) // (4 * jobs)))
    else:
        labels = [label(c) for c in cases]
    out = []
    for c, verdict in zip(cases, labels):
        if write:
            c["label"] = verdict
            out.append(json.dumps(c, ensure_ascii=False))
        else:
            out.append(json.dumps({"id": c["id"], "label": verdict}))
    if write:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")
        os.replace(tmp, path)
    else:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
