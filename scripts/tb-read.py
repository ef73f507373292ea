#!/usr/bin/env python3
"""tb-read.py reads a run's TensorBoard event files with TensorBoard's own reader and prints what it
finds as one JSON object, for engine/tensorboard_test.go:

    {"file_version": "brain.Event:2",
     "scalars": {"<tag>": [[step, value], ...]},
     "texts":   {"<tag>": [{"step": N, "shape": [...], "text": ["...", ...]}, ...]},
     "plugins": {"<tag>": "<plugin_name>"}}

Events are read by tensorboard.backend.event_processing.event_accumulator.EventAccumulator over
the whole directory (every events.out.tfevents.* file, as `tensorboard --logdir` does), keeping
every event (no reservoir sampling). Values are as TensorBoard holds them (scalars are float32);
NaN and infinities are written as the strings "NaN", "+Inf" and "-Inf".

Usage:
    scripts/tb-read.py RUN_DIR/tb

TensorBoard is found in $STX_TENSORBOARD_DIR, else $STX_CACHE_DIR/pyref/tensorboard, else
${XDG_CACHE_HOME:-~/.cache}/stx/pyref/tensorboard (scripts/fetch-tensorboard.sh installs it
there), else among the installed packages.
"""
import json
import math
import os
import sys


def reference_dir():
    if os.environ.get("STX_TENSORBOARD_DIR"):
        return os.environ["STX_TENSORBOARD_DIR"]
    cache = os.environ.get("STX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "stx")
    return os.path.join(cache, "pyref", "tensorboard")


def number(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return x


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    if not os.path.isdir(path):
        print(f"tb-read: {path} is not a directory", file=sys.stderr)
        return 1
    ref = reference_dir()
    if os.path.isdir(ref):
        sys.path.insert(0, ref)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(path, size_guidance={
        ea.SCALARS: 0, ea.TENSORS: 0, ea.COMPRESSED_HISTOGRAMS: 0, ea.IMAGES: 0,
        ea.AUDIO: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    tags = acc.Tags()
    out = {"file_version": acc.file_version, "scalars": {}, "texts": {}, "plugins": {}}
    for tag in tags.get(ea.SCALARS, []):
        out["scalars"][tag] = [[e.step, number(e.value)] for e in acc.Scalars(tag)]
    for tag in tags.get(ea.TENSORS, []):
        md = acc.SummaryMetadata(tag)
        out["plugins"][tag] = md.plugin_data.plugin_name
        texts = []
        for e in acc.Tensors(tag):
            arr = tensor_util.make_ndarray(e.tensor_proto)
            flat = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in arr.reshape(-1).tolist()]
            texts.append({"step": e.step, "shape": list(arr.shape), "text": flat})
        out["texts"][tag] = texts
    if isinstance(out["file_version"], bytes):
        out["file_version"] = out["file_version"].decode()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
