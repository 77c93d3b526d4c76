#!/usr/bin/env python3
"""Reads stratos' torch.distributed.pipelining schedule exports with torch's own parser.

Every cell of each CSV (a row per pipeline rank, a cell per action such as 4F0 or 0B7, empty for
idle) goes through torch.distributed.pipelining.schedules._Action.from_str, the parser that
_PipelineScheduleRuntime._load_csv uses, and must print back as written. Needs a torch with
torch.distributed.pipelining (2.4 or later), e.g. the GPU machine's; exits 1 on any mismatch.

Usage: python3 experiments/gpu/check_torch_schedule.py CSV...
"""
import csv
import sys

try:
    from torch.distributed.pipelining.schedules import _Action
except ImportError as error:  # torch too old, or none
    sys.exit(f"check_torch_schedule: torch.distributed.pipelining is not available ({error})")

failures = 0
for path in sys.argv[1:]:
    actions = 0
    with open(path, newline="") as handle:
        for rank, row in enumerate(csv.reader(handle)):
            for column, cell in enumerate(row):
                if not cell.strip():
                    continue
                try:
                    action = _Action.from_str(cell)
                    back = str(action)
                except Exception as error:  # torch rejects the cell
                    print(f"{path}: rank {rank}, action {column}: {cell!r}: {error}")
                    failures += 1
                    continue
                if back != cell:
                    print(f"{path}: rank {rank}, action {column}: {cell!r} reads back as {back!r}")
                    failures += 1
                actions += 1
    print(f"{path}: {actions} actions read by torch's _Action.from_str")
sys.exit(1 if failures else 0)
