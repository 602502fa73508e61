"""THE checkpoint rule (lat_core.contract.jobdir): only a finished save can be resumed from."""

import json

from lat_core.front.client import resumable_checkpoints
from lat_core.contract.jobdir import JobDir


def _checkpoint(root, step, *, weights=b"w", state: str | None = '{"global_step": 1}'):
    folder = root / f"checkpoint-{step}"
    folder.mkdir()
    if weights is not None:
        (folder / "adapter_model.safetensors").write_bytes(weights)
    if state is not None:
        (folder / "trainer_state.json").write_text(state)
    return folder


def test_only_complete_checkpoints_count(tmp_path):
    good = _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 4, state=None)                    # crashed before trainer_state.json
    _checkpoint(tmp_path, 6, weights=None)                  # weights missing
    _checkpoint(tmp_path, 8, weights=b"")                   # weights never written out
    _checkpoint(tmp_path, 10, state='{"global_st')          # trainer_state.json cut short
    (tmp_path / "checkpoint-12.tmp").mkdir()                # a temp name
    (tmp_path / "checkpoint-14").symlink_to(good)           # a link is not this job's save
    job = JobDir(tmp_path)
    assert job.resumable_checkpoints() == [(2, good)] == resumable_checkpoints(tmp_path)
    assert job.latest_checkpoint() == (2, good)
    assert [p.name for p in job.incomplete_checkpoints()] == [f"checkpoint-{s}" for s in (4, 6, 8, 10)]


def test_no_folder_no_checkpoint(tmp_path):
    assert JobDir(tmp_path / "absent").latest_checkpoint() is None
    _checkpoint(tmp_path, 3, state=json.dumps([1]))        # not a TrainerState
    assert JobDir(tmp_path).latest_checkpoint() is None
