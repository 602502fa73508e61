"""The kernel warm-up's bookkeeping on the CPU: every shape at every width, its phase for the engine,
"cached" only when Triton wrote nothing into its cache, failures reported and never raised, and the
warm-start process's child that runs it within a limit. (The real compile: tests/gpu.)"""
import os
import signal
import time

import psutil
import pytest
import torch

from lat_core.contract.kernel_warmup import KernelShape, WarmupPhase, read_phase, write_phase, write_shapes
from lat_core.train import kernel_warmup as W
from lat_core.train import warm as preloaded
from tests.helpers.waits import HANG_S, wait_until

SHAPES = [KernelShape("gla", "tiny-random", (("hidden_size", 64),), "float32", False, 8, (16, 32)),
          KernelShape("gla", "tiny-random", (), "bfloat16", False, 4, (48,))]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "triton"
    folder.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    return folder


def test_every_shape_runs_at_every_width_while_the_phase_says_compiling(tmp_path, cache):
    seen = []

    def compile_one(shape, width):
        seen.append((shape.rows, width, read_phase(tmp_path / "phase.json")))
        (cache / f"{shape.rows}-{width}.so").write_text("kernel")

    lines = []
    phase = W.warm_kernels(SHAPES, tmp_path / "phase.json", run_shape=compile_one,
                           out=lambda line, flush: lines.append(line))
    compiling = WarmupPhase("compiling", (16, 32, 48))
    assert seen == [(8, 16, compiling), (8, 32, compiling), (4, 48, compiling)]
    assert phase.state == "done" and not phase.cached and read_phase(tmp_path / "phase.json") == phase
    assert any(line.startswith("[warm] kernels: gla tiny-random float32, 8 rows, 32-token rows: ") for line in lines)
    assert "compiled in" in lines[-1]


def test_a_cache_that_does_not_grow_means_the_kernels_were_cached(tmp_path, cache):
    phase = W.warm_kernels(SHAPES, None, run_shape=lambda shape, width: None, out=lambda *a, **k: None)
    assert phase.cached and phase.job_line().startswith("kernels: cached")


def test_kernels_compiled_again_under_their_old_names_are_not_cached(tmp_path, cache):
    """A copied cache's group files name the paths it came from: Triton misses and compiles each
    kernel again, replacing its files under the same names. The count stays; the warm-up compiled."""
    kernel = cache / "KEY" / "chunk_fwd_kernel_h.cubin"
    kernel.parent.mkdir()
    kernel.write_bytes(b"old")
    os.utime(kernel, (time.time() - 3600, time.time() - 3600))

    def compile_again(shape, width):
        temporary = cache / "KEY" / "tmp.pid_1" / kernel.name
        temporary.parent.mkdir(exist_ok=True)
        temporary.write_bytes(b"new")
        os.replace(temporary, kernel)
        temporary.parent.rmdir()

    phase = W.warm_kernels(SHAPES, None, run_shape=compile_again, out=lambda *a, **k: None)
    assert sum(len(files) for _, _, files in os.walk(cache)) == 1
    assert phase.state == "done" and not phase.cached and "compiled in" in W.summary(phase)


def test_a_failing_warm_up_is_reported_not_raised(tmp_path, cache):
    def broken(shape, width):
        raise RuntimeError("out of resources")

    phase = W.warm_kernels(SHAPES, tmp_path / "phase.json", run_shape=broken, out=lambda *a, **k: None)
    assert phase.state == "failed" and "out of resources" in phase.why
    assert read_phase(tmp_path / "phase.json") == phase


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU does")
def test_without_a_gpu_the_warm_up_compiles_nothing_and_says_so(tmp_path, cache):
    phase = W.warm_kernels(SHAPES, tmp_path / "phase.json", out=lambda *a, **k: None)
    assert phase.state == "done" and phase.why == "no GPU on this machine: nothing to compile"
    assert phase.job_line() == "kernels: no GPU on this machine: nothing to compile"


def record_shapes(shapes, phase_path):
    import os
    write_phase(phase_path, WarmupPhase("done", tuple(w for s in shapes for w in s.widths), 1.0,
                                        why=os.environ["TRITON_CACHE_DIR"]))


def hang(shapes, phase_path):
    write_phase(phase_path, WarmupPhase("compiling", (16,)))
    time.sleep(3600)


def crash(shapes, phase_path):
    raise SystemExit(5)


def test_the_preloaded_process_warms_in_a_child_and_reads_back_its_phase(tmp_path):
    write_shapes(tmp_path / "shapes.json", SHAPES, {"TRITON_CACHE_DIR": str(tmp_path / "jobs-cache")})
    phase = preloaded.warm_kernels_in_child(tmp_path / "shapes.json", tmp_path / "phase.json", warm=record_shapes)
    # the shapes given, compiled into the cache the jobs will read
    assert phase == WarmupPhase("done", (16, 32, 48), 1.0, why=str(tmp_path / "jobs-cache"))
    assert not torch.cuda.is_initialized()  # the child's business, never this process's


