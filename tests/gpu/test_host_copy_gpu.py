"""On a CUDA machine, a step's loss copied at its step's end (fused.host_copy.HostCopy) is read
without waiting for the work queued after it, where float() on the tensor waits for all of it."""
import pytest
import torch

from lat_core.train.fused.host_copy import HostCopy

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
LATER_WORK_CYCLES = 2_000_000_000   # about a second of one GPU thread spinning: the next pass, queued


def test_reading_a_copied_loss_does_not_wait_for_the_next_pass():
    loss = torch.full((), 0.25, device="cuda") * 3
    copied = HostCopy(loss)
    torch.cuda._sleep(LATER_WORK_CYCLES)
    later = torch.cuda.Event()
    later.record()
    assert copied.value() == 0.75
    assert not later.query()          # the read came back while the later work still ran
    assert float(loss) == 0.75        # what the group did before: waits for everything queued
    assert later.query()


