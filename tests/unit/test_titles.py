"""Process titles: a group's compact name, and a kernel name of one word with or without setproctitle."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lat_core.titles import MAX_TITLE, compact_names, runner_title

ROOT = Path(__file__).resolve().parents[2]
RANKS = [f"gla/lora_r{r} 87:glue-tvt_sst2" for r in (4, 8, 16, 32)]


def test_a_group_says_what_its_members_share_once():
    assert compact_names(RANKS) == "gla/lora_{r4,r8,r16,r32} 87:glue-tvt_sst2"
    assert compact_names(["gla/a 3:tiny-sst2", "gla/b 5:tiny-sst2"]) == "gla/{a 3,b 5}:tiny-sst2"
    many = [f"gla/lora_variant_{i} 87:glue-tvt_sst2" for i in range(40)]
    assert compact_names(many) == "gla/lora_variant_{0..39} 87:glue-tvt_sst2"
    assert len(compact_names([f"x{i}" * 30 for i in range(40)])) <= MAX_TITLE


def test_a_runner_of_a_trainer_command_names_its_job(tmp_path):
    job = tmp_path / "tiny-sst2_seed87" / "lora_r8"
    job.mkdir(parents=True)
    (job / "job.yaml").write_text("name: lora_r8\nseed: 87\ndata: glue-tvt_sst2\nmodel: {family: mamba}\n")
    command = [sys.executable, "-m", "lat_core.train", "--cfg", str(job / "job.yaml"), "--resume"]
    assert runner_title(str(job / ".lat" / "attempt-1.exit.json"), command) == "lat runner: mamba/lora_r8 87:glue-tvt_sst2"
    fused = [sys.executable, "-m", "lat_core.train.fused", "--attempts", "1,2", str(job), str(job)]
    assert runner_title("x", fused) == "lat runner: group(2): mamba/lora_r8 87:glue-tvt_sst2"


@pytest.mark.parametrize("setproctitle", [True, False])
def test_the_kernel_name_is_one_word(tmp_path, setproctitle):
    """/proc/PID/comm, which Slurm's proctrack/linuxproc and other /proc/PID/stat readers take as one
    word: no space or parenthesis, with or without setproctitle."""
    code = (("" if setproctitle else "import sys; sys.modules['setproctitle'] = None\n") +
            "from lat_core.titles import set_title\n"
            "for title in ('lat: gla/lora_r8 87:sst2', 'lat runner: group(2): a 1:x', 'lat group(4): a 1:x'):\n"
            "    set_title(title); print(open('/proc/self/comm').read().strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["lat", "lat-runner", "lat-group-4"]
