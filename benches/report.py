"""Prints the benchmark table from pytest-benchmark's JSON: each Klaw figure
beside its baseline, with the ratio. Usage: python benches/report.py [FILE]"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else ".benchmarks/latest.json")
    data = json.loads(path.read_text())
    groups: dict[str, list[dict[str, object]]] = {}
    for b in data["benchmarks"]:
        groups.setdefault(b["group"] or b["name"], []).append(b)
    print(f"{'group':<20} {'benchmark':<34} {'median':>12} {'vs klaw':>9}  extra")
    for group, items in sorted(groups.items()):
        klaw = [b for b in items if "klaw" in str(b["name"])]
        ref = float(klaw[0]["stats"]["median"]) if klaw else None  # type: ignore[index]
        for b in sorted(items, key=lambda b: float(b["stats"]["median"])):  # type: ignore[index]
            med = float(b["stats"]["median"])  # type: ignore[index]
            ratio = f"{med / ref:8.2f}x" if ref else ""
            extra = " ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                for k, v in dict(b.get("extra_info") or {}).items()
            )  # type: ignore[arg-type]
            name = str(b["name"]).removeprefix("test_")
            print(f"{group:<20} {name:<34} {med * 1000:>10.2f}ms {ratio:>9}  {extra}")


if __name__ == "__main__":
    main()
