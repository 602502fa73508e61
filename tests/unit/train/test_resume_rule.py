"""The trainer's --resume takes THE checkpoint rule (lat_core.contract.jobdir), refusals naming why."""

import pytest

from lat_core.config.job import TrainConfigError
from lat_core.train.checkpoints import checkpoints, prepare_output_dir


def test_resume_refuses_a_folder_whose_checkpoints_are_all_half_written(tmp_path):
    (tmp_path / "checkpoint-4").mkdir()                        # crashed before anything was written
    (tmp_path / "checkpoint-4" / "adapter_model.safetensors").write_bytes(b"w")
    (tmp_path / "checkpoint-8").mkdir()                        # the state was written, the weights were not
    (tmp_path / "checkpoint-8" / "trainer_state.json").write_text('{"global_step": 8}')
    assert checkpoints(tmp_path) == []
    with pytest.raises(TrainConfigError, match=r"--resume: no checkpoint-\* .*checkpoint-4, checkpoint-8: save "
                                               r"interrupted"):
        prepare_output_dir(tmp_path, resume=True, overwrite=False)
