"""Failure classification: every class from a realistic log, exact OOM numbers, remedies that
apply to the job's own config, the kernel OOM counter from fake /proc and /sys trees, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lat_core.triage import (Diagnosis, classify, parse_cuda_oom, read_oom_kill_count,
                             reread_oom_kill_count, size_to_bytes)
from lat_core.triage.oom import oom_kind
from lat_core.triage.sources import TAIL_BYTES, read_tail_lines
from lat_tui.triage_cli import main as triage_main

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
GiB, MiB = 2**30, 2**20

TRAIN = {"batch_size": 8, "gradient_checkpointing": False, "num_workers": 0}


def make_job(tmp_path: Path, log: str, *, returncode: int | None = 1, train: dict | None = None,
             events: list[dict] = (), env: dict | None = None, name: str = "job") -> Path:
    """A job folder as the engine leaves it: log, events, job.yaml, command.json, exit record."""
    job = tmp_path / name
    (job / ".lat").mkdir(parents=True)
    (job / "train.log").write_text((LOGS / log).read_text() if log else "")
    (job / "events.jsonl").write_text("".join(json.dumps({"t": 1.0, **e}) + "\n" for e in events))
    config = {"model": {"family": "gla"}, "peft": {"r": 8}, "train": {**TRAIN, **(train or {})}}
    (job / "job.yaml").write_text(yaml.safe_dump(config))
    (job / "command.json").write_text(json.dumps({"argv": [], "env": env or {}}))
    if returncode is not None:
        record = {"returncode": returncode, "signal": -returncode if returncode < 0 else None}
        (job / ".lat" / "attempt-1.exit.json").write_text(json.dumps(record))
    return job


def keys(diagnosis: Diagnosis) -> list[str]:
    return [r.key for r in diagnosis.remedies]


# ---------------------------------------------------------------- CUDA OOM numbers
def test_sizes_convert_to_exact_bytes():
    assert size_to_bytes("32.00 MiB") == 33_554_432
    assert size_to_bytes("23.65 GiB") == 25_393_994_138
    assert size_to_bytes("512 bytes") == 512
    assert size_to_bytes("1.50 KiB") == 1536


def test_current_format_numbers_are_exact():
    numbers = parse_cuda_oom((LOGS / "cuda_oom.log").read_text())
    assert numbers["requested_bytes"] == 33_554_432
    assert numbers["capacity_bytes"] == 25_393_994_138
    assert numbers["free_bytes"] == 29_423_043
    assert numbers["other_processes_bytes"] == 10_952_166_605
    assert numbers["self_bytes"] == 14_280_766_259
    assert numbers["allocated_bytes"] == 13_851_269_530
    assert numbers["reserved_unallocated_bytes"] == 126_353_408
    assert numbers["gpu_index"] == 0


def test_old_format_numbers_are_exact():
    numbers = parse_cuda_oom((LOGS / "cuda_oom_old.log").read_text())
    assert numbers["requested_bytes"] == 20 * MiB
    assert numbers["capacity_bytes"] == 16_943_645_983
    assert numbers["allocated_bytes"] == 15_633_680_957
    assert numbers["free_bytes"] == 3_607_101
    assert numbers["reserved_bytes"] == 15_784_004_813
    assert numbers["reserved_unallocated_bytes"] == 15_784_004_813 - 15_633_680_957


def test_2_1_misspelling_capacty_is_read():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a "
            "total capacty of 23.69 GiB of which 1.06 MiB is free. Of the allocated memory 23.19 GiB is "
            "allocated by PyTorch, and 191.37 MiB is reserved by PyTorch but unallocated.")
    assert parse_cuda_oom(text)["capacity_bytes"] == size_to_bytes("23.69 GiB")


def test_container_pid_without_this_process_line_is_taken_as_the_job():
    text = ("CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 10.00 GiB of "
            "which 10.00 MiB is free. Process 7 has 2.00 GiB memory in use. Process 99 has 7.90 GiB memory "
            "in use. Of the allocated memory 7.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved "
            "by PyTorch but unallocated.")
    numbers = parse_cuda_oom(text)
    assert numbers["self_bytes"] == size_to_bytes("7.90 GiB")
    assert numbers["other_processes_bytes"] == 2 * GiB
    assert numbers["self_pid_guessed"] == 99


# ---------------------------------------------------------------- CUDA OOM diagnosis and remedies
def test_cuda_oom_fragmentation_with_all_remedies_in_cost_order(tmp_path):
    d = classify(make_job(tmp_path, "cuda_oom.log"), 1)
    assert d.cls == "cuda_oom"
    assert d.numbers["oom_kind"] == "fragmentation"
    assert "fragmentation" in d.diagnosis
    assert keys(d) == ["expandable_segments", "gradient_checkpointing", "smaller_micro_batch", "fewer_slots"]
    assert d.remedies[0].patch == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert d.remedies[2].patch == {"train.batch_size": 4, "train.grad_accum": 2}
    assert d.evidence[0].startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_cuda_oom_contention(tmp_path):
    d = classify(make_job(tmp_path, "cuda_oom_contention.log"), 1)
    assert d.numbers["oom_kind"] == "contention"
    assert d.numbers["other_processes_bytes"] == 14 * GiB + 3584 * MiB
    assert d.numbers["other_process_count"] == 2
    assert "fewer_slots" in keys(d)


def test_cuda_oom_peak_offers_only_what_lowers_the_jobs_own_peak(tmp_path):
    d = classify(make_job(tmp_path, "cuda_oom_peak.log"), 1)
    assert d.numbers["oom_kind"] == "peak"
    assert keys(d) == ["gradient_checkpointing", "smaller_micro_batch"]


def test_just_short_with_an_empty_cache_is_a_peak_not_fragmentation():
    """Seen on an H100 (tests/gpu): a job that grew until the card was full, 1.84 GiB left for a
    2 GiB request and nothing cached: the memory did not exist, so no allocator setting helps."""
    text = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of "
            "which 1.84 GiB is free. Process 4242 has 2.82 GiB memory in use. Including non-PyTorch memory, "
            "this process has 74.51 GiB memory in use. Of the allocated memory 74.00 GiB is allocated by "
            "PyTorch, and 0 bytes is reserved by PyTorch but unallocated.")
    numbers = parse_cuda_oom(text)
    assert oom_kind(numbers)[0] == "peak"
    cached = text.replace("0 bytes is reserved", "512.00 MiB is reserved")  # the same, with a cache to reuse
    assert oom_kind(parse_cuda_oom(cached))[0] == "fragmentation"


def test_remedies_already_in_force_are_not_offered(tmp_path):
    job = make_job(tmp_path, "cuda_oom.log", train={"gradient_checkpointing": True, "batch_size": 1},
                   env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert keys(classify(job, 1)) == ["fewer_slots"]


def test_allocator_setting_is_merged_into_an_existing_value(tmp_path):
    job = make_job(tmp_path, "cuda_oom.log", env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    patch = classify(job, 1).remedies[0].patch
    assert patch == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"}


def test_micro_batch_keeps_the_effective_batch(tmp_path):
    d = classify(make_job(tmp_path, "cuda_oom_peak.log", train={"batch_size": 6, "grad_accum": 2}), 1)
    micro = next(r for r in d.remedies if r.key == "smaller_micro_batch")
    assert micro.patch == {"train.batch_size": 3, "train.grad_accum": 4}


def test_cuda_oom_from_failed_event_when_the_log_is_gone(tmp_path):
    message = (LOGS / "cuda_oom_peak.log").read_text().splitlines()[-1].split(": ", 1)[1]
    job = make_job(tmp_path, "", events=[{"event": "failed", "error_type": "OutOfMemoryError",
                                          "message": message}])
    d = classify(job, 1)
    assert d.cls == "cuda_oom" and d.numbers["requested_bytes"] == 2 * GiB


def test_rank_oom_beats_the_nccl_timeout_it_caused(tmp_path):
    d = classify(make_job(tmp_path, "rank_cuda_oom.log"), 1)
    assert d.cls == "cuda_oom"
    assert d.numbers["rank"] == 3
    assert "(rank 3)" in d.title


# ---------------------------------------------------------------- host OOM and the kernel counter
def fake_cgroup_v2(root: Path, pid: int, count: int) -> Path:
    (root / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / "proc" / str(pid) / "cgroup").write_text("0::/user.slice/lat-job.scope\n")
    events = root / "sys/fs/cgroup/user.slice/lat-job.scope/memory.events"
    events.parent.mkdir(parents=True, exist_ok=True)
    events.write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {count}\noom_group_kill 0\n")
    return events


def fake_cgroup_v1(root: Path, pid: int, count: int, *, namespaced: bool = False) -> Path:
    (root / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / "proc" / str(pid) / "cgroup").write_text(
        "9:name=systemd:/\n4:memory:/process_api/abc123\n1:cpu:/\n0::/\n")
    folder = root / "sys/fs/cgroup/memory" / ("" if namespaced else "process_api/abc123")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {count}\n")
    return folder / "memory.oom_control"


def fake_vmstat(root: Path, count: int) -> None:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "vmstat").write_text(f"nr_free_pages 123\npgfault 99\noom_kill {count}\nnr_zspages 0\n")


def test_host_oom_proven_by_cgroup_v2_counter(tmp_path):
    root = tmp_path / "root"
    events = fake_cgroup_v2(root, 4242, 0)
    before = read_oom_kill_count(4242, root)
    assert before.source.startswith("cgroup2:") and before.count == 0
    events.write_text(events.read_text().replace("oom_kill 0", "oom_kill 1"))
    after = reread_oom_kill_count(before.source, root)
    job = make_job(tmp_path, "cancelled.log", returncode=-9, train={"num_workers": 8},
                   events=[{"event": "memory", "peak_rss_bytes": 60 * GiB, "peak_gpu_bytes": 0}])
    d = classify(job, -9, oom_kills_before=before.count, oom_kills_after=after.count)
    assert d.cls == "host_oom"
    assert d.numbers["oom_kills"] == 1 and d.numbers["peak_rss_bytes"] == 60 * GiB
    assert "60.00 GiB" in d.diagnosis
    assert keys(d) == ["fewer_workers", "fewer_slots"]
    assert d.remedies[0].patch == {"train.num_workers": 4}


def test_a_cgroup_counter_that_appears_later_is_found(tmp_path):
    # the files found for a cgroup are remembered; finding none is not, so a memory controller
    # enabled after the first launch is used from the next one on
    fake_vmstat(tmp_path, 3)
    (tmp_path / "proc" / "7").mkdir(parents=True)
    (tmp_path / "proc" / "7" / "cgroup").write_text("0::/user.slice/lat-job.scope\n")
    assert read_oom_kill_count(7, tmp_path).source == "vmstat"
    events = fake_cgroup_v2(tmp_path, 7, 2)
    assert (read_oom_kill_count(7, tmp_path).source, read_oom_kill_count(7, tmp_path).count) == \
        ("cgroup2:/sys/fs/cgroup/user.slice/lat-job.scope/memory.events", 2)
    events.write_text(events.read_text().replace("oom_kill 2", "oom_kill 5"))
    assert read_oom_kill_count(7, tmp_path).count == 5  # the counter itself is read every time


def test_cgroup_v1_counter(tmp_path):
    fake_cgroup_v1(tmp_path, 77, 2)
    counter = read_oom_kill_count(77, tmp_path)
    assert counter.source == "cgroup1:/sys/fs/cgroup/memory/process_api/abc123/memory.oom_control"
    assert counter.count == 2


def test_cgroup_v1_inside_a_cgroup_namespace_uses_the_mount_root(tmp_path):
    fake_cgroup_v1(tmp_path, 77, 5, namespaced=True)
    assert read_oom_kill_count(77, tmp_path).count == 5


def test_vmstat_is_the_fallback(tmp_path):
    fake_vmstat(tmp_path, 3)
    counter = read_oom_kill_count(12345, tmp_path)
    assert (counter.source, counter.count) == ("vmstat", 3)


def test_no_counter_anywhere_is_unknown(tmp_path):
    assert not read_oom_kill_count(None, tmp_path).known


def test_host_oom_with_vmstat_counter_and_exit_137(tmp_path):
    fake_vmstat(tmp_path / "root", 10)
    before = read_oom_kill_count(None, tmp_path / "root").count
    fake_vmstat(tmp_path / "root", 11)
    after = read_oom_kill_count(None, tmp_path / "root").count
    d = classify(make_job(tmp_path, "cancelled.log", returncode=137), 137,
                 oom_kills_before=before, oom_kills_after=after)
    assert d.cls == "host_oom" and d.numbers["signal"] == "SIGKILL"


def test_killed_line_with_sigkill_is_host_oom(tmp_path):
    d = classify(make_job(tmp_path, "host_oom.log", returncode=-9, train={"num_workers": 8}), -9)
    assert d.cls == "host_oom"
    assert d.evidence == ("Killed",)
    assert keys(d)[0] == "fewer_workers"


def test_sigkill_without_oom_evidence_is_killed(tmp_path):
    d = classify(make_job(tmp_path, "cancelled.log", returncode=-9), -9, oom_kills_before=4, oom_kills_after=4)
    assert d.cls == "killed" and d.title == "Killed by SIGKILL"


def test_dataloader_worker_killed_is_host_oom(tmp_path):
    assert classify(make_job(tmp_path, "dataloader_killed.log"), 1).cls == "host_oom"


# ---------------------------------------------------------------- distributed and device failures
def test_nccl_watchdog_timeout(tmp_path):
    d = classify(make_job(tmp_path, "nccl_watchdog.log"), 1)
    assert d.cls == "nccl"
    assert d.numbers["nccl_kind"] == "watchdog_timeout"
    assert (d.numbers["collective"], d.numbers["timeout_ms"], d.numbers["ran_ms"]) == ("ALLREDUCE", 600000, 600047)
    assert d.numbers["rank"] == 1 and d.numbers["rank_exitcode"] == -6
    assert keys(d) == ["nccl_debug"]


def test_nccl_error_offers_p2p_off(tmp_path):
    d = classify(make_job(tmp_path, "nccl_error.log"), 1)
    assert d.cls == "nccl" and d.numbers["nccl_kind"] == "nccl_error" and d.numbers["rank"] == 0
    assert keys(d) == ["nccl_debug", "nccl_p2p_off"]


def test_rendezvous_timeout(tmp_path):
    d = classify(make_job(tmp_path, "rendezvous_timeout.log"), 1)
    assert d.cls == "rendezvous" and d.numbers["rendezvous_kind"] == "rendezvous_timeout"
    assert d.evidence[-1] == "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"


def test_libuv_offers_use_libuv_0(tmp_path):
    d = classify(make_job(tmp_path, "libuv.log"), 1)
    assert d.cls == "libuv"
    assert d.remedies[0].patch == {"USE_LIBUV": "0"}


@pytest.mark.parametrize("log, kind, remedy", [
    ("illegal_memory_access.log", "illegal_memory_access", "launch_blocking"),
    ("device_assert.log", "device_assert", "launch_blocking"),
    ("ecc.log", "ecc", "avoid_device"),
])
def test_device_faults(tmp_path, log, kind, remedy):
    d = classify(make_job(tmp_path, log), 1)
    assert d.cls == "device_fault" and d.numbers["device_fault_kind"] == kind
    assert keys(d) == [remedy]


# ---------------------------------------------------------------- exceptions and clean exits
def test_key_error_traceback(tmp_path):
    d = classify(make_job(tmp_path, "keyerror.log"), 1)
    assert d.cls == "python_exception"
    assert d.numbers["exception_type"] == "KeyError" and d.numbers["exception_message"] == "'label'"
    assert d.title == "KeyError: 'label'"
    assert d.remedies == ()


def test_failed_event_alone_names_the_exception(tmp_path):
    job = make_job(tmp_path, "", events=[{"event": "failed", "error_type": "ValueError", "message": "bad split"}])
    d = classify(job, 1)
    assert d.cls == "python_exception" and d.title == "ValueError: bad split"


def test_clean_exit_with_scary_words_is_ok(tmp_path):
    job = make_job(tmp_path, "clean_noisy.log", returncode=0,
                   events=[{"event": "started"}, {"event": "finished", "status": "ok"}])
    d = classify(job, 0)
    assert d.cls == "ok" and not d.failed
    assert d.evidence == () and d.remedies == ()


def test_data_echoes_do_not_read_as_oom_when_the_exit_status_is_unknown():
    d = classify(LOGS / "clean_noisy.log", None)
    assert d.cls not in ("cuda_oom", "host_oom", "nccl")


def test_clean_exit_wins_even_over_oom_counters(tmp_path):
    job = make_job(tmp_path, "clean_noisy.log", returncode=0, events=[{"event": "finished"}])
    assert classify(job, 0, oom_kills_before=0, oom_kills_after=3).cls == "ok"


def test_cancelled_flag(tmp_path):
    d = classify(make_job(tmp_path, "cancelled.log", returncode=-15), -15, cancelled=True)
    assert d.cls == "cancelled"


def test_keyboard_interrupt_is_cancelled_only_when_lat_cancelled_it(tmp_path):
    assert classify(make_job(tmp_path, "interrupted.log", name="a"), 1, cancelled=True).cls == "cancelled"
    d = classify(make_job(tmp_path, "interrupted.log", name="b"), 1)
    assert d.cls == "stopped_outside" and d.title == "Stopped from outside (SIGINT)"


def test_timeout_flag_offers_resume_from_last_checkpoint(tmp_path):
    job = make_job(tmp_path, "timeout.log", returncode=-15,
                   events=[{"event": "checkpoint", "step": 1000}, {"event": "checkpoint", "step": 2000}])
    d = classify(job, -15, timed_out=True)
    assert d.cls == "timeout"
    assert keys(d) == ["resume"] and "step 2000" in d.remedies[0].change


def test_slurm_time_limit_in_log_is_timeout():
    assert classify(LOGS / "timeout.log", None).cls == "timeout"


def test_unrecognised_non_zero_exit(tmp_path):
    d = classify(make_job(tmp_path, "exit_code.log", returncode=3), 3)
    assert d.cls == "exit_code" and d.evidence == ("worker finished with status 3",)


def test_exit_record_is_used_when_no_returncode_is_given(tmp_path):
    job = make_job(tmp_path, "host_oom.log", returncode=-9)
    (job / ".lat" / "attempt-10.exit.json").write_text(json.dumps({"returncode": 1}))
    (job / ".lat" / "attempt-2.exit.json").write_text(json.dumps({"returncode": -9}))
    assert classify(job, None).numbers["returncode"] == 1  # attempt 10 is the latest, not attempt 2


def test_only_the_tail_of_a_big_log_is_read(tmp_path):
    log = tmp_path / "big.log"
    noise = "".join(f"step {i} loss 0.5\n" for i in range(40000))
    log.write_text("KeyError: 'too early to matter'\n" + noise + (LOGS / "keyerror.log").read_text())
    lines = read_tail_lines(log)
    assert sum(len(l) + 1 for l in lines) <= TAIL_BYTES
    assert lines[0].startswith("step ")  # the cut first line was dropped
    assert classify(log, 1).numbers["exception_message"] == "'label'"


def test_to_json_shape(tmp_path):
    data = classify(make_job(tmp_path, "cuda_oom.log"), 1).to_json()
    assert set(data) == {"class", "title", "diagnosis", "remedies", "numbers", "evidence"}
    assert set(data["remedies"][0]) == {"key", "change", "cost", "patch", "changes"}
    json.dumps(data)


# ---------------------------------------------------------------- CLI
def test_cli_text_on_a_job_folder(tmp_path, capsys):
    assert triage_main([str(make_job(tmp_path, "cuda_oom.log"))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cuda_oom: CUDA out of memory (fragmentation)")
    assert "requested_bytes" in out and "32.00 MiB (33554432 bytes)" in out
    assert out.index("1. expandable_segments") < out.index("2. gradient_checkpointing")
    assert "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out


def test_cli_json_on_a_job_folder(tmp_path, capsys):
    job = make_job(tmp_path, "host_oom.log", returncode=-9, train={"num_workers": 4})
    assert triage_main([str(job), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["class"] == "host_oom"
    assert data["remedies"][0] == {"key": "fewer_workers", "change": data["remedies"][0]["change"],
                                   "cost": data["remedies"][0]["cost"], "patch": {"train.num_workers": 2},
                                   "changes": [{"kind": "config", "field": "train.num_workers", "value": 2}]}


def test_cli_bare_log_with_returncode(capsys):
    assert triage_main([str(LOGS / "host_oom.log"), "--returncode", "-9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["numbers"]["signal"] == "SIGKILL"
    assert triage_main([str(LOGS / "clean_noisy.log"), "--returncode", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["class"] == "ok"


def test_cli_bare_log_without_returncode_reads_the_log_alone(capsys):
    assert triage_main([str(LOGS / "keyerror.log")]) == 0
    assert capsys.readouterr().out.startswith("python_exception: KeyError: 'label'")


def test_cli_missing_path(tmp_path, capsys):
    assert triage_main([str(tmp_path / "nope")]) == 2
    assert "no such job folder or log" in capsys.readouterr().err
