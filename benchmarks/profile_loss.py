"""Where one loss's forward + backward spends its time: PyTorch's profiler over a few calls.

Usage::

    .venv/bin/python benchmarks/profile_loss.py --loss neural_ndcg --device cuda --batch 64 --n 240

Prints the operators with the most self time (device time on a GPU, CPU time otherwise), the
number of device kernels launched per call and the wall time per call, so that launch-bound code
(many small kernels) is told apart from compute- or memory-bound code.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from _args import positive_int
from torch.profiler import ProfilerActivity, profile

from smoothrank import losses


def _option_value(text: str) -> Any:
    """A number (int or float), true/false, none, or the word itself."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--loss", default="neural_ndcg")
    parser.add_argument("--options", default="", help="k=v pairs, comma-separated (numbers or words)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=positive_int, default=64)
    parser.add_argument("--n", type=positive_int, default=240)
    parser.add_argument("--calls", type=positive_int, default=5)
    parser.add_argument("--rows", type=positive_int, default=15)
    args = parser.parse_args()
    options = {}
    for pair in filter(None, args.options.split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--options: expected key=value pairs, got {pair!r}")
        options[key] = _option_value(value)
    fn = losses.get(args.loss, **options)
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(args.batch, args.n, generator=g).to(args.device)
    labels = torch.randint(0, 5, (args.batch, args.n), generator=g).float().to(args.device)
    mask = (torch.rand(args.batch, args.n, generator=g) > 0.2).to(args.device)
    cuda = scores.is_cuda

    def call() -> None:
        s = scores.clone().requires_grad_()
        fn(s, labels, mask=mask).backward()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        call()
    sync()
    started = time.perf_counter()
    for _ in range(args.calls):
        call()
    sync()
    wall = (time.perf_counter() - started) / args.calls
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(args.calls):
            call()
        sync()
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(f"{args.loss} {options} on {args.device}, {args.batch} x {args.n}: {wall * 1e3:.1f} ms per call")
    if cuda:
        kernels = sum(e.count for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        # Device events only, as PyTorch's own table sums them: a CPU op also carries its kernels'
        # time, so summing every row counted it about twice (a review, 2026-11-24).
        device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                  and not e.is_user_annotation]
        busy = sum(e.self_device_time_total for e in device) / args.calls / 1e3
        print(f"{kernels / args.calls:.0f} device kernels per call, {busy:.1f} ms of device time per call")
    print(events.table(sort_by=key, row_limit=args.rows))


if __name__ == "__main__":
    main()
