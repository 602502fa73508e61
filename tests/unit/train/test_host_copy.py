"""fused.host_copy.HostCopy on the CPU: the value itself, read as a float (the CUDA path, which reads
without waiting for later work: tests/gpu/test_host_copy_gpu.py)."""
import math

import torch

from lat_core.train.fused.host_copy import HostCopy


def test_a_cpu_loss_reads_as_its_float_and_a_non_finite_one_stays_so():
    assert HostCopy(torch.tensor(2.0, requires_grad=True) * 0.5).value() == 1.0
    assert math.isnan(HostCopy(torch.tensor(float("nan"))).value())
