"""The pretraining loop's first step is watched as a fine-tuning job's is: while it autotunes fla's
kernels (minutes on a fresh machine), its log says so instead of ending at the start line."""
from lat_core.train import first_step_watch, pretrain_loop
from lat_core.train.pretrain import main
from tests.helpers.fake_stacks import fake_stacks
from tests.helpers.waits import wait_until

TINY = ["--depth=2", "--model_dim_per_layer=32", "--head_dim=32", "--seq_len=32", "--device_batch_size=2",
        "--total_batch_size=64", "--num_iterations=2", "--eval_every=2", "--save_every=2",
        "--warmup_iterations=1", "--allow-cpu"]


def test_a_first_step_that_autotunes_is_said_in_the_log(tmp_path, monkeypatch, capsys):
    stacks = fake_stacks(tmp_path)
    monkeypatch.setattr(first_step_watch, "AFTER_S", 0.05)
    monkeypatch.setattr(first_step_watch, "EVERY_S", 0.05)
    monkeypatch.setenv("WANDB_RUN", "dummy")
    printed: list[str] = []

    def said_autotuning() -> bool:   # the job's log is its stdout
        printed.append(capsys.readouterr().out)
        return "Triton is autotuning GPU kernels (fla chunk_fwd_h)" in "".join(printed)

    real_step = pretrain_loop._train_step

    def step_that_autotunes_first(*args):
        if args[3] == 0:   # the step index: the first step meets a kernel no cache holds
            stacks["common/chunk_h"].chunk_fwd_h(stacks["runtime/autotuner"]._bench,
                                                 lambda: wait_until(said_autotuning, "the watch's line"))
        return real_step(*args)

    monkeypatch.setattr(pretrain_loop, "_train_step", step_that_autotunes_first)
    assert main(["--output-dir", str(tmp_path / "job"), *TINY]) == 0
    log = "".join(printed) + capsys.readouterr().out
    assert "no step after" in log and "step 2/2 loss" in log
    assert log.count("Triton is autotuning") >= 1 and log.index("Triton is autotuning") < log.index("step 1/2 loss")
