"""While a job's first step is late, its log says what the trainer is doing: Triton autotuning or
compiling GPU kernels (named by the fla function that asked), else, past a long wait, where it is.

The stacks are real: modules laid out on disk as Triton's and fla's are, their functions called."""
import sys
import threading

import pytest

from lat_core.train.first_step_watch import FirstStepWatch, doing
from tests.helpers.fake_stacks import fake_stacks
from tests.helpers.waits import HANG_S


@pytest.fixture
def code(tmp_path):
    return fake_stacks(tmp_path)


def here():
    """What the watch would find with the main thread here."""
    return doing(sys._getframe())


def test_inside_the_autotuner_under_an_fla_function_it_is_autotuning_that_function(code):
    found = code["common/chunk_h"].chunk_fwd_h(code["runtime/autotuner"]._bench, here)
    assert (found.kind, found.where) == ("autotuning", "fla chunk_fwd_h")
    assert "Triton is autotuning GPU kernels (fla chunk_fwd_h)" in found.line(45)
    assert found.line(45).startswith("[lat] no step after 45 s")


def test_flas_own_autotune_wrapper_is_not_named_as_the_kernels_caller(code):
    """On an H100 the log said "(fla run)": fla's caching autotuner, not the function that asked."""
    found = code["common/chunk_h"].chunk_fwd_h(lambda then: code["utils/cache"].run(code["runtime/autotuner"]._bench, then), here)
    assert (found.kind, found.where) == ("autotuning", "fla chunk_fwd_h")


def test_inside_the_compiler_it_is_compiling(code):
    found = code["common/chunk_h"].chunk_fwd_h(code["compiler/compiler"].compile, here)
    assert (found.kind, found.where) == ("compiling", "fla chunk_fwd_h")


def test_the_backends_compile_stages_are_compiling_and_its_kernel_launches_are_not(code):
    found = code["common/chunk_h"].chunk_fwd_h(code["nvidia/compiler"].make_llir, here)
    assert (found.kind, found.where) == ("compiling", "fla chunk_fwd_h")
    found = code["common/chunk_h"].chunk_fwd_h(code["nvidia/driver"].launch, here)
    assert found.kind == "other"   # a launch is training, not compiling


def test_a_compile_an_autotuner_asked_for_is_autotuning(code):
    found = code["runtime/autotuner"]._bench(lambda: code["compiler/compiler"].compile(here))
    assert (found.kind, found.where) == ("autotuning", "outside fla")


def test_anything_else_is_named_by_its_innermost_function_and_line(code):
    found = code["trainer/loop"].train(here)
    assert found.kind == "other"
    assert found.where.startswith("here (test_first_step_watch.py:")
    assert doing(None) is None


def watched(code, stepped, blocked_in, **timing):
    """Runs ``blocked_in`` on this (the main) thread under a watch, until the watch logs or HANG_S."""
    lines, logged = [], threading.Event()

    def log(line):
        lines.append(line)
        logged.set()

    with FirstStepWatch(stepped, log, **timing):
        blocked_in(lambda: logged.wait(HANG_S))
    return lines


def test_a_late_first_step_inside_the_autotuner_is_logged_as_such(code):
    lines = watched(code, lambda: False, lambda wait: code["common/chunk_h"].chunk_fwd_h(code["runtime/autotuner"]._bench, wait),
                    after_s=0.05, every_s=0.05)
    assert lines and "Triton is autotuning GPU kernels (fla chunk_fwd_h)" in lines[0]


def test_elsewhere_nothing_is_logged_before_the_long_wait_then_where_the_trainer_is(code):
    clock = iter(range(0, 10**6, 10))   # 10 s a reading: the start, then 10 s, 20 s, ...
    lines = watched(code, lambda: False, lambda wait: code["trainer/loop"].train(wait),
                    after_s=0.01, every_s=0.01, quiet_s=60, clock=lambda: next(clock))
    assert len(lines) == 1 and lines[0].startswith("[lat] no step after 60 s; the trainer is in ")


def test_once_the_first_step_is_taken_nothing_is_logged(code):
    lines = []
    done = threading.Event()

    def stepped():
        done.set()   # the watch asked: the next wait ends the block
        return True

    with FirstStepWatch(stepped, lines.append, after_s=0.01, every_s=0.01):
        code["common/chunk_h"].chunk_fwd_h(code["runtime/autotuner"]._bench, lambda: done.wait(HANG_S))
    assert lines == []


def test_a_backward_autotuning_in_autograds_thread_is_logged_as_autotuning(code):
    """On a GPU the backward runs in autograd's device thread: the main thread waits in the autograd
    engine while another thread autotunes (seen on an H100, 2026-11-27)."""
    release = threading.Event()
    worker = threading.Thread(target=lambda: code["common/chunk_h"].chunk_fwd_h(
        code["runtime/autotuner"]._bench, lambda: release.wait(HANG_S)), daemon=True)
    worker.start()
    try:
        lines = watched(code, lambda: False, lambda wait: code["trainer/loop"].train(wait), after_s=0.05, every_s=0.05)
    finally:
        release.set()
        worker.join(HANG_S)
    assert lines and "Triton is autotuning GPU kernels (fla chunk_fwd_h)" in lines[0]
