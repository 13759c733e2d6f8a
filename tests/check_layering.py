#!/usr/bin/env python3
"""Checks the module layering of lib/ (docs/architecture.md): a module may include only modules
listed before it. Prints every violation as FILE:LINE and exits 1 when there is one.
    tests/check_layering.py [REPO_ROOT]
"""
import os
import re
import sys

ORDER = ["util", "launch", "config", "io", "comm", "gpu", "data", "model", "optim", "parallel", "checkpoint", "train", "plan", "bench"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
lib = os.path.join(root, "lib")
violations = []
for module in sorted(os.listdir(lib)):
    if module not in ORDER:
        continue
    rank = ORDER.index(module)
    for dirpath, _, files in os.walk(os.path.join(lib, module)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(1) in ORDER and ORDER.index(m.group(1)) > rank:
                        violations.append(f"{os.path.relpath(path, root)}:{number}: lib/{module} includes "
                                          f"lib/{m.group(1)}, which comes after it")
for v in violations:
    print(v)
print(f"layering: {len(violations)} violations" if violations else "layering: ok")
sys.exit(1 if violations else 0)
