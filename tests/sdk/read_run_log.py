"""An outside reader of a cargo-llmreplay run log, with Python's standard library alone: reads
`events.ndjson` (the path given), checks each line is one JSON object with an `event`, and
prints what it found as JSON: the schema version, the run's mode, each test's outcome, what
settling each test's recordings changed, the exchanges by test, and whether the run ended. Used by tests/it/runlog.rs."""

import json
import sys


def main(path):
    found = {"version": None, "mode": None, "outcomes": {}, "settled": {}, "exchanges": {}, "ended": False}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            event = json.loads(line)
            kind = event["event"]
            if kind == "run_began":
                found["version"] = event["version"]
                found["mode"] = event["mode"]
            elif kind == "test_ended":
                found["outcomes"][event["test"]] = event["outcome"]
            elif kind == "test_settled":
                # A test settles at each end of it (a retry, a repeat): its counts add up.
                counts = found["settled"].setdefault(event["test"], [0, 0, 0])
                for i, name in enumerate(("added", "replaced", "removed")):
                    counts[i] += event[name]
            elif kind == "exchange":
                found["exchanges"].setdefault(event["test"], []).append(
                    [event["step"], event["transport"], event["outcome"], event["status"], event.get("model")])
            elif kind == "run_ended":
                found["ended"] = True
    json.dump(found, sys.stdout, sort_keys=True)


main(sys.argv[1])
