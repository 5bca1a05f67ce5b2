#!/usr/bin/env python3
"""Per-warp timelines of a warp-specialized prefill kernel, from %clock stamps.

A diagnostic for the schedule of the compute and producer warps (what ncu's
averages cannot show: which warpgroup is in which phase when). Two steps:

  attnjit compile SPEC --variant=NAME --emit=ptx -o NAME.ptx
  python3 bench/timeline.py instrument NAME.ptx DIR      # writes DIR/NAME.ptx and DIR/NAME.ptx.json
  ATTNJIT_OVERRIDE_DIR=DIR python3 bench/timeline.py run SPEC NAME   # on the GPU

`instrument` finds the loops of both roles (the targets of backward
unconditional branches after `setmaxnreg`) and stamps, per iteration, the loop
top, each mbarrier wait's exit, each warpgroup MMA group's issue and wait, each
slot release and each turn barrier. Stamps go to q's buffer (the kernel reads
q once, before its loops; `run` zeroes q before the traced launch, so q's
values are gone): CTA c (linear index < 4096) owns 32 KiB at q + 32 KiB · c,
warp w 2,560 bytes of it, iteration j (0..38) 64 bytes, stamp k 4 bytes;
iteration 39 holds the role's start (k 0) and end (k 1), k 15 the loop's
number. The stamps cost a few percent of the kernel's time.

`run` launches the variant (a unified attention kernel with 32/8 heads, D=128,
bf16, pages of 16 and 128-row programs; causal or not as the variant is) on
8 sequences of 2048 new tokens (`--batch`, `--length`), timed (median of
CUDA-event samples), and with a stamped copy in ATTNJIT_OVERRIDE_DIR traced: it
prints per role and loop the cycles from each event to the next (10th, 50th,
90th percentiles over CTAs with at least 20 iterations, or the most any has,
the first and last three iterations left out), the offset between the two
compute warpgroups' iterations, and one CTA's stamps for two iterations.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

MAX_ITERATIONS = 39
WARP_BYTES = 2560
CTA_BYTES = 32768
TRACED_CTAS = 4096


def _store(offset_code):
    return ("\t{ .reg .b32 %tsc, %tso; .reg .b64 %tsa; " + offset_code +
            " cvt.u64.u32 %tsa, %tso; add.s64 %tsa, %tsa, %trbase; @%trp st.global.u32 [%tsa], %tsc; }")


def stamp(k):
    return _store("mov.u32 %%tsc, %%clock; mad.lo.u32 %%tso, %%trj, 64, %d;" % (4 * k))


def stamp_fixed(j, k):
    return _store("mov.u32 %%tsc, %%clock; mov.u32 %%tso, %d;" % (64 * j + 4 * k))


def loop_mark(loop):
    return _store("mov.u32 %%tsc, %d; mad.lo.u32 %%tso, %%trj, 64, 60;" % loop)


def instrument(source, directory):
    lines = open(source).read().split("\n")
    text = "\n".join(lines)
    name = re.search(r"\.entry (\w+)\(", text).group(1)
    if "setmaxnreg.dec" not in text or "setmaxnreg.inc" not in text:
        raise SystemExit("%s: no producer and compute roles (setmaxnreg): not a warp-specialized kernel" % source)
    base = ("\t{ .reg .b32 %tb1, %tb2, %tb3, %tb4; .reg .b64 %tba; ld.param.u64 %trbase, [" + name + "_param_1];"
            " cvta.to.global.u64 %trbase, %trbase; mov.u32 %tb1, %ctaid.y; mov.u32 %tb2, %nctaid.x;"
            " mov.u32 %tb3, %ctaid.x; mad.lo.u32 %tb1, %tb1, %tb2, %tb3; setp.lt.u32 %trp, %tb1, " +
            str(TRACED_CTAS) + "; mul.wide.u32 %tba, %tb1, " + str(CTA_BYTES) + "; add.s64 %trbase, %trbase, %tba;"
            " mov.u32 %tb4, %tid.x; shr.u32 %tb4, %tb4, 5; mul.wide.u32 %tba, %tb4, " + str(WARP_BYTES) + ";"
            " add.s64 %trbase, %trbase, %tba; mov.u32 %trj, -1; }")
    insertions = []  # (line, 0 before / 1 after, text)
    entry = next(i for i, line in enumerate(lines) if line.startswith(".visible .entry"))
    brace = next(i for i in range(entry, len(lines)) if lines[i].strip() == "{")
    insertions.append((brace, 1, "\t.reg .b32 %trj;\n\t.reg .b64 %trbase;\n\t.reg .pred %trp;"))
    producer_start = next(i for i, line in enumerate(lines) if "setmaxnreg.dec" in line)
    compute_start = next(i for i, line in enumerate(lines) if "setmaxnreg.inc" in line)
    end = max(i for i, line in enumerate(lines) if line.strip() == "ret;")
    label = re.compile(r"^\$L__BB\d+_\d+:$")
    regions = {"producer": (producer_start, compute_start - 1), "compute": (compute_start, end)}
    for first, _ in regions.values():
        insertions.append((first, 1, base + "\n" + stamp_fixed(MAX_ITERATIONS, 0)))
    last_label = max(i for i in range(compute_start, end) if label.match(lines[i]))
    insertions.append((last_label, 0, stamp_fixed(MAX_ITERATIONS, 1)))
    for i in range(producer_start, compute_start):  # the producers leave by a branch to the last label
        if lines[i].strip() == "bra.uni \t" + lines[last_label][:-1] + ";":
            insertions.append((i, 0, stamp_fixed(MAX_ITERATIONS, 1)))
    legend, loop_id = {}, 0
    for role, (first, last) in regions.items():
        labels = {lines[i][:-1]: i for i in range(first, last) if label.match(lines[i])}
        for i in range(first, last):
            branch = re.match(r"^\s*bra\.uni\s+(\$L__BB\d+_\d+);", lines[i])
            if not branch or branch.group(1) not in labels:
                continue
            header = labels[branch.group(1)]
            if header >= i or "mbarrier.try_wait" in lines[header + 1]:
                continue  # a forward branch, or an mbarrier spin loop
            loop_id += 1
            events = ["top"]

            def event(what):
                if what not in events:
                    events.append(what)
                return events.index(what)

            insertions.append((header, 1, "\tadd.s32 %trj, %trj, 1;\n" + stamp(0) + "\n" + loop_mark(loop_id)))
            waits, last_wait, counts = 0, None, {}

            def numbered(kind):
                counts[kind] = counts.get(kind, 0) + 1
                return "%s %d" % (kind, counts[kind] - 1)

            for x in range(header + 1, i):
                s = lines[x].strip()
                spin = re.match(r"^@%p\d+ bra \t(\$L__BB\d+_\d+);$", s)
                if spin and spin.group(1) in labels and "mbarrier.try_wait" in lines[labels[spin.group(1)] + 1]:
                    insertions.append((x, 1, stamp(event(numbered("mbarrier wait")))))
                elif re.match(r"^@!?\S+ bar\.sync [23], 256;$", s) and s.startswith("@!"):
                    insertions.append((x, 1, stamp(event(numbered("turn taken")))))
                elif re.match(r"^@!?\S+ bar\.arrive [23], 256;$", s) and s.startswith("@!"):
                    insertions.append((x, 1, stamp(event(numbered("turn handed")))))
                elif s.startswith("wgmma.fence.sync.aligned"):
                    insertions.append((x, 0, stamp(event(numbered("MMA issue")))))
                elif s.startswith("wgmma.wait_group.sync.aligned"):
                    # the same wait in both arms of a branch (a few lines apart) is one event
                    if last_wait is None or x - last_wait > 10:
                        waits += 1
                    last_wait = x
                    insertions.append((x, 1, stamp(event("MMA wait %s #%d" % (s.split()[-1].rstrip(";"), waits)))))
                elif s.startswith("cp.async.mbarrier.arrive") or s.startswith("mbarrier.arrive.shared"):
                    insertions.append((x, 0, stamp(event(numbered("slot arrive")))))
            if len(events) > 15:
                raise SystemExit("loop %d has %d events; at most 15 fit" % (loop_id, len(events)))
            legend[str(loop_id)] = {"role": role, "events": events}
    for i, where, line in sorted(insertions, key=lambda e: (e[0], e[1]), reverse=True):
        lines.insert(i + where, line)
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, name + ".ptx")
    open(target, "w").write("\n".join(lines))
    json.dump(legend, open(target + ".json", "w"), indent=1)
    print("%s: %d loops, %d stamps -> %s" % (name, len(legend), len(insertions) - 1, target))


def cycles(a, b):
    return (b - a) & 0xFFFFFFFF


def percentiles(values):
    values = sorted(values)
    if not values:
        return "     -      -      -"
    n = len(values)
    return "%6d %6d %6d" % (values[n // 10], values[n // 2], values[9 * n // 10])


def analyze(raw, legend, min_iterations=20):
    iterations = [sum(1 for j in range(MAX_ITERATIONS) if raw[c][0][j][0]) for c in range(len(raw))]
    # 128-key tiles give a 2048-token sequence 16 iterations: take the CTAs
    # with the most iterations there are when none has 20.
    min_iterations = min(min_iterations, max(iterations))
    chosen = [c for c in range(len(raw)) if iterations[c] >= min_iterations]
    print("CTAs read %d; iterations %d to %d; %d CTAs with at least %d" % (
        len(raw), min(iterations), max(iterations), len(chosen), min_iterations))
    warps_of = {"compute": range(8), "producer": range(8, 12)}
    for role, warps in warps_of.items():
        phases, whole = {}, []
        for c in chosen:
            for w in warps:
                t = raw[c][w]
                n = sum(1 for j in range(MAX_ITERATIONS) if t[j][0])
                for j in range(3, n - 3):
                    loop = str(t[j][15])
                    if loop not in legend:
                        continue
                    events = legend[loop]["events"]
                    previous = t[j][0]
                    for k in range(1, len(events)):
                        if t[j][k]:
                            phases.setdefault((loop, k), []).append(cycles(previous, t[j][k]))
                            previous = t[j][k]
                    phases.setdefault((loop, len(events)), []).append(cycles(previous, t[j + 1][0]))
                    whole.append(cycles(t[j][0], t[j + 1][0]))
        print("%s warps, cycles from the previous event (p10 p50 p90):" % role)
        for (loop, k), values in sorted(phases.items()):
            events = legend[loop]["events"]
            print("  loop %s -> %-20s %s" % (loop, events[k] if k < len(events) else "next top", percentiles(values)))
        print("  whole iteration          %s" % percentiles(whole))
    offsets = [((raw[c][4][j][0] - raw[c][0][j][0] + 2**31) % 2**32) - 2**31
               for c in chosen for j in range(3, iterations[c] - 3)]
    print("warpgroup 1's iteration start minus warpgroup 0's: %s" % percentiles(offsets))
    prologue = [cycles(raw[c][w][MAX_ITERATIONS][0], raw[c][w][0][0]) for c in chosen for w in range(8)]
    print("compute warps, role start -> first iteration: %s" % percentiles(prologue))
    if chosen:
        c = max(chosen, key=lambda i: iterations[i])
        t0 = raw[c][0][MAX_ITERATIONS][0]
        print("CTA %d (%d iterations), cycles since warp 0's start:" % (c, iterations[c]))
        for w in (0, 4, 8):
            for j in (5, 6):
                events = legend.get(str(raw[c][w][j][15]), {"events": []})["events"]
                print("  warp %2d, iteration %d: " % (w, j) + "  ".join(
                    "%s=%d" % (events[k], (raw[c][w][j][k] - t0) % 2**32) for k in range(len(events)) if raw[c][w][j][k]))


def run(spec, variant, batch, length):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import attnjit
    heads_q, heads_kv, head_size, block_size, tokens_per_program = 32, 8, 128, 16, 32
    generator = torch.Generator(device="cuda").manual_seed(1)
    tokens = batch * length
    q = torch.randn(tokens, heads_q, head_size, device="cuda", dtype=torch.bfloat16, generator=generator)
    blocks = tokens // block_size
    kv = torch.randn(blocks + 7, 2, block_size, heads_kv, head_size, device="cuda", dtype=torch.bfloat16,
                     generator=generator)
    tables = torch.randperm(blocks + 7, device="cuda", generator=generator)[:blocks]
    tables = tables.reshape(batch, length // block_size).to(torch.int32).contiguous()
    seq_lens = torch.full((batch,), length, device="cuda", dtype=torch.int32)
    cu_seqlens = torch.arange(0, (batch + 1) * length, length, device="cuda", dtype=torch.int32)
    out = torch.empty_like(q)
    kernel = attnjit.Jit().kernel_from_spec_file(spec, variant)
    args = [out, q, kv, tables, seq_lens, cu_seqlens, 1 / math.sqrt(head_size), batch,
            max(1, math.ceil(math.log2(batch + 1))), heads_q * head_size, head_size, heads_q * head_size, head_size,
            length // block_size, 2 * block_size * heads_kv * head_size, block_size * heads_kv * head_size,
            heads_kv * head_size, head_size]
    grid = (tokens // tokens_per_program + batch, heads_kv)
    override = os.environ.get("ATTNJIT_OVERRIDE_DIR")
    for _ in range(3):
        kernel.launch(grid, args)
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(4):
            kernel.launch(grid, args)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 4)
    print("%s: median %.4f ms%s" % (variant, statistics.median(times), ", traced" if override else ""))
    legend_path = os.path.join(override, variant + ".ptx.json") if override else None
    if not legend_path or not os.path.exists(legend_path):
        return
    q.zero_()
    kernel.launch(grid, args)
    torch.cuda.synchronize()
    ctas = min(TRACED_CTAS, grid[0] * grid[1], q.numel() * 2 // CTA_BYTES)
    words = CTA_BYTES // 4
    flat = q.view(-1).view(torch.int32)[: ctas * words].to(torch.int64) & 0xFFFFFFFF
    raw = flat.reshape(ctas, words)[::3, : 12 * WARP_BYTES // 4].reshape(-1, 12, MAX_ITERATIONS + 1, 16).cpu().tolist()
    analyze(raw, json.load(open(legend_path)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    first = commands.add_parser("instrument", help="write a stamped copy of a kernel's PTX into DIR")
    first.add_argument("ptx")
    first.add_argument("directory")
    second = commands.add_parser("run", help="time, and with ATTNJIT_OVERRIDE_DIR trace, a variant on the GPU")
    second.add_argument("spec")
    second.add_argument("variant")
    second.add_argument("--batch", type=int, default=8)
    second.add_argument("--length", type=int, default=2048)
    options = parser.parse_args()
    if options.command == "instrument":
        instrument(options.ptx, options.directory)
    else:
        run(options.spec, options.variant, options.batch, options.length)


if __name__ == "__main__":
    main()
