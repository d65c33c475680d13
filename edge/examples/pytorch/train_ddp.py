#!/usr/bin/env python3
"""A data-parallel PyTorch training job for tidemill: it trains with DDP across
the workers tidemill placed it on, checkpoints when tidemill asks it to yield
(SIGTERM, sent before the tide comes back in), and resumes from its checkpoint
when it is started again, wherever that is.

Run it under torchrun, which reads the rendezvous from the environment that a
tidemill assignment carries (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT for
multi-node jobs), or on one box:

    torchrun --standalone --nproc_per_node=2 train_ddp.py

Environment:
    TIDEMILL_CHECKPOINT_DIR  where checkpoints live (default ./checkpoints);
                             shared storage, or copied by tidemill on migration
    TIDEMILL_ITERATIONS      total iterations of work (default 200)
    TIDEMILL_BATCH_SIZE      global batch size (default 64)

Uses NCCL on GPUs and Gloo on CPUs. The data is synthetic so that the example
needs nothing but torch.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

YIELD_REQUESTED = False


def on_sigterm(_signum, _frame):
    """tidemill asks the job to yield: finish the current step, checkpoint, exit."""
    global YIELD_REQUESTED
    YIELD_REQUESTED = True


def model():
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    total = int(os.environ.get("TIDEMILL_ITERATIONS", "200"))
    batch = int(os.environ.get("TIDEMILL_BATCH_SIZE", "64")) // world
    ckpt_dir = os.environ.get("TIDEMILL_CHECKPOINT_DIR", "checkpoints")
    ckpt = os.path.join(ckpt_dir, "checkpoint.pt")
    os.makedirs(ckpt_dir, exist_ok=True)

    net = DDP(model().to(device), device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device)
        net.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["iteration"]
        if rank == 0:
            print(f"resumed from {ckpt} at iteration {start}", flush=True)

    gen = torch.Generator().manual_seed(1234 + rank)
    loss_fn = nn.CrossEntropyLoss()
    it = start
    began = time.time()
    while it < total:
        x = torch.randn(batch, 512, generator=gen).to(device)
        y = torch.randint(0, 10, (batch,), generator=gen).to(device)
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        it += 1
        # Every rank must agree to stop at the same step, or the others hang in
        # the next all-reduce: combine the yield flags.
        flag = torch.tensor([1.0 if YIELD_REQUESTED else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if rank == 0 and (it % 20 == 0 or it == total):
            rate = (it - start) / max(time.time() - began, 1e-9)
            print(f"iteration {it}/{total} loss {loss.item():.4f} ({rate:.1f} it/s, {world} workers)", flush=True)
        if flag.item() > 0:
            break

    if rank == 0:
        tmp = ckpt + ".tmp"
        torch.save({"model": net.module.state_dict(), "optimizer": opt.state_dict(), "iteration": it}, tmp)
        os.replace(tmp, ckpt)
        print(f"checkpoint saved at iteration {it} to {ckpt}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if it < total:
        print("yielded before finishing; start again to resume", flush=True) if rank == 0 else None
        sys.exit(0)
    if rank == 0:
        print("training complete", flush=True)


if __name__ == "__main__":
    main()
