"""A 2-process check of the torchrun path: gloo all-reduce, one file per rank in the cwd (job dir),
and beside it what torchrun told the rank of its rendezvous (``rank<N>.env.json``)."""

import json
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
    told = ("MASTER_ADDR", "GROUP_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")
    with open(f"rank{rank}.env.json", "w") as fh:
        json.dump({name: os.environ.get(name) for name in told}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
