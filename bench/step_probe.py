"""Summary of a bench/step_probe.sh recording: per step, the time inside
ModelRunner::execute (the forward pass) split into short steps (< 250 ms:
decode rows, maybe with small prompt chunks) and long ones (prefill), the
engine's time around it in LLMEngine::step (scheduling, sampling,
outputs), and the gaps between steps (in a server: waiting for requests,
handing outputs to the HTTP side)."""
import statistics
import subprocess
import sys


def steps_of(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "time,event"],
                         capture_output=True, text=True, check=True).stdout
    steps, cur = [], {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        t, event = float(parts[0].rstrip(":")), parts[1].rstrip(":").split(":")[-1]
        if event == "stepin":
            cur = {"in": t}
        elif event == "exin":
            cur["exin"] = t
        elif event.startswith("exout"):
            cur["exout"] = t
        elif event.startswith("stepout") and "exout" in cur:  # steps that ran the model
            cur["out"] = t
            steps.append(cur)
            cur = {}
    return steps


def main():
    for path in sys.argv[1:]:
        s = steps_of(path)
        if not s:
            print(f"{path}: no steps")
            continue
        ms = lambda a, b: [1e3 * (x[b] - x[a]) for x in s]
        ex = ms("exin", "exout")
        short = [x for x in ex if x < 250]
        long_ = [x for x in ex if x >= 250]
        around = [a + b for a, b in zip(ms("in", "exin"), ms("exout", "out"))]
        gaps = [1e3 * (s[i]["in"] - s[i - 1]["out"]) for i in range(1, len(s))] or [0.0]
        print(f"{path}: {len(s)} steps in {s[-1]['out'] - s[0]['in']:.2f} s")
        if short:
            print(f"  execute, short steps: {len(short)}, {sum(short) / 1e3:.2f} s, "
                  f"median {statistics.median(short):.1f} ms, mean {statistics.mean(short):.1f} ms")
        if long_:
            print(f"  execute, long steps: {len(long_)}, {sum(long_) / 1e3:.2f} s: "
                  + " ".join(f"{x:.0f}" for x in long_))
        print(f"  engine around execute: {sum(around) / 1e3:.3f} s "
              f"(median {statistics.median(around):.2f} ms per step)")
        print(f"  gaps between steps: {sum(gaps) / 1e3:.3f} s "
              f"(median {statistics.median(gaps):.3f} ms, max {max(gaps):.1f} ms)")


if __name__ == "__main__":
    main()