def test_a_hung_or_crashed_warm_up_is_stopped_and_jobs_compile_their_own(tmp_path):
    write_shapes(tmp_path / "shapes.json", SHAPES)
    hung = preloaded.warm_kernels_in_child(tmp_path / "shapes.json", tmp_path / "phase.json", limit_s=1, warm=hang)
    assert hung.state == "failed" and hung.why == "still compiling after 1 s: stopped"
    assert read_phase(tmp_path / "phase.json") == hung
    crashed = preloaded.warm_kernels_in_child(tmp_path / "shapes.json", tmp_path / "p2.json", warm=crash)
    assert crashed.state == "failed" and "exited (1)" in crashed.why


def hang_telling_pid(shapes, phase_path):
    (phase_path.parent / "child.pid").write_text(str(os.getpid()))
    time.sleep(3600)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_compile_goes_when_the_preloaded_process_is_stopped(tmp_path, how):
    write_shapes(tmp_path / "shapes.json", SHAPES)
    preload = os.fork()
    if preload == 0:  # stands in for the preloaded process, with its stop handler
        signal.signal(signal.SIGTERM, preloaded._stop)
        try:
            preloaded.warm_kernels_in_child(tmp_path / "shapes.json", tmp_path / "phase.json", warm=hang_telling_pid)
        finally:
            os._exit(0)
    pid_file = tmp_path / "child.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text(), "compiling child")
    child = psutil.Process(int(pid_file.read_text()))
    os.kill(preload, how)
    os.waitpid(preload, 0)
    child.wait(timeout=HANG_S)  # gone (psutil.TimeoutExpired otherwise)


@pytest.mark.parametrize("save", [True, False])
def test_saving_tunings_autotunes_every_kernel(tmp_path, cache, monkeypatch, save):
    """A tuning run seeds nothing (else a sibling GPU's seeded configs would be saved as this GPU's
    own); a plain warm-up keeps the switch as the plan set it."""
    from lat_core.train.tuned_kernels import SWITCH
    monkeypatch.setenv(SWITCH, "on")
    seen = {}
    monkeypatch.setattr(W, "warm_kernels", lambda shapes, phase: seen.update(switch=os.environ[SWITCH])
                        or WarmupPhase("done", cached=True, why="no GPU on this machine: nothing to compile"))
    write_shapes(tmp_path / "shapes.json", SHAPES[:1], {})
    assert W.main(["--shapes", str(tmp_path / "shapes.json"), *(["--save-tunings"] if save else [])]) == 0
    assert seen["switch"] == ("off" if save else "on")


@pytest.mark.parametrize("width", [16, 32, 64, 128, 256])
def test_an_eager_shape_is_warmed_on_an_unpadded_total_of_each_divisibility(width):
    """Triton compiles a kernel per divisibility by 16 of its integer arguments: the warm-up's left-padded
    rows unpad to a multiple of 16 tokens, its second mask to a total that is not one, still left-padded."""
    mask = W._left_padded(torch.ones(8, width, dtype=torch.long))
    odd = W._odd_total(mask)
    assert int(mask.sum()) % 16 == 0 and int(odd.sum()) % 16 != 0
    assert all(row.tolist() == sorted(row.tolist()) for row in odd)  # zeros, then ones: left-padded
    assert int(mask.sum()) == 6 * width  # the mask itself is untouched


def test_an_eager_shape_is_warmed_at_every_width_its_batches_can_take():
    """An eager batch is padded to its longest row, and fla's norm kernels compile per row count: the
    bucket widths' calls together cover every width from 1 to the widest, each once."""
    buckets = (16, 32, 256)
    assert list(W.eager_widths(buckets, 16)) == list(range(1, 17))
    assert list(W.eager_widths(buckets, 256)) == list(range(33, 257))
    assert sorted(w for b in buckets for w in W.eager_widths(buckets, b)) == list(range(1, 257))


class RecordingModel:
    """Stands for the one-layer model on the CPU: what each training call got, and that it backpropagated."""

    def __init__(self):
        self.weight = torch.ones((), requires_grad=True)
        self.calls = []

    def __call__(self, input_ids, attention_mask):
        self.calls.append((tuple(input_ids.shape), attention_mask.clone()))
        return type("Out", (), {"logits": self.weight * input_ids.float()})()


def test_eager_widths_train_on_left_padded_rows_and_the_widest_on_an_odd_total_too():
    model = RecordingModel()
    W.train_eager_widths(model, 8, range(17, 33), "cpu")
    shapes = [shape for shape, _ in model.calls]
    assert shapes == [(8, w) for w in range(17, 33)] + [(8, 32)]
    for _, mask in model.calls:  # rows are left-padded: zeros, then ones
        assert all(row.tolist() == sorted(row.tolist()) for row in mask) and 0 < int(mask.sum()) < mask.numel()
    assert int(model.calls[-2][1].sum()) % 16 == 0 and int(model.calls[-1][1].sum()) % 16 != 0
    assert model.weight.grad is not None
