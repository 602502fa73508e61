"""A 2-process check of the torchrun path: gloo all-reduce, one file per rank in the cwd (job dir)."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    with open(f"rank{rank}.txt", "w") as fh:
        fh.write(f"{world} {value.item()} {os.environ['MASTER_PORT']} {os.environ.get('USE_LIBUV', '')}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
