#!/usr/bin/env python3
"""Every algorithm x network fault x Redis mode, three gateways under load through
fault_proxy.py (tests/integration/fault_admission.py runs each scenario and holds it
to its bounds): a line per scenario, then a Markdown table for docs/redis.md ("Limits
under network faults"). The test command runs a cross of it
(tests/integration/test_fault_admission.py); this is the whole matrix (~15 minutes).

    bench/fault_matrix.py [--modes standalone,sentinel,cluster] [--algorithms a,b]
                          [--faults f,g] [--binary build/src/floodgate]
Exit status 1 if any scenario broke a bound (each is listed)."""
import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="standalone,sentinel,cluster")
    ap.add_argument("--algorithms", default=None)
    ap.add_argument("--faults", default=None)
    ap.add_argument("--binary", default=str(ROOT / "build" / "src" / "floodgate"))
    args = ap.parse_args()
    os.environ["FLOODGATE_BIN"] = args.binary
    import conftest  # noqa: F401 - reads FLOODGATE_BIN
    import fault_admission as fa
    conftest.BIN = args.binary
    algorithms = args.algorithms.split(",") if args.algorithms else fa.ALGORITHMS
    faults = args.faults.split(",") if args.faults else list(fa.FAULTS)
    rows, broken = [], []
    for mode in args.modes.split(","):
        tmp = Path(tempfile.mkdtemp(prefix=f"fg-faults-{mode}-"))
        stores = fa.Stores(tmp, mode)
        try:
            env = fa.Env(tmp, stores.redis, stores.redis_extra, stores.proxies)
            try:
                for a in algorithms:
                    for f in faults:
                        r = fa.run(env, a, f, mode)
                        print(r.line(), flush=True)
                        try:
                            r.check()
                            ok = "yes"
                        except AssertionError as e:
                            ok = f"NO: {e}"
                            broken.append(f"{r.name()}: {e}")
                        rows.append((r, ok))
            finally:
                env.stop()
        finally:
            stores.stop()
    print()
    print("| mode | algorithm | fault | answers: admitted / allowed on error / denied / 503 | store admits past the "
          "limit | short of it (lost answers) | p99 / max latency | real decisions after the heal | bounds held |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, ok in rows:
        t = r.totals()
        if r.algorithm == "concurrency":
            over = f"{r.in_flight_max} of {fa.CONCURRENCY} in flight at most"
            under = "—"
        else:
            over = max(max(v.get("admitted", 0) - fa.LIMIT, 0) for v in r.per_client.values())
            under = max((fa.LIMIT - v.get("admitted", 0) for v in r.per_client.values() if v.get("denied")), default=0)
            under = max(under, 0)
        print(f"| {r.mode} | `{r.algorithm}` | {r.fault} | {t.get('admitted', 0)} / {t.get('error_allowed', 0)} / "
              f"{t.get('denied', 0)} / {t.get('error_denied', 0)} | {over} | {under} | "
              f"{r.percentile(0.99) * 1000:.0f} / {max(r.latencies) * 1000:.0f} ms | {r.recovery_s:.2f} s | {ok} |")
    if broken:
        print("\nbounds broken:\n" + "\n".join(broken))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
