"""Generates the example's data (deterministic): a one-day trace of bursty training and
interactive starts (`trace.jsonl`), two weeks of interactive start history
(`history.jsonl`), and a snapshot of the queue at 09:10 Berlin time that day (`jobs.jsonl`)
with the autoscaler's state from the cycle before (`state.json`).

    python3 examples/autoscale/generate.py
"""
import datetime, json, os, random

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(7)
# Tuesday 17 November 2026, Europe/Berlin is UTC+1 in November.
DAY = int(datetime.datetime(2026, 11, 17, tzinfo=datetime.timezone(datetime.timedelta(hours=1))).timestamp())
H = 3600


def interactive_starts(day0, weekday):
    out = []
    if weekday >= 5:
        return out
    for hour in range(8, 19):
        rate = 6 if 9 <= hour < 12 or 14 <= hour < 17 else 3
        for _ in range(rng.randint(rate - 2, rate + 2)):
            out.append(day0 + hour * H + rng.randint(0, H - 1))
    return out


trace = []
for t in interactive_starts(DAY, 1):
    trace.append({"id": f"nb-{t}", "team": "notebooks", "tier": "standard", "submitted_at": t,
                  "gpus_per_member": 1, "cpu_milli": 2000, "memory_mib": 16384,
                  "models": ["L40S"], "interactive": True, "runtime_s": rng.choice([1800, 3600, 5400])})
for burst_hour, n in ((9, 10), (14, 8), (21, 6)):
    for i in range(n):
        t = DAY + burst_hour * H + rng.randint(0, 900)
        members = rng.choice([1, 1, 2, 4])
        trace.append({"id": f"train-{burst_hour}-{i}", "team": "research",
                      "tier": rng.choice(["standard", "standard", "best_effort"]), "submitted_at": t,
                      "members": members, "gpus_per_member": 8, "cpu_milli": 96000, "memory_mib": 1048576,
                      "runtime_s": rng.choice([2, 4, 8]) * H, "checkpoint_interval_s": 900,
                      **({"topology_preferred": "nvlink_domain"} if members > 1 else {})})
trace.sort(key=lambda j: (j["submitted_at"], j["id"]))
with open(os.path.join(HERE, "trace.jsonl"), "w") as f:
    f.writelines(json.dumps(j) + "\n" for j in trace)

history = []
for d in range(14, 0, -1):
    day0 = DAY - d * 86400
    weekday = (1 - d) % 7
    history += [{"at": t, "pool": "interactive", "team": "notebooks"} for t in interactive_starts(day0, weekday)]
with open(os.path.join(HERE, "history.jsonl"), "w") as f:
    f.writelines(json.dumps(h) + "\n" for h in sorted(history, key=lambda h: h["at"]))

# The queue at 09:10: two base nodes busy with training, two interactive sessions running,
# the 09:00 burst waiting.
now = DAY + 9 * H + 600
jobs = [
    {"id": "pretrain-7b", "team": "research", "tier": "standard", "submitted_at": DAY - 6 * H, "members": 2,
     "gpus_per_member": 8, "runtime_s": 20 * H, "checkpoint_interval_s": 900, "topology": "nvlink_domain",
     "placement": [{"node": "base-0", "gpus": list(range(8))}, {"node": "base-1", "gpus": list(range(8))}],
     "started_at": DAY - 6 * H, "last_checkpoint_at": now - 300},
]
for k, t in enumerate(sorted(t for t in interactive_starts(DAY, 1) if t < now)[:2]):
    jobs.append({"id": f"nb-early-{k}", "team": "notebooks", "tier": "standard", "submitted_at": t,
                 "gpus_per_member": 1, "models": ["L40S"], "interactive": True, "runtime_s": 3600,
                 "placement": [{"node": f"nb-{k}", "gpus": [0]}], "started_at": t})
jobs += [j for j in trace if j["id"].startswith("train-9-") and j["submitted_at"] < now]
jobs += [j for j in trace if j["id"].startswith("nb-") and now - 120 < j["submitted_at"] < now]
with open(os.path.join(HERE, "jobs.jsonl"), "w") as f:
    f.writelines(json.dumps(j) + "\n" for j in jobs)
with open(os.path.join(HERE, "now"), "w") as f:
    f.write(f"{now}\n")
state = {"pools": {"spot": {"trigger_since": {"up/0": now - 200}}}}
with open(os.path.join(HERE, "state.json"), "w") as f:
    f.write(json.dumps(state, indent=2) + "\n")
