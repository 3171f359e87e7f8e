#!/usr/bin/env python3
"""Where a decode step's time goes, job by job, from a thread-pool trace.

The trace comes from a build with bench/pool_trace.patch applied (a
throwaway build: the patch is not part of the project). Every pool job
(every parallel op: a linear, attention, the read probe) records when it
was published, when the caller ran out of chunks, when a worker first
looked at it and ran out of chunks, and when it ended. With 2 threads:

    git apply bench/pool_trace.patch && cmake --build build --target pagoda
    cp build/pagoda /tmp/pagoda-trace && git checkout src/core/parallel.cpp
    cmake --build build   # back to the untraced build
    PAGODA_POOL_TRACE=/tmp/trace.bin /tmp/pagoda-trace bench latency \\
        --model /tmp/qwen3-0.6b-random --max-model-len 1024 --threads 2 \\
        --kv-cache-memory 400000000 --quantization int8 --input-len 128 \\
        --output-len 66 --repeats 1 --warmup 0
    python3 bench/pool_trace.py /tmp/trace.bin

A decode step is the run of jobs between two read probes (bench latency
probes the bandwidth between decode steps; a probe is a job of >= 2^20
items). Jobs are named by their item count (panels of a linear, attention
items) and, where two kinds share a count, by the count of the job before
them (o_proj and down both have 16 int8 panels in Qwen3-0.6B: "16 after 2"
is o_proj, after attention's 2 items). Printed per step (medians): the
wall time, each kind's time and the thread time idle inside it (the caller
waiting for the worker's last chunk plus the worker done before the end),
and the serial gaps between jobs, where only the calling thread works.
"""
import collections
import statistics
import struct
import sys

FIELDS = "<6q"  # published, caller_done, all_done, worker_seen, worker_done, n
PROBE_ITEMS = 1 << 20


def decode_steps(jobs):
    """The runs of jobs between two read probes that have the most common
    length (a decode step's; the runs around the startup probes hold the
    prefill)."""
    probes = [i for i, j in enumerate(jobs) if j[5] >= PROBE_ITEMS]
    runs = [jobs[a + 1 : b] for a, b in zip(probes, probes[1:]) if b > a + 1]
    if not runs:
        return []
    length = collections.Counter(len(r) for r in runs).most_common(1)[0][0]
    return [r for r in runs if len(r) == length]


def kind_names(steps):
    """A name per (items, items of the job before): the item count alone
    where every job of that count follows the same kind of job."""
    before = collections.defaultdict(set)
    for step in steps:
        for prev, job in zip(step, step[1:]):
            before[job[5]].add(prev[5])
    return lambda n, prev: f"{n} after {prev}" if len(before[n]) > 1 else f"{n}"


def main(path):
    data = open(path, "rb").read()
    size = struct.calcsize(FIELDS)
    jobs = [struct.unpack_from(FIELDS, data, i) for i in range(0, len(data) - size + 1, size)]
    steps = decode_steps(jobs)
    if not steps:
        sys.exit("pool_trace: no decode steps between read probes in " + path)
    name = kind_names(steps)
    per_kind = collections.defaultdict(lambda: collections.defaultdict(list))
    walls = []
    for step in steps:
        walls.append((step[-1][2] - step[0][0]) * 1e-6)
        time, idle, gap = collections.Counter(), collections.Counter(), collections.Counter()
        for i, (pub, cdone, end, wseen, wdone, n) in enumerate(step):
            kind = name(n, step[i - 1][5] if i else None)
            time[kind] += (end - pub) * 1e-6
            if wdone:  # a worker took part: the idle ends of both threads
                idle[kind] += (max(0, end - cdone) + max(0, end - wdone)) * 1e-6
            if i:
                gap[kind] += (pub - step[i - 1][2]) * 1e-6
        for kind in time:
            per_kind[kind]["time"].append(time[kind])
            per_kind[kind]["idle"].append(idle[kind])
            per_kind[kind]["gap"].append(gap[kind])
    med = statistics.median
    print(f"{len(walls)} steps, {med(walls):.3f} ms a step (median)")
    print(f"{'job (items)':>16} {'ms/step':>8} {'idle ms':>8} {'gap before':>10}")
    for kind, v in sorted(per_kind.items(), key=lambda kv: -med(kv[1]["time"])):
        print(f"{kind:>16} {med(v['time']):8.3f} {med(v['idle']):8.3f} {med(v['gap']):10.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
