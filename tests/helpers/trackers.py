"""Tracker runs read back with the trackers' own readers: TensorBoard's EventAccumulator, and a W&B
offline run's .wandb file (wandb's record log, decoded with wandb's own protobuf Record)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

TRACKER_VARS = ("TENSORBOARD_LOGGING_DIR", "WANDB_PROJECT", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_TAGS",
                "WANDB_NAME", "WANDB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_GROUP", "SWANLAB_TAGS", "LAT_SUITE")


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of a TensorBoard run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_text(log_dir: Path, tag: str) -> str:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()


_BLOCK, _HEADER = 32768, 7     # the record log's block size and chunk header (crc32, length, type)
_FULL, _FIRST, _LAST = 1, 2, 4


def wandb_records(path: Path):
    """The protobuf Records of a .wandb file (a LevelDB-style log: 32 KiB blocks of chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb
    data = Path(path).read_bytes()
    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0), f"{path}: not a W&B record log"
    pos, parts = 7, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:          # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        chunk, pos = data[pos + _HEADER:pos + _HEADER + length], pos + _HEADER + length
        if kind == 0:
            continue
        parts = chunk if kind in (_FULL, _FIRST) else parts + chunk
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(parts)
            yield record


def wandb_run(path: Path) -> dict:
    """id, name, group, tags, config (the last value of each key), history rows and exit code of a run."""
    run = {"config": {}, "history": [], "exit_code": None}
    for r in wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run.update(id=r.run.run_id, name=r.run.display_name, group=r.run.run_group, tags=list(r.run.tags))
            run["config"].update({i.key: json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "config":
            run["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            run["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
        elif kind == "exit":
            run["exit_code"] = r.exit.exit_code
    return run


def wandb_runs(folder: Path) -> list[dict]:
    """Every offline run under ``folder``/wandb, oldest first (latest-run is a link to one of them);
    a resumed run has a folder per attempt, all with its id, which `wandb sync` uploads in this order."""
    return [wandb_run(p) for p in sorted((Path(folder) / "wandb").glob("offline-run-*/run-*.wandb"))]
