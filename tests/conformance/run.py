#!/usr/bin/env python3
"""attnjit's conformance suite: ports of vLLM's kernel tests for the backends
attnjit replaces, run against attnjit's Python ops on a GPU, one module per
vLLM test (the parametrization, inputs and tolerances of vLLM's test, the code
and references written here). Prints a table per family: cases, passed,
failed, unsupported (a feature outside attnjit, with the reason), and exits 1
if any case failed.

    ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 tests/conformance/run.py
    python3 tests/conformance/run.py --families merge_attn_states --every 7

Needs torch with CUDA and a GPU; without them it says so and exits 0."""

import argparse
import collections
import importlib
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

FAMILIES = ["unified_attention", "diffkv", "mixed_causal", "decode_attention", "mla_decode", "merge_attn_states",
            "reshape_and_cache_flash", "swap_blocks", "convert_fp8", "per_token_head"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated (default: all)")
    parser.add_argument("--every", type=int, default=1, help="run every Nth case of each family (a quick pass)")
    parser.add_argument("--verbose", action="store_true", help="print each failure's traceback")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("conformance: torch is not installed; skipped")
        return 0
    if not torch.cuda.is_available():
        print("conformance: no CUDA GPU; skipped")
        return 0
    import attnjit
    from conformance import Unsupported, seed_everything

    rows = []
    failures = []
    for family in args.families.split(","):
        module = importlib.import_module(family)
        counts = collections.Counter()
        reasons = collections.Counter()
        start = time.time()
        for index, (name, params) in enumerate(module.cases(torch)):
            if index % args.every:
                continue
            seed_everything(torch, index)
            try:
                module.run(torch, attnjit, **params)
                counts["passed"] += 1
            except Unsupported as reason:
                counts["unsupported"] += 1
                reasons[str(reason)] += 1
            except Exception as error:  # a failed check or an error the op raised: both fail the case
                counts["failed"] += 1
                failures.append("%s [%s]: %s" % (family, name, str(error).strip().splitlines()[0][:300]))
                if args.verbose:
                    traceback.print_exc()
        rows.append((family, counts, reasons, time.time() - start))

    print("\n| family (vLLM test) | cases | passed | failed | unsupported | seconds |")
    print("|---|---|---|---|---|---|")
    for family, counts, _, seconds in rows:
        total = sum(counts.values())
        print("| %s | %d | %d | %d | %d | %.0f |" % (family, total, counts["passed"], counts["failed"],
                                                    counts["unsupported"], seconds))
    for family, _, reasons, _ in rows:
        for reason, count in reasons.items():
            print("unsupported in %s: %d cases: %s" % (family, count, reason))
    for failure in failures[:40]:
        print("FAILED " + failure)
    if len(failures) > 40:
        print("... and %d more failures" % (len(failures) - 40))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
