#!/usr/bin/env python3
"""A data-parallel PyTorch training job for tidemill, written to be copied.

It trains a small MLP with DDP across the workers tidemill placed it on,
checkpoints when tidemill asks it to yield (SIGTERM, sent before the tide
comes back in or when a node is drained), and resumes from its checkpoint
when it is started again, wherever that is.

Run it as the job's command; tidemill's assignment carries the rendezvous:
    RANK, WORLD_SIZE        this task's rank among the job's tasks (one per
                            node) and how many there are
    MASTER_ADDR, MASTER_PORT where rank 0 listens
    TIDEMILL_WORKERS        devices to use on this node: the script starts
                            that many local processes, global rank
                            RANK * TIDEMILL_WORKERS + local rank
Without them it trains alone (rank 0 of 1 on 127.0.0.1:29500).

Other environment:
    TIDEMILL_CHECKPOINT_DIR   where checkpoints live (default ./checkpoints);
                              tidemill copies checkpoint.pt and tidemill-step
                              (the step saved, written last) to the node a
                              moved job resumes on
    TIDEMILL_ITERATIONS       total iterations of work (default 200)
    TIDEMILL_BATCH_SIZE       global batch size (default 64)
    TIDEMILL_CHECKPOINT_EVERY iterations between periodic checkpoints, which
                              bound the work lost to a crash (default 100)
    TIDEMILL_CHECKPOINT_INTERVAL_S  seconds between periodic checkpoints, set
                              by tidemill from the job's checkpoint_interval_min;
                              whichever of the two comes first saves
    TIDEMILL_LOG_EVERY        iterations between loss lines (default 10)

Output (rank 0 of each node): `TIDEMILL_PROGRESS iter=N` after every step,
which the edge may read as the job's progress; `iteration N/T loss L` every
TIDEMILL_LOG_EVERY steps; `resumed at N` after a resume; at the end,
`trained N iterations` with the resume point and the run's first and last loss. Uses NCCL on GPUs
and Gloo on CPUs. The data is synthetic (labels from a fixed random teacher
network, so there is something to learn and the loss goes down) so that the
example needs nothing but torch.
"""

import fcntl
import os
import signal
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

FEATURES = 64
CLASSES = 10
YIELD_REQUESTED = False


def on_sigterm(_signum, _frame):
    """tidemill asks the job to yield: finish the current step, checkpoint, exit 0."""
    global YIELD_REQUESTED
    YIELD_REQUESTED = True


def env_int(name, default):
    """An integer setting from the environment, or exit naming the bad value."""
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r} is not an integer; set it to a whole number such as {default}")
    if value < 0:
        sys.exit(f"{name}={raw!r} is negative; set it to a whole number such as {default}")
    return value


def make_model():
    """The model being trained: small enough for a CPU, big enough to learn."""
    return nn.Sequential(
        nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES)
    )


def teacher():
    """A fixed random network whose argmax is the label: a learnable target that
    every rank and every resume agrees on."""
    gen = torch.Generator().manual_seed(0)
    w1 = torch.randn(FEATURES, 32, generator=gen) / FEATURES**0.5
    w2 = torch.randn(32, CLASSES, generator=gen)
    return lambda x: (torch.tanh(x @ w1) @ w2).argmax(dim=1)


def batch_at(step, rank, size, label):
    """The batch of `rank` at `step`: seeded by both, so that a resumed run
    sees the data the uninterrupted run would have seen."""
    gen = torch.Generator().manual_seed(step * 65_537 + rank)
    x = torch.randn(size, FEATURES, generator=gen)
    return x, label(x)


def write_atomically(path, write):
    """Writes `path` through a `.tmp` file and a rename: a crash mid-write
    leaves the old one (and tidemill never copies a `.tmp` file)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(path, net, opt, step):
    """Writes the checkpoint, then the step it holds to `tidemill-step`
    beside it, last: tidemill copies a job's checkpoint to the node it moves
    to only once that file names its step, and reports the job's progress
    as that step when it resumes there."""
    state = {"model": net.module.state_dict(), "optimizer": opt.state_dict(), "iteration": step}
    write_atomically(path, lambda f: torch.save(state, f))
    marker = os.path.join(os.path.dirname(path), "tidemill-step")
    write_atomically(marker, lambda f: f.write(f"{step}\n".encode()))


def gloo_interface(master_addr):
    """The name of the interface this node reaches MASTER_ADDR through.

    Gloo otherwise advertises the address its hostname resolves to, which on
    many edge boxes (and in network namespaces) is loopback, so that the
    other nodes cannot connect back."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((master_addr, 9))
        local = probe.getsockname()[0]
        for _, name in socket.if_nameindex():
            try:
                # SIOCGIFADDR: the interface's IPv4 address.
                raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == local:
                return name
    except OSError:
        return None
    finally:
        probe.close()
    return None


