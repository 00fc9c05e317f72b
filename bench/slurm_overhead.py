"""The overhead of each SLURM job of an ``induce reproduce --executor slurm`` output folder, from the job records
(``OUT/logs/<unit>.job.json``, :mod:`induce.reproduce.slurm`): from its submission (``sbatch``) to its start (the
job's process running, submitit and induce imported, before the worker starts), from the moment it could start (its
submission, or the end of the job before it that freed a CPU, whichever is later) to its start: the queue's and the
job's start-up overhead, without the wait for a CPU; the job's own run (start to the end of its worker), and from that
end to its collection by the waiting parent (which looks every ``slurm.poll``).

    python3 bench/slurm_overhead.py OUT [OUT ...]

A unit requeued at a time limit counts from its submission to its last start. ``--json FILE`` also writes the rows.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def rows(out: Path) -> list[dict]:
    """One row per collected job of ``out``: unit, job id, the three intervals (seconds)."""
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted((out / "logs").glob("*.job.json"))]
    keys = ("submitted_at", "started_at", "ended_at", "collected_at")
    records = [record for record in records if all(record.get(key) is not None for key in keys)]
    found = []
    for record in records:
        submitted, started, ended, collected = (record[key] for key in keys)
        freed = [other["ended_at"] for other in records if other["ended_at"] <= started]
        found.append({"out": str(out), "unit": record["unit"], "job": record["job_id"],
                      "submit_to_start_s": round(started - submitted, 2),
                      "free_to_start_s": round(started - max([submitted, *freed]), 2),
                      "run_s": round(ended - started, 2), "end_to_collected_s": round(collected - ended, 2)})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outs", nargs="+", type=Path, help="output folders of induce reproduce --executor slurm")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    table = [row for out in args.outs for row in rows(out)]
    print(f"{'unit':28} {'job':>5} {'submit->start s':>16} {'free->start s':>14} {'run s':>8} "
          f"{'end->collected s':>17}")
    for row in table:
        print(f"{row['unit']:28} {row['job']:>5} {row['submit_to_start_s']:>16.1f} {row['free_to_start_s']:>14.1f} "
              f"{row['run_s']:>8.1f} {row['end_to_collected_s']:>17.1f}")
    if table:
        for key in ("submit_to_start_s", "free_to_start_s", "end_to_collected_s"):
            values = [row[key] for row in table]
            print(f"{key}: median {statistics.median(values):.1f}, min {min(values):.1f}, max {max(values):.1f}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