def exit_now():
    """Exits 0 without the interpreter's teardown, once the work is saved:
    Gloo's threads can abort that teardown ("terminate called without an
    active exception"), which would report a finished job as failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def train(local_rank, workers, node_rank, nodes):
    """One process: global rank node_rank * workers + local_rank."""
    signal.signal(signal.SIGTERM, on_sigterm)
    rank, world = node_rank * workers + local_rank, nodes * workers
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        # Share the node's cores between its local processes.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    if not use_cuda and world > workers and "GLOO_SOCKET_IFNAME" not in os.environ:
        iface = gloo_interface(os.environ["MASTER_ADDR"])
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world)
    speaks = local_rank == 0

    total = env_int("TIDEMILL_ITERATIONS", 200)
    batch = max(1, env_int("TIDEMILL_BATCH_SIZE", 64) // world)
    every_ckpt = max(1, env_int("TIDEMILL_CHECKPOINT_EVERY", 100))
    every_log = max(1, env_int("TIDEMILL_LOG_EVERY", 10))
    every_s = float(os.environ.get("TIDEMILL_CHECKPOINT_INTERVAL_S", "0") or 0)
    ckpt_dir = os.environ.get("TIDEMILL_CHECKPOINT_DIR", "checkpoints")
    ckpt = os.path.join(ckpt_dir, "checkpoint.pt")
    if rank == 0:
        os.makedirs(ckpt_dir, exist_ok=True)

    torch.manual_seed(1)
    net = DDP(make_model().to(device), device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device)
        net.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["iteration"]
        if speaks and step > 0:
            print(f"resumed at {step} of {total} (rank {rank} of {world})", flush=True)

    label = teacher()
    loss_fn = nn.CrossEntropyLoss()
    began, start, first_loss = time.time(), step, None
    saved_at = began
    while step < total:
        x, y = batch_at(step, rank, batch, label)
        opt.zero_grad()
        loss = loss_fn(net(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        step += 1
        if first_loss is None:
            first_loss = loss.item()
        # Every rank must stop at the same step, or the others hang in the
        # next all-reduce: combine the yield flags.
        flag = torch.tensor([1.0 if YIELD_REQUESTED else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if speaks:
            print(f"TIDEMILL_PROGRESS iter={step}", flush=True)
            if step % every_log == 0 or step == total:
                rate = (step - start) / max(time.time() - began, 1e-9)
                print(f"iteration {step}/{total} loss {loss.item():.4f} ({rate:.1f} it/s, {world} workers)", flush=True)
        if flag.item() > 0:
            break
        due = step % every_ckpt == 0 or (every_s > 0 and time.time() - saved_at >= every_s)
        if rank == 0 and due and step < total:
            save_checkpoint(ckpt, net, opt, step)
            saved_at = time.time()

    if rank == 0:
        save_checkpoint(ckpt, net, opt, step)
    # Every rank must have stopped at the same step.
    bounds = torch.tensor([step, -step], device=device)
    dist.all_reduce(bounds, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    if bounds[0].item() != -bounds[1].item():
        sys.exit(f"ranks stopped at different steps ({bounds[0].item()} to {-bounds[1].item()})")
    if step < total:
        if speaks:
            print(f"checkpointed at {step} of {total}; start again to resume", flush=True)
        exit_now()
    if speaks:
        # The closing line repeats the resume point: with a progress line per
        # step, the earlier lines fall out of a short output tail.
        resumed = f"; resumed at {start} of {total}" if start > 0 else ""
        print(
            f"trained {step} iterations, {world} ranks agree (rank {rank}){resumed}; "
            f"loss {first_loss:.4f} at step {start + 1} -> {loss.item():.4f}",
            flush=True,
        )
    exit_now()


def main():
    workers = max(1, env_int("TIDEMILL_WORKERS", 1))
    node_rank = env_int("RANK", 0)
    nodes = max(1, env_int("WORLD_SIZE", 1))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if workers == 1:
        train(0, 1, node_rank, nodes)
        return
    # One process per local device; SIGTERM is passed on so that they all
    # yield together.
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=train, args=(i, workers, node_rank, nodes)) for i in range(workers)]
    for p in procs:
        p.start()
    signal.signal(signal.SIGTERM, lambda *_: [os.kill(p.pid, signal.SIGTERM) for p in procs if p.is_alive()])
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        sys.exit(f"{len(failed)} of {workers} local workers failed (exit codes {failed})")


if __name__ == "__main__":
    main()
